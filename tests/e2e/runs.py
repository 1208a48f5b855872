"""Helpers for end-to-end runs on the virtual bench: bench variants, run folders, processes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RIG = [str(Path(sys.executable).parent / "rig")]

#: The simulated truth of benches/sim.toml (ISSUE: results must match within 0.1%).
TRUTH = {
    "inferences_per_s": 80.0,
    "idle_power_w": 1.20e-3,
    "active_power_w": 3.60e-3,
    "dynamic_power_w": 2.40e-3,
    "energy_per_inference_j": 45e-6,
    "dynamic_energy_per_inference_j": 30e-6,
    "execution_time_mean_s": 12.5e-3,
}


def bench_variant(tmp_path: Path, name: str = "bench", *, base: str = "sim",
                  **replace: tuple[str, str]) -> Path:
    """benches/<base>.toml with text replacements (old=new given as pairs)."""
    text = (REPO / "benches" / f"{base}.toml").read_text()
    for old, new in replace.values():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def only_run(runs_dir: Path) -> Path:
    """The single run folder under `runs_dir`."""
    runs = [p for p in runs_dir.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def events(run: Path) -> list[dict]:
    """events.jsonl as dicts (ignores a torn last line)."""
    out = []
    for line in (run / "events.jsonl").read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            out.append(json.loads(line))
    return out


def wait_for_event(runs_dir: Path, kind: str, count: int, proc: subprocess.Popen,
                   timeout_s: float = 60.0) -> Path:
    """Poll the run folder until `count` events of `kind` are on disk (a deadline, not timing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if runs_dir.is_dir():
            for run in runs_dir.iterdir():
                if (run / "events.jsonl").is_file() and sum(
                    e["event"] == kind for e in events(run)
                ) >= count:
                    return run
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no {count} {kind} events within {timeout_s} s")


def sim_children(bench_path: Path) -> list[int]:
    """Pids of virtual-bench child processes serving `bench_path`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"rig.sim" in cmd and str(bench_path).encode() in cmd:
            pids.append(int(entry.name))
    return pids


def wait_gone(bench_path: Path, timeout_s: float = 10.0) -> list[int]:
    """Wait (deadline) until no virtual bench for `bench_path` is running; return leftovers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = sim_children(bench_path)
        if not left:
            return []
        time.sleep(0.05)
    return sim_children(bench_path)


def run_rig(*args: str, cwd: Path = REPO, timeout: float = 120) -> subprocess.CompletedProcess:
    """The `rig` console script as a user runs it."""
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(RIG + list(args), cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)
