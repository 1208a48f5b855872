"""The pieces of MQTT telemetry that need no broker: settings, the bench's [mqtt] table, the
power summaries, the queue's accounting, the command parser and the watch board."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

from rig.bench.broker import PASSWORD_ENV, check_rig_name, parse_url, resolve
from rig.bench.config import load_bench
from rig.errors import ConfigError
from rig.mqtt import topics
from rig.mqtt.board import Board
from rig.mqtt.commands import MAX_COMMAND_BYTES, Refused, file_in, parse_command
from rig.mqtt.telemetry import MqttTelemetry, PowerSummarizer
from rig.run.events import EventBus, Note, RunFinished, RunStarted, TelemetryReport
from rig.run.live_power import PowerPreview
from tests.e2e.runs import REPO
from tests.mqtt.broker import free_port


# -- settings ----------------------------------------------------------------------------------
@pytest.mark.parametrize("url, scheme, host, port, user", [
    ("mqtt://rig-a@broker.lab:1884", "mqtt", "broker.lab", 1884, "rig-a"),
    ("mqtt://broker.lab", "mqtt", "broker.lab", 1883, None),
    ("mqtts://rig-a@10.0.0.1", "mqtts", "10.0.0.1", 8883, "rig-a"),
])
def test_broker_urls(url, scheme, host, port, user):
    b = parse_url(url)
    assert (b.scheme, b.host, b.port, b.username) == (scheme, host, port, user)


@pytest.mark.parametrize("url, says", [
    ("mqtt://rig-a:hunter2@broker:1883", "carries a password"),
    ("http://broker:1883", "unknown scheme 'http'"),
    ("broker:1883", "unknown scheme"),
    ("mqtt://broker:99999", "not a broker URL"),
    ("mqtt://broker:1883/topic", "unexpected path"),
    ("mqtt://", "no host"),
])
def test_bad_broker_urls(url, says):
    with pytest.raises(ConfigError) as err:
        parse_url(url)
    assert says in err.value.message
    assert "hunter2" not in str(err.value)


@pytest.mark.parametrize("name", ["rig/a", "rig+", "#", "", "-x", "a" * 65])
def test_rig_names_that_cannot_be_a_topic_level(name):
    with pytest.raises(ConfigError):
        check_rig_name(name)


def test_password_from_env_or_file_never_in_public(tmp_path):
    s = resolve(url="mqtt://rig-a@h:1", env={PASSWORD_ENV: "from-env"})
    assert s.password == "from-env" and s.password_source == "env" and s.rig == "rig-a"
    pw = tmp_path / "pw"
    pw.write_text("from-file\nignored\n")
    s = resolve(url="mqtt://rig-a@h:1", password_file=pw, env={PASSWORD_ENV: "from-env"})
    assert s.password == "from-file" and s.password_source == "file"
    assert "from-file" not in repr(s) and "from-file" not in json.dumps(s.public())
    with pytest.raises(ConfigError, match="cannot read"):
        resolve(url="mqtt://h", password_file=tmp_path / "missing")
    (tmp_path / "empty").write_text("")
    with pytest.raises(ConfigError, match="is empty"):
        resolve(url="mqtt://h", password_file=tmp_path / "empty")
    with pytest.raises(ConfigError, match=r"power_rate_hz must be in \(0, 10\]"):
        resolve(url="mqtt://h", power_rate_hz=20)
    with pytest.raises(ConfigError, match="CA file does not exist"):
        resolve(url="mqtts://h", ca_file=tmp_path / "nope.pem")


def bench_with(tmp_path: Path, table: str) -> Path:
    path = tmp_path / "bench.toml"
    path.write_text((REPO / "benches" / "sim.toml").read_text() + "\n[mqtt]\n" + table)
    return path


def test_bench_mqtt_table(tmp_path):
    bench = load_bench(bench_with(tmp_path, 'url = "mqtt://rig-7@b:1"\npower_rate_hz = 5\n'))
    assert bench.mqtt.url == "mqtt://rig-7@b:1" and bench.mqtt.power_rate_hz == 5.0
    s = resolve(bench.mqtt, env={})
    assert s.rig == "rig-7" and s.power_rate_hz == 5.0 and s.password is None
    # the command line wins over the file
    s = resolve(bench.mqtt, url="mqtt://other@c:2", rig="bench-3", env={})
    assert (s.broker.host, s.rig) == ("c", "bench-3")
    assert bench.snapshot()["mqtt"]["url"] == "mqtt://rig-7@b:1"
    # a CA file named in the bench is found beside the bench file, wherever the rig runs
    (tmp_path / "lab-ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    with_ca = load_bench(bench_with(tmp_path,
                                    'url = "mqtts://rig-7@b:1"\nca_file = "lab-ca.pem"\n'))
    assert with_ca.mqtt.ca_file == str(tmp_path / "lab-ca.pem")
    assert resolve(with_ca.mqtt, env={}).ca_file == tmp_path / "lab-ca.pem"


@pytest.mark.parametrize("table, says", [
    ('url = "mqtt://b"\npassword = "hunter2"\n', "never holds the broker password"),
    ('rig = "a"\n', "[mqtt] url is missing"),
    ('url = "mqtt://a:pw@b"\n', "carries a password"),
    ('url = "mqtt://b"\npower_rate_hz = 11\n', "power_rate_hz must be in"),
    ('url = "mqtt://b"\nqueue = 0\n', "queue: expected an integer in [1, "),
    ('url = "mqtt://b"\nrig = "a/b"\n', "cannot name a rig"),
    ('url = "mqtt://b"\ncolour = 1\n', "unknown key 'colour'"),
])
def test_bad_bench_mqtt_tables(tmp_path, table, says):
    with pytest.raises(ConfigError) as err:
        load_bench(bench_with(tmp_path, table))
    assert says in err.value.message
    assert "hunter2" not in str(err.value) and "pw@" not in err.value.message.split(":", 1)[1]


# -- power summaries ---------------------------------------------------------------------------
def preview(first: int, bins: int, step: int, fs: float, mean, low=None, high=None):
    mean = list(mean) if hasattr(mean, "__iter__") else [mean] * bins
    return PowerPreview(first_sample=first, step=step, sample_rate_hz=fs, mean_w=mean,
                        min_w=list(low if low is not None else mean),
                        max_w=list(high if high is not None else mean))


def test_power_summaries_tile_the_stream_at_the_wall_clock_rate():
    now = [0.0]
    s = PowerSummarizer(rate_hz=2.0, clock=lambda: now[0])  # one summary per 0.5 s of wall
    out = []
    # 1 kS/s, 5-sample bins, a preview of 20 bins (0.1 s of stream) every 0.1 s of wall
    for k in range(12):
        level = 1e-3 if k < 6 else 3e-3
        now[0] = 0.1 * k
        out += s.add(preview(100 * k, 20, 5, 1000.0, level, [level / 2] * 20,
                             [level * 2] * 20))
    out += s.flush()
    assert [o["t_s"] for o in out] == pytest.approx([0.0, 0.6, 1.1])
    assert [o["samples"] for o in out] == [600, 500, 100]
    assert sum(o["samples"] for o in out) == 1200  # every sample in exactly one summary
    assert out[0]["mean_w"] == pytest.approx(1e-3) and out[1]["mean_w"] == pytest.approx(3e-3)
    assert out[0]["min_w"] == pytest.approx(0.5e-3) and out[1]["max_w"] == pytest.approx(6e-3)


def test_power_summary_mean_is_sample_weighted():
    now = [0.0]
    s = PowerSummarizer(rate_hz=10.0, clock=lambda: now[0])
    s.add(preview(0, 3, 10, 1e4, [1.0, 2.0, 3.0]))
    now[0] = 1.0
    [summary] = s.add(preview(30, 1, 10, 1e4, [6.0]))
    assert summary["mean_w"] == pytest.approx(3.0)  # (1+2+3+6)/4, equal bins
    assert summary["interval_s"] == pytest.approx(40 / 1e4)


def test_a_flat_summarys_mean_stays_inside_its_min_and_max():
    # three bins of 0.1 W: their float sum over three is 0.10000000000000002, above the max
    assert (0.1 + 0.1 + 0.1) / 3 > 0.1
    now = [0.0]
    s = PowerSummarizer(rate_hz=10.0, clock=lambda: now[0])
    assert s.add(preview(0, 3, 1, 1e3, 0.1)) == []
    [summary] = s.flush()
    assert summary["min_w"] <= summary["mean_w"] <= summary["max_w"]
    assert summary["mean_w"] == 0.1 and summary["samples"] == 3


# -- the queue's accounting with no broker -------------------------------------------------------
def test_unreachable_broker_costs_only_counted_telemetry():
    port = free_port()  # nothing listens there
    lines: list[str] = []
    settings = replace(resolve(url=f"mqtt://rig-a@127.0.0.1:{port}", env={}), queue=3)
    t = MqttTelemetry(settings, log=lines.append).start(wait_s=2.0)
    try:
        assert not t.connected
        bus = EventBus()
        recorded = []
        bus.subscribe(recorded.append)
        bus.subscribe(t)
        bus.publish(RunStarted(run_id="r", procedure="asc"))
        for i in range(5):
            bus.publish(Note(text=str(i)))
        bus.publish(RunFinished(status="complete"))
    finally:
        t.close(timeout=0.5)
    report = next(e for e in recorded if isinstance(e, TelemetryReport))
    # 6 events offered before the report: 3 queued (pending), 3 dropped on a full queue
    assert (report.offered, report.published, report.dropped, report.pending) == (6, 0, 3, 3)
    assert recorded[-1].kind == "run_finished" and recorded[-2] is report
    assert any("cannot reach the broker" in x for x in lines)
    assert sum("queue full" in x for x in lines) == 1  # logged once
    assert any("did not reach the broker" in x for x in lines)  # the total, at close


# -- commands ----------------------------------------------------------------------------------
def test_a_good_command():
    c = parse_command(b'{"request_id": "7", "action": "start", "procedure": "asc", '
                      b'"bench": "sim", "scope": "energy"}')
    assert (c.request_id, c.action, c.procedure, c.bench, c.scope) == (
        "7", "start", "asc", "sim", "energy")


def test_oversized_is_refused_unread():
    with pytest.raises(Refused, match="too large"):
        parse_command(b"{" + b" " * MAX_COMMAND_BYTES + b"}")


def test_files_only_inside_the_folder(tmp_path):
    (tmp_path / "benches").mkdir()
    (tmp_path / "benches" / "a.toml").write_text("")
    (tmp_path / "outside.toml").write_text("")
    (tmp_path / "benches" / "link.toml").symlink_to(tmp_path / "outside.toml")
    assert file_in(tmp_path / "benches", "a", "bench") == (tmp_path / "benches" / "a.toml")
    with pytest.raises(Refused, match="points outside"):
        file_in(tmp_path / "benches", "link", "bench")
    with pytest.raises(Refused, match=r"no bench 'b' .*known: a, link"):
        file_in(tmp_path / "benches", "b", "bench")


# -- the watch board ---------------------------------------------------------------------------
def test_board_folds_status_and_run_messages():
    b = Board()
    b.take(topics.status("rig-a"), json.dumps({"state": "running", "procedure": "asc",
                                               "phase": "runs", "run_id": "abc",
                                               "progress": {"done": 2, "total": 5}}).encode())
    b.take(topics.power("rig-a", "abc"), b'{"mean_w": 0.0024}')
    b.take(topics.run_event("rig-a", "abc", "latency_run"), b'{"event": "latency_run"}')
    b.take(topics.status("rig-b"), b'{"state": "offline"}')
    assert b.take("other/topic", b"{}") is None
    assert b.take(topics.status("rig-c"), b"not json") is None
    [a, bee] = b.lines()
    assert (a["rig"], a["state"], a["progress"], a["power"], a["last"]) == (
        "rig-a", "running", "2/5 (40%)", "2.400 mW", "latency_run")
    assert bee["state"] == "offline"
    only = Board("rig-b")
    assert only.subscriptions() == ["neurobench/rig-b/status", "neurobench/rig-b/run/+/+"]
    assert only.take(topics.status("rig-a"), b'{"state": "idle"}') is None


# -- simulated, wherever the numbers are --------------------------------------------------------
def test_status_and_power_summaries_say_simulated_once_an_instrument_does():
    """A XyloSim run starts unlabelled (the DUT has not answered yet); once the DUT's info says
    simulated (its caps `simtime`), the retained status and every power summary say so."""
    from rig.run.events import InstrumentInfo

    settings = resolve(url=f"mqtt://rig-a@127.0.0.1:{free_port()}", env={})
    t = MqttTelemetry(settings, log=lambda _: None)  # not started: nothing is sent
    t(RunStarted(run_id="r", procedure="asc", simulated=False))
    assert t.status["simulated"] is False
    preview = PowerPreview(first_sample=0, step=10, sample_rate_hz=1000.0,
                           min_w=[1e-3], max_w=[2e-3], mean_w=[1.5e-3])
    t.power(preview)
    t._flush_power()
    assert t._power_slot.body["simulated"] is False
    t(InstrumentInfo(role="dut", info={"name": "xylo", "capabilities": ["simtime"],
                                       "simulated": True}))
    assert t.status["simulated"] is True
    t.power(PowerPreview(first_sample=10, step=10, sample_rate_hz=1000.0,
                         min_w=[1e-3], max_w=[2e-3], mean_w=[1.5e-3]))
    t._flush_power()
    body = t._power_slot.body
    assert body["simulated"] is True and body["mean_w"] == 1.5e-3 and body["run_id"] == "r"
    t(RunFinished(status="complete"))
    assert t.status["simulated"] is None and t.status["state"] == "idle"


def test_power_summaries_are_stamped_by_the_clock_that_paces_them():
    """Each summary's `at` (wall time) is read off the pacing clock: two rated summaries lie
    exactly a period apart or more, however long the thread took between the two."""
    import time

    now = [100.0]
    s = PowerSummarizer(rate_hz=8.0, clock=lambda: now[0])  # 0.125 s: exact in binary
    wall0 = time.time()
    out = []
    for k in range(5):
        now[0] = 100.0 + 0.125 * k  # the pacing clock steps a period each preview
        out += s.add(preview(100 * k, 20, 5, 1000.0, 1e-3))
    assert len(out) == 4
    gaps = [b["at"] - a["at"] for a, b in itertools.pairwise(out)]
    assert gaps == pytest.approx([0.125] * 3, abs=1e-9)
    assert abs(out[0]["at"] - (wall0 + 0.125)) < 1.0  # wall time, not the pacing clock's own
