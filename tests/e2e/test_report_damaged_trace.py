"""`rig report` on a run whose trace is damaged (issue 38): `rig analyze RUN` refuses such a run,
so the report must not state its figures as if they could be re-derived. A trace cut short, one
with flipped bytes or one gone is refused by name (exit 2, one line naming the run, the trace and
what is wrong) before anything is written; `--allow-damaged-traces` reports the run marked
instead, by name, in the report and in results.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.requires import needs

from .runs import fast_energy_run, run_rig
from .test_analyze_run import FAST

pytestmark = [pytest.mark.slow, needs("matplotlib")]

TRACE = "traces/emon.jls"


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """One short energy-mode run on the virtual bench (LPM01A at 1 kHz, a trace)."""
    return fast_energy_run(tmp_path_factory.mktemp("damaged-trace"), **FAST)


@pytest.fixture
def copy(measured: Path, tmp_path: Path) -> Path:
    """A copy of the run folder to damage."""
    return Path(shutil.copytree(measured, tmp_path / measured.name))


def truncate(run: Path) -> None:
    path = run / TRACE
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def flip(run: Path) -> None:
    path = run / TRACE
    data = bytearray(path.read_bytes())
    for k in range(len(data) // 2, len(data) // 2 + 4):
        data[k] ^= 0xFF
    path.write_bytes(bytes(data))


def remove(run: Path) -> None:
    (run / TRACE).unlink()


DAMAGE = {"truncated": (truncate, "is truncated: it holds"),
          "flipped": (flip, "is damaged: "),
          "missing": (remove, "is missing")}


def report(run: Path, out: Path, *extra: str):
    return run_rig("report", str(run), "--out", str(out), "--format", "md", *extra)


def test_an_intact_trace_is_reported_with_its_figure(measured: Path, tmp_path: Path) -> None:
    done = report(measured, tmp_path / "report")
    assert done.returncode == 0, done.stderr
    assert any(p.name.endswith("-asc-trace.png") for p in (tmp_path / "report" / "figures")
               .iterdir())
    data = json.loads((tmp_path / "report" / "results.json").read_text())
    assert "trace_damaged" not in data["runs"][0]


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_damaged_trace_is_refused_naming_the_run_and_the_trace(
        copy: Path, tmp_path: Path, kind: str) -> None:
    damage, what = DAMAGE[kind]
    assert run_rig("analyze", str(copy)).returncode == 0
    damage(copy)
    assert run_rig("analyze", str(copy)).returncode == 2  # what the report must agree with
    kept = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    out = tmp_path / "report"
    done = report(copy, out)
    assert done.returncode == 2, done.stdout
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"rig: error: {copy}: {TRACE} {what}")
    assert "the run's figures cannot be re-derived from it" in line
    assert "--allow-damaged-traces" in line
    if kind == "flipped":
        assert "integrity check failed" in line
    assert not (out / "report.md").exists() and not (out / "results.json").exists()
    # Only read: pyjls would "repair" a cut-short copy in place if it opened it first.
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == kept


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_allow_damaged_traces_reports_the_run_marked_by_name(
        copy: Path, tmp_path: Path, kind: str) -> None:
    damage, what = DAMAGE[kind]
    damage(copy)
    out = tmp_path / "report"
    done = report(copy, out, "--allow-damaged-traces")
    assert done.returncode == 0, done.stderr
    text = (out / "report.md").read_text()
    assert f"`{copy.name}`: figures not re-derivable" in text
    assert f"{TRACE} {what}" in " ".join(text.split())
    # No picture from a damaged trace: neither half of it nor nothing without a word.
    assert not any(p.name.endswith("-asc-trace.png") for p in (out / "figures").iterdir())
    [run] = json.loads((out / "results.json").read_text())["runs"]
    assert run["trace_damaged"].startswith(f"{TRACE} {what}")
