"""pyjls's writer in a child process (`rig.traces.writer_process`): the same file as in
process, and a crash of the child (pyjls's C code on a full disk) stops the trace by name
instead of taking the rig down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.base import Chunk
from rig.errors import StorageError
from rig.run.recording import EmonRecorder
from rig.traces.files import TraceWriter, check_jls_length, read_trace

FS = 10_000.0


def chunks(n: int = 40_000, size: int = 4_000) -> list[tuple[int, np.ndarray, np.ndarray,
                                                           np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(3)
    current = rng.random(n).astype(np.float32) * 1e-3
    voltage = np.full(n, 1.8, np.float32)
    gpio = (np.arange(n) // 1000 % 2).astype(np.uint8)
    ranges = (np.arange(n) // 700 % 3).astype(np.uint8)
    return [(lo, current[lo:lo + size], voltage[lo:lo + size], gpio[lo:lo + size],
             ranges[lo:lo + size]) for lo in range(0, n, size)]


def write(path: Path, own_process: bool) -> None:
    with TraceWriter(path, FS, own_process=own_process) as w:
        for k, (lo, i, v, g, r) in enumerate(chunks()):
            if k == 3:
                continue  # a gap: NaN filled, annotated
            w.append(lo, i, v, g, current_range=r, range_names=("R0", "R1", "R2"))
        w.annotate(5, "a note")


def test_a_trace_written_by_the_child_reads_back_as_one_written_in_process(
        tmp_path: Path) -> None:
    write(tmp_path / "here.jls", own_process=False)
    write(tmp_path / "child.jls", own_process=True)
    here, child = read_trace(tmp_path / "here.jls"), read_trace(tmp_path / "child.jls")
    assert len(child.current) == len(here.current) == 40_000
    for name in ("current", "voltage", "gpio"):
        assert np.array_equal(getattr(child, name), getattr(here, name), equal_nan=True), name
    assert child.current_range is not None and here.current_range is not None
    assert np.array_equal(child.current_range.unpacked(), here.current_range.unpacked())
    assert child.meta["annotations"] == here.meta["annotations"]
    assert np.isnan(child.current[12_000:16_000]).all()  # the gap


def child_of(rec: EmonRecorder) -> subprocess.Popen[bytes]:
    writer = rec._writer
    assert writer is not None
    return writer._writer._proc


def test_a_writer_process_that_dies_stops_the_trace_by_name(tmp_path: Path) -> None:
    """The child killed as pyjls's C code crashing would kill it: the rig's recorder goes on
    counting, says how the writer ended and what the disk holds; the file is left to the
    read-back, which a crashed child's file needs."""
    rec = EmonRecorder(FS, tmp_path / "emon.jls", set_voltage=(1.8, "test"))
    parts = chunks()
    lo, i, _v, g, _r = parts[0]
    rec.on_chunk(Chunk(lo, i, _v, g))
    proc = child_of(rec)
    os.kill(proc.pid, signal.SIGSEGV)
    proc.wait(timeout=30)
    for lo, i, v, g, _r in parts[1:3]:
        rec.on_chunk(Chunk(lo, i, v, g))
    assert isinstance(rec.error, StorageError)
    assert "pyjls's writer process died (SIGSEGV)" in rec.error.message
    assert "free on its disk" in rec.error.message
    assert rec._n == 12_000  # the samples still counted: nothing measured is lost
    rec.close()


def test_a_note_for_a_dead_writer_process_stops_the_trace_by_name(tmp_path: Path) -> None:
    """The procedure's window notes (`annotate`) meet a dead writer as a chunk's write does
    (CI: a window's note came first and left a traceback)."""
    rec = EmonRecorder(FS, tmp_path / "emon.jls")
    lo, i, v, g, _r = chunks()[0]
    rec.on_chunk(Chunk(lo, i, v, g))
    proc = child_of(rec)
    os.kill(proc.pid, signal.SIGSEGV)
    proc.wait(timeout=30)
    with pytest.raises(StorageError, match=r"pyjls's writer process died \(SIGSEGV\); .* free "
                       "on its disk"):
        rec.annotate(100, "run 1 start")
    rec.annotate(200, "after it: nothing to write to, nothing raised")
    rec.close()


def test_the_writer_process_is_out_of_the_terminals_reach(tmp_path: Path) -> None:
    """A Ctrl-C at the terminal reaches the rig only, which then closes the trace itself."""
    with TraceWriter(tmp_path / "t.jls", FS, own_process=True) as w:
        proc = w._writer._proc
        assert os.getsid(proc.pid) != os.getsid(0)


def test_the_writer_process_closes_the_file_when_the_rig_dies(tmp_path: Path) -> None:
    path = tmp_path / "t.jls"
    script = (
        "import os, numpy as np\n"
        "from rig.traces.files import TraceWriter\n"
        f"w = TraceWriter({str(path)!r}, {FS}, own_process=True)\n"
        "w.append(0, np.ones(8000, np.float32), np.ones(8000, np.float32),"
        " np.zeros(8000, np.uint8))\n"
        "w._writer._calls.join()  # handed to the child: what a crash of the rig leaves it\n"
        "os._exit(3)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the child, orphaned, closes the file on its own
        if path.is_file() and path.stat().st_size and not check_jls_length(path):
            break
        time.sleep(0.1)
    assert not check_jls_length(path), "the file was never closed"
    assert len(read_trace(path).current) == 8000


def test_a_closed_writer_process_refuses_more(tmp_path: Path) -> None:
    w = TraceWriter(tmp_path / "t.jls", FS, own_process=True)
    w.close()
    w.close()  # safe twice
    with pytest.raises(ValueError, match="closed"):
        w.append(0, np.ones(10, np.float32), np.ones(10, np.float32), np.zeros(10, np.uint8))
