"""`rig serve`: commands over a real broker; only operators may command, and nothing that
fails a check changes the rig's state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.runs import RIG, bench_variant, events, wait_for_event
from tests.mqtt.broker import USERS
from tests.mqtt.listener import Listener
from tests.mqtt.test_telemetry_e2e import SMALL, rig_env

pytestmark = pytest.mark.slow

CMD = "neurobench/rig-a/cmd"
REPLY = "neurobench/rig-a/cmd/reply"
#: A bench slow enough (speed 5, 3 runs of 5 s) to be stopped in the middle.
SLOW = {**SMALL, "speed": ("speed = 50", "speed = 5"), "runs": ("runs = 5", "runs = 3"),
        "min_run": ("min_run_s = 10.0", "min_run_s = 5.0")}


class Served:
    """A `rig serve` process as rig-a, with benches `quick` and `slow` in its folder."""

    def __init__(self, broker, tmp_path: Path) -> None:
        self.benches = tmp_path / "benches"
        self.benches.mkdir()
        bench_variant(self.benches, "quick", **SMALL)
        bench_variant(self.benches, "slow", **SLOW)
        self.sweeps = tmp_path / "sweeps"
        self.sweeps.mkdir()
        (self.sweeps / "tiny.toml").write_text(
            '[sweep]\nsuts = ["cpu-sa"]\nnodes = [10]\ndensities = [0.1]\n'
            'seeds = [0]\ntimeouts = [0.05]\n')
        (tmp_path / "secret.toml").write_text("[bench]\n")
        self.runs = tmp_path / "runs"
        # the password from a file this time (the other tests use RIG_MQTT_PASSWORD)
        password = tmp_path / "rig-a.password"
        password.write_text(USERS["rig-a"] + "\n")
        env = {k: v for k, v in rig_env().items() if k != "RIG_MQTT_PASSWORD"}
        self.proc = subprocess.Popen(
            [*RIG, "serve", "--mqtt", broker.url("rig-a"), "--benches-dir", str(self.benches),
             "--sweeps-dir", str(self.sweeps), "--runs-dir", str(self.runs),
             "--mqtt-password-file", str(password)],
            env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True)

    def stop(self) -> tuple[str, str]:
        """SIGTERM (the clean stop), then SIGKILL if it hangs; its output."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            return self.proc.communicate(timeout=10)

    def run_folders(self) -> list[Path]:
        return sorted(p for p in self.runs.iterdir() if p.is_dir()) if self.runs.is_dir() \
            else []


@pytest.fixture
def served(broker, tmp_path):
    s = Served(broker, tmp_path)
    try:
        yield s
    finally:
        s.stop()


def ask(operator: Listener, request: dict | bytes | str, rid: object = ...,
        timeout: float = 20) -> dict:
    """Send a command as the operator and wait for the reply with request id `rid` (by
    default the request's own)."""
    before = len(operator.received(REPLY))
    operator.send(CMD, request)
    if rid is ...:
        rid = request.get("request_id") if isinstance(request, dict) else None

    def answered(ms):
        return any(m.json().get("request_id") == rid for m in operator.received(REPLY)[before:])
    operator.wait_for(answered, timeout)
    return next(m.json() for m in operator.received(REPLY)[before:]
                if m.json().get("request_id") == rid)


def serving(listener: Listener) -> None:
    listener.wait_for(lambda ms: any(m.json().get("serving") and m.json().get("state") == "idle"
                                     for m in ms if m.topic.endswith("rig-a/status")))


def test_operator_starts_a_run_and_asks_status(broker, served):
    with Listener(broker, "operator") as op:
        serving(op)
        status = ask(op, {"request_id": "s1", "action": "status"})
        assert status["ok"] and status["status"]["state"] == "idle"
        assert status["benches"] == ["quick", "slow"] and status["sweeps"] == ["tiny"]
        reply = ask(op, {"request_id": "go-1", "action": "start", "procedure": "asc",
                         "bench": "quick", "scope": "performance"})
        assert reply == {"request_id": "go-1", "ok": True, "action": "start",
                         "started": {"procedure": "asc", "bench": "quick",
                                     "scope": "performance"}}
        # MQTT orders messages per topic only: the run's run_finished may come after the idle
        # status (CI, 3.13), so both are waited for.
        op.wait_for(lambda ms: op.statuses("rig-a")[-1:] == ["idle"]
                    and "running" in op.statuses("rig-a")
                    and any(m.topic.endswith("/run_finished") for m in ms))
        [run] = served.run_folders()
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["status"] == "complete" and manifest["scope"] == "performance"
        assert manifest["telemetry"]["mqtt"]["password_from"] == "file"
        finished = op.received(f"neurobench/rig-a/run/{manifest['run_id']}/run_finished")
        assert finished and finished[0].json()["status"] == "complete"
        # a sweep from the sweeps folder
        reply = ask(op, {"request_id": "sw", "action": "start", "procedure": "sweep",
                         "sweep": "tiny"})
        assert reply["ok"], reply
        op.wait_for(lambda ms: len(served.run_folders()) == 2
                    and op.statuses("rig-a")[-1:] == ["idle"], timeout=60)
    _out, err = served.stop()
    assert served.proc.returncode == 0, err


