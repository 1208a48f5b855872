"""A run folder whose manifest.json is truncated or not JSON (issue 13.8): `rig show` says so,
shows what events.jsonl still holds and exits 2; `--json`, `rig report`, `list_runs` and the
summary the GUI reads do not crash on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.cli import main
from rig.qubo.sweep import SweepSpec, start_sweep
from rig.report.runs import run_summary
from rig.run.events import LatencyRun, RunFinished, RunStarted, WindowMeasured
from rig.run.store import DAMAGED, INCOMPLETE, RunStore, list_runs, load_run

#: What a manifest.json can be turned into: (bytes, the reason `rig show` names).
DAMAGE = {
    "truncated": (None, "manifest.json is truncated or not JSON"),
    "binary": (b"\xff\xfe\x00garbage", "manifest.json is not UTF-8 text"),
    "list": (b"[1, 2]", "manifest.json holds a JSON list, not an object"),
}


def asc_run(root: Path, *, finished: bool) -> Path:
    """An ASC run folder with five timed runs and windows (finished, or killed mid-run)."""
    store = RunStore.create(root, "asc", "sim")
    store(RunStarted(run_id="r1", procedure="asc", device="sim", simulated=True,
                     manifest={"bench": {"name": "b"}}))
    for i in range(5):
        store(LatencyRun(index=i, iterations=800, elapsed_s=10.0, time_per_inference_s=0.0125,
                         inferences_per_s=80.0, timer="emon"))
        store(WindowMeasured(index=i, iterations=800, start_sample=10, end_sample=10010,
                             duration_s=10.0, energy_j=0.036, mean_power_w=3.6e-3,
                             energy_per_inference_j=45e-6))
    if finished:
        store(RunFinished(status="complete", summary={"inferences_per_s": 80.0,
                                                      "energy_per_inference_j": 45e-6}))
    store.close()
    return store.path


def damage(folder: Path, kind: str) -> str:
    """Damage the folder's manifest; the reason `rig show` must name."""
    data, reason = DAMAGE[kind]
    path = folder / "manifest.json"
    if data is None:
        text = path.read_bytes()
        data = text[: len(text) // 2]
    path.write_bytes(data)
    return reason


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_show_says_damaged_shows_the_events_and_exits_2(tmp_path: Path, capsys, kind: str
                                                        ) -> None:
    run = asc_run(tmp_path, finished=False)
    reason = damage(run, kind)
    assert main(["show", str(run)]) == 2
    out, err = capsys.readouterr()
    assert f"damaged run folder: {reason}" in out
    assert "asc on sim (SIMULATED), started 20" in out and "None" not in out
    assert "45.00 µJ" in out and "80.00 /s" in out  # recomputed from the events
    assert f"status: {INCOMPLETE}" in out
    assert len(err.strip().splitlines()) == 1
    assert err.startswith(f"rig: error: {run}: {reason}") and "events.jsonl" in err


def test_show_json_of_a_damaged_folder_is_json_and_exits_2(tmp_path: Path, capsys) -> None:
    run = asc_run(tmp_path, finished=True)
    reason = damage(run, "truncated")
    assert main(["show", str(run), "--json"]) == 2
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["manifest_error"].startswith(reason)
    assert data["status"] == "complete" and data["procedure"] == "asc"
    assert data["started_at"] and data["finished_at"]
    assert data["summary"]["energy_per_inference_j"] == 45e-6
    assert len(data["measurements"]["energy_windows"]) == 5
    assert len(err.strip().splitlines()) == 1 and reason in err


def test_an_intact_folder_still_exits_0(tmp_path: Path, capsys) -> None:
    run = asc_run(tmp_path, finished=True)
    assert main(["show", str(run)]) == 0
    assert "damaged" not in capsys.readouterr().out
    assert "manifest_error" not in run_summary(run)


def test_a_damaged_sweep_is_shown_from_its_events(tmp_path: Path, capsys) -> None:
    spec = SweepSpec(suts=("cpu-sa",), nodes=(10, 25), densities=(0.1,), timeouts=(1.0,),
                     seeds=(0, 1))
    outcome = start_sweep(spec, runs_root=tmp_path, stand_in=True)
    reason = damage(outcome.run_path, "truncated")
    assert main(["show", str(outcome.run_path)]) == 2
    out, err = capsys.readouterr()
    assert f"damaged run folder: {reason}" in out and "points: 4/4 done" in out
    assert reason in err and len(err.strip().splitlines()) == 1
    data = run_summary(outcome.run_path)
    assert data["points_done"] == 4 and data["manifest_error"].startswith(reason)


def test_list_runs_lists_damaged_folders_without_crashing(tmp_path: Path) -> None:
    good = asc_run(tmp_path, finished=True)
    runs = {kind: asc_run(tmp_path, finished=True) for kind in DAMAGE}
    reasons = {kind: damage(path, kind) for kind, path in runs.items()}
    listed = {r["path"]: r for r in list_runs(tmp_path)}
    assert listed[good]["status"] == "complete" and listed[good]["damaged"] is None
    for kind, path in runs.items():
        row = listed[path]
        assert row["status"] == DAMAGED and row["damaged"].startswith(reasons[kind])
        # What the first line of events.jsonl says.
        assert row["procedure"] == "asc" and row["device"] == "sim" and row["simulated"]
        assert row["started_at"].startswith("20")


def test_load_run_keeps_the_events_and_names_the_damage(tmp_path: Path) -> None:
    run = asc_run(tmp_path, finished=True)
    damage(run, "binary")
    record = load_run(run)
    assert record.damaged and record.manifest_error.startswith("manifest.json is not UTF-8")
    assert record.manifest["procedure"] == "asc" and record.status == "complete"
    assert len(record.rows) == 10


def test_report_refuses_a_damaged_manifest_in_one_line(tmp_path: Path, capsys) -> None:
    run = asc_run(tmp_path, finished=True)
    for kind in sorted(DAMAGE):
        reason = damage(run, kind)
        assert main(["report", str(run), "--out", str(tmp_path / "r")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and reason in err and "rig show" in err
    assert not (tmp_path / "r").exists()
