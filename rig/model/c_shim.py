"""Train the C shim's ASC model (`asc01`, firmware/dut) and write its two committed forms.

    rig model train c-shim

Fits a linear classifier on the fixed-point log-mel features
(`firmware.dut.asc_model.features_batch`, bit-exact with the C code) of the synthetic train
stream, quantises it, and writes the same integers to firmware/dut/asc_model_weights.npz (the
Python reference beside the C code it mirrors; the Python DUT and the report load it) and
firmware/dut/core/asc_model_weights.h (the C shim compiles it in). Deterministic: a second run
writes byte-identical files. The settings (steps, learning rate, L2) are fixed, not tuned;
the test stream is read only to print the accuracy after the model is written.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from firmware.dut.asc_model import (
    FEATURE_MAX,
    LOG2_FRAC_BITS,
    LOGIT_LIMIT,
    NBANDS,
    NBINS,
    NFFT,
    NFRAMES,
    TABLES,
    WEIGHT_MAX,
    WEIGHTS_PATH,
    WINDOW_SHIFT,
    LinearAscModel,
    features_batch,
    make_tables,
    softmax,
)
from rig.datasets.synthetic import CLASSES, make_split

REPO = Path(__file__).resolve().parents[2]
#: The header the C shim compiles (firmware/dut/core/asc_model.c includes it).
HEADER_PATH = REPO / "firmware" / "dut" / "core" / "asc_model_weights.h"
NPZ_NAME, HEADER_NAME = WEIGHTS_PATH.name, HEADER_PATH.name
#: The shipped model: 200 train scenes per class of the synthetic stream, seed 0.
TRAIN_PER_CLASS = 200
TEST_PER_CLASS = 10
SEED = 0
#: Full-batch gradient descent on the softmax cross-entropy (fixed settings).
STEPS, RATE, L2 = 400, 0.5, 1e-3
_C_TYPES = {"int16": "int16_t", "int32": "int32_t", "uint8": "uint8_t", "uint16": "uint16_t"}
#: A fixed zip timestamp: np.savez stamps the current time, which would break determinism.
_EPOCH = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class Written:
    """What `train_and_write` did: the model, the files and its accuracies."""

    model: LinearAscModel
    npz: Path
    header: Path
    train_accuracy: float
    test_accuracy: float | None


def train(samples_per_class: int = TRAIN_PER_CLASS, seed: int = SEED, steps: int = STEPS
          ) -> LinearAscModel:
    """Multinomial logistic regression on the train stream's features, then quantised."""
    tables = make_tables()
    data = make_split(samples_per_class, seed, "train")
    f = features_batch(data.inputs, tables).astype(np.float64)
    mu, sd = f.mean(axis=0), np.maximum(f.std(axis=0), 1.0)
    w, b = logistic_regression((f - mu) / sd, data.labels, steps)
    # Undo the standardisation: z = (w / sd) f + (b - w mu / sd).
    wf = w / sd
    bf = b - wf @ mu
    q = min(WEIGHT_MAX / np.abs(wf).max(),
            0.9 * LOGIT_LIMIT / (np.abs(wf).sum(axis=1) * FEATURE_MAX + np.abs(bf)).max())
    # The C code holds the scale as a float: use that exact value on both sides.
    scale = float(np.float32(1.0 / q))
    return LinearAscModel(tables, np.rint(wf * q), np.rint(bf * q), scale)


def logistic_regression(x: np.ndarray, y: np.ndarray, steps: int, rate: float = RATE,
                        l2: float = L2) -> tuple[np.ndarray, np.ndarray]:
    """Full-batch gradient descent on the softmax cross-entropy from zero; deterministic."""
    k = len(CLASSES)
    onehot = np.eye(k)[y]
    w = np.zeros((k, x.shape[1]))
    b = np.zeros(k)
    for _ in range(steps):  # a loop over optimisation steps, each vectorised over samples
        p = softmax(x @ w.T + b, 1.0)
        g = (p - onehot) / len(x)
        w -= rate * (g.T @ x + l2 * w)
        b -= rate * g.sum(axis=0)
    return w, b


