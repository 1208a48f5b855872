"""`rig sweep qubo` killed with SIGKILL in the middle, then `rig sweep resume`: nothing lost,
nothing measured twice, the values on disk before the kill unchanged."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from rig.qubo.sweep import STAND_IN_HANG_ENV, SweepPoint, load_sweep, stand_in_point

from .runs import RIG, events, only_run, run_rig, wait_for_event

pytestmark = pytest.mark.slow

STAND_IN_SWEEP = """
[sweep]
suts = ["cpu-tabu", "loihi2"]
nodes = [10, 25, 50]
densities = [0.05, 0.25]
seeds = [0, 1, 2, 3, 4]
timeouts = [0.001, 0.1]
"""


def start(tmp_path: Path, sweep: Path, *extra: str, env: dict[str, str] | None = None
          ) -> subprocess.Popen:
    return subprocess.Popen(
        [*RIG, "sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "runs"), *extra],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )


def point_lines(run: Path) -> list[str]:
    """The raw sweep_point lines of events.jsonl (complete ones)."""
    out = []
    for line in (run / "events.jsonl").read_text().splitlines():
        try:
            if json.loads(line)["event"] == "sweep_point":
                out.append(line)
        except json.JSONDecodeError:
            continue
    return out


def children(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc)."""
    out = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def gone(pids: list[int], timeout_s: float = 10.0) -> list[int]:
    """Wait (deadline) for `pids` to exit; the ones still alive."""
    deadline = time.monotonic() + timeout_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if Path(f"/proc/{p}").exists()
                 and "Z" not in _state(p)]
        time.sleep(0.05)
    return alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "Z"


def test_kill_9_then_resume_keeps_every_point_once(tmp_path: Path) -> None:
    sweep = tmp_path / "night.toml"
    sweep.write_text(STAND_IN_SWEEP)
    spec = load_sweep(sweep)
    keys = [p.key for p in spec.points()]
    k = 37
    # The stand-in hangs at point k: the kill lands at a known place, whatever the speed.
    proc = start(tmp_path, sweep, "--stand-in", env={STAND_IN_HANG_ENV: str(k)})
    run = wait_for_event(tmp_path / "runs", "sweep_point", k, proc)
    proc.kill()  # SIGKILL: no handler runs, nothing is finished
    proc.communicate(timeout=30)
    before = point_lines(run)
    assert len(before) == k
    # a write torn by the kill (simulated: the real kill landed between points)
    with open(run / "events.jsonl", "a") as f:
        f.write('{"event": "sweep_point", "index": 37, "key": "cpu-')

    shown = run_rig("show", str(run), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "incomplete" and data["bad_lines"] == 1
    assert (data["points_done"], data["points_total"]) == (k, len(keys))

    resumed = run_rig("sweep", "resume", str(run), "--json")
    assert resumed.returncode == 0, resumed.stderr
    out = json.loads(resumed.stdout)
    assert out["status"] == "complete" and out["ran"] == len(keys) - k
    assert out["simulated"] is True

    after = point_lines(run)
    assert after[:k] == before  # the values on disk before the kill, byte for byte
    on_disk = [json.loads(x) for x in after]
    assert [e["key"] for e in on_disk] == keys  # each point once, in order, none lost
    for event, point in zip(on_disk, spec.points(), strict=True):
        assert event["result"] == stand_in_point(point)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert [r["points_done"] for r in manifest["resumes"]] == [k]
    kinds = [e["event"] for e in events(run)]
    assert kinds.count("run_started") == 1 and kinds.count("sweep_resumed") == 1
    assert kinds.count("run_finished") == 1 and kinds[-1] == "run_finished"

    shown = run_rig("show", str(run))
    assert shown.returncode == 0, shown.stderr
    assert "complete" in shown.stdout and f"{len(keys)}/{len(keys)}" in shown.stdout
    assert "unavailable" in shown.stdout  # loihi2 stand-in points have no power


def test_bad_sweep_file_is_one_line_error(tmp_path: Path) -> None:
    sweep = tmp_path / "bad.toml"
    sweep.write_text('[sweep]\nsuts = ["cpu-sa"]\nnodes = [10]\ndensities = [2.0]\n'
                     "timeouts = [1]\n")
    proc = run_rig("sweep", "qubo", str(sweep), "--runs-dir", str(tmp_path / "runs"))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("rig: error: ") and "densities" in line and "found 2.0" in line
    assert not (tmp_path / "runs").exists()


QUBO_READY = all(importlib.util.find_spec(m) is not None
                 for m in ("dimod", "dwave.samplers", "networkx"))
try:
    from rig.qubo.procedure import fixed_timeout_point  # noqa: F401
    from rig.qubo.suts import open_sut  # noqa: F401
except ImportError:  # Q3's SUTs not there yet, or the qubo extra missing
    QUBO_READY = False


@pytest.mark.skipif(not QUBO_READY, reason="needs rig.qubo SUTs and the qubo extra")
def test_real_cpu_sweep_killed_and_resumed(tmp_path: Path) -> None:
    sweep = tmp_path / "cpu.toml"
    sweep.write_text('[sweep]\nsuts = ["cpu-sa", "cpu-tabu"]\nnodes = [10]\n'
                     "densities = [0.1, 0.25]\nseeds = [0, 1, 2]\ntimeouts = [0.05]\n")
    spec = load_sweep(sweep)
    keys = [p.key for p in spec.points()]
    proc = start(tmp_path, sweep)
    run = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        runs = list((tmp_path / "runs").glob("*")) if (tmp_path / "runs").is_dir() else []
        if runs and (runs[0] / "events.jsonl").is_file() and len(point_lines(runs[0])) >= 3:
            break
        time.sleep(0.02)
    workers = children(proc.pid) if proc.poll() is None else []
    proc.kill()
    proc.communicate(timeout=30)
    run = only_run(tmp_path / "runs")
    before = point_lines(run)
    # The solver workers notice their parent is gone (an orphan would burn a core all night).
    assert gone(workers) == []

    resumed = run_rig("sweep", "resume", str(run), "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["status"] == "complete"
    after = point_lines(run)
    assert after[:len(before)] == before
    on_disk = [json.loads(x) for x in after]
    assert [e["key"] for e in on_disk] == keys
    for e in on_disk:
        r = e["result"]
        assert e["status"] == "ok" and r["target_method"] in ("table", "exact")
        # Below 50 nodes the target is the optimum: nothing beats it, and the gap is its formula.
        assert r["gap"] >= 0 and r["gap"] == pytest.approx((r["cost"] - r["target"])
                                                           / abs(r["target"]))
        point = SweepPoint(0, e["sut"], e["nodes"], e["density"], e["timeout_s"], e["seed"])
        assert (r["nodes"], r["density"], r["seed"]) == point.workload
        assert r["power_w"] is None or r["power_w"] > 0  # never a made-up zero
    shown = run_rig("show", str(run), "--json")
    data = json.loads(shown.stdout)
    assert data["status"] == "complete" and data["points_done"] == len(keys)
