"""The IO manager client and the DUT transport through its pass-through.

Conversations against a scripted transport (exact bytes out, canned replies in), then end to end
over real ptys: World + SimDut + SimIoManager, driven by DutClient through IoManagerTransport.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

import drivers.io_manager as io_module
import virtual_bench.line_time as line_time_module
from drivers.dut.client import DutClient, DutInfo
from drivers.errors import DeviceError, DeviceTimeout, DutError
from drivers.io_manager import IoManager, IoManagerError, IoManagerTransport
from drivers.transport import SerialTransport
from protocols.errors import ProtocolError
from protocols.io_manager.codec import EDGE_CHANGE, EDGE_FALL, Message, Unparsed
from rig.run.measure import hex_download_chars
from virtual_bench.dut import SimDut
from virtual_bench.io_manager import MICROS_STEP, SimIoManager
from virtual_bench.world import NS, World

from .scripted import ScriptedTransport

ACK = b"m-ready\r\n"


def passthrough(command: bytes, *dut_lines: bytes) -> tuple[bytes, bytes]:
    """One scripted pass-through: what the host writes, and the IO manager's whole answer."""
    reply = b"m-dut-passthrough(" + command + b")\r\n" + ACK
    reply += b"".join(b"[dut]: " + line + b"\r\n" for line in dut_lines)
    return b"dut " + command + b"%", reply


# -- the IO manager's own commands ------------------------------------------------------------


def test_own_commands_exact_bytes_and_replies() -> None:
    transport = ScriptedTransport(
        [
            (b"name%", b"m-name-[neurobench-rig IO manager]\r\nm-ready\r\n"),
            (b"version%", b"m-version-[1.0.0]\r\nm-ready\r\n"),
            (b"help%", b"m-help-[name: this board's name]\r\nm-help-[help: this]\r\nm-ready\r\n"),
            (b"res 0%", b"m-res-0\r\nm-ready\r\n"),
            (b"tm 1%", b"m-tm-1\r\nm-ready\r\n"),
            (b"enable-timer%", b"m-timer-enabled\r\nm-ready\r\n"),
            (b"disable-timer%", b"m-timer-disabled\r\nm-ready\r\n"),
        ]
    )
    io = IoManager(transport)
    assert io.name() == "neurobench-rig IO manager"
    assert io.version() == "1.0.0"
    assert io.help() == ["name: this board's name", "help: this"]
    io.set_reset_polarity(0)
    io.set_timer_edge(EDGE_CHANGE)
    io.enable_timer()
    io.disable_timer()
    assert transport.done()


def test_refusal_raises_io_manager_error_naming_the_command() -> None:
    io = IoManager(ScriptedTransport([(b"frob%", b"e-[Unknown command: frob]\r\nm-ready\r\n")]))
    with pytest.raises(IoManagerError, match=r"IO manager refused 'frob': Unknown command") as exc:
        io.command("frob")
    assert exc.value.command == "frob"


def test_wrong_echo_is_an_error() -> None:
    io = IoManager(ScriptedTransport([(b"res 1%", b"m-res-0\r\nm-ready\r\n")]))
    with pytest.raises(DeviceError, match=r"answered 'res 1' with 0"):
        io.set_reset_polarity(1)


def test_reply_without_the_expected_line_is_an_error() -> None:
    io = IoManager(ScriptedTransport([(b"version%", b"m-ready\r\n")]))
    with pytest.raises(DeviceError, match=r"did not answer 'version' with the expected Version"):
        io.version()


@pytest.mark.parametrize("bad", [2, -1, True])
def test_bad_arguments_are_refused_before_sending(bad: int) -> None:
    transport = ScriptedTransport([])
    io = IoManager(transport)
    with pytest.raises(ProtocolError):
        io.set_reset_polarity(bad)
    with pytest.raises(ProtocolError):
        io.set_timer_edge(bad)
    assert transport.written == []


def test_silent_io_manager_times_out_and_late_replies_are_dropped() -> None:
    transport = ScriptedTransport(
        [(b"version%", b"m-version-"), (b"name%", b"m-name-[x]\r\nm-ready\r\n")]
    )
    io = IoManager(transport)
    with pytest.raises(DeviceTimeout, match=r"did not finish 'version' within 0.05 s"):
        io.command("version", timeout_s=0.05)
    transport.inbox += b"[1.0.0]\r\nm-ready\r\n"  # the late rest of the abandoned reply
    assert io.name() == "x"
    assert transport.resets == 1


