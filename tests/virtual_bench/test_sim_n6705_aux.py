"""The simulated N6705's external data logger with the DUT's timestamp line on an N6781A's
auxiliary input, over TCP: the driver finds every edge in the sample that holds it, current is
P / V exactly, a pulse between two raw readings is missed as on the instrument, an overrun is
reported, and a module without an aux input refuses it."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.keysight import N6705
from drivers.errors import DeviceError
from protocols.scpi import decode_block, decode_reals, parse_error, real_dtype
from tests.deadline import wait_until
from virtual_bench.keysight import SimN6705
from virtual_bench.world import NS, PowerParams, World

from .test_sim_keysight import Raw

pytest.importorskip("pyvisa_py")

PARAMS = PowerParams(idle_w=1.2e-3, active_w=3.6e-3)
V = 1.8


def falling(gpio: np.ndarray) -> list[int]:
    return (np.flatnonzero((gpio[:-1] == 1) & (gpio[1:] == 0)) + 1).tolist()


def test_every_edge_lands_in_the_sample_that_holds_it() -> None:
    world = World(PARAMS, speed=10)
    with SimN6705(world) as sim:
        monitor = N6705.open(sim.resource, voltage_limit_v=3.3, simulated=True,
                             timestamp_input="aux")
        try:
            monitor.configure(V, 2000)
            p = sim.elog_period_ns
            assert p == 491_520 and monitor.sample_rate == pytest.approx(NS / p)  # 24 x 20.48 us
            chunks: list[Chunk] = []
            monitor.start(chunks.append)  # before the DUT has power: its line reads 0 V
            t0 = sim.elog_t0
            assert t0 is not None
            wait_until(lambda: world.clock.now_ns() > t0 + 20 * p, "a few records")
            monitor.power_on()
            # Three runs framed by pulses, the DUT active inside each; two pulses start in the
            # last 5.12 us of a record, where no raw reading of that record sees them.
            offsets = [12_345, p - 2_000, 200_000, 7_777, p - 4_000, 300_000]
            with world.lock:
                base = t0 + ((world.clock.now_ns() + 50_000_000 - t0) // p) * p
                marks = [base + k * 80 * p + off for k, off in enumerate(offsets)]
                for a, b in zip(marks[0::2], marks[1::2], strict=True):
                    world.add_pulse(a)
                    world.add_pulse(b)
                    world.add_activity(a, b)
            # Wait for the records themselves, not for simulated time: under load the driver's
            # last FETC:ELOG? may still be on its way when the clock has passed the pulse.
            last = (marks[-1] - t0) // p + 40
            wait_until(lambda: sum(len(c.current) for c in list(chunks)) > last,
                       "the records past the last pulse", timeout_s=30)
            monitor.stop()
        finally:
            monitor.close()
    assert not world.powered
    current = np.concatenate([c.current for c in chunks])
    gpio = np.concatenate([c.gpio for c in chunks])
    volts = np.concatenate([c.voltage for c in chunks])
    g = sim.GRID_NS
    # The edge is in the record of the first raw reading (every 5.12 us from t0) in the pulse:
    # the record holding the pulse's start, or the next one when it starts in the last 5.12 us.
    seen = [(-((t0 - m) // g) * g) // p for m in marks]
    assert [b - a for a, b in zip([(m - t0) // p for m in marks], seen, strict=True)] == [
        0, 1, 0, 0, 1, 0]
    assert falling(gpio) == seen  # the unpowered start and power-on are not edges
    assert gpio[: seen[0]].all()
    np.testing.assert_array_equal(volts, V)  # the programmed voltage, not the aux line
    # Records wholly inside a run hold the active current, wholly outside the idle current.
    held = [(m - t0) // p for m in marks]
    for a, b in zip(held[0::2], held[1::2], strict=True):
        np.testing.assert_allclose(current[a + 1 : b], PARAMS.active_w / V, rtol=1e-6)
    np.testing.assert_allclose(current[held[1] + 1 : held[2]], PARAMS.idle_w / V, rtol=1e-6)
    # The record holding a run's start mixes both levels in proportion to the time in each.
    frac = ((marks[0] - t0) - held[0] * p) / p
    mixed = (frac * PARAMS.idle_w + (1 - frac) * PARAMS.active_w) / V
    assert current[held[0]] == pytest.approx(mixed, rel=1e-6)


def elog(raw: Raw, *settings: str) -> None:
    for cmd in ("VOLT 1.8,(@1)", "OUTP ON,(@1)", "SENS:FUNC:VOLT:INP AUX,(@1)",
                "SENS:ELOG:FUNC:VOLT ON,(@1)", "SENS:ELOG:FUNC:VOLT:MINM ON,(@1)",
                "SENS:ELOG:PER 0.001,(@1)", "TRIG:ELOG:SOUR IMM,(@1)", "FORM REAL", *settings,
                "INIT:ELOG (@1)"):
        raw.send(cmd)
    assert raw.ask("SYST:ERR?") == b'+0,"No error"'


def fetch(raw: Raw, n: int) -> np.ndarray:
    raw.sock.sendall(f"FETC:ELOG? {n},(@1)\n".encode())
    wire = raw.buf
    while True:
        try:
            payload, rest = decode_block(wire)
        except Exception:
            wire += raw.sock.recv(65536)
            continue
        raw.buf = rest[1:]
        return decode_reals(payload, real_dtype(32)).reshape(-1, 3)


def test_a_pulse_between_two_raw_readings_is_missed_as_on_the_instrument() -> None:
    world = World(PowerParams(pulse_s=2e-6), speed=5)  # 2 us pulses: shorter than 5.12 us
    with SimN6705(world) as sim:
        raw = Raw(sim.port)
        elog(raw)
        t0, p, g = sim.elog_t0, sim.elog_period_ns, sim.GRID_NS
        assert t0 is not None and p == 1_003_520
        with world.lock:
            k = (world.clock.now_ns() - t0) // g + 20_000  # a raw reading well in the future
            caught = t0 + k * g - 1_000  # covers raw reading k
            missed = t0 + (k + 3000) * g + 1_500  # 1.5..3.5 us after a reading: none inside
            world.add_pulse(caught)
            world.add_pulse(missed)
        wait_until(lambda: world.clock.now_ns() > missed + 5 * p, "both pulses")
        rows = np.concatenate([fetch(raw, 100_000) for _ in range(2)])
        raw.sock.close()
    avg, low = rows[:, 0], rows[:, 1]
    assert np.flatnonzero(low < 0.9).tolist() == [(caught + 1_000 - t0) // p]
    # The average still holds both pulses exactly (2 us low of 1003.52 us).
    k_missed = (missed - t0) // p
    assert avg[k_missed] == pytest.approx(1.8 * (1 - 2_000 / p), rel=1e-6)
    assert low[k_missed] == pytest.approx(1.8)


def test_an_overrun_loses_the_oldest_records_and_says_so() -> None:
    world = World(speed=20)
    with SimN6705(world, elog_fifo_s=0.5) as sim:
        raw = Raw(sim.port)
        elog(raw)
        p = sim.elog_period_ns
        wait_until(lambda: world.clock.now_ns() > sim.elog_t0 + 700 * p, "700 records")
        rows = fetch(raw, 100_000)
        error = parse_error(raw.ask("SYST:ERR?").decode())
        raw.sock.close()
    assert len(rows) == int(0.5 * NS) // p  # what the FIFO holds
    assert error.code == -230 and "Elog FIFO overrun" in error.text
    assert sim.elog_lost > 0


def test_elog_refuses_a_period_too_short_for_its_values() -> None:
    with SimN6705(World()) as sim:
        raw = Raw(sim.port)
        for cmd in ("SENS:ELOG:FUNC:CURR ON,(@1)", "SENS:ELOG:FUNC:VOLT ON,(@1)",
                    "SENS:ELOG:FUNC:VOLT:MINM ON,(@1)", "SENS:ELOG:PER 0.0003,(@1)",
                    "FORM REAL", "INIT:ELOG (@1)"):
            raw.send(cmd)
        assert parse_error(raw.ask("SYST:ERR?").decode()).code == -221  # 4 values: 409.6 us
        assert raw.ask("SENS:ELOG:PER? (@1)") == b"0.0003072"  # rounded to 15 x 20.48 us
        raw.sock.close()


def test_a_module_without_an_aux_input() -> None:
    with SimN6705(World(), module="N6762A") as sim:
        raw = Raw(sim.port)
        raw.send("SENS:FUNC:VOLT:INP AUX,(@1)")
        assert parse_error(raw.ask("SYST:ERR?").decode()).code == -241
        raw.sock.close()
        monitor = N6705.open(sim.resource, voltage_limit_v=3.3, simulated=True,
                             timestamp_input="aux")
        try:
            with pytest.raises(DeviceError, match="N6762A, which has no auxiliary voltage input"):
                monitor.configure(V, 1000)
            # Nothing of the Elog set up or started (connect only aborts a leftover one).
            assert not any("ELOG" in c for c in sim.commands_seen if not c.startswith("ABOR"))
        finally:
            monitor.close()
