"""Helpers for end-to-end runs on the virtual bench: bench variants, run folders, processes."""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rig.bench.virtual import VIRTUAL_BENCH_MODULE

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


def short_bench(tmp_path: Path, base: str, name: str | None = None,
                **replace: tuple[str, str]) -> Path:
    """benches/<base>.toml cut to 2 timed runs of 1 s and one test sample per class (plus
    `replace`), for monitor tests that need the whole method but not its length."""
    return bench_variant(tmp_path, name or base, base=base,
                         spc=("samples_per_class = 2", "samples_per_class = 1"),
                         runs=("runs = 5", "runs = 2"),
                         run_s=("min_run_s = 10.0", "min_run_s = 1.0"), **replace)


@contextlib.contextmanager
def window_scheduled(world, k1: int, k2: int, fs: int,
                     capture_t0: Callable[[], int | None]) -> Iterator[list[str]]:
    """While the body records: once the DUT is powered and the monitor's capture has started
    (`capture_t0()`, its first sample's world time [ns], is not None), put activity and a
    timestamp pulse at samples `k1` and `k2` of the capture. Yields the list of what went
    wrong (empty when the window was scheduled in time)."""
    from virtual_bench.world import NS

    done, errors = threading.Event(), []

    def schedule() -> None:
        deadline = time.monotonic() + 20.0
        while not world.powered or capture_t0() is None:
            if time.monotonic() > deadline or done.is_set():
                errors.append("the rig never started a capture with the DUT powered")
                return
            time.sleep(0.001)
        with world.lock:
            t0 = capture_t0()
            t1, t2 = t0 + k1 * NS // fs, t0 + k2 * NS // fs
            if world.clock.now_ns() >= t1:
                errors.append("too late to schedule the window")
                return
            world.add_activity(t1, t2)
            world.add_pulse(t1)
            world.add_pulse(t2)

    helper = threading.Thread(target=schedule, daemon=True)
    helper.start()
    try:
        yield errors
    finally:
        done.set()
        helper.join(5.0)


def fast_energy_run(tmp: Path, **fast: tuple[str, str]) -> Path:
    """One short energy-mode ASC run on the virtual bench under `tmp` (the bench's text
    replaced by `fast`, e.g. test_analyze_run.FAST); its run folder."""
    bench = bench_variant(tmp, **fast)
    done = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp / "runs"),
                   "--json")
    assert done.returncode == 0, done.stderr
    return only_run(tmp / "runs")


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


def processes(match: Callable[[list[bytes]], bool]) -> list[int]:
    """Pids of the processes whose argv (from /proc) `match` accepts."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if match(argv):
            pids.append(int(entry.name))
    return pids


def sim_children(bench_path: Path) -> list[int]:
    """Pids of virtual-bench child processes serving `bench_path`."""
    return processes(lambda argv: VIRTUAL_BENCH_MODULE.encode() in argv
                     and str(bench_path).encode() in argv)


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


def rig_in_process(*args: str) -> subprocess.CompletedProcess:
    """`rig ARGS` run by rig.cli.main in this process, stdout and stderr captured, as run_rig
    returns it: without a new interpreter's start-up and imports (numpy, matplotlib, the rig:
    ~0.9 s of CPU a `rig verify`), for a test file that runs a command many times to read its
    output. Keep one run_rig of each command in such a file: the console script as a user runs
    it (its exit code, nothing else on stderr) stays covered. Paths are taken from this
    process's working directory, not REPO's."""
    from rig.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors, as the console script exits
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    return subprocess.CompletedProcess(["rig", *args], code, out.getvalue(), err.getvalue())


def read_json_object(proc: subprocess.Popen, timeout_s: float = 30.0) -> dict:
    """Read stdout until one whole JSON object has arrived (deadline, not timing)."""
    deadline = time.monotonic() + timeout_s
    buf = ""
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            buf += os.read(proc.stdout.fileno(), 4096).decode()
            try:
                return json.loads(buf)
            except json.JSONDecodeError:
                continue
    proc.kill()
    pytest.fail(f"rig sim printed no ports: {buf!r}")
