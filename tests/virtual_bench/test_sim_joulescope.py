"""The Joulescope stand-in: same API as pyjoulescope_driver.Driver, payloads like the real one,
samples from the World (current = P/V, GPIO edges exact to one sample), and the socket bridge."""

from __future__ import annotations

import inspect
import socket
import threading

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.joulescope import RANGE_STREAM_NAMES, Joulescope
from drivers.emon.joulescope_socket import (
    RANGE_OFF,
    FakeJoulescopeDriver,
    SocketSource,
    SourceEnded,
)
from drivers.errors import DeviceError, VoltageLimitError
from protocols.errors import ProtocolError
from protocols.joulescope_bridge import (
    HELLO,
    MAX_PAYLOAD,
    SAMPLES,
    FrameReader,
    SampleBlock,
    decode_samples,
    encode_frame,
    encode_samples,
)
from rig.run.recording import EmonRecorder
from tests.deadline import wait_until as _wait_until
from virtual_bench.joulescope import WorldSource, serve_source
from virtual_bench.world import NS, PowerParams, World

FS = 10_000
API = ["open", "close", "publish", "publish_and_wait", "subscribe", "unsubscribe",
       "unsubscribe_all", "device_paths", "query", "finalize"]


def wait_until(check, timeout_s: float = 5.0) -> bool:
    return _wait_until(check, timeout_s=timeout_s, poll_s=0.002)



@pytest.mark.parametrize("name", API)
def test_fake_has_the_real_drivers_methods(name: str) -> None:
    real = pytest.importorskip("pyjoulescope_driver").Driver
    want = list(inspect.signature(getattr(real, name)).parameters)
    have = list(inspect.signature(getattr(FakeJoulescopeDriver, name)).parameters)
    assert have == want


def test_payloads_look_like_the_real_drivers() -> None:
    world = World(speed=50.0)
    fake = FakeJoulescopeDriver(WorldSource(world, FS))
    dev = fake.device_path
    got: dict[str, dict] = {}
    try:
        fake.open(dev, "defaults")
        fake.publish(f"{dev}/h/fs", FS)
        for suffix in ("s/i", "s/v", "s/gpi/0"):
            fake.subscribe(f"{dev}/{suffix}/!data", ["pub"],
                           lambda topic, value: got.setdefault(topic, value))
            fake.publish(f"{dev}/{suffix}/ctrl", 1)
        wait_until(lambda: len(got) == 3)
    finally:
        fake.finalize()
    keys = {"sample_id", "utc", "field_id", "index", "sample_rate", "decimate_factor",
            "time_map", "data"}
    cur, volt, gpi = (got[f"{dev}/{s}/!data"] for s in ("s/i", "s/v", "s/gpi/0"))
    for value in (cur, volt, gpi):
        assert set(value) == keys
        # Ids count at 2 MHz (js220_usb.c SAMPLING_FREQUENCY); i, v at h/fs = 10 kHz.
        assert value["sample_rate"] == 2_000_000
        assert value["sample_id"] % 200 == 0
    assert cur["decimate_factor"] == volt["decimate_factor"] == 200
    assert gpi["decimate_factor"] == 1  # a JS220's GPI stay at 2 MS/s (PORT_MAP)
    assert cur["data"].dtype == np.float32 and volt["data"].dtype == np.float32
    assert gpi["data"].dtype == np.uint8 and len(gpi["data"]) == len(cur["data"]) * 200 // 8
    np.testing.assert_array_equal(np.unpackbits(gpi["data"], bitorder="little"), 1)
    assert (cur["field_id"], volt["field_id"], gpi["field_id"]) == (1, 2, 5)
    np.testing.assert_allclose(volt["data"], np.float32(3.3))


def test_fake_refuses_like_the_instrument() -> None:
    fake = FakeJoulescopeDriver(WorldSource(World(), FS))
    dev = fake.device_path
    try:
        with pytest.raises(RuntimeError, match="not open"):
            fake.publish(f"{dev}/h/fs", FS)
        fake.open(dev)
        with pytest.raises(RuntimeError, match="invalid value"):
            fake.publish(f"{dev}/h/fs", 3000)
        with pytest.raises(RuntimeError, match="invalid value"):
            fake.publish(f"{dev}/s/i/range/mode", "sideways")
        with pytest.raises(RuntimeError, match="NOT_FOUND"):
            fake.query(f"{dev}/no/such/topic")
        # Metadata is asked with "%" (jsdrv.h); "$" is the response's suffix: NOT_FOUND.
        assert fake.query(f"{dev}/h/fs%")["options"][:2] == [[2_000_000, "2 MHz"],
                                                            [1_000_000, "1 MHz"]]
        with pytest.raises(RuntimeError, match="NOT_FOUND"):
            fake.query(f"{dev}/h/fs$")
    finally:
        fake.finalize()


