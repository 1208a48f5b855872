"""`rig measure asc` on a Xylo HDK bench (``hdk = true``) end to end, through the real shim
subprocess and Rockpool 3.1.0's own XyloSamna, with only samna replaced: the fake board of
tests/firmware/fake_samna.py, importable as ``samna`` from `PACKAGE_ROOT` (put first on the
PYTHONPATH the rig hands its shim) and running on the host's clock (`HostBoard`).

The board's answers are known in closed form, so nothing asserted depends on the host's speed:

- time: the board's readouts appear `LATENCY_S` after the input write. The shim's clock starts
  after the write and stops at the end of the poll that saw them, whose bracket (from the start
  of the poll before it) is the resolution it states: so each inference it times is at most
  `LATENCY_S` + its resolution, exactly, and at least `LATENCY_S` less the time from the write
  to the shim's first read, which the board logs (µs; the one host figure in a bound, measured
  by the board itself). The board also logs the two reads around the readout: each stated
  bracket must hold them. The lap counter is in whole µs: 1 µs either way.
- power: every rail sample of an evolve's window is at the active level, the `idle` span's at
  the idle level (`HostBoard`), so idle, active and dynamic power are the rails' sums exactly and
  energy per inference is active power x the run's time per inference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from firmware.xylo.shim import POLL_INTERVAL_S
from rig.run.asc import HDK_TIMING
from tests.firmware.fake_samna import BOARD_ENV, PACKAGE_ROOT
from tests.requires import needs

from .runs import REPO, RIG, events

pytestmark = [pytest.mark.slow, needs("rockpool", "xylosim")]

MODEL = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
#: The board's time per inference [s]: above the 50 ms between two rail samples at 20 Hz (so
#: that a single inference's window holds one), off Rockpool's 0.1 s polling grid, and well
#: above a stall of the shim's 1 ms poll on a loaded host: at 62.5 ms, `make test` on a host
#: loaded to ~10 once stalled a poll for 64.6 ms, and the shim refused that inference as it
#: must (not above its timing resolution), failing the run. ~1 s more for the module.
LATENCY_S = 0.1125
#: Rail power [W] per samna measurement channel outside and inside a run.
IDLE_W = {"Io": 100e-6, "Logic": 200e-6, "LogicAfe": 300e-6, "IoAfe": 400e-6}      # 1.000 mW
ACTIVE_W = {"Io": 150e-6, "Logic": 600e-6, "LogicAfe": 300e-6, "IoAfe": 400e-6}    # 1.450 mW
IDLE, ACTIVE = sum(IDLE_W.values()), sum(ACTIVE_W.values())
#: The lap counter's unit: a time from two laps is off by less than this either way.
LAP_S = 1e-6
#: Calibration inferences and warm-up per timed run (the method's defaults).
CALIBRATION, WARMUP = 10, 1


def hdk_bench(tmp_path: Path) -> Path:
    """benches/xylo.toml on an HDK, cut short: 2 runs of >= 0.5 s, a 0.5 s idle span, one
    sample per class (about 3 s of board time). Flagged simulated: the board is a fake. The
    tolerance of the replicability checks is the widest the bench allows, so that the exit code
    cannot depend on how evenly a loaded host polled (replicability is not what this tests)."""
    text = (REPO / "benches" / "xylo.toml").read_text()
    for old, new in (('spec = "../firmware/xylo/models/asc_synthetic.npz"', f'spec = "{MODEL}"'),
                     ("samples_per_class = 10", "samples_per_class = 1"),
                     ("hdk = false", "hdk = true"),
                     ("voltage_limit_v = 3.3", "voltage_limit_v = 3.3\nsimulated = true"),
                     ("runs = 5", "runs = 2\nidle_s = 0.5\nreplicability_tolerance = 1.0"),
                     ("min_run_s = 10.0", "min_run_s = 0.5")):
        assert old in text, old
        text = text.replace(old, new)
    bench = tmp_path / "xylo-hdk.toml"
    bench.write_text(text)
    return bench


def measure(tmp_path: Path, board: dict[str, Any]) -> subprocess.CompletedProcess:
    """`rig measure asc --json` on `hdk_bench`, the fake samna first on the path with `board`."""
    env = {k: v for k, v in os.environ.items() if k != "RIG_XYLO_STAND_IN_RAILS"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PACKAGE_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env[BOARD_ENV] = json.dumps(board)
    return subprocess.run([*RIG, "measure", "asc", "--bench", str(hdk_bench(tmp_path)),
                           "--runs-dir", str(tmp_path / "runs"), "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def hdk_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One measurement on the fake board: the process, its JSON, the run's events and the
    board's log."""
    tmp = tmp_path_factory.mktemp("xylo-hdk-fake")
    log = tmp / "board.jsonl"
    proc = measure(tmp, {"latency_s": LATENCY_S, "idle_w": IDLE_W, "active_w": ACTIVE_W,
                         "log": str(log)})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    out = json.loads(proc.stdout)
    run = Path(out["run"])
    board = [json.loads(line) for line in log.read_text().splitlines()]
    return {"summary": out["summary"], "run": run, "events": events(run), "board": board}


