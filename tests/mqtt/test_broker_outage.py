"""A broker that goes away mid-run costs telemetry, never a sample or a run."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.runs import RIG, TRUTH, bench_variant, events, only_run, wait_for_event
from tests.mqtt.listener import Listener
from tests.mqtt.test_telemetry_e2e import rig_env

pytestmark = pytest.mark.slow

#: Slow enough (speed 5) that the broker can be stopped and restarted inside the timed runs
#: (down for one 1.1 s run) and the rig still has two runs and the accuracy pass (~3 s) left to
#: reconnect in (back-off: the attempt 1.75 s after the loss finds the broker back).
OUTAGE = {
    "runs": ("runs = 5", "runs = 4"),
    "min_run": ("min_run_s = 10.0", "min_run_s = 5.0"),
    "samples": ("samples_per_class = 10", "samples_per_class = 3"),
    "speed": ("speed = 50", "speed = 5"),
}
#: The telemetry queue holds 4 run events: the outage overflows it, so drops are certain.
MQTT_TABLE = '\n[mqtt]\nurl = "{url}"\nqueue = 4\npower_rate_hz = 5\n'

EXACT = ("latency_runs", "samples", "correct", "accuracy", "energy_windows",
         "execution_time_samples", "dropped_samples", "latency_timer", "execution_time_timer")
WITHIN_0_1_PERCENT = ("inferences_per_s", "execution_time_mean_s", "idle_power_w",
                      "active_power_w", "dynamic_power_w", "energy_per_inference_j",
                      "dynamic_energy_per_inference_j")


def test_broker_restart_mid_run_costs_only_telemetry(broker, tmp_path):
    plain_bench = bench_variant(tmp_path, "plain", **OUTAGE)
    bench = tmp_path / "with-mqtt.toml"
    bench.write_text(plain_bench.read_text() + MQTT_TABLE.format(url=broker.url("rig-a")))

    # the same bench without MQTT: the numbers to match
    plain = subprocess.run([*RIG, "measure", "asc", "--bench", str(plain_bench), "--runs-dir",
                            str(tmp_path / "plain"), "--json"], capture_output=True, text=True,
                           timeout=180, env=rig_env())
    assert plain.returncode == 0, plain.stderr
    expected = json.loads(plain.stdout)["summary"]

    runs = tmp_path / "runs"
    with Listener(broker) as listener:
        proc = subprocess.Popen([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                                 str(runs), "--json"], env=rig_env(), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            wait_for_event(runs, "latency_run", 1, proc)
            broker.stop()                      # gone in the middle of the timed runs ...
            wait_for_event(runs, "latency_run", 2, proc)
            broker.start()                     # ... back on the same port a run later
            out, err = proc.communicate(timeout=180)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        assert proc.returncode == 0, err
        listener.wait_for(lambda ms: listener.statuses("rig-a")[-1:] == ["offline"])

    run = only_run(runs)
    on_disk = events(run)
    # every sample and every number, as without MQTT (the virtual bench's windows move by a
    # sample between runs: floats within 0.1%, as for every virtual-bench comparison)
    summary = json.loads(out)["summary"]
    assert summary["dropped_samples"] == 0
    for key in EXACT:
        assert summary[key] == expected[key], key
    for key in WITHIN_0_1_PERCENT:
        assert summary[key] == pytest.approx(expected[key], rel=1e-3), key
    for key in ("idle_power_w", "dynamic_power_w", "dynamic_energy_per_inference_j"):
        assert summary[key] == pytest.approx(TRUTH[key], rel=1e-3)

    # the manifest counts what telemetry lost; the rest arrived, in the run's order
    tele = json.loads((run / "manifest.json").read_text())["telemetry"]["mqtt"]
    assert tele["dropped"] > 0
    assert tele["offered"] == tele["published"] + tele["dropped"] + tele["pending"]
    run_id = on_disk[0]["run_id"]
    got = [m.json() for m in listener.received(f"neurobench/rig-a/run/{run_id}/")
           if not m.topic.endswith("/power")]
    assert got, "nothing arrived"
    positions = [on_disk.index(g) for g in got]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    assert len(got) < len(on_disk)  # some were dropped ...
    assert got[-1]["event"] == "run_finished"  # ... and the rig reconnected before the end
    assert "lost the broker" in err and "reconnected" in err
    assert "Broken pipe" not in err and "Traceback" not in err
