"""NIR graphs for Xylo Audio 2: a spec written as a NIR graph, a NIR graph read into a spec.

NIR (the Neuromorphic Intermediate Representation, the `nir` package) is the field's exchange
format: an HDF5 file of typed nodes (`Input`, `Linear`, `CubaLIF`, ...) and edges.

`spec_to_nir` writes a quantised spec as ``Input -> Linear -> CubaLIF (recurrent) -> Linear ->
CubaLIF -> Output``; the recurrent layer is a nested graph ``input -> lif <-> w_rec, lif ->
output``, the layout snnTorch writes for its recurrent layers and Rockpool's from_nir reads.
Parameters follow NIR's equations under forward Euler at dt, which is Xylo's arithmetic (up to
its integer rounding):
``tau = dt * 2**dash``, ``w_in = tau_syn / dt`` and ``r = tau_mem / dt`` (unit gain per step),
``v_leak = bias * tau_mem / dt``, ``v_threshold = threshold``, ``v_reset = 0``. The graph's
metadata carries ``dt``, the model id, the class names and the training record (JSON).

`nir_to_spec` reads any NIR graph Xylo can hold -- a chain ``Input -> Linear -> CubaLIF ->
(Linear -> CubaLIF)* -> Output``, each CubaLIF optionally recurrent through a Linear, nested
graphs flattened -- builds the Rockpool modules it describes (`Linear`, `LIF`) and maps and
quantises them for Xylo Audio 2 with Rockpool's mapper and `channel_quantize`
(`spec.build_spec`, the trainer's own path). Graphs Xylo cannot hold are refused with a
`NirGraphError` naming the reason: `UnsupportedNirNode` (a node type or parameter Xylo has no
equivalent for, naming the node), `NirGraphTooLarge` (inputs, hidden or output neurons over
Xylo's limits).

`load_network` opens either kind of file (a NIR file is HDF5, told by its first bytes), so the
shim's ``--spec`` takes both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from firmware.xylo.spec import (
    DEVICE,
    MAX_HIDDEN,
    MAX_INPUT,
    MAX_OUTPUT,
    MODEL_ID,
    SpecError,
    XyloSpec,
    build_spec,
    load_spec,
)

#: The `format` metadata entry of the graphs `spec_to_nir` writes.
FORMAT = "neurobench-rig/xylo-nir"
FORMAT_VERSION = 1
#: Every HDF5 file (so every NIR file) starts with these bytes.
HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
#: Model id for a graph whose metadata names none (the shim's `m-model-[...]`).
DEFAULT_MODEL_ID = "nir-graph"
_SUPPORTED = "Input, Output, Linear, Affine (zero bias) and CubaLIF"
_HINT_NODES = (f"Xylo Audio 2 takes {_SUPPORTED} nodes in a chain Input -> Linear -> CubaLIF -> "
               "... -> Linear -> CubaLIF -> Output (a CubaLIF may be recurrent through a Linear)")


class NirGraphError(SpecError):
    """A NIR graph that cannot be read, or that Xylo Audio 2 cannot hold."""


class UnsupportedNirNode(NirGraphError):
    """A node type (or a node's parameter) Xylo Audio 2 has no equivalent for."""


class NirGraphTooLarge(NirGraphError):
    """More inputs, hidden or output neurons than Xylo Audio 2 has."""


def _nir() -> Any:
    try:
        import nir
    except ImportError as exc:
        raise NirGraphError("the nir package is not installed",
                            hint="install the rig's xylo extra (pip install -e '.[xylo]')"
                            ) from exc
    return nir


def is_nir_file(path: str | Path) -> bool:
    """True if `path` starts like an HDF5 file (a NIR graph), whatever its name."""
    try:
        with open(path, "rb") as f:
            return f.read(len(HDF5_MAGIC)) == HDF5_MAGIC
    except OSError:
        return False


def load_network(path: str | Path) -> XyloSpec:
    """A spec file or a NIR graph (mapped and quantised), told apart by the file's first bytes."""
    return read_nir(path) if is_nir_file(path) else load_spec(path)


# -- spec -> NIR ---------------------------------------------------------------------------------
def spec_to_nir(spec: XyloSpec) -> Any:
    """The quantised `spec` as a NIR graph (float arrays holding Xylo's integers).

    Weight shifts are folded into the weights (``w * 2**shift``). Specs using Xylo's second
    hidden synapse or aliases have no NIR equivalent and are refused."""
    nir = _nir()
    a = spec.arrays
    hint = "only single-synapse networks without aliases have a NIR equivalent"
    if a["weights_in"].shape[2] != 1 or a["weights_rec"].shape[2] != 1:
        raise NirGraphError(f"{spec.model_id} uses Xylo's second hidden synapse (syn2), which "
                            "NIR's CubaLIF has no equivalent for", hint=hint)
    if any(spec.aliases):
        raise NirGraphError(f"{spec.model_id} uses hidden-neuron aliases, which NIR has no "
                            "equivalent for", hint=hint)
    for name in ("dash_mem", "dash_syn", "dash_mem_out", "dash_syn_out"):
        if np.any(a[name] == 0):  # tau = dt: a graph the reader (and the shim) would refuse
            raise NirGraphError(f"{spec.model_id} has {name} = 0 (no memory from one step to "
                                "the next), which has no CubaLIF time constant above dt",
                                hint="retrain with decay shifts of at least 1")

    def weights(name: str, shift: str) -> np.ndarray:
        w = a[name].astype(np.float64) * 2.0 ** int(a[shift])
        return (w[:, :, 0] if w.ndim == 3 else w).T.copy()  # NIR Linear: (out, in)

    def cuba(threshold: str, bias: str, dash_mem: str, dash_syn: str) -> Any:
        steps_mem = 2.0 ** a[dash_mem].astype(np.float64)
        steps_syn = 2.0 ** a[dash_syn].astype(np.float64)
        return nir.CubaLIF(
            tau_syn=spec.dt * steps_syn, tau_mem=spec.dt * steps_mem,
            r=steps_mem, w_in=steps_syn,
            v_leak=a[bias].astype(np.float64) * steps_mem,
            v_threshold=a[threshold].astype(np.float64),
            v_reset=np.zeros(len(a[threshold])))

    n_in, n_hid, n_out = spec.n_input, spec.n_hidden, spec.n_output
    metadata: dict[str, Any] = {
        "format": FORMAT, "version": FORMAT_VERSION, "device": DEVICE, "dt": float(spec.dt),
        "model_id": spec.model_id, "class_names": json.dumps(list(spec.class_names))}
    if spec.training:  # how the spec was trained, for people and reports (JSON)
        metadata["training"] = json.dumps(spec.training)
    hidden = nir.NIRGraph(
        nodes={"input": nir.Input(input_type={"input": np.array([n_hid])}),
               "lif": cuba("threshold", "bias", "dash_mem", "dash_syn"),
               "w_rec": nir.Linear(weight=weights("weights_rec", "weight_shift_rec")),
               "output": nir.Output(output_type={"output": np.array([n_hid])})},
        edges=[("input", "lif"), ("lif", "w_rec"), ("w_rec", "lif"), ("lif", "output")])
    return nir.NIRGraph(
        nodes={"input": nir.Input(input_type={"input": np.array([n_in])}),
               "w_in": nir.Linear(weight=weights("weights_in", "weight_shift_in")),
               "hidden": hidden,
               "w_out": nir.Linear(weight=weights("weights_out", "weight_shift_out")),
               "output_lif": cuba("threshold_out", "bias_out", "dash_mem_out", "dash_syn_out"),
               "output": nir.Output(output_type={"output": np.array([n_out])})},
        edges=[("input", "w_in"), ("w_in", "hidden"), ("hidden", "w_out"),
               ("w_out", "output_lif"), ("output_lif", "output")],
        metadata=metadata)


def write_nir(spec: XyloSpec, path: str | Path) -> Path:
    """`spec_to_nir(spec)` written with ``nir.write`` (HDF5); returns the path."""
    path = Path(path)
    _nir().write(path, spec_to_nir(spec))
    return path


# -- NIR -> spec ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Layer:
    """One CubaLIF population of the chain: its input weights (Rockpool layout (in, out), float),
    optional recurrent weights and the node's name."""

    name: str
    node: Any
    w: np.ndarray
    w_rec: np.ndarray | None


def read_nir(path: str | Path) -> XyloSpec:
    """Read a NIR file and map and quantise it for Xylo Audio 2 (`nir_to_spec`)."""
    nir = _nir()
    where = str(path)
    try:
        graph = nir.read(path)
    except FileNotFoundError as exc:
        raise NirGraphError(f"{where} does not exist", hint="check the --spec path") from exc
    except Exception as exc:  # h5py and nir raise OSError, KeyError, ValueError, TypeError...
        raise NirGraphError(f"{where} is not a readable NIR graph ({type(exc).__name__}: {exc})",
                            hint="write it with nir.write (or `rig model export --format nir`)"
                            ) from exc
    return nir_to_spec(graph, where=where)


def nir_to_spec(graph: Any, *, where: str = "NIR graph") -> XyloSpec:
    """Check that Xylo Audio 2 can hold `graph`, build its Rockpool network, and map and quantise
    it (Rockpool's mapper + channel_quantize). `NirGraphError` subclasses name any fault."""
    nir = _nir()
    if not isinstance(graph, nir.NIRGraph):
        raise NirGraphError(f"{where}: the file holds a {type(graph).__name__}, not a NIRGraph",
                            hint=_HINT_NODES)
    nodes, edges = _flatten(nir, graph)
    for name, node in nodes.items():
        if not isinstance(node, (nir.Input, nir.Output, nir.Linear, nir.Affine, nir.CubaLIF)):
            raise UnsupportedNirNode(
                f"{where}: node {name!r} is a {type(node).__name__}, which Xylo Audio 2 has no "
                f"equivalent for" + _why_not(nir, node), hint=_HINT_NODES)
    n_in, layers = _chain(nir, nodes, edges, where)
    _check_size(n_in, layers, where)
    metadata = graph.metadata or {}
    dt = _dt(metadata, layers, where)
    for layer in layers:
        _check_neurons(layer, dt, where)
    n_out = len(layers[-1].node.v_threshold)
    class_names = _class_names(metadata, n_out, where)
    model_id = str(metadata.get("model_id", DEFAULT_MODEL_ID))
    if not MODEL_ID.fullmatch(model_id):
        model_id = DEFAULT_MODEL_ID
    net = _rockpool_net(layers, dt)
    try:
        spec = build_spec(net, class_names=class_names, model_id=model_id, dt=dt)
    except SpecError as exc:
        raise NirGraphError(f"{where}: after mapping and quantising: {exc.message}",
                            hint=exc.hint) from exc
    except ValueError as exc:  # Rockpool's DRCError is a ValueError
        raise NirGraphError(f"{where}: Rockpool's Xylo Audio 2 mapper refused the graph: "
                            f"{' '.join(str(exc).split())}", hint=_HINT_NODES) from exc
    return replace(spec, training=_training(metadata))


def _why_not(nir: Any, node: Any) -> str:
    """Why a node type does not map, for the common cases."""
    if isinstance(node, (nir.LIF, nir.IF, nir.LI, nir.CubaLI, nir.I)):
        return (" (Xylo's neurons are current-based LIF neurons with a synaptic and a membrane "
                "time constant: use CubaLIF)")
    if isinstance(node, (nir.Conv1d, nir.Conv2d)):
        return " (Xylo has no convolution: unroll it into a Linear)"
    return ""


def _flatten(nir: Any, graph: Any) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Nodes and edges with nested graphs inlined (names ``outer.inner``) and their own Input and
    Output nodes bypassed (they only pass values on)."""
    nodes, edges = _inline(nir, graph, "")
    for p in [n for n, v in nodes.items() if "." in n and isinstance(v, (nir.Input, nir.Output))]:
        before = [s for s, d in edges if d == p]
        after = [d for s, d in edges if s == p]
        edges = [(s, d) for s, d in edges if p not in (s, d)]
        edges += [(s, d) for s in before for d in after]
        del nodes[p]
    return nodes, list(dict.fromkeys(edges))


def _inline(nir: Any, graph: Any, prefix: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    nodes: dict[str, Any] = {}
    edges: list[tuple[str, str]] = []
    ports: dict[str, tuple[list[str], list[str]]] = {}  # subgraph -> its Input, Output nodes
    for name, node in graph.nodes.items():
        full = prefix + name
        if isinstance(node, nir.NIRGraph):
            inner_nodes, inner_edges = _inline(nir, node, full + ".")
            nodes |= inner_nodes
            edges += inner_edges
            ports[full] = ([f"{full}.{k}" for k in node.inputs],
                           [f"{full}.{k}" for k in node.outputs])
        else:
            nodes[full] = node
    for src, dst in graph.edges:  # an edge names a subgraph, or a node in it as `sub.node`
        src, dst = prefix + src, prefix + dst
        for s in ports[src][1] if src in ports else [src]:
            for d in ports[dst][0] if dst in ports else [dst]:
                edges.append((s, d))
    return nodes, edges


def _chain(nir: Any, nodes: dict[str, Any], edges: list[tuple[str, str]], where: str
           ) -> tuple[int, list[Layer]]:
    """The number of inputs and the CubaLIF layers of ``Input -> Linear -> CubaLIF -> ... ->
    Output``; `NirGraphError` for any other shape."""
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    pred: dict[str, list[str]] = {n: [] for n in nodes}
    for s, d in edges:
        if s not in nodes or d not in nodes:
            raise NirGraphError(f"{where}: edge {s!r} -> {d!r} names a node that is not in the "
                                "graph", hint="fix the graph's edges")
        succ[s].append(d)
        pred[d].append(s)
    inputs = [n for n, v in nodes.items() if isinstance(v, nir.Input)]
    outputs = [n for n, v in nodes.items() if isinstance(v, nir.Output)]
    if len(inputs) != 1 or len(outputs) != 1:
        raise NirGraphError(f"{where}: {len(inputs)} Input and {len(outputs)} Output nodes; "
                            "Xylo takes exactly one of each", hint=_HINT_NODES)
    shape = np.atleast_1d(np.asarray(nodes[inputs[0]].input_type["input"]))
    if shape.size != 1:
        raise NirGraphError(f"{where}: Input node {inputs[0]!r} has shape {tuple(shape)}; Xylo "
                            "takes a 1-D vector of input channels",
                            hint="flatten the input (at most 16 channels)")
    n_in = int(shape[0])

    def weights(name: str, n_pre: int) -> np.ndarray:
        node = nodes[name]
        if isinstance(node, nir.Affine) and np.any(np.asarray(node.bias) != 0):
            raise UnsupportedNirNode(f"{where}: Affine node {name!r} has a non-zero bias; Xylo's "
                                     "synapses have none", hint="fold the bias into the neurons' "
                                     "v_leak, or use a Linear")
        w = np.asarray(node.weight, np.float64)
        if w.ndim != 2 or w.shape[1] != n_pre:
            raise NirGraphError(f"{where}: {type(node).__name__} node {name!r} has weight shape "
                                f"{w.shape}, expected (outputs, {n_pre})", hint=_HINT_NODES)
        return w.T  # Rockpool: (in, out)

    def only(items: list[str], what: str, name: str) -> str:
        if len(items) != 1:
            raise NirGraphError(f"{where}: node {name!r} has {len(items)} {what} "
                                f"({', '.join(map(repr, items)) or 'none'}); Xylo takes a chain "
                                "of layers", hint=_HINT_NODES)
        return items[0]

    layers: list[Layer] = []
    visited = {inputs[0]}
    current, size = inputs[0], n_in
    while True:
        nxt = only(succ[current], "successors", current)
        if isinstance(nodes[nxt], nir.Output):
            if not layers or current == inputs[0]:
                raise NirGraphError(f"{where}: the output does not come from a CubaLIF layer",
                                    hint=_HINT_NODES)
            visited.add(nxt)
            break
        if not isinstance(nodes[nxt], (nir.Linear, nir.Affine)):
            raise NirGraphError(f"{where}: node {current!r} feeds {type(nodes[nxt]).__name__} "
                                f"node {nxt!r}; Xylo needs weights (a Linear) between layers",
                                hint=_HINT_NODES)
        only(pred[nxt], "inputs", nxt)
        w = weights(nxt, size)
        target = only(succ[nxt], "successors", nxt)
        if not isinstance(nodes[target], nir.CubaLIF):
            raise NirGraphError(f"{where}: Linear node {nxt!r} feeds "
                                f"{type(nodes[target]).__name__} node {target!r}; Xylo needs a "
                                "CubaLIF after every Linear", hint=_HINT_NODES)
        if target in visited:
            raise NirGraphError(f"{where}: the chain runs back into {target!r}; Xylo takes a "
                                "chain of layers", hint=_HINT_NODES)
        lif = nodes[target]
        n = int(np.size(lif.v_threshold))
        if w.shape[1] != n:
            raise NirGraphError(f"{where}: Linear node {nxt!r} has {w.shape[1]} outputs, CubaLIF "
                                f"{target!r} has {n} neurons", hint="fix the weight shape")
        # A recurrent Linear: from this CubaLIF straight back to it.
        rec = [s for s in pred[target] if s != nxt]
        w_rec = None
        if rec:
            r = only(rec, "recurrent weights", target)
            if pred[r] != [target] or succ[r] != [target] or not isinstance(
                    nodes[r], (nir.Linear, nir.Affine)):
                raise NirGraphError(f"{where}: CubaLIF {target!r} has a second input {r!r} that "
                                    "is not a Linear from itself; Xylo takes one input and "
                                    "optional recurrent weights per layer", hint=_HINT_NODES)
            w_rec = weights(r, n)
            visited.add(r)
        visited |= {nxt, target}
        layers.append(Layer(target, lif, w, w_rec))
        forward = [s for s in succ[target] if s not in rec]
        current, size = target, n
        succ[current] = forward
    unused = [n for n in nodes if n not in visited]
    if unused:
        raise NirGraphError(f"{where}: nodes {', '.join(map(repr, unused))} are not on the chain "
                            "from the input to the output", hint=_HINT_NODES)
    if len(layers) < 2:
        raise NirGraphError(f"{where}: one CubaLIF layer; Xylo needs hidden neurons and output "
                            "neurons (at least two layers)", hint=_HINT_NODES)
    return n_in, layers


def _check_size(n_in: int, layers: list[Layer], where: str) -> None:
    hidden = layers[:-1]
    n_hidden = sum(int(np.size(h.node.v_threshold)) for h in hidden)
    n_out = int(np.size(layers[-1].node.v_threshold))
    if not 1 <= n_in <= MAX_INPUT:
        raise NirGraphTooLarge(f"{where}: {n_in} input channels, Xylo Audio 2 has at most "
                               f"{MAX_INPUT}", hint="reduce the inputs (Xylo's AFE gives 16 "
                               "channels)")
    if n_hidden > MAX_HIDDEN:
        names = ", ".join(f"{h.name!r} ({np.size(h.node.v_threshold)})" for h in hidden)
        raise NirGraphTooLarge(f"{where}: {n_hidden} hidden neurons in {names}, Xylo Audio 2 "
                               f"has {MAX_HIDDEN}", hint="shrink the hidden layers")
    if n_out > MAX_OUTPUT:
        raise NirGraphTooLarge(f"{where}: {n_out} output neurons in {layers[-1].name!r}, Xylo "
                               f"Audio 2 has {MAX_OUTPUT}", hint="at most 8 classes / outputs")


def _dt(metadata: dict[str, Any], layers: list[Layer], where: str) -> float:
    """dt from the graph's metadata, else from ``tau_mem / r`` (unit gain under forward Euler),
    which must then agree over every neuron."""
    if "dt" in metadata:
        try:
            dt = float(metadata["dt"])
        except (TypeError, ValueError):
            dt = float("nan")
        if not (np.isfinite(dt) and dt > 0):
            raise NirGraphError(f"{where}: metadata dt {metadata['dt']!r} is not a positive "
                                "number of seconds", hint="write dt (s) into the metadata")
        return dt
    ratios = np.concatenate([np.asarray(ly.node.tau_mem, np.float64).ravel()
                             / np.asarray(ly.node.r, np.float64).ravel() for ly in layers])
    if ratios.size and np.all(np.isfinite(ratios)) and ratios.min() > 0 and np.allclose(
            ratios, ratios[0], rtol=1e-6):
        return float(ratios[0])
    raise NirGraphError(f"{where}: the graph has no dt in its metadata and tau_mem / r differs "
                        "between neurons, so the time step cannot be told",
                        hint="write the network's time step as metadata dt (seconds)")


def _check_neurons(layer: Layer, dt: float, where: str) -> None:
    node, name = layer.node, layer.name
    for param in ("tau_mem", "tau_syn"):
        tau = np.asarray(getattr(node, param), np.float64)
        if tau.size and not np.all(tau > dt):
            raise UnsupportedNirNode(
                f"{where}: CubaLIF {name!r} has {param} down to {tau.min():g} s, not above dt "
                f"{dt:g} s; Xylo's decays are 2**-dash per step with dash >= 1 here",
                hint="time constants must be above dt")
    if np.any(np.asarray(node.v_reset) != 0):
        raise UnsupportedNirNode(f"{where}: CubaLIF {name!r} resets to a non-zero v_reset; Xylo's "
                                 "neurons subtract the threshold on a spike",
                                 hint="set v_reset to 0")


def _class_names(metadata: dict[str, Any], n_out: int, where: str) -> tuple[str, ...]:
    raw = metadata.get("class_names")
    if raw is not None:
        try:
            names = json.loads(raw if isinstance(raw, str) else bytes(raw).decode())
        except (TypeError, ValueError, UnicodeDecodeError) as exc:
            raise NirGraphError(f"{where}: metadata class_names is not a JSON list",
                                hint="store class_names as a JSON list of strings") from exc
        if (isinstance(names, list) and len(names) == n_out
                and all(isinstance(x, str) for x in names) and len(set(names)) == n_out):
            return tuple(names)
        raise NirGraphError(f"{where}: metadata class_names {names!r} is not {n_out} distinct "
                            "names, one per output neuron", hint="fix the metadata")
    return tuple(f"class{i}" for i in range(n_out))


def _training(metadata: dict[str, Any]) -> dict[str, Any]:
    """The training record `spec_to_nir` stores (information only: {} when absent or bad)."""
    try:
        record = json.loads(metadata.get("training", "{}"))
    except (TypeError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _rockpool_net(layers: list[Layer], dt: float) -> Any:
    """A Rockpool Sequential of Linear and LIF modules with Xylo's effective parameters: each
    neuron's incoming weights scaled by its per-step input gain ``w_in * r * dt**2 /
    (tau_syn * tau_mem)`` (1 for the graphs `spec_to_nir` writes), bias ``v_leak * dt /
    tau_mem``."""
    from firmware.xylo.rockpool_import import xylo_audio2

    xylo_audio2()  # the samna stand-ins before any Rockpool import
    from rockpool.nn.combinators import Sequential
    from rockpool.nn.modules import LIF, Linear

    modules = []
    for layer in layers:
        node = layer.node
        n = layer.w.shape[1]

        def vec(value: Any, n: int = n) -> np.ndarray:
            return np.broadcast_to(np.asarray(value, np.float64), (n,)).copy()

        tau_mem, tau_syn = vec(node.tau_mem), vec(node.tau_syn)
        gain = vec(node.w_in) * vec(node.r) * dt * dt / (tau_syn * tau_mem)
        modules.append(Linear((layer.w.shape[0], n), weight=layer.w * gain, has_bias=False))
        rec: dict[str, Any] = {}
        if layer.w_rec is not None:
            rec = {"has_rec": True, "w_rec": layer.w_rec * gain}
        modules.append(LIF(n, tau_syn=tau_syn, tau_mem=tau_mem, threshold=vec(node.v_threshold),
                           bias=vec(node.v_leak) * dt / tau_mem, dt=dt, **rec))
    return Sequential(*modules)
