"""The host-built C DUT shim (firmware/dut) end to end over real ptys, standalone and on a
scripted sim bus, plus a syntax check of its Arduino port against a stub Arduino.h.

Tests marked ``@VIA_BOTH`` run twice: on the shim's pty directly, and through the IO manager
sketch's real AVR build on simavr (tests/firmware/simavr_uno.py) relaying at 9600 baud, with
the rig's IO manager transport: the same commands must get the same replies."""

from __future__ import annotations

import contextlib
import math
import os
import re
import select
import shutil
import socket
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from drivers.dut.client import BINARY_WRITE_CHUNK, DutClient, LoadResult
from drivers.dut.qemu import STALL_S, QemuBoard
from drivers.io_manager import IoManagerTransport
from drivers.transport import SerialTransport
from firmware.dut.asc_model import LinearAscModel
from protocols.dut.codec import DutDecoder, DutErrorLine, DutEvent, Ready
from protocols.io_manager.codec import MAX_PASSTHROUGH
from rig.datasets.synthetic import make_split
from tests.firmware.simavr_uno import Relay, relay
from virtual_bench.dut import SimDut
from virtual_bench.pty import Pty
from virtual_bench.world import World

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FIRMWARE = REPO / "firmware" / "dut"
ARDUINO_STUB = Path(__file__).resolve().parent / "arduino_stub"
#: What the host shim reports as its vendor in m-name-dut-[...].
VENDOR = "neurobench-rig host shim"
#: The shim's input buffer (DUT_INPUT_CAPACITY in dut_shim.h).
CAPACITY = 32768
MODEL_BYTES = 16000
#: Deadline for one reply: generous, only a hung shim ever reaches it.
REPLY_S = 5.0
READY = b"m-ready\r\n"


