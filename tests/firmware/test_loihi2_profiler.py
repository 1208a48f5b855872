"""The Loihi 2 shim's profiled path (issue 35, items 18-19), without Lava: the profiler read as
the public code reads it (after one profiled run() and stop(); execution_time in s per step,
energy_breakdown() in µJ, power_breakdown() in W), and one profiled run per solve.

`PublicProfiler` below is this test's own double of lava-loihi's Loihi2HWProfiler, written from
the public scripts (not from the shim's stand-in): it raises on a second profiled run() and on a
read before stop(). Numbers are closed form.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from firmware.loihi2 import shim


class RunSteps:
    """Lava's run condition, as the shim builds it."""

    def __init__(self, num_steps: int, blocking: bool = True) -> None:
        self.num_steps = num_steps


class PublicProfiler:
    """Answers as the public code reads the Loihi 2 profiler: `execution_time` s per step,
    `energy_breakdown()` / `power_breakdown()` (total, dynamic, static, vdd, vdd_m, vdd_io) in
    µJ / W, `energy` the total (µJ assumed). One profiled run; read after stop()."""

    def __init__(self, step_s: float, power_w: float, energy_scale: float = 1e6) -> None:
        self.step_s, self.power_w, self.energy_scale = step_s, power_w, energy_scale
        self.runs: list[int] = []
        self.stopped = False

    def run(self, steps: int) -> None:
        if self.runs:
            raise RuntimeError("profiler configured for one run() only")
        self.runs.append(steps)

    def _check(self) -> int:
        if not self.stopped:
            raise RuntimeError("read before stop()")
        return self.runs[0]

    @property
    def execution_time(self) -> np.ndarray:
        return np.full(self._check(), self.step_s)

    def energy_breakdown(self) -> tuple[float, ...]:
        total = self.power_w * self.step_s * self._check() * self.energy_scale
        return (total, 0.75 * total, 0.25 * total, total, 0.0, 0.0)

    def power_breakdown(self) -> tuple[float, ...]:
        self._check()
        p = self.power_w
        return (p, 0.75 * p, 0.25 * p, p, 0.0, 0.0)

    @property
    def energy(self) -> float:
        return self.energy_breakdown()[0]


def test_the_profiler_is_read_in_the_public_forms() -> None:
    """4 steps of 250 µs at 0.5 W: Σ execution_time 1 ms, energy 0.5 W x 1 ms = 500 µJ."""
    profiler = PublicProfiler(250e-6, 0.5)
    profiler.run(4)
    profiler.stopped = True
    profile = shim.read_profiler(profiler, 4)
    assert profile.power_w == 0.5 and profile.note == ""
    assert profile.energy_uj == pytest.approx(500.0)
    np.testing.assert_allclose(profile.step_times_s, [250e-6] * 4)


def test_energy_in_other_units_than_assumed_gives_no_power() -> None:
    """An energy in joules where µJ is assumed: energy / power says 1 ns, the steps took 1 ms
    (10^6 apart), so no power is reported rather than a wrong one."""
    profiler = PublicProfiler(250e-6, 0.5, energy_scale=1.0)
    profiler.run(4)
    profiler.stopped = True
    profile = shim.read_profiler(profiler, 4)
    assert profile.power_w is None and "unit check failed" in profile.note
    np.testing.assert_allclose(profile.step_times_s, [250e-6] * 4)  # the times still count


def test_a_profiler_without_the_breakdowns_gives_no_power() -> None:
    class TimeOnly:
        execution_time = np.full(3, 1e-6)

    profile = shim.read_profiler(TimeOnly(), 3)
    assert profile.power_w is None and profile.energy_uj is None
    assert "energy_breakdown" in profile.note
    assert shim.read_profiler(None, 3).power_w is None


@pytest.mark.parametrize(("timeout_s", "want"), [
    (10e-3, 10), (10.7e-3, 10), (10.85e-3, 11), (0.5e-3, 1), (1e9, shim.MAX_STEPS)])
def test_a_profiled_solve_is_sized_by_the_step_time_before_it_runs(timeout_s: float,
                                                                   want: int) -> None:
    """1 ms steps: a step is taken with at least 0.8 of it left (as the chunked solve does)."""
    assert shim.profiled_steps(timeout_s, 1e-3) == want


class FakeProcess:
    """The solver process the stand-in attaches to: it counts runs and stops."""

    def __init__(self) -> None:
        self.runs: list[int] = []
        self.stops = 0

    def run(self, condition: RunSteps) -> None:
        self.runs.append(condition.num_steps)

    def stop(self) -> None:
        self.stops += 1


def test_the_stand_in_answers_in_the_public_forms_once_and_after_stop() -> None:
    """The stand-in (SIMULATED, 2 W) on a fake process: one profiled run of 5 steps; before
    stop() it refuses to be read, after it: 5 equal step times, 2 W, 2 W x Σt in µJ; a second
    profiled run raises, as the public note says the chip's profiler does."""
    process = FakeProcess()
    stand_in = shim.StandInProfiler(2.0)
    stand_in.attach(process)
    process.run(condition=RunSteps(5))
    assert process.runs == [5]
    with pytest.raises(RuntimeError, match="after the profiled run"):
        stand_in.power_breakdown()
    with pytest.raises(RuntimeError, match="one profiled run"):
        process.run(condition=RunSteps(1))
    assert process.runs == [5]  # the second run never reached Lava
    process.stop()
    assert process.stops == 1
    times = stand_in.execution_time
    assert times.shape == (5,) and np.all(times == times[0]) and times[0] > 0
    assert stand_in.power_breakdown()[0] == 2.0
    total_uj = 2.0 * float(times.sum()) * 1e6
    assert stand_in.energy_breakdown()[0] == pytest.approx(total_uj)
    assert stand_in.energy == pytest.approx(total_uj)
    profile = shim.read_profiler(stand_in, 5)
    assert profile.power_w == 2.0 and profile.energy_uj == pytest.approx(total_uj)


