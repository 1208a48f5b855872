"""NeuroBench QUBO workloads: Maximum Independent Set on G(n, m) random graphs.

A workload (nodes, density, seed) is the graph ``networkx.gnm_random_graph(n, m, seed=seed)``
with ``m = int(0.5 * density * n**2)``, and its QUBO matrix Q has -1 on the diagonal and 4 on
each edge in both triangles, so cost(x) = x^T Q x = -sum(x) + 8 * (edges with both ends in x).

The edge set is built here without a networkx Graph (which needs ~1 kB per edge: too much for
100000 nodes at 1%), by replaying networkx's own draws: networkx picks u and v with
``random.Random(seed).choice``, which for a list of n < 2**32 items takes the top
``n.bit_length()`` bits of one Mersenne-Twister word and rejects values >= n. numpy's MT19937,
started from the same state, yields the same words, so the candidate pairs can be computed in
bulk; the graph is then the first m distinct pairs that are not self-loops, which is exactly what
networkx's loop keeps. The tests check the edge sets against networkx for many (n, m, seed).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rig.errors import AnalysisError, RigError

#: The NeuroBench node counts (the pattern continues past the official table's 5000).
WORKLOAD_SIZES = (10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000)
#: The NeuroBench edge densities.
DENSITIES = (0.01, 0.05, 0.10, 0.25)

#: Largest n for which a dense Q is built (int8: 400 MB at 20000 nodes).
MAX_DENSE_NODES = 20000
#: Largest edge count generated: the edge array is 8 bytes per edge and generation needs about
#: three times that at its peak, so 2e8 edges stay within a few GB.
MAX_EDGES = 200_000_000
#: Mersenne-Twister words drawn per numpy call while replaying networkx (bounds temporaries).
_WORDS_PER_BATCH = 1 << 23
#: Bound on state-by-edge temporaries in cost() (elements).
_COST_BLOCK = 1 << 24


class WorkloadError(RigError):
    """A workload that cannot be built or used as asked (bad nodes, density, seed or state)."""


@dataclass(frozen=True, eq=False)
class Workload:
    """One MIS QUBO workload: its parameters and its edges (no dense matrix is kept).

    `edges` is an (m, 2) int32 array of pairs i < j, sorted by (i, j), read-only.
    """

    nodes: int
    density: float
    seed: int
    edges: np.ndarray

    def __post_init__(self) -> None:
        edges = np.asarray(self.edges)
        if edges.ndim != 2 or edges.shape[1] != 2 or not np.issubdtype(edges.dtype, np.integer):
            raise WorkloadError(
                f"workload edges must be an (m, 2) integer array, got shape {edges.shape} "
                f"of {edges.dtype}",
                hint="build workloads with rig.qubo.generate()",
            )
        if len(edges):
            i, j = edges[:, 0].astype(np.int64), edges[:, 1].astype(np.int64)
            if i.min() < 0 or j.max() >= self.nodes or np.any(i >= j):
                raise WorkloadError(
                    f"workload edges must satisfy 0 <= i < j < {self.nodes}",
                    hint="build workloads with rig.qubo.generate()",
                )
            keys = i * self.nodes + j
            if np.any(np.diff(keys) <= 0):
                raise WorkloadError(
                    "workload edges must be sorted by (i, j) without repeats",
                    hint="build workloads with rig.qubo.generate()",
                )
        # A read-only view: callers' arrays keep their flags, nobody edits the graph in place.
        view = edges.astype(np.int32, copy=False).view()
        view.flags.writeable = False
        object.__setattr__(self, "edges", view)

    @property
    def n_edges(self) -> int:
        """Number of edges m."""
        return int(self.edges.shape[0])

    @property
    def key(self) -> tuple[int, float, int]:
        """(nodes, density, seed), the key of the targets table."""
        return (self.nodes, self.density, self.seed)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Workload):
            return NotImplemented
        return self.key == other.key and np.array_equal(self.edges, other.edges)

    def __hash__(self) -> int:
        return hash((self.key, self.n_edges))

    def __repr__(self) -> str:
        return (f"Workload(nodes={self.nodes}, density={self.density}, seed={self.seed}, "
                f"n_edges={self.n_edges})")


def edge_count(nodes: int, density: float) -> int:
    """m as NeuroBench asks networkx for it: int(0.5 * density * nodes**2)."""
    return int(0.5 * density * nodes**2)


def _check_parameters(nodes: int, density: float, seed: int) -> None:
    if isinstance(nodes, bool) or not isinstance(nodes, int | np.integer) or nodes < 1:
        raise WorkloadError(f"nodes={nodes!r} is not a positive whole number",
                            hint="use e.g. --nodes 100")
    if nodes >= 2**31:
        raise WorkloadError(f"nodes={nodes} is too large (edges are int32)",
                            hint="use fewer than 2**31 nodes")
    if isinstance(density, bool) or not isinstance(density, int | float | np.number) or not (
        math.isfinite(density) and 0.0 <= density <= 1.0
    ):
        raise WorkloadError(f"density={density!r} is not a fraction between 0 and 1",
                            hint="use e.g. --density 0.05 (1.0 is a complete graph)")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise WorkloadError(f"seed={seed!r} is not a non-negative whole number",
                            hint="NeuroBench tuning seeds are 0, 1, 2, 3, 4")


def generate(nodes: int, density: float, seed: int) -> Workload:
    """The NeuroBench workload: the edges of networkx.gnm_random_graph(n, m, seed=seed)."""
    _check_parameters(nodes, density, seed)
    n, density, seed = int(nodes), float(density), int(seed)
    m = edge_count(n, density)
    if n == 1:  # networkx returns the empty graph before anything else
        edges = np.empty((0, 2), dtype=np.int32)
    elif m >= n * (n - 1) / 2.0:  # networkx: complete graph once m reaches the pair count
        _check_edge_budget(n, n * (n - 1) // 2, density)
        i, j = np.triu_indices(n, k=1)
        edges = np.column_stack((i, j)).astype(np.int32)
    elif m == 0:
        edges = np.empty((0, 2), dtype=np.int32)
    else:
        _check_edge_budget(n, m, density)
        edges = _gnm_edges(n, m, seed)
    return Workload(nodes=n, density=density, seed=seed, edges=edges)


def _check_edge_budget(n: int, m: int, density: float) -> None:
    if m > MAX_EDGES:
        raise WorkloadError(
            f"{n} nodes at density {density} has {m} edges, more than the rig generates "
            f"({MAX_EDGES})",
            hint="use fewer nodes or a lower density",
        )


def _gnm_edges(n: int, m: int, seed: int) -> np.ndarray:
    """First m distinct non-loop pairs of networkx's (u, v) draws, as sorted (i < j) rows."""
    bits = n.bit_length()  # random.Random._randbelow: getrandbits(k) with k = n.bit_length()
    shift = np.uint64(32 - bits)  # getrandbits(k <= 32) keeps the top k bits of one word
    state = random.Random(seed).getstate()[1]
    generator = np.random.MT19937()
    generator.state = {
        "bit_generator": "MT19937",
        "state": {"key": np.array(state[:624], dtype=np.uint32), "pos": int(state[624])},
    }
    pairs_total = n * (n - 1) // 2
    # Expected draws to see m distinct pairs out of M (coupon collector), then the words that
    # gives after self-loops (1/n of pairs) and rejections (values >= n) are thrown away.
    pairs_wanted = pairs_total * (math.log(pairs_total + 0.5) - math.log(pairs_total - m + 0.5))
    words = int(2 * pairs_wanted * 1.01 / (1 - 1 / n) / (n / 2**bits)) + 64

    keys: list[np.ndarray] = []
    carry = np.empty(0, dtype=np.int64)  # an unpaired u waiting for its v in the next batch
    drawn_pairs = 0
    while True:
        while words > 0:
            batch = min(words, _WORDS_PER_BATCH)
            words -= batch
            values = (generator.random_raw(batch) >> shift).astype(np.int64)
            values = np.concatenate((carry, values[values < n]))
            usable = len(values) - len(values) % 2
            carry = values[usable:]
            u, v = values[0:usable:2], values[1:usable:2]
            loop_free = u != v
            u, v = u[loop_free], v[loop_free]
            keys.append(np.minimum(u, v) * n + np.maximum(u, v))
            drawn_pairs += len(u)
        stream = np.concatenate(keys)
        keys = [stream]
        unique, first = np.unique(stream, return_index=True)
        if len(unique) >= m:
            break
        # Short of m (the estimate is a mean): draw about what the missing edges need, again.
        missing = m - len(unique)
        per_new = drawn_pairs / max(len(unique), 1)
        words = int(2 * missing * per_new * 1.2 / (1 - 1 / n) / (n / 2**bits)) + 1024
    # The m pairs whose first appearance comes earliest are the ones networkx added.
    cutoff = np.partition(first, m - 1)[m - 1]
    chosen = unique[first <= cutoff]  # np.unique sorts: i-major, so rows come out sorted
    return np.column_stack((chosen // n, chosen % n)).astype(np.int32)


def _states(workload: Workload, x: np.ndarray | list) -> np.ndarray:
    """x as a bool array of shape (n,) or (k, n), checked."""
    arr = np.asarray(x)
    if arr.ndim not in (1, 2) or arr.shape[-1] != workload.nodes:
        raise WorkloadError(
            f"a state must have shape ({workload.nodes},) or (k, {workload.nodes}), "
            f"got {arr.shape}",
            hint="one 0/1 entry per node",
        )
    if arr.dtype != np.bool_:
        if arr.size and not np.all((arr == 0) | (arr == 1)):
            raise WorkloadError("a state must hold only 0 and 1", hint="x is binary")
        arr = arr.astype(bool)
    return arr


def cost(workload: Workload, x: np.ndarray | list) -> int | np.ndarray:
    """x^T Q x for x of shape (n,) (an int) or (k, n) (an int64 array of k costs)."""
    arr = _states(workload, x)
    states = arr.reshape(-1, workload.nodes)
    i, j = workload.edges[:, 0], workload.edges[:, 1]
    picked = np.count_nonzero(states, axis=1).astype(np.int64)
    conflicts = np.empty(len(states), dtype=np.int64)
    rows = max(1, _COST_BLOCK // max(1, workload.n_edges))  # keep rows x edges temporaries small
    for start in range(0, len(states), rows):
        block = states[start : start + rows]
        conflicts[start : start + rows] = np.count_nonzero(block[:, i] & block[:, j], axis=1)
    costs = 8 * conflicts - picked
    return int(costs[0]) if arr.ndim == 1 else costs


def dense_q(workload: Workload) -> np.ndarray:
    """The (n, n) int8 Q matrix: -1 on the diagonal, 4 at (i, j) and (j, i) for each edge."""
    if workload.nodes > MAX_DENSE_NODES:
        raise WorkloadError(
            f"a dense Q of {workload.nodes} nodes would take {workload.nodes**2 / 1e9:.1f} GB",
            hint=f"dense Q is built up to {MAX_DENSE_NODES} nodes; use the workload's edges "
            "(or qubo_terms, or a .npz file) instead",
        )
    q = np.zeros((workload.nodes, workload.nodes), dtype=np.int8)
    np.fill_diagonal(q, -1)
    i, j = workload.edges[:, 0], workload.edges[:, 1]
    q[i, j] = 4
    q[j, i] = 4
    return q


def qubo_terms(workload: Workload) -> np.ndarray:
    """(t, 3) int64 rows (i, j, w), i <= j, sorted by (i, j): w = -1 for i == j, 8 per edge.

    The upper-triangle form of the DUT protocol's ``qload`` (an off-diagonal term carries
    Q_ij + Q_ji); t = n + m.
    """
    n = workload.nodes
    diagonal = np.column_stack((np.arange(n), np.arange(n), np.full(n, -1)))
    edges = np.column_stack((workload.edges, np.full(workload.n_edges, 8)))
    terms = np.concatenate((diagonal, edges)).astype(np.int64)
    order = np.lexsort((terms[:, 1], terms[:, 0]))
    return terms[order]


def gap(cost: int | float, target: int | float) -> float:
    """BKS-gap (cost - target) / |target|: 0 at the target, positive when worse."""
    if target == 0:
        raise AnalysisError("a BKS-gap needs a non-zero target cost",
                            hint="MIS targets are negative; check the target's source")
    return float((cost - target) / abs(target))


def save(workload: Workload, path: str | Path) -> Path:
    """Write the workload as a sparse .npz (edges, nodes, density, seed); the path written."""
    path = Path(path)
    with path.open("wb") as f:  # a file object: np.savez would append .npz to other suffixes
        np.savez(f, edges=workload.edges, nodes=workload.nodes, density=workload.density,
                 seed=workload.seed)
    return path


def load(path: str | Path) -> Workload:
    """Read a workload written by save() (or `rig qubo generate --out X.npz`)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            return Workload(nodes=int(data["nodes"]), density=float(data["density"]),
                            seed=int(data["seed"]), edges=data["edges"])
    except (OSError, KeyError, ValueError) as exc:
        raise WorkloadError(f"{path}: not a workload file ({exc})",
                            hint="write one with `rig qubo generate --out FILE.npz`") from exc
