"""QUBO workloads against independent constructions: networkx's graphs and its adjacency matrix."""

from __future__ import annotations

import numpy as np
import pytest

from protocols.dut.codec import decode_qubo, encode_qubo, qubo_cost
from rig.errors import RigError
from rig.qubo import workloads
from rig.qubo.workloads import (
    DENSITIES,
    WORKLOAD_SIZES,
    Workload,
    WorkloadError,
    cost,
    dense_q,
    edge_count,
    gap,
    generate,
    qubo_terms,
)


def networkx_edges(nodes: int, density: float, seed: int) -> np.ndarray:
    """NeuroBench's own construction, straight from networkx."""
    import networkx as nx  # here, not at collection: every xdist worker would import it

    graph = nx.gnm_random_graph(nodes, int(0.5 * density * nodes**2), seed=seed)
    pairs = sorted((min(u, v), max(u, v)) for u, v in graph.edges())
    return np.array(pairs, dtype=np.int64).reshape(-1, 2)


def networkx_q(nodes: int, density: float, seed: int) -> np.ndarray:
    """Q from networkx's adjacency matrix: 4 * A with -1 on the diagonal."""
    import networkx as nx

    graph = nx.gnm_random_graph(nodes, int(0.5 * density * nodes**2), seed=seed)
    adjacency = nx.to_numpy_array(graph, nodelist=range(nodes), dtype=np.int64)
    return 4 * adjacency - np.eye(nodes, dtype=np.int64)


# Small and medium graphs, densities of the benchmark and beyond (0.99 and 1.0 reach or pass the
# complete-graph edge count), and node counts on both sides of a power of two (the rejection
# sampling of random.choice depends on n.bit_length()).
CASES = [
    (n, d, s)
    for n in (1, 2, 3, 7, 10, 25, 50, 63, 64, 65, 100, 250)
    for d in (0.0, 0.01, 0.05, 0.10, 0.25, 0.5, 0.99, 1.0)
    for s in (0, 1, 4)
]


