"""Sweeps over a Dask cluster on this machine: dispatch overhead and 1 vs 2 workers.

Prints `name value` lines (a real `dask scheduler` and `rig worker` processes on 127.0.0.1,
stopped at the end; ~1 minute on a quiet 2-core host):
- `local_call_us`: calling a zero-work point function here (median of 200);
- `dispatch_roundtrip_ms`: the same zero-work point as a task through the scheduler to a worker
  (with a resource, as sweep points go) and its result back, one at a time (median of 50);
- `standin_point_ms_local` / `standin_point_ms_cluster`: a 64-point stand-in sweep (closed-form
  points, so nearly all of it is the rig's own work: checkpoint per point; plus dispatch)
  per point, locally and through the cluster;
- `cpu_sweep_s_<power>_<n>w`: wall time of a 64-point cpu-sa sweep (nodes 10/25, 4 densities,
  8 seeds, 0.05 s timeout; each worker's first point also starts its solver process) with n = 1
  or 2 workers, the host's power off (`power_source = "none"`: points need only cpu-sa) or on
  (`rapl`: points also need `host-power`, which one worker per host owns), and
  `cpu_sweep_speedup_<power>` = 1-worker / 2-worker time: ~2 with power off (on 2 cores), ~1 with
  it on (the host-power resource runs them one at a time, as it must: they would share the
  host's power reading). Each sweep runs twice and the shorter time counts: the 2 cores are
  shared, and another process's burst lands in one run, rarely in both.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from rig.cluster.dispatch import ClusterDispatch
from rig.cluster.local import start_scheduler, start_worker, stop_process, wait_for_workers
from rig.qubo.sweep import SweepSpec, parse_sweep, start_sweep

CPU_SWEEP = """
[sweep]
name = "bench-{power}"
suts = ["cpu-sa"]
nodes = [10, 25]
densities = [0.05, 0.1, 0.25, 0.5]
seeds = [0, 1, 2, 3, 4, 5, 6, 7]
timeouts = [0.05]
[sweep.sut_options.cpu-sa]
power_source = "{power}"
"""
#: Runs per timed sweep (the shorter counts).
REPEATS = 2
STAND_IN_SWEEP = """
[sweep]
suts = ["cpu-sa"]
nodes = [10, 25]
densities = [0.05, 0.1, 0.25, 0.5]
seeds = [0, 1, 2, 3, 4, 5, 6, 7]
timeouts = [0.05]
[sweep.sut_options.cpu-sa]
power_source = "none"
"""


def zero_work(value: int) -> int:
    """A point that does nothing (the dispatch overhead); defined in __main__, so Dask sends
    it to the workers by value."""
    return value


def _spec(text: str) -> SweepSpec:
    import tomllib

    return parse_sweep(tomllib.loads(text), Path("benchmark.toml"), name="benchmark")


def _sweep_s(spec: SweepSpec, runs: Path, dispatch: ClusterDispatch | None,
             stand_in: bool = False) -> float:
    t0 = time.perf_counter()
    outcome = start_sweep(spec, runs_root=runs, dispatch=dispatch, stand_in=stand_in)
    wall = time.perf_counter() - t0
    if outcome.status != "complete" or outcome.summary["points_failed"]:
        sys.exit(f"benchmark sweep did not complete: {outcome.status} {outcome.error}")
    return wall


def overhead(address: str, runs: Path) -> None:
    """A zero-work point here vs through the cluster; a stand-in sweep per point."""
    calls = []
    for i in range(200):
        t0 = time.perf_counter()
        zero_work(i)
        calls.append(time.perf_counter() - t0)
    print(f"local_call_us {statistics.median(calls) * 1e6:.2f}", flush=True)
    dispatch = ClusterDispatch(address)
    client = dispatch.connect()
    try:
        trips = []
        for i in range(50):
            t0 = time.perf_counter()
            client.submit(zero_work, i, resources={"cpu-sa": 1}, pure=False).result()
            trips.append(time.perf_counter() - t0)
    finally:
        client.close()
    print(f"dispatch_roundtrip_ms {statistics.median(trips[5:]) * 1e3:.2f}", flush=True)
    spec = _spec(STAND_IN_SWEEP)
    n = len(spec.points())
    here = _sweep_s(spec, runs, None, stand_in=True)
    there = _sweep_s(spec, runs, dispatch, stand_in=True)
    print(f"standin_point_ms_local {here / n * 1e3:.2f}", flush=True)
    print(f"standin_point_ms_cluster {there / n * 1e3:.2f}", flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="rig-bench-cluster-") as tmp:
        root = Path(tmp)
        lock = {"RIG_HOST_POWER_LOCK": str(root / "host-power.lock")}
        address, scheduler = start_scheduler(root)
        workers = []
        try:
            # As `rig cluster local` does: the first worker owns the host's power counters.
            workers.append(start_worker(address, {"cpu-sa": 1, "host-power": 1}, root,
                                        name="w1", env=lock))
            wait_for_workers(address, ["w1"], workers)
            overhead(address, root / "runs")
            dispatch = ClusterDispatch(address)
            times: dict[tuple[str, int], float] = {}
            for power in ("none", "rapl"):
                times[power, 1] = min(_sweep_s(_spec(CPU_SWEEP.format(power=power)),
                                               root / "runs", dispatch) for _ in range(REPEATS))
            workers.append(start_worker(address, {"cpu-sa": 1}, root, name="w2", env=lock))
            wait_for_workers(address, ["w1", "w2"], workers)
            for power in ("none", "rapl"):
                times[power, 2] = min(_sweep_s(_spec(CPU_SWEEP.format(power=power)),
                                               root / "runs", dispatch) for _ in range(REPEATS))
            for power, label in (("none", "power_off"), ("rapl", "power_on")):
                print(f"cpu_sweep_s_{label}_1w {times[power, 1]:.2f}")
                print(f"cpu_sweep_s_{label}_2w {times[power, 2]:.2f}")
                print(f"cpu_sweep_speedup_{label} {times[power, 1] / times[power, 2]:.2f}",
                      flush=True)
        finally:
            for proc in workers:
                stop_process(proc.popen)
            stop_process(scheduler.popen)


if __name__ == "__main__":
    main()
