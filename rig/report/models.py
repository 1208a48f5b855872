"""The model outline of an ASC run, from what the DUT ran: the Xylo spec file the bench named, the
rig's own C-shim model (its weights ship with the rig as the simulator's bit-exact reference),
or, for any other MLPerf Tiny firmware, only the model id it reported.

Spec files are read here with numpy (`allow_pickle=False`), NIR graphs with `nir`: the report
never imports the firmware packages, which sit on the other side of the wire.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from rig.errors import ConfigError
from rig.model.nir_file import is_nir_file, read_nir_summary

#: The rig's C shim model (firmware/dut) and its reference weights.
_SHIM_WEIGHTS = (Path(__file__).resolve().parents[2] / "firmware" / "dut"
                 / "asc_model_weights.npz")
_XYLO_WEIGHTS = ("weights_in", "weights_rec", "weights_out")
_XYLO_NEURON = ("threshold", "threshold_out", "bias", "bias_out", "dash_mem", "dash_mem_out",
                "dash_syn", "dash_syn_2", "dash_syn_out")


def describe_asc_model(manifest: dict[str, Any]) -> dict[str, str]:
    """Rows (name -> text) describing the model the run's DUT ran."""
    bench_dut = manifest.get("bench", {}).get("dut", {})
    dut = manifest.get("instruments", {}).get("dut", {})
    if bench_dut.get("kind") == "xylo":
        return _xylo(Path(bench_dut.get("spec", "")), dut)
    if dut.get("model") == "asc01" and "neurobench-rig" in str(dut.get("vendor", "")):
        return _shim_model()
    return {
        "Model id": f"`{dut.get('model', 'not reported')}` (reported by the firmware)",
        "Architecture": "not known to the rig: MLPerf Tiny firmware reports only its model id; "
                        "describe it as `architecture` in system.toml",
    }


def _xylo(spec: Path, dut: dict[str, Any]) -> dict[str, str]:
    rows = {"Model id": f"`{dut.get('model', '?')}`", "Spec file": f"`{spec}`"}
    if is_nir_file(spec):  # a NIR graph, which the shim maps and quantises when it loads it
        return rows | _xylo_nir(spec)
    try:
        with np.load(spec, allow_pickle=False) as z:
            header = json.loads(bytes(z["header"]).decode("utf-8"))
            weights = {k: z[k] for k in _XYLO_WEIGHTS if k in z.files}
            neuron = sum(int(z[k].size) for k in _XYLO_NEURON if k in z.files)
    except (OSError, KeyError, ValueError) as exc:
        rows["Architecture"] = f"spec file unreadable ({exc}); describe it in system.toml"
        return rows
    nonzero = sum(int(np.count_nonzero(w)) for w in weights.values())
    total = sum(int(w.size) for w in weights.values())
    rows |= {
        "Device": f"Xylo Audio 2 (`{header.get('device')}`)",
        "Architecture": (f"{header.get('n_input')} AFE channels -> {header.get('n_hidden')} "
                         f"recurrent LIF neurons -> {header.get('n_output')} output LIF neurons; "
                         f"dt {header.get('dt', 0) * 1e3:g} ms"),
        "Classes": ", ".join(header.get("class_names", [])),
        "Parameters": f"{nonzero:,} non-zero synaptic weights of {total:,} "
                      f"(input, recurrent, output) + {neuron:,} neuron parameters",
        "Quantisation": "8-bit integer weights with 3-bit weight shifts, 16-bit thresholds and "
                        "biases, 4-bit decay shifts (Xylo's native formats)",
        "Spec SHA-256": f"`{header.get('sha256', '?')[:16]}…`",
        "Training": _xylo_training(header.get("training")),
    }
    return rows


def _xylo_nir(path: Path) -> dict[str, str]:
    """Rows for a NIR graph (read with `nir`; sizes from its Input and CubaLIF nodes)."""
    try:
        g = read_nir_summary(path)
    except ConfigError as exc:
        return {"Architecture": f"NIR graph unreadable: {exc.message}; describe it in system.toml"}
    dt = f"dt {g.dt * 1e3:g} ms" if g.dt is not None else "dt not recorded"
    device = g.metadata.get("device", "syns61201")
    layers = ", ".join(f"{n} ({name})" for name, n in g.layers) or "none"
    return {
        "Device": f"Xylo Audio 2 (`{device}`), from a NIR graph",
        "Architecture": (f"{'/'.join(map(str, g.inputs)) or '?'} inputs -> CubaLIF layers "
                         f"{layers}; {dt} (NIR graph, {g.nodes} nodes)"),
        "Classes": ", ".join(g.class_names) or "not recorded in the graph",
        "Parameters": f"{g.weights_nonzero:,} non-zero synaptic weights of "
                      f"{g.weights_total:,}",
        "Quantisation": "the graph's parameters mapped and quantised by the shim on load "
                        "(Rockpool's Xylo Audio 2 mapper and channel_quantize: 8-bit weights, "
                        "16-bit thresholds, 4-bit decay shifts)",
        "Graph SHA-256": f"`{hashlib.sha256(path.read_bytes()).hexdigest()[:16]}…`",
        "Training": _xylo_training(g.training),
    }


def _xylo_training(record: Any) -> str:
    """How the spec's settings were chosen, from the training record `rig model train` writes."""
    try:
        selection, final = record["selection"], record["final_fit"]
        chosen, split = selection["chosen"], selection["split"]
        return (f"hidden size {chosen['n_hidden']} and ridge {chosen['ridge']:g} chosen among "
                f"{len(selection['candidates'])} candidates on a validation split of the train "
                f"data ({split['fraction']:.0%} of each scene's clips, seed {split['seed']}; "
                f"validation accuracy {chosen['validation_accuracy']:.3f}), then fitted on all "
                f"{final['slices']} train slices; the test split was not used")
    except (KeyError, TypeError, ValueError):
        return "not recorded in the spec file"


def _shim_model() -> dict[str, str]:
    rows = {"Model id": "`asc01` (the rig's C firmware shim, firmware/dut)"}
    try:
        with np.load(_SHIM_WEIGHTS, allow_pickle=False) as z:
            weights, bias = z["weights"], z["bias"]
            bands = int(z["mel_start"].size)
    except (OSError, KeyError, ValueError) as exc:
        rows["Architecture"] = f"reference weights unreadable ({exc})"
        return rows
    rows |= {
        "Architecture": (f"integer log-mel front end (256-point Q15 FFT, {bands} mel bands, "
                         f"Q6 log2) -> linear classifier {weights.shape[1]} -> "
                         f"{weights.shape[0]} classes, softmax scores"),
        "Parameters": f"{weights.size + bias.size} ({weights.size} weights, {bias.size} biases)",
        "Quantisation": f"int16 weights, int32 biases and accumulators ({weights.dtype}, "
                        f"{bias.dtype}); integer-only feature extraction",
    }
    return rows
