"""TLS to the broker with a CA file, and `rig mqtt watch`."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.e2e.runs import RIG, bench_variant, only_run
from tests.mqtt.broker import USERS, Broker
from tests.mqtt.listener import Listener
from tests.mqtt.test_telemetry_e2e import SMALL, measure, rig_env

pytestmark = pytest.mark.slow


@pytest.fixture
def tls_broker(tmp_path):
    b = Broker(tmp_path / "tls-broker", tls=True).start()
    try:
        yield b
    finally:
        b.stop()


def test_tls_with_the_lab_ca(tls_broker, tmp_path):
    bench = bench_variant(tmp_path, **SMALL)
    with Listener(tls_broker) as listener:
        done = measure(bench, tmp_path / "runs", "--mqtt", tls_broker.url("rig-a"),
                       "--mqtt-ca", str(tls_broker.ca_file))
        assert done.returncode == 0, done.stderr
        listener.wait_for(lambda ms: listener.statuses("rig-a")[-1:] == ["offline"])
    run = only_run(tmp_path / "runs")
    tele = json.loads((run / "manifest.json").read_text())["telemetry"]["mqtt"]
    assert tele["tls"] is True and tele["ca_file"] == str(tls_broker.ca_file)
    assert tele["broker"].startswith("mqtts://") and tele["dropped"] == 0
    assert tele["published"] + tele["pending"] == tele["offered"]


def test_tls_without_the_ca_is_refused_before_measuring(tls_broker, tmp_path):
    bench = bench_variant(tmp_path, **SMALL)
    done = measure(bench, tmp_path / "runs", "--mqtt", tls_broker.url("rig-a"))
    assert done.returncode == 2
    assert "TLS certificate is not trusted" in done.stderr and "--mqtt-ca" in done.stderr
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def watch(broker, *args: str, user: str = "viewer") -> subprocess.CompletedProcess:
    env = rig_env(USERS[user])
    return subprocess.run([*RIG, "mqtt", "watch", "--mqtt", broker.url(user), *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_watch_shows_every_rig_or_one(broker, tmp_path):
    bench = bench_variant(tmp_path, **SMALL)
    done = measure(bench, tmp_path / "runs", "--mqtt", broker.url("rig-a"))
    assert done.returncode == 0, done.stderr
    served = subprocess.Popen([*RIG, "serve", "--mqtt", broker.url("rig-b"), "--benches-dir",
                               str(tmp_path), "--sweeps-dir", str(tmp_path)],
                              env=rig_env(USERS["rig-b"]), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        with Listener(broker) as listener:
            listener.wait_for(lambda ms: "idle" in listener.statuses("rig-b"))
        table = watch(broker, "--for", "1")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.splitlines()
        row_a = next(x for x in lines if "rig-a" in x)
        row_b = next(x for x in lines if "rig-b" in x)
        assert "offline" in row_a and "idle" in row_b  # the retained states
        as_json = watch(broker, "--rig", "rig-b", "--for", "1", "--json")
        got = [json.loads(x) for x in as_json.stdout.splitlines()]
        assert [g["topic"] for g in got] == ["neurobench/rig-b/status"]
        assert got[0]["retained"] and got[0]["message"]["state"] == "idle"
        assert got[0]["message"]["serving"] is True
    finally:
        served.terminate()
        served.communicate(timeout=30)
    assert served.returncode == 0


def test_watch_with_a_wrong_password(broker):
    env = rig_env("wrong")
    done = subprocess.run([*RIG, "mqtt", "watch", "--mqtt", broker.url("viewer"), "--for", "1"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "refused the watcher" in done.stderr