def test_stop_mid_run_and_start_while_running(broker, served):
    with Listener(broker, "operator") as op:
        serving(op)
        assert ask(op, {"request_id": "a", "action": "start", "procedure": "asc",
                        "bench": "slow"})["ok"]
        run = wait_for_event(served.runs, "latency_run", 1, served.proc)
        busy = ask(op, {"request_id": "b", "action": "start", "procedure": "asc",
                        "bench": "quick"})
        assert not busy["ok"] and "a run is going" in busy["reason"]
        stop = ask(op, {"request_id": "c", "action": "stop"})
        assert stop["ok"] and stop["stopping"]["bench"] == "slow"
        op.wait_for(lambda ms: op.statuses("rig-a")[-1:] == ["idle"], timeout=60)
        again = ask(op, {"request_id": "d", "action": "stop"})
        assert again == {"request_id": "d", "ok": False, "reason": "nothing is running"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"
    assert [e["event"] for e in events(run)][-1] == "run_finished"
    assert served.run_folders() == [run]  # the refused start made nothing


BAD = [
    (b"{not json", None, "not a JSON object"),
    (b"\xff\xfe", None, "not a JSON object"),
    (json.dumps({"request_id": "big", "action": "status", "pad": "x" * 5000}).encode(), None,
     "message too large"),
    ({"request_id": "r1", "action": "reboot"}, "r1", "schema: action"),
    ({"request_id": "r2", "action": "status", "extra": 1}, "r2", "schema"),
    ({"request_id": "r3", "action": "start", "procedure": "asc"}, "r3", "'bench' is a required"),
    ({"request_id": "r4", "action": "start", "procedure": "asc", "bench": "../secret"}, "r4",
     "schema: bench"),
    ({"request_id": "r5", "action": "start", "procedure": "asc", "bench": "/etc/passwd"}, "r5",
     "schema: bench"),
    ({"request_id": "r6", "action": "start", "procedure": "asc", "bench": "nope"}, "r6",
     "no bench 'nope'"),
    ({"request_id": "r7", "action": "start", "procedure": "asc", "bench": "escape"}, "r7",
     "points outside"),
    ({"request_id": "r8", "action": "stop", "bench": "quick"}, "r8",
     "stop and status take no"),
    ({"request_id": "r9", "action": "start", "procedure": "sweep", "sweep": "tiny",
      "scope": "all"}, "r9", "no bench or scope"),
    ({"request_id": "x" * 65, "action": "status"}, None, "schema: request_id"),
    ([1, 2, 3], None, "schema"),
]


def test_bad_commands_are_refused_with_a_reason_and_change_nothing(broker, served):
    (served.benches / "escape.toml").symlink_to(served.benches.parent / "secret.toml")
    with Listener(broker, "operator") as op:
        serving(op)
        states_before = op.statuses("rig-a")
        for payload, rid, reason in BAD:
            reply = ask(op, payload if isinstance(payload, bytes | dict) else
                        json.dumps(payload), rid=rid)
            assert reply["ok"] is False, (payload, reply)
            assert reason in reply["reason"], (payload, reply)
        assert op.statuses("rig-a") == states_before  # never left idle
    assert served.run_folders() == []


def test_only_operators_command(broker, served):
    with Listener(broker, "viewer") as viewer, Listener(broker, "operator") as op:
        serving(op)
        for who in (viewer,):
            who.send(CMD, {"request_id": "v1", "action": "start", "procedure": "asc",
                           "bench": "quick"})
            who.send(CMD, {"request_id": "v2", "action": "status"})
        # the rig-b account cannot command rig-a either (and cannot write under rig-a)
        with Listener(broker, "rig-b", filters=("neurobench/rig-b/cmd",)) as other:
            other.send(CMD, {"request_id": "b1", "action": "status"})
            other.send("neurobench/rig-a/status", {"state": "running"})
        # the operator's own command comes after theirs and is answered; theirs never were
        assert ask(op, {"request_id": "o1", "action": "status"})["ok"]
        ids = [m.json().get("request_id") for m in op.received(REPLY)]
        assert ids == ["o1"]
        assert set(op.statuses("rig-a")) == {"idle"}
    assert served.run_folders() == []
