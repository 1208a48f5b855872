"""Xylo Audio 2 (syns61201) network specification files, saved without pickle.

One ``.npz`` file (loaded with ``allow_pickle=False``) holds the integer arrays Rockpool's
``XyloSim.from_specification`` takes, ``aliases`` as UTF-8 JSON bytes, and ``header``, UTF-8
JSON bytes with the format name and version, the device, the model id, the input / hidden /
output sizes, dt, the class names, the SHA-256 of everything else and, when a trainer wrote it,
`training`: how the network was trained and which split chose its settings (information for
people and reports; the shim ignores it). `load_spec` checks all of it and raises `SpecError`
naming what is wrong.

`build_spec` (a Rockpool network mapped and quantised for Xylo Audio 2) is the shim's own load
path for a NIR graph (`nir_graph.nir_to_spec`, the shim's ``--spec``), so it lives here, with the
firmware; the trainer (`rig model train xylo`, rig-side) calls the same function.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from protocols.errors import ActionableError

FORMAT = "neurobench-rig/xylo-spec"
FORMAT_VERSION = 1
DEVICE = "syns61201"

#: Xylo Audio 2 limits: 16 input channels, 1000 hidden and 8 output neurons.
MAX_INPUT, MAX_HIDDEN, MAX_OUTPUT = 16, 1000, 8
#: Inclusive value ranges per array (8-bit weights, 16-bit thresholds and biases, 4-bit
#: decay shifts ("dash"), 3-bit weight shifts) and the dtype each is stored as.
_RANGES: dict[str, tuple[int, int, str]] = {
    "weights_in": (-128, 127, "int8"),
    "weights_rec": (-128, 127, "int8"),
    "weights_out": (-128, 127, "int8"),
    "threshold": (-(2**15), 2**15 - 1, "int16"),
    "threshold_out": (-(2**15), 2**15 - 1, "int16"),
    "bias": (-(2**15), 2**15 - 1, "int16"),
    "bias_out": (-(2**15), 2**15 - 1, "int16"),
    "dash_mem": (0, 15, "uint8"),
    "dash_mem_out": (0, 15, "uint8"),
    "dash_syn": (0, 15, "uint8"),
    "dash_syn_2": (0, 15, "uint8"),
    "dash_syn_out": (0, 15, "uint8"),
    "weight_shift_in": (0, 7, "uint8"),
    "weight_shift_rec": (0, 7, "uint8"),
    "weight_shift_out": (0, 7, "uint8"),
}
ARRAYS = tuple(_RANGES)
_HIDDEN_VECTORS = ("threshold", "bias", "dash_mem", "dash_syn", "dash_syn_2")
_OUTPUT_VECTORS = ("threshold_out", "bias_out", "dash_mem_out", "dash_syn_out")
_SCALARS = ("weight_shift_in", "weight_shift_rec", "weight_shift_out")
#: A model id goes into the ``m-model-[...]`` line: short, no spaces or brackets.
MODEL_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,31}")


class SpecError(ActionableError):
    """A network specification file that is corrupt, mismatched or outside Xylo's limits."""


@dataclass(frozen=True, eq=False)
class XyloSpec:
    """A quantised Xylo Audio 2 network: the integer arrays, aliases, dt and labels.

    `arrays` maps each name of `ARRAYS` to an integer array (weights 3-D: ``(pre, post,
    synapses)`` for ``weights_in`` / ``weights_rec``); `aliases` has one list per hidden neuron.
    `training` is the trainer's JSON record (empty when none was written).
    """

    arrays: dict[str, np.ndarray]
    aliases: list[list[int]]
    dt: float
    class_names: tuple[str, ...]
    model_id: str
    training: dict[str, Any] = field(default_factory=dict)

    @property
    def n_input(self) -> int:
        """Input channels."""
        return int(self.arrays["weights_in"].shape[0])

    @property
    def n_hidden(self) -> int:
        """Hidden neurons."""
        return int(self.arrays["weights_rec"].shape[0])

    @property
    def n_output(self) -> int:
        """Output neurons (one per class)."""
        return int(self.arrays["weights_out"].shape[1])

    def specification(self) -> dict[str, Any]:
        """Keyword arguments for ``XyloSim.from_specification`` / ``config_from_specification``."""
        spec: dict[str, Any] = {k: v.astype(np.int64) for k, v in self.arrays.items()}
        for name in _SCALARS:
            spec[name] = int(self.arrays[name])
        spec["aliases"] = [list(a) for a in self.aliases]
        spec["dt"] = self.dt
        return spec