@pytest.mark.parametrize(("nodes", "density", "seed"), CASES)
def test_edges_are_networkx_edges(nodes: int, density: float, seed: int) -> None:
    w = generate(nodes, density, seed)
    expected = networkx_edges(nodes, density, seed)
    assert w.edges.dtype == np.int32
    np.testing.assert_array_equal(w.edges, expected)
    assert w.n_edges == min(edge_count(nodes, density), nodes * (nodes - 1) // 2)


@pytest.mark.parametrize(("nodes", "density", "seed"), [(500, 0.05, 3), (1000, 0.25, 2),
                                                         (333, 0.9, 11), (2000, 0.01, 12345)])
def test_medium_and_odd_seeds_match_networkx(nodes: int, density: float, seed: int) -> None:
    np.testing.assert_array_equal(generate(nodes, density, seed).edges,
                                  networkx_edges(nodes, density, seed))


def test_large_sparse_graph_matches_networkx() -> None:
    w = generate(10000, 0.01, 0)
    assert w.n_edges == 500_000
    np.testing.assert_array_equal(w.edges, networkx_edges(10000, 0.01, 0))


def test_short_first_estimate_draws_more(monkeypatch: pytest.MonkeyPatch) -> None:
    # Force the top-up path: a one-word batch cap and a log that underestimates the draws.
    monkeypatch.setattr(workloads, "_WORDS_PER_BATCH", 7)
    real_log = workloads.math.log
    monkeypatch.setattr(workloads.math, "log", lambda x: real_log(x) * 0.5)
    np.testing.assert_array_equal(generate(60, 0.25, 2).edges, networkx_edges(60, 0.25, 2))


@pytest.mark.parametrize(("nodes", "density", "seed"), [(10, 0.25, 0), (25, 0.1, 3),
                                                         (50, 0.05, 1), (40, 1.0, 0)])
def test_dense_q_is_networkx_adjacency(nodes: int, density: float, seed: int) -> None:
    q = dense_q(generate(nodes, density, seed))
    assert q.dtype == np.int8
    np.testing.assert_array_equal(q, networkx_q(nodes, density, seed))


@pytest.mark.parametrize(("nodes", "density", "seed"), [(10, 0.25, 0), (50, 0.10, 2),
                                                         (100, 0.05, 4), (30, 1.0, 1)])
def test_cost_is_xtqx(nodes: int, density: float, seed: int) -> None:
    w = generate(nodes, density, seed)
    q = networkx_q(nodes, density, seed)
    rng = np.random.default_rng(seed)
    xs = rng.integers(0, 2, size=(200, nodes))
    expected = np.einsum("ki,ij,kj->k", xs, q, xs)
    np.testing.assert_array_equal(cost(w, xs), expected)  # (k, n) at once
    np.testing.assert_array_equal(cost(w, xs.astype(bool)), expected)
    assert [cost(w, x) for x in xs[:5]] == list(expected[:5])  # (n,) gives a Python int
    assert isinstance(cost(w, xs[0]), int)


def test_cost_blocks_rows_without_changing_results(monkeypatch: pytest.MonkeyPatch) -> None:
    w = generate(100, 0.25, 0)
    xs = np.random.default_rng(1).integers(0, 2, size=(37, 100))
    whole = cost(w, xs)
    monkeypatch.setattr(workloads, "_COST_BLOCK", 1)  # one row per block
    np.testing.assert_array_equal(cost(w, xs), whole)


def test_cost_closed_forms() -> None:
    w = generate(10, 1.0, 0)  # complete graph K10: 45 edges
    assert w.n_edges == 45
    assert cost(w, np.zeros(10, dtype=int)) == 0
    assert cost(w, np.eye(10, dtype=int)[3]) == -1  # one node: the diagonal only
    assert cost(w, np.ones(10, dtype=int)) == -10 + 8 * 45
    empty = generate(10, 0.0, 0)
    assert empty.n_edges == 0
    assert cost(empty, np.ones(10, dtype=int)) == -10


def test_qubo_terms_reproduce_cost_and_encode() -> None:
    w = generate(50, 0.10, 1)
    terms = qubo_terms(w)
    assert terms.dtype == np.int64 and terms.shape == (50 + w.n_edges, 3)
    assert np.all(terms[:, 0] <= terms[:, 1])
    assert set(terms[terms[:, 0] == terms[:, 1], 2]) == {-1}
    assert set(terms[terms[:, 0] < terms[:, 1], 2]) == {8}
    keys = terms[:, 0] * 50 + terms[:, 1]
    assert np.all(np.diff(keys) > 0)  # sorted by (i, j), no repeats
    xs = np.random.default_rng(0).integers(0, 2, size=(50, 50))
    assert [qubo_cost(terms, x) for x in xs] == list(cost(w, xs))
    n_vars, decoded = decode_qubo(encode_qubo(50, terms))  # what qload carries
    assert n_vars == 50
    np.testing.assert_array_equal(np.asarray(decoded, dtype=np.int64).reshape(-1, 3), terms)


def test_gap_sign_and_value() -> None:
    assert gap(-44, -44) == 0.0
    assert gap(-40, -44) == pytest.approx(4 / 44)  # worse: positive
    assert gap(-45, -44) == pytest.approx(-1 / 44)  # better than the BKS: negative
    assert gap(0, -10) == 1.0
    with pytest.raises(RigError, match="non-zero target"):
        gap(-3, 0)


def test_workload_is_sparse_and_read_only() -> None:
    w = generate(1000, 0.01, 0)
    assert w.edges.nbytes == w.n_edges * 8
    with pytest.raises(ValueError):
        w.edges[0, 0] = 5
    assert w == generate(1000, 0.01, 0)
    assert w != generate(1000, 0.01, 1)
    assert hash(w) == hash(generate(1000, 0.01, 0))
    assert w.key == (1000, 0.01, 0)


def test_save_and_load_round_trip(tmp_path) -> None:
    w = generate(100, 0.05, 0)
    path = workloads.save(w, tmp_path / "w.npz")
    assert workloads.load(path) == w
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(WorkloadError, match="not a workload file"):
        workloads.load(tmp_path / "junk.npz")


@pytest.mark.parametrize(("nodes", "density", "seed", "match"), [
    (0, 0.1, 0, "nodes"), (-5, 0.1, 0, "nodes"), (2.5, 0.1, 0, "nodes"), (True, 0.1, 0, "nodes"),
    (10, -0.1, 0, "density"), (10, 1.5, 0, "density"), (10, float("nan"), 0, "density"),
    (10, 0.1, -1, "seed"), (10, 0.1, 1.0, "seed"),
])
def test_bad_parameters_are_refused(nodes, density, seed, match: str) -> None:
    with pytest.raises(WorkloadError, match=match) as info:
        generate(nodes, density, seed)
    assert info.value.exit_code == 2 and info.value.hint


def test_limits_are_refused_with_hints(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads, "MAX_DENSE_NODES", 50)
    with pytest.raises(WorkloadError, match="dense Q") as info:
        dense_q(generate(51, 0.01, 0))
    assert "edges" in info.value.hint
    monkeypatch.setattr(workloads, "MAX_EDGES", 1000)
    with pytest.raises(WorkloadError, match="edges"):
        generate(100, 0.25, 0)  # 1250 edges


def test_bad_states_and_edges_are_refused() -> None:
    w = generate(10, 0.25, 0)
    with pytest.raises(WorkloadError, match="shape"):
        cost(w, np.zeros(9))
    with pytest.raises(WorkloadError, match="0 and 1"):
        cost(w, np.full(10, 2))
    with pytest.raises(WorkloadError, match="i < j"):
        Workload(3, 1.0, 0, np.array([[1, 0]]))
    with pytest.raises(WorkloadError, match="sorted"):
        Workload(3, 1.0, 0, np.array([[1, 2], [0, 1]]))


def test_benchmark_grid() -> None:
    assert WORKLOAD_SIZES[:9] == (10, 25, 50, 100, 250, 500, 1000, 2500, 5000)
    assert WORKLOAD_SIZES[-1] == 100000
    assert DENSITIES == (0.01, 0.05, 0.10, 0.25)
