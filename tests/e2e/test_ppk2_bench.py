"""The Nordic PPK2 end to end on the virtual bench (benches/sim-ppk2.toml): ASC energy through
`rig measure asc` gives the closed-form answers within the PPK2's resolution, `rig emon record`
writes its 100 kS/s stream into JLS, and a supply above the bench's limit is refused with the
DUT off and, when a run had begun, the run marked failed.

The closed-form and ampere-mode runs and the ppk2_mode refusal run in this process
(`rig_in_process`, as the CLI already runs here beside an in-process bench): a new
interpreter's start-up and imports were ~1 s of CPU each. One refusal is still run as a user
runs it (the console script: nothing else on stderr)."""

from __future__ import annotations

import dataclasses
import json
import select
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.accuracy import MonitorAccuracy
from drivers.emon.ppk2 import ppk2_accuracy
from rig.bench.config import load_bench
from rig.cli import main
from rig.errors import ConfigError
from rig.run.measure import measure_asc
from rig.run.store import load_run
from rig.traces.files import read_trace
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description
from virtual_bench.ppk2 import SIM_CALIBRATION

from .runs import (
    REPO,
    TRUTH,
    bench_variant,
    only_run,
    rig_in_process,
    run_rig,
    window_scheduled,
)
from .runs import short_bench as _short

# Not serial since the simulated PPK2 holds simulated time when it falls behind (SimClock.held):
# before, the workers' load left its timestamp edges minutes behind ("waited 30 s for 10 edges").
pytestmark = pytest.mark.slow

FS = 100_000
SUPPLY_V = 1.8


def half_count_w(k: int, amps: float) -> float:
    """Half of one ADC count of the simulated PPK2's range `k` near `amps`, in watts at the
    bench's supply: the most one sample is off by (its resolution)."""
    adc, rng = SIM_CALIBRATION.adc_for(np.array([amps]), SUPPLY_V)
    assert rng[0] == k
    step = np.diff(SIM_CALIBRATION.current(adc + np.array([0, 1]), rng.repeat(2), SUPPLY_V))
    return 0.5 * float(step[0]) * SUPPLY_V


