"""A hung DUT no longer keeps the trace growing (issue 39): at speed 50 the monitor recorded
through a 183.6 s reply deadline of host time, 50 x that of trace (47 MB where 3.7 MB was
projected). It grew two ways, both stopped now:

- a DUT hung before its run starts (idle, as the virtual bench knows it): the monitor streams
  on. The reply deadline is counted in the DUT's own time too (rig/run/trace_deadline.py), in
  the monitor's samples from the command, never sooner than the host's patience for any reply
  (`COMMAND_TIMEOUT_S`), or from the run's start pulse once it came: past it no window can use
  what is recorded, so the trace stops there and the run ends, naming the deadline.
- a DUT hung mid-run: the virtual bench holds its monitor (its world waits for the DUT to say
  what it does) and delivered the whole backlog, speed x the host's deadline, when the rig
  powered the DUT off. Once a deadline has passed the recorder takes nothing more.

The DUT is the virtual bench's C shim, reached over its pty as hardware (the bench has no
[sim], as in tests/e2e/test_reply_deadline.py); the run is in this process, so the shim is
stopped (SIGSTOP) at a known point: as the second timed run is asked, or inside it.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from drivers.dut.client import COMMAND_TIMEOUT_S
from rig.bench.config import load_bench
from rig.run import asc
from rig.run.events import Event, LatencyRun
from rig.run.measure import measure_asc
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description

from .runs import REPO, events

pytestmark = pytest.mark.slow


def attached_bench(tmp_path: Path, ports: dict[str, str], run_s: float) -> Path:
    """The served ptys as hardware, timed runs of `run_s` (20 s: 1633 + 1 inferences of 12.5 ms,
    a reply deadline of 3 x 20.4 s = 61.2 s of host time, which the shim runs in 0.4 s of host
    time at speed 50)."""
    path = tmp_path / "attached.toml"
    path.write_text(
        '[bench]\nname = "attached"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{ports["dut"]}"\ntimestamp_mode = "energy"\n\n'
        f'[emon]\ndriver = "lpm01a"\nport = "{ports["emon"]}"\nsample_rate_hz = 1000\n'
        "supply_voltage_v = 1.8\n\n[dataset]\nsamples_per_class = 1\n\n"
        f"[procedure.asc]\nruns = 3\nmin_run_s = {run_s}\nwarmup = 1\nidle_s = 0.5\n"
    )
    return path


def hang(vb: VirtualBench, *, mid_run: bool) -> tuple[list[float], object]:
    """A subscriber that stops the shim once the first timed run is published: at once (the
    procedure thread has not asked the next run yet), or, `mid_run`, once the next run's start
    pulse is declared. Returns the host time it was stopped at (a list) and the subscriber."""
    stopped: list[float] = []

    def stop() -> None:
        shim = vb.dut._proc
        assert shim is not None
        os.kill(shim.pid, signal.SIGSTOP)
        stopped.append(time.monotonic())

    def mid(pulses: int) -> None:
        deadline = time.monotonic() + 30
        while len(vb.world.falling_ns) <= pulses and time.monotonic() < deadline:
            time.sleep(0.002)
        stop()

    def on_event(event: Event) -> None:
        if isinstance(event, LatencyRun) and event.index == 0:
            if mid_run:
                threading.Thread(target=mid, args=(len(vb.world.falling_ns),),
                                 daemon=True).start()
            else:
                stop()

    return stopped, on_event


def test_a_dut_hung_before_its_run_stops_the_trace_one_deadline_of_its_time_on(
        tmp_path: Path) -> None:
    speed = 50
    with VirtualBench(load_description(REPO / "benches" / "sim.toml"), speed=speed) as vb:
        bench = load_bench(attached_bench(tmp_path, vb.ports, 20.0))
        stopped, on_event = hang(vb, mid_run=False)
        outcome = measure_asc(bench, device="attached", runs_root=tmp_path / "runs",
                              subscribers=[on_event])
        waited = time.monotonic() - stopped[0]
        assert vb.world.powered is False  # and the rig switched the DUT off
    assert outcome.status == "failed" and outcome.error is not None
    line = str(outcome.error)
    found = re.search(r"DUT never said m-infer-done for 'infer (\d+) 1' within ([\d.]+) s of its "
                      r"own time \(the energy monitor's samples since the command\); the trace "
                      r"stops there", line)
    assert found, line
    deadline_s = float(found.group(2))
    assert deadline_s == pytest.approx(3 * (int(found.group(1)) + 1) * 0.0125, rel=0.01)
    # Before: the rig waited out the deadline in host time, 61 s, while the trace grew 50 x
    # that (3087 s, 15.9 MB, where 358 KiB was projected); now the host's patience for a reply.
    assert waited < COMMAND_TIMEOUT_S + 5.0
    trace_s, last_window_s = trace_after(outcome.run_path)
    assert trace_s - last_window_s <= max(deadline_s, COMMAND_TIMEOUT_S * speed) + 10.0


def test_a_dut_hung_mid_run_does_not_have_the_held_backlog_recorded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    speed = 5
    monkeypatch.setattr(asc, "MIN_DEADLINE_S", 3.0)  # a short host deadline: a fast test
    with VirtualBench(load_description(REPO / "benches" / "sim.toml"), speed=speed) as vb:
        bench = load_bench(attached_bench(tmp_path, vb.ports, 2.0))
        stopped, on_event = hang(vb, mid_run=True)
        outcome = measure_asc(bench, device="attached", runs_root=tmp_path / "runs",
                              subscribers=[on_event])
        assert stopped and vb.world.powered is False
    assert outcome.status == "failed" and outcome.error is not None
    line = str(outcome.error)
    assert re.search(r"DUT never said m-infer-done for 'infer \d+ 1' within ([\d.]+) s", line), \
        line
    # Before: the held backlog, the whole host deadline x the speed (6.1 s x 5 = 31 s), was
    # recorded once the DUT was powered off; now the trace ends when the deadline passed, with
    # at most the run the DUT hung in.
    trace_s, last_window_s = trace_after(outcome.run_path)
    assert trace_s - last_window_s <= 2.0 * 1.05 + 2.0, (trace_s, last_window_s)


def trace_after(run: Path) -> tuple[float, float]:
    """The trace's length [s] and where its last measured window ended [s]."""
    recorded = events(run)
    saved = next(e for e in recorded if e["event"] == "trace_saved")
    window = [e for e in recorded if e["event"] == "window_measured"][-1]
    rate = saved["sample_rate_hz"]
    return saved["samples"] / rate, window["end_sample"] / rate
