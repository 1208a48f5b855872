"""The Joulescope stand-in: same API as pyjoulescope_driver.Driver, payloads like the real one,
samples from the World (current = P/V, GPIO edges exact to one sample), and the socket bridge."""

from __future__ import annotations

import inspect
import socket
import threading

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.joulescope import Joulescope
from drivers.emon.joulescope_socket import FakeJoulescopeDriver, SocketSource, SourceEnded
from drivers.errors import VoltageLimitError
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
        assert value["sample_rate"] == 1_000_000 and value["decimate_factor"] == 100
        assert value["sample_id"] % 100 == 0
    assert cur["data"].dtype == np.float32 and volt["data"].dtype == np.float32
    assert gpi["data"].dtype == np.uint8
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
        with pytest.raises(RuntimeError, match="not found"):
            fake.query(f"{dev}/no/such/topic")
        assert fake.query(f"{dev}/h/fs$")["options"][0] == [1_000_000, "1 MHz"]
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
