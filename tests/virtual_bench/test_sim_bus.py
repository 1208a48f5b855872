"""The sim bus: an out-of-process DUT's declarations land in the World exactly; a malformed or
late line never blocks the DUT and never changes the World."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from virtual_bench.bus import SimBusServer
from virtual_bench.world import NS, PowerParams, World


@pytest.fixture
def world() -> World:
    w = World(PowerParams(idle_w=1e-3, active_w=3e-3), speed=1000.0)
    w.power(True)
    return w


def server(world: World) -> SimBusServer:
    a, b = socket.socketpair()
    b.close()
    return SimBusServer(world, a, world.generation)


def test_begin_holds_the_horizon_and_acts_extend_it(world: World) -> None:
    bus = server(world)
    t0 = int(bus.handle("begin"))
    assert world.horizon_ns == t0 and world.observable_ns() <= t0
    assert bus.handle(f"act {t0} {t0 + NS}") is None
    assert bus.handle(f"pulse {t0 + NS}") is None
    assert world.horizon_ns == t0 + NS
    assert world.falling_edges_between(t0, t0 + 2 * NS) == [t0 + NS]
    energy = world.energy_between(np.array([t0, t0 + NS]))[0]
    assert energy == pytest.approx(3e-3, rel=1e-12)  # 1 s at active power
    assert bus.handle(f"end {t0 + NS}") is None
    assert world.horizon_ns is None and bus.errors == []


def test_wait_returns_when_simulated_time_arrives(world: World) -> None:
    bus = server(world)
    target = world.clock.now_ns() + NS // 100  # 10 ms simulated = 10 µs of host time
    assert bus.handle(f"wait {target}") == "ok"
    assert world.clock.now_ns() >= target


@pytest.mark.parametrize("line", ["act 5", "act x y", "pulse", "end", "jump 3", ""])
def test_malformed_lines_are_counted_and_change_nothing(world: World, line: str) -> None:
    bus = server(world)
    steps = list(world._step_t)
    assert bus.handle(line) is None
    assert world._step_t == steps and bus.errors == [line]


def test_an_act_before_begin_is_refused(world: World) -> None:
    bus = server(world)
    t0 = int(bus.handle("begin"))
    assert bus.handle(f"act {t0 - 1} {t0 + 5}") is None
    assert bus.errors and world.horizon_ns == t0


def test_after_a_power_cut_blocking_verbs_still_answer_and_nothing_lands(world: World) -> None:
    bus = server(world)
    t0 = int(bus.handle("begin"))
    world.power(False)
    world.power(True)
    assert bus.handle("wait 999999999999999") == "ok"  # never blocks a dead generation
    assert int(bus.handle("begin")) >= t0
    bus.handle(f"pulse {t0 + 5}")
    assert world.falling_edges_between(0, 2**62) == [] and world.horizon_ns is None
    assert bus.errors == []  # a late line from a killed firmware is not its fault
