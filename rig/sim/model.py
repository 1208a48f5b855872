"""The model inside the simulated DUT: a nearest-centroid linear classifier over band energies.

It is trained here, on the synthetic train split only, so the accuracy the rig measures
through the DUT is a real property of a real (tiny) model on held-out data.
"""

from __future__ import annotations

import numpy as np

from rig.datasets.synthetic import BANDS, CLASSES, make_split


class LinearAscModel:
    """scores = softmax(W x + b); W, b from class centroids of the train split."""

    model_id = "asc01"
    input_size = BANDS

    def __init__(self, weights: np.ndarray, bias: np.ndarray) -> None:
        self.weights = weights
        self.bias = bias

    @classmethod
    def train(cls, samples_per_class: int = 200, seed: int = 0) -> LinearAscModel:
        """Fit centroids on the train split (never the test split)."""
        train = make_split(samples_per_class, seed, "train")
        x = train.inputs.astype(np.float64)
        mu = np.stack([x[train.labels == c].mean(axis=0) for c in range(len(CLASSES))])
        # Nearest centroid == argmax of x.mu - |mu|^2 / 2; scaled so softmax is not all 0/1.
        scale = 1.0 / 4000.0
        return cls(mu * scale, -0.5 * (mu**2).sum(axis=1) * scale)

    def __call__(self, data: bytes) -> np.ndarray:
        x = np.frombuffer(data[: self.input_size].ljust(self.input_size, b"\0"), dtype=np.uint8)
        z = self.weights @ x.astype(np.float64) + self.bias
        z -= z.max()
        p = np.exp(z)
        return p / p.sum()

    def predict(self, data: bytes) -> int:
        """Top-1 class as the rig will see it: argmax of the scores printed with 3 decimals."""
        return int(np.argmax(np.round(self(data), 3)))
