"""A validation split of the TRAIN data, for choosing training settings without the test split.

NeuroBench ASC: "The test split should not be used to train or tune the model, only the train
split. Submitters may define their own validation split". This one is seeded, stratified by
class, and grouped: the slices of one clip (a recording cut into 1-second slices) land on the
same side, so validation never sees a second of a recording the fit saw.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.errors import RigError

DEFAULT_FRACTION = 0.25
DEFAULT_SEED = 0


class SplitError(RigError):
    """Train data that cannot be split into a fit and a validation part as asked."""


@dataclass(frozen=True)
class ValidationSplit:
    """Indices into the train data: `fit` (to fit on) and `validation` (to choose with)."""

    fit: np.ndarray
    validation: np.ndarray
    fraction: float
    seed: int
    #: What the split holds: slices and clips per side, clips per class on each side.
    summary: dict[str, Any]

    def record(self) -> dict[str, Any]:
        """The split as JSON-ready data (for a model file's training record)."""
        return {"fraction": self.fraction, "seed": self.seed, "stratified_by": "class",
                "grouped_by": "clip", **self.summary}


def validation_split(labels: np.ndarray, groups: np.ndarray | None = None, *,
                     fraction: float = DEFAULT_FRACTION, seed: int = DEFAULT_SEED,
                     class_names: tuple[str, ...] | None = None) -> ValidationSplit:
    """Split train slices by clip: for each class, round(fraction x its clips) clips (Python's
    round, halves to even; at least one, and at least one left to fit on), drawn with `seed`,
    go to validation.

    `groups` names each slice's clip (None: every slice is its own clip). A clip must hold one
    class only. Deterministic given `seed` (clips are drawn from their sorted ids, so the
    order of the slices does not matter). `class_names` label the per-class counts.
    """
    labels = np.asarray(labels)
    groups = np.arange(len(labels)) if groups is None else np.asarray(groups)
    if labels.ndim != 1 or groups.shape != labels.shape:
        raise SplitError(f"labels and clip ids must be 1-D and alike, not {labels.shape} and "
                         f"{groups.shape}")
    if not 0.0 < fraction < 1.0:
        raise SplitError(f"validation fraction {fraction} is not between 0 and 1",
                         hint="e.g. 0.25: a quarter of each class's clips")
    rng = np.random.default_rng(seed)
    held_out: list[np.ndarray] = []
    per_class: dict[str, dict[str, int]] = {}
    for c in np.unique(labels):  # one pass per class
        clips = np.unique(groups[labels == c])
        mixed = np.intersect1d(clips, groups[labels != c])
        if mixed.size:
            raise SplitError(f"clip {mixed[0]} holds slices of more than one class",
                             hint="clip ids must name recordings of one scene each")
        if len(clips) < 2:
            raise SplitError(f"class {c} has {len(clips)} clip(s) in the train data: a "
                             "validation split needs at least 2 per class",
                             hint="use more train clips per class")
        n_val = min(max(round(fraction * len(clips)), 1), len(clips) - 1)
        held_out.append(rng.permutation(clips)[:n_val])
        name = class_names[int(c)] if class_names is not None else str(int(c))
        per_class[name] = {"fit": len(clips) - n_val, "validation": n_val}
    is_val = np.isin(groups, np.concatenate(held_out))
    fit, val = np.flatnonzero(~is_val), np.flatnonzero(is_val)
    summary = {
        "fit": {"slices": len(fit), "clips": len(np.unique(groups[fit]))},
        "validation": {"slices": len(val), "clips": len(np.unique(groups[val]))},
        "clips_per_class": per_class,
    }
    return ValidationSplit(fit=fit, validation=val, fraction=float(fraction), seed=int(seed),
                           summary=summary)
