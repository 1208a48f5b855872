"""`rig sweep resume` on a damaged manifest.json (issue 22.10): one warning line on stderr
saying what was damaged and that it is rewritten from events.jsonl, said before it is; or, when
events.jsonl cannot rebuild it, a refusal with a hint and the folder untouched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.cli import main
from rig.qubo.sweep import SweepSpec, resume_sweep, start_sweep
from tests.rig.test_damaged_manifest import DAMAGE, damage

SPEC = SweepSpec(suts=("cpu-sa",), nodes=(10, 25), densities=(0.1,), timeouts=(1.0,),
                 seeds=(0, 1))
#: A manifest that is JSON but lacks what a sweep needs: (content, what the warning names).
MISSING = {
    "no sweep": ({"procedure": "qubo-sweep"}, "lacks sweep"),
    "sweep not a table": ({"procedure": "qubo-sweep", "sweep": 5, "resumes": 3}, "lacks sweep"),
    "empty object": ({}, "lacks procedure, sweep"),
}


def sweep_folder(tmp_path: Path) -> tuple[Path, dict]:
    """A stand-in sweep that ran 4 points, and its manifest as written."""
    run = start_sweep(SPEC, runs_root=tmp_path, stand_in=True).run_path
    return run, json.loads((run / "manifest.json").read_text())


def damaged(tmp_path: Path, kind: str) -> tuple[Path, dict, str]:
    run, original = sweep_folder(tmp_path)
    if kind in DAMAGE:
        return run, original, damage(run, kind)
    content, words = MISSING[kind]
    (run / "manifest.json").write_text(json.dumps(content))
    return run, original, words


@pytest.mark.parametrize("kind", [*sorted(DAMAGE), *sorted(MISSING)])
def test_resume_warns_in_one_line_then_rewrites_from_events(tmp_path: Path, capsys,
                                                            kind: str) -> None:
    run, original, words = damaged(tmp_path, kind)
    assert main(["sweep", "resume", str(run), "--json"]) == 0
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"rig: warning: {run}: ") and words in lines[0]
    assert "rewriting it from the run_started event of events.jsonl" in lines[0]
    assert json.loads(out)["status"] == "complete"
    manifest = json.loads((run / "manifest.json").read_text())
    for key in ("run_id", "procedure", "device", "simulated", "sweep", "point_function"):
        assert manifest[key] == original[key], key
    assert manifest["status"] == "complete" and len(manifest["resumes"]) == 1


def test_the_warning_comes_before_the_manifest_is_rewritten(tmp_path: Path) -> None:
    run, _, _ = damaged(tmp_path, "truncated")
    before = (run / "manifest.json").read_bytes()
    on_disk_when_warned: list[bytes] = []
    resume_sweep(run, warn=lambda text: on_disk_when_warned.append(
        (run / "manifest.json").read_bytes()))
    assert on_disk_when_warned == [before]
    assert (run / "manifest.json").read_bytes() != before


def test_resume_refuses_when_events_cannot_rebuild_it(tmp_path: Path, capsys) -> None:
    run, _, reason = damaged(tmp_path, "truncated")
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    (run / "events.jsonl").write_text("".join(lines[1:]))  # run_started lost
    manifest, events = (run / "manifest.json").read_bytes(), (run / "events.jsonl").read_bytes()
    assert main(["sweep", "resume", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0] and "no sweep run_started" in err[0], err
    assert "restore manifest.json from a copy of the folder" in err[0]
    assert (run / "manifest.json").read_bytes() == manifest
    assert (run / "events.jsonl").read_bytes() == events


def test_an_intact_manifest_gives_no_warning(tmp_path: Path, capsys) -> None:
    run, _ = sweep_folder(tmp_path)
    assert main(["sweep", "resume", str(run), "--json"]) == 0
    assert capsys.readouterr().err == ""
