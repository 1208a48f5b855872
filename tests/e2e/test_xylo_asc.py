"""`rig measure asc --device xylo` end to end: the Xylo shim (XyloSim) as the DUT, the AFE's
pre-processing and Xylo's inference timed and stored apart, power unavailable (simulator)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.requires import needs

from .runs import REPO, RIG

pytestmark = [pytest.mark.slow, needs("rockpool", "xylosim")]

MODEL = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"


@pytest.mark.skipif(not MODEL.is_file(), reason="no shipped Xylo model yet")
def test_xylo_asc_times_preprocessing_and_inference_apart(tmp_path: Path) -> None:
    import subprocess

    text = (REPO / "benches" / "xylo.toml").read_text()
    text = text.replace('spec = "../firmware/xylo/models/asc_synthetic.npz"',
                        f'spec = "{MODEL}"').replace("samples_per_class = 10",
                                                     "samples_per_class = 1")
    bench = tmp_path / "xylo.toml"
    bench.write_text(text)
    env = dict(os.environ)  # RIG_CACHE: the session's (conftest)
    proc = subprocess.run([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                           str(tmp_path / "runs"), "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    s = out["summary"]
    assert s["samples"] == 4 and s["latency_timer"] == "dut"
    # XyloSim is a simulator, as its caps say (`simtime`): labelled wherever the numbers are.
    run = Path(out["run"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["simulated"] is True and s["simulated"] is True
    assert manifest["instruments"]["dut"]["simulated"] is True
    shown = json.loads(subprocess.run([*RIG, "show", str(run), "--json"], cwd=REPO,
                                      capture_output=True, text=True, check=True).stdout)
    assert shown["simulated"] is True and shown["summary"]["simulated"] is True
    records = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    measured = [r for r in records if r["event"] in ("latency_run", "sample_classified")]
    assert len(measured) == 4 + 5 and all(r["simulated"] is True for r in measured)
    assert all(pq.read_table(run / "results.parquet").column("simulated").to_pylist())
    assert s["power"].startswith("unavailable (simulator)") and "idle_power_w" not in s
    # XyloSim's times are the input's real-time length: labelled, never taken as measured.
    assert s["timing"] == "simulated: XyloSim timesteps x dt, not a measured execution time"
    assert s["execution_time_source"] == "test_set" and s["execution_time_samples"] == 4
    # The analog front end runs in real time: one second of audio takes one second.
    assert s["preprocess_time_mean_s"] == pytest.approx(1.0, abs=1e-9)
    assert "played over speakers into the device microphone" in s["preprocess_note"]
    # Inference time is Xylo's own time base: timesteps x dt of the shipped network.
    with np.load(MODEL, allow_pickle=False) as z:
        dt = json.loads(bytes(z["header"]).decode())["dt"]
    rows = pq.read_table(Path(out["run"]) / "results.parquet").to_pylist()
    samples = [r for r in rows if r["kind"] == "sample"]
    assert len(samples) == 4
    for r in samples:
        assert r["preprocess_s"] == pytest.approx(1.0) and r["preprocess_host_s"] > 0
        steps = r["execution_time_s"] / dt
        assert steps == pytest.approx(round(steps), abs=1e-6) and steps > 0


IDLE_UW = {"io": 100, "snn_core": 200, "afe_core": 300, "afe_ldo": 400}      # 1.000 mW
ACTIVE_UW = {"io": 150, "snn_core": 600, "afe_core": 300, "afe_ldo": 400}    # 1.450 mW


@pytest.mark.skipif(not MODEL.is_file(), reason="no shipped Xylo model yet")
def test_hdk_power_rails_give_idle_active_dynamic(tmp_path: Path) -> None:
    """The HDK path with stand-in rails at the hardware edge (known power levels)."""
    import subprocess

    text = (REPO / "benches" / "xylo.toml").read_text()
    text = (text.replace('spec = "../firmware/xylo/models/asc_synthetic.npz"', f'spec = "{MODEL}"')
            .replace("samples_per_class = 10", "samples_per_class = 1")
            .replace("hdk = false", "hdk = true")
            .replace('voltage_limit_v = 3.3', 'voltage_limit_v = 3.3\nsimulated = true'))
    bench = tmp_path / "xylo-hdk.toml"
    bench.write_text(text)
    env = dict(os.environ,
               RIG_XYLO_STAND_IN_RAILS=json.dumps({"idle_uw": IDLE_UW, "active_uw": ACTIVE_UW}))
    proc = subprocess.run([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                           str(tmp_path / "runs"), "--json"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)["summary"]
    t = s["execution_time_mean_s"]
    assert t == pytest.approx(1.0, abs=1e-9)  # 100 steps of 10 ms: one second of audio
    # Stand-in rails on XyloSim: the shim says `simtime`, so the timing is simulated, HDK or not.
    assert s["timing"].startswith("simulated: XyloSim timesteps x dt")
    assert s["idle_power_w"] == pytest.approx(1.000e-3, rel=1e-9)
    assert s["active_power_w"] == pytest.approx(1.450e-3, rel=1e-9)
    assert s["dynamic_power_w"] == pytest.approx(0.450e-3, rel=1e-9)
    assert s["energy_per_inference_j"] == pytest.approx(1.450e-3 * t, rel=1e-9)
    assert s["dynamic_energy_per_inference_j"] == pytest.approx(0.450e-3 * t, rel=1e-9)
    assert s["energy_windows"] == 5 and "power" not in s
