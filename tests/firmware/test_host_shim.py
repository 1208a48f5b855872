"""The host-built C DUT shim (firmware/dut) end to end over real ptys, standalone and on a
scripted sim bus, plus a syntax check of its Arduino port against a stub Arduino.h.

Tests marked ``@VIA_BOTH`` run twice: on the shim's pty directly, and through the IO manager
sketch's real AVR build on simavr (tests/firmware/simavr_uno.py) relaying at 9600 baud, with
the rig's IO manager transport: the same commands must get the same replies."""

from __future__ import annotations

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

import numpy as np
import pytest

from drivers.dut.client import DutClient
from drivers.io_manager import IoManagerTransport
from drivers.transport import SerialTransport
from protocols.dut.codec import DutDecoder, DutErrorLine, DutEvent, Ready
from protocols.io_manager.codec import MAX_PASSTHROUGH
from rig.datasets.synthetic import make_split
from rig.sim.dut import SimDut
from rig.sim.model import LinearAscModel
from rig.sim.pty import Pty
from rig.sim.world import World
from tests.firmware.simavr_uno import Relay, relay

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
    """A running shim on a pty, its transport (opened before it booted) and a client."""

    proc: subprocess.Popen
    pty: Pty
    transport: SerialTransport | IoManagerTransport
    client: DutClient
    decoder: DutDecoder = field(default_factory=DutDecoder)
    #: The emulated UNO in between, when the test runs through it.
    relay: Relay | None = None

    def exchange(self, payload: bytes, until: bytes = READY) -> bytes:
        """Write raw bytes; return what arrives up to and including the `until` ending."""
        self.transport.write(payload)
        return self.transport.read_until(time.monotonic() + REPLY_S, lambda b: b.endswith(until))

    def events(self, payload: bytes, until: bytes = READY) -> list[DutEvent]:
        return self.decoder.feed(self.exchange(payload, until))


#: Run a test on the shim's pty directly and through the simavr UNO (`start_shim` indirect).
VIA_BOTH = pytest.mark.parametrize("start_shim", ["direct", "simavr-uno"], indirect=True)


@pytest.fixture
def start_shim(shim_binary: Path, request: pytest.FixtureRequest
               ) -> Iterator[Callable[..., Shim]]:
    started: list[Shim] = []
    via = getattr(request, "param", "direct")
    build = request.getfixturevalue("simavr_uno_build") if via == "simavr-uno" else None

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


def audio_input(k: int = 0) -> bytes:
    """One real input of the ASC model: 8000 int16 samples of a synthetic test clip."""
    return make_split(2, 0, "test").inputs[k].astype("<i2").tobytes()


def bload(shim: Shim, data: bytes, crc: int | None = None) -> bytes:
    """The binary download, by hand: command, wait for the ready line, raw payload; the reply."""
    crc = zlib.crc32(data) if crc is None else crc
    ready = shim.exchange(f"bload {len(data)} {crc:08x}%".encode(), until=b"\r\n")
    assert ready == f"m-bload-ready-{len(data)}\r\n".encode()
    return shim.exchange(data)


def bload_ok(shim: Shim, data: bytes) -> None:
    """A binary download that must succeed, checked on the wire."""
    assert bload(shim, data) == f"m-bload-done-{zlib.crc32(data):08x}\r\nm-ready\r\n".encode()


@VIA_BOTH
# -- boot, identity --------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["energy", "performance"])
def test_boot_banner_is_the_reference_firmware_s(start_shim, mode: str) -> None:
    shim = start_shim(mode, boot=False)
    banner = shim.transport.read_until(time.monotonic() + REPLY_S, lambda b: b.endswith(READY))
    assert banner == f"m-timestamp-mode-{mode}\r\nm-init-done\r\nm-ready\r\n".encode()


