"""QUBO rig overhead per fixed-timeout point; with --recompute-targets, the time to recompute the
table's targets too.

Prints `name value` lines:
- `ft_overhead_<timeout>s`: (wall time of the whole fixed-timeout point - timeout) / timeout for
  cpu-tabu on the (100, 0.05, 0) workload, the graph loaded before (the spec's clock starts
  after the load); median of a few points; goal < 0.01 at 0.1 s and above; takes ~15 s;
- per SUT (cpu-tabu, cpu-sa, loihi2 when .venv-lava exists), on (100, 0.05, 0) with a 1 s timeout,
  median over solver seeds 0-2: `solve_over_timeout_<sut>_1s` (the SUT's reported solve time /
  timeout; goal within 2% or one step of 1), `gap_<sut>_1s` (BKS gap against the table's -44) and
  `load_s_<sut>` (the load before the clock: Loihi 2 builds and starts a network per solve);
  takes ~15 s;
- only with `--recompute-targets` (minutes: every row solved from scratch, so not part of the
  default `make bench`): `recompute_targets_rows` and `recompute_targets_s`, the wall time of
  rig.qubo.targets.recompute_targets(max_nodes=250), which recomputes every table row up to 250
  nodes without the table.
"""

from __future__ import annotations

import statistics
import sys
import time

from rig.qubo.procedure import NoPower, fixed_timeout_point
from rig.qubo.suts import LAVA_PYTHON, LOIHI2_SHIM, CpuSut, open_sut
from rig.qubo.workloads import generate

TIMEOUTS = (0.01, 0.1, 1.0)
REPEATS = 5
SUTS = ("cpu-tabu", "cpu-sa", "loihi2")
BUDGET_TIMEOUT_S = 1.0
BUDGET_SEEDS = (0, 1, 2)


class _Target:
    cost = -44  # the table's target for (100, 0.05, 0)
    method = "table"


def ft_overhead() -> None:
    """Overhead per FT point at each timeout, as a fraction of the timeout."""
    workload = generate(100, 0.05, 0)
    with CpuSut("cpu-tabu") as sut:
        sut.load(workload)
        for timeout in TIMEOUTS:
            fractions = []
            for seed in range(REPEATS):
                t0 = time.perf_counter()
                fixed_timeout_point(sut, workload, timeout, seed, _Target(),
                                    NoPower("not measured in this benchmark"))
                fractions.append((time.perf_counter() - t0 - timeout) / timeout)
            print(f"ft_overhead_{timeout:g}s {statistics.median(fractions):.5f}", flush=True)


def sut_budget() -> None:
    """Per SUT: reported solve time / timeout, gap and load at 1 s on (100, 0.05, 0)."""
    workload = generate(100, 0.05, 0)
    t = f"{BUDGET_TIMEOUT_S:g}s"
    for name in SUTS:
        if name == "loihi2" and not (LAVA_PYTHON.exists() and LOIHI2_SHIM.exists()):
            print(f"solve_over_timeout_{name}_{t} skipped (no .venv-lava: make lava-env)")
            continue
        with open_sut(name) as sut:
            sut.load(workload)
            points = [fixed_timeout_point(sut, workload, BUDGET_TIMEOUT_S, seed, _Target(),
                                          NoPower("not measured in this benchmark"))
                      for seed in BUDGET_SEEDS]
        ratios = [p["elapsed_s"] / BUDGET_TIMEOUT_S for p in points]
        loads = [p["load_s"] for p in points if p["load_s"] is not None]
        print(f"solve_over_timeout_{name}_{t} {statistics.median(ratios):.4f}")
        print(f"gap_{name}_{t} {statistics.median(p['gap'] for p in points):.4f}")
        if loads:
            print(f"load_s_{name} {statistics.median(loads):.3f}", flush=True)


def targets_time() -> None:
    """Wall time to recompute the table's targets for n <= 250."""
    from rig.qubo.targets import recompute_targets

    t0 = time.perf_counter()
    rows = recompute_targets(max_nodes=250)
    print(f"recompute_targets_rows {len(rows)}")
    print(f"recompute_targets_s {time.perf_counter() - t0:.1f}", flush=True)


if __name__ == "__main__":  # the worker is spawned: it must not run this again
    ft_overhead()
    sut_budget()
    if "--recompute-targets" in sys.argv:
        targets_time()
    else:
        print("recompute_targets skipped (pass --recompute-targets: takes minutes)")