def test_handshake_asks_again_until_the_uno_has_booted(monkeypatch) -> None:
    monkeypatch.setattr(io_module, "HANDSHAKE_RETRY_S", 0.02)
    transport = ScriptedTransport(
        [
            (b"name%", b"\xfe\x00"),  # the bootloader swallows it
            (b"name%", b""),
            (b"name%", b"m-name-[uno]\r\nm-ready\r\n"),
        ],
        initial=b"garbage from before",
    )
    assert IoManager(transport).handshake(timeout_s=5.0) == "uno"
    assert transport.done() and transport.resets == 3


def test_handshake_gives_up_at_its_deadline(monkeypatch) -> None:
    monkeypatch.setattr(io_module, "HANDSHAKE_RETRY_S", 0.02)
    transport = ScriptedTransport([(b"name%", b"")] * 1000)
    with pytest.raises(DeviceTimeout, match=r"did not answer name% within 0.1 s") as exc:
        IoManager(transport).handshake(timeout_s=0.1)
    assert "IO manager sketch" in exc.value.hint


# -- the DUT behind it ------------------------------------------------------------------------


def dut_behind(script: list[tuple[bytes, bytes]], *, initial: bytes = b""):
    transport = ScriptedTransport(script, initial=initial)
    io = IoManager(transport)
    return DutClient(IoManagerTransport(io)), io, transport


BANNER = b"[dut]: m-timestamp-mode-energy\r\n[dut]: m-init-done\r\n[dut]: m-ready\r\n"


def test_dut_client_works_unchanged_through_the_pass_through() -> None:
    client, _, transport = dut_behind(
        [
            passthrough(b"name", b"m-name-dut-[unspecified]", b"m-ready"),
            passthrough(
                b"profile",
                b"m-profile-[ULPMark for tinyML Firmware V0.0.1]",
                b"m-model-[kws01]",
                b"m-ready",
            ),
        ],
        initial=BANNER,
    )
    assert client.wait_for_boot(timeout_s=1.0) == "energy"
    info = client.identify()
    assert info == DutInfo("dut", "unspecified", "ULPMark for tinyML Firmware V0.0.1", "kws01")
    assert transport.written == [b"dut name%", b"dut profile%"]


def test_dut_refusal_is_a_dut_error_not_an_io_manager_error() -> None:
    client, _, _ = dut_behind(
        [passthrough(b"bogus", b"e-[Unknown command: bogus]", b"m-ready")], initial=BANNER
    )
    client.wait_for_boot(timeout_s=1.0)
    with pytest.raises(DutError, match=r"refused 'bogus': Unknown command: bogus"):
        client.command("bogus")


def test_timer_laps_go_to_the_io_manager_not_to_the_dut_client() -> None:
    client, io, _ = dut_behind(
        [
            (
                b"dut infer 2 0%",
                b"m-dut-passthrough(infer 2 0)\r\nm-ready\r\n"
                b"[dut]: m-warmup-start-0\r\n[dut]: m-warmup-done\r\n[dut]: m-infer-start-2\r\n"
                b"m-lap-us-1000\r\n"
                b"m-lap-us-26000\r\n"
                b"[dut]: m-infer-done\r\n[dut]: m-results-[0.250,0.750]\r\n[dut]: m-ready\r\n",
            )
        ],
        initial=BANNER,
    )
    client.wait_for_boot(timeout_s=1.0)
    result = client.infer(2, 0)
    assert result.lap_us == () and result.elapsed_us is None
    np.testing.assert_array_equal(result.results, [0.25, 0.75])
    assert io.take_laps() == [1000, 26000]
    assert io.take_laps() == []


def test_stray_own_lines_outside_a_command_are_kept_aside() -> None:
    client, io, _ = dut_behind([], initial=b"m-lap-lost-2\r\nnoise\r\n" + BANNER)
    assert client.wait_for_boot(timeout_s=1.0) == "energy"
    assert list(io.unsolicited) == [Message("lap-lost-2"), Unparsed("noise")]


def test_garbled_acknowledgement_is_an_error() -> None:
    client, _, _ = dut_behind([(b"dut name%", b"m-dut-passthrough(nbme)\r\nm-ready\r\n")])
    with pytest.raises(DeviceError, match=r"passed 'nbme' through to the DUT instead of 'name'"):
        client.command("name")


