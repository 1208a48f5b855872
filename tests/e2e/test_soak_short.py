"""The short soak (issue 39): benchmarks/soak.py for 0.02 h (72 s) with a fixed seed, every kind
of fault injected at least once, and the audit's exactly-once and no-leftovers parts asserted.
`make soak` runs the long one (HOURS=1 by default); its figures are printed, not asserted.

It starts a mosquitto, a Dask scheduler, three rig workers, the dashboard and `rig serve`, and
runs sweeps and ASC runs beside them: `serial`, so it has the machine to itself.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
SOAK = [sys.executable, str(REPO / "benchmarks" / "soak.py")]
FAULT_KINDS = ("broker_restart", "scheduler_restart", "worker_kill", "serve_kill", "dut_unplug",
               "monitor_unplug", "dut_stop", "disk_full", "dashboard_restart")


def soak_env(tmp_path: Path, lock: str | None = None) -> dict[str, str]:
    """The soak's temp folder under `tmp_path` (what it leaves is seen), its own lock name."""
    temp = tmp_path / "tmp"
    temp.mkdir(exist_ok=True)
    return {**os.environ, "TMPDIR": str(temp),
            "RIG_SOAK_LOCK": lock or f"rig-soak-test-{uuid.uuid4().hex}"}


@pytest.mark.serial
@pytest.mark.slow
def test_a_short_soak_loses_doubles_and_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "audit.json"
    started = time.monotonic()
    done = subprocess.run([*SOAK, "--hours", "0.02", "--seed", "7", "--json", str(out)],
                          cwd=REPO, env=soak_env(tmp_path), capture_output=True, text=True,
                          timeout=600, check=False)
    wall = time.monotonic() - started
    assert out.is_file(), done.stderr[-3000:]
    audit = json.loads(out.read_text())
    why = f"{done.stdout}\n{done.stderr[-3000:]}"
    # Every kind of fault at least once (the runs volume needs root for a filesystem of its own).
    skipped = {"disk_full"} if "disk_full not injected" in audit["runs_volume"] else set()
    assert {k: n for k, n in audit["faults"].items() if n < 1} == {k: 0 for k in skipped}, why
    assert set(audit["faults"]) == set(FAULT_KINDS)
    # Exactly once: every sweep point in its sweep's events once, none lost, none doubled.
    assert audit["points_total"] > 0, why
    assert audit["points_lost"] == 0 and audit["points_doubled"] == 0, audit["sweeps"]
    # A point that failed (recorded, so neither lost nor doubled) says why, by its SUT.
    for sweep in audit["sweeps"]:
        assert sum(sweep["failed_why"].values()) == sweep["failed"], sweep
        assert all(text.split(": ", 1)[1] for text in sweep["failed_why"]), sweep
    # Every ASC run complete, or ended by an injected fault its folder names.
    assert audit["runs_total"] > 0 and audit["runs_complete"] > 0, why
    assert audit["runs_failed_unexplained"] == 0, (audit["runs_unexplained"],
                                                   audit.get("unexplained_kept"))
    assert audit["runs_analyze_failed"] == 0, audit["analyze_failures"]
    # Nothing outlives the soak.
    assert audit["leftover_processes"] == 0, audit["leftover_process_list"]
    assert audit["leftover_temp_files"] == 0, audit["leftover_temp_file_list"]
    assert audit["temp_folder_removed"] is True
    assert list((tmp_path / "tmp").iterdir()) == []
    assert done.returncode == 0, why
    # The audit's table ends what it prints.
    assert "sweep points" in done.stdout and "fault" in done.stdout
    assert wall < 240, f"the short soak took {wall:.0f} s"  # a bound, not a measurement


