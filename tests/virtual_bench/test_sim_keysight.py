"""The simulated Keysights over TCP: raw SCPI (error queue, blocks) and the drivers end to end
through pyvisa-py (edge-to-sample alignment exact to one sample, current = P / V)."""

from __future__ import annotations

import socket
import time

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.keysight import N6705, Keysight34465A
from drivers.errors import InstrumentError
from protocols.scpi import decode_block, decode_reals, parse_error, real_dtype
from tests.deadline import wait_until
from virtual_bench.keysight import Sim34465A, SimN6705
from virtual_bench.world import NS, PowerParams, World

pytest.importorskip("pyvisa_py")

PARAMS = PowerParams(idle_w=1.2e-3, active_w=3.6e-3)
V = 3.3


class Raw:
    """A bare TCP client speaking SCPI lines."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def ask(self, line: str) -> bytes:
        self.sock.sendall(line.encode() + b"\n")
        while b"\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        reply, _, self.buf = self.buf.partition(b"\n")
        return reply

    def send(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\n")


def test_error_queue_and_identity_over_tcp() -> None:
    with SimN6705(World()) as sim:
        raw = Raw(sim.port)
        assert b"N6705C" in raw.ask("*IDN?")
        raw.send("FOO:BAR 1")
        raw.send("VOLT abc,(@1)")
        raw.send("VOLT 99,(@1)")
        assert parse_error(raw.ask("SYST:ERR?").decode()).code == -113
        assert parse_error(raw.ask("SYST:ERR?").decode()).code == -224
        assert parse_error(raw.ask("SYST:ERR?").decode()).code == -222
        assert raw.ask("SYST:ERR?") == b'+0,"No error"'
        raw.sock.close()


def test_34465a_block_in_both_byte_orders() -> None:
    world = World(PARAMS)
    world.power(True)
    with Sim34465A(world) as sim:
        raw = Raw(sim.port)
        for cmd in ("CONF:CURR:DC 0.01", "TRIG:SOUR IMM", "SAMP:SOUR TIM", "SAMP:TIM 1e-4",
                    "SAMP:COUN 5", "FORM:DATA REAL,32", "FORM:BORD SWAP", "INIT"):
            raw.send(cmd)
        assert raw.ask("SYST:ERR?") == b'+0,"No error"'
        deadline = time.monotonic() + 5
        while int(raw.ask("DATA:POIN?")) < 5:
            assert time.monotonic() < deadline
        raw.sock.sendall(b"R? 5\n")
        wire = b""
        while len(wire) < 2 + 2 + 20 + 1:
            wire += raw.sock.recv(65536)
        payload, rest = decode_block(wire)
        assert rest == b"\n"
        values = decode_reals(payload, real_dtype(32, big_endian=False))
        np.testing.assert_allclose(values, PARAMS.idle_w / V, rtol=1e-6)
        raw.sock.close()


def test_n6705_end_to_end_edge_aligned_to_one_sample() -> None:
    world = World(PARAMS)
    with SimN6705(world) as sim:
        monitor = N6705.open(sim.resource, voltage_limit_v=3.6, simulated=True,
                             points=3000, pretrigger=500, trigger="PIN1")
        try:
            monitor.configure(V, 10_000)
            interval_ns = round(1e9 / monitor.sample_rate)
            assert interval_ns == 102_400  # 1e-4 s rounded to the 5.12 µs grid
            monitor.power_on()
            assert world.powered and world.supply_v == V
            chunks: list[Chunk] = []
            monitor.start(chunks.append)
            armed = sim.armed_ns
            assert armed is not None
            # An edge off the sample grid, once the pre-trigger points are filled; the DUT
            # computes from the edge on.
            edge = armed + 600 * interval_ns + 12_345
            wait_until(lambda: world.clock.now_ns() > armed, "the arm")
            world.add_pulse(edge)
            world.add_activity(edge, edge + 10**9)
            # stop() aborts an untriggered capture: let the digitizer see the edge first.
            wait_until(lambda: sim.trigger_ns is not None, "the trigger")
            monitor.stop()
        finally:
            monitor.close()
        assert not world.powered  # close() switched the output off
    current = np.concatenate([c.current for c in chunks])
    gpio = np.concatenate([c.gpio for c in chunks])
    assert len(current) == 3000 and chunks[0].first_sample_id == 0
    assert np.flatnonzero(gpio == 0).tolist() == [500]
    # The trigger sample holds the edge: idle before it, active after it, the mix inside.
    idle, active = PARAMS.idle_w / V, PARAMS.active_w / V
    np.testing.assert_allclose(current[:500], idle, rtol=1e-6)
    np.testing.assert_allclose(current[501:], active, rtol=1e-6)
    frac_active = (interval_ns - 12_345) / interval_ns
    assert current[500] == pytest.approx(idle + (active - idle) * frac_active, rel=1e-6)
    np.testing.assert_allclose(np.concatenate([c.voltage for c in chunks]), V, rtol=1e-6)


def test_34465a_end_to_end_trigger_is_sample_zero() -> None:
    world = World(PARAMS)
    world.set_supply(V)
    world.power(True)
    with Sim34465A(world) as sim:
        monitor = Keysight34465A.open(sim.resource, voltage_limit_v=3.6, simulated=True,
                                      current_range_a=0.01, max_samples=4000)
        try:
            monitor.configure(V, 10_000)
            assert monitor.sample_rate == pytest.approx(10_000)
            chunks: list[Chunk] = []
            monitor.start(chunks.append)
            edge = world.clock.now_ns() + 20 * NS // 1000
            world.add_pulse(edge)
            # Active for 200.5 sample periods from the edge: sample 200 is half active.
            world.add_activity(edge, edge + 20_050_000)
            wait_until(lambda: sum(len(c) for c in chunks) >= 4000, "4000 samples")
            monitor.stop()
        finally:
            monitor.close()
    current = np.concatenate([c.current for c in chunks])
    ids = [c.first_sample_id for c in chunks]
    assert ids[0] == 0 and len(current) == 4000
    assert all(b == a + len(c) for a, b, c in zip(ids, ids[1:], chunks, strict=False))
    gpio = np.concatenate([c.gpio for c in chunks])
    assert np.flatnonzero(gpio == 0).tolist() == [0]
    idle, active = PARAMS.idle_w / V, PARAMS.active_w / V
    np.testing.assert_allclose(current[:200], active, rtol=1e-9)
    assert current[200] == pytest.approx((active + idle) / 2, rel=1e-9)
    np.testing.assert_allclose(current[201:], idle, rtol=1e-9)
    assert monitor.stats.dropped == 0


def test_34465a_sim_error_surfaces_naming_the_command() -> None:
    with Sim34465A(World()) as sim:
        monitor = Keysight34465A.open(sim.resource, voltage_limit_v=3.6, simulated=True,
                                      current_range_a=50.0)  # above the 10 A input
        try:
            with pytest.raises(InstrumentError, match=r"CONF:CURR:DC 50.*-222"):
                monitor.configure(V, 1000)
        finally:
            monitor.close()