@VIA_BOTH
def test_name_profile_and_caps_exact_lines(start_shim) -> None:
    shim = start_shim("energy")
    assert shim.exchange(b"name%") == f"m-name-dut-[{VENDOR}]\r\nm-ready\r\n".encode()
    assert shim.exchange(b"profile%") == (
        b"m-profile-[ULPMark for tinyML Firmware V0.0.1]\r\nm-model-[asc01]\r\nm-ready\r\n"
    )
    # Energy mode adds `elap`: infer prints its lap counter once the window has closed.
    assert shim.exchange(b"caps%") == (
        b"m-timestamp-mode-energy\r\nm-caps-[bload,rcrc,elap]\r\nm-ready\r\n"
    )
    performance = start_shim("performance")
    assert performance.exchange(b"caps%") == (
        b"m-timestamp-mode-performance\r\nm-caps-[bload,rcrc]\r\nm-ready\r\n"
    )
    info = shim.client.identify()
    assert (info.name, info.vendor, info.model) == ("dut", VENDOR, "asc01")


# -- downloads -------------------------------------------------------------------------------------
def test_hex_download_of_a_model_input_reads_back(start_shim) -> None:
    shim = start_shim()
    data = audio_input()
    shim.client.load(data)  # 517 db commands, m-load-done after the last one only
    assert shim.client.read_buffer() == data


@VIA_BOTH
def test_db_print_lines_hold_16_bytes(start_shim) -> None:
    shim = start_shim()
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


def test_bload_crc_mismatch_names_both_crcs_and_invalidates_the_input(start_shim) -> None:
    shim = start_shim()
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


def test_bload_times_out_after_a_silent_second(start_shim) -> None:
    shim = start_shim()
    assert shim.exchange(b"bload 100 00000000%", until=b"\r\n") == b"m-bload-ready-100\r\n"
    # 10 of 100 bytes, then silence: the shim gives up after its 1000 ms inter-byte timeout.
    assert shim.events(bytes(10)) == [DutErrorLine("bload timeout: got 10 of 100 bytes"), Ready()]
    # The shim is back at its command prompt.
    assert shim.exchange(b"name%").startswith(b"m-name-dut-")


@VIA_BOTH
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
def test_bload_refuses_bad_arguments(start_shim, command: str, error: str) -> None:
    shim = start_shim()
    assert shim.events(command.encode() + b"%") == [DutErrorLine(error), Ready()]


# -- inference -------------------------------------------------------------------------------------
def test_infer_in_performance_mode_standalone(start_shim) -> None:
    shim = start_shim("performance")
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


def test_result_lines_carry_their_crc_once_caps_was_asked(start_shim) -> None:
    shim = start_shim("performance")
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
    assert shim.client.negotiate() == {"bload", "rcrc"}
    assert shim.client.infer(1, 0).checked


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


@VIA_BOTH
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
def test_infer_refusals(start_shim, command: str, error: str) -> None:
    shim = start_shim()
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
    b"db load 5%", b"db 0a0B0c%", b"db 0d0e%", b"db print%", b"db 0f%",
    b"db 123%", b"db zz%", b"db 0g%", b"db load 0%", b"db load abc%", b"db load%",
    b"db load 40000%", b"db load 00040000000000000000%", b"db%", b"db print%",
    b"infer 0%", b"infer -1 2%", b"infer 1 -1%", b"infer x%",
    b"frobnicate  x%", b"  name  %", b"%", b"NAME%",
    b"x" * 100 + b"%",  # longer than the 80-character buffer: truncated, then unknown
]


@VIA_BOTH
def relayable(command: bytes) -> bool:
    """Whether the IO manager passes `command` through as it is: what it refuses or trims
    itself (over-long, empty, padded with spaces) is its own business (test_io_manager_*)."""
    text = command[:-1]
    return len(text) > 0 and len(command) <= MAX_PASSTHROUGH and text == text.strip()


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
    rest = shim.transport.read_until(time.monotonic() + REPLY_S, lambda b: b.endswith(READY))
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
