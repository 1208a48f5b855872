"""A run folder on a disk that another program fills to the last block (found by the soak,
benchmarks/soak.py, issue 39): the run's end must still reach its folder, naming the full disk.

Before, the manifest rewrite that failed left a 0-byte manifest.json.tmp, and neither the
manifest (still `running`) nor events.jsonl's run_finished could be written: the folder read
back as `incomplete` (or `failed` with a manifest saying `running` and no error), as a run whose
process was killed does, with nothing saying the disk was full.

The disk is a real 8 MiB tmpfs mounted in a user namespace (the kernel's own ENOSPC); the run is
a `RunStore` fed the events a run publishes, in a Python process inside that namespace.

A program that keeps writing takes the room the folder gave back, too (the 1-hour soak: the
run's last line was cut at 16 KiB): events.jsonl keeps room allocated past its end, which only
its own appends use, so that run_finished is on disk whatever else fills it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: Inside the namespace: a run starts, another writer fills the disk, the next manifest write
#: fails (StorageError), the run ends as the runner ends it; then the folder is read back. With
#: "greedy" the writer takes what the run gave back before the run's end is written.
PROGRAM = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from rig.errors import StorageError
    from rig.run.events import InstrumentInfo, RunFinished, RunStarted
    from rig.run.store import RunStore, load_run

    disk, how = Path(sys.argv[1]), sys.argv[2]

    def fill(name):  # another program takes every block left
        fd = os.open(disk / name, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, bytes(4096)):
                pass
        except OSError:
            pass
        os.close(fd)

    if how in ("full-before", "full-at-start"):  # the run cannot start
        (disk / "runs").mkdir()
        if how == "full-before":  # not even its first line fits
            fill("ballast")
        store = RunStore.create(disk / "runs", "asc", "sim")
        if how == "full-at-start":  # its first line fits (events.jsonl's room), its manifest not
            fill("ballast")
        try:
            store(RunStarted(run_id="r1", procedure="asc", device="sim", simulated=True))
        except StorageError as exc:
            print(json.dumps({"raised": str(exc),
                              "left": sorted(p.name for p in (disk / "runs").iterdir())}))
        raise SystemExit(0)
    store = RunStore.create(disk / "runs", "asc", "sim")
    store(RunStarted(run_id="r1", procedure="asc", device="sim", simulated=True))
    fill("ballast")
    error = None
    try:
        store(InstrumentInfo(role="dut", info={"name": "x" * 20000}))
    except StorageError as exc:
        error = str(exc)
    if how == "greedy":
        fill("ballast2")
    store(RunFinished(status="failed", summary={"note": "y" * 30000}, error=error))
    run = load_run(store.path)
    print(json.dumps({"raised": error, "status": run.status,
                      "finished_error": run.finished.error if run.finished else None,
                      "manifest": run.manifest.get("status"),
                      "manifest_error": run.manifest.get("error"),
                      "files": sorted(p.name for p in store.path.iterdir())}))
""")


def run_on_a_small_disk(tmp_path: Path, how: str) -> dict:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to mount a small disk")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = 'mount -t tmpfs -o size=8m rigtest "$0" || exit 99; exec "$@"'
    done = subprocess.run(["unshare", "-Urm", "sh", "-c", script, str(disk), sys.executable,
                           "-c", PROGRAM, str(disk), how], cwd=REPO, capture_output=True,
                          text=True, timeout=120, check=False)
    if done.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs in a user namespace: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_end_of_a_run_reaches_a_disk_another_program_filled(tmp_path: Path) -> None:
    out = run_on_a_small_disk(tmp_path, "once")
    assert out["raised"] and "the disk is full" in out["raised"]
    # The folder says how the run ended, in both files, naming the disk.
    assert out["status"] == "failed"
    assert out["manifest"] == "failed"
    assert "the disk is full" in (out["manifest_error"] or "")
    # No debris: no half-written manifest, no room kept for the end once the run ended.
    assert out["files"] == ["events.jsonl", "manifest.json", "results.csv", "results.parquet",
                            "traces"]


def test_the_end_of_a_run_reaches_a_disk_another_program_keeps_full(tmp_path: Path) -> None:
    out = run_on_a_small_disk(tmp_path, "greedy")
    assert out["raised"] and "the disk is full" in out["raised"]
    # events.jsonl says how the run ended (the manifest may not have found room again)
    assert out["status"] == "failed"
    assert "the disk is full" in (out["finished_error"] or "")
    assert "manifest.json.tmp" not in out["files"]


@pytest.mark.parametrize("how", ["full-before", "full-at-start"])
def test_a_run_that_cannot_start_leaves_no_folder(tmp_path: Path, how: str) -> None:
    """The run's start (its run_started line and its first manifest) did not reach the disk:
    a folder that nothing can read or resume (a sweep's `rig sweep resume` refused it, 'holds
    no sweep run_started'; an ASC run's read back as incomplete, with no error) is removed."""
    out = run_on_a_small_disk(tmp_path, how)
    assert "the disk is full" in out["raised"]
    assert "cannot start the run folder" in out["raised"]
    assert out["left"] == []


def test_a_telemetry_report_that_does_not_fit_keeps_no_run_from_ending(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rig serve` ends a run with telemetry's report (the bus asks it before RunFinished),
    which the run store records in the manifest: on a disk full by then that rewrite failed,
    the StorageError left the bus before RunFinished and the folder read back `incomplete`
    with no error (a short soak in make test). Now RunFinished is still handed on, and the
    error raised after it."""
    import errno
    import os

    from rig.errors import StorageError
    from rig.run.events import EventBus, RunFinished, RunStarted, TelemetryReport
    from rig.run.store import MANIFEST, RunStore, load_run

    write_manifest = RunStore._write_manifest

    def full_disk(self: RunStore) -> None:  # the kernel's ENOSPC, until the store gave room back
        if "telemetry" in self.manifest and self.error is None:
            self._writing = MANIFEST
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        write_manifest(self)

    monkeypatch.setattr(RunStore, "_write_manifest", full_disk)

    class Telemetry:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def __call__(self, event: object) -> None:
            self.seen.append(type(event).__name__)

        def closing_events(self) -> list[TelemetryReport]:
            return [TelemetryReport(sink="mqtt", offered=3, published=3)]

    store = RunStore.create(tmp_path / "runs", "asc", "soak-ppk2")
    telemetry = Telemetry()
    bus = EventBus()
    bus.subscribe(store)
    bus.subscribe(telemetry)
    bus.publish(RunStarted(run_id="r1", procedure="asc", device="soak-ppk2", simulated=True))
    with pytest.raises(StorageError, match=r"disk is full.*manifest\.json"):
        bus.publish(RunFinished(status="failed", error="the disk is full: trace file ..."))
    record = load_run(store.path)
    assert record.status == "failed" and record.finished is not None
    assert json.loads((store.path / "manifest.json").read_text())["status"] == "failed"
    assert "RunFinished" in telemetry.seen  # the other subscribers got the end too
