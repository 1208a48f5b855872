"""A real mosquitto broker per test (127.0.0.1, free port, passwd file and the docs' ACL)."""

from __future__ import annotations

import pytest

from tests.mqtt.broker import Broker, mosquitto_binary

pytest.importorskip("aiomqtt")


@pytest.fixture
def broker(tmp_path):
    if mosquitto_binary() is None:
        pytest.fail("mosquitto is not installed: `make system-deps` installs it")
    b = Broker(tmp_path / "broker").start()
    try:
        yield b
    finally:
        b.stop()
