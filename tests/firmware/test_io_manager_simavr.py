"""The IO manager sketch built for the Arduino UNO with the real AVR core, and run on simavr.

The build: arduino-mk with Debian's Arduino core and avr-gcc (firmware/io_manager/Makefile),
its flash and SRAM checked against avr-size's sections and the UNO's limits, and refused above
them. The run: the harness (firmware/io_manager/simavr) with the rig's IO manager driver on the
UNO's USB pty: its own commands, and faults (over-long, malformed, garbled input) answered byte
for byte as by the host build of the sketch (tests/firmware/uno_stub). The DUT commands through
its SoftwareSerial relay are in test_host_shim.py (``@VIA_BOTH``).
"""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from drivers.transport import SerialTransport
from tests.firmware.simavr_uno import relay
from tests.firmware.test_io_manager_sketch import FLAGS, GXX, HELP, SAME_ANSWERS, SKETCH, STUB
from virtual_bench.host_dut import host_shim_binary
from virtual_bench.pty import Pty
from virtual_bench.simavr_uno import IDLE_RELEASE_S, SimavrUno, simavr_uno_missing
from virtual_bench.world import NS, World

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = REPO / "firmware" / "io_manager" / "Makefile"
BOARDS_TXT = Path("/usr/share/arduino/hardware/arduino/avr/boards.txt")
SIZE_LINE = re.compile(r"flash (\d+) of (\d+) B, SRAM (\d+) of (\d+) B")
READY = b"m-ready\r\n"

pytestmark = pytest.mark.slow

needs_avr = pytest.mark.skipif(simavr_uno_missing() is not None,
                               reason=f"the AVR toolchain is missing: {simavr_uno_missing()}")


# -- the UNO build --------------------------------------------------------------------------------
def build(sketch_dir: Path, out: Path) -> subprocess.CompletedProcess:
    """`make uno-size` of firmware/io_manager/Makefile on the sketch in `sketch_dir`."""
    return subprocess.run(["make", "-s", "-C", str(sketch_dir), "-f", str(MAKEFILE),
                           f"OUT={out}", "uno-size"],
                          capture_output=True, text=True, timeout=600, check=False)


def sections(elf: Path) -> dict[str, int]:
    """Section sizes from `avr-size -A` (bytes)."""
    text = subprocess.run(["avr-size", "-A", str(elf)], capture_output=True, text=True,
                          check=True).stdout
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\.\S+)\s+(\d+)", text, re.M)}


def board_limit(key: str) -> int:
    return int(re.search(rf"^uno\.upload\.{key}=(\d+)$", BOARDS_TXT.read_text(), re.M).group(1))


