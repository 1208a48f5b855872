"""The synthetic ASC test scenes several Xylo test files run, through the AFE simulator once.

Rockpool's AFE simulator takes about a second of CPU per one-second scene, and the shipped
model's accuracy check and the NIR round trip score the same scenes: `afe_scenes` keeps their
rasters in the session's RIG_CACHE (tests/conftest.py), so that whichever asks second (on any
xdist worker) reads them. `afe.cached_afe` keys the file by the audio and every AFE setting; a
lock file makes a worker that asks while another is simulating wait for its file rather than
simulate the same scenes beside it (both files tend to start together).
"""

from __future__ import annotations

import time

import numpy as np

from drivers.file_lock import FileLock
from rig.datasets import afe, synthetic
from rig.datasets.testsets import cache_root

#: Longest wait for another worker's simulation (~12 s alone, longer on a loaded host); after
#: it this worker simulates the scenes itself (slower, never wrong).
WAIT_S = 120.0


def afe_scenes(per_class: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Rasters and labels of `per_class` scenes per class of the rig's own test stream (seed
    0; the shipped model was trained on seed 1), pre-processed as the Xylo bench does."""
    split = synthetic.make_split(per_class, seed=0, name="test")
    folder = cache_root() / "afe"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"tests-synthetic-test-{per_class}"
    lock = FileLock(folder / f"{name}.lock")
    deadline = time.monotonic() + WAIT_S
    while not lock.acquire() and time.monotonic() < deadline:
        time.sleep(0.1)  # another worker simulates them: its file comes when it lets go
    try:
        result = afe.cached_afe(split.inputs, synthetic.RATE_HZ, folder, name)
    finally:
        lock.release()
    return result.rasters, split.labels
