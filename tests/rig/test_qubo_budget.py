"""The same fixed-timeout budget for every QUBO SUT (issue 14): each one's reported solve time is
within its tolerance of the timeout, and Loihi 2's load (building, compiling and starting the Lava
network) is reported apart from it, never inside it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from drivers.dut.client import DutError
from rig.qubo.suts import LAVA_PYTHON, LOIHI2_SHIM, QuboSut, SolveResult, open_sut
from rig.qubo.workloads import Workload, cost, generate

# serial: a solve's time must fill its timeout within 2%; a CPU SUT checks its clock between
# slices, which a loaded host (two workers) stretches past that.
pytestmark = pytest.mark.serial

NO_LAVA = ".venv-lava or the Loihi 2 shim missing: run `make lava-env`"
needs_lava = pytest.mark.skipif(not (LAVA_PYTHON.exists() and LOIHI2_SHIM.exists()),
                                reason=NO_LAVA)

#: Relative tolerance of a solve's time against its timeout (or one step, if that is larger).
TOLERANCE = 0.02
#: The CPU SUTs check the clock between slices of at most a few ms: one such slice.
CPU_SLICE_S = 0.005


@pytest.fixture(scope="module")
def workload() -> Workload:
    return generate(25, 0.05, 0)


@pytest.fixture(scope="module")
def loihi2(workload: Workload, monkeypatch_module: pytest.MonkeyPatch) -> Iterator[QuboSut]:
    monkeypatch_module.setenv("RIG_LOIHI2_BACKEND", "CPU")
    sut = open_sut("loihi2")
    try:
        sut.load(workload)
        yield sut
    finally:
        sut.close()


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


#: Steps Loihi 2's count includes that ran in its load, before the clock (firmware/loihi2/README).
LOAD_STEPS = 1
#: Loihi 2's slack in mean steps. A stepped solver cannot stop inside a step, and here the
#: network runs on Lava's CPU backend: ten host processes per step on two cores, so one step
#: takes 0.5x to 3x the mean (on the chip a step is microseconds). The shim starts no step with
#: less than 0.8 of a mean step left: it ends at most 0.8 of a step early, and late only by the
#: part of a slow last step past that; one mean step of slack failed 2 solves in 32 here.
LAVA_CPU_SLACK_STEPS = 2


def step_s(result: SolveResult) -> float:
    """The SUT's time per step in this solve (0 where it reports no steps): the load's step
    left out, as a 10 ms solve runs one or two steps and counting it halves the figure."""
    solved = (result.steps or 0) - LOAD_STEPS
    return result.elapsed_s / solved if solved > 0 else 0.0


def check_budget(result: SolveResult, workload: Workload, timeout_s: float, slack_s: float) -> None:
    tolerance = max(TOLERANCE * timeout_s, slack_s)
    if result.cpu_s is not None:
        # A CPU SUT says how long it had the CPU. Time the host kept it waiting can delay its
        # stop and is the host's, not the stop rule's: with three busy loops on two cores here,
        # 11 of 40 solves of 0.2 s ended 5-19 ms late, each ~100 ms off the CPU. On an idle host
        # (this file runs alone) that time is near 0 and the tolerance stays as it was.
        assert 0 < result.cpu_s <= 1.01 * result.elapsed_s
        tolerance += result.elapsed_s - result.cpu_s
    assert abs(result.elapsed_s - timeout_s) <= tolerance, (
        f"solved {result.elapsed_s:.4f} s for a {timeout_s} s timeout "
        f"(tolerance {tolerance:.4f} s)")
    assert result.best_cost == cost(workload, result.best_state)
    times = [t for t, _ in result.improvements]
    assert times == sorted(times) and all(0 <= t <= result.elapsed_s for t in times)


@pytest.mark.parametrize("name", ["cpu-tabu", "cpu-sa", "loihi2"])
def test_every_sut_fills_the_same_budget(name: str, workload: Workload,
                                         request: pytest.FixtureRequest) -> None:
    timeout_s = 0.2
    if name == "loihi2":
        if not (LAVA_PYTHON.exists() and LOIHI2_SHIM.exists()):
            pytest.skip(NO_LAVA)
        sut = request.getfixturevalue("loihi2")
        result = sut.solve(timeout_s, 0)
        check_budget(result, workload, timeout_s, LAVA_CPU_SLACK_STEPS * step_s(result))
        assert result.load_s is not None and result.load_s > 0  # reported apart
        return
    with open_sut(name) as sut:
        sut.load(workload)
        result = sut.solve(timeout_s, 0)
    check_budget(result, workload, timeout_s, CPU_SLICE_S)
    assert result.load_s is not None


@needs_lava
@pytest.mark.parametrize("timeout_s", [0.01, 0.1, 1.0,
                                       pytest.param(3.0, marks=pytest.mark.slow)])
def test_loihi2_solves_for_its_timeout_not_its_load(loihi2: QuboSut, workload: Workload,
                                                     timeout_s: float) -> None:
    result = loihi2.solve(timeout_s, 1)
    check_budget(result, workload, timeout_s, LAVA_CPU_SLACK_STEPS * step_s(result))
    assert result.steps and result.steps >= 1
    # Lava's build/compile/start (~0.5 s) is the load, outside the clock.
    assert result.load_s is not None and result.load_s > 0


@needs_lava
def test_loihi2_refuses_a_timeout_shorter_than_one_step(loihi2: QuboSut) -> None:
    with pytest.raises(DutError, match=r"shorter than one step \(\d+ us on this graph\)"):
        loihi2.solve(20e-6, 0)
