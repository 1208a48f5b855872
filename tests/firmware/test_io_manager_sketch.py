"""The IO manager sketch (firmware/io_manager) compiled on the host against a stub UNO core.

A syntax check with ``g++ -fsyntax-only``, then the sketch itself run against scripted host and
DUT bytes (tests/firmware/uno_stub/uno_host.cpp): exact replies, pass-through order, buffer
limits, reset line and timer. Finally the simulated IO manager must answer like the sketch.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from virtual_bench.io_manager import SimIoManager
from virtual_bench.pty import Pty

REPO = Path(__file__).resolve().parents[2]
SKETCH = REPO / "firmware" / "io_manager" / "io_manager.ino"
STUB = Path(__file__).resolve().parent / "uno_stub"
GXX = shutil.which("g++")

pytestmark = pytest.mark.skipif(GXX is None, reason="needs g++")

FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", f"-I{STUB}"]


def syntax_check(sketch: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [GXX, "-fsyntax-only", *FLAGS, "-x", "c++", str(sketch)],
        capture_output=True, text=True, timeout=60,
    )


def test_sketch_compiles_against_the_stub_core() -> None:
    result = syntax_check(SKETCH)
    assert result.returncode == 0, result.stderr


def test_the_syntax_check_catches_a_broken_sketch(tmp_path: Path) -> None:
    broken = tmp_path / "broken.ino"
    broken.write_text(SKETCH.read_text().replace("cmd_len = 0;", "cmd_len = ;", 1))
    assert syntax_check(broken).returncode != 0


@pytest.fixture(scope="module")
def uno(tmp_path_factory) -> Path:
    """The sketch linked with the host runner."""
    exe = tmp_path_factory.mktemp("uno") / "io_manager"
    result = subprocess.run(
        [GXX, *FLAGS, "-x", "c++", str(SKETCH), str(STUB / "uno_host.cpp"), "-o", str(exe)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return exe


def run(uno: Path, *steps: str) -> tuple[str, list[str]]:
    """What the UNO sends the host, and its log of everything else (to-dut, pins, interrupts)."""
    result = subprocess.run([str(uno), *steps], capture_output=True, timeout=30)
    assert result.returncode == 0, result.stderr
    return result.stdout.decode(), result.stderr.decode().splitlines()


def lines(*texts: str) -> str:
    return "".join(t + "\r\n" for t in texts)


HELP = [
    "m-help-[name: this board's name]",
    "m-help-[version: firmware version]",
    "m-help-[dut <cmd>: pass <cmd>% through to the DUT]",
    "m-help-[res <0|1>: DUT reset line level that holds the DUT in reset]",
    "m-help-[enable-timer: print m-lap-us-<us> for each timestamp edge]",
    "m-help-[disable-timer: stop printing timestamp edges]",
    "m-help-[tm <0|1>: timer edges 0=falling 1=any change]",
    "m-help-[help: this list]",
]


def test_own_commands(uno: Path) -> None:
    out, _ = run(uno, "host:name%", "host:version%", "host:help%", "host:frob 1%", "host:\r\nname%")
    assert out == lines(
        "m-name-[neurobench-rig IO manager]", "m-ready",
        "m-version-[1.0.0]", "m-ready",
        *HELP, "m-ready",
        "e-[Unknown command: frob 1]", "m-ready",
        "m-name-[neurobench-rig IO manager]", "m-ready",  # a terminal's CR LF is ignored
    )


def test_pass_through_forwards_then_acknowledges_then_relays(uno: Path) -> None:
    out, log = run(uno, "host:dut name%")
    assert out == lines(
        "m-dut-passthrough(name)", "m-ready", "[dut]: m-echo-[name]", "[dut]: m-ready"
    )
    assert [entry for entry in log if entry.startswith("to-dut")] == ["to-dut name%"]


def test_dut_lines_are_relayed_whole_at_any_time(uno: Path) -> None:
    out, _ = run(uno, "dut:m-timestamp-mode-energy", "dut:" + "y" * 130, "host:dut%")
    assert out == lines(
        "[dut]: m-timestamp-mode-energy",
        "[dut]: " + "y" * 128,  # the sketch's line buffer
        "[dut]: yy",
        "e-[dut needs a command]", "m-ready",
    )


def test_command_buffer_is_80_characters_with_the_percent(uno: Path) -> None:
    longest_dut = "x" * 75  # "dut " + 75 + "%" = 80
    out, log = run(uno, f"host:dut {longest_dut}%", "host:" + "z" * 80 + "%", "host:name%")
    assert out.startswith(lines(f"m-dut-passthrough({longest_dut})", "m-ready"))
    assert f"to-dut {longest_dut}%" in log
    assert out.endswith(
        lines(
            "e-[Command too long: more than 80 characters]", "m-ready",
            "m-name-[neurobench-rig IO manager]", "m-ready",  # the next command is intact
        )
    )
    out, log = run(uno, "host:dut " + "x" * 76 + "%")
    assert out == lines("e-[Command too long: more than 80 characters]", "m-ready")
    assert not [entry for entry in log if entry.startswith("to-dut")]  # nothing forwarded


@pytest.mark.parametrize(("level", "released"), [(0, 1), (1, 0)])
def test_reset_polarity_drives_the_released_level(uno: Path, level: int, released: int) -> None:
    out, log = run(uno, f"host:res {level}%", "host:res 2%")
    assert out == lines(f"m-res-{level}", "m-ready", "e-[res needs 0 or 1]", "m-ready")
    # Floating after power-up; the latch is set before the pin becomes an output (no glitch).
    reset_pin = [entry for entry in log if entry.startswith("pin 4")]
    assert reset_pin == ["pin 4 mode input", f"pin 4 write {released}", "pin 4 mode output"]


def test_timer_edges_and_modes(uno: Path) -> None:
    out, log = run(
        uno,
        "fall:500",  # timer off: not captured
        "host:enable-timer%", "fall:1000", "rise:1010",  # falling edges only
        "host:tm 1%", "fall:2000", "rise:2012",  # every change
        "host:disable-timer%", "fall:3000",
        "host:tm 3%",
    )
    assert out == lines(
        "m-timer-enabled", "m-ready", "m-lap-us-1000",
        "m-tm-1", "m-ready", "m-lap-us-2000", "m-lap-us-2012",
        "m-timer-disabled", "m-ready",
        "e-[tm needs 0 or 1]", "m-ready",
    )
    assert [e for e in log if e.startswith(("attach", "detach"))] == [
        "detach 1", "attach 1 falling", "detach 1", "attach 1 change", "detach 1",
    ]


def test_edges_beyond_the_ring_are_counted_not_lost_silently(uno: Path) -> None:
    out, _ = run(uno, "host:enable-timer%", "burst:10")
    assert out == lines(
        "m-timer-enabled", "m-ready", *(f"m-lap-us-{k}" for k in range(1, 8)), "m-lap-lost-3"
    )


# -- the simulated IO manager answers like the sketch -----------------------------------------

SAME_ANSWERS = [
    "version%", "help%", "frob 1%", "res 1%", "res 2%", "tm 1%", "tm 3%", "enable-timer%",
    "disable-timer%", "dut%", "z" * 80 + "%",
]


def test_the_simulated_io_manager_answers_like_the_sketch(uno: Path) -> None:
    sketch, _ = run(uno, *(f"host:{c}" for c in SAME_ANSWERS))
    dummy_dut = Pty()
    sim = SimIoManager(dummy_dut.path)
    host = os.open(sim.path, os.O_RDWR | os.O_NOCTTY)
    try:
        sim.start()
        heard = b""
        for command in SAME_ANSWERS:
            os.write(host, command.encode())
            deadline = time.monotonic() + 5.0
            while not heard.endswith(b"m-ready\r\n") and time.monotonic() < deadline:
                ready, _, _ = select.select([host], [], [], 0.05)
                if ready:
                    heard += os.read(host, 4096)
            assert heard.endswith(b"m-ready\r\n"), (command, heard)
            sketch_part, heard = heard, b""
            assert sketch.startswith(sketch_part.decode()), command
            sketch = sketch[len(sketch_part) :]
        assert sketch == ""
    finally:
        sim.close()
        os.close(host)
        dummy_dut.close()
