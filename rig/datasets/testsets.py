"""The test set a bench's ASC run sends through its DUT, whatever the DUT eats.

- `synthetic-asc`: 1 s of 8 kHz synthetic audio per sample; the DUT (the C shim's fixed-point
  model) does its own feature extraction as part of inference.
- `synthetic-dcase` / `dcase2020`: the DCASE 2020 layout (a generated synthetic set, or the
  real TAU data at `path`), pre-processed into spike rasters by the Xylo Audio 2 analog front
  end's simulator. Pre-processing is reported apart from inference: its hardware time is the
  audio's duration (the analog AFE runs in real time); the simulation's host time is kept only
  as information.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rig.bench.config import Bench
from rig.datasets.synthetic import CLASSES, make_split
from rig.errors import ConfigError


@dataclass(frozen=True)
class TestSet:
    """What goes through the DUT: input bytes and labels, plus pre-processing times if any."""

    inputs: Sequence[bytes]
    labels: np.ndarray
    description: str
    #: Per-sample pre-processing time on the hardware [s], or None when the DUT does it.
    preprocess_s: np.ndarray | None = None
    #: Host seconds the pre-processing simulation took (information only), or None.
    preprocess_host_s: np.ndarray | None = None
    preprocess_method: str = ""

    __test__ = False  # not a pytest class

    def __len__(self) -> int:
        return len(self.labels)


def labels_sha256(labels: np.ndarray | Sequence[int]) -> str:
    """SHA-256 (hex) of class labels as int64 little-endian, in test-set order: what a run's
    manifest records as `test_set.sha256_labels` and `rig verify` recounts accuracy against."""
    arr = np.asarray(labels)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"
                         and not np.array_equal(arr, np.round(arr))):
        raise ValueError(f"labels must be a 1-D array of class indices, got {arr.dtype} "
                         f"{arr.shape}")
    return hashlib.sha256(np.ascontiguousarray(arr, dtype="<i8").tobytes()).hexdigest()


def test_set_digest(test_set: TestSet) -> dict[str, Any]:
    """The test set's identity, recorded in the run's manifest (`test_set`) so a bundle can be
    checked against the labels it carries: {description, samples, sha256_inputs,
    sha256_labels, sha256}.

    `sha256_inputs` hashes the inputs in order, each preceded by its length (uint64 LE) so that
    no two different splits of the same bytes hash alike; `sha256_labels` is `labels_sha256`;
    `sha256` hashes the two digests (32 bytes each, inputs first): the whole set."""
    inputs = hashlib.sha256()
    for x in test_set.inputs:
        data = bytes(x)
        inputs.update(len(data).to_bytes(8, "little"))
        inputs.update(data)
    labels = labels_sha256(test_set.labels)
    whole = hashlib.sha256(inputs.digest() + bytes.fromhex(labels)).hexdigest()
    return {"description": test_set.description, "samples": len(test_set),
            "sha256_inputs": inputs.hexdigest(), "sha256_labels": labels, "sha256": whole}


test_set_digest.__test__ = False  # type: ignore[attr-defined]  # pytest: not a test


def cache_root() -> Path:
    """Where converted datasets and AFE rasters are kept (RIG_CACHE overrides)."""
    return Path(os.environ.get("RIG_CACHE", Path.home() / ".cache" / "neurobench-rig"))


def load_test_set(bench: Bench) -> TestSet:
    """The bench's test set, converted and pre-processed (cached after the first time)."""
    cfg = bench.dataset
    if cfg.name == "synthetic-asc":
        synthetic = make_split(cfg.samples_per_class, cfg.seed, "test")
        return TestSet([x.tobytes() for x in synthetic.inputs], synthetic.labels,
                       f"synthetic ASC audio, {len(synthetic)} one-second samples")
    from rig.datasets import afe, dcase  # Rockpool and scipy only for these datasets

    if cfg.name == "synthetic-dcase":
        clips = max(1, -(-cfg.samples_per_class // 10))  # ten 1 s slices per clip
        root = synthetic_dcase_cached(clips, cfg.seed)
    else:
        root = Path(cfg.path)
        if not root.is_dir():
            raise ConfigError(
                f"{bench.path}: [dataset] path {cfg.path!r} is not a folder",
                hint="point it at the TAU Urban Acoustic Scenes 2020 Mobile folder (with "
                "evaluation_setup/ and audio/), or use name = \"synthetic-dcase\"",
            )
    split = dcase.load_split(root, "test", cfg.rate_hz)
    keep = _per_class(split.labels, cfg.samples_per_class)
    audio, labels = split.audio[keep], split.labels[keep]
    name = f"{root.name}-test-{cfg.rate_hz}-{cfg.samples_per_class}"
    result = afe.cached_afe(audio, cfg.rate_hz, cache_root() / "afe", name)
    inputs = [afe.raster_to_bytes(r) for r in result.rasters]
    return TestSet(
        inputs, labels, f"{root.name}: {len(labels)} one-second test slices "
        f"({', '.join(CLASSES)})",
        preprocess_s=np.asarray(result.hardware_time_s, dtype=float),
        preprocess_host_s=np.asarray(result.sim_host_s, dtype=float),
        preprocess_method="Xylo Audio 2 AFE (simulated; hardware time = audio duration)",
    )


def synthetic_dcase_cached(clips_per_class: int, seed: int) -> Path:
    """The cache's synthetic DCASE set with this many clips per class, made if missing.

    Its folder names the clip count (a set made for fewer samples is not reused for more). It
    is made in a private folder and renamed into place whole, so a process never reads half a
    set: not one a run interrupted, nor one another process (a sweep's other worker, the
    runner window) is still writing. Of two making it at once, the first rename wins.
    """
    from rig.datasets import dcase

    name = f"{dcase.SYNTHETIC_DIRNAME}-seed{seed}-{clips_per_class}clips"
    root = cache_root() / "datasets" / name
    if root.is_dir():
        return root
    partial = root.with_name(f"{root.name}.partial-{os.getpid()}-{threading.get_ident()}")
    try:
        dcase.make_synthetic_dcase(partial, clips_per_class=clips_per_class, seed=seed)
        try:
            os.rename(partial, root)
        except OSError:
            if not root.is_dir():  # not another writer's finished set: a real failure
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return root


def _per_class(labels: np.ndarray, per_class: int) -> np.ndarray:
    """Indices of the first `per_class` samples of each class (all when per_class == 0)."""
    if per_class <= 0:
        return np.arange(len(labels))
    keep = [np.flatnonzero(labels == c)[:per_class] for c in np.unique(labels)]
    return np.sort(np.concatenate(keep))
