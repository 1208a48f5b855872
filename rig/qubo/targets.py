"""Target costs (best-known solutions) of the NeuroBench QUBO workloads.

Three sources, in the order `bks` tries them: the official table shipped as package data
(`data/qubo_default_config.csv`, NeuroBench's targets up to 5000 nodes), the exact optimum below
50 nodes (an integer program on the MIS: maximise sum x subject to x_i + x_j <= 1 per edge,
solved by HiGHS through scipy), and D-Wave's tabu sampler with NeuroBench's 100 reads and 50
restarts above. For an MIS QUBO the optimal cost is -|maximum independent set|.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal, NamedTuple

import numpy as np

from rig.errors import AnalysisError
from rig.qubo.workloads import Workload, WorkloadError, cost, generate

#: Below this many nodes the target is the exact optimum (NeuroBench's rule).
EXACT_BELOW = 50
#: NeuroBench's tabu settings for the targets above EXACT_BELOW nodes.
TABU_READS = 100
TABU_RESTARTS = 50
TABLE_FILE = "qubo_default_config.csv"

Method = Literal["table", "exact", "tabu"]


@dataclass
class Target:
    """A target cost, where it came from, and the state reaching it (None from the table)."""

    cost: int
    method: Method
    state: np.ndarray | None = None


class TableRow(NamedTuple):
    """One row of the official targets table."""

    nodes: int
    density: float
    seed: int
    cost: int


@lru_cache(maxsize=1)
def rows() -> tuple[TableRow, ...]:
    """The official table's rows, in file order."""
    text = resources.files("rig.qubo").joinpath("data", TABLE_FILE).read_text()
    out = []
    for line, record in enumerate(csv.DictReader(text.splitlines()), start=2):
        try:
            out.append(TableRow(int(record["num_vertices"]), float(record["density"]),
                                int(record["random_seed"]), int(record["c_optimal"])))
        except (KeyError, TypeError, ValueError) as exc:
            raise AnalysisError(f"{TABLE_FILE} line {line}: unreadable row {record}",
                                hint="restore the file from the NeuroBench system track") from exc
    return tuple(out)


def table() -> dict[tuple[int, float, int], int]:
    """{(nodes, density, seed): target cost} from the official table (a fresh dict)."""
    return {(r.nodes, r.density, r.seed): r.cost for r in rows()}


def _mis_state(workload: Workload, chosen: np.ndarray) -> np.ndarray:
    state = np.zeros(workload.nodes, dtype=bool)
    state[chosen] = True
    return state


def exact(workload: Workload, *, time_limit_s: float = 600.0) -> Target:
    """The optimal cost (-|maximum independent set|) and a state reaching it.

    An integer program solved to proven optimality by HiGHS; it takes milliseconds below 50
    nodes. `time_limit_s` bounds larger graphs: past it, an AnalysisError (not a guess).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csr_array

    n, m = workload.nodes, workload.n_edges
    if m == 0:  # every node is independent
        state = np.ones(n, dtype=bool)
        return Target(cost=-n, method="exact", state=state)
    rows_ = np.repeat(np.arange(m), 2)
    conflicts = csr_array((np.ones(2 * m), (rows_, workload.edges.reshape(-1))), shape=(m, n))
    result = milp(
        c=-np.ones(n),  # milp minimises: -|set|
        constraints=LinearConstraint(conflicts, -np.inf, 1.0),
        integrality=np.ones(n),
        bounds=Bounds(0.0, 1.0),
        options={"time_limit": float(time_limit_s)},
    )
    if result.status != 0 or result.x is None:
        raise AnalysisError(
            f"the exact MIS of {workload!r} was not proven within {time_limit_s} s "
            f"(HiGHS: {result.message})",
            hint="use tabu() for graphs this large",
        )
    state = np.round(result.x).astype(bool)
    value = cost(workload, state)
    if value != round(result.fun):  # an independent set costs exactly -|set|
        raise AnalysisError(f"HiGHS returned a state of cost {value}, not {result.fun:.0f}",
                            hint="report this: the MIS solution is not independent")
    return Target(cost=int(value), method="exact", state=state)


def tabu(
    workload: Workload,
    reads: int = TABU_READS,
    restarts: int = TABU_RESTARTS,
    seed: int = 0,
) -> Target:
    """Best of D-Wave's tabu sampler on the workload's QUBO (NeuroBench: 100 reads, 50 restarts).

    Each read runs until its restarts are spent (no per-read time limit), as NeuroBench's
    target script does; deterministic for a given seed.
    """
    import dimod
    from dwave.samplers import TabuSampler

    if reads < 1 or restarts < 0:
        raise WorkloadError(f"tabu needs reads >= 1 and restarts >= 0, got {reads}, {restarts}",
                            hint="NeuroBench uses 100 reads and 50 restarts")
    n = workload.nodes
    i, j = workload.edges[:, 0], workload.edges[:, 1]
    bqm = dimod.BinaryQuadraticModel.from_numpy_vectors(
        np.full(n, -1.0), (i, j, np.full(workload.n_edges, 8.0)), 0.0, dimod.BINARY,
        variable_order=range(n),
    )
    # dwave-samplers 1.x annotates timeout as int, yet its sample() takes None: no time limit
    sampleset = TabuSampler().sample(bqm, num_reads=reads, num_restarts=restarts, seed=seed,
                                     timeout=None)  # type: ignore[arg-type]
    samples = np.asarray(sampleset.record.sample)
    order = np.asarray(list(sampleset.variables), dtype=np.int64)
    states = np.zeros((len(samples), n), dtype=bool)
    states[:, order] = samples.astype(bool)
    costs = np.asarray(cost(workload, states))  # exact integers, not the sampler's floats
    best = int(np.argmin(costs))
    return Target(cost=int(costs[best]), method="tabu", state=states[best])


def bks(nodes: int, density: float, seed: int, *, use_table: bool = True) -> Target:
    """The workload's target: the table's entry, else exact below 50 nodes, else tabu."""
    if use_table:
        found = table().get((int(nodes), float(density), int(seed)))
        if found is not None:
            generate(nodes, density, seed)  # still refuse bad parameters the same way
            return Target(cost=found, method="table", state=None)
    workload = generate(nodes, density, seed)
    if workload.nodes < EXACT_BELOW:
        return exact(workload)
    return tabu(workload)


def recompute_targets(
    max_nodes: int = 250,
    *,
    progress: Callable[[TableRow, Target, float], None] | None = None,
) -> list[tuple[TableRow, Target, float]]:
    """Recompute every table row up to `max_nodes` without the table: (row, target, seconds).

    Seconds are host wall time for the computation (a benchmark figure, not a measurement).
    """
    out = []
    for row in rows():
        if row.nodes > max_nodes:
            continue
        start = time.perf_counter()
        target = bks(row.nodes, row.density, row.seed, use_table=False)
        seconds = time.perf_counter() - start
        out.append((row, target, seconds))
        if progress is not None:
            progress(row, target, seconds)
    return out
