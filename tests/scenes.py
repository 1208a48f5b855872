"""The synthetic ASC test scenes several Xylo test files run, through the AFE simulator once.

Rockpool's AFE simulator takes about a second of CPU per one-second scene, and the shipped
model's accuracy check and the NIR round trip score the same scenes: `afe_scenes` keeps their
rasters in the session's RIG_CACHE (tests/conftest.py), so that whichever asks second (on any
xdist worker) reads them. `afe.cached_afe` keys the file by the audio and every AFE setting,
and a worker that asks while another is simulating waits for its file (its lock) rather than
simulate the same scenes beside it (both files tend to start together).
"""

from __future__ import annotations

import numpy as np

from rig.datasets import afe, synthetic
from rig.datasets.testsets import cache_root


def afe_scenes(per_class: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Rasters and labels of `per_class` scenes per class of the rig's own test stream (seed
    0; the shipped model was trained on seed 1), pre-processed as the Xylo bench does."""
    split = synthetic.make_split(per_class, seed=0, name="test")
    result = afe.cached_afe(split.inputs, synthetic.RATE_HZ, cache_root() / "afe",
                            f"tests-synthetic-test-{per_class}")
    return result.rasters, split.labels