def test_world_source_marks_short_pulses_in_the_sample_that_holds_them() -> None:
    world = World(PowerParams(pulse_s=10e-6), speed=1.0)
    source = WorldSource(world, 1000)
    with world.lock:
        source.start()
        t = world.hold()
    t0 = source.t0_ns
    assert t0 is not None and t >= t0
    period = NS // 1000
    k_inside, k_boundary = 20, 40
    with world.lock:
        world.add_pulse(t0 + k_inside * period + period // 2)  # 10 µs inside a 1 ms sample
        world.add_pulse(t0 + k_boundary * period)  # exactly at a sample's start
        world.extend_horizon(t0 + 60 * period)
    world.clock = _frozen_clock(world, t0 + 60 * period)  # no waiting on host time
    block = source.read(0.0)
    assert block is not None and len(block) == 60 and block.first == 0
    assert np.flatnonzero(block.gpi0 == 0).tolist() == [k_inside, k_boundary]
    np.testing.assert_array_equal(block.current, 0.0)  # the DUT is unpowered


class _FrozenClock:
    def __init__(self, now: int, speed: float) -> None:
        self.now = now
        self.speed = speed

    def now_ns(self) -> int:
        return self.now

    def wall_delay_s(self, until_ns: int) -> float:
        return 0.0


def _frozen_clock(world: World, now: int) -> _FrozenClock:
    return _FrozenClock(now, world.clock.speed)


def run_window(world: World, js: Joulescope, source_t0, *, pulse_gap_s: float = 0.05):
    """Power on, declare one inference between two pulses, record until after it."""
    rec = EmonRecorder(FS)
    rec.chunks = []  # kept alongside, to look at the raw current

    def tee(chunk: Chunk) -> None:
        rec.chunks.append(chunk)
        rec.on_chunk(chunk)

    js.start(tee)
    js.power_on()
    wait_until(lambda: world.powered)  # through the bridge this is asynchronous
    p = world.params
    with world.lock:
        t = world.hold()
        a0 = t + int(pulse_gap_s * NS)
        a1 = a0 + int(p.inference_s * NS)
        world.add_activity(a0, a1)
        world.add_pulse(a0)
        world.add_pulse(a1)
        t_end = a1 + int(pulse_gap_s * NS)
        world.extend_horizon(t_end)
    t0 = source_t0()
    need = (t_end - t0) * FS // NS
    rec.wait_for_samples(need, timeout_s=20.0)
    js.stop()
    return rec, t0, a0, a1


def check_window(rec: EmonRecorder, world: World, t0: int, a0: int, a1: int) -> None:
    p = world.params
    e0, e1 = ((a - t0) * FS // NS for a in (a0, a1))
    assert rec.edges() == [e0, e1]
    # Energy over the samples [e0, e1): closed form from the step function.
    b0, b1 = (t0 + k * (NS // FS) for k in (e0, e1))
    active_ns = min(a1, b1) - max(a0, b0)  # the edge samples are only partly active
    expected_j = (p.active_w * active_ns + p.idle_w * (b1 - b0 - active_ns)) / NS
    measured_j = rec.mean_power(e0, e1) * (e1 - e0) / FS
    assert measured_j == pytest.approx(expected_j, rel=1e-6)
    # Whole samples inside the inference draw active_w / V, before it idle_w / V.
    assert [c.first_sample_id for c in rec.chunks] == list(
        np.cumsum([0] + [len(c) for c in rec.chunks[:-1]]))  # contiguous from 0
    current = np.concatenate([c.current for c in rec.chunks])
    np.testing.assert_allclose(np.concatenate([c.voltage for c in rec.chunks]), np.float32(3.3))
    assert current[e0 + 2] == pytest.approx(p.active_w / 3.3, rel=1e-6)
    assert current[e0 - 2] == pytest.approx(p.idle_w / 3.3, rel=1e-6)


def test_end_to_end_edges_exact_and_current_is_p_over_v() -> None:
    world = World(speed=20.0)
    world.set_supply(3.3)
    source = WorldSource(world, FS)
    fake = FakeJoulescopeDriver(source)
    js = Joulescope.open("", voltage_limit_v=3.6, simulated=True, driver_factory=lambda: fake)
    try:
        js.configure(3.3, FS)
        assert not world.powered
        rec, t0, a0, a1 = run_window(world, js, lambda: source.t0_ns)
        check_window(rec, world, t0, a0, a1)
        assert js.stats.dropped == 0 and rec.gaps == []
    finally:
        js.close()
    assert not world.powered  # close disconnected the DUT
    assert js.settings()["simulated"] is True


def test_measured_over_voltage_powers_the_dut_off() -> None:
    world = World(speed=20.0)
    world.set_supply(5.0)  # the bench supply is set wrong; the rig expects 3.3 V
    fake = FakeJoulescopeDriver(WorldSource(world, FS))
    js = Joulescope.open("", voltage_limit_v=3.6, simulated=True, driver_factory=lambda: fake)
    try:
        js.configure(3.3, FS)
        js.power_on()
        assert world.powered
        js.start(lambda chunk: None)
        wait_until(lambda: js.fault is not None)
        assert not world.powered
        with pytest.raises(VoltageLimitError, match=r"measured 5\.000 V"):
            js.stop()
    finally:
        js.close()


# -- the socket bridge ----------------------------------------------------------------------------
def test_frames_round_trip() -> None:
    rng = np.random.default_rng(3)
    n = 13
    block = SampleBlock(42, rng.random(n).astype(np.float32), np.full(n, 3.3, np.float32),
                        rng.integers(0, 2, n).astype(np.uint8), rng.integers(0, 2, n)
                        .astype(np.uint8))
    reader = FrameReader()
    frame = encode_samples(block)
    reader.feed(frame[:5])
    assert reader.next_frame() is None
    reader.feed(frame[5:])
    kind, payload = reader.next_frame()
    assert kind == SAMPLES
    back = decode_samples(payload)
    assert back.first == 42
    for name in ("current", "voltage", "gpi0", "gpi1"):
        np.testing.assert_array_equal(getattr(back, name), getattr(block, name))


def test_bad_frames_are_refused() -> None:
    reader = FrameReader()
    reader.feed(b"XX\x02\x00\x00\x00\x00\x00")
    with pytest.raises(ProtocolError, match="magic"):
        reader.next_frame()
    reader = FrameReader()
    reader.feed(b"JS\x02\x00" + (MAX_PAYLOAD + 1).to_bytes(4, "little"))
    with pytest.raises(ProtocolError, match="too large"):
        reader.next_frame()
    with pytest.raises(ProtocolError, match="does not hold"):
        decode_samples((3).to_bytes(8, "little") + (5).to_bytes(4, "little") + b"\0" * 7)


def test_eof_inside_a_frame_ends_the_source() -> None:
    bench, rig = socket.socketpair()
    try:
        bench.sendall(encode_frame(HELLO, b'{"version": 1, "sample_rate": 1000}'))
        source = SocketSource.from_socket(rig)
        assert source.sample_rate == 1000
        frame = encode_samples(SampleBlock(0, np.zeros(4, np.float32), np.zeros(4, np.float32),
                                           np.ones(4, np.uint8), np.zeros(4, np.uint8)))
        bench.sendall(frame[:10])
        assert source.read(0.01) is None
        bench.close()
        with pytest.raises(SourceEnded, match="inside a frame"):
            source.read(1.0)
    finally:
        rig.close()


def test_joulescope_through_the_socket_bridge() -> None:
    world = World(speed=20.0)
    world.set_supply(3.3)
    served = WorldSource(world, 1000)
    bench, rig = socket.socketpair()
    stop = threading.Event()
    server = threading.Thread(target=serve_source, args=(served, bench, stop), daemon=True)
    server.start()
    fake = FakeJoulescopeDriver(SocketSource.from_socket(rig), device_path="u/js110/000007")
    js = Joulescope.open("", voltage_limit_v=3.6, simulated=True, driver_factory=lambda: fake)
    try:
        js.configure(3.3, FS)
        js.power_on()
        wait_until(lambda: world.powered)
        js.power_off()
        wait_until(lambda: not world.powered)
        rec, t0, a0, a1 = run_window(world, js, lambda: served.t0_ns)
        assert served.sample_rate == FS  # the rate went over the bridge
        check_window(rec, world, t0, a0, a1)
        assert js.stats.dropped == 0
    finally:
        js.close()
        stop.set()
        server.join(timeout=5.0)
        bench.close()
    assert not server.is_alive()


# -- the stand-in does what the real driver does (issue 35) ---------------------------------------
class _Power:
    """A SampleSource that only records the DUT's power switching."""

    def __init__(self) -> None:
        self.power: list[bool] = []

    def set_sample_rate(self, hz: int) -> None: ...
    def set_power(self, on: bool) -> None:
        self.power.append(on)

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def read(self, timeout_s: float):
        return None

    def close(self) -> None: ...


def test_unsubscribe_needs_the_very_callback_object() -> None:
    fake = FakeJoulescopeDriver(_Power())
    topic = f"{fake.device_path}/s/i/!data"

    class Sub:
        def on(self, topic, value) -> None: ...

    sub = Sub()
    held = sub.on
    try:
        fake.subscribe(topic, ["pub"], held)
        with pytest.raises(RuntimeError, match="NOT_FOUND"):
            fake.unsubscribe(topic, sub.on)  # equal, but another bound-method object
        assert fake._subscribers == [(topic, held)]
        fake.unsubscribe(topic, held)
        assert fake._subscribers == []
    finally:
        fake.finalize()


@pytest.mark.parametrize(("path", "range_topic"), [("u/js220/000415", "s/i/range/mode"),
                                                   ("u/js110/000001", "s/i/range/select")])
def test_open_with_defaults_connects_the_dut_and_restore_changes_nothing(
        path: str, range_topic: str) -> None:
    source = _Power()
    fake = FakeJoulescopeDriver(source, device_path=path)
    try:
        fake.open(path, "restore")
        assert source.power == [] and fake.query(f"{path}/{range_topic}") == "off"
        fake.close(path)
        fake.open(path, "defaults")
        assert source.power == [True] and fake.query(f"{path}/{range_topic}") == "auto"
        fake.publish(f"{path}/{range_topic}", "off")
        fake.close(path)
        fake.open(path, "restore")  # the instrument keeps what the last host left
        assert source.power == [True, False] and fake.query(f"{path}/{range_topic}") == "off"
    finally:
        fake.finalize()


def test_the_rig_never_connects_a_dut_the_instrument_held_off() -> None:
    source = _Power()
    fake = FakeJoulescopeDriver(source)
    js = Joulescope.open("", voltage_limit_v=3.6, simulated=True, driver_factory=lambda: fake)
    try:
        js.configure(3.3, 1000)
        assert source.power == [False]  # the rig's own "off"; open connected nothing
        js.power_on()
        assert source.power == [False, True]
    finally:
        js.close()
    assert source.power == [False, True, False]


def test_a_js220_opened_while_connected_is_disconnected_first() -> None:
    # Unconfirmed without hardware: a JS220 just plugged in may hold its default, auto.
    source = _Power()
    fake = FakeJoulescopeDriver(source, range_at_boot="auto")
    js = Joulescope.open("", voltage_limit_v=3.6, simulated=True, driver_factory=lambda: fake)
    try:
        assert source.power == [True, False]
        assert fake.published[0] == (f"{fake.device_path}/s/i/range/mode", "off")
    finally:
        js.close()


@pytest.mark.parametrize("fs", [1_000_000, 100_000, 1_000])
def test_js220_gpi_blocks_are_whole_bytes_at_2_msps(fs: int) -> None:
    world = World(speed=50.0)
    fake = FakeJoulescopeDriver(WorldSource(world, fs))
    dev = fake.device_path
    blocks: list[dict] = []
    analog: list[dict] = []
    try:
        fake.open(dev, "restore")
        fake.publish(f"{dev}/h/fs", fs)
        fake.subscribe(f"{dev}/s/gpi/0/!data", ["pub"], lambda t, v: blocks.append(v))
        fake.subscribe(f"{dev}/s/i/!data", ["pub"], lambda t, v: analog.append(v))
        fake.publish(f"{dev}/s/i/ctrl", 1)
        fake.publish(f"{dev}/s/gpi/0/ctrl", 1)
        wait_until(lambda: len(blocks) >= 3)
        fake.publish(f"{dev}/s/gpi/0/ctrl", 0)
        fake.publish(f"{dev}/s/i/ctrl", 0)
    finally:
        fake.finalize()
    d = 2_000_000 // fs
    assert {v["decimate_factor"] for v in analog} == {d}
    assert {v["decimate_factor"] for v in blocks} == {1}
    # Contiguous at 2 MS/s, 8 samples a byte, starting where the current starts.
    ids = [v["sample_id"] for v in blocks]
    assert ids[0] == analog[0]["sample_id"]
    assert ids[1:] == [i + 8 * len(v["data"]) for i, v in zip(ids, blocks, strict=False)][:-1]


def test_a_js220_offers_2_mhz_and_the_rig_refuses_it() -> None:
    fake = FakeJoulescopeDriver(_Power())
    js = Joulescope.open("", voltage_limit_v=3.6, simulated=True, driver_factory=lambda: fake)
    try:
        assert [2_000_000, "2 MHz"] in fake.query(f"{fake.device_path}/h/fs%")["options"]
        with pytest.raises(DeviceError, match="2e\\+06 Hz is not available"):
            js.configure(3.3, 2_000_000)
    finally:
        js.close()


# -- the range stream (issue 37) ------------------------------------------------------------------
class _OneBlock(_Power):
    """A SampleSource that hands over one block of given currents once streaming."""

    def __init__(self, current: list[float]) -> None:
        super().__init__()
        n = len(current)
        self.block: SampleBlock | None = SampleBlock(
            0, np.array(current, np.float32), np.full(n, 3.3, np.float32),
            np.ones(n, np.uint8), np.ones(n, np.uint8))
        self.started = False

    def start(self) -> None:
        self.started = True

    def read(self, timeout_s: float):
        block, self.block = (self.block, None) if self.started else (None, self.block)
        return block


#: Currents just below and above the full scales (18 µA ... 10 A; float32 samples, so none
#: at a full scale exactly) and the ranges auto-ranging gives.
AUTO_CURRENTS = [5e-6, 17e-6, 19e-6, 1e-3, 1.7e-3, 2e-3, 0.05, 1.5, 2.5, 12.0]
JS220_AUTO = ["18 µA", "18 µA", "180 µA", "1.8 mA", "1.8 mA", "18 mA", "180 mA", "10 A",
              "10 A", "10 A"]
JS110_AUTO = [*JS220_AUTO[:7], "2 A", "10 A", "10 A"]


@pytest.mark.parametrize(("device", "expected", "repeat"),
                         [("u/js220/000415", JS220_AUTO, 2000), ("u/js110/000007", JS110_AUTO, 1)])
def test_the_stand_in_streams_each_samples_range_as_the_instrument(
        device: str, expected: list[str], repeat: int) -> None:
    fake = FakeJoulescopeDriver(_OneBlock(AUTO_CURRENTS), device_path=device)
    dev = fake.device_path
    got: list[dict] = []
    fake.open(dev, "restore")
    fake.publish(f"{dev}/h/fs", 1000)
    power = "s/i/range/mode" if "js220" in device else "s/i/range/select"
    fake.publish(f"{dev}/{power}", "auto")
    fake.subscribe(f"{dev}/s/i/range/!data", ["pub"], lambda t, v: got.append(v))
    fake.publish(f"{dev}/s/i/range/ctrl", 1)
    try:
        assert wait_until(lambda: got)
    finally:
        fake.finalize()
    value = got[0]
    # Field RANGE (4), one uint8 per sample as the binding unpacks the u4 values; a JS220's at
    # 2 MS/s (each output sample's value repeated), a JS110's at h/fs.
    assert value["field_id"] == 4 and value["index"] == 0
    assert value["decimate_factor"] == 2_000_000 // 1000 // repeat
    assert value["data"].dtype == np.uint8 and len(value["data"]) == 10 * repeat
    names = RANGE_STREAM_NAMES["js220" if "js220" in device else "js110"]
    assert [names[v] for v in value["data"][::repeat]] == expected


def test_the_stand_in_range_is_off_while_disconnected_and_fixed_when_selected() -> None:
    for device, power, fixed, index in (("u/js220/000415", "s/i/range/mode", "manual", 1),
                                        ("u/js110/000007", "s/i/range/select", "180 mA", 2)):
        fake = FakeJoulescopeDriver(_Power(), device_path=device)
        dev = fake.device_path
        fake.open(dev, "restore")
        try:
            current = np.array([1e-6, 1.0], np.float32)
            assert fake.range_values(current).tolist() == [RANGE_OFF, RANGE_OFF]  # off
            if power == "s/i/range/mode":
                fake.publish(f"{dev}/s/i/range/select", "180 mA")
            fake.publish(f"{dev}/{power}", fixed)
            assert fake.range_values(current).tolist() == [index, index]  # 180 mA either way
        finally:
            fake.finalize()


def test_the_rig_reads_the_stand_ins_ranges_into_its_chunks() -> None:
    fake = FakeJoulescopeDriver(_OneBlock(AUTO_CURRENTS))
    js = Joulescope.open("", voltage_limit_v=3.6, simulated=True, driver_factory=lambda: fake)
    chunks: list[Chunk] = []
    try:
        js.configure(3.3, 1000)
        js.start(chunks.append)
        js.power_on()
        assert wait_until(lambda: sum(len(c) for c in chunks) >= len(AUTO_CURRENTS))
        js.stop()
    finally:
        js.close()
    got = [c.range_names[int(i)] for c in chunks for i in c.current_range]
    assert got == JS220_AUTO
