"""End to end over real ptys: SimDut + World, driven by DutClient through SerialTransport."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from drivers.dut.client import DutClient, LoadResult
from drivers.errors import DeviceTimeout, DutError
from drivers.transport import SerialTransport
from protocols.dut.codec import (
    BloadDone,
    BloadReady,
    BufferCrc,
    Capabilities,
    DutDecoder,
    DutErrorLine,
    ExpectingBytes,
    InferStart,
    LapUs,
    LoadDone,
    Name,
    Ready,
    Results,
    TimestampMode,
    WarmupStart,
)
from rig.run.measure import hex_download_chars
from virtual_bench.dut import SimDut
from virtual_bench.world import NS, World

pytestmark = pytest.mark.slow

#: Simulated time runs this much faster than wall time: 100 inferences take ~1 ms.
SPEED = 1000.0
INPUT_SIZE = 100


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
    client: DutClient
    per_ns: int

    def edges(self) -> list[int]:
        return self.world.falling_edges_between(0, 2**62)


@pytest.fixture
def make_bench() -> Iterator:
    opened: list[Bench] = []

    def make(mode: str = "energy", **options) -> Bench:
        world = World(speed=SPEED)
        dut = SimDut(world, ByteScoresModel(), timestamp_mode=mode, **options)
        dut.start()
        client = DutClient(SerialTransport(dut.path, 115200, name="DUT"))
        bench = Bench(world, dut, client, round(world.params.inference_s * NS))
        opened.append(bench)
        world.power(True)
        assert client.wait_for_boot(timeout_s=5.0) == mode
        return bench

    yield make
    for bench in opened:
        bench.client.close()
        bench.dut.close()


DATA = bytes((7 * i + 3) % 256 for i in range(INPUT_SIZE))


def test_identify_load_and_db_print(make_bench) -> None:
    bench = make_bench()
    info = bench.client.identify()
    assert (info.name, info.vendor, info.model) == ("dut", "neurobench-rig virtual bench", "ic01")
    assert info.profile == "ULPMark for tinyML Firmware V0.0.1"
    assert bench.client.load(DATA) == LoadResult(INPUT_SIZE, "binary", 1, "crc")
    assert bench.client.read_buffer() == DATA


def test_plain_firmware_is_loaded_with_hex_commands(make_bench) -> None:
    bench = make_bench(extensions=False)
    assert bench.client.negotiate() == frozenset()
    # 31 + 31 + 31 + 7 bytes, m-load-done after the last, then the db print read-back.
    assert bench.client.load(DATA) == LoadResult(INPUT_SIZE, "hex", 1, "read-back")
    assert bench.client.read_buffer() == DATA
    with pytest.raises(DutError, match=r"Unknown command: bload 1 00000000"):
        bench.client.command("bload 1 00000000")


def converse(bench: Bench, *writes: bytes) -> list:
    """Write raw bytes to the DUT (one command, maybe its data); its reply up to m-ready."""
    transport = bench.client._transport
    for data in writes:
        transport.write(data)
    raw = transport.read_until(time.monotonic() + 5.0, lambda buf: buf.endswith(b"m-ready\r\n"))
    return DutDecoder().feed(raw)


def test_caps_reply_has_the_mode_and_the_capability_words(make_bench) -> None:
    assert converse(make_bench("performance"), b"caps%") == [
        TimestampMode("performance"), Capabilities(("bload", "dbcrc", "rcrc", "lapcrc")), Ready()
    ]
    assert converse(make_bench("energy"), b"caps%") == [
        TimestampMode("energy"), Capabilities(("bload", "dbcrc", "rcrc", "lapcrc", "elap")),
        Ready()
    ]
    assert converse(make_bench(extensions=False), b"caps%") == [
        DutErrorLine("Unknown command: caps"), Ready()
    ]


def test_result_lines_carry_their_crc_once_caps_was_asked(make_bench) -> None:
    bench = make_bench("performance")
    assert converse(bench, b"results%") == [Results(()), Ready()]  # plain until `caps`
    converse(bench, b"caps%")
    bench.client._transport.write(b"results%")
    raw = bench.client._transport.read_until(time.monotonic() + 5.0,
                                             lambda buf: buf.endswith(b"m-ready\r\n"))
    assert raw == b"m-results-[]-crc-%08x\r\nm-ready\r\n" % zlib.crc32(b"m-results-[]")
    assert converse(bench, b"results%") == [Results((), checked=True), Ready()]


@pytest.mark.parametrize("mode", ["performance", "energy"])
def test_lap_lines_carry_their_crc_once_caps_was_asked_and_laps_repeats_them(make_bench,
                                                                             mode: str) -> None:
    bench = make_bench(mode)
    assert converse(bench, b"laps%") == [DutErrorLine("No inference yet"), Ready()]
    bench.client.capabilities = frozenset({"bload"})  # no `caps` asked yet
    bench.client.load(bytes(INPUT_SIZE))
    plain = [e for e in converse(bench, b"infer 2 0%") if isinstance(e, LapUs)]
    assert len(plain) == 2 and not any(e.checked for e in plain)  # no `caps`: plain lines
    assert converse(bench, b"laps%") == [*plain, Ready()]
    converse(bench, b"caps%")
    laps = [e for e in converse(bench, b"infer 2 0%") if isinstance(e, LapUs)]
    assert len(laps) == 2 and all(e.checked for e in laps)
    assert laps[1].us - laps[0].us == 2 * round(bench.world.params.inference_s * 1e6)
    assert converse(bench, b"laps%") == [*laps, Ready()]
    assert bench.client.negotiate() >= {"lapcrc"}
    assert bench.client.infer(2, 0).elapsed_us == laps[1].us - laps[0].us


def test_bload_exchange_exactly_per_spec(make_bench) -> None:
    bench = make_bench()
    # Bytes that look like commands ('%', "name") are data inside a bload.
    data = (b"name%\r\n" + bytes(range(256)))[:INPUT_SIZE]
    crc = zlib.crc32(data)
    transport = bench.client._transport
    transport.write(b"bload %d %08x%%" % (len(data), crc))
    head = transport.read_until(time.monotonic() + 5.0, lambda b: b.endswith(b"\r\n"))
    assert head == b"m-bload-ready-%d\r\n" % len(data)
    transport.write(data[:50])
    transport.write(data[50:])
    tail = transport.read_until(time.monotonic() + 5.0, lambda b: b.endswith(b"m-ready\r\n"))
    assert DutDecoder().feed(tail) == [BloadDone(crc), Ready()]
    assert bench.client.read_buffer() == data


def test_bload_with_its_data_and_the_next_command_in_one_write(make_bench) -> None:
    bench = make_bench()
    data = bytes(range(INPUT_SIZE))
    crc = zlib.crc32(data)
    transport = bench.client._transport
    transport.write(b"bload %d %08x%%" % (len(data), crc) + data + b"name%")
    raw = transport.read_until(time.monotonic() + 5.0, lambda b: b.count(b"m-ready") == 2)
    assert DutDecoder().feed(raw) == [
        BloadReady(INPUT_SIZE), BloadDone(crc), Ready(),
        Name("dut", "neurobench-rig virtual bench"), Ready(),
    ]


def test_bload_crc_mismatch(make_bench) -> None:
    bench = make_bench()
    data = bytes(10)
    events = converse(bench, b"bload 10 0badc0de%", data)
    assert events == [
        BloadReady(10),
        DutErrorLine(f"bload crc mismatch: expected 0badc0de got {zlib.crc32(data):08x}"),
        Ready(),
    ]


def test_bload_timeout_returns_to_command_mode(make_bench) -> None:
    bench = make_bench(bload_timeout_s=0.1)
    events = converse(bench, b"bload 20 00000000%", bytes(7))
    assert events == [BloadReady(20), DutErrorLine("bload timeout: got 7 of 20 bytes"), Ready()]
    assert bench.client.command("name")[0] == Name("dut", "neurobench-rig virtual bench")


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (b"bload 101 00000000%", "bload too large: 101 > 100"),
        (b"bload 0 00000000%", "bload bad arguments"),
        (b"bload 10 0000000%", "bload bad arguments"),
        (b"bload 10 0000000G%", "bload bad arguments"),
        (b"bload 10 ABCDEF01%", "bload bad arguments"),  # the CRC is lowercase hex
        (b"bload 10%", "bload bad arguments"),
        (b"bload%", "bload bad arguments"),
    ],
)
def test_bload_refusals(make_bench, command: bytes, error: str) -> None:
    bench = make_bench()
    assert converse(bench, command) == [DutErrorLine(error), Ready()]


def test_infer_performance_mode_times_exactly_n_inferences(make_bench) -> None:
    bench = make_bench("performance")
    bench.client.require_mode("performance")
    bench.client.load(DATA)
    result = bench.client.infer(100, 10)
    assert result.elapsed_us == 100 * bench.per_ns // 1000 == 1_250_000
    assert len(result.lap_us) == 2
    expected = ByteScoresModel()(DATA)
    np.testing.assert_array_equal(result.results[:4], expected[:4])
    np.testing.assert_allclose(result.results, expected, rtol=0, atol=5e-4)
    np.testing.assert_array_equal(bench.client.results(), result.results)
    assert bench.edges() == []  # performance mode never pulses the GPIO


def test_infer_energy_mode_pulses_two_edges_n_inferences_apart(make_bench) -> None:
    bench = make_bench("energy")
    bench.client.load(DATA)
    before = len(bench.edges())
    result = bench.client.infer(40, 3)
    new = bench.edges()[before:]
    assert len(new) == 2
    assert new[1] - new[0] == 40 * bench.per_ns
    # elap: the lap counter at each pulse is the edge's time since power-on, in µs.
    on = bench.world.power_on_ns
    assert result.lap_us == tuple((t - on) // 1000 for t in new)
    assert result.elapsed_us == 40 * bench.per_ns // 1000
    np.testing.assert_allclose(result.results, ByteScoresModel()(DATA), rtol=0, atol=5e-4)
    # The window between the edges is all active power: exact energy N*T*P.
    p = bench.world.params
    (energy,) = bench.world.energy_between(np.array(new))
    assert energy == pytest.approx(40 * p.inference_s * p.active_w, rel=1e-9)


def test_timestamp_command_in_both_modes(make_bench) -> None:
    energy = make_bench("energy")
    before = len(energy.edges())
    assert energy.client.timestamp() is None
    assert len(energy.edges()) == before + 1
    perf = make_bench("performance")
    first = perf.client.timestamp()
    perf.client.infer(2, 0)
    assert isinstance(first, int)
    assert (perf.client.timestamp() - first) & 0xFFFFFFFF >= 2 * perf.per_ns // 1000


def test_infer_defaults_and_argument_errors(make_bench) -> None:
    client = make_bench().client
    events = client.command("infer")
    assert WarmupStart(10) in events and InferStart(1) in events
    with pytest.raises(DutError, match=r"Inference iterations must be >0"):
        client.command("infer 0 1")
    with pytest.raises(DutError, match=r"Inference warmup must be >=0"):
        client.command("infer 1 -1")


def test_infer_before_a_complete_load_runs_on_the_buffer_as_it_is(make_bench) -> None:
    client = make_bench().client
    np.testing.assert_array_equal(client.infer(1).results, np.zeros(5))  # RAM starts zeroed
    client.command("db load 4")
    client.command("db 0a141e")  # 3 of 4 bytes: no m-load-done yet
    np.testing.assert_allclose(client.infer(1).results[:4], [0.010, 0.020, 0.030, 0.0])


def test_db_errors(make_bench) -> None:
    client = make_bench().client
    client.command("db load 4")
    with pytest.raises(DutError, match=r"Insufficent number of hex digits"):
        client.command("db 123")
    with pytest.raises(DutError, match=r"Invalid hex digit 'zz'"):
        client.command("db 00zz")
    with pytest.raises(DutError, match=r"Unknown command: frobnicate"):
        client.command("frobnicate")
    with pytest.raises(DutError, match=r"buffer holds 100"):
        client.command("db load 101")


def test_input_beyond_80_characters_is_truncated(make_bench) -> None:
    transport = make_bench().client._transport
    # Bypass the encoder (it refuses such commands) to see what the firmware does with them.
    transport.write(b"x" * 100 + b"%")
    raw = transport.read_until(time.monotonic() + 5.0, lambda buf: buf.endswith(b"m-ready\r\n"))
    assert DutDecoder().feed(raw) == [DutErrorLine("Unknown command: " + "x" * 80), Ready()]


def test_unpowered_dut_ignores_input_and_says_nothing(make_bench) -> None:
    bench = make_bench()
    bench.world.power(False)
    transport = bench.client._transport
    transport.write(b"name%")
    deadline = time.monotonic() + 0.1
    heard = b""
    while time.monotonic() < deadline:
        heard += transport.read()
    assert heard == b""
    bench.world.power(True)
    assert bench.client.wait_for_boot(timeout_s=5.0) == "energy"
    assert bench.client.command("name") == [Name("dut", "neurobench-rig virtual bench"), Ready()]


def test_power_cut_mid_inference_times_out_and_the_dut_reboots_cleanly(make_bench,
                                                                      monkeypatch) -> None:
    bench = make_bench("energy")
    world = bench.world
    before = len(bench.edges())
    # Cut once the DUT has said m-infer-start (its run registered, both pulses scheduled): a
    # cut as soon as the pulses are registered can beat that line out, under load.
    started = threading.Event()
    write = bench.dut._write

    def write_and_tell(data: bytes) -> None:
        write(data)
        if b"m-infer-start" in data:
            started.set()

    monkeypatch.setattr(bench.dut, "_write", write_and_tell)

    edges_at_cut: list[int] = []

    def cut_power_once_the_run_is_registered() -> None:
        started.wait(5.0)
        edges_at_cut.append(len(bench.edges()))
        world.power(False)

    cutter = threading.Thread(target=cut_power_once_the_run_is_registered)
    cutter.start()
    # 10^7 inferences would take ~35 h of simulated time (~2 min of wall time).
    with pytest.raises(DeviceTimeout,
                       match=r"never said m-infer-done for 'infer 10000000 0' within 0\.5 s"):
        bench.client.infer(10_000_000, 0, timeout_s=0.5)
    cutter.join()
    assert edges_at_cut == [before + 2] and not world.powered
    # The power cut dropped the end-of-window pulse that was scheduled for the future.
    assert len(bench.edges()) == before + 1
    world.power(True)
    assert bench.client.wait_for_boot(timeout_s=5.0) == "energy"
    assert bench.client.identify().model == "ic01"


def test_db_crc_gives_the_count_and_crc_of_what_the_hex_commands_left(make_bench) -> None:
    bench = make_bench()
    assert converse(bench, b"db load 5%") == [ExpectingBytes(5), Ready()]
    assert converse(bench, b"db crc%") == [BufferCrc(0, 0), Ready()]
    assert converse(bench, b"db 0a0b%") == [Ready()]
    assert converse(bench, b"db crc%") == [BufferCrc(2, zlib.crc32(b"\x0a\x0b")), Ready()]
    assert converse(bench, b"db 0c0d0e%") == [LoadDone(), Ready()]
    assert converse(bench, b"db crc%") == [BufferCrc(5, zlib.crc32(bytes(range(10, 15)))),
                                           Ready()]
    # Plain firmware does not know it: "crc" is then an odd number of hex digits.
    plain = make_bench(extensions=False)
    assert converse(plain, b"db crc%") == [DutErrorLine("Insufficent number of hex digits"),
                                           Ready()]


def _timed_load(uart_baud: float, **options) -> tuple[SimDut, LoadResult, float]:
    """One download of DATA to a SimDut whose pty stands for a UART at `uart_baud`, at speed 1:
    (the DUT, how it went down, simulated seconds it took)."""
    world = World(speed=1.0)
    with SimDut(world, ByteScoresModel(), uart_baud=uart_baud, **options) as dut, \
            DutClient(SerialTransport(dut.path, 115200, name="DUT")) as client:
        world.power(True)
        client.wait_for_boot(timeout_s=5.0)
        client.negotiate()
        start = world.clock.now_ns()
        loaded = client.load(DATA, per_command=31)
        took_s = (world.clock.now_ns() - start) / NS
    return dut, loaded, took_s


def test_a_binary_download_on_a_paced_uart_takes_its_characters_time() -> None:
    dut, loaded, took_s = _timed_load(115200)
    assert (loaded.method, loaded.check) == ("binary", "crc")
    crc = f"{zlib.crc32(DATA):08x}"
    chars = (len(f"bload {INPUT_SIZE} {crc}%") + len(f"m-bload-ready-{INPUT_SIZE}\r\n")
             + INPUT_SIZE + len(f"m-bload-done-{crc}\r\nm-ready\r\n"))
    assert dut.download_chars == chars
    assert dut.download_line_s == pytest.approx(chars / 11520, rel=1e-12)  # ~13.6 ms
    # Simulated time stood still while the host moved the bytes, then jumped by the line's.
    assert dut.download_line_s <= took_s < dut.download_line_s + 0.25


def test_a_hex_download_read_back_on_a_paced_uart_is_what_the_preflight_prices() -> None:
    dut, loaded, took_s = _timed_load(9600, extensions=False)
    assert (loaded.method, loaded.check) == ("hex", "read-back")
    # The rig's disk preflight prices a download with the same count.
    assert dut.download_chars == hex_download_chars(INPUT_SIZE, 31, read_back=True)[0]
    assert dut.download_line_s == pytest.approx(dut.download_chars / 960, rel=1e-12)  # ~0.7 s
    assert dut.download_line_s <= took_s < dut.download_line_s + 0.25


def test_plain_firmware_refusing_bload_on_a_paced_uart_holds_no_time() -> None:
    """Plain firmware answers `bload` as an unknown command: that is no download, so the clock
    must not stand still waiting for one (it would until the next command or 2 s)."""
    world = World(speed=1.0)
    with SimDut(world, ByteScoresModel(), uart_baud=115200, extensions=False) as dut, \
            DutClient(SerialTransport(dut.path, 115200, name="DUT")) as client:
        world.power(True)
        client.wait_for_boot(timeout_s=5.0)
        with pytest.raises(DutError, match="Unknown command"):
            client.command("bload 4 00000000")
        before = world.clock.now_ns()
        time.sleep(0.05)
        assert world.clock.now_ns() > before  # running, not held
        assert dut.download_chars == 0 and dut.download_line_s == 0.0
