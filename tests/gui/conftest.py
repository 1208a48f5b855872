"""Fixtures of the viewer tests: Qt runs offscreen (no X server), traces with known numbers, and
one real run folder from the virtual bench."""

from __future__ import annotations

import os

# Before anything imports Qt: the tests draw into offscreen buffers, not on a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
from pathlib import Path

import numpy as np
import pytest

from rig.traces import TraceWriter
from tests.e2e.runs import only_run, run_rig

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


@pytest.fixture(scope="session")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A real run folder (`rig measure asc --device sim`, ~3 s) and its `rig show --json`."""
    runs = tmp_path_factory.mktemp("runs")
    proc = run_rig("measure", "asc", "--device", "sim", "--runs-dir", str(runs), "--json")
    assert proc.returncode == 0, proc.stderr
    run = only_run(runs)
    show = run_rig("show", str(run), "--json")
    assert show.returncode == 0, show.stderr
    return run, json.loads(show.stdout)
