"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def sim_bench_text() -> str:
    """The shipped virtual-bench file's text, to derive variants from."""
    return (REPO / "benches" / "sim.toml").read_text()
