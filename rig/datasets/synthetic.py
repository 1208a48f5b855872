"""A small synthetic ASC set: clearly not DCASE, made for tests and the virtual bench.

Each sample stands for one second of audio already reduced to `BANDS` log band energies
(uint8), the input a tiny MLPerf Tiny-style ASC model takes. Every class has its own smooth
spectral shape; samples are that shape plus level changes and noise, so a classifier trained on
the train split gets most, not all, of the test split right.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The four NeuroBench ASC scenes, in label order.
CLASSES = ("airport", "street_traffic", "bus", "park")
BANDS = 32
#: Noise and level spread, chosen so the nearest-centroid model is good but not perfect.
_NOISE = 22.0
_LEVEL = 12.0
# One random stream per split (Python's str hash is randomised per process, so not that).
_SALT = {"train": 1, "test": 2}


@dataclass(frozen=True)
class Split:
    """Inputs (n, BANDS) uint8 and labels (n,) int64."""

    inputs: np.ndarray
    labels: np.ndarray
    name: str

    def __len__(self) -> int:
        return len(self.labels)


def class_shapes() -> np.ndarray:
    """The (4, BANDS) mean log-band-energy shape of each scene."""
    b = np.arange(BANDS, dtype=np.float64)
    centres = np.array([6.0, 12.0, 4.0, 22.0])
    widths = np.array([6.0, 9.0, 3.5, 5.0])
    tilt = np.array([-0.8, -1.2, -2.0, -0.3])
    bumps = 70.0 * np.exp(-0.5 * ((b[None, :] - centres[:, None]) / widths[:, None]) ** 2)
    return 60.0 + bumps + tilt[:, None] * b[None, :] * 0.5 + 20.0


def make_split(samples_per_class: int, seed: int, name: str = "test") -> Split:
    """`samples_per_class` samples of each scene, shuffled, reproducible from `seed`."""
    if name not in _SALT:
        raise ValueError(f"split must be one of {sorted(_SALT)}, not {name!r}")
    rng = np.random.default_rng([seed, _SALT[name]])
    shapes = class_shapes()
    labels = np.repeat(np.arange(len(CLASSES)), samples_per_class)
    rng.shuffle(labels)
    level = rng.normal(0.0, _LEVEL, size=(len(labels), 1))
    noise = rng.normal(0.0, _NOISE, size=(len(labels), BANDS))
    x = np.clip(np.rint(shapes[labels] + level + noise), 0, 255).astype(np.uint8)
    return Split(inputs=x, labels=labels.astype(np.int64), name=name)