# -- build ---------------------------------------------------------------------------------------
def build_spec(
    net: Any, *, class_names: list[str] | tuple[str, ...], model_id: str, dt: float | None = None
) -> XyloSpec:
    """Map and quantise a Rockpool network (``net.as_graph()``) for Xylo Audio 2.

    `dt` defaults to the mapper's (the network's). The result is validated like a loaded file.
    """
    from firmware.xylo.rockpool_import import channel_quantize, xylo_audio2

    mapped = xylo_audio2().mapper(
        net.as_graph(), weight_dtype="float", threshold_dtype="float", dash_dtype="float"
    )
    # channel_quantize scales each neuron's weights and threshold by one factor, but in its
    # single-synapse path it only rounds the hidden biases (and it rescales bias_out in place):
    # scale every bias by its neuron's own factor here, from the float values.
    floats = {k: np.array(mapped[k], dtype=np.float64) for k in
              ("bias", "bias_out", "threshold", "threshold_out") if mapped.get(k) is not None}
    quantised = dict(channel_quantize(**{k: np.array(v, copy=True) if isinstance(v, np.ndarray)
                                         else v for k, v in mapped.items()}))
    for bias, threshold in (("bias", "threshold"), ("bias_out", "threshold_out")):
        if bias in floats:
            quantised[bias] = _scaled_bias(floats[bias], floats[threshold],
                                           np.asarray(quantised[threshold], np.float64))
    arrays: dict[str, np.ndarray] = {}
    for name in ARRAYS:
        value = np.asarray(quantised.get(name, mapped.get(name)))
        if name in ("weights_in", "weights_rec") and value.ndim == 2:
            value = value[:, :, None]  # one synapse per neuron
        arrays[name] = _narrow(name, value)
    spec = XyloSpec(
        arrays=arrays,
        aliases=[[int(i) for i in a] for a in mapped.get("aliases") or []],
        dt=float(mapped["dt"] if dt is None else dt),
        class_names=tuple(class_names),
        model_id=model_id,
    )
    if not spec.aliases:
        spec = XyloSpec(spec.arrays, [[] for _ in range(spec.n_hidden)], spec.dt,
                        spec.class_names, spec.model_id)
    _validate(spec)
    return spec


def _scaled_bias(bias: np.ndarray, threshold: np.ndarray, threshold_q: np.ndarray
                 ) -> np.ndarray:
    """Biases in the integer units of their neuron's quantised threshold (the factor its
    weights and threshold were scaled by); a neuron with a zero threshold keeps its bias."""
    scale = np.divide(threshold_q, threshold, out=np.ones_like(threshold),
                      where=threshold != 0)
    return np.round(bias * scale)


def _narrow(name: str, value: np.ndarray) -> np.ndarray:
    """`value` in the stored dtype of `name`; `SpecError` if not integral or out of range."""
    low, high, dtype = _RANGES[name]
    # Rockpool returns int64 or whole-number floats; anything else was not quantised.
    integral = value.dtype.kind in "iu" or (
        value.dtype.kind == "f" and bool(np.all(np.isfinite(value)))
        and bool(np.all(value == np.round(value)))
    )
    if not integral:
        raise SpecError(f"{name} is not integer ({value.dtype})",
                        hint="quantise the network (channel_quantize) before saving")
    if value.size and (value.min() < low or value.max() > high):
        raise SpecError(
            f"{name} has values in [{value.min()}, {value.max()}], Xylo takes [{low}, {high}]",
            hint="quantise the network for Xylo (channel_quantize) before saving",
        )
    return value.astype(dtype)


# -- save / load ---------------------------------------------------------------------------------
def _checksum(arrays: dict[str, np.ndarray], aliases_json: bytes) -> str:
    """SHA-256 over name, dtype, shape and bytes of every array, in a fixed order."""
    digest = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        digest.update(a.tobytes())
    digest.update(b"aliases|")
    digest.update(aliases_json)
    return digest.hexdigest()


