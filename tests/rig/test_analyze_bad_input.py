"""`rig analyze` on bad traces (issue 13.9): a CSV field that is empty, text, NaN or inf is named
by its line and column; what pyjls's C library prints about a damaged .jls never reaches the
terminal (checked at the file-descriptor level with capfd) and becomes our one-line error."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rig.cli import main
from rig.errors import AnalysisError
from rig.traces.files import captured_c_output, read_trace, terminal_write
from tests.trace_samples import step_trace, write_jls

HEADER = "current_a,voltage_v,gpio\n"
GOOD = "0.001,1.8,1\n"


@pytest.mark.parametrize(("bad_line", "column", "words"), [
    ("0.001,,1", "voltage_v", "empty field"),
    (",1.8,1", "current_a", "empty field"),
    ("nan,1.8,1", "current_a", "nan is not a finite number"),
    ("0.001,NaN,1", "voltage_v", "NaN is not a finite number"),
    ("0.001,1.8,nan", "gpio", "nan is not a finite number"),
    ("0.001,inf,1", "voltage_v", "inf is not a finite number"),
    ("0.001,x,1", "voltage_v", "'x' is not a number"),
    ("0.001,1.8", "gpio", "missing"),
])
def test_a_bad_csv_field_is_named_by_line_and_column(tmp_path: Path, capfd, bad_line: str,
                                                     column: str, words: str) -> None:
    path = tmp_path / "t.csv"
    # Line 1 a comment, 2 the header, 3 and 4 good, 5 blank, 6 a comment, 7 the bad one.
    path.write_text(f"# bench capture\n{HEADER}{GOOD}{GOOD}\n# note\n{bad_line}\n{GOOD}")
    assert main(["analyze", str(path), "--sample-rate", "1000"]) == 2
    out, err = capfd.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"rig: error: {path} line 7, column {column}: {words}"), err
    assert "fix or delete that line" in err


def test_gpio_that_is_not_a_bit_field_is_named_by_line(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(f"{HEADER}{GOOD}0.001,1.8,0.5\n")
    with pytest.raises(AnalysisError, match=r"line 3, column gpio: 0\.5 is not an integer"):
        read_trace(path, sample_rate=1000)


def test_captured_c_output_catches_fd_level_writes(capfd) -> None:
    with captured_c_output() as said:
        os.write(2, b"from C on stderr\n")
        os.write(1, b"from C on stdout\n")
    assert said == ["from C on stderr", "from C on stdout"]
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"



def test_captures_that_overlap_share_one_redirection(capfd) -> None:
    """Traces read on two threads (`rig verify`): the second capture begins before the first
    ends and ends after it. Each keeps what was said while it ran; the terminal gets back
    fds 1 and 2 only when the last ends; a progress line meanwhile reaches the terminal."""
    first, second = captured_c_output(), captured_c_output()
    said_first = first.__enter__()
    os.write(2, b"one\n")
    said_second = second.__enter__()
    os.write(2, b"two\n")
    terminal_write("progress\n")
    first.__exit__(None, None, None)
    os.write(1, b"three\n")  # still caught: the second capture is open
    second.__exit__(None, None, None)
    assert said_first == ["one", "two"]
    assert said_second == ["two", "three"]
    os.write(2, b"after\n")
    terminal_write("done\n")
    assert capfd.readouterr() == ("", "progress\nafter\ndone\n")

def whole_jls(tmp_path: Path) -> Path:
    current, voltage, gpio = step_trace([(1e-3, 5.0)])
    return write_jls(tmp_path / "whole.jls", current, voltage, gpio)


def header_damaged(tmp_path: Path) -> Path:
    """The JLS signature, the rest of the header scrambled: pyjls prints and refuses it."""
    data = bytearray(whole_jls(tmp_path).read_bytes())
    data[16:24] = bytes(8)  # "not closed", and the header's CRC no longer matches
    path = tmp_path / "damaged.jls"
    path.write_bytes(bytes(data[:40]))
    return path


def garbage(tmp_path: Path) -> Path:
    path = tmp_path / "garbage.jls"
    path.write_bytes(bytes(range(256)) * 4)
    return path


def short(tmp_path: Path) -> Path:
    path = tmp_path / "short.jls"
    path.write_bytes(whole_jls(tmp_path).read_bytes()[:16])
    return path


def empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.jls"
    path.write_bytes(b"")
    return path


@pytest.mark.parametrize(("make", "words"), [
    (header_damaged, "cannot read JLS file"),
    (garbage, "is not a JLS v2 file"),
    (short, "is truncated: 16 bytes"),
    (empty, "is empty"),
], ids=["header-damaged", "garbage", "short", "empty"])
def test_a_damaged_jls_is_one_line_and_pyjls_prints_nothing(tmp_path: Path, capfd, caplog,
                                                            make, words: str) -> None:
    path = make(tmp_path)
    capfd.readouterr()
    assert main(["analyze", str(path)]) == 2
    out, err = capfd.readouterr()
    assert out == "", out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rig: error: ") and words in lines[0], err
    # The viewer opens files the same way.
    from rig.run.view import open_view

    with pytest.raises(AnalysisError):
        open_view(path)
    assert capfd.readouterr() == ("", "")
    # pyjls's messages never reach the root logger (whose last resort prints them bare).
    assert [r.getMessage() for r in caplog.records if r.name.startswith("pyjls")] == []


def test_at_the_terminal_pyjls_prints_nothing(tmp_path: Path) -> None:
    """The real console script, with no logging configured (as a user runs it)."""
    rig = Path(sys.executable).parent / "rig"
    for path in (header_damaged(tmp_path), garbage(tmp_path)):
        proc = subprocess.run([str(rig), "analyze", str(path)], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 2 and proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rig: error: "), proc.stderr


def test_what_pyjls_says_is_quoted_in_the_error(tmp_path: Path, capfd) -> None:
    """What the rig adds around pyjls's own words (which change between its releases: 0.17 on
    Python 3.11, newer elsewhere): the file, pyjls's lines quoted once, and what to do."""
    path = header_damaged(tmp_path)
    with pytest.raises(AnalysisError) as info:
        read_trace(path)
    message = info.value.message
    assert message.startswith(f"cannot read JLS file {path}: "), message
    quoted = re.fullmatch(r".* \(pyjls: (.+)\)", message)
    assert quoted and quoted.group(1).strip(), message  # something pyjls printed, quoted
    assert "copy it again" in info.value.hint
    assert capfd.readouterr() == ("", "")


def test_a_recording_cut_off_unclosed_is_recovered_quietly(tmp_path: Path, capfd) -> None:
    """A process killed mid-recording: pyjls repairs the file and says so on stderr; the rig
    keeps that for the trace's metadata and shows nothing on the terminal."""
    path = tmp_path / "crash.jls"
    script = (
        "import os, numpy as np\n"
        "from rig.traces.files import TraceWriter\n"
        f"w = TraceWriter({str(path)!r}, 1000)\n"
        "g = np.ones(4000, np.uint8); g[1000:1002] = 0; g[3000:3002] = 0\n"
        "w.append(0, np.full(4000, 1e-3), np.full(4000, 1.8), g)\n"
        "os._exit(0)\n"  # never closed, as after kill -9
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60,
                   cwd=Path(__file__).resolve().parents[2])
    capfd.readouterr()
    trace = read_trace(path)
    assert capfd.readouterr() == ("", "")
    # What pyjls said while repairing it, kept (in its own words, which vary by release).
    said = trace.meta.get("reader_messages")
    assert said and all(isinstance(m, str) and m.strip() for m in said), said
    assert len(trace) <= 4000 and np.all(np.isfinite(trace.current))