def of(hdk_run: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [e for e in hdk_run["events"] if e["event"] == kind]


def resolution_s(summary: dict[str, Any]) -> float:
    """The resolution the summary's timing states [s]."""
    found = re.search(r"each inference's time known to within (\d+) us", summary["timing"])
    assert found, summary["timing"]
    return int(found.group(1)) * 1e-6


def test_the_rig_drives_rockpools_xylosamna_on_the_board(hdk_run: dict[str, Any]) -> None:
    s = hdk_run["summary"]
    assert s["samples"] == 4 and s["latency_runs"] == 2 and s["energy_windows"] == 2
    assert all(c["ok"] is not False for c in s["checks"]), s["checks"]
    (dut,) = [e["info"] for e in of(hdk_run, "instrument_info") if e["role"] == "dut"]
    assert dut["name"] == "xylo" and "(HDK)" in dut["vendor"]
    assert "power" in dut["capabilities"] and "simtime" not in dut["capabilities"]
    # Every evolve the rig asked for reached the board, and no other: the calibration, each
    # timed run with its warm-up, one per test sample.
    runs = of(hdk_run, "latency_run")
    asked = CALIBRATION + sum(WARMUP + r["iterations"] for r in runs) + s["samples"]
    assert sum(r["event"] == "run" for r in hdk_run["board"]) == asked


def test_timing_is_the_boards_own_time_within_the_stated_resolution(
        hdk_run: dict[str, Any]) -> None:
    s = hdk_run["summary"]
    assert s["timing"].startswith(HDK_TIMING + "; each inference's time known to within ")
    resolution = resolution_s(s)
    # The stated figure is the coarsest bracket of any inference timed, test samples included,
    # and no bracket is finer than the shim's 1 ms sleep between two polls.
    runs, samples = of(hdk_run, "latency_run"), of(hdk_run, "sample_classified")
    brackets = [e["dut_resolution_s"] for e in runs + samples]
    assert None not in brackets and resolution == pytest.approx(max(brackets), abs=1e-12)
    assert min(brackets) >= POLL_INTERVAL_S
    # The board's runs, in the order the rig asked for them: the calibration, each timed run
    # (its warm-up first), then one per test sample.
    board = [r for r in hdk_run["board"] if r["event"] == "run"]
    timed: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    at = CALIBRATION
    for run in runs:
        timed.append((run, board[at + WARMUP: at + WARMUP + run["iterations"]]))
        at += WARMUP + run["iterations"]
    timed += [(sample, [board[at + i]]) for i, sample in enumerate(samples)]
    assert at + len(samples) == len(board)
    late = max(r["first_read_ns"] - r["write_ns"] for r in board) / 1e9
    for event, evolves in timed:
        seconds = event.get("time_per_inference_s", event.get("execution_time_s"))
        bracket = event["dut_resolution_s"]
        assert LATENCY_S - late - LAP_S <= seconds <= LATENCY_S + bracket + LAP_S, (
            event, late)
        # The bracket the shim states holds the board's own two reads around each readout.
        assert all(r["read_seen_ns"] - r["read_before_ns"] <= round(bracket * 1e9)
                   for r in evolves), (event, evolves)
    assert all(x["timer"] == "dut" for x in samples)
    times = [x["execution_time_s"] for x in samples]
    assert s["execution_time_mean_s"] == pytest.approx(np.mean(times), rel=1e-12)
    assert s["execution_time_source"] == "test_set" and s["execution_time_timer"] == "dut"


def test_power_and_energy_are_the_rails_closed_form(hdk_run: dict[str, Any]) -> None:
    s = hdk_run["summary"]
    assert s["idle_power_w"] == pytest.approx(IDLE, rel=1e-12)
    assert s["active_power_w"] == pytest.approx(ACTIVE, rel=1e-12)
    assert s["dynamic_power_w"] == pytest.approx(ACTIVE - IDLE, rel=1e-9)
    # Energy per inference: the rails' active power x each run's own time per inference.
    per_run = {r["index"]: r["time_per_inference_s"] for r in of(hdk_run, "latency_run")}
    windows = of(hdk_run, "window_measured")
    assert sorted(w["index"] for w in windows) == sorted(per_run)
    for w in windows:
        assert w["mean_power_w"] == pytest.approx(ACTIVE, rel=1e-12)
        assert w["energy_per_inference_j"] == pytest.approx(ACTIVE * per_run[w["index"]],
                                                            rel=1e-12)
    assert s["energy_per_inference_j"] == pytest.approx(
        ACTIVE * float(np.median(list(per_run.values()))), rel=1e-12)
    assert s["dynamic_energy_per_inference_j"] == pytest.approx(
        (ACTIVE - IDLE) * s["execution_time_mean_s"], rel=1e-9)
    assert "power" not in s  # measured, not "unavailable"


def test_the_rails_are_sampled_at_20_hz(hdk_run: dict[str, Any]) -> None:
    started = [r for r in hdk_run["board"] if r["event"] == "power_monitor_started"]
    assert started == [{"event": "power_monitor_started", "hz": 20.0}]
    manifest = json.loads((hdk_run["run"] / "manifest.json").read_text())
    assert manifest["bench"]["dut"]["power_frequency_hz"] == 20.0


def test_old_hdk_firmware_fails_the_run_with_the_shims_reason(tmp_path: Path) -> None:
    proc = measure(tmp_path, {"latency_s": LATENCY_S,
                              "firmware": {"fxtree": "0.11.4", "unifirm": "1.1.3"}})
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr
    assert err.startswith("rig: error: ") or "\nrig: error: " in err, err
    assert "exited with code 3" in err  # the shim's code for a board it cannot use
    assert "The firmware of the connected Xylo HDK is unsupported" in err  # Rockpool's reason
    assert "upgrade the HDK's firmware" in err and "Traceback" not in err