@pytest.fixture(scope="module")
def uno_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sketch as it is, built for the UNO: (ELF, the size report line)."""
    out = tmp_path_factory.mktemp("uno")
    done = build(SKETCH.parent, out)
    assert done.returncode == 0, done.stderr[-2000:]
    return out / "io_manager_uno.elf", done.stdout


@needs_avr
def test_uno_build_reports_flash_and_sram_within_the_unos_limits(uno_build) -> None:
    elf, report = uno_build
    found = SIZE_LINE.search(report)
    assert found, report
    flash, flash_max, sram, sram_max = map(int, found.groups())
    s = sections(elf)
    # Flash holds the code and the initial values of .data; SRAM holds .data and .bss.
    assert flash == s[".text"] + s[".data"]
    assert sram == s[".data"] + s[".bss"] + s.get(".noinit", 0)
    assert (flash_max, sram_max) == (board_limit("maximum_size"), board_limit("maximum_data_size"))
    assert (flash_max, sram_max) == (32256, 2048)  # 32 KiB less the bootloader; 2 KiB
    assert 0 < flash <= flash_max and 0 < sram <= sram_max
    assert "SoftwareSerial" in subprocess.run(["avr-nm", "-C", str(elf)], capture_output=True,
                                              text=True, check=True).stdout


def with_ballast(declaration: str, use: str) -> str:
    """The sketch with one more static object, used from loop() so it is not optimised away."""
    text = SKETCH.read_text()
    text = text.replace("static SoftwareSerial dut(", declaration + "static SoftwareSerial dut(", 1)
    return text.replace("void loop() {\n", "void loop() {\n  " + use + "\n", 1)


def build_variant(tmp_path: Path, text: str) -> subprocess.CompletedProcess:
    (tmp_path / "io_manager").mkdir()
    (tmp_path / "io_manager" / "io_manager.ino").write_text(text)
    return build(tmp_path / "io_manager", tmp_path / "out")


@needs_avr
def test_uno_build_fails_above_the_unos_flash(uno_build, tmp_path: Path) -> None:
    flash = int(SIZE_LINE.search(uno_build[1]).group(1))
    # 200 B over the 32256 B the bootloader leaves (the ATmega328P has 32768: the linker
    # would take it, the UNO cannot be flashed with it).
    extra = 32256 - flash + 200
    done = build_variant(tmp_path, with_ballast(
        f"static const uint8_t ballast[{extra}] PROGMEM = {{1}};\n",
        "Serial.print(pgm_read_byte(&ballast[micros() % sizeof ballast]));"))
    assert done.returncode != 0
    found = SIZE_LINE.search(done.stdout)
    assert found and int(found.group(1)) > 32256, done.stdout
    assert "flash exceeds the UNO's 32256 B" in done.stdout


@needs_avr
def test_uno_build_fails_above_the_unos_sram(tmp_path: Path) -> None:
    done = build_variant(tmp_path, with_ballast(
        "static volatile uint8_t ballast[1500];\n", "ballast[micros() % sizeof ballast] = 1;"))
    # 642 + 1500 B: the linker's data region is the ATmega328P's 2048 B, so it refuses first.
    assert done.returncode != 0
    assert "section `.bss' is not within region `data'" in done.stderr


# -- the emulated UNO: its own commands ----------------------------------------------------------
def exchange(port: SerialTransport, payload: bytes, replies: int = 1) -> bytes:
    """Write raw bytes to the UNO; what it answers up to its `replies`-th m-ready."""
    port.write(payload)
    return port.read_until(time.monotonic() + 10.0, lambda b: b.count(READY) >= replies)


@pytest.fixture
def emulated(simavr_uno_build):
    """The emulated UNO with its DUT pins idle (no DUT): its USB pty opened raw."""
    harness, elf = simavr_uno_build
    uno_process = SimavrUno(None, harness=harness, elf=elf)
    port = SerialTransport(uno_process.path, 115200, name="simavr UNO")
    yield port
    port.close()
    uno_process.close()


def test_driver_handshake_name_version_help(simavr_uno_build) -> None:
    dut_side = Pty()
    io = relay(simavr_uno_build, dut_side.path)
    try:
        assert io.io.name() == "neurobench-rig IO manager"  # the real sketch's, not the sim's
        assert io.io.version() == "1.0.0"
        assert io.io.help() == [line[len("m-help-[") : -1] for line in HELP]
        io.io.set_reset_polarity(0)
        io.io.set_timer_edge(1)
        io.io.enable_timer()
        io.io.disable_timer()
        assert io.io.take_laps() == []  # D3 is not wired in the harness: no edges, no laps
    finally:
        counts = io.close()
        dut_side.close()
    # `res 0`: D4 goes to the released level, 1, as an output (logged by the harness).
    assert re.search(r"D4 \(DUT reset\) 1 at cycle \d+", counts), counts


@pytest.fixture(scope="module")
def stub_sketch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host build of the sketch, as test_io_manager_sketch.py links it."""
    if GXX is None:
        pytest.skip("needs g++")
    exe = tmp_path_factory.mktemp("uno-stub") / "io_manager"
    done = subprocess.run([GXX, *FLAGS, "-x", "c++", str(SKETCH), str(STUB / "uno_host.cpp"),
                           "-o", str(exe)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return exe


def test_dut_lines_are_relayed_with_the_prefix_byte_for_byte(simavr_uno_build) -> None:
    shim_binary = host_shim_binary(build=True)
    if shim_binary is None:
        pytest.skip("no C compiler: the host DUT shim cannot be built")
    harness, elf = simavr_uno_build
    dut_side = Pty()
    uno_process = SimavrUno(dut_side.path, harness=harness, elf=elf)
    port = SerialTransport(uno_process.path, 115200, name="simavr UNO")
    shim = subprocess.Popen([str(shim_binary), "--mode", "energy"], stdin=dut_side.master,
                            stdout=dut_side.master)
    try:
        # The DUT's boot banner, relayed as it comes (the sketch relays at any time).
        banner = port.read_until(time.monotonic() + 10.0, lambda b: b.endswith(READY))
        assert banner == (b"[dut]: m-timestamp-mode-energy\r\n[dut]: m-init-done\r\n"
                          b"[dut]: m-ready\r\n")
        # Forwarded, acknowledged, then the DUT's reply line by line with the prefix.
        assert exchange(port, b"dut name%", replies=2) == (
            b"m-dut-passthrough(name)\r\nm-ready\r\n"
            b"[dut]: m-name-dut-[neurobench-rig host shim]\r\n[dut]: m-ready\r\n")
    finally:
        shim.terminate()
        shim.wait(timeout=10)
        port.close()
        report = uno_process.close()
        dut_side.close()
    # "name%" down; the banner (25 + 13 + 9) and the reply (39 + 9) up, every bit of each.
    assert "5 bytes to the DUT, 95 from it, 0 framing errors" in report, report


def stub_answer(uno_exe: Path, *payloads: bytes) -> bytes:
    """What the host build of the sketch (uno_stub) sends for host `payloads`, as bytes."""
    steps = [os.fsdecode(b"host:" + p) for p in payloads]
    done = subprocess.run([str(uno_exe), *steps], capture_output=True, timeout=30, check=True)
    return done.stdout


def test_own_commands_answer_byte_for_byte_as_the_host_build(stub_sketch, emulated) -> None:
    for command in SAME_ANSWERS:
        payload = command.encode()
        assert exchange(emulated, payload) == stub_answer(stub_sketch, payload), command


FAULTS = {
    # 81 characters with the '%': refused whole, never forwarded truncated.
    "oversize DUT command": b"dut " + b"x" * 76 + b"%",
    "oversize command": b"y" * 200 + b"%",
    "malformed: res": b"res 01%",
    "malformed: tm": b"tm%",
    "malformed: dut without a command": b"dut   %",
    "malformed: unknown": b"name please%",
    "garbled: control and 8-bit bytes": b"\x01na\xfeme\x7f%",
    "garbled: line breaks inside a command": b"ver\r\nsi\ron%",
    "garbled: a terminal escape": b"\x1b[Aname%",
}


@pytest.mark.parametrize("payload", FAULTS.values(), ids=FAULTS.keys())
def test_faults_answered_byte_for_byte_as_the_host_build(stub_sketch, emulated,
                                                         payload: bytes) -> None:
    expected = stub_answer(stub_sketch, payload)
    assert expected.endswith(READY)
    assert exchange(emulated, payload) == expected
    # ...and the next command is understood: nothing of the bad one is left behind.
    assert exchange(emulated, b"version%") == b"m-version-[1.0.0]\r\n" + READY


def test_harness_refuses_a_missing_elf_and_a_bad_speed(simavr_uno_build, tmp_path) -> None:
    harness, elf = simavr_uno_build
    missing = subprocess.run([str(harness), str(tmp_path / "nope.elf")], capture_output=True,
                             text=True, timeout=10, check=False)
    assert missing.returncode == 2 and "cannot load the ELF" in missing.stderr
    bad = subprocess.run([str(harness), "--speed", "fast", str(elf)], capture_output=True,
                         text=True, timeout=10, check=False)
    assert bad.returncode == 2 and "--speed fast: expected a number >= 0" in bad.stderr


def test_harness_is_killed_by_pid_and_dies_with_its_parent(simavr_uno_build, tmp_path) -> None:
    harness, elf = simavr_uno_build
    uno_process = SimavrUno(None, harness=harness, elf=elf)
    pid = uno_process.pid
    assert Path(f"/proc/{pid}").exists()
    report = uno_process.close()
    assert "s simulated in" in report  # it exited through its own SIGTERM path
    assert uno_process.returncode == 0
    # A parent that dies without closing it takes it along (PR_SET_PDEATHSIG).
    announced = tmp_path / "port"
    shell = subprocess.Popen(
        ["sh", "-c", f"{harness} {elf} >{announced} 2>/dev/null & echo $!; sleep 30"],
        stdout=subprocess.PIPE, text=True)
    assert shell.stdout is not None
    child = int(shell.stdout.readline())
    deadline = time.monotonic() + 10.0
    # (the file appears once the shell's child has set up its redirection)
    while not (announced.exists() and announced.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)  # it prints its port after arming the parent-death signal
    assert announced.read_text().startswith("port: /dev/")
    shell.kill()
    shell.wait()
    deadline = time.monotonic() + 10.0
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        with open(f"/proc/{child}/stat") as stat:
            if stat.read().split()[2] == "Z":
                break  # a zombie: dead, waiting for init to reap it
        time.sleep(0.05)
    alive = Path(f"/proc/{child}").exists()
    state = Path(f"/proc/{child}/stat").read_text().split()[2] if alive else "gone"
    shell.stdout.close()
    assert state in ("Z", "gone")


def test_missing_toolchain_is_named(monkeypatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert simavr_uno_missing() == (
        "avr-gcc is not installed (Debian package gcc-avr; `make system-deps`)")


def _clock_lines(proc: subprocess.Popen, count: int, timeout_s: float = 10.0) -> list[str]:
    """The next `count` lines the harness writes on stdout (deadline, not timing)."""
    lines: list[str] = []
    buf = b""
    deadline = time.monotonic() + timeout_s
    while len(lines) < count and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            buf += os.read(proc.stdout.fileno(), 4096)
            *done, buf = buf.split(b"\n")
            lines += [line.decode() for line in done]
    return lines[:count]


def test_harness_says_when_its_clock_stops_and_runs_again(simavr_uno_build) -> None:
    """`--clock`: "busy 0" after the port, "idle <cycle>" once nothing crossed a pin for 10 ms
    of its time (160000 cycles at 16 MHz), "busy <the same cycle>" when a byte comes (its clock
    stood still meanwhile), then "idle" again after the answer."""
    harness, elf = simavr_uno_build
    proc = subprocess.Popen([str(harness), "--clock", str(elf)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        port_line, first, idle = _clock_lines(proc, 3)
        assert port_line.startswith("port: /dev/pts/") and first == "busy 0"
        kind, cycle = idle.split()
        assert kind == "idle" and int(cycle) >= 160_000
        with SerialTransport(port_line.removeprefix("port: "), 115200, name="UNO") as port:
            port.write(b"name%")
            busy, idle_again = _clock_lines(proc, 2)
            assert busy == f"busy {cycle}"
            kind, later = idle_again.split()
            assert kind == "idle" and int(later) >= int(cycle) + 160_000
            assert port.read_until(time.monotonic() + 10.0, lambda b: b.endswith(READY))
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_the_benchs_time_follows_the_unos_while_it_works(simavr_uno_build) -> None:
    """With a world, the bench's clock is held while the UNO is busy and moved on by its time:
    at a speed that lets host time count for nothing, an answered `name%` moves the bench's
    time by exactly the UNO's busy span, which is its 10 ms of quiet plus the 50 characters at
    115200 baud (plus at most two of its 1 ms service ticks)."""
    harness, elf = simavr_uno_build
    world = World(speed=1e-6)  # 1 s of host time is 1 us of simulated time
    uno = SimavrUno(None, harness=harness, elf=elf, world=world)
    try:
        with SerialTransport(uno.path, 115200, name="UNO") as port:
            deadline = time.monotonic() + 10.0
            while uno.busy_s == 0 and time.monotonic() < deadline:
                time.sleep(0.01)  # its boot, until the first idle
            time.sleep(IDLE_RELEASE_S * 2)  # released: the clock runs again
            start_ns, start_busy = world.clock.now_ns(), uno.busy_s
            port.write(b"name%")
            reply = port.read_until(time.monotonic() + 10.0, lambda b: b.endswith(READY))
            deadline = time.monotonic() + 10.0
            while uno.busy_s == start_busy and time.monotonic() < deadline:
                time.sleep(0.01)
            busy_s = uno.busy_s - start_busy
            moved_s = (world.clock.now_ns() - start_ns) / NS
    finally:
        uno.close()
    wire_s = (len(b"name%") + len(reply)) * 10 / 115200
    assert 0.010 + wire_s <= busy_s <= 0.010 + wire_s + 0.002
    assert moved_s == pytest.approx(busy_s, abs=1e-5)  # host time: microseconds at most
