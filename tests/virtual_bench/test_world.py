"""The virtual bench's power model integrates exactly (closed-form energies)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from virtual_bench.world import NS, PowerParams, World


@pytest.fixture
def world() -> World:
    return World(PowerParams(idle_w=1.2e-3, active_w=3.6e-3), speed=1.0)


def force_power_on_at_zero(world: World) -> None:
    # Tests place steps by hand: power on at t=0 without depending on the host clock.
    with world.lock:
        world.powered = True
        world._step_t[:] = [0]
        world._step_w[:] = [world.params.idle_w]


def test_energy_of_idle_and_active_segments(world: World) -> None:
    force_power_on_at_zero(world)
    world.add_activity(1 * NS, 3 * NS)  # 2 s active
    bounds = np.array([0, 1, 2, 3, 4]) * NS
    e = world.energy_between(bounds)
    np.testing.assert_allclose(e, [1.2e-3, 3.6e-3, 3.6e-3, 1.2e-3], rtol=1e-12)


def test_partial_sample_overlap_is_exact(world: World) -> None:
    force_power_on_at_zero(world)
    world.add_activity(NS // 4, NS // 2)  # 0.25 s active inside the first second
    e = world.energy_between(np.array([0, NS]))
    assert e[0] == pytest.approx(0.75 * 1.2e-3 + 0.25 * 3.6e-3, rel=1e-12)


def test_unpowered_draws_nothing_and_power_cycle_cancels_future_work(world: World) -> None:
    e = world.energy_between(np.array([0, NS]))
    assert e[0] == 0.0
    t_on = world.power(True)
    world.add_activity(t_on + 100 * NS, t_on + 200 * NS)
    world.add_pulse(t_on + 150 * NS)
    t_off = world.power(False)
    assert world.falling_edges_between(t_on, t_on + 300 * NS) == []
    tail = world.energy_between(np.array([t_off, t_off + 300 * NS]))
    assert tail[0] == 0.0


def test_gpio_levels_low_only_inside_pulse(world: World) -> None:
    world.add_pulse(1000)
    width = int(world.params.pulse_s * NS)
    levels = world.gpio_levels(np.array([999, 1000, 1000 + width - 1, 1000 + width]))
    assert levels.tolist() == [1, 0, 0, 1]


def test_dut_timer_wraps_at_32_bits(world: World) -> None:
    world.power_on_ns = 0
    assert world.dut_micros((2**32 + 5) * 1000) == 5


def test_forget_before_keeps_later_energy(world: World) -> None:
    force_power_on_at_zero(world)
    world.add_activity(5 * NS, 6 * NS)
    before = world.energy_between(np.array([4 * NS, 7 * NS]))
    world.forget_before(4 * NS)
    after = world.energy_between(np.array([4 * NS, 7 * NS]))
    np.testing.assert_allclose(after, before, rtol=1e-12)


def test_pulses_registered_out_of_order_are_found(world: World) -> None:
    for t in (300, 100, 200):
        world.add_pulse(t)
    assert world.falling_edges_between(0, 1000) == [100, 200, 300]
    assert world.falling_edges_between(150, 250) == [200]


def test_a_held_clock_stands_still_and_then_runs_on_from_where_it_stood() -> None:
    clock = World(speed=1000.0).clock
    with clock.held():
        stood = clock.now_ns()
        with clock.held():  # holds nest
            time.sleep(0.01)
        time.sleep(0.01)
        assert clock.now_ns() == stood
        leaving = time.monotonic_ns()
    after = clock.now_ns()
    since = time.monotonic_ns() - leaving
    assert clock.held_ns >= 20_000_000  # two host sleeps of 10 ms
    # On from where it stood: at most the host time since the hold ended, x 1000 (not the
    # 20 ms of host time held, x 1000, ahead of it).
    assert stood <= after <= stood + 1000 * since


def test_a_firm_hold_is_not_lifted_by_a_stream_waiting_on_its_reader() -> None:
    clock = World(speed=1000.0).clock
    with clock.held(firm=True):
        stood = clock.now_ns()
        with clock.held(), clock.running():  # lifts the ordinary hold only
            time.sleep(0.01)
            assert clock.now_ns() == stood
    assert clock.now_ns() > stood  # runs once the firm hold ends


def test_advance_jumps_simulated_time_held_or_running() -> None:
    clock = World(speed=50.0).clock
    with clock.held():
        stood = clock.now_ns()
        clock.advance(41_666_666_667)  # a download's 9600-baud line time
        assert clock.now_ns() - stood == pytest.approx(41_666_666_667, abs=50)  # 1 host ns x 50
        jumped = clock.now_ns()
        time.sleep(0.005)
        assert clock.now_ns() == jumped  # still held
    before = clock.now_ns()
    clock.advance(NS)
    assert clock.now_ns() - before >= NS  # running: the jump plus what ran meanwhile
    with pytest.raises(ValueError, match="forward"):
        clock.advance(-1)


def test_a_stream_waiting_on_its_reader_lets_a_held_clock_run() -> None:
    clock = World(speed=1000.0).clock
    with clock.held():
        stood = clock.now_ns()
        with clock.running():
            time.sleep(0.01)
        ran = clock.now_ns()
        time.sleep(0.01)
        assert clock.now_ns() == ran > stood + 1000 * 9 * 1_000_000  # >= 10 ms of host x 1000
