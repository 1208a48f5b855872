"""QUBO procedures: FT gap arithmetic, TTS thresholds, max-size stopping, power never 0."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from drivers.errors import DeviceError
from rig.qubo.procedure import (
    FtPoint,
    NoPower,
    PowerReading,
    QuboFixedTimeout,
    average_over_seeds,
    fixed_timeout_point,
    max_workload_size,
    open_power_meter,
    time_to_solution,
)
from rig.qubo.suts import LOIHI_PROFILER, LOIHI_PROFILER_SIMULATED, SolveResult
from rig.qubo.workloads import Workload, generate
from rig.run.events import Event, QuboPointMeasured


@dataclass
class Target:
    cost: int
    method: str = "table"


class ScriptedSut:
    """A stand-in SUT: returns a fixed improvement timeline; fails above `fail_above` nodes."""

    name = "scripted"
    power_source = "unavailable"

    def __init__(self, timeline: list[tuple[float, int]], fail_above: int | None = None,
                 zero_at: int | None = None) -> None:
        self.timeline = timeline
        self.fail_above = fail_above
        self.zero_at = zero_at
        self.workload: Workload | None = None
        self.loads: list[int] = []

    def load(self, workload: Workload) -> None:
        self.loads.append(workload.nodes)
        if self.fail_above is not None and workload.nodes > self.fail_above:
            raise DeviceError(f"{workload.nodes} nodes do not fit")
        self.workload = workload

    def solve(self, timeout_s: float, seed: int) -> SolveResult:
        assert self.workload is not None
        n = self.workload.nodes
        if n == self.zero_at:
            return SolveResult(0, np.zeros(n, bool), [(0.0, 0)], timeout_s)
        state = np.zeros(n, bool)
        state[0] = True  # cost -1 on any graph
        timeline = [(t, c) for t, c in self.timeline if t <= timeout_s]
        return SolveResult(timeline[-1][1], state, timeline, timeout_s)

    def close(self) -> None:
        pass


class FixedPower:
    source = "test"

    def __init__(self, watts: float) -> None:
        self.watts = watts
        self.windows: list[float] = []

    def start(self, duration_s: float) -> None:
        self.windows.append(duration_s)

    def stop(self) -> PowerReading:
        return PowerReading(self.watts, "measured (test)")

    def close(self) -> None:
        pass


TIMELINE = [(0.0, 0), (0.001, -30), (0.01, -40), (0.2, -43), (3.0, -44)]


def test_ft_gap_is_the_bks_gap_of_the_best_cost() -> None:
    sut = ScriptedSut(TIMELINE)
    workload = generate(10, 0.25, 0)
    for timeout, best in ((0.005, -30), (0.1, -40), (1.0, -43), (10.0, -44)):
        row = fixed_timeout_point(sut, workload, timeout, 0, Target(-44), FixedPower(2.5))
        assert row["cost"] == best
        assert row["gap"] == pytest.approx((best + 44) / 44)
        assert row["power_w"] == 2.5 and row["power_status"] == "measured (test)"
    assert sut.loads == [10]  # loaded once: the clock starts after the load


def test_power_unavailable_is_none_with_a_reason_never_zero() -> None:
    sut = ScriptedSut(TIMELINE)
    row = fixed_timeout_point(sut, generate(10, 0.25, 0), 1.0, 0, Target(-44),
                              NoPower("no RAPL here"))
    assert row["power_w"] is None
    assert row["power_status"] == "power unavailable: no RAPL here"
    assert all(v is None or v["energy_j"] is None for v in row["tts"].values())
    meter = open_power_meter("unavailable")
    assert meter.stop().power_w is None and "power unavailable" in meter.stop().status
    # The host's RAPL either measures a positive power or says why it cannot.
    rapl = open_power_meter("rapl")
    try:
        rapl.start(0.2)
        reading = rapl.stop()
    finally:
        rapl.close()
    assert (reading.power_w is None and reading.status.startswith("power unavailable")) or (
        reading.power_w > 0)


def test_tts_thresholds_on_a_synthetic_timeline() -> None:
    result = SolveResult(-44, np.zeros(4, bool), TIMELINE, 5.0)
    tts = time_to_solution(result, -44, power_w=2.0)
    # gaps: -30 -> 14/44 = 0.318, -40 -> 0.0909, -43 -> 0.0227, -44 -> 0
    assert tts["0.1"] == {"latency_s": 0.01, "energy_j": 0.02, "cost": -40}
    assert tts["0.05"] == {"latency_s": 0.2, "energy_j": 0.4, "cost": -43}
    assert tts["0.01"] == {"latency_s": 3.0, "energy_j": 6.0, "cost": -44}
    short = SolveResult(-43, np.zeros(4, bool), TIMELINE[:4], 1.0)
    assert time_to_solution(short, -44)["0.01"] is None
    assert time_to_solution(short, -44)["0.05"]["energy_j"] is None  # no power: no energy
    # Exactly on a threshold counts as reached: gap(-45, -50) = 0.1.
    exact = SolveResult(-45, np.zeros(4, bool), [(0.5, -45)], 1.0)
    assert time_to_solution(exact, -50, thresholds=(0.1,))["0.1"]["latency_s"] == 0.5


def test_max_size_stops_at_the_first_failure() -> None:
    sizes = (10, 25, 50, 100, 250)
    sut = ScriptedSut(TIMELINE, fail_above=50)
    out = max_workload_size(sut, 0.01, 0.1, sizes)
    assert out["max_nodes"] == 50 and out["stopped_by"] == "failed at 100 nodes"
    assert sut.loads == [10, 25, 50, 100]  # nothing tried after the failure
    assert out["tried"][-1]["ok"] is False and "do not fit" in out["tried"][-1]["reason"]
    # A solve that does not beat cost 0 is a failure too.
    sut = ScriptedSut(TIMELINE, zero_at=25)
    out = max_workload_size(sut, 1.0, 0.1, sizes)
    assert out["max_nodes"] == 10 and out["tried"][-1]["cost"] == 0
    # The max_nodes bound.
    out = max_workload_size(ScriptedSut(TIMELINE), 0.01, 0.1, sizes, max_nodes=100)
    assert out["max_nodes"] == 100 and out["stopped_by"] == "max_nodes 100"


def test_procedure_publishes_points_and_seed_averages() -> None:
    events: list[Event] = []
    points = [FtPoint(10, 0.25, s, t) for s in (0, 1) for t in (0.005, 1.0)]
    proc = QuboFixedTimeout(ScriptedSut(TIMELINE), points, events.append,
                            power=FixedPower(3.0), target_for=lambda n, d, s: Target(-44))
    rows = proc.run()
    measured = [e for e in events if isinstance(e, QuboPointMeasured)]
    assert len(measured) == 4 and {e.seed for e in measured} == {0, 1}
    again = Event.from_record(measured[0].to_record())
    assert isinstance(again, QuboPointMeasured) and again.gap == measured[0].gap
    table = {r["timeout_s"]: r for r in average_over_seeds(rows)}
    assert table[0.005]["mean_gap"] == pytest.approx(14 / 44)
    assert table[1.0]["mean_gap"] == pytest.approx(1 / 44)
    assert table[1.0]["mean_power_w"] == 3.0 and table[1.0]["seeds"] == 2
    rows[0]["power_w"], rows[0]["power_status"] = None, "power unavailable: x"
    t = {r["timeout_s"]: r for r in average_over_seeds(rows)}[rows[0]["timeout_s"]]
    assert t["mean_power_w"] is None and t["power_status"] == "power unavailable: x"


def test_cpu_sa_point_end_to_end() -> None:
    from rig.qubo.suts import CpuSut

    workload = generate(25, 0.1, 0)
    with CpuSut("cpu-sa") as sut:
        row = fixed_timeout_point(sut, workload, 0.05, 0, Target(-14), None)
    assert row["cost"] == row["result"].best_cost and row["gap"] == (row["cost"] + 14) / 14
    assert row["power_w"] is None and row["power_status"].startswith("power unavailable")


class ProfiledSut(ScriptedSut):
    """A SUT that measures its own power with each solve, as the Loihi 2 shim's profiler does:
    `watts` over the solve, energy `watts` x elapsed (None: the solve reported no power)."""

    name = "profiled"

    def __init__(self, watts: float | None, source: str) -> None:
        super().__init__(TIMELINE)
        self.watts = watts
        self.power_source = source

    def solve(self, timeout_s: float, seed: int) -> SolveResult:
        result = super().solve(timeout_s, seed)
        if self.watts is not None:
            result.power_w, result.energy_j = self.watts, self.watts * result.elapsed_s
        return result


@pytest.mark.parametrize("source", [LOIHI_PROFILER, LOIHI_PROFILER_SIMULATED])
def test_the_sut_s_own_power_and_energy_are_recorded_with_their_source(source: str) -> None:
    sut = ProfiledSut(1.25, source)
    meter = open_power_meter(sut.power_source)
    row = fixed_timeout_point(sut, generate(10, 0.25, 0), 1.0, 0, Target(-44), meter)
    assert (row["power_w"], row["energy_j"]) == (1.25, 1.25 * 1.0)
    assert row["power_source"] == source and row["power_status"] == f"measured ({source})"
    # The TTS energy is that power x the latency (gap 0.1 is reached at 0.01 s: cost -40).
    assert row["tts"]["0.1"]["energy_j"] == pytest.approx(1.25 * 0.01)
    QuboPointMeasured(**{k: v for k, v in row.items() if k != "result"})  # an event field each


def test_a_profiled_solve_without_power_says_why() -> None:
    sut = ProfiledSut(None, LOIHI_PROFILER)
    row = fixed_timeout_point(sut, generate(10, 0.25, 0), 1.0, 0, Target(-44),
                              open_power_meter(sut.power_source))
    assert row["power_w"] is None and row["energy_j"] is None
    assert row["power_status"].startswith(
        "power unavailable: the SUT sent no loihi-profiler (unverified on hardware)")


def test_a_meter_s_power_gives_the_energy_over_the_solve_time() -> None:
    row = fixed_timeout_point(ScriptedSut(TIMELINE), generate(10, 0.25, 0), 0.5, 0, Target(-44),
                              FixedPower(2.5))
    assert row["energy_j"] == 2.5 * 0.5 and row["power_source"] == "test"