def bad(tmp_path: Path, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    return subprocess.run([*SOAK, *args], cwd=REPO, env=env or soak_env(tmp_path),
                          capture_output=True, text=True, timeout=60, check=False)


def refused(done: subprocess.CompletedProcess, tmp_path: Path) -> str:
    """Exit 2, one line on stderr, nothing on stdout, nothing started (no temp folder)."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("soak: error: "), done.stderr
    assert done.stdout == ""
    assert list((tmp_path / "tmp").iterdir()) == []
    return lines[0]


@pytest.mark.parametrize("hours", ["0", "-1", "nan", "inf", "0.001", "abc"])
def test_hours_that_are_no_soak_are_refused(tmp_path: Path, hours: str) -> None:
    line = refused(bad(tmp_path, "--hours", hours, "--seed", "1"), tmp_path)
    assert "--hours" in line


def test_a_negative_seed_is_refused(tmp_path: Path) -> None:
    line = refused(bad(tmp_path, "--hours", "1", "--seed", "-3"), tmp_path)
    assert "--seed -3" in line


def test_a_soak_while_another_holds_the_lock_is_refused(tmp_path: Path) -> None:
    name = f"rig-soak-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as holder:
        holder.bind("\0" + name)  # what a running soak holds
        line = refused(bad(tmp_path, "--hours", "1", "--seed", "1",
                           env=soak_env(tmp_path, lock=name)), tmp_path)
    assert "another soak is running" in line


def test_a_soak_whose_port_is_taken_is_refused(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        line = refused(bad(tmp_path, "--hours", "1", "--seed", "1", "--dashboard-port",
                           str(port)), tmp_path)
    assert f"127.0.0.1:{port} is in use" in line


def soak_module():
    """benchmarks/soak.py as a module (it is a script, not a package)."""
    import importlib.util

    name = "benchmarks_soak"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / "soak.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("hours", [0.02, 0.1, 1.0, 8.0])
def test_the_schedule_has_every_fault_and_depends_on_the_seed_only(hours: float) -> None:
    import numpy as np

    soak = soak_module()
    total = hours * 3600
    start, end = max(8.0, 0.04 * total), total - max(8.0, min(300.0, 0.08 * total))
    for seed in range(20):
        faults = soak.draw_schedule(np.random.default_rng(seed), start, end, hours < 0.1)
        kinds = [f.kind for f in faults]
        assert set(kinds) == set(FAULT_KINDS)
        rounds = len(kinds) // len(FAULT_KINDS)
        assert all(kinds.count(k) == rounds for k in FAULT_KINDS)
        assert rounds == max(1, round((end - start) / 1800))
        times = [f.due_s for f in faults]
        assert times == sorted(times) and start <= times[0] and times[-1] < end
        # A DUT stop waits out its reply deadline: in the last minute it comes first of the
        # last round's faults injected into runs.
        last = [f for f in faults[-len(FAULT_KINDS):] if f.kind in soak.RUN_FAULTS]
        stop = next(f for f in last if f.kind == "dut_stop")
        assert stop.due_s <= end - 60 or last[0] is stop
        again = soak.draw_schedule(np.random.default_rng(seed), start, end, hours < 0.1)
        assert [(f.kind, f.due_s, f.params) for f in again] == \
            [(f.kind, f.due_s, f.params) for f in faults]


def test_resources_are_judged_per_process_over_its_own_life() -> None:
    """A role restarted by faults is flat when each of its processes is (a fresh one starts
    small: across restarts its mean would move with no leak); a process that grows all its
    life is not; one too short-lived to judge is left out, and said to be."""
    from types import SimpleNamespace

    soak = soak_module()
    mb = 2**20
    samples = []

    def life(role: str, pid: int, born: float, minutes: int, rss_mb, fds=10) -> None:
        for k in range(minutes):
            samples.append((born + 60.0 * k, role, pid, rss_mb(k) * mb, fds, 2))

    # Workers: each grows to its working size in its first 4 minutes, then stays; the second
    # restart came at 40 min, so the soak's last third holds a young one (at 100 MB).
    grown = lambda k: 100 + 10 * min(k, 4)  # noqa: E731
    life("worker-1", 11, 0.0, 40, grown)
    life("worker-1", 12, 2400.0, 20, grown)
    life("serve", 21, 0.0, 60, lambda k: 150 + 2 * k)  # +2 MB a minute: a leak
    life("broker", 31, 0.0, 60, lambda k: 8, fds=11)
    life("dashboard", 41, 3300.0, 5, lambda k: 60)  # restarted near the end: too short
    fake = SimpleNamespace(
        samples=samples, total_s=3600.0, volume_samples=[], sample_period=60.0,
        children={r: SimpleNamespace(incarnations=n) for r, n in
                  (("worker-1", 2), ("serve", 1), ("broker", 1), ("dashboard", 2))})
    audit = soak.Soak.audit_resources(fake)
    roles = audit["resources"]
    assert roles["worker-1"]["judged"] == 2 and roles["worker-1"]["rss_mb"]["flat"] is True
    assert roles["broker"]["rss_mb"]["flat"] is True and roles["broker"]["fds"]["flat"] is True
    serve = roles["serve"]["rss_mb"]
    assert serve["flat"] is False and serve["last"] > 1.1 * serve["second"]
    assert roles["dashboard"]["judged"] == 0 and roles["dashboard"]["rss_mb"]["flat"] is None
    assert audit["resources_flat"] is False  # the leak
    samples[:] = [s for s in samples if s[1] != "serve"]
    fake.children.pop("serve")
    assert soak.Soak.audit_resources(fake)["resources_flat"] is True



def test_a_process_sampled_as_a_fault_stops_it_is_not_judged_on_that_sample() -> None:
    """A 1 h soak at 5ff61ff judged worker-3 "not flat": fds 22 all its first life, then one
    sample of 4 as the scheduler's restart took it down, the last third's mean 19.8. A
    process that ended before the soak did is judged without its last sample; one that grows
    its fds all its life is still caught, and a process sampled to the soak's end keeps its
    last sample."""
    from types import SimpleNamespace

    soak = soak_module()
    samples: list[tuple] = []

    def life(role: str, pid: int, born: float, count: int, fds) -> None:
        for k in range(count):
            samples.append((born + 10.0 * k, role, pid, 100 * 2**20, fds(k), 2))

    life("worker-3", 1, 0.0, 52, lambda k: 4 if k == 51 else 22)  # stopped at 510 s
    life("worker-3", 2, 520.0, 309, lambda k: 22)  # to the end (3600 s)
    life("broker", 3, 0.0, 361, lambda k: 11 if k < 360 else 3)  # its last sample is the end's
    fake = SimpleNamespace(
        samples=samples, total_s=3600.0, volume_samples=[], sample_period=10.0,
        children={"worker-3": SimpleNamespace(incarnations=2),
                  "broker": SimpleNamespace(incarnations=1)})
    audit = soak.Soak.audit_resources(fake)
    assert audit["resources"]["worker-3"]["fds"]["flat"] is True
    assert audit["resources"]["worker-3"]["judged"] == 2
    assert audit["resources"]["broker"]["fds"]["last"] < 11  # kept: it ended with the soak
    # Growing fds all its life: still not flat.
    samples[:] = [s for s in samples if s[2] != 2]
    life("worker-3", 2, 520.0, 309, lambda k: 22 + k // 20)
    assert soak.Soak.audit_resources(fake)["resources"]["worker-3"]["fds"]["flat"] is False

def test_serve_is_judged_between_runs_and_in_a_run_apart() -> None:
    """`rig serve` holds a run's data only while it runs one: ~140 MB between runs, ~205 MB
    in one. With runs taking most of the second third and few of the last, the thirds' means
    of all its samples move 20 % with no leak (called "not flat"); judged apart, each state
    is flat. A floor that rises 2 MB a minute between runs is a leak, and is found."""
    from types import SimpleNamespace

    soak = soak_module()
    mb = 2**20
    period = 10.0
    # 60 min; runs of 50 s: every 80 s in the first 40 min, every 300 s after.
    busy = [(float(t), t + 50.0) for t in range(0, 2400, 80)]
    busy += [(float(t), t + 50.0) for t in range(2400, 3600, 300)]
    runs = [SimpleNamespace(track="serve", started_s=s, ended_s=e) for s, e in busy]
    runs.append(SimpleNamespace(track="cli", started_s=10.0, ended_s=3500.0))  # not serve's

    def serve(floor) -> list[tuple]:
        out = []
        for k in range(360):
            t = k * period
            in_run = any(s <= t <= e for s, e in busy)
            out.append((t, "serve", 21, (205.0 if in_run else floor(t)) * mb, 20, 6))
        return out

    fake = SimpleNamespace(samples=serve(lambda t: 140.0), total_s=3600.0, volume_samples=[],
                           sample_period=period, runs=runs,
                           children={"serve": SimpleNamespace(incarnations=1)})
    mixed = [s for s in fake.samples if s[0] >= 300.0]
    second, last = soak._life_windows(mixed, 3, (mixed[0][0], mixed[-1][0]))
    assert abs(last - second) > soak.FLAT_SHARE * second  # the old judgement: "not flat"
    audit = soak.Soak.audit_resources(fake)
    entry = audit["resources"]["serve"]
    assert entry["states"] == ["between runs", "in a run"] and entry["judged"] == 1
    assert entry["rss_mb"]["flat"] is True and audit["resources_flat"] is True
    assert entry["rss_mb"]["second"] in (140.0, 205.0)
    states = soak._serve_states(mixed, busy)
    assert {round(x[3] / mb) for x in states["between runs"]} == {140}
    assert {round(x[3] / mb) for x in states["in a run"]} == {205}
    fake.samples = serve(lambda t: 140.0 + 2.0 * t / 60.0)  # the floor leaks
    audit = soak.Soak.audit_resources(fake)
    rss = audit["resources"]["serve"]["rss_mb"]
    assert rss["flat"] is False and rss["state"] == "between runs"
    assert rss["last"] > 1.1 * rss["second"] and audit["resources_flat"] is False
    assert "judged between runs and in a run apart" in soak.table({
        **{k: 0 for k in ("hours", "seed", "points_total", "sweep_sessions", "points_lost",
                          "points_doubled", "points_failed", "runs_total", "runs_complete",
                          "runs_failed_explained", "runs_failed_unexplained", "runs_analyzed",
                          "runs_analyze_failed", "leftover_processes", "leftover_temp_files")},
        "lava": False, "runs_volume": "-", "sweeps": [], "recovery": {},
        "verify": {"status": "-", "detail": "-"}, **audit})


def test_a_run_whose_folder_the_rig_removed_is_explained_by_the_full_disk(
        tmp_path: Path) -> None:
    """A run that could not write its first line (the runs disk full) has its folder removed
    by the rig, which says so: the soak saw the folder, then found it gone. That run is read
    as `removed`, with what the rig said, and put down to the full disk when one overlapped
    it (at 4ce634d a short soak called it unreadable and unexplained); not without one."""
    import errno
    import queue
    import threading
    from types import SimpleNamespace

    from rig.errors import StorageError
    from rig.run.store import RunStore

    soak = soak_module()
    store = RunStore.create(tmp_path / "runs", "asc", "direct-otii")
    folder = store.path
    with pytest.raises(StorageError) as raised:
        store.failed(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), starting=True)
    assert not folder.exists()

    def finish(injected_s: float, cleared_s: float) -> Any:
        full = soak.Fault("disk_full", injected_s - 1.0, injected_s=injected_s,
                          cleared_s=cleared_s)
        fake = SimpleNamespace(faults=[full], lock=threading.Lock(), runs=[],
                               analyze_queue=queue.Queue(), say=lambda text: None,
                               now=lambda: 30.0, load_over=threading.Event())
        track = object.__new__(soak.DirectTrack)
        track.soak = fake
        record = soak.RunRecord("direct", "otii", 19.0, folder=folder, ended_s=23.6, code=2,
                                said=f"rig: error: {raised.value}")
        track.finish(record)
        assert fake.runs == [record] and fake.analyze_queue.empty()
        return record

    record = finish(21.0, 26.0)  # the run: 19.0 to 23.6 s
    assert record.status == "removed" and "cannot start the run folder" in record.error
    assert record.explained_by == "disk_full"
    assert finish(5.0, 12.0).explained_by == ""  # a full disk over before the run began



def test_a_run_read_while_its_last_line_is_written_is_read_again(tmp_path: Path) -> None:
    """A 1 h soak at 5ff61ff called a serve run "incomplete" and unexplained: it read the
    folder as the rig wrote its run_finished line (5 KB), saw the line's start, and the rig's
    reader skipped the torn line. The folder was complete moments later. A folder whose
    events.jsonl names run_finished is read again until the line is whole."""
    import queue
    import threading
    from types import SimpleNamespace

    from rig.run.events import RunFinished, RunStarted
    from rig.run.store import event_line

    soak = soak_module()
    folder = tmp_path / "2026-11-28T21-21-25_asc_soak-ppk2"
    folder.mkdir()
    start = event_line(RunStarted(run_id="r", procedure="asc", device="soak-ppk2",
                                  simulated=True, manifest={}))
    end = event_line(RunFinished(status="complete", summary={"x": list(range(900))}))
    cut = len(end) // 3
    (folder / "events.jsonl").write_text(start + "\n" + end[:cut])  # the torn line
    later = threading.Timer(0.6, lambda: (folder / "events.jsonl").open("a").write(
        end[cut:] + "\n"))
    fake = SimpleNamespace(faults=[], lock=threading.Lock(), runs=[],
                           analyze_queue=queue.Queue(), say=lambda text: None,
                           now=lambda: 30.0, load_over=threading.Event())
    track = object.__new__(soak.ServeTrack)
    track.soak = fake
    record = soak.RunRecord("serve", "ppk2", 10.0, folder=folder, ended_s=29.0)
    later.start()
    try:
        track.finish(record)
    finally:
        later.join()
    assert record.status == "complete" and record.explained_by == ""
    assert fake.analyze_queue.get_nowait() == folder
    # A run that truly ended without its line (rig serve killed) stays incomplete.
    (folder / "events.jsonl").write_text(start + "\n")
    again = soak.RunRecord("serve", "ppk2", 10.0, folder=folder, ended_s=29.0)
    track.finish(again)
    assert again.status == "incomplete"

def test_the_folders_of_unexplained_runs_outlive_the_soak(tmp_path: Path) -> None:
    """A rare unexplained run (a short soak in make test: a serve run left incomplete on a full
    disk) cannot be read once the runs volume is gone: its folder (its trace too, up to a size)
    and the processes' logs are kept beside the audit's JSON, which names them."""
    from types import SimpleNamespace

    soak = soak_module()
    runs, logs = tmp_path / "runs", tmp_path / "logs"
    logs.mkdir()
    (logs / "serve.log").write_text("run failed: something\n")
    folders = {}
    for name in ("a_incomplete", "b_complete", "c_explained"):
        folder = runs / name
        (folder / "traces").mkdir(parents=True)
        (folder / "events.jsonl").write_text("{}\n")
        (folder / "traces" / "emon.jls").write_bytes(b"x" * 1000)
        folders[name] = folder
    records = [soak.RunRecord("serve", "ppk2", 6.4, folder=folders["a_incomplete"],
                              status="incomplete"),
               soak.RunRecord("serve", "otii", 9.0, folder=folders["b_complete"],
                              status="complete"),
               soak.RunRecord("direct", "otii", 9.0, folder=folders["c_explained"],
                              status="failed", explained_by="disk_full")]
    fake = SimpleNamespace(runs=records, logs=logs,
                           args=SimpleNamespace(json=tmp_path / "audit.json"))
    kept = soak.Soak.keep_unexplained(fake)
    assert kept == tmp_path / "audit.unexplained"
    assert sorted(p.name for p in kept.iterdir()) == ["a_incomplete", "logs"]
    assert (kept / "a_incomplete" / "events.jsonl").read_text() == "{}\n"
    assert (kept / "a_incomplete" / "traces" / "emon.jls").stat().st_size == 1000
    assert (kept / "logs" / "serve.log").is_file()
    # Nothing unexplained, or no JSON asked for: nothing kept.
    records[0].explained_by = "serve_kill"
    assert soak.Soak.keep_unexplained(fake) is None
    fake.args.json = None
    records[0].explained_by = ""
    assert soak.Soak.keep_unexplained(fake) is None


def test_what_a_killed_soak_left_is_cleared_by_the_next(tmp_path: Path) -> None:
    """A soak killed outright (SIGKILL) runs no cleanup: its processes, its mounted runs volume
    and its temp folder stay. The next soak clears them, by the owner file each soak leaves in
    its folder; a running soak's folder is left alone."""
    soak = soak_module()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / "rig-soak-killed"
    (stale / "volume").mkdir(parents=True)
    (stale / soak.OWNER_FILE).write_text(json.dumps({"pid": dead.pid, "marker": "m-killed"}))
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                              env={**os.environ, soak.MARKER_ENV: "m-killed"})
    # A running soak (its command line names soak.py) and the process it started.
    live = tmp_path / "rig-soak-live"
    live.mkdir()
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "soak.py"])
    (live / soak.OWNER_FILE).write_text(json.dumps({"pid": owner.pid, "marker": "m-live"}))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, soak.MARKER_ENV: "m-live"})
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", soak.VOLUME_SOURCE, str(stale / "volume")],
        timeout=30, check=False).returncode == 0
    try:
        if mounted:
            assert stale / "volume" in soak._volume_mounts()
        said = soak.clear_killed_soaks(tmp_path)
        assert orphan.wait(10) != 0  # killed
        assert not stale.exists()
        assert said == [f"cleared what a killed soak (pid {dead.pid}) left: 1 processes, "
                        f"{int(mounted)} mounted runs volume(s), {stale}"]
        if mounted:
            assert stale / "volume" not in soak._volume_mounts()
        assert owner.poll() is None and child.poll() is None and live.is_dir()
    finally:
        for p in (orphan, owner, child):
            p.kill()
            p.wait(10)
        if mounted and stale / "volume" in soak._volume_mounts():
            subprocess.run(["umount", "-l", str(stale / "volume")], timeout=30, check=False)
