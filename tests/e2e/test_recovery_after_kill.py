"""A run killed outright (SIGKILL: no cleanup at all) leaves the instruments as it had them: the
LPM01A acquiring with the DUT powered, the DUT mid-command with replies in its UART. The next
run must bring every instrument to a known state on connect (issue 22.3) and pass, whatever
point the killed run had reached.

As the issue reproduces it: a virtual bench served on ptys (here from this process, as `rig sim`
serves it), `rig measure asc` in a subprocess against its ports as against hardware, killed by
pid when its run folder shows it reached a given point, then run again. The run after it is
made in this process (`rig_in_process`, as tests/e2e/test_ppk2_bench.py runs the CLI beside an
in-process bench): a new interpreter's start-up and imports were ~1 s of CPU each of the eleven
times; the first kill point's is still run as a user runs it (`rig measure --json`).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from rig.bench.config import load_bench
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description

from .runs import REPO, RIG, events, rig_in_process, run_rig, wait_for_event

pytestmark = pytest.mark.slow

#: Where a run is killed: (event kind, how many of them are in its run folder). The monitor's
#: instrument info comes while connecting (monitor configured, the DUT about to be powered);
#: then the idle span, a timed run (an energy window) and the accuracy pass.
KILL_POINTS = [
    ("run_started", 1),
    ("instrument_info", 2),
    ("phase_started", 2),   # calibrate, then idle
    ("window_measured", 1),
    ("sample_classified", 2),
]


#: The other monitors that power the DUT and hold an acquisition across a crash: (virtual
#: bench, driver, extra [emon] lines), each killed while connecting and during a window.
OTHER_MONITORS = [
    ("sim-n6705", "n6705", 'timestamp_input = "aux"\n'),
    ("sim-otii", "otii", ""),
]


@contextlib.contextmanager
def served_bench(name: str = "sim") -> Iterator[VirtualBench]:
    """benches/<name>.toml's DUT and monitor on ptys (or sockets): a `rig sim` in this
    process."""
    with VirtualBench(load_description(REPO / "benches" / f"{name}.toml")) as vb:
        yield vb


def attached_bench(tmp_path: Path, vb: VirtualBench, driver: str = "lpm01a",
                   extra: str = "", rate: float = 1000) -> Path:
    """A bench reaching the served devices as hardware (no [sim]), cut short: 2 runs of 1 s
    and one test sample per class."""
    path = tmp_path / "attached.toml"
    path.write_text(
        '[bench]\nname = "attached"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{vb.ports["dut"]}"\ntimestamp_mode = "energy"\n\n'
        f'[emon]\ndriver = "{driver}"\nport = "{vb.ports["emon"]}"\n'
        f"sample_rate_hz = {rate:g}\nsupply_voltage_v = 1.8\n{extra}\n"
        "[dataset]\nsamples_per_class = 1\n\n"
        "[procedure.asc]\nruns = 2\nmin_run_s = 1.0\n"
    )
    return path


def start_measure(bench: Path, runs: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir", str(runs)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.parametrize("kind,count", KILL_POINTS, ids=[f"{k}-{n}" for k, n in KILL_POINTS])
def test_the_run_after_a_killed_run_passes(tmp_path: Path, kind: str, count: int) -> None:
    with served_bench() as vb:
        kill_then_run_again(tmp_path, vb, attached_bench(tmp_path, vb), kind, count,
                            as_user=(kind, count) == KILL_POINTS[0])


@pytest.mark.parametrize("kind,count", [KILL_POINTS[1], KILL_POINTS[3]])
@pytest.mark.parametrize("base,driver,extra", OTHER_MONITORS, ids=[m[1] for m in OTHER_MONITORS])
def test_other_monitors_recover_from_a_killed_run(tmp_path: Path, base: str, driver: str,
                                                  extra: str, kind: str, count: int) -> None:
    with served_bench(base) as vb:
        rate = load_bench(REPO / "benches" / f"{base}.toml").emon.sample_rate_hz
        bench = attached_bench(tmp_path, vb, driver, extra, rate)
        kill_then_run_again(tmp_path, vb, bench, kind, count)


@pytest.mark.parametrize("kind,count", [KILL_POINTS[1], KILL_POINTS[3]])
def test_a_ppk2_recovers_from_a_killed_run(tmp_path: Path, kind: str, count: int) -> None:
    """A PPK2 keeps measuring after its host died; what nobody reads is lost on the device
    (its USB buffer is full), not queued: the next run's connect must not drown in it."""
    with served_bench("sim-ppk2") as vb:
        rate = load_bench(REPO / "benches" / "sim-ppk2.toml").emon.sample_rate_hz
        kill_then_run_again(tmp_path, vb, attached_bench(tmp_path, vb, "ppk2", "", rate),
                            kind, count)


def kill_then_run_again(tmp_path: Path, vb: VirtualBench, bench: Path, kind: str,
                        count: int, as_user: bool = False) -> None:
    """`rig measure asc` killed (SIGKILL) once its run folder has `count` events of `kind`;
    then the next run must pass, having power-cycled the DUT, and leave it off. The next run is
    the console script's when `as_user`, else rig.cli.main in this process."""
    killed_runs = tmp_path / "killed"
    proc = start_measure(bench, killed_runs)
    try:
        wait_for_event(killed_runs, kind, count, proc)
        proc.kill()  # SIGKILL by pid: no cleanup runs
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    killed = next(p for p in killed_runs.iterdir() if p.is_dir())
    assert events(killed)[-1]["event"] != "run_finished"  # it really died mid-run
    boots = vb.dut.boots

    next_run = ("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "next"),
                "--json")
    after = run_rig(*next_run, timeout=180) if as_user else rig_in_process(*next_run)
    assert after.returncode == 0, after.stderr
    result = json.loads(after.stdout)
    assert result["status"] == "complete", result
    assert result["summary"]["samples"] == 4
    # The next run power-cycled the DUT: it booted again and was switched off at the end.
    assert vb.dut.boots > boots
    assert vb.world.powered is False