def test_asc_gives_the_closed_form_answers_within_the_ppk2_resolution(tmp_path: Path) -> None:
    proc = rig_in_process("measure", "asc", "--bench", str(short_bench(tmp_path)),
                          "--runs-dir", str(tmp_path / "r"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    s = out["summary"]
    # Idle (0.667 mA) is in the PPK2's range 0, active (2 mA) in range 1: each sample is within
    # half a count of the truth, so the means are too.
    idle_tol = half_count_w(0, TRUTH["idle_power_w"] / SUPPLY_V)
    active_tol = half_count_w(1, TRUTH["active_power_w"] / SUPPLY_V)
    tolerance = {
        "idle_power_w": idle_tol,
        "active_power_w": active_tol,
        "dynamic_power_w": idle_tol + active_tol,
        "energy_per_inference_j": active_tol * 12.5e-3,
        "dynamic_energy_per_inference_j": (idle_tol + active_tol) * 12.5e-3,
    }
    for key, tol in tolerance.items():
        assert s[key] == pytest.approx(TRUTH[key], abs=tol), key
    assert s["dynamic_power_w"] == pytest.approx(2.40e-3, abs=tolerance["dynamic_power_w"])
    assert s["dynamic_energy_per_inference_j"] == pytest.approx(30e-6, rel=1e-3)
    assert s["inferences_per_s"] == pytest.approx(80.0, rel=1e-3)
    assert s["execution_time_mean_s"] == pytest.approx(12.5e-3, rel=1e-3)
    assert s["latency_runs"] == 2 and s["energy_windows"] == 2 and s["latency_timer"] == "emon"
    assert all(c["ok"] for c in s["checks"]), s["checks"]
    run = Path(out["run"])
    emon = json.loads((run / "manifest.json").read_text())["instruments"]["emon"]
    assert emon["driver"] == "ppk2" and emon["simulated"] is True and emon["mode"] == "source"
    assert emon["sample_rate_hz"] == FS and emon["voltage_v"] == SUPPLY_V
    assert emon["timestamp_input"] == "D0" and emon["hw"] == "9173"
    assert MonitorAccuracy.from_json(emon["accuracy"]) == ppk2_accuracy("source")
    # The trace holds spike-filtered currents: the run's snapshot says so, with the settings.
    assert emon["spike_filter"]["applied"] is True
    assert {k: emon["spike_filter"][k] for k in ("alpha", "alpha5", "samples")} == {
        "alpha": 0.18, "alpha5": 0.06, "samples": 3}
    # The simulated unit's metadata writes GS0 as 0 and a user gain of 1.25: read as Nordic's
    # app reads them (else idle power would read 2 % high: UG0 is written 1.02).
    assert len(emon["calibration_notes"]) == 2
    trace = read_trace(run / "traces" / "emon.jls")
    assert trace.sample_rate == FS and trace.simulated and len(trace) > 4 * FS
    # ... and so does the trace itself, read without its run folder.
    assert trace.meta["user_data"]["instrument"]["spike_filter"] == emon["spike_filter"]
    assert (trace.gpio == 0).sum() >= 4  # both pulses of both energy runs, at least


# -- rig emon record ----------------------------------------------------------------------------
#: Simulated seconds per host second for the recording: slow enough that the helper thread
#: registers the window long before simulated time reaches it.
SPEED = 2.0
K1, K2 = 30_000, 80_000  # the window, in samples of the capture


def short_bench(tmp_path: Path, **more: tuple[str, str]) -> Path:
    """benches/sim-ppk2.toml with 2 runs of 1 s and 4 test samples."""
    return _short(tmp_path, "sim-ppk2", "ppk2", **more)


def test_emon_record_writes_the_full_rate_stream_to_jls(tmp_path: Path, capsys) -> None:
    out = tmp_path / "capture.jls"
    with VirtualBench(load_description(REPO / "benches" / "sim-ppk2.toml"), speed=SPEED) as vb:
        with window_scheduled(vb.world, K1, K2, FS, lambda: vb.emon.acquisition_t0_ns) as errors:
            code = main(["emon", "record", "--driver", "ppk2", "--port", vb.ports["emon"],
                         "--duration", "1", "--voltage", "1.8", "--rate", str(FS),
                         "--out", str(out), "--json"])  # simulated: it says so
        assert not errors, errors
        deadline = time.monotonic() + 5.0  # the PPK2 acks nothing: wait for the sim to act
        while vb.world.powered and time.monotonic() < deadline:
            time.sleep(0.01)
        assert vb.world.powered is False  # switched off after the capture
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert report["samples"] == FS and report["requested_samples"] == FS
    assert report["sample_rate_hz"] == FS and report["dropped"] == 0 and report["edges"] == 2
    trace = read_trace(out)
    assert len(trace) == FS and trace.simulated  # from its "sim: 1" metadata, no flag given
    assert trace.meta["user_data"]["instrument"]["spike_filter"]["applied"] is True
    assert report["simulated"] is True
    falls = np.flatnonzero((trace.gpio[1:] & 1) < (trace.gpio[:-1] & 1)) + 1
    assert falls.tolist() == [K1, K2]
    window_w = float((trace.current[K1:K2].astype(float) * trace.voltage[K1:K2]).mean())
    assert window_w == pytest.approx(TRUTH["active_power_w"],
                                     abs=half_count_w(1, 2e-3) + 1e-9)  # float32 in the file


# -- bad input: a supply above the bench's limit ------------------------------------------------
def test_a_bench_supply_above_the_limit_is_refused_before_anything(tmp_path: Path) -> None:
    bench = short_bench(tmp_path, v=("supply_voltage_v = 1.8", "supply_voltage_v = 3.5"))
    # the file's one `rig measure` as a user runs it: nothing else on stderr
    proc = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "3.5 V is above the bench voltage limit of 3.3 V" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # no run folder, no virtual bench, no instrument


def test_a_ppk2_asked_above_the_limit_is_refused_before_a_folder_or_a_byte(
        tmp_path: Path) -> None:
    """A bench that reaches the runner unchecked (built in code, not loaded from a file) with
    3.5 V on a 3.3 V bench: the runner's bench check (the PPK2 driver's `check_setup`, issue
    22.9) refuses it before a run folder exists or a byte reaches the PPK2; the driver's own
    guard in configure() is tested in tests/drivers/test_ppk2.py."""
    shipped = load_bench(short_bench(tmp_path))
    with VirtualBench(load_description(shipped.path)) as vb:
        bench = dataclasses.replace(
            shipped, sim=None,
            dut=dataclasses.replace(shipped.dut, port=vb.ports["dut"]),
            emon=dataclasses.replace(shipped.emon, port=vb.ports["emon"], supply_voltage_v=3.5))
        with pytest.raises(ConfigError) as info:
            measure_asc(bench, device="ppk2-over-limit", runs_root=tmp_path / "r")
        assert vb.emon.received == [] and vb.world.powered is False
        assert vb.emon.max_regulator_mv == 0
    assert "3.5 V is above the bench voltage limit of 3.3 V" in str(info.value)
    assert not (tmp_path / "r").exists()


# -- ampere mode ----------------------------------------------------------------------------------
def test_asc_in_ampere_mode_on_the_bench_supply(tmp_path: Path) -> None:
    """`ppk2_mode = "ampere"`: the bench's 3.0 V supply feeds the DUT through the PPK2; the
    same closed form comes out (powers are watts, whatever the supply)."""
    bench = short_bench(tmp_path, mode=('driver = "ppk2-sim"',
                                        'driver = "ppk2-sim"\nppk2_mode = "ampere"'),
                        v=("supply_voltage_v = 1.8", "supply_voltage_v = 3.0"))
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir",
                          str(tmp_path / "r"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key, truth in TRUTH.items():
        assert out["summary"][key] == pytest.approx(truth, rel=1e-3), key
    emon = json.loads((Path(out["run"]) / "manifest.json").read_text())["instruments"]["emon"]
    assert emon["mode"] == "ampere" and emon["voltage_v"] == 3.0


def test_ppk2_mode_on_another_monitor_is_refused_when_the_bench_loads(tmp_path: Path) -> None:
    bench = bench_variant(tmp_path, mode=('driver = "lpm01a"',
                                          'driver = "lpm01a"\nppk2_mode = "ampere"'))
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir",
                          str(tmp_path / "r"))
    assert proc.returncode == 2
    assert '[emon] ppk2_mode = "ampere" is a PPK2 setting, but the monitor is \'lpm01a\'' \
        in proc.stderr
    assert not (tmp_path / "r").exists()


def test_emon_record_refuses_ppk2_mode_on_another_driver(capsys, tmp_path: Path) -> None:
    code = main(["emon", "record", "--driver", "lpm01a", "--port", "/dev/nonexistent-rig-port",
                 "--duration", "1", "--voltage", "1.8", "--rate", "1000", "--ppk2-mode",
                 "ampere", "--out", str(tmp_path / "x.jls")])
    assert code == 2
    assert "--ppk2-mode ampere is a PPK2 setting" in capsys.readouterr().err


def test_emon_record_above_the_limit_sends_the_ppk2_nothing(capsys, tmp_path: Path) -> None:
    from virtual_bench.pty import Pty

    pty = Pty()
    try:
        code = main(["emon", "record", "--driver", "ppk2", "--port", pty.path, "--duration",
                     "1", "--voltage", "3.6", "--rate", str(FS), "--out",
                     str(tmp_path / "x.jls")])
        assert code == 2
        assert "3.6 V is above the bench voltage limit of 3.3 V" in capsys.readouterr().err
        ready, _, _ = select.select([pty.master], [], [], 0)
        assert not ready  # not one byte reached the PPK2's side
        assert not (tmp_path / "x.jls").exists()
    finally:
        pty.close()


# -- faults mid-run -------------------------------------------------------------------------------
#: The timed run during which each fault happens (after two runs were measured and kept).
AFTER_RUNS = 2


def attached_bench(tmp_path: Path, vb: VirtualBench) -> Path:
    """A bench file pointing at the ports of a virtual PPK2 bench served by this process."""
    text = (f'[bench]\nname = "attached ppk2"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
            f'[dut]\nport = "{vb.ports["dut"]}"\ntimestamp_mode = "energy"\n\n'
            f'[emon]\ndriver = "ppk2"\nport = "{vb.ports["emon"]}"\nsample_rate_hz = {FS}\n'
            f"supply_voltage_v = {SUPPLY_V}\n\n"
            "[dataset]\nsamples_per_class = 1\n\n[procedure.asc]\nmin_run_s = 1.0\n")
    path = tmp_path / "attached.toml"
    path.write_text(text)
    return path


def measure_with(monkeypatch, capsys, bench: Path, runs: Path, action) -> tuple[int, str]:
    """`rig measure asc` as the CLI runs it; `action` runs once the AFTER_RUNS-th timed run is
    published (the next one is then under way)."""
    import rig.commands.measure
    from rig.run.events import LatencyRun

    real, seen = rig.commands.measure.measure_asc, []

    def subscriber(event) -> None:
        if isinstance(event, LatencyRun):
            seen.append(event)
            if len(seen) == AFTER_RUNS:
                action()

    def with_subscriber(*args, subscribers=(), **kwargs):
        return real(*args, subscribers=[*subscribers, subscriber], **kwargs)

    monkeypatch.setattr(rig.commands.measure, "measure_asc", with_subscriber)
    capsys.readouterr()
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(runs)])
    return code, capsys.readouterr().err