def test_missing_acknowledgement_times_out() -> None:
    transport = ScriptedTransport([(b"dut name%", b"")])
    io = IoManager(transport)
    with pytest.raises(DeviceTimeout, match=r"did not finish 'dut name' within 0.05 s"):
        io.passthrough("name", timeout_s=0.05)


def test_binary_write_is_refused_before_any_byte_is_sent() -> None:
    transport = ScriptedTransport([])
    dut_transport = IoManagerTransport(IoManager(transport))
    assert dut_transport.binary_ok is False
    with pytest.raises(ProtocolError, match="binary data cannot pass through") as exc:
        dut_transport.write(bytes(range(256)))
    assert "hex" in exc.value.hint
    assert transport.written == []


def test_over_long_pass_through_is_refused_before_any_byte_is_sent() -> None:
    client, _, transport = dut_behind([])
    assert IoManagerTransport.max_command == 76
    # The DUT itself would take 79 characters + '%', but not behind "dut ".
    with pytest.raises(ProtocolError, match=r"77 characters .* at most 76"):
        client.command("x" * 76)
    assert transport.written == []


def test_transport_attributes_for_the_dut_client() -> None:
    transport = ScriptedTransport([])
    transport.url = "scripted://uno"
    dut_transport = IoManagerTransport(IoManager(transport))
    assert (dut_transport.hex_per_command, dut_transport.baudrate) == (26, 9600)
    assert dut_transport.url == "scripted://uno"
    dut_transport.close()
    assert transport.closed


def test_read_until_returns_dut_bytes_and_has_a_deadline() -> None:
    transport = ScriptedTransport([], initial=b"[dut]: m-ready\r\nm-ready\r\n[dut]: a\r\n")
    dut_transport = IoManagerTransport(IoManager(transport))
    got = dut_transport.read_until(time.monotonic() + 1.0, lambda b: b.count(b"\r\n") == 2)
    assert got == b"m-ready\r\na\r\n"
    with pytest.raises(DeviceTimeout, match="no complete reply"):
        dut_transport.read_until(time.monotonic() + 0.02, lambda b: False)


def test_reset_input_drops_everything_waiting() -> None:
    transport = ScriptedTransport([], initial=b"[dut]: m-ready\r\n")
    io = IoManager(transport)
    dut_transport = IoManagerTransport(io)
    while not io._dut_lines:
        io._pump()
    dut_transport.reset_input()
    assert transport.resets == 1
    assert dut_transport.read() == b""


# -- end to end over ptys ---------------------------------------------------------------------

#: Simulated time runs this much faster than wall time: 100 inferences take ~1 ms.
SPEED = 1000.0
INPUT_SIZE = 100
DATA = bytes((7 * i + 3) % 256 for i in range(INPUT_SIZE))


class ByteScoresModel:
    """Scores the first four input bytes as k/1000 (exact at 3 decimals), then their mean/255."""

    input_size = INPUT_SIZE
    model_id = "ic01"

    def __call__(self, data: bytes) -> np.ndarray:
        x = np.frombuffer(data, dtype=np.uint8)
        return np.concatenate((x[:4] / 1000.0, [x.mean() / 255.0]))


@dataclass
class Bench:
    world: World
    dut: SimDut
    sim: SimIoManager
    port: SerialTransport
    io: IoManager
    client: DutClient
    per_ns: int

    def edges(self) -> list[int]:
        return self.world.falling_edges_between(0, 2**62)


@pytest.fixture
def make_bench() -> Iterator:
    opened: list[Bench] = []

    def make(mode: str = "energy") -> Bench:
        world = World(speed=SPEED)
        dut = SimDut(world, ByteScoresModel(), timestamp_mode=mode)
        dut.start()
        sim = SimIoManager(dut.path, world=world)
        sim.start()
        port = SerialTransport(sim.path, 115200, name="IO manager")
        io = IoManager(port)
        client = DutClient(IoManagerTransport(io))
        bench = Bench(world, dut, sim, port, io, client, round(world.params.inference_s * NS))
        opened.append(bench)
        assert io.handshake(timeout_s=5.0) == "neurobench-rig IO manager (simulated)"
        world.power(True)
        assert client.wait_for_boot(timeout_s=5.0) == mode  # the banner, relayed
        return bench

    yield make
    for bench in opened:
        bench.client.close()
        bench.sim.close()
        bench.dut.close()


