"""`rig emon record` (issue 22.10): it listens for the monitor's own fault, so an unplugged
LPM01A ends the recording at once with one line and the samples kept; and it takes the
timestamp line on an N6705's auxiliary input (`--timestamp-input aux`)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from rig.cli import main
from rig.traces.files import read_trace
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description
from virtual_bench.world import NS

from .runs import REPO, window_scheduled

pytestmark = pytest.mark.slow

FS = 1000
#: Simulated seconds per host second (the recording's 20 s take 5 s of host time).
SPEED = 4.0


def unplug_after(vb: VirtualBench, seconds: float) -> threading.Thread:
    """Pull the LPM01A's USB once its acquisition has run `seconds` of simulated time."""
    def pull() -> None:
        give_up = time.monotonic() + 60.0  # a bound, not a measurement
        while time.monotonic() < give_up:
            t0 = vb.emon.acquisition_t0_ns
            if t0 is not None and vb.world.clock.now_ns() > t0 + round(seconds * NS):
                vb.emon.unplug()
                return
            time.sleep(0.005)

    thread = threading.Thread(target=pull, daemon=True)
    thread.start()
    return thread


def test_an_unplugged_lpm01a_ends_the_recording_with_its_samples_kept(
    tmp_path: Path, capsys
) -> None:
    out = tmp_path / "capture.jls"
    with VirtualBench(load_description(REPO / "benches" / "sim.toml"), speed=SPEED) as vb:
        puller = unplug_after(vb, 3.0)  # 3 s of simulated time: at least 1 s reaches the file
        code = main(["emon", "record", "--driver", "lpm01a", "--port", vb.ports["emon"],
                     "--duration", "20", "--voltage", "1.8", "--rate", str(FS),
                     "--out", str(out), "--simulated"])
        puller.join(10.0)
        assert vb.world.powered is False  # the board took the DUT's supply with it
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("rig: error: ")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    line = errors[0]
    # The monitor's fault, not the recorder's deadline ("waited ... for 20000 samples").
    assert line.startswith("rig: error: LPM01A: read from ") and "stream stopped after" in line
    assert "waited" not in err
    trace = read_trace(out)  # finished and readable: what was measured is kept
    assert FS <= len(trace) < 20 * FS
    assert f"the {len(trace)} samples recorded are kept in {out}" in line


def test_record_with_the_timestamp_on_the_n6705_aux_input(tmp_path: Path, capsys) -> None:
    out = tmp_path / "n6705.jls"
    # The window half-way (0.375 s of wall time at SPEED after the capture starts: a loaded
    # host once took longer than 0.15 s to schedule one at 0.6 s).
    k1, k2, rate = 3000, 3800, 2000
    with VirtualBench(load_description(REPO / "benches" / "sim-n6705.toml"), speed=SPEED) as vb:
        with window_scheduled(vb.world, k1, k2, rate, lambda: vb.emon.elog_t0) as errors:
            code = main(["emon", "record", "--driver", "n6705", "--resource", vb.ports["emon"],
                         "--duration", "3", "--voltage", "1.8", "--rate", str(rate),
                         "--out", str(out), "--simulated", "--timestamp-input", "aux",
                         "--json"])
        assert not errors, errors
        assert vb.world.powered is False
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["timestamp_input"] == "aux" and report["dropped"] == 0
    # Both edges of the window, from the auxiliary input logged beside the current.
    assert report["edges"] == 2
    fs = report["sample_rate_hz"]  # 24 x 20.48 us records: 2034.5 Hz
    assert fs == pytest.approx(1 / 491.52e-6)
    assert main(["analyze", str(out), "--json"]) == 0
    [window] = json.loads(capsys.readouterr().out)["windows"]
    # The window [1.5 s, 1.9 s) of the capture, to a sample of the 491.52 us grid.
    assert window["start_s"] == pytest.approx(k1 / rate, abs=1.5 / fs)
    assert window["end_s"] - window["start_s"] == pytest.approx((k2 - k1) / rate, abs=1.5 / fs)
    assert window["mean_power_w"] == pytest.approx(3.6e-3, rel=1e-2)


def test_aux_on_a_monitor_without_one_is_refused_before_opening(tmp_path: Path,
                                                                 capsys) -> None:
    code = main(["emon", "record", "--driver", "lpm01a", "--port", "/dev/nonexistent-rig-port",
                 "--duration", "1", "--voltage", "1.8", "--rate", "1000",
                 "--out", str(tmp_path / "t.jls"), "--timestamp-input", "aux"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--timestamp-input aux needs an N6705" in err and "nonexistent" not in err
    assert not (tmp_path / "t.jls").exists()
