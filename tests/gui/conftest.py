"""Fixtures of the viewer tests: Qt runs offscreen (no X server), traces with known numbers, and
one real run folder from the virtual bench."""

from __future__ import annotations

import os

# Before anything imports Qt: the tests draw into offscreen buffers, not on a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
from pathlib import Path

import pytest

from tests.e2e.runs import only_run, run_rig


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
