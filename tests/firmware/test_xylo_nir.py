"""NIR graphs for the Xylo Audio 2 shim (firmware/xylo/nir_graph.py).

The shipped ASC spec written as a NIR graph, read back with ``nir.read``, and mapped and
quantised by Rockpool for Xylo Audio 2 must be the same network: the same integer arrays, the
same XyloSim output spike counts on SYNTHETIC ASC test scenes (12 one-second slices, AFE
simulated, ~10 s), and the same scores from the shim started on the .nir file. Graphs Xylo cannot
hold are refused with a typed error naming the reason.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.requires import needs

pytest.importorskip("nir")  # imported below, at module level

import nir

from drivers.dut.client import DutClient
from drivers.process import ProcessTransport
from firmware.xylo.nir_graph import (
    FORMAT,
    NirGraphError,
    NirGraphTooLarge,
    UnsupportedNirNode,
    load_network,
    nir_to_spec,
    read_nir,
    write_nir,
)
from firmware.xylo.shim import class_scores, encode_raster
from firmware.xylo.spec import SpecError, XyloSpec, load_spec
from protocols.errors import ActionableError
from rig.model.xylo import run_xylo
from tests.scenes import afe_scenes

pytestmark = needs("rockpool", "xylosim")

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "firmware" / "xylo" / "shim.py"
MODEL = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
DT = 0.01


@pytest.fixture(scope="module")
def spec() -> XyloSpec:
    return load_spec(MODEL)


@pytest.fixture(scope="module")
def graph_path(spec: XyloSpec, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_nir(spec, tmp_path_factory.mktemp("nir") / "asc.nir")


@pytest.fixture(scope="module")
def from_graph(graph_path: Path) -> XyloSpec:
    return read_nir(graph_path)


@pytest.fixture(scope="module")
def rasters() -> np.ndarray:
    """12 SYNTHETIC test scenes (3 per class, the rig's test stream, seed 0) through the AFE
    (shared with test_xylo_model.py: tests/scenes.py)."""
    return afe_scenes(3)[0]


# -- the shipped model through NIR ---------------------------------------------------------------
def test_graph_read_back_with_nir_read_holds_the_spec(spec: XyloSpec, graph_path: Path) -> None:
    g = nir.read(graph_path)
    assert {k: type(v).__name__ for k, v in g.nodes.items()} == {
        "input": "Input", "w_in": "Linear", "hidden": "NIRGraph", "w_out": "Linear",
        "output_lif": "CubaLIF", "output": "Output"}
    assert g.edges == [("input", "w_in"), ("w_in", "hidden"), ("hidden", "w_out"),
                       ("w_out", "output_lif"), ("output_lif", "output")]
    hidden = g.nodes["hidden"]
    assert sorted(hidden.edges) == sorted([("input", "lif"), ("lif", "w_rec"), ("w_rec", "lif"),
                                           ("lif", "output")])
    assert g.metadata["format"] == FORMAT and float(g.metadata["dt"]) == DT
    assert g.metadata["model_id"] == spec.model_id
    assert json.loads(g.metadata["class_names"]) == list(spec.class_names)
    a = spec.arrays
    np.testing.assert_array_equal(g.nodes["w_in"].weight, a["weights_in"][:, :, 0].T)
    np.testing.assert_array_equal(hidden.nodes["w_rec"].weight, a["weights_rec"][:, :, 0].T)
    np.testing.assert_array_equal(g.nodes["w_out"].weight, a["weights_out"].T)
    lif, out = hidden.nodes["lif"], g.nodes["output_lif"]
    # dash_mem 3, dash_syn 1 (hidden); dash_mem_out 10, dash_syn_out 1: tau = dt * 2**dash, and
    # r = tau_mem / dt, w_in = tau_syn / dt (unit gain per step under forward Euler).
    np.testing.assert_allclose(lif.tau_mem, 0.08)
    np.testing.assert_allclose(lif.tau_syn, 0.02)
    np.testing.assert_array_equal(lif.r, 8.0)
    np.testing.assert_array_equal(lif.w_in, 2.0)
    np.testing.assert_allclose(out.tau_mem, 10.24)
    np.testing.assert_array_equal(out.r, 1024.0)
    np.testing.assert_array_equal(lif.v_threshold, a["threshold"])
    np.testing.assert_array_equal(out.v_threshold, a["threshold_out"])
    np.testing.assert_array_equal(lif.v_leak, 0.0)
    np.testing.assert_array_equal(lif.v_reset, 0.0)


def test_graph_maps_back_to_the_same_integers(spec: XyloSpec, from_graph: XyloSpec) -> None:
    for name, value in spec.arrays.items():
        assert from_graph.arrays[name].dtype == value.dtype, name
        np.testing.assert_array_equal(from_graph.arrays[name], value, err_msg=name)
    assert (from_graph.dt, from_graph.class_names, from_graph.model_id, from_graph.aliases) == (
        spec.dt, spec.class_names, spec.model_id, spec.aliases)
    assert from_graph.training == spec.training  # carried as JSON in the graph's metadata


def test_biases_survive_the_round_trip(spec: XyloSpec, tmp_path: Path) -> None:
    """The shipped model's biases are all 0; with biases set, v_leak = bias * 2**dash_mem out
    and bias = v_leak * dt / tau_mem back must give the same integers."""
    rng = np.random.default_rng(3)
    arrays = dict(spec.arrays)
    arrays["bias"] = rng.integers(-50, 50, spec.n_hidden).astype(spec.arrays["bias"].dtype)
    arrays["bias_out"] = np.array([5, -7, 3, 0][: spec.n_output] + [1] * max(0, spec.n_output - 4),
                                  dtype=spec.arrays["bias_out"].dtype)
    biased = dataclasses.replace(spec, arrays=arrays)
    back = read_nir(write_nir(biased, tmp_path / "biased.nir"))
    for name, value in arrays.items():
        np.testing.assert_array_equal(back.arrays[name], value, err_msg=name)
    assert np.count_nonzero(back.arrays["bias"]) > spec.n_hidden // 2


def test_a_spec_without_memory_is_refused_before_a_file_is_written(spec: XyloSpec,
                                                                    tmp_path: Path) -> None:
    arrays = dict(spec.arrays)
    arrays["dash_syn_out"] = np.zeros_like(spec.arrays["dash_syn_out"])
    with pytest.raises(NirGraphError, match="dash_syn_out = 0"):
        write_nir(dataclasses.replace(spec, arrays=arrays), tmp_path / "x.nir")
    assert not (tmp_path / "x.nir").exists()


def test_same_predictions_as_the_spec_on_synthetic_test_scenes(
        spec: XyloSpec, from_graph: XyloSpec, rasters: np.ndarray) -> None:
    counts, _ = run_xylo(spec, rasters)
    counts_nir, _ = run_xylo(from_graph, rasters)
    assert counts.sum() > 0, "the model must spike, else equal counts prove nothing"
    np.testing.assert_array_equal(counts_nir, counts)
    assert np.array_equal(counts_nir.argmax(axis=1), counts.argmax(axis=1))


def test_load_network_tells_the_two_files_apart(spec: XyloSpec, graph_path: Path,
                                                tmp_path: Path) -> None:
    renamed = tmp_path / "graph.npz"  # the HDF5 signature decides, not the name
    renamed.write_bytes(graph_path.read_bytes())
    assert load_network(renamed).model_id == spec.model_id
    assert load_network(MODEL).arrays["threshold"].tolist() == spec.arrays["threshold"].tolist()


@pytest.fixture(scope="module")
def client(graph_path: Path) -> Iterator[DutClient]:
    transport = ProcessTransport([sys.executable, str(SHIM), "--spec", str(graph_path)],
                                 name="xylo", cwd=REPO)
    dut = DutClient(transport, name="xylo shim (NIR)")
    try:
        dut.wait_for_boot(timeout_s=90)
        yield dut
    finally:
        dut.close()


def test_shim_on_the_nir_file_scores_like_the_spec(client: DutClient, spec: XyloSpec,
                                                   rasters: np.ndarray) -> None:
    assert client.identify().model == spec.model_id
    for raster in rasters[:2]:
        client.load(encode_raster(raster))
        result = client.infer(1, 0)
        counts, _ = run_xylo(spec, raster[None])
        assert [f"{v:.3f}" for v in result.results] == [
            f"{v:.3f}" for v in class_scores(counts)]
        # Xylo's time base: T steps x dt, in µs.
        assert result.elapsed_us == raster.shape[0] * 10_000


# -- small graphs: what maps and what is refused ------------------------------------------------
def cuba(n: int, *, tau_mem: float = 8 * DT, tau_syn: float = 2 * DT, threshold: float = 20.0,
         **extra: Any) -> Any:
    """A CubaLIF of `n` neurons with unit gain per step at DT."""
    params = {"tau_mem": np.full(n, tau_mem), "tau_syn": np.full(n, tau_syn),
              "r": np.full(n, tau_mem / DT), "w_in": np.full(n, tau_syn / DT),
              "v_leak": np.zeros(n), "v_threshold": np.full(n, threshold),
              "v_reset": np.zeros(n)}
    params.update(extra)
    return nir.CubaLIF(**params)


def chain(n_in: int = 4, hidden: tuple[int, ...] = (6,), n_out: int = 2, *, seed: int = 0,
          metadata: dict[str, Any] | None = None, recurrent: bool = True,
          out_node: Any = None, w_in_node: Any = None) -> Any:
    """Input -> Linear -> CubaLIF (recurrent) [-> Linear -> CubaLIF ...] -> Linear -> CubaLIF ->
    Output, flat (recurrence as an edge back into the layer)."""
    rng = np.random.default_rng(seed)
    nodes: dict[str, Any] = {"input": nir.Input(input_type={"input": np.array([n_in])})}
    edges: list[tuple[str, str]] = [("input", "w0")]
    sizes = [n_in, *hidden]
    for k, n in enumerate(hidden):
        nodes[f"w{k}"] = nir.Linear(weight=rng.normal(0.0, 1.0, (n, sizes[k])))
        nodes[f"h{k}"] = cuba(n)
        edges.append((f"w{k}", f"h{k}"))
        if recurrent:
            nodes[f"r{k}"] = nir.Linear(weight=0.1 * rng.normal(0.0, 1.0, (n, n)))
            edges += [(f"h{k}", f"r{k}"), (f"r{k}", f"h{k}")]
        edges.append((f"h{k}", f"w{k + 1}"))
    last = len(hidden)
    nodes[f"w{last}"] = nir.Linear(weight=rng.normal(0.5, 1.0, (n_out, hidden[-1])))
    nodes["out"] = out_node if out_node is not None else cuba(n_out)
    nodes["output"] = nir.Output(output_type={"output": np.array([n_out])})
    if w_in_node is not None:
        nodes["w0"] = w_in_node
    edges += [(f"w{last}", "out"), ("out", "output")]
    return nir.NIRGraph(nodes=nodes, edges=edges, type_check=False,
                        metadata={"dt": DT} if metadata is None else metadata)


def test_a_small_flat_graph_maps_with_its_recurrence() -> None:
    s = nir_to_spec(chain())
    assert (s.n_input, s.n_hidden, s.n_output, s.dt) == (4, 6, 2, DT)
    assert s.class_names == ("class0", "class1") and s.model_id == "nir-graph"
    assert np.count_nonzero(s.arrays["weights_rec"]) > 0
    assert s.arrays["dash_mem"].tolist() == [3] * 6 and s.arrays["dash_syn"].tolist() == [1] * 6
    # Per-channel quantisation: each hidden neuron's largest input weight becomes 127.
    w = np.concatenate([s.arrays["weights_in"][:, :, 0], s.arrays["weights_rec"][:, :, 0]])
    assert np.abs(w).max(axis=0).tolist() == [127] * 6


def test_two_hidden_layers_share_xylos_hidden_neurons() -> None:
    s = nir_to_spec(chain(hidden=(6, 5), recurrent=False))
    assert s.n_hidden == 11
    w_in, w_rec = s.arrays["weights_in"][:, :, 0], s.arrays["weights_rec"][:, :, 0]
    assert np.count_nonzero(w_in[:, 6:]) == 0  # the input feeds only the first layer
    assert np.count_nonzero(w_rec[:6, 6:]) > 0  # layer 1 -> layer 2 lies in the recurrent matrix
    assert np.count_nonzero(w_rec[:, :6]) == 0 and np.count_nonzero(w_rec[6:, :]) == 0


def test_edges_may_name_nodes_inside_a_nested_graph() -> None:
    """``hidden.lif`` in an outer edge is the node inside the subgraph, as in NIR's own files."""
    g = chain(recurrent=False)
    inner = nir.NIRGraph(nodes={"input": nir.Input(input_type={"input": np.array([6])}),
                                "lif": g.nodes.pop("h0"), "w_rec": nir.Linear(weight=np.eye(6)),
                                "output": nir.Output(output_type={"output": np.array([6])})},
                         edges=[("input", "lif"), ("lif", "w_rec"), ("w_rec", "lif"),
                                ("lif", "output")], type_check=False)
    g.nodes["hidden"] = inner
    g.edges = [("w0", "hidden.lif") if e == ("w0", "h0") else ("hidden", "w1")
               if e == ("h0", "w1") else e for e in g.edges]
    s = nir_to_spec(g)
    assert s.n_hidden == 6
    assert np.count_nonzero(s.arrays["weights_rec"][:, :, 0] - np.diag(
        np.diag(s.arrays["weights_rec"][:, :, 0]))) == 0  # the identity recurrence only
    assert np.all(np.diag(s.arrays["weights_rec"][:, :, 0]) > 0)


def test_dt_from_tau_mem_over_r_without_metadata() -> None:
    assert nir_to_spec(chain(metadata={})).dt == pytest.approx(DT)


def test_input_gain_scales_the_weights() -> None:
    """w_in and r are gains: doubling w_in and halving the weights is the same network."""
    base = chain()
    doubled = chain()
    half = doubled.nodes["w0"].weight / 2
    doubled.nodes["w0"] = nir.Linear(weight=half)
    doubled.nodes["r0"] = nir.Linear(weight=doubled.nodes["r0"].weight / 2)
    doubled.nodes["h0"] = cuba(6, w_in=np.full(6, 4.0))
    a, b = nir_to_spec(base), nir_to_spec(doubled)
    for name in a.arrays:
        np.testing.assert_array_equal(a.arrays[name], b.arrays[name], err_msg=name)


def refused(graph: Any, kind: type[NirGraphError], *words: str) -> NirGraphError:
    with pytest.raises(kind) as info:
        nir_to_spec(graph)
    err = info.value
    assert isinstance(err, SpecError) and isinstance(err, ActionableError)
    assert err.hint, "every refusal says what to do"
    for word in words:
        assert word in err.message, (word, err.message)
    return err


def test_v_leak_becomes_the_bias_per_step() -> None:
    """bias = v_leak * dt / tau_mem, quantised with its neuron's threshold: the ratio to the
    threshold is kept (within a rounding step of each)."""
    v_leak = 8.0 * np.array([1.0, 2.0, -3.0, 0.5, 0.0, 4.0])  # tau_mem = 8 dt: bias = v_leak / 8
    g = chain(recurrent=False)
    g.nodes["h0"] = cuba(6, v_leak=v_leak)
    s = nir_to_spec(g)
    bias, threshold = s.arrays["bias"].astype(float), s.arrays["threshold"].astype(float)
    expected = (v_leak / 8.0) / 20.0  # bias / threshold before quantisation
    np.testing.assert_allclose(bias / threshold, expected, atol=1.0 / threshold.min())
    assert np.sign(bias).tolist() == np.sign(expected).tolist()


def test_too_many_inputs_refused() -> None:
    refused(chain(n_in=17), NirGraphTooLarge, "17 input channels", "at most 16")


def test_too_many_hidden_neurons_refused_naming_the_layers() -> None:
    refused(chain(hidden=(1001,), recurrent=False), NirGraphTooLarge, "1001 hidden neurons",
            "'h0' (1001)", "has 1000")
    refused(chain(hidden=(600, 500), recurrent=False), NirGraphTooLarge, "1100 hidden neurons",
            "'h0' (600)", "'h1' (500)")


def test_too_many_output_neurons_refused() -> None:
    refused(chain(n_out=9), NirGraphTooLarge, "9 output neurons in 'out'", "has 8")


def test_convolution_refused_naming_the_node() -> None:
    conv = nir.Conv1d(input_shape=4, weight=np.ones((6, 4, 1)), stride=1, padding=0,
                      dilation=1, groups=1, bias=np.zeros(6))
    refused(chain(w_in_node=conv), UnsupportedNirNode, "node 'w0' is a Conv1d", "convolution")


def test_a_lif_without_synapse_refused_naming_the_node() -> None:
    lif = nir.LIF(tau=np.full(2, 0.08), r=np.full(2, 8.0), v_leak=np.zeros(2),
                  v_threshold=np.ones(2))
    refused(chain(out_node=lif), UnsupportedNirNode, "node 'out' is a LIF", "CubaLIF")


def test_a_nested_unsupported_node_is_named_by_its_path() -> None:
    g = chain()
    inner = nir.NIRGraph(nodes={"input": nir.Input(input_type={"input": np.array([2])}),
                                "scale": nir.Scale(scale=np.ones(2)),
                                "output": nir.Output(output_type={"output": np.array([2])})},
                         edges=[("input", "scale"), ("scale", "output")], type_check=False)
    g.nodes["post"] = inner
    g.edges = [e for e in g.edges if e != ("out", "output")] + [("out", "post"),
                                                                ("post", "output")]
    refused(g, UnsupportedNirNode, "node 'post.scale' is a Scale")


def test_affine_bias_reset_value_and_short_time_constants_refused() -> None:
    affine = nir.Affine(weight=np.ones((6, 4)), bias=np.full(6, 0.5))
    refused(chain(w_in_node=affine), UnsupportedNirNode, "'w0' has a non-zero bias")
    refused(chain(out_node=cuba(2, v_reset=np.full(2, -1.0))), UnsupportedNirNode,
            "'out' resets to a non-zero v_reset")
    refused(chain(out_node=cuba(2, tau_syn=DT)), UnsupportedNirNode, "'out' has tau_syn",
            "not above dt")


def test_graphs_that_are_not_a_chain_refused() -> None:
    g = chain()
    g.nodes["skip"] = nir.Linear(weight=np.ones((2, 4)))
    g.edges = [*g.edges, ("input", "skip"), ("skip", "out")]
    refused(g, NirGraphError, "'input' has 2 successors")
    one_layer = nir.NIRGraph(
        nodes={"input": nir.Input(input_type={"input": np.array([4])}),
               "w": nir.Linear(weight=np.ones((2, 4))), "lif": cuba(2),
               "output": nir.Output(output_type={"output": np.array([2])})},
        edges=[("input", "w"), ("w", "lif"), ("lif", "output")], metadata={"dt": DT})
    refused(one_layer, NirGraphError, "one CubaLIF layer")


def test_no_dt_and_disagreeing_tau_over_r_refused() -> None:
    g = chain(metadata={})
    g.nodes["out"] = cuba(2, r=np.full(2, 3.0))
    refused(g, NirGraphError, "no dt in its metadata")


def test_unreadable_file_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.nir"
    junk.write_bytes(b"\x89HDF\r\n\x1a\n" + b"\0" * 64)
    with pytest.raises(NirGraphError, match="is not a readable NIR graph"):
        load_network(junk)


def test_shim_refuses_a_graph_xylo_cannot_hold_before_its_banner(tmp_path: Path) -> None:
    path = tmp_path / "wide.nir"
    nir.write(path, chain(n_in=17))
    done = subprocess.run([sys.executable, str(SHIM), "--spec", str(path)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2
    assert "17 input channels, Xylo Audio 2 has at most 16" in done.stderr
    assert "hint:" in done.stderr and done.stdout == ""