def save_spec(spec: XyloSpec, path: str | Path) -> Path:
    """Write `spec` to `path` (``.npz``); returns the path written."""
    _validate(spec)
    path = Path(path)
    aliases_json = json.dumps(spec.aliases, separators=(",", ":")).encode()
    header = {
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "device": DEVICE,
        "model_id": spec.model_id,
        "n_input": spec.n_input,
        "n_hidden": spec.n_hidden,
        "n_output": spec.n_output,
        "dt": spec.dt,
        "class_names": list(spec.class_names),
        "sha256": _checksum(spec.arrays, aliases_json),
    }
    if spec.training:
        header["training"] = spec.training
    buffer = io.BytesIO()
    np.savez(
        buffer,
        header=np.frombuffer(json.dumps(header).encode(), np.uint8),
        aliases=np.frombuffer(aliases_json, np.uint8),
        **spec.arrays,  # type: ignore[arg-type]  # numpy's stub: a key could be allow_pickle
    )
    path.write_bytes(buffer.getvalue())
    return path


def load_spec(path: str | Path) -> XyloSpec:
    """Read and validate a specification file; `SpecError` naming the fault otherwise."""
    path = Path(path)
    where = str(path)
    hint = "re-create the file with build_spec + save_spec (or `rig model train xylo`)"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError(f"cannot read network specification {where}: {exc.strerror}",
                        hint="check the --spec path") from exc
    try:
        with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
            stored = {name: npz[name] for name in npz.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise SpecError(f"{where} is not a readable .npz network specification ({exc})",
                        hint=hint) from exc
    missing = [n for n in ("header", "aliases", *ARRAYS) if n not in stored]
    if missing:
        raise SpecError(f"{where} lacks {', '.join(missing)}", hint=hint)
    extra = sorted(set(stored) - {"header", "aliases", *ARRAYS})
    if extra:
        raise SpecError(f"{where} has unknown entries {', '.join(extra)}", hint=hint)
    header = _json(stored["header"], "header", where, hint)
    if not isinstance(header, dict):
        raise SpecError(f"{where}: the header is not a JSON object", hint=hint)
    if header.get("format") != FORMAT:
        raise SpecError(f"{where} is not a {FORMAT} file (format {header.get('format')!r})",
                        hint=hint)
    if header.get("version") != FORMAT_VERSION:
        raise SpecError(
            f"{where} has format version {header.get('version')!r}; this rig reads "
            f"version {FORMAT_VERSION}", hint="update the rig or re-create the file")
    if header.get("device") != DEVICE:
        raise SpecError(f"{where} is for device {header.get('device')!r}, not {DEVICE} "
                        "(Xylo Audio 2)", hint="use a specification built for Xylo Audio 2")
    arrays = {name: stored[name] for name in ARRAYS}
    aliases_json = stored["aliases"].tobytes() if stored["aliases"].dtype == np.uint8 else b""
    if _checksum(arrays, aliases_json) != header.get("sha256"):
        raise SpecError(f"{where}: SHA-256 checksum mismatch (the arrays were changed or the "
                        "file is corrupt)", hint=hint)
    for name in ("n_input", "n_hidden", "n_output"):
        if not isinstance(header.get(name), int):
            raise SpecError(f"{where}: header {name} is missing or not an integer", hint=hint)
    dt = header.get("dt")
    names = header.get("class_names")
    if not isinstance(dt, (int, float)) or isinstance(dt, bool):
        raise SpecError(f"{where}: header dt is missing or not a number", hint=hint)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise SpecError(f"{where}: header class_names is not a list of strings", hint=hint)
    if not isinstance(header.get("model_id"), str):
        raise SpecError(f"{where}: header model_id is missing", hint=hint)
    aliases = _json(stored["aliases"], "aliases", where, hint)
    if not isinstance(aliases, list) or not all(
        isinstance(a, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in a)
        for a in aliases
    ):
        raise SpecError(f"{where}: aliases is not a list of integer lists", hint=hint)
    training = header.get("training", {})
    if not isinstance(training, dict):
        raise SpecError(f"{where}: header training is not a JSON object", hint=hint)
    spec = XyloSpec(arrays, aliases, float(dt), tuple(names), header["model_id"], training)
    _validate(spec, where)
    sizes = {"n_input": spec.n_input, "n_hidden": spec.n_hidden, "n_output": spec.n_output}
    for name, actual in sizes.items():
        if header[name] != actual:
            raise SpecError(f"{where}: header says {name} = {header[name]}, the arrays have "
                            f"{actual}", hint=hint)
    return spec


def _json(array: np.ndarray, what: str, where: str, hint: str) -> Any:
    if array.dtype != np.uint8 or array.ndim != 1:
        raise SpecError(f"{where}: {what} is not stored as JSON bytes", hint=hint)
    try:
        return json.loads(array.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SpecError(f"{where}: {what} is not valid JSON ({exc})", hint=hint) from exc


# -- validation ----------------------------------------------------------------------------------
def _validate(spec: XyloSpec, where: str = "network specification") -> None:
    """Shapes consistent, integer dtypes, values in Xylo's ranges, labels and dt sane."""
    hint = "the network does not fit Xylo Audio 2: rebuild it with build_spec"
    a = spec.arrays
    for name in ARRAYS:
        value = np.asarray(a[name])
        if value.dtype.kind not in "iu":
            raise SpecError(f"{where}: {name} has dtype {value.dtype}, Xylo needs integers",
                            hint=hint)
        _narrow(name, value)
    w_in, w_rec, w_out = a["weights_in"], a["weights_rec"], a["weights_out"]
    if w_in.ndim != 3 or w_in.shape[2] not in (1, 2):
        raise SpecError(f"{where}: weights_in has shape {w_in.shape}, expected "
                        "(inputs, hidden, 1 or 2 synapses)", hint=hint)
    n_in, n_hid = int(w_in.shape[0]), int(w_rec.shape[0]) if w_rec.ndim else 0
    if w_rec.ndim != 3 or w_rec.shape[:2] != (n_hid, n_hid) or w_rec.shape[2] not in (1, 2):
        raise SpecError(f"{where}: weights_rec has shape {w_rec.shape}, expected "
                        "(hidden, hidden, 1 or 2 synapses)", hint=hint)
    if w_in.shape[1] != n_hid:
        raise SpecError(f"{where}: weights_in feeds {w_in.shape[1]} hidden neurons, "
                        f"weights_rec has {n_hid}", hint=hint)
    if w_out.ndim != 2 or not 1 <= w_out.shape[0] <= n_hid:
        raise SpecError(f"{where}: weights_out has shape {w_out.shape}, expected "
                        f"(at most {n_hid} hidden, outputs)", hint=hint)
    n_out = int(w_out.shape[1])
    for count, limit, what in ((n_in, MAX_INPUT, "input channels"),
                               (n_hid, MAX_HIDDEN, "hidden neurons"),
                               (n_out, MAX_OUTPUT, "output neurons")):
        if not 1 <= count <= limit:
            raise SpecError(f"{where}: {count} {what}, Xylo Audio 2 has 1 to {limit}", hint=hint)
    for names, size, what in ((_HIDDEN_VECTORS, n_hid, "hidden"),
                              (_OUTPUT_VECTORS, n_out, "output")):
        for name in names:
            if a[name].shape != (size,):
                raise SpecError(f"{where}: {name} has shape {a[name].shape}, expected "
                                f"({size},), one per {what} neuron", hint=hint)
    for name in _SCALARS:
        if a[name].shape != ():
            raise SpecError(f"{where}: {name} has shape {a[name].shape}, expected a scalar",
                            hint=hint)
    if len(spec.aliases) != n_hid or any(
        not 0 <= i < n_hid for alias in spec.aliases for i in alias
    ):
        raise SpecError(f"{where}: aliases must be {n_hid} lists of hidden neuron indices",
                        hint=hint)
    if not (math.isfinite(spec.dt) and spec.dt > 0):
        raise SpecError(f"{where}: dt = {spec.dt} s, expected a positive time step", hint=hint)
    if len(spec.class_names) != n_out or len(set(spec.class_names)) != n_out:
        raise SpecError(f"{where}: {len(spec.class_names)} class names for {n_out} output "
                        "neurons (one distinct name each)", hint=hint)
    if not MODEL_ID.fullmatch(spec.model_id):
        raise SpecError(f"{where}: model id {spec.model_id!r} is not a short lowercase word "
                        "(letters, digits, '.', '_', '-')", hint="e.g. xylo-asc01")
