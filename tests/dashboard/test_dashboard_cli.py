"""`rig dashboard`'s refusals: no login where one is needed, a login the broker refuses, a bad
token file. Exit 2 with a hint, before anything is served."""

from __future__ import annotations

import socket
import subprocess

import pytest

from rig.commands.dashboard import is_loopback
from tests.dashboard.conftest import env_with
from tests.e2e.runs import RIG
from tests.mqtt.broker import USERS, free_port

pytest.importorskip("starlette")


def dashboard(*args: str, password: str = USERS["viewer"]) -> subprocess.CompletedProcess:
    return subprocess.run([*RIG, "dashboard", *args], capture_output=True, text=True,
                          timeout=60, env=env_with(RIG_MQTT_PASSWORD=password))


def nobody_listens(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.7", "::", "rigs.lab.example"])
def test_serving_beyond_this_machine_needs_a_login(host):
    port = free_port()
    done = dashboard("--mqtt", "mqtt://viewer@127.0.0.1:1", "--host", host, "--port", str(port))
    assert done.returncode == 2, done.stderr
    assert f"--host {host} needs a login" in done.stderr and "--token-file" in done.stderr
    assert nobody_listens(port)


def test_operator_controls_need_a_login():
    done = dashboard("--mqtt", "mqtt://viewer@127.0.0.1:1", "--operator",
                     "mqtt://operator@127.0.0.1:1")
    assert done.returncode == 2 and "--operator needs a login" in done.stderr


def test_a_short_token_is_refused(tmp_path):
    token = tmp_path / "token"
    token.write_text("short\n")
    done = dashboard("--mqtt", "mqtt://viewer@127.0.0.1:1", "--host", "0.0.0.0",
                     "--token-file", str(token))
    assert done.returncode == 2 and "shorter than 16 characters" in done.stderr


def test_a_refused_viewer_login_stops_it_and_the_password_is_not_printed(broker):
    done = dashboard("--mqtt", broker.url("viewer"), "--port", str(free_port()),
                     password="not-the-password")
    assert done.returncode == 2
    assert "refused the viewer login" in done.stderr and "RIG_MQTT_PASSWORD" in done.stderr
    assert "not-the-password" not in done.stdout + done.stderr


def test_a_port_in_use_is_a_clear_error():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = dashboard("--mqtt", "mqtt://viewer@127.0.0.1:1", "--port", str(port))
    assert done.returncode == 2, done.stderr
    assert f"cannot serve on 127.0.0.1:{port}" in done.stderr and "--port" in done.stderr


def test_loopback_hosts():
    assert all(map(is_loopback, ["127.0.0.1", "127.3.4.5", "::1", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.1", "rigs.lab.example"]))