# -- the whole qsolve/qresult conversation on the profiled path, Lava replaced at its edge ----
#: MIS on one edge 0-1: -1 per node, 8 on the edge; the optimum -1 takes one node.
TERMS = np.array([[0, 0, -1], [1, 1, -1], [0, 1, 8]], dtype=np.int64)


class FakeLavaSolver:
    """lava-optimization's OptimizationSolver as the shim's Network uses it, with the profiler."""

    def __init__(self, profiler: PublicProfiler, steps: int) -> None:
        self._profiler = profiler
        self.steps = steps
        self.solver_process = self
        self.stopped = False

    def run(self, condition: RunSteps) -> None:
        self._profiler.run(condition.num_steps)

    def stop(self) -> None:
        self.stopped = self._profiler.stopped = True

    def _get_results(self, config: object) -> tuple[np.ndarray, int, int]:
        assert not self.stopped  # Lava's variables are read from the running network
        return np.array([1, 0]), -1, 1

    def _get_probing(self, config: object) -> tuple[np.ndarray, None]:
        assert not self.stopped
        return np.array([0] + [-1] * (self.steps - 1)), None


class ProfiledSolver:
    """The shim's LavaSolver with Lava replaced: every network is profiled."""

    profiled, hardware, stand_in_w = True, True, None

    def __init__(self, step_s: float, power_w: float) -> None:
        self.step_s, self.power_w = step_s, power_w
        self.networks: list[FakeLavaSolver] = []

    def build(self, problem: shim.Problem, seed: int, max_steps: int,
              profiled: bool = False) -> shim.Network:
        lava = FakeLavaSolver(PublicProfiler(self.step_s, self.power_w), max_steps)
        self.networks.append(lava)
        network = shim.Network(lava, None, max_steps, RunSteps)
        network.profiler = lava._profiler  # the chip's profiler of this network
        return network


class Lines:
    """The shim's port: the reply lines it sends."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, *lines: str) -> None:
        self.sent += lines


def test_a_profiled_solve_is_one_run_read_after_stop_on_the_profilers_clock() -> None:
    """A 10 ms timeout at the 1 ms step `qload` measured: one profiled run of 10 steps. The chip
    took 0.9 ms a step at 0.5 W: the solve took 9000 µs by the profiler, the improvements end
    at steps 1 and 2 (900 and 1800 µs; no load step in a profiled run), the power is 0.5 W
    (500000 µW) and the energy 0.5 W x 9000 µs = 4500 µJ."""
    solver = ProfiledSolver(0.9e-3, 0.5)
    port = Lines()
    dut = shim.Shim(port, solver)
    dut.problem = shim.Problem(2, TERMS)
    dut.problem.step_s = dut.problem.shortest_step_s = 1e-3
    dut.handle("qsolve 10000 7")
    assert port.sent == ["m-qsolve-start", "m-qsolve-done-9000", "m-ready"]
    (lava,) = solver.networks
    assert lava._profiler.runs == [10] and lava.stopped  # one run of every step, then stop()
    port.sent.clear()
    dut.handle("qresult")
    load = [s for s in port.sent if s.startswith("m-qload-us-")]
    assert len(load) == 1 and re.fullmatch(r"m-qload-us-\d+", load[0])
    assert [s for s in port.sent if s not in load] == [
        "m-qbest-cost--1", "m-qbest-time-us-1800", "m-qstate-0-[01]",
        "m-qimprove-900-0", "m-qimprove-1800--1", "m-qsteps-10",
        "m-qenergy-uj-4500", "m-qpower-uw-500000", "m-ready"]


def test_a_profiled_solve_whose_units_fail_the_check_reports_no_power() -> None:
    """The same solve with an energy in joules: the times stand, no power or energy line."""
    solver = ProfiledSolver(0.9e-3, 0.5)
    port = Lines()
    dut = shim.Shim(port, solver)
    dut.problem = shim.Problem(2, TERMS)
    dut.problem.step_s = dut.problem.shortest_step_s = 1e-3
    original = solver.build

    def joules(*args: object, **kwargs: object) -> shim.Network:
        network = original(*args, **kwargs)
        network.profiler.energy_scale = 1.0
        return network

    solver.build = joules
    dut.handle("qsolve 10000 7")
    assert port.sent[-2:] == ["m-qsolve-done-9000", "m-ready"]
    port.sent.clear()
    dut.handle("qresult")
    assert not [s for s in port.sent if s.startswith(("m-qenergy", "m-qpower"))]
    assert "m-qbest-time-us-1800" in port.sent and port.sent[-1] == "m-ready"


def test_on_hardware_the_shim_names_its_power_unverified() -> None:
    """The chip's profiler power is labelled until a lab confirms the readings: the shim's
    `name%` (which the rig records as the SUT's identity with every sweep) says so."""
    port = Lines()
    shim.Shim(port, ProfiledSolver(1e-6, 1.0)).handle("name")
    assert port.sent == ["m-name-loihi2-[intel loihi2-hw lava, profiler power unverified on "
                         "hardware]", "m-ready"]
