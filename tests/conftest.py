"""Shared fixtures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def sim_bench_text() -> str:
    """The shipped virtual-bench file's text, to derive variants from."""
    return (REPO / "benches" / "sim.toml").read_text()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``RIG_TEST_REPORT`` set (`make test`), append each phase's outcome and duration
    for tests/suite_report.py. Under xdist the controller gets every worker's reports."""
    target = os.environ.get("RIG_TEST_REPORT")
    if not target or os.environ.get("PYTEST_XDIST_WORKER"):  # the controller writes
        return
    with open(target, "a", encoding="utf-8") as out:
        out.write(json.dumps({"nodeid": report.nodeid, "when": report.when,
                              "outcome": report.outcome, "duration": report.duration}) + "\n")