# -- building and running the shim -------------------------------------------------------------
@pytest.fixture(scope="session")
def shim_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make -C firmware/dut/host OUT=<tmp>`, once per session."""
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.skip("gcc or make is not installed: the host shim cannot be built")
    missing = [n for n in ("asc_model.c", "asc_model.h") if not (FIRMWARE / "core" / n).is_file()]
    if missing:
        pytest.skip(f"firmware/dut/core/{missing[0]} is not there yet (the model's own helper "
                    "writes it)")
    out = tmp_path_factory.mktemp("dut-host")
    build = subprocess.run(
        ["make", "-s", "-C", str(FIRMWARE / "host"), f"OUT={out}"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert build.returncode == 0, f"host shim build failed:\n{build.stdout}\n{build.stderr}"
    return out / "dut-host"


@dataclass
class Shim:
    """A running shim on a pty, its transport (opened before it booted) and a client.

    For the Cortex-M4 build `proc` is the QemuBoard running it and `pty` is QEMU's (None)."""

    proc: Any
    pty: Pty | None
    transport: SerialTransport | IoManagerTransport
    client: DutClient
    decoder: DutDecoder = field(default_factory=DutDecoder)
    #: The emulated UNO in between, when the test runs through it.
    relay: Relay | None = None
    #: Deadline for one reply: an emulator, paced by the host's scheduler, gets STALL_S.
    reply_s: float = REPLY_S

    def exchange(self, payload: bytes, until: bytes = READY) -> bytes:
        """Write raw bytes; return what arrives up to and including the `until` ending."""
        self.transport.write(payload)
        return self.transport.read_until(time.monotonic() + self.reply_s,
                                         lambda b: b.endswith(until))

    def events(self, payload: bytes, until: bytes = READY) -> list[DutEvent]:
        return self.decoder.feed(self.exchange(payload, until))


#: Run a test on the shim's pty directly and through the simavr UNO (`start_shim` indirect).
VIA_BOTH = pytest.mark.parametrize("start_shim", ["direct", "simavr-uno"], indirect=True)


@contextlib.contextmanager
def shim_starter(shim_binary: Path, build: Path | None) -> Iterator[Callable[..., Shim]]:
    """Starts host-built shims on ptys (through the simavr UNO when `build` is its image);
    stops every one on exit."""
    started: list[Shim] = []

    def start(mode: str = "performance", *, env: dict[str, str] | None = None,
              pass_fds: tuple[int, ...] = (), boot: bool = True) -> Shim:
        pty = Pty()
        # Opened before the shim starts: opening a port flushes its input, banner included.
        uno = relay(build, pty.path) if build is not None else None
        transport: SerialTransport | IoManagerTransport = (
            uno.transport() if uno is not None else SerialTransport(pty.path, 115200, name="DUT"))
        proc = subprocess.Popen(
            [str(shim_binary), "--mode", mode], stdin=pty.master, stdout=pty.master,
            stderr=subprocess.PIPE, env={**os.environ, **(env or {})}, pass_fds=pass_fds,
        )
        shim = Shim(proc, pty, transport, DutClient(transport), relay=uno)
        started.append(shim)
        if boot:
            assert shim.client.wait_for_boot(REPLY_S) == mode
        return shim

    yield start
    for shim in started:
        if shim.proc.poll() is None:
            shim.proc.terminate()
        shim.proc.wait(timeout=REPLY_S)
        if shim.proc.stderr is not None:
            shim.proc.stderr.close()
        shim.transport.close()
        if shim.relay is not None:
            counts = shim.relay.close()
            assert "0 framing errors" in counts, counts  # every bit of every byte made it
        shim.pty.close()


@pytest.fixture
def start_shim(shim_binary: Path, request: pytest.FixtureRequest
               ) -> Iterator[Callable[..., Shim]]:
    via = getattr(request, "param", "direct")
    build = request.getfixturevalue("simavr_uno_build") if via == "simavr-uno" else None
    with shim_starter(shim_binary, build) as start:
        yield start


#: The Cortex-M4 build (firmware/dut/mps2-an386) under QEMU, as benches/qemu-m4.toml runs it.
M4_VENDOR = "neurobench-rig mps2-an386 Cortex-M4"
M4_ICOUNT_SHIFT = 5
#: Where the wrap-test build starts its µs counter: 20 s before it wraps at 2^32 (guest time;
#: idle time runs at host speed, so this leaves the test 20 s of host time to download).
M4_WRAP_START_US = 2**32 - 20_000_000


def build_m4(out: Path, *extra: str) -> subprocess.CompletedProcess:
    """`make -C firmware/dut/mps2-an386 OUT=<out> ...` (the build prints flash and RAM use)."""
    return subprocess.run(["make", "-s", "-C", str(FIRMWARE / "mps2-an386"), f"OUT={out}", *extra],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.fixture(scope="session")
def m4_build(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Cortex-M4 images, once per session: the firmware, and the wrap-test build whose
    µs counter starts at M4_WRAP_START_US. Skipped (reason printed) without the toolchain."""
    missing = [t for t in ("make", "arm-none-eabi-gcc", "qemu-system-arm") if not shutil.which(t)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: the Cortex-M4 build cannot be built "
                    "or run (`make system-deps` installs the Debian packages)")
    out = tmp_path_factory.mktemp("dut-m4")
    images = {}
    for name, elf, extra in (
        ("firmware", "dut-mps2-an386", ()),
        ("wrap", "dut-m4-wrap", ("NAME=dut-m4-wrap", f"TIMER_START_US={M4_WRAP_START_US}")),
    ):
        build = build_m4(out, *extra)
        if "nano.specs" in build.stderr:
            pytest.skip("newlib-nano (libnewlib-arm-none-eabi) is not installed: "
                        f"{build.stderr.strip()}")
        assert build.returncode == 0, f"Cortex-M4 build failed:\n{build.stdout}\n{build.stderr}"
        images[name] = out / f"{elf}.elf"
    return images


@pytest.fixture
def start_m4(m4_build: dict[str, Path]) -> Iterator[Callable[..., Shim]]:
    """Boot the Cortex-M4 build in QEMU and reach it over QEMU's pty, as the rig does."""
    started: list[Shim] = []

    def start(image: str = "firmware", *, boot: bool = True, shift: int = M4_ICOUNT_SHIFT) -> Shim:
        board = QemuBoard(m4_build[image], icount_shift=shift)
        try:
            transport = board.transport()
        except BaseException:
            board.close()
            raise
        shim = Shim(board, None, transport, DutClient(transport, command_timeout_s=STALL_S),
                    reply_s=STALL_S)
        started.append(shim)
        board.power_on()  # the port is open: the banner is seen
        if boot:
            assert shim.client.wait_for_boot(STALL_S) == "performance"
        return shim

    yield start
    for shim in started:
        shim.transport.close()
        shim.proc.close()


@pytest.fixture(params=["host", "m4"])
def start_build(request: pytest.FixtureRequest) -> Callable[[], Shim]:
    """A performance-mode shim of each build: the host one and the Cortex-M4 one under QEMU,
    so the same protocol tests run against both (and, with `VIA_ALL`, the host build through
    the simavr UNO too)."""
    if request.param == "host":
        start = request.getfixturevalue("start_shim")
        return lambda: start("performance")
    if request.param == "simavr-uno":
        starter = shim_starter(request.getfixturevalue("shim_binary"),
                               request.getfixturevalue("simavr_uno_build"))
        start = starter.__enter__()
        request.addfinalizer(lambda: starter.__exit__(None, None, None))
        return lambda: start("performance")
    return request.getfixturevalue("start_m4")


#: Run a test on the host build directly, on the Cortex-M4 build and through the simavr UNO.
VIA_ALL = pytest.mark.parametrize("start_build", ["host", "m4", "simavr-uno"], indirect=True)


def audio_input(k: int = 0) -> bytes:
    """One real input of the ASC model: 8000 int16 samples of a synthetic test clip."""
    return make_split(2, 0, "test").inputs[k].astype("<i2").tobytes()


def bload(shim: Shim, data: bytes, crc: int | None = None) -> bytes:
    """The binary download, by hand: command, wait for the ready line, raw payload; the reply."""
    crc = zlib.crc32(data) if crc is None else crc
    ready = shim.exchange(f"bload {len(data)} {crc:08x}%".encode(), until=b"\r\n")
    assert ready == f"m-bload-ready-{len(data)}\r\n".encode()
    # In the client's chunks: each write has its own deadline (QEMU takes a byte at a time).
    chunks = [data[i : i + BINARY_WRITE_CHUNK] for i in range(0, len(data), BINARY_WRITE_CHUNK)]
    for chunk in chunks[:-1]:
        shim.transport.write(chunk)
    return shim.exchange(chunks[-1])


def bload_ok(shim: Shim, data: bytes) -> None:
    """A binary download that must succeed, checked on the wire."""
    assert bload(shim, data) == f"m-bload-done-{zlib.crc32(data):08x}\r\nm-ready\r\n".encode()


# -- boot, identity --------------------------------------------------------------------------------
@VIA_BOTH
@pytest.mark.parametrize("mode", ["energy", "performance"])
def test_boot_banner_is_the_reference_firmware_s(start_shim, mode: str) -> None:
    shim = start_shim(mode, boot=False)
    banner = shim.transport.read_until(time.monotonic() + shim.reply_s, lambda b: b.endswith(READY))
    assert banner == f"m-timestamp-mode-{mode}\r\nm-init-done\r\nm-ready\r\n".encode()


def test_boot_banner_of_the_cortex_m4_build(start_m4) -> None:
    shim = start_m4(boot=False)  # a performance-mode build
    banner = shim.transport.read_until(time.monotonic() + shim.reply_s, lambda b: b.endswith(READY))
    assert banner == b"m-timestamp-mode-performance\r\nm-init-done\r\nm-ready\r\n"


@VIA_BOTH
def test_name_profile_and_caps_exact_lines(start_shim) -> None:
    shim = start_shim("energy")
    assert shim.exchange(b"name%") == f"m-name-dut-[{VENDOR}]\r\nm-ready\r\n".encode()
    assert shim.exchange(b"profile%") == (
        b"m-profile-[ULPMark for tinyML Firmware V0.0.1]\r\nm-model-[asc01]\r\nm-ready\r\n"
    )
    # Energy mode adds `elap`: infer prints its lap counter once the window has closed.
    assert shim.exchange(b"caps%") == (
        b"m-timestamp-mode-energy\r\nm-caps-[bload,dbcrc,rcrc,lapcrc,elap]\r\nm-ready\r\n"
    )
    performance = start_shim("performance")
    assert performance.exchange(b"caps%") == (
        b"m-timestamp-mode-performance\r\nm-caps-[bload,dbcrc,rcrc,lapcrc]\r\nm-ready\r\n"
    )
    info = shim.client.identify()
    assert (info.name, info.vendor, info.model) == ("dut", VENDOR, "asc01")


# -- downloads -------------------------------------------------------------------------------------
def test_hex_download_of_a_model_input_reads_back(start_shim) -> None:
    shim = start_shim()
    data = audio_input()
    shim.client.negotiate()
    shim.client.capabilities -= {"bload"}  # the hex path, as behind an IO manager
    # 517 db commands, m-load-done after the last one only; then the DUT's db crc
    assert shim.client.load(data) == LoadResult(len(data), "hex", 1, "crc")
    assert shim.client.read_buffer() == data
    assert shim.exchange(b"db crc%") == b"m-db-crc-%d-%08x\r\nm-ready\r\n" % (
        len(data), zlib.crc32(data))


@VIA_ALL
def test_db_print_lines_hold_16_bytes(start_build) -> None:
    shim = start_build()
    shim.client.load(bytes(range(20)))
    assert shim.exchange(b"db print%") == (
        b"m-buffer-00-01-02-03-04-05-06-07-08-09-0a-0b-0c-0d-0e-0f\r\n"
        b"m-buffer-10-11-12-13\r\nm-ready\r\n"
    )


def test_bload_fills_the_buffer_db_print_reads(start_shim) -> None:
    shim = start_shim()
    data = np.random.default_rng(3).integers(0, 256, CAPACITY, dtype=np.uint8).tobytes()
    bload_ok(shim, data)
    assert shim.client.read_buffer() == data


def test_bload_crc_mismatch_names_both_crcs_and_invalidates_the_input(start_build) -> None:
    shim = start_build()
    data = audio_input()
    good = zlib.crc32(data)
    bad = good ^ 0x00010000
    assert shim.decoder.feed(bload(shim, data, crc=bad)) == [
        DutErrorLine(f"bload crc mismatch: expected {bad:08x} got {good:08x}"), Ready()
    ]
    # The bytes arrived but are not trusted: infer refuses rather than run on them.
    assert shim.events(b"infer 1 0%") == [
        DutErrorLine(f"Input is 0 bytes, the model needs {MODEL_BYTES}"), Ready()
    ]


def test_bload_times_out_after_a_silent_second(start_build) -> None:
    shim = start_build()
    assert shim.exchange(b"bload 100 00000000%", until=b"\r\n") == b"m-bload-ready-100\r\n"
    # 10 of 100 bytes, then silence: the shim gives up after its 1000 ms inter-byte timeout.
    assert shim.events(bytes(10)) == [DutErrorLine("bload timeout: got 10 of 100 bytes"), Ready()]
    # The shim is back at its command prompt.
    assert shim.exchange(b"name%").startswith(b"m-name-dut-")


@VIA_ALL
@pytest.mark.parametrize(
    "command, error",
    [
        ("bload", "bload bad arguments"),
        ("bload 10", "bload bad arguments"),
        ("bload 10 0000000", "bload bad arguments"),
        ("bload 10 000000000", "bload bad arguments"),
        ("bload 10 ABCDEF01", "bload bad arguments"),
        ("bload 0 00000000", "bload bad arguments"),
        ("bload -5 00000000", "bload bad arguments"),
        ("bload 1x 00000000", "bload bad arguments"),
        ("bload 10 00000000 more", "bload bad arguments"),
        (f"bload {CAPACITY + 1} 00000000", f"bload too large: {CAPACITY + 1} > {CAPACITY}"),
        ("bload 0099999999999 00000000", f"bload too large: 99999999999 > {CAPACITY}"),
    ],
)
def test_bload_refuses_bad_arguments(start_build, command: str, error: str) -> None:
    shim = start_build()
    assert shim.events(command.encode() + b"%") == [DutErrorLine(error), Ready()]


# -- inference -------------------------------------------------------------------------------------
def test_infer_in_performance_mode_standalone(start_build) -> None:
    shim = start_build()
    data = audio_input(1)
    bload_ok(shim, data)
    raw = shim.exchange(b"infer 20 2%")
    lines = raw.decode().split("\r\n")
    assert lines[:3] == ["m-warmup-start-2", "m-warmup-done", "m-infer-start-20"]
    assert re.fullmatch(r"m-lap-us-\d+", lines[3]) and re.fullmatch(r"m-lap-us-\d+", lines[4])
    assert lines[5] == "m-infer-done"
    assert re.fullmatch(r"m-results-\[\d\.\d{3}(,\d\.\d{3}){3}\]", lines[6])
    assert lines[7:] == ["m-ready", ""]
    # The scores are the real model's: its bit-exact Python reference agrees to print precision.
    scores = np.array([float(v) for v in lines[6][len("m-results-[") : -1].split(",")])
    np.testing.assert_allclose(scores, LinearAscModel.load()(data), atol=0.0015)
    # `results` re-prints the same line; the client reads laps and scores alike.
    assert shim.exchange(b"results%") == (lines[6] + "\r\nm-ready\r\n").encode()
    result = shim.client.infer(3, 0)
    assert len(result.lap_us) == 2 and result.elapsed_us is not None
    np.testing.assert_array_equal(result.results, scores)


def test_result_lines_carry_their_crc_once_caps_was_asked(start_build) -> None:
    shim = start_build()
    empty = shim.exchange(b"results%").decode().split("\r\n")[0]
    assert empty == "m-results-[]"  # the reference runner never asks caps: plain lines
    bload_ok(shim, audio_input(1))
    plain = shim.exchange(b"infer 1 0%").decode().split("\r\n")[6]
    assert re.fullmatch(r"m-results-\[\d\.\d{3}(,\d\.\d{3}){3}\]", plain)
    shim.exchange(b"caps%")
    # rcrc: the CRC-32 (zlib's, as bload's) of the line's text before "-crc-"
    checked = f"{plain}-crc-{zlib.crc32(plain.encode()):08x}"
    assert shim.exchange(b"results%") == (checked + "\r\nm-ready\r\n").encode()
    assert shim.exchange(b"infer 1 0%").decode().split("\r\n")[6] == checked
    assert shim.client.negotiate() == {"bload", "dbcrc", "rcrc", "lapcrc"}
    assert shim.client.infer(1, 0).checked


def _crc_line(line: str) -> str:
    return f"{line}-crc-{zlib.crc32(line.encode()):08x}"


def test_lap_lines_carry_their_crc_once_caps_was_asked_and_laps_prints_them_again(
        start_build) -> None:
    """lapcrc (issue 39): one digit of a lap line hit on the line (+400 us) passed every check.
    After `caps` each m-lap-us line ends with the CRC-32 of its text, as a result line does,
    and `laps` prints the last infer's two lap lines again (idempotent: the client reads them
    again instead of running the inferences again). Before `caps`: plain lines, as the
    reference runner expects."""
    shim = start_build()
    assert shim.events(b"laps%") == [DutErrorLine("No inference yet"), Ready()]
    bload_ok(shim, audio_input(1))
    plain = shim.exchange(b"infer 2 0%").decode().split("\r\n")
    assert re.fullmatch(r"m-lap-us-\d+", plain[3]) and re.fullmatch(r"m-lap-us-\d+", plain[4])
    assert shim.exchange(b"laps%").decode().split("\r\n") == [plain[3], plain[4], "m-ready", ""]
    shim.exchange(b"caps%")
    lines = shim.exchange(b"infer 2 0%").decode().split("\r\n")
    laps = [line.partition("-crc-")[0] for line in lines[3:5]]
    assert all(re.fullmatch(r"m-lap-us-\d+", lap) for lap in laps)
    assert lines[3:5] == [_crc_line(lap) for lap in laps]
    assert shim.exchange(b"laps%").decode().split("\r\n") == [*lines[3:5], "m-ready", ""]
    assert re.fullmatch(r"m-lap-us-\d+-crc-[0-9a-f]{8}\r\nm-ready\r\n",
                        shim.exchange(b"timestamp%").decode())
    assert shim.exchange(b"laps%").decode().split("\r\n")[:2] == lines[3:5]  # infer's only
    shim.client.negotiate()
    result = shim.client.infer(3, 0)
    assert result.elapsed_us is not None and result.checked


def test_energy_mode_elap_lines_carry_their_crc_and_laps_prints_them_again(start_shim) -> None:
    shim = start_shim("energy")
    bload_ok(shim, audio_input())
    shim.exchange(b"caps%")
    lines = shim.exchange(b"infer 4 1%").decode().split("\r\n")
    assert lines[3:5] == [_crc_line(line.partition("-crc-")[0]) for line in lines[3:5]]
    assert lines[5] == "m-infer-done"
    assert shim.exchange(b"laps%").decode().split("\r\n") == [*lines[3:5], "m-ready", ""]


def test_energy_mode_standalone_logs_gpio_edges_on_stderr(start_shim) -> None:
    shim = start_shim("energy")
    bload_ok(shim, audio_input())
    result = shim.client.infer(4, 1)
    # elap: the lap counter is read right before each pulse, and printed after the window.
    assert len(result.lap_us) == 2
    assert result.elapsed_us == result.lap_us[1] - result.lap_us[0]
    shim.proc.terminate()
    assert shim.proc.wait(timeout=REPLY_S) == 0
    assert shim.proc.stderr is not None
    edges = shim.proc.stderr.read().decode().split()
    assert edges[0::2] == ["gpio-fall", "gpio-fall"]
    lap0, lap1 = result.lap_us
    assert lap0 <= int(edges[1]) <= lap1 <= int(edges[3])


@VIA_BOTH
@pytest.mark.parametrize("mode", ["energy", "performance"])
def test_timestamp_pulses_in_energy_mode_and_reads_the_timer_in_performance(start_shim,
                                                                            mode: str) -> None:
    shim = start_shim(mode)
    reply = shim.exchange(b"timestamp%").decode()
    if mode == "performance":
        assert re.fullmatch(r"m-lap-us-\d+\r\nm-ready\r\n", reply), reply
        return
    assert reply == "m-ready\r\n"  # the pulse goes to the timestamp GPIO: stderr, standalone
    shim.proc.terminate()
    assert shim.proc.wait(timeout=REPLY_S) == 0
    assert shim.proc.stderr is not None
    assert shim.proc.stderr.read().decode().split()[0::2] == ["gpio-fall"]


@VIA_ALL
@pytest.mark.parametrize(
    "command, error",
    [
        ("infer 0", "Inference iterations must be >0"),
        ("infer -3 1", "Inference iterations must be >0"),
        ("infer x", "Inference iterations must be >0"),
        ("infer 2 -1", "Inference warmup must be >=0"),
        ("infer 2", f"Input is 5 bytes, the model needs {MODEL_BYTES}"),
    ],
)
def test_infer_refusals(start_build, command: str, error: str) -> None:
    shim = start_build()
    shim.client.load(b"abcde")
    assert shim.events(command.encode() + b"%") == [DutErrorLine(error), Ready()]


# -- same bytes as the Python simulated DUT --------------------------------------------------
class _BigBufferModel:
    """A SimDut model whose input buffer is as large as the shim's, so the limits coincide."""

    input_size = CAPACITY
    model_id = "asc01"

    def __call__(self, data: bytes) -> np.ndarray:
        return np.zeros(4)


#: Commands whose replies do not depend on timing or on the model.
SAME_AS_SIMDUT = [
    b"name%", b"profile%", b"results%",
    b"db crc%", b"db load 5%", b"db 0a0B0c%", b"db crc%", b"db 0d0e%", b"db print%",
    b"db crc%", b"db 0f%",
    b"db 123%", b"db zz%", b"db 0g%", b"db load 0%", b"db load abc%", b"db load%",
    b"db load 40000%", b"db load 00040000000000000000%", b"db%", b"db print%", b"laps%",
    b"infer 0%", b"infer -1 2%", b"infer 1 -1%", b"infer x%",
    b"frobnicate  x%", b"  name  %", b"%", b"NAME%",
    b"x" * 100 + b"%",  # longer than the 80-character buffer: truncated, then unknown
]


def relayable(command: bytes) -> bool:
    """Whether the IO manager passes `command` through as it is: what it refuses or trims
    itself (over-long, empty, padded with spaces) is its own business (test_io_manager_*)."""
    text = command[:-1]
    return len(text) > 0 and len(command) <= MAX_PASSTHROUGH and text == text.strip()


@VIA_BOTH
def test_replies_are_byte_identical_to_the_python_simdut(start_shim) -> None:
    shim = start_shim("energy")
    commands = SAME_AS_SIMDUT if shim.relay is None else list(filter(relayable, SAME_AS_SIMDUT))
    world = World(speed=1000.0)
    sim = SimDut(world, _BigBufferModel(), timestamp_mode="energy", vendor=VENDOR)
    with sim, SerialTransport(sim.path, 115200, name="SimDut") as sim_port:
        world.power(True)
        sim_port.read_until(time.monotonic() + REPLY_S, lambda b: b.endswith(READY))
        for command in commands:
            sim_port.write(command)
            expected = sim_port.read_until(time.monotonic() + REPLY_S,
                                           lambda b: b.endswith(READY))
            assert shim.exchange(command) == expected, command


# -- the sim bus -----------------------------------------------------------------------------------
T_NS = 12_500_000
NOW_NS = 7_000_000_000_000


class ScriptedBench:
    """The bench's side of the sim bus, played by the test: `begin` -> NOW_NS, `wait` -> ok.

    Records every line. A `wait` for `hold_wait_ns` is answered only after `release` is set, so
    a test can look at what the shim printed before simulated time reached that point.
    """

    def __init__(self, sock: socket.socket, hold_wait_ns: int | None = None) -> None:
        self.sock = sock
        self.hold_wait_ns = hold_wait_ns
        self.holding = threading.Event()
        self.release = threading.Event()
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        buf = b""
        while True:
            try:
                data = self.sock.recv(4096)
            except OSError:
                return
            if not data:
                return
            buf += data
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode()
                with self._changed:
                    self._lines.append(line)
                    self._changed.notify_all()
                if line == "begin":
                    self.sock.sendall(f"{NOW_NS}\n".encode())
                elif line.startswith("wait "):
                    if int(line.split()[1]) == self.hold_wait_ns:
                        self.holding.set()
                        self.release.wait(REPLY_S)
                    self.sock.sendall(b"ok\n")

    def lines_through_end(self) -> list[str]:
        """Every line so far, once an `end` line has arrived (bounded wait)."""
        deadline = time.monotonic() + REPLY_S
        with self._changed:
            while not any(x.startswith("end ") for x in self._lines):
                left = deadline - time.monotonic()
                assert left > 0, f"no `end` on the sim bus; got {self._lines}"
                self._changed.wait(left)
            out, self._lines = self._lines, []
            return out


@pytest.fixture
def on_bus(start_shim) -> Iterator[Callable[..., tuple[Shim, ScriptedBench]]]:
    socks: list[socket.socket] = []

    def start(mode: str, power_on_ns: int, hold_wait_ns: int | None = None
              ) -> tuple[Shim, ScriptedBench]:
        ours, theirs = socket.socketpair()
        socks.extend((ours, theirs))
        env = {"RIG_SIMBUS_FD": str(theirs.fileno()), "RIG_SIM_INFERENCE_NS": str(T_NS),
               "RIG_SIM_POWER_ON_NS": str(power_on_ns)}
        shim = start_shim(mode, env=env, pass_fds=(theirs.fileno(),))
        theirs.close()
        return shim, ScriptedBench(ours, hold_wait_ns)

    yield start
    for sock in socks:
        sock.close()


def test_sim_bus_energy_infer_declares_exact_acts_and_pulses(on_bus) -> None:
    t0, t1, t2 = NOW_NS, NOW_NS + 2 * T_NS, NOW_NS + 7 * T_NS
    shim, bench = on_bus("energy", power_on_ns=NOW_NS - 10**9, hold_wait_ns=t2)
    shim.client.identify()
    bload_ok(shim, audio_input())  # neither touches the bus
    shim.transport.write(b"infer 5 2%")
    assert bench.holding.wait(REPLY_S)
    # Simulated time has not reached t2 yet: the lines due at t1 are out, t2's are held back.
    early = b""
    stop = time.monotonic() + 0.3
    while time.monotonic() < stop:
        early += shim.transport.read()
    assert early == b"m-warmup-start-2\r\nm-warmup-done\r\nm-infer-start-5\r\n"
    bench.release.set()
    rest = shim.transport.read_until(time.monotonic() + shim.reply_s, lambda b: b.endswith(READY))
    # elap: the lap counter at both pulses (µs since power-on), after the window has closed.
    on = NOW_NS - 10**9
    assert rest.startswith(f"m-lap-us-{(t1 - on) // 1000}\r\nm-lap-us-{(t2 - on) // 1000}\r\n"
                           "m-infer-done\r\nm-results-[".encode())
    acts = [f"act {t0 + k * T_NS} {t0 + (k + 1) * T_NS}" for k in range(7)]
    assert bench.lines_through_end() == [
        "begin", *acts[:2], f"wait {t1}", f"pulse {t1}", *acts[2:], f"pulse {t2}",
        f"wait {t2}", f"end {t2}",
    ]
    # `timestamp` is one pulse at the bench's "now".
    assert shim.exchange(b"timestamp%") == READY
    assert bench.lines_through_end() == ["begin", f"pulse {t0}", f"end {t0}"]


def test_sim_bus_performance_laps_come_from_simulated_time_and_wrap(on_bus) -> None:
    t1 = NOW_NS + 2 * T_NS
    # Power-on chosen so that the 32-bit µs timer reads 2^32 - 10000 at the window's start.
    power_on = t1 - (2**32 - 10_000) * 1000
    shim, bench = on_bus("performance", power_on_ns=power_on)
    bload_ok(shim, audio_input())
    result = shim.client.infer(5, 2)
    assert result.lap_us == (2**32 - 10_000, (2**32 - 10_000 + 5 * T_NS // 1000) % 2**32)
    assert result.elapsed_us == 5 * T_NS // 1000
    acts = [f"act {NOW_NS + k * T_NS} {NOW_NS + (k + 1) * T_NS}" for k in range(7)]
    assert bench.lines_through_end() == [
        "begin", *acts[:2], f"wait {t1}", *acts[2:], f"wait {NOW_NS + 7 * T_NS}",
        f"end {NOW_NS + 7 * T_NS}",
    ]
    assert shim.client.timestamp() == ((NOW_NS - power_on) // 1000) % 2**32
    assert bench.lines_through_end() == ["begin", f"end {NOW_NS}"]


# -- process life ----------------------------------------------------------------------------------
def test_exits_cleanly_at_end_of_input_and_on_sigterm(shim_binary: Path) -> None:
    proc = subprocess.Popen([str(shim_binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    out, _ = proc.communicate(b"name%", timeout=REPLY_S)
    assert proc.returncode == 0
    assert out.endswith(b"m-ready\r\nm-name-dut-[" + VENDOR.encode() + b"]\r\nm-ready\r\n")
    proc = subprocess.Popen([str(shim_binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.readline()  # booted
    proc.terminate()
    assert proc.wait(timeout=REPLY_S) == 0
    proc.stdin.close()  # type: ignore[union-attr]
    proc.stdout.close()


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--mode", "turbo"], {}, "unknown timestamp mode 'turbo'"),
        (["--baud"], {}, "unexpected argument '--baud'"),
        ([], {"RIG_SIMBUS_FD": "x"}, "RIG_SIMBUS_FD=x is not an open file descriptor"),
        ([], {"RIG_SIMBUS_FD": "2"}, "RIG_SIM_INFERENCE_NS must be a positive integer"),
        ([], {"RIG_SIMBUS_FD": "2", "RIG_SIM_INFERENCE_NS": "5"},
         "RIG_SIM_POWER_ON_NS must be a non-negative integer"),
    ],
)
def test_bad_arguments_and_environment_exit_2(shim_binary: Path, args, env, message) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIG_SIM")} | env
    done = subprocess.run([str(shim_binary), *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=REPLY_S, check=False)
    assert done.returncode == 2
    assert message in done.stderr


def test_pty_option_serves_on_its_own_pty(shim_binary: Path) -> None:
    proc = subprocess.Popen([str(shim_binary), "--pty"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], REPLY_S)
        assert ready, "the shim did not print its pty"
        line = proc.stderr.readline().decode().strip()
        assert line.startswith("port: /dev/")
        name = f"m-name-dut-[{VENDOR}]\r\nm-ready\r\n".encode()
        with SerialTransport(line.removeprefix("port: "), 115200) as port:
            port.write(b"name%")
            reply = port.read_until(time.monotonic() + REPLY_S, lambda b: b.endswith(name))
        # The banner went out at start, before or after the port was opened: seen or not.
        assert reply in (name, b"m-timestamp-mode-performance\r\nm-init-done\r\nm-ready\r\n" + name)
    finally:
        proc.terminate()
        proc.wait(timeout=REPLY_S)
        if proc.stderr is not None:
            proc.stderr.close()


# -- the Arduino port ------------------------------------------------------------------------------
def _syntax_check(path: Path, include: list[Path]) -> subprocess.CompletedProcess:
    cpp = path.suffix in (".cpp", ".ino")
    cmd = ["g++", "-std=gnu++17", "-x", "c++"] if cpp else ["gcc", "-std=gnu11", "-x", "c"]
    cmd += ["-fsyntax-only", "-Wall", "-Wextra", "-Werror"]
    cmd += [f"-I{p}" for p in include] + [str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def sketch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sketch folder prepare_sketch.sh assembles (what the Arduino tools would build)."""
    if shutil.which("g++") is None or shutil.which("gcc") is None:
        pytest.skip("g++/gcc is not installed: cannot syntax-check the Arduino port")
    out = tmp_path_factory.mktemp("arduino")
    done = subprocess.run(["sh", str(FIRMWARE / "arduino" / "prepare_sketch.sh"), str(out)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    folder = Path(done.stdout.strip())
    assert folder == out / "neurobench_dut"
    return folder


def test_arduino_sketch_folder_is_complete_and_compiles(sketch: Path) -> None:
    names = {p.name for p in sketch.iterdir()}
    assert {"neurobench_dut.ino", "port_arduino.cpp", "dut_shim.c", "dut_shim.h", "dut_port.h",
            "crc32.c", "crc32.h", "asc_model.h"} <= names
    sources = sorted(p for p in sketch.iterdir() if p.suffix in (".ino", ".cpp", ".c"))
    failures = [(p.name, r.stderr) for p in sources
                if (r := _syntax_check(p, [ARDUINO_STUB, sketch])).returncode != 0]
    assert failures == []


def test_the_arduino_syntax_check_catches_an_error(sketch: Path, tmp_path: Path) -> None:
    broken = tmp_path / "port_arduino.cpp"
    text = (sketch / "port_arduino.cpp").read_text()
    broken.write_text(text.replace("g_uart->flush();", "g_uart->flush()"))
    assert _syntax_check(broken, [ARDUINO_STUB, sketch]).returncode != 0


# -- the Cortex-M4 build under QEMU (firmware/dut/mps2-an386) -----------------------------------
def test_m4_build_prints_flash_and_ram_and_refuses_a_ram_budget_it_exceeds(
        m4_build: dict[str, Path], tmp_path: Path) -> None:
    done = build_m4(tmp_path)
    assert done.returncode == 0, done.stderr
    use = re.search(r"flash (\d+) B of 1048576, RAM (\d+) B of 262144 \(budget: Arduino Nano 33 "
                    r"BLE \(nRF52840\)\)", done.stdout)
    assert use, done.stdout
    flash, ram = int(use.group(1)), int(use.group(2))
    # RAM holds at least the 32768-byte input buffer and the 8 KB stack; flash the model.
    assert CAPACITY + 8192 < ram < 64 * 1024 and 4096 < flash < 64 * 1024
    over = build_m4(tmp_path, f"RAM_BUDGET={ram - 1}")
    assert over.returncode != 0
    assert f"error: RAM use {ram} B exceeds the {ram - 1} B of the Arduino Nano 33 BLE" \
        in over.stdout


def test_m4_bload_of_a_16000_byte_input_with_crc_reads_back(start_m4) -> None:
    shim = start_m4()
    data = np.random.default_rng(5).integers(0, 256, MODEL_BYTES, dtype=np.uint8).tobytes()
    bload_ok(shim, data)
    assert shim.client.read_buffer() == data


def test_m4_answers_commands_and_bad_input_byte_for_byte_as_the_host_build(
        start_shim, start_m4) -> None:
    host, m4 = start_shim("performance"), start_m4()
    # SAME_AS_SIMDUT but `name` (the vendor differs), plus garbled and oversize input.
    commands = [c for c in SAME_AS_SIMDUT if c.strip(b" %") != b"name"] + [
        b"\x00\xff\x80 garbled \x1b[A line\r\n%", b"bload 40000 00000000%",
        b"db load 32769%", b"infer%", b"bload 16000 0000000g%", b"caps%", b"results%",
    ]
    for command in commands:
        assert m4.exchange(command) == host.exchange(command), command


def _scores_over(shim: Shim, inputs: list[bytes]) -> list[str]:
    """The m-results line the shim prints for each input (bload, then infer 1 0)."""
    lines = []
    for data in inputs:
        bload_ok(shim, data)
        reply = shim.exchange(b"infer 1 0%").decode().split("\r\n")
        lines.append(next(x for x in reply if x.startswith("m-results-")))
    return lines


def test_m4_scores_are_bit_identical_to_the_host_build_s_over_the_test_set(
        start_shim, start_m4) -> None:
    from rig.bench.config import load_bench
    from rig.datasets.testsets import load_test_set

    test = load_test_set(load_bench(REPO / "benches" / "qemu-m4.toml"))
    inputs = [bytes(x) for x in test.inputs]
    host, m4 = start_shim("performance"), start_m4()
    expected, got = _scores_over(host, inputs), _scores_over(m4, inputs)
    mismatched = [k for k, (a, b) in enumerate(zip(expected, got, strict=True)) if a != b]
    assert len(inputs) == 12 and mismatched == [], [(k, expected[k], got[k]) for k in mismatched]


def test_m4_lap_counter_wraps_at_2_32_and_the_window_is_still_timed(start_m4) -> None:
    # Instruction-counted time is deterministic: one inference is the same count of µs on
    # both builds, so a window across the wrap must measure N times it, to the µs.
    normal = start_m4()
    data = audio_input()
    bload_ok(normal, data)
    per_inference_us = normal.client.infer(4, 0).elapsed_us / 4
    assert per_inference_us > 1000
    wrap = start_m4("wrap")
    bload_ok(wrap, data)
    now = wrap.client.timestamp()
    left_us = 2**32 - now
    assert 0 < left_us <= 2**32 - M4_WRAP_START_US, f"the counter reads {now}: past the wrap"
    n = math.ceil(left_us / per_inference_us) + 2  # the window ends beyond 2^32
    result = wrap.client.infer(n, 0)
    lap0, lap1 = result.lap_us
    assert lap0 > M4_WRAP_START_US and lap1 < lap0  # the counter wrapped inside the window
    assert result.elapsed_us == (lap1 - lap0) % 2**32
    assert abs(result.elapsed_us - n * per_inference_us) <= 2 + n * 0.001 * per_inference_us


def test_m4_guest_time_counts_instructions_2_to_the_shift_ns_each(start_m4) -> None:
    # The same inferences are the same instructions: one more icount shift doubles their time
    # on the firmware's own timer (to the µs the SysTick interrupts add), whatever the host.
    data = audio_input()
    elapsed = []
    for shift in (M4_ICOUNT_SHIFT, M4_ICOUNT_SHIFT + 1):
        shim = start_m4(shift=shift)
        bload_ok(shim, data)
        elapsed.append(shim.client.infer(5, 0).elapsed_us)
    assert elapsed[0] > 5 * 1000
    assert elapsed[1] / elapsed[0] == pytest.approx(2.0, rel=1e-3)
