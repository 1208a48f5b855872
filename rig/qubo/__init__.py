"""The QUBO benchmark (NeuroBench MIS workloads): workloads, SUTs, procedures and sweeps.

- `workloads`: the Maximum Independent Set graphs and their QUBO cost (re-exported here).
- `targets`: best-known target costs; `tuning`: a SUT's hyperparameters (`rig qubo tune`).
- `suts`: the systems under test behind one interface (their events are in `rig.run.events`).
- `procedure`: fixed-timeout, time-to-solution and maximum workload size.
- `sweep`: overnight sweeps, resumable, one run folder, and their summary.

Above `run`, which it imports (with `bench`); `report`, `mqtt`, `cluster`, `model`, `commands`
and gui may import it.
"""

from rig.qubo.workloads import (
    DENSITIES,
    WORKLOAD_SIZES,
    Workload,
    WorkloadError,
    cost,
    dense_q,
    gap,
    generate,
    qubo_terms,
)

__all__ = [
    "DENSITIES",
    "WORKLOAD_SIZES",
    "Workload",
    "WorkloadError",
    "cost",
    "dense_q",
    "gap",
    "generate",
    "qubo_terms",
]
