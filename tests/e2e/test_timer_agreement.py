"""The `timer agreement` check end to end: the virtual bench's DUT timer and LPM01A agree; a
PowerShield whose sample clock runs 1% fast (a stretched trace) fails the run; plain
energy-mode firmware, which reports one clock only, gets "not applicable".

The healthy and stretched runs are made in this process (`rig_in_process`): a new interpreter's
start-up and imports were ~1 s of CPU each. The plain-firmware run and its report are still
run as a user runs them (the console scripts)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rig.run.store import load_run
from rig.traces.files import read_trace
from rig.units import si
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description

from .runs import REPO, TRUTH, rig_in_process, run_rig

pytestmark = pytest.mark.slow


def measure_on(vb: VirtualBench, runs: Path, *extra: str,
               as_user: bool = False) -> subprocess.CompletedProcess:
    """`rig measure asc` with the hardware path pointed at an in-process virtual bench: the
    console script when `as_user`, else rig.cli.main in this process."""
    rig = run_rig if as_user else rig_in_process
    return rig("measure", "asc", "--device", "arduino", "--port", vb.ports["dut"],
               "--emon", "lpm01a", "--emon-port", vb.ports["emon"], "--voltage", "1.8",
               "--simulated", "--runs-dir", str(runs), "--json", *extra)


def timer_check(summary: dict) -> dict:
    (check,) = [c for c in summary["checks"] if c["name"] == "timer agreement"]
    return check


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> dict:
    runs = tmp_path_factory.mktemp("healthy")
    proc = rig_in_process("measure", "asc", "--device", "sim", "--runs-dir", str(runs),
                          "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_healthy_virtual_bench_agrees_on_every_window(healthy) -> None:
    s = healthy["summary"]
    check = timer_check(s)
    assert check["ok"] is True
    # 5 timed runs and 40 test samples, each seen by both clocks.
    assert check["detail"].startswith("45 windows timed by both the DUT timer and the monitor")
    runs = load_run(healthy["run"]).events
    timed = [e for e in runs if e.kind == "latency_run"]
    for r in timed:  # 10 s windows: within one 1 ms sample of the DUT's µs count
        assert abs(r.emon_elapsed_s - r.dut_elapsed_s) <= 1e-3 + 1e-6
        assert r.dut_elapsed_s == pytest.approx(r.iterations * 12.5e-3, abs=1e-9)


def test_power_rises_one_warmup_inference_before_each_start_edge(healthy) -> None:
    """The rise seen ~10-15 ms before a window's start edge is the warm-up inference (warmup =
    1 x 12.5 ms in benches/sim.toml), consistent with the DUT's timer: not an edge offset."""
    run = Path(healthy["run"])
    trace = read_trace(run / "traces" / "emon.jls")
    power = trace.current * trace.voltage
    dp = TRUTH["active_power_w"] - TRUTH["idle_power_w"]
    windows = [e for e in load_run(run).events if e.kind == "window_measured"]
    for w in windows:
        s = w.start_sample
        # Active time in the 50 samples before the edge: the warm-up inference plus the part of
        # the edge's own sample after the edge (the edge is placed on the next sample start).
        active_s = float(np.sum(power[s - 50 : s] - TRUTH["idle_power_w"])) / dp * 1e-3
        assert 12.5e-3 - 1e-5 <= active_s < 13.5e-3 + 1e-5, (w.index, active_s)
        # And nothing active before that warm-up inference.
        np.testing.assert_allclose(power[s - 50 : s - 15], TRUTH["idle_power_w"], rtol=5e-4)


def test_a_stretched_trace_fails_the_run_with_the_worst_window(tmp_path: Path) -> None:
    vb = VirtualBench(load_description(REPO / "benches" / "sim.toml"))
    vb.emon.clock_error = 0.01  # samples at 1010 Hz while it reports 1000 Hz
    with vb:
        proc = measure_on(vb, tmp_path, "--scope", "energy")
    assert proc.returncode == 1, proc.stderr  # a measurement that failed its own checks
    out = json.loads(proc.stdout)
    assert out["status"] == "failed-checks"
    check = timer_check(out["summary"])
    assert check["ok"] is False
    worst = check["worst"]
    assert worst["window"].startswith("run ")
    assert worst["emon_s"] / worst["dut_s"] - 1 == pytest.approx(0.01, abs=2e-4)
    assert (f"{worst['window']}: DUT timer {si(worst['dut_s'], 's', 7)}, monitor "
            f"{si(worst['emon_s'], 's', 7)}") in check["detail"]
    assert "5 of 5 windows disagree" in check["detail"]
    assert "stretched trace" in check["detail"]
    # Every other check passes: only the cross-check sees a stretched time base.
    assert all(c["ok"] for c in out["summary"]["checks"] if c["name"] != "timer agreement")


def test_plain_energy_firmware_is_not_applicable_and_passes(tmp_path: Path) -> None:
    vb = VirtualBench(replace(load_description(REPO / "benches" / "sim.toml"), dut="python"))
    vb.dut.extensions = False  # unmodified MLPerf Tiny firmware: no caps, no lap counter
    with vb:
        proc = measure_on(vb, tmp_path, as_user=True)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)["summary"]
    check = timer_check(s)
    assert check["ok"] is None
    assert check["detail"].startswith("not applicable: the firmware reports one clock only")
    # Its test-set execution time comes from the monitor's 1 kHz samples: 12 or 13 ms each.
    assert s["execution_time_timer"] == "emon" and s["execution_time_samples"] == 40
    assert s["execution_time_mean_s"] == pytest.approx(12.5e-3, abs=0.5e-3)
    samples = [e for e in load_run(json.loads(proc.stdout)["run"]).events
               if e.kind == "sample_classified"]
    assert {round(e.execution_time_s * 1e3) for e in samples} <= {12, 13}
    assert all(e.dut_time_s is None for e in samples)
    # The report lists the check as not applicable, and the run as a valid (complete) one.
    run = json.loads(proc.stdout)["run"]
    report = run_rig("report", run, "--out", str(tmp_path / "report"), "--format", "md")
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    (row,) = [line for line in md.splitlines() if "| timer agreement |" in line]
    assert "| n/a | not applicable: the firmware reports one clock only" in row
