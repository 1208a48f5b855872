"""The Otii on the virtual bench (benches/sim-otii.toml): ASC energy through `rig measure asc`
gives the closed-form answers; `rig emon record` records a known window; an Otii server that
refuses the login or drops the connection mid-recording ends the run with one clear line, the DUT
powered off and the run folder marked."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from drivers.emon.accuracy import MonitorAccuracy
from drivers.emon.otii import otii_accuracy
from rig.cli import main
from rig.run.store import load_run
from rig.traces.files import read_trace
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description
from virtual_bench.otii import SimOtii
from virtual_bench.world import NS

from .runs import REPO, TRUTH, only_run, short_bench, window_scheduled
from .test_faults_midrun import AFTER_RUNS, error_line, measure, on_latency_run

pytestmark = pytest.mark.slow

FS = 4000


def test_asc_energy_on_the_otii_gives_the_closed_form_answers(tmp_path: Path, capsys) -> None:
    bench = short_bench(tmp_path, "sim-otii", "otii")
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    s = out["summary"]
    # Within the Arc's resolution: 5 nA steps on 0.67-2 mA, and 250 us samples.
    for key, truth in TRUTH.items():
        assert s[key] == pytest.approx(truth, rel=1e-3), key
    assert s["dynamic_power_w"] == pytest.approx(2.40e-3, rel=1e-5)
    assert s["dynamic_energy_per_inference_j"] == pytest.approx(30e-6, rel=1e-5)
    assert s["latency_runs"] == 2 and s["energy_windows"] == 2
    assert all(c["ok"] for c in s["checks"]), s["checks"]
    assert s["dropped_samples"] == 0
    manifest = json.loads((Path(out["run"]) / "manifest.json").read_text())
    emon = manifest["instruments"]["emon"]
    assert emon["driver"] == "otii" and emon["simulated"] is True
    assert emon["device_type"] == "Arc" and emon["sample_rate_hz"] == FS
    assert emon["timestamp_channel"] == "GPI1 (expansion port)"
    assert emon["channels"] == ["mc", "mv", "i1"] and emon["main_voltage_v"] == 1.8
    # The run declares the Arc's published accuracy (low range ±(0.1 % + 50 nA)).
    assert MonitorAccuracy.from_json(emon["accuracy"]) == otii_accuracy("Arc")
    assert MonitorAccuracy.from_json(emon["accuracy"]).current_half_width(
        2e-3, "low") == pytest.approx(0.001 * 2e-3 + 50e-9)


# -- rig emon record ------------------------------------------------------------------------------
K1, K2 = 4800, 8000  # the window, in samples of the recording: [1.2 s, 2 s)


def test_rig_emon_record_on_the_otii(tmp_path: Path, capsys) -> None:
    out = tmp_path / "otii.jls"
    with VirtualBench(load_description(REPO / "benches" / "sim-otii.toml"), speed=4.0) as vb:
        def recording_t0() -> int | None:
            return vb.emon.recordings[-1].t0_ns if vb.emon.recordings else None

        with window_scheduled(vb.world, K1, K2, FS, recording_t0) as errors:
            code = main(["emon", "record", "--driver", "otii", "--resource", vb.ports["emon"],
                         "--duration", "3", "--voltage", "1.8", "--rate", str(FS),
                         "--out", str(out), "--json"])  # simulated: it says so
        assert not errors, errors
        assert vb.world.powered is False
        power_on_ns = vb.world.power_on_ns
        t0 = vb.emon.recordings[-1].t0_ns
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    n = 3 * FS
    assert report["samples"] == n and report["dropped"] == 0
    # Closed form: unpowered until `arc_set_main` (the recording starts first), idle after it,
    # active inside [K1, K2); the power-off fall of the line comes after the last sample.
    idle_s = (t0 + n * NS // FS - power_on_ns) / NS - (K2 - K1) / FS
    expected = (1.2e-3 * idle_s + 3.6e-3 * (K2 - K1) / FS) / (n / FS)
    assert report["mean_power_w"] == pytest.approx(expected, rel=1e-4)
    assert report["edges"] == 2
    trace = read_trace(out)
    assert len(trace) == n and trace.simulated
    assert report["simulated"] is True  # from the Arc's own "Arc (simulated)", no flag given
    assert main(["analyze", str(out), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["simulated"] is True
    [window] = result["windows"]
    assert window["start_s"] == K1 / FS and window["end_s"] == K2 / FS
    assert window["mean_power_w"] == pytest.approx(3.6e-3, rel=1e-5)


# -- faults ---------------------------------------------------------------------------------------
@contextlib.contextmanager
def otii_bench(tmp_path: Path, **sim_options) -> Iterator[tuple[VirtualBench, Path]]:
    """benches/sim-otii.toml served from this process (its Otii made with `sim_options`), and
    a bench file attached to its DUT pty and Otii server."""
    with VirtualBench(load_description(REPO / "benches" / "sim-otii.toml")) as vb:
        if sim_options:
            vb.emon.close()
            vb.emon = SimOtii(vb.world, **sim_options)
            vb.emon.start()
        text = (
            '[bench]\nname = "attached otii"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
            f'[dut]\nport = "{vb.ports["dut"]}"\ntimestamp_mode = "energy"\n\n'
            f'[emon]\ndriver = "otii"\nport = "{vb.emon.address}"\nsample_rate_hz = {FS}\n'
            "supply_voltage_v = 1.8\n\n[procedure.asc]\nmin_run_s = 1.0\n"
        )
        path = tmp_path / "attached-otii.toml"
        path.write_text(text)
        yield vb, path


def test_an_otii_server_that_refuses_the_login(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("OTII_USERNAME", "lab@example.com")
    monkeypatch.setenv("OTII_PASSWORD", "not-the-password")
    with otii_bench(tmp_path, logged_in=False, accounts={"lab@example.com": "pw"}) as (vb, bench):
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs", lambda event: None)
        line = error_line(code, err)
        assert vb.world.powered is False and not vb.emon.main_on
        assert vb.emon.recordings == []
    assert "refused the login of 'lab@example.com': Could not login" in line
    assert "OTII_USERNAME" in line  # the hint: what to check
    run = only_run(tmp_path / "runs")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "refused the login" in manifest["error"]


def test_an_otii_server_that_drops_the_connection_mid_recording(tmp_path: Path, monkeypatch,
                                                                capsys) -> None:
    with otii_bench(tmp_path) as (vb, bench):
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs",
                            on_latency_run(AFTER_RUNS, vb.emon.drop_connections, delay_s=0.005))
        line = error_line(code, err)
        # The rig reconnected to switch the Arc's output off and stop the recording.
        assert vb.world.powered is False and not vb.emon.main_on
        assert all(rec.stop_ns is not None for rec in vb.emon.recordings)
    # Ended by the fault itself (its words), not by the recorder's wait for edges.
    assert "closed the connection mid-recording" in line and vb.emon.address in line
    run = only_run(tmp_path / "runs")
    record = load_run(run)
    assert record.status == "failed" and "closed the connection" in record.manifest["error"]
    kinds = [r["kind"] for r in record.rows]
    assert kinds.count("latency_run") >= AFTER_RUNS and kinds.count("window") >= AFTER_RUNS
