"""A DUT that stops answering mid-run (issue 22.2): the run ends within max(30 s, 3x the time
the calibration run measured) with an error naming the reply that never came, not after the
hour a 1 s-per-inference guess gave a bench without a [sim] table.

The DUT is the virtual bench's C shim, reached over its pty as hardware (the bench has no
[sim]); it hangs (SIGSTOP: its port stays open, nothing more comes) during the third timed run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from rig.bench.config import load_bench
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description

from .runs import REPO, RIG, events, only_run, wait_for_event

pytestmark = pytest.mark.slow


def attached_bench(tmp_path: Path, ports: dict[str, str]) -> Path:
    """The served ptys as hardware, without [sim]: 10 s timed runs (816 + 1 inferences of
    12.5 ms, so 3x the expected time, 30.6 s, is above the 30 s floor)."""
    path = tmp_path / "attached.toml"
    path.write_text(
        '[bench]\nname = "attached"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{ports["dut"]}"\ntimestamp_mode = "energy"\n\n'
        f'[emon]\ndriver = "lpm01a"\nport = "{ports["emon"]}"\nsample_rate_hz = 1000\n'
        "supply_voltage_v = 1.8\n\n[procedure.asc]\nruns = 5\nmin_run_s = 10.0\nwarmup = 1\n"
    )
    return path


def test_a_lost_reply_ends_the_run_within_3x_the_calibrated_time(tmp_path: Path) -> None:
    with VirtualBench(load_description(REPO / "benches" / "sim.toml")) as vb:
        bench = attached_bench(tmp_path, vb.ports)
        assert load_bench(bench).sim is None
        runs = tmp_path / "runs"
        proc = subprocess.Popen(
            [*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir", str(runs)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_for_event(runs, "latency_run", 2, proc)
            shim = vb.dut._proc  # the firmware process: frozen, as a hung board
            assert shim is not None
            os.kill(shim.pid, signal.SIGSTOP)
            # A bound on this test, not a measurement: before the fix the deadline was
            # 30 + 4 x 817 x 1 s = 3298 s and the run was still waiting here.
            _, err = proc.communicate(timeout=150)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=10)
        assert vb.world.powered is False  # and the rig switched the DUT off
    assert proc.returncode == 2, err
    line = [x for x in err.splitlines() if x.startswith("rig: error: ")][-1]
    found = re.search(
        r"DUT never said (m-[a-z-]+) for '(infer (\d+) (\d+))' within ([\d.]+) s .*"
        r"\(expected ([\d.]+) s: (\d+) inferences at ([\d.]+) ms, calibration run\)", line)
    assert found, line
    missing, _, n, warmup, deadline, expected, inferences, per_ms = found.groups()
    assert missing in ("m-warmup-start", "m-infer-start", "m-infer-done")
    assert int(inferences) == int(n) + int(warmup)

    run = only_run(runs)
    recorded = events(run)
    # The DUT's own timing of the calibration run (the monitor's count between its edges).
    calibration = next(e["text"] for e in recorded
                       if e["event"] == "note" and e["text"].startswith("calibration: "))
    dut_ms = float(re.match(r"calibration: ([\d.]+) ms per inference", calibration).group(1))
    assert dut_ms == pytest.approx(12.5, rel=1e-3)
    runs_done = [e for e in recorded if e["event"] == "latency_run"]
    assert len(runs_done) >= 2 and int(n) == runs_done[0]["iterations"] == 816
    # Deadline = max(30 s, 3x expected), the expected time from the calibration run (at least
    # the DUT's own time per inference).
    assert float(per_ms) >= dut_ms
    assert float(expected) == pytest.approx(int(inferences) * float(per_ms) / 1e3, rel=1e-3)
    assert float(deadline) == pytest.approx(max(30.0, 3 * float(expected)), rel=1e-3)
    assert float(deadline) < 60.0
    # The deadline the procedure used is on record from the calibration on.
    awaited = float(re.search(r"reply deadline ([\d.]+) s per run", calibration).group(1))
    assert awaited == pytest.approx(max(30.0, 3 * 817 * float(per_ms) / 1e3), rel=1e-3)