def test_ppk2_unplugged_mid_run_ends_it_at_once_with_the_run_marked(
        tmp_path: Path, monkeypatch, capsys) -> None:
    with VirtualBench(load_description(REPO / "benches" / "sim-ppk2.toml")) as vb:
        bench = attached_bench(tmp_path, vb)
        unplug = lambda: threading.Timer(0.005, vb.emon.unplug).start()  # noqa: E731
        code, err = measure_with(monkeypatch, capsys, bench, tmp_path / "runs", unplug)
        assert vb.world.powered is False  # the PPK2 took the DUT's supply down with it
    assert code == 2 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"rig: error: PPK2: read from {vb.ports['emon']}"), line
    assert "its stream stopped after" in line and "could not switch the DUT off" in line
    record = load_run(only_run(tmp_path / "runs"))
    assert record.status == "failed" and "PPK2: read from" in record.manifest["error"]
    assert [r["kind"] for r in record.rows].count("window") >= AFTER_RUNS  # kept


def test_samples_lost_inside_a_window_fail_that_window_by_name(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """50 samples lost on the USB link 100 samples into the third window: the counter shows
    where, the ids jump there, and the procedure fails that window; the two before are kept.
    (The counter has 6 bits: a loss is seen modulo 64, so 50 rather than the LPM01A tests' 200.)"""
    with VirtualBench(load_description(REPO / "benches" / "sim-ppk2.toml")) as vb:
        bench = attached_bench(tmp_path, vb)
        code, err = measure_with(monkeypatch, capsys, bench, tmp_path / "runs",
                                 lambda: vb.emon.drop_samples(50, after_edge=100))
        assert vb.world.powered is False
    assert code == 1 and "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert f"rig: error: window {AFTER_RUNS} (samples " in line and "lost samples" in line
    record = load_run(only_run(tmp_path / "runs"))
    assert record.status == "failed"
    assert [r["kind"] for r in record.rows].count("window") == AFTER_RUNS
    summary = record.manifest["summary"]
    assert summary["dropped_samples"] == 50
    assert {"name": "no lost samples", "ok": False, "detail": "50 samples dropped"} in summary[
        "checks"]


def test_out_of_sequence_words_inside_a_window_do_not_fail_it(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """Three words with a wrong counter 100 samples into the third window, each sample in its
    place and the count resuming after them: out of sequence, not lost, so every window stands
    and the run completes (Nordic's app keeps such samples too)."""
    with VirtualBench(load_description(REPO / "benches" / "sim-ppk2.toml")) as vb:
        bench = attached_bench(tmp_path, vb)
        code, err = measure_with(monkeypatch, capsys, bench, tmp_path / "runs",
                                 lambda: vb.emon.garble_counters(3, after_edge=100))
        assert vb.world.powered is False
    assert code == 0, err
    record = load_run(only_run(tmp_path / "runs"))
    assert record.status == "complete"
    assert record.manifest["summary"]["dropped_samples"] == 0
