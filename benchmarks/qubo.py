"""QUBO rig overhead per fixed-timeout point; with --recompute-targets, the time to recompute the
table's targets too.

Prints `name value` lines:
- `ft_overhead_<timeout>s`: (wall time of the whole fixed-timeout point - timeout) / timeout for
  cpu-tabu on the (100, 0.05, 0) workload, the graph loaded before (the spec's clock starts
  after the load); median of a few points; goal < 0.01 at 0.1 s and above; takes ~15 s;
- only with `--recompute-targets` (minutes: every row solved from scratch, so not part of the
  default `make bench`): `recompute_targets_rows` and `recompute_targets_s`, the wall time of
  rig.qubo.targets.recompute_targets(max_nodes=250), which recomputes every table row up to 250
  nodes without the table.
"""

from __future__ import annotations

import statistics
import sys
import time

from rig.procedures.qubo import NoPower, fixed_timeout_point
from rig.qubo.suts import CpuSut
from rig.qubo.workloads import generate

TIMEOUTS = (0.01, 0.1, 1.0)
REPEATS = 5


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


def targets_time() -> None:
    """Wall time to recompute the table's targets for n <= 250."""
    from rig.qubo.targets import recompute_targets

    t0 = time.perf_counter()
    rows = recompute_targets(max_nodes=250)
    print(f"recompute_targets_rows {len(rows)}")
    print(f"recompute_targets_s {time.perf_counter() - t0:.1f}", flush=True)


if __name__ == "__main__":  # the worker is spawned: it must not run this again
    ft_overhead()
    if "--recompute-targets" in sys.argv:
        targets_time()
    else:
        print("recompute_targets skipped (pass --recompute-targets: takes minutes)")