@pytest.mark.slow
def test_e2e_identify_and_hex_load_in_26_byte_commands(make_bench) -> None:
    bench = make_bench()
    info = bench.client.identify()
    assert (info.name, info.model) == ("dut", "ic01")
    bench.client.load(DATA, per_command=26)  # 26 + 26 + 26 + 22 bytes
    assert bench.client.read_buffer() == DATA


@pytest.mark.slow
def test_e2e_infer_in_performance_mode(make_bench) -> None:
    bench = make_bench("performance")
    bench.client.require_mode("performance")
    bench.client.load(DATA, per_command=26)
    result = bench.client.infer(100, 10)
    assert result.elapsed_us == 100 * bench.per_ns // 1000 == 1_250_000
    expected = ByteScoresModel()(DATA)
    np.testing.assert_array_equal(result.results[:4], expected[:4])
    np.testing.assert_array_equal(bench.client.results(), result.results)


@pytest.mark.slow
def test_e2e_infer_in_energy_mode_with_the_timer_on_falling_edges(make_bench) -> None:
    bench = make_bench("energy")
    bench.io.set_timer_edge(EDGE_FALL)
    bench.io.enable_timer()
    bench.client.load(DATA, per_command=26)
    before = len(bench.edges())
    result = bench.client.infer(40, 3)
    new = bench.edges()[before:]
    assert len(new) == 2 and new[1] - new[0] == 40 * bench.per_ns
    # elap: the DUT's lap counter of the same window, through the pass-through (µs, exact).
    assert result.elapsed_us == 40 * bench.per_ns // 1000
    np.testing.assert_allclose(result.results, ByteScoresModel()(DATA), rtol=0, atol=5e-4)
    # The timer line for the window's end may follow the DUT's m-ready: wait for it.
    laps: list[int] = []
    deadline = time.monotonic() + 5.0
    while len(laps) < 2 and time.monotonic() < deadline:
        bench.io.read_dut()
        laps += bench.io.take_laps()
    assert len(laps) == 2
    # 500 000 µs, measured on the UNO's 4 µs clock.
    assert abs((laps[1] - laps[0]) - 40 * bench.per_ns // 1000) <= MICROS_STEP


@pytest.mark.slow
def test_e2e_timer_on_every_change_sees_the_pulse_width(make_bench) -> None:
    bench = make_bench("energy")
    bench.io.set_timer_edge(EDGE_CHANGE)
    bench.io.enable_timer()
    assert bench.client.timestamp() is None  # energy mode: one 10 µs pulse, no lap line
    laps: list[int] = []
    deadline = time.monotonic() + 5.0
    while len(laps) < 2 and time.monotonic() < deadline:
        bench.io.read_dut()
        laps += bench.io.take_laps()
    width_us = round(bench.world.params.pulse_s * 1e6)
    assert len(laps) == 2 and abs((laps[1] - laps[0]) - width_us) <= MICROS_STEP
    bench.io.disable_timer()
    bench.client.timestamp()
    bench.client.command("name")
    assert bench.io.take_laps() == []


@pytest.mark.slow
def test_e2e_own_commands_and_refusals(make_bench) -> None:
    bench = make_bench()
    assert bench.io.version() == "1.0.0"
    assert any(line.startswith("dut <cmd>") for line in bench.io.help())
    bench.io.set_reset_polarity(1)
    assert bench.sim.reset_level == 1
    with pytest.raises(IoManagerError, match=r"Unknown command: frob"):
        bench.io.command("frob")
    with pytest.raises(IoManagerError, match=r"tm needs 0 or 1"):
        bench.io.command("tm 2")
    with pytest.raises(DutError, match=r"Unknown command: frob"):
        bench.client.command("frob")  # the DUT's refusal, relayed


@pytest.mark.slow
def test_e2e_binary_and_over_long_commands_never_reach_the_wire(make_bench) -> None:
    bench = make_bench()
    dut_transport = IoManagerTransport(bench.io)
    with pytest.raises(ProtocolError, match="binary"):
        dut_transport.write(bytes(range(64)))
    with pytest.raises(ProtocolError, match="does not fit"):
        bench.client.command("db " + "00" * 37)
    # Nothing reached the DUT: it still answers, and its buffer is as it was.
    assert bench.client.identify().model == "ic01"


@pytest.mark.slow
def test_e2e_the_uno_refuses_a_command_beyond_its_buffer(make_bench) -> None:
    bench = make_bench()
    bench.port.write(b"dut " + b"x" * 77 + b"%")  # 82 bytes: bypasses the client's own check
    got = bench.port.read_until(time.monotonic() + 5.0, lambda b: b.endswith(b"m-ready\r\n"))
    assert got == b"e-[Command too long: more than 80 characters]\r\nm-ready\r\n"


def _line_chars(commands: list[str], replies: list[str]) -> int:
    """Characters on the UNO's line to the DUT: each command with its '%', each DUT line with
    its CR LF."""
    return sum(len(c) + 1 for c in commands) + sum(len(r) + 2 for r in replies)


@pytest.mark.slow
def test_a_download_takes_the_uno_lines_time_not_the_hosts() -> None:
    """Simulated time stands still while the host sends a hex download and then jumps by what
    a real UNO's lines take for its characters (9600 baud to the DUT, 115200 to the rig): on a
    bench at speed 1 the download's length is that time (plus the host's few ms around it),
    however slow the host is."""
    world = World(speed=1.0)
    with SimDut(world, ByteScoresModel(), timestamp_mode="energy") as dut, \
            SimIoManager(dut.path, world=world) as sim, \
            SerialTransport(sim.path, 115200, name="IO manager") as port:
        io = IoManager(port)
        client = DutClient(IoManagerTransport(io))
        io.handshake(timeout_s=5.0)
        world.power(True)
        client.wait_for_boot(timeout_s=5.0)
        assert "dbcrc" in client.negotiate()
        start = world.clock.now_ns()
        loaded = client.load(DATA)
        took_s = (world.clock.now_ns() - start) / NS
    assert (loaded.method, loaded.check) == ("hex", "crc")
    chunks = [DATA[i : i + 26] for i in range(0, INPUT_SIZE, 26)]
    commands = [f"db load {INPUT_SIZE}", *(f"db {c.hex()}" for c in chunks), "db crc"]
    replies = [f"m-[Expecting {INPUT_SIZE} bytes]", "m-ready",
               *["m-ready"] * (len(chunks) - 1), "m-load-done", "m-ready",
               f"m-db-crc-{INPUT_SIZE}-{zlib.crc32(DATA):08x}", "m-ready"]
    dut_chars = _line_chars(commands, replies)
    # The rig's line to the UNO: "dut <cmd>%", the sketch's acknowledgement, relayed lines.
    host_chars = (sum(len(f"dut {c}%") + len(f"m-dut-passthrough({c})\r\nm-ready\r\n")
                      for c in commands) + sum(len(f"[dut]: {r}\r\n") for r in replies))
    assert sim.download_chars == (dut_chars, host_chars)
    # What the disk preflight prices a download with is this count.
    assert hex_download_chars(INPUT_SIZE, 26, read_back=False) == (dut_chars, host_chars)
    line_s = dut_chars / 960 + host_chars / 11520
    assert sim.download_line_s == pytest.approx(line_s, rel=1e-12)  # ~0.54 s
    assert line_s <= took_s < line_s + 0.25


@pytest.mark.slow
def test_a_download_the_host_abandons_lets_time_run_again(monkeypatch) -> None:
    monkeypatch.setattr(line_time_module, "IDLE_END_S", 0.1)
    world = World(speed=1.0)
    with SimDut(world, ByteScoresModel(), timestamp_mode="energy") as dut, \
            SimIoManager(dut.path, world=world) as sim, \
            SerialTransport(sim.path, 115200, name="IO manager") as port:
        io = IoManager(port)
        io.handshake(timeout_s=5.0)
        world.power(True)
        io.passthrough(f"db load {INPUT_SIZE}")
        held = world.clock.now_ns()
        time.sleep(0.05)
        assert world.clock.now_ns() == held  # standing still while the download is open
        deadline = time.monotonic() + 5.0
        while world.clock.now_ns() == held and time.monotonic() < deadline:
            time.sleep(0.01)
        assert world.clock.now_ns() > held  # ended: charged and running again
        assert sim.download_line_s > 0
