"""The run ledger (rig/submission/ledger.py): a hash chain, crash-safe, shared by processes."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
from pathlib import Path

import pytest

from rig.run.ledger import (
    ENDED,
    GENESIS,
    STARTED,
    Ledger,
    canonical,
    figures_of,
    read_entries,
    run_digests,
    verify_chain,
)


def make_run(root: Path, name: str) -> Path:
    run = root / name
    (run / "traces").mkdir(parents=True)
    (run / "manifest.json").write_text('{"run_id": "x"}\n')
    (run / "events.jsonl").write_text('{"event": "run_started"}\n')
    (run / "traces" / "emon.jls").write_bytes(b"\x00\x01" * 1000)
    return run


def test_each_entry_chains_to_the_previous_line_s_digest(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    run = make_run(tmp_path, "r1")
    h0 = ledger.append(STARTED, run, run_id="x", procedure="asc")
    h1 = ledger.append(ENDED, run, status="complete", digests=run_digests(run),
                       figures={"energy_per_inference_j": 4.5e-5})
    lines = (tmp_path / "ledger.jsonl").read_bytes().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["prev"] == GENESIS and first["seq"] == 0 and first["run"] == "r1"
    assert second["prev"] == hashlib.sha256(lines[0]).hexdigest() == h0.digest
    assert h1.digest == hashlib.sha256(lines[1]).hexdigest() and h1.seq == 1
    assert second["digests"]["traces/emon.jls"] == hashlib.sha256(b"\x00\x01" * 1000).hexdigest()
    assert lines[1] == canonical(second)  # sorted keys, no spaces
    assert verify_chain(ledger.entries()) == []
    assert ledger.head() == h1


def test_a_removed_changed_or_hand_written_entry_breaks_the_chain(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    for k in range(4):
        ledger.append(STARTED, make_run(tmp_path, f"r{k}"))
    lines = (tmp_path / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    removed = b"".join(lines[:1] + lines[2:])
    problems = verify_chain(list(read_entries(removed, "x")))
    assert any("entry 2" in p and "prev is not the digest" in p for p in problems)
    assert any("not consecutive" in p for p in problems)
    changed = json.loads(lines[1])
    changed["run"] = "other"
    edited = lines[0] + canonical(changed) + b"\n" + b"".join(lines[2:])
    assert any("entry 2" in p for p in verify_chain(list(read_entries(edited, "x"))))
    spaced = lines[0] + json.dumps(json.loads(lines[1])).encode() + b"\n"
    assert any("canonical" in p for p in verify_chain(list(read_entries(spaced, "x"))))


def test_a_torn_last_line_is_cut_off_by_the_next_append_and_said(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    run = make_run(tmp_path, "r1")
    h0 = ledger.append(STARTED, run)
    with open(tmp_path / "ledger.jsonl", "ab") as f:
        f.write(b'{"seq":1,"prev":"ab')  # a crash in the middle of a write
    assert [e.seq for e in ledger.entries()] == [0]  # a torn line is not an entry
    h1 = ledger.append(ENDED, run, status="failed")
    entries = ledger.entries()
    assert [e.seq for e in entries] == [0, 1] and verify_chain(entries) == []
    assert entries[1].data["prev"] == h0.digest and h1.seq == 1
    assert "torn line of 19 bytes" in entries[1].data["repaired"]


def _append_many(root: str, who: int, n: int) -> None:
    ledger = Ledger(Path(root))
    for k in range(n):
        ledger.append(STARTED, Path(root) / f"p{who}-{k}")


def test_processes_sharing_a_runs_folder_keep_one_chain(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(str(tmp_path), w, 25)) for w in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = Ledger(tmp_path).entries()
    assert [e.seq for e in entries] == list(range(75))
    assert verify_chain(entries) == []
    assert sorted(e.run for e in entries) == sorted(f"p{w}-{k}" for w in range(3)
                                                    for k in range(25))


def test_figures_are_the_summary_s_finite_numbers_and_nan_is_refused(tmp_path: Path) -> None:
    assert figures_of({"a": 1.5, "b": float("nan"), "c": True, "d": "x", "e": 3}) == \
        {"a": 1.5, "e": 3}
    with pytest.raises(ValueError):
        Ledger(tmp_path).append(ENDED, tmp_path / "r", figures={"x": float("inf")})
    assert not (tmp_path / "ledger.jsonl").read_bytes()  # nothing half-written


def test_a_virtual_run_writes_its_started_and_ended_entries(tmp_path: Path) -> None:
    from tests.e2e.runs import only_run, run_rig

    proc = run_rig("measure", "asc", "--device", "sim", "--runs-dir", str(tmp_path / "runs"),
                   "--scope", "performance")
    assert proc.returncode == 0, proc.stderr
    run = only_run(tmp_path / "runs")
    entries = Ledger(tmp_path / "runs").entries()
    assert [(e.event, e.run) for e in entries] == [(STARTED, run.name), (ENDED, run.name)]
    manifest = json.loads((run / "manifest.json").read_text())
    end = entries[1].data
    assert end["status"] == manifest["status"] == "complete"
    assert end["run_id"] == manifest["run_id"] and end["procedure"] == "asc"
    assert end["digests"] == run_digests(run)  # the files as they were when it ended
    assert end["figures"]["inferences_per_s"] == manifest["summary"]["inferences_per_s"]


def test_an_interrupted_run_ends_its_entry_so_and_a_resume_is_a_new_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C: the `ended` entry says interrupted; `rig sweep resume` adds `resumed` and a
    second `ended` entry, the chain whole."""
    import rig.qubo.sweep
    from rig.cli import main

    def interrupted(self, point):
        raise KeyboardInterrupt

    monkeypatch.setattr(rig.qubo.sweep.QuboPointFunction, "__call__", interrupted)
    point = ["--sut", "cpu-sa", "--nodes", "10", "--density", "0.2", "--seed", "1",
             "--timeout", "0.05"]
    assert main(["measure", "qubo", *point, "--runs-dir", str(tmp_path), "--json"]) == 130
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    entries = Ledger(tmp_path).entries()
    assert [(e.event, e.data.get("status")) for e in entries] == [(STARTED, None),
                                                                  (ENDED, "interrupted")]
    monkeypatch.undo()  # the real point function again
    assert main(["sweep", "resume", str(run)]) == 0
    entries = Ledger(tmp_path).entries()
    assert [e.event for e in entries] == [STARTED, ENDED, "resumed", ENDED]
    assert entries[-1].data["status"] == "complete" and verify_chain(entries) == []
    assert entries[-1].data["digests"] == run_digests(run)
