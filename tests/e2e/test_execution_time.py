"""ASC execution time as ASC.md defines it: mean and standard error over every test sample, the
5-run throughput kept beside it, dynamic energy from the test-set mean, each number naming its
source; and run folders recorded before the change still read back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from rig.run.console import summary_table
from rig.run.store import load_run
from rig.traces.analysis import mean_stderr

from .runs import TRUTH, events, run_rig

pytestmark = pytest.mark.slow

#: Keys this change added to events and summaries; an "old" run folder has none of them.
NEW_EVENT_KEYS = {"latency_run": ("dut_elapsed_s", "emon_elapsed_s"),
                  "sample_classified": ("timer", "dut_time_s", "emon_time_s")}
NEW_SUMMARY_KEYS = ("execution_time_source", "execution_time_samples", "execution_time_timer",
                    "execution_time_runs", "execution_time_note", "dynamic_energy_source",
                    "latency_time_per_inference_mean_s", "latency_time_per_inference_stderr_s",
                    "preprocess_time_source", "preprocess_time_samples", "timing")


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[dict, Path]:
    runs = tmp_path_factory.mktemp("runs")
    proc = run_rig("measure", "asc", "--device", "sim", "--runs-dir", str(runs), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    return out, Path(out["run"])


def test_execution_time_is_the_test_set_mean_with_its_standard_error(measured) -> None:
    out, run = measured
    s = out["summary"]
    samples = [e for e in events(run) if e["event"] == "sample_classified"]
    times = np.array([e["execution_time_s"] for e in samples])
    mean, stderr = mean_stderr(times)
    assert (s["execution_time_mean_s"], s["execution_time_stderr_s"]) == (mean, stderr)
    assert s["execution_time_source"] == "test_set" and s["execution_time_samples"] == 40
    # Each sample timed by the DUT's µs counter: 12.5 ms exactly, so the error is 0.
    assert s["execution_time_timer"] == "dut" and {e["timer"] for e in samples} == {"dut"}
    assert mean == pytest.approx(12.5e-3, rel=1e-12) and stderr == 0.0
    # The monitor timed the same inferences at 1 ms resolution.
    assert all(abs(e["emon_time_s"] - e["dut_time_s"]) <= 1e-3 + 1e-9 for e in samples)


def test_the_timed_runs_stay_beside_it(measured) -> None:
    s = measured[0]["summary"]
    assert s["inferences_per_s"] == pytest.approx(TRUTH["inferences_per_s"], rel=1e-3)
    assert s["latency_time_per_inference_mean_s"] == pytest.approx(12.5e-3, rel=1e-3)
    assert any(c["name"] == "latency replicable" and c["ok"] for c in s["checks"])


def test_dynamic_energy_is_dynamic_power_times_the_test_set_mean(measured) -> None:
    s = measured[0]["summary"]
    assert s["dynamic_energy_per_inference_j"] == s["dynamic_power_w"] * s["execution_time_mean_s"]
    assert s["dynamic_energy_source"] == ("dynamic_power_w x execution_time_mean_s "
                                          "(test set, 40 samples)")
    assert s["dynamic_energy_per_inference_j"] == pytest.approx(30e-6, rel=1e-3)


def test_show_names_the_source(measured) -> None:
    _, run = measured
    shown = run_rig("show", str(run))
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "test set, 40 samples" in text
    assert "check: timer agreement" in text


def _old_style_copy(run: Path, dest: Path, *, finished: bool) -> Path:
    """`run` as the rig before this change would have written it (and, unless `finished`, as
    if it was killed before run_finished)."""
    copy = dest / run.name
    shutil.copytree(run, copy)
    lines = []
    for record in events(run):
        for key in NEW_EVENT_KEYS.get(record["event"], ()):
            record.pop(key)
        if record["event"] == "run_finished":
            if not finished:
                continue
            summary = record["summary"]
            for key in NEW_SUMMARY_KEYS:
                summary.pop(key, None)
            summary["checks"] = [c for c in summary["checks"] if c["name"] != "timer agreement"]
        lines.append(json.dumps(record))
    (copy / "events.jsonl").write_text("\n".join(lines) + "\n")
    if not finished:
        manifest = json.loads((copy / "manifest.json").read_text())
        manifest["status"] = "running"
        (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


def test_a_run_recorded_before_the_change_still_shows(measured, tmp_path: Path) -> None:
    old = _old_style_copy(measured[1], tmp_path, finished=True)
    shown = run_rig("show", str(old))
    assert shown.returncode == 0, shown.stderr
    data = json.loads(run_rig("show", str(old), "--json").stdout)
    assert "execution_time_source" not in data["summary"]  # shown as it was stored
    console = Console(width=200, record=True)
    console.print(summary_table(data["summary"], title="Summary"))  # what `rig show` prints
    (execution,) = [x for x in console.export_text().splitlines()
                    if "Execution time per inference" in x]
    assert execution.rstrip(" │").endswith("(timed runs)")
    report = run_rig("report", str(old), "--out", str(tmp_path / "report"), "--format", "md")
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert "a run recorded before the rig measured it over the test set" in md


def test_a_killed_old_run_is_recomputed_without_guessing_its_clocks(measured,
                                                                      tmp_path: Path) -> None:
    old = _old_style_copy(measured[1], tmp_path, finished=False)
    data = json.loads(run_rig("show", str(old), "--json").stdout)
    s = data["summary"]
    assert data["status"] == "incomplete"
    # The test-set mean is computed; which clock timed each sample is not known, so not named.
    assert s["execution_time_source"] == "test_set" and "execution_time_timer" not in s
    (check,) = [c for c in s["checks"] if c["name"] == "timer agreement"]
    assert check["ok"] is None and "one clock only" in check["detail"]
    assert load_run(old).status == "incomplete"
