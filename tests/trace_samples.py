"""Traces with known numbers, shared by the viewer's data-layer and GUI tests: steps of constant
power at 1.8 V, written with the rig's own JLS writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rig.traces.files import TraceWriter

FS = 1000.0
V = 1.8


def step_trace(levels_w: list[tuple[float, float]], fs: float = FS) -> tuple[np.ndarray, ...]:
    """Current, voltage and GPIO for (power [W], seconds) steps at a constant 1.8 V."""
    current = np.concatenate([np.full(round(s * fs), p / V) for p, s in levels_w])
    voltage = np.full(len(current), V)
    gpio = np.ones(len(current), dtype=np.uint8)
    return current, voltage, gpio


def write_jls(path: Path, current: np.ndarray, voltage: np.ndarray, gpio: np.ndarray,
              fs: float = FS, simulated: bool = False) -> Path:
    """A JLS trace written by the rig's own writer."""
    with TraceWriter(path, fs, simulated=simulated) as w:
        w.append(0, current, voltage, gpio)
    return path
