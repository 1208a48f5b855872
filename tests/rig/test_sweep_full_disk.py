"""A sweep whose disk fills up (found by the soak, benchmarks/soak.py, issue 39: the runs volume
filled by another program while a cluster sweep checkpointed its points).

The sweep folder's own manifest entries (the power sources and workers its points used, written
as the first point that names one comes back) were written outside the run store's storage-error
handling: a full disk there raised a bare OSError, which the sweep took for a bug (a traceback),
and the room the folder keeps for its end was not given back, so the end did not fit either and
the folder read back as incomplete. Now it is the run store's StorageError: the sweep ends
failed, naming the disk, and resumes once there is room.

The disk is the one fake here, at the file-system edge: from the first power-source entry on,
a manifest write fails with ENOSPC until the room the run folder keeps is given back.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rig.errors import StorageError
from rig.qubo.sweep import parse_sweep, read_sweep, resume_sweep, start_sweep
from rig.run.store import RESERVE, RunStore, load_run


def test_a_sweep_whose_disk_fills_ends_failed_naming_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    real = RunStore._write_manifest
    full: list[Path] = []

    def write_manifest(store: RunStore) -> None:
        if store.manifest.get("power_sources") and not full:
            full.append(store.path / RESERVE)  # another program takes every block left
        if full and full[0].exists():  # only the room the folder kept is left
            store._writing = "manifest.json"
            raise OSError(errno.ENOSPC, "No space left on device")
        real(store)

    monkeypatch.setattr(RunStore, "_write_manifest", write_manifest)
    spec = parse_sweep({"sweep": {"suts": ["cpu-sa"], "nodes": [10, 25], "densities": [0.1],
                                  "seeds": [0, 1], "timeouts": [0.01]}}, tmp_path / "s.toml")
    outcome = start_sweep(spec, runs_root=tmp_path / "runs", stand_in=True)
    assert outcome.status == "failed"
    assert isinstance(outcome.error, StorageError)
    assert "the disk is full: cannot write manifest.json" in str(outcome.error)
    record = read_sweep(outcome.run_path)
    assert record.status == "failed"
    assert "the disk is full" in record.manifest["error"]
    assert not (outcome.run_path / RESERVE).exists()

    monkeypatch.undo()  # room again: the sweep resumes and measures every point once
    resumed = resume_sweep(outcome.run_path)
    assert resumed.status == "complete"
    keys = [e.key for e in load_run(outcome.run_path).events if e.kind == "sweep_point"]
    assert sorted(keys) == sorted(p.key for p in spec.points())