def npz_bytes(model: LinearAscModel) -> bytes:
    """The model's arrays as an .npz (np.load reads it) with fixed timestamps."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, array in model.arrays().items():
            data = io.BytesIO()
            # Not np.ascontiguousarray: it would turn the 0-d scale into shape (1,).
            np.lib.format.write_array(data, np.asarray(array), allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            z.writestr(info, data.getvalue())
    return buffer.getvalue()


def _c_array(name: str, array: np.ndarray) -> str:
    """`static const <type> asc_<name>[..] = {..};`, 12 numbers a line."""
    ctype = _C_TYPES[array.dtype.name]
    dims = "".join(f"[{d}]" for d in array.shape)
    rows = array.reshape(-1, array.shape[-1]) if array.ndim > 1 else array.reshape(1, -1)
    lines = []
    for row in rows:
        values = [str(int(v)) for v in row]
        chunks = [", ".join(values[i:i + 12]) for i in range(0, len(values), 12)]
        body = ",\n    ".join(chunks)
        lines.append(f"{{\n    {body}\n}}" if array.ndim > 1 else f"    {body}")
    inner = ",\n".join(lines)
    return f"static const {ctype} asc_{name}{dims} = {{\n{inner}\n}};\n"


def header_text(model: LinearAscModel) -> str:
    """The C header carrying the same tables and weights as the .npz."""
    scale = np.format_float_scientific(np.float32(model.logit_scale), unique=True)
    parts = [
        "/* ASC model tables and weights:",
        " * generated by `rig model train c-shim` (rig/model/c_shim.py), do not edit.",
        " * The same numbers are in firmware/dut/asc_model_weights.npz (the Python reference).",
        " * Included by asc_model.c only. */",
        "#ifndef NEUROBENCH_ASC_MODEL_WEIGHTS_H",
        "#define NEUROBENCH_ASC_MODEL_WEIGHTS_H",
        "",
        "#include <stdint.h>",
        "",
        f"#define ASC_NFFT {NFFT}",
        f"#define ASC_NFRAMES {NFRAMES}",
        f"#define ASC_NBINS {NBINS}",
        f"#define ASC_NBANDS {NBANDS}",
        f"#define ASC_WINDOW_SHIFT {WINDOW_SHIFT}",
        f"#define ASC_LOG2_FRAC_BITS {LOG2_FRAC_BITS}",
        f"#define ASC_MEL_TAPS {len(model.tables['mel_weight'])}",
        "/* scores = softmax(logits * ASC_LOGIT_SCALE) */",
        f"#define ASC_LOGIT_SCALE {scale}f",
        "",
    ]
    arrays = {**{k: model.tables[k] for k in TABLES}, "weights": model.weights,
              "bias": model.bias}
    body = "\n".join(_c_array(name, a) for name, a in arrays.items())
    return "\n".join(parts) + "\n" + body + "\n#endif\n"


def accuracy(model: LinearAscModel, samples_per_class: int, seed: int, split: str) -> float:
    """Top-1 accuracy (as the rig sees it) on a synthetic stream ('train' or 'test')."""
    data = make_split(samples_per_class, seed, split)
    return float(np.mean(model.predict_batch(data.inputs) == data.labels))


def train_and_write(out_dir: Path | None = None, samples_per_class: int = TRAIN_PER_CLASS,
                    seed: int = SEED, test_per_class: int = TEST_PER_CLASS) -> Written:
    """Train, write the .npz and the C header (into `out_dir`, default the shipped places),
    then measure train and (with `test_per_class` > 0) test accuracy."""
    model = train(samples_per_class, seed)
    npz = WEIGHTS_PATH if out_dir is None else Path(out_dir) / NPZ_NAME
    header = HEADER_PATH if out_dir is None else Path(out_dir) / HEADER_NAME
    npz.parent.mkdir(parents=True, exist_ok=True)
    header.parent.mkdir(parents=True, exist_ok=True)
    npz.write_bytes(npz_bytes(model))
    header.write_text(header_text(model))
    test = accuracy(model, test_per_class, seed, "test") if test_per_class > 0 else None
    return Written(model, npz, header, accuracy(model, samples_per_class, seed, "train"), test)
