"""A disk that fills up while an ASC run is ending (found by the soak, benchmarks/soak.py, issue
39: a PPK2 run on the runs volume another program had filled): the write that fails is the
manifest's `traces` entry, published once the monitor stopped. The run must still end its
folder, failed and naming the full disk.

Before, the StorageError from that publish left `measure_asc`'s cleanup before it published
`run_finished`: the folder read back as incomplete, as a run killed outright does, with nothing
saying why (and the room the run folder keeps for its end unused).

The disk is the one fake here, at the file-system edge: the manifest write that records the
trace raises ENOSPC, as the kernel does on a full disk.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from rig.cli import main
from rig.run.store import RunStore, load_run

from .runs import bench_variant, only_run

pytestmark = pytest.mark.slow


def test_a_disk_full_when_the_trace_is_recorded_still_ends_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    real = RunStore._write_manifest

    def write_manifest(store: RunStore) -> None:
        if store.manifest.get("traces") and store.manifest.get("status") == "running":
            store._writing = "manifest.json"  # the TraceSaved entry, on a full disk
            raise OSError(errno.ENOSPC, "No space left on device")
        real(store)

    monkeypatch.setattr(RunStore, "_write_manifest", write_manifest)
    bench = bench_variant(tmp_path, spc=("samples_per_class = 10", "samples_per_class = 1"),
                          runs=("runs = 5", "runs = 2"), run_s=("min_run_s = 10.0",
                                                                 "min_run_s = 1.0"))
    runs = tmp_path / "runs"
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(runs)])
    err = " ".join(capsys.readouterr().err.split())  # unwrapped
    assert code == 2, err
    assert "rig: error: the disk is full: cannot write manifest.json" in err
    record = load_run(only_run(runs))
    assert record.status == "failed"
    assert record.manifest["status"] == "failed"
    assert "the disk is full" in record.manifest["error"]
    assert record.finished is not None and "the disk is full" in (record.finished.error or "")
