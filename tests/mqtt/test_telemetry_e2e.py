"""`rig measure asc --mqtt` on the virtual bench, through a real mosquitto broker."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import signal
import subprocess

import pytest

from tests.e2e.runs import RIG, TRUTH, bench_variant, events, only_run
from tests.mqtt.broker import USERS
from tests.mqtt.listener import Listener

pytestmark = pytest.mark.slow

SMALL = {  # a short ASC run: 2 timed runs of 2 s, 2 samples per class
    "runs": ("runs = 5", "runs = 2"),
    "min_run": ("min_run_s = 10.0", "min_run_s = 2.0"),
    "samples": ("samples_per_class = 10", "samples_per_class = 2"),
}


def rig_env(password: str = USERS["rig-a"]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    env["RIG_MQTT_PASSWORD"] = password
    return env


def measure(bench, runs_dir, *extra: str, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                           str(runs_dir), "--json", *extra],
                          capture_output=True, text=True, timeout=timeout,
                          env=env or rig_env())


def test_run_publishes_exactly_its_events_in_order(broker, tmp_path):
    bench = bench_variant(tmp_path, **SMALL)
    with Listener(broker) as listener:
        done = measure(bench, tmp_path / "runs", "--mqtt", broker.url("rig-a"),
                       "--mqtt-power-rate", "10")
        assert done.returncode == 0, done.stderr
        listener.wait_for(lambda ms: any(m.topic.endswith("/run_finished") for m in ms)
                          and listener.statuses("rig-a")[-1:] == ["offline"])
    run = only_run(tmp_path / "runs")
    on_disk = events(run)
    run_id = on_disk[0]["run_id"]
    prefix = f"neurobench/rig-a/run/{run_id}/"
    published = [m for m in listener.received(prefix) if not m.topic.endswith("/power")]
    # the same records, in the same order, each on the topic of its kind
    assert [m.json() for m in published] == on_disk
    assert [m.topic for m in published] == [prefix + e["event"] for e in on_disk]
    # RunFinished's summary carries each figure's GUM budget: U, k and whether it is complete
    # (else U is a lower bound), as `rig show --json` has it
    finished = published[-1].json()["summary"]
    for key in ("idle_power_w", "active_power_w", "energy_per_inference_j"):
        budget = finished["uncertainty"][key]
        assert budget["U"] > 0 and budget["k"] >= 2 and budget["value"] == finished[key]
        assert budget["complete"] is False and budget["lower_bound"] is True  # LPM01A: no
        # supply-voltage accuracy published
    # status: idle -> running ... -> idle, then offline when the process ended
    states = listener.statuses("rig-a")
    assert states[0] == "idle" and "running" in states and states[-1] == "offline"
    assert states[states.index("running"):].count("idle") >= 1
    assert states[-2] == "idle"
    # the manifest says what telemetry delivered, and never the password
    manifest = json.loads((run / "manifest.json").read_text())
    tele = manifest["telemetry"]["mqtt"]
    # (pending: still on their way when the report was made, at the end of the run; they
    # arrived, as the comparison above shows)
    assert tele["dropped"] == 0
    assert tele["published"] + tele["pending"] == tele["offered"] > len(on_disk) - 2
    assert tele["broker"] == f"mqtt://rig-a@127.0.0.1:{broker.port}"
    assert tele["password_from"] == "env"
    for path in run.rglob("*"):
        if path.is_file():
            assert USERS["rig-a"].encode() not in path.read_bytes(), path
    assert USERS["rig-a"] not in done.stdout + done.stderr
    # the ledger head, retained on neurobench/rig-a/ledger: the last entry of the runs folder's
    # ledger (the run's `ended` entry), so that the broker holds it too
    lines = (tmp_path / "runs" / "ledger.jsonl").read_bytes().splitlines()
    (head,) = [m.json() for m in listener.received("neurobench/rig-a/ledger")]
    assert head["seq"] == len(lines) - 1 == 1 and head["run"] == run.name
    assert head["digest"] == hashlib.sha256(lines[-1]).hexdigest()
    with Listener(broker) as late:  # a party that subscribes afterwards still gets it
        (kept,) = [m for m in late.wait_for(lambda ms: any(
            m.topic == "neurobench/rig-a/ledger" for m in ms)) if m.topic.endswith("/ledger")]
    assert kept.retain and kept.json() == head
    # power summaries: at most 10 a second, tiling the stream without gaps, within the
    # simulated idle..active levels
    power = [m.json() for m in listener.received(prefix) if m.topic.endswith("/power")]
    assert len(power) >= 3, "no power summaries"
    assert all(b["at"] - a["at"] >= 0.1 - 1e-3 for a, b in itertools.pairwise(power))
    for a, b in itertools.pairwise(power):
        assert b["t_s"] == pytest.approx(a["t_s"] + a["interval_s"], abs=1e-9)
        assert a["samples"] == round(a["interval_s"] * 1000)  # 1 kS/s LPM01A
    assert all(p["min_w"] <= p["mean_w"] <= p["max_w"] for p in power)
    lo, hi = TRUTH["idle_power_w"], TRUTH["active_power_w"]
    assert all(p["min_w"] >= 0 and p["max_w"] <= hi * 1.01 for p in power)
    # the DUT idled and computed (0 W only while it was powered off)
    assert any(p["min_w"] == pytest.approx(lo, rel=0.01) for p in power)
    assert any(p["max_w"] == pytest.approx(hi, rel=0.01) for p in power)
    # simulated, wherever the numbers are: every power summary and every measurement event
    assert all(p["simulated"] is True for p in power)
    measured = [m.json() for m in published if m.json()["event"] in (
        "latency_run", "window_measured", "idle_measured", "sample_classified")]
    assert measured and all(e["simulated"] is True for e in measured)
    assert [m.json() for m in published][-1]["summary"]["simulated"] is True
    # a summary never carries samples
    assert max(len(m.payload) for m in listener.received(prefix)
               if m.topic.endswith("/power")) < 400


def test_wrong_password_is_refused_before_anything_is_measured(broker, tmp_path):
    bench = bench_variant(tmp_path, **SMALL)
    done = measure(bench, tmp_path / "runs", "--mqtt", broker.url("rig-a"),
                   env=rig_env("not-the-password"))
    assert done.returncode == 2
    assert "refused the login of rig-a" in done.stderr
    assert "RIG_MQTT_PASSWORD" in done.stderr and "not-the-password" not in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_killed_rig_leaves_offline_will(broker, tmp_path):
    proc = subprocess.Popen(
        [*RIG, "serve", "--mqtt", broker.url("rig-a"), "--benches-dir", str(tmp_path),
         "--sweeps-dir", str(tmp_path), "--runs-dir", str(tmp_path / "runs")],
        env=rig_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        with Listener(broker) as listener:
            listener.wait_for(lambda ms: "idle" in listener.statuses("rig-a"))
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
            # the broker notices the dead connection (socket closed) and sends the will
            msgs = listener.wait_for(lambda ms: listener.statuses("rig-a")[-1:] == ["offline"])
        offline = [m for m in msgs if m.topic == "neurobench/rig-a/status"][-1].json()
        assert offline["state"] == "offline" and offline["rig"] == "rig-a"
        # retained: a client that connects later still sees it
        with Listener(broker) as late:
            late.wait_for(lambda ms: late.statuses("rig-a") == ["offline"])
            assert late.received("neurobench/rig-a/status")[0].retain
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_sweep_and_its_resume_publish_under_one_run_id(broker, tmp_path):
    sweep = tmp_path / "sweep.toml"
    sweep.write_text('[sweep]\nsuts = ["cpu-sa"]\nnodes = [10, 25]\ndensities = [0.1]\n'
                     'seeds = [0, 1]\ntimeouts = [0.1]\n')
    runs = tmp_path / "runs"
    with Listener(broker) as listener:
        first = subprocess.run([*RIG, "sweep", "qubo", str(sweep), "--stand-in", "--runs-dir",
                                str(runs), "--json", "--mqtt", broker.url("rig-a")],
                               capture_output=True, text=True, timeout=120, env=rig_env())
        assert first.returncode == 0, first.stderr
        run = only_run(runs)
        again = subprocess.run([*RIG, "sweep", "resume", str(run), "--json",
                                "--mqtt", broker.url("rig-a")],
                               capture_output=True, text=True, timeout=120, env=rig_env())
        assert again.returncode == 0, again.stderr
        listener.wait_for(lambda ms: sum(m.topic.endswith("/run_finished") for m in ms) == 2
                          and listener.statuses("rig-a")[-1:] == ["offline"])
    on_disk = events(run)
    prefix = f"neurobench/rig-a/run/{on_disk[0]['run_id']}/"
    assert [m.json() for m in listener.received(prefix)] == on_disk
    assert [e["event"] for e in on_disk].count("sweep_point") == 4
    # the status counted the points: 4 of 4 before the sweep ended
    progress = [m.json().get("progress") for m in listener.received("neurobench/rig-a/status")]
    assert {"done": 4, "total": 4} in progress
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["telemetry"]["mqtt"]["dropped"] == 0


def test_runner_window_job_reports_a_bench_with_mqtt(broker, tmp_path, monkeypatch):
    """The runner window's ASC job (gui.run_session.AscJob) honours the bench's [mqtt] table,
    as `rig measure asc` does."""
    pytest.importorskip("PySide6")
    from gui.run_session import AscJob
    from rig.bench.config import load_bench
    from rig.run.stopping import StopRequest

    monkeypatch.setenv("RIG_MQTT_PASSWORD", USERS["rig-a"])
    path = bench_variant(tmp_path, **SMALL)
    path.write_text(path.read_text() + f'\n[mqtt]\nurl = "{broker.url("rig-a")}"\n')
    seen = []
    with Listener(broker) as listener:
        outcome = AscJob(load_bench(path), "bench", tmp_path / "runs").run(
            [seen.append], StopRequest(), [])
        listener.wait_for(lambda ms: listener.statuses("rig-a")[-1:] == ["offline"])
    assert outcome.status == "complete"
    run_id = seen[0].run_id
    got = [m.json()["event"] for m in listener.received(f"neurobench/rig-a/run/{run_id}/")
           if not m.topic.endswith("/power")]
    # the window's subscribers saw what the broker got (the ledger's head, transient, goes to
    # neurobench/rig-a/ledger instead)
    assert got == [e.kind for e in seen if not e.transient]
    assert seen[-1].kind == "ledger_appended"
    assert json.loads((outcome.run_path / "manifest.json").read_text())[
        "telemetry"]["mqtt"]["dropped"] == 0
