"""Sweeps over a Dask cluster (issue 16): real `dask scheduler` and `rig worker` processes on
127.0.0.1, started here and killed by pid even when a test fails.

Routing in these tests: a CPU point whose power is read from the host's counters needs
`host-power` as well as its SUT, so the stand-in sweeps below (default power source) go only to
the workers that own `host-power`; each such worker gets its own lock file (it plays a host of
its own). The real sweeps say `power_source = "none"` and go to any worker with the SUT.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rig.cluster.local import Proc, start_scheduler, start_worker, stop_process, wait_for_workers
from rig.qubo.suts import LAVA_PYTHON
from rig.qubo.sweep import STAND_IN_HANG_ENV, load_sweep, stand_in_point
from tests.deadline import wait_until

from .runs import REPO, RIG, events, only_run, run_rig, wait_for_event

pytestmark = pytest.mark.slow

REAL_SWEEP = """
[sweep]
name = "{name}"
suts = ["cpu-tabu", "cpu-sa"]
nodes = [10, 25]
densities = [0.1]
seeds = [0, 1]
timeouts = [0.02]
[sweep.sut_options.cpu-tabu]
power_source = "none"
[sweep.sut_options.cpu-sa]
power_source = "none"
"""

#: cpu-tabu stand-in points with the default (host) power source: they need host-power too.
STAND_IN_SWEEP = """
[sweep]
suts = ["cpu-tabu"]
nodes = [10, 25, 50]
densities = [0.05, 0.25]
seeds = [0, 1, 2]
timeouts = [0.1]
"""


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cluster-logs")


@pytest.fixture(scope="module")
def scheduler(logs: Path) -> Iterator[str]:
    address, proc = start_scheduler(logs)
    try:
        yield address
    finally:
        stop_process(proc.popen)


class Workers:
    """Workers a test starts; every one is killed by pid when the test (or module) ends."""

    def __init__(self, address: str, logs: Path) -> None:
        self.address, self.logs = address, logs
        self.procs: list[Proc] = []

    def start(self, *specs: tuple[str, dict[str, int], dict[str, str]],
              nthreads: int | None = None) -> list[Proc]:
        """Start workers (name, resources, env) side by side; return once all have joined."""
        procs = []
        for name, resources, env in specs:
            if "host-power" in resources:  # each plays a host of its own
                env = {"RIG_HOST_POWER_LOCK": str(self.logs / f"{name}.lock"), **env}
            procs.append(start_worker(self.address, resources, self.logs, name=name, env=env,
                                      nthreads=nthreads))
            self.procs.append(procs[-1])  # killed at the end even if a later one fails
        wait_for_workers(self.address, [p.name for p in procs], procs, timeout_s=90)
        return procs

    def stop(self) -> None:
        for proc in self.procs:
            if proc.popen.poll() is None:
                proc.popen.kill()
            proc.popen.wait(10)


@pytest.fixture
def cpu_workers(scheduler: str, logs: Path) -> Iterator[list[Proc]]:
    """Two workers that each own cpu-tabu and cpu-sa (not host-power)."""
    workers = Workers(scheduler, logs)
    try:
        yield workers.start(("cpu-1", {"cpu-tabu": 1, "cpu-sa": 1}, {}),
                            ("cpu-2", {"cpu-tabu": 1, "cpu-sa": 1}, {}))
    finally:
        workers.stop()


@pytest.fixture
def workers(scheduler: str, logs: Path) -> Iterator[Workers]:
    started = Workers(scheduler, logs)
    try:
        yield started
    finally:
        started.stop()


def submit(tmp_path: Path, sweep: Path, *extra: str) -> subprocess.Popen:
    """`rig sweep qubo` in the background (output to files: a full pipe would block it)."""
    out = open(tmp_path / "submit.out", "ab")  # noqa: SIM115 (the child holds it)
    with out:
        return subprocess.Popen(
            [*RIG, "sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "runs"), "--json",
             *extra], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)


def point_events(run: Path) -> list[dict]:
    return [e for e in events(run) if e["event"] == "sweep_point"]


def test_two_workers_measure_the_points_of_a_local_sweep(
        tmp_path: Path, scheduler: str, cpu_workers: list[Proc]) -> None:
    sweep = tmp_path / "night.toml"
    sweep.write_text(REAL_SWEEP.format(name="night"))
    keys = sorted(p.key for p in load_sweep(sweep).points())

    here = run_rig("sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "local"),
                   "--json", cwd=tmp_path)
    assert here.returncode == 0, here.stderr
    there = run_rig("sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "cluster"),
                    "--json", "--cluster", scheduler, cwd=tmp_path)
    assert there.returncode == 0, there.stderr
    assert json.loads(there.stdout)["status"] == "complete"

    local = {e["key"]: e for e in point_events(only_run(tmp_path / "local"))}
    run = only_run(tmp_path / "cluster")
    remote = point_events(run)
    assert sorted(e["key"] for e in remote) == keys  # every point, each once
    assert sorted(local) == keys
    for e in remote:
        mine, theirs = e["result"], local[e["key"]]["result"]
        # Same workload and target; the cost may differ (a solver in wall-clock time).
        for field in ("nodes", "density", "seed", "timeout_s", "target", "target_method"):
            assert mine[field] == theirs[field], (e["key"], field)
        assert e["status"] == "ok" and mine["gap"] >= 0
        assert mine["gap"] == pytest.approx((mine["cost"] - mine["target"])
                                            / abs(mine["target"]))
        worker = e["worker"]
        assert worker["name"] in ("cpu-1", "cpu-2") and worker["host"]
        assert worker["resources"] == {"cpu-tabu": 1, "cpu-sa": 1}
        assert worker["versions"]["distributed"] != "not installed"
        assert worker["instruments"]["sut"] == e["sut"]
        assert worker["instruments"]["power_source"] == "none"  # as the sweep file says
        assert local[e["key"]].get("worker") is None  # nothing changes without --cluster
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["cluster"]["scheduler"] == scheduler and manifest["status"] == "complete"
    assert {w["name"] for w in manifest["workers"].values()} == {
        e["worker"]["name"] for e in remote}  # every worker that measured, once
    rows = pq.read_table(run / "results.parquet").to_pylist()
    assert sorted(r["key"] for r in rows) == keys
    assert {r["worker"] for r in rows} == {"cpu-1", "cpu-2"}  # both took points

    # rig show reads both folders alike: the same table of workloads.
    shown = [json.loads(run_rig("show", str(only_run(tmp_path / d)), "--json").stdout)
             for d in ("local", "cluster")]
    assert [s["status"] for s in shown] == ["complete", "complete"]
    strip = [[{k: r[k] for k in ("sut", "nodes", "density", "timeout_s", "seeds")}
              for r in s["summary"]] for s in shown]
    assert strip[0] == strip[1]


def test_worker_killed_mid_point_runs_it_again_elsewhere(
        tmp_path: Path, workers: Workers) -> None:
    sweep = tmp_path / "stand-in.toml"
    sweep.write_text(STAND_IN_SWEEP)
    points = load_sweep(sweep).points()
    k = 5
    # Only `hangs` owns host-power at first: it measures points 0..k-1 in order, hangs at k.
    (hangs,) = workers.start(("hangs", {"cpu-tabu": 1, "host-power": 1},
                              {STAND_IN_HANG_ENV: str(k)}))
    proc = submit(tmp_path, sweep, "--stand-in", "--cluster", workers.address)
    try:
        run = wait_for_event(tmp_path / "runs", "sweep_point", k, proc)
        workers.start(("takes-over", {"cpu-tabu": 1, "host-power": 1}, {}))
        # The new worker measures everything after k while `hangs` is stuck in point k.
        wait_until(lambda: len(point_events(run)) == len(points) - 1, "points after k",
                   timeout_s=60)
        assert [e["index"] for e in point_events(run) if e["worker"]["name"] == "hangs"] \
            == list(range(k))
        hangs.popen.send_signal(signal.SIGKILL)  # mid-point
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
    text = (tmp_path / "submit.out").read_text()
    out, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
    assert proc.returncode == 0 and out["status"] == "complete", out
    on_disk = point_events(run)
    assert sorted(e["index"] for e in on_disk) == list(range(len(points)))  # each point once
    again = next(e for e in on_disk if e["index"] == k)
    assert again["worker"]["name"] == "takes-over" and again["status"] == "ok"
    for e in on_disk:
        assert e["result"] == stand_in_point(points[e["index"]])
    assert len(pq.read_table(run / "results.parquet")) == len(points)


def test_submitter_killed_then_resumed_on_the_cluster(tmp_path: Path, workers: Workers) -> None:
    sweep = tmp_path / "stand-in.toml"
    sweep.write_text(STAND_IN_SWEEP)
    points = load_sweep(sweep).points()
    k = 7
    stuck = workers.start(("stuck", {"cpu-tabu": 1, "host-power": 1},
                           {STAND_IN_HANG_ENV: str(k)}))
    proc = submit(tmp_path, sweep, "--stand-in", "--cluster", workers.address)
    try:
        run = wait_for_event(tmp_path / "runs", "sweep_point", k, proc)
        proc.send_signal(signal.SIGKILL)  # the submitting process, mid-sweep
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    before = point_events(run)
    assert [e["index"] for e in before] == list(range(k))
    shown = json.loads(run_rig("show", str(run), "--json").stdout)
    assert shown["status"] == "incomplete" and shown["points_done"] == k

    # `stuck` still sits in point k, whose submitter is gone: the stand-in would hang there for
    # minutes (a real point ends at its timeout) and keep its instrument, so it goes, and a
    # fresh worker takes the rest.
    (stuck,) = stuck
    stuck.popen.kill()
    stuck.popen.wait(10)
    workers.start(("resumer", {"cpu-tabu": 1, "host-power": 1}, {}))
    resumed = run_rig("sweep", "resume", str(run), "--json", "--cluster", workers.address)
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["status"] == "complete" and out["ran"] == len(points) - k
    after = point_events(run)
    assert after[:k] == before  # nothing measured before the kill is measured again
    assert sorted(e["index"] for e in after) == list(range(len(points)))
    assert {e["worker"]["name"] for e in after[k:]} == {"resumer"}
    rows = pq.read_table(run / "results.parquet").to_pylist()
    assert len(rows) == len(points) and len({r["key"] for r in rows}) == len(points)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["resumes"][0]["cluster"] == {"scheduler": workers.address, "retries": 1}


@pytest.mark.skipif(not LAVA_PYTHON.exists(), reason="needs .venv-lava (make lava-env)")
def test_loihi2_points_never_overlap_on_its_worker(tmp_path: Path, workers: Workers) -> None:
    sweep = tmp_path / "loihi.toml"
    sweep.write_text('[sweep]\nsuts = ["loihi2", "cpu-sa"]\nnodes = [10]\ndensities = [0.1]\n'
                     'seeds = [0, 1, 2]\ntimeouts = [0.05]\n'
                     '[sweep.sut_options.cpu-sa]\npower_source = "none"\n')
    # Three threads: only the loihi2 resource keeps its points apart.
    workers.start(("loihi-host", {"loihi2": 1, "cpu-sa": 1}, {}), nthreads=3)
    done = run_rig("sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "runs"), "--json",
                   "--cluster", workers.address, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    on_disk = point_events(only_run(tmp_path / "runs"))
    assert len(on_disk) == 6 and all(e["status"] == "ok" for e in on_disk)
    for e in on_disk:  # what the shim said it is comes back with each point
        if e["sut"] == "loihi2":
            assert e["worker"]["instruments"]["sut_info"]["name"] == "loihi2"
    spans = sorted((e["worker"]["started_at"], e["worker"]["finished_at"])
                   for e in on_disk if e["sut"] == "loihi2")
    assert len(spans) == 3
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start  # one Loihi 2 point at a time


def test_point_failing_on_the_rig_is_tried_a_bounded_number_of_times(
        tmp_path: Path, workers: Workers) -> None:
    sweep = tmp_path / "broken.toml"
    sweep.write_text('[sweep]\nsuts = ["loihi2"]\nnodes = [10]\ndensities = [0.1]\n'
                     'seeds = [0, 1]\ntimeouts = [0.05]\n'
                     '[sweep.sut_options.loihi2]\npython = "/nonexistent/python3.10"\n')
    workers.start(("broken-loihi", {"loihi2": 1}, {}))
    done = run_rig("sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "runs"), "--json",
                   "--cluster", workers.address, "--retries", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # a measurement with failed points
    out = json.loads(done.stdout)
    assert out["status"] == "complete" and out["points_failed"] == 2
    on_disk = point_events(only_run(tmp_path / "runs"))
    assert len(on_disk) == 2
    for e in on_disk:
        assert e["status"] == "failed" and "no Lava environment" in e["error"]
        assert e["error"].endswith("(tried 3 times)") and len(e["worker"]["errors"]) == 3


def test_rig_cluster_local_runs_a_sweep_and_stops_every_process(tmp_path: Path) -> None:
    sweep = tmp_path / "stand-in.toml"
    sweep.write_text(STAND_IN_SWEEP)
    total = len(load_sweep(sweep).points())
    log = tmp_path / "cluster.out"
    with open(log, "wb") as out:
        cluster = subprocess.Popen(
            [*RIG, "cluster", "local", "--workers", "2", "--port", "0", "--logs",
             str(tmp_path / "logs")], cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
            env={**os.environ, "RIG_HOST_POWER_LOCK": str(tmp_path / "host-power.lock")})
    group = cluster.pid  # its scheduler and workers are in its process group
    try:
        wait_until(lambda: "run: rig sweep" in log.read_text(), "rig cluster local ready",
                   timeout_s=90)
        text = log.read_text()
        address = text.split()[1]
        pids = [int(line.split("(pid ")[1].split(")")[0]) for line in text.splitlines()
                if "(pid " in line]
        assert len(pids) == 2 and all(os.getpgid(p) == group for p in pids)
        done = run_rig("sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "runs"),
                       "--json", "--stand-in", "--cluster", address, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        on_disk = point_events(only_run(tmp_path / "runs"))
        assert len(on_disk) == total
        # One host, one power reading: host-power belongs to the first worker only.
        assert {e["worker"]["name"] for e in on_disk} == {"local-1"}
        cluster.send_signal(signal.SIGTERM)
        assert cluster.wait(30) == 0
        # the scheduler and both workers are gone, not only the workers it printed
        wait_until(lambda: not group_alive(group), "every process of the cluster gone",
                   timeout_s=30)
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever a failed stop left behind
            os.killpg(group, signal.SIGKILL)
        cluster.wait(10)
    assert "cluster stopped" in log.read_text()


def group_alive(pgid: int) -> bool:
    """Whether any process of process group `pgid` is still running (zombies aside)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False
