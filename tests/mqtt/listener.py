"""A test client on the broker that records every message it receives, on its own thread."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from dataclasses import dataclass
from typing import Any

import aiomqtt

from rig.mqtt.connection import NODELAY
from tests.mqtt.broker import USERS, Broker


@dataclass
class Received:
    topic: str
    payload: bytes
    retain: bool
    #: time.perf_counter() when it arrived (for benchmarks/mqtt.py; never asserted on)
    at: float = 0.0

    def json(self) -> Any:
        return json.loads(self.payload.decode())


class Listener:
    """Subscribes to `filters` as `user` and keeps what arrives; reconnects if the broker
    restarts. Also publishes (`send`) as that user."""

    def __init__(self, broker: Broker, user: str = "viewer",
                 filters: tuple[str, ...] = ("neurobench/#",)) -> None:
        self.broker, self.user, self.filters = broker, user, filters
        self.messages: list[Received] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._outbox: list[tuple[str, bytes]] = []
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def __enter__(self) -> Listener:
        self._thread.start()
        assert self._ready.wait(10), "the test listener could not connect"
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    async def _main(self) -> None:
        while not self._stop.is_set():
            try:
                async with aiomqtt.Client(
                        "127.0.0.1", self.broker.port, username=self.user,
                        password=USERS[self.user], identifier=f"test-{self.user}-{id(self)}",
                        socket_options=NODELAY,
                        tls_params=aiomqtt.TLSParameters(ca_certs=str(self.broker.ca_file))
                        if self.broker.tls else None) as client:
                    for f in self.filters:
                        await client.subscribe(f, qos=1)
                    self._ready.set()
                    reader = asyncio.create_task(self._read(client))
                    while not self._stop.is_set() and not reader.done():
                        while self._outbox:
                            topic, payload = self._outbox.pop(0)
                            await client.publish(topic, payload, qos=1)
                        await asyncio.sleep(0.02)
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError, aiomqtt.MqttError):
                        await reader
            except (aiomqtt.MqttError, OSError) as exc:
                self.errors.append(repr(exc))
                await asyncio.sleep(0.2)

    async def _read(self, client: aiomqtt.Client) -> None:
        async for m in client.messages:
            payload = m.payload if isinstance(m.payload, bytes) else str(m.payload).encode()
            with self._lock:
                self.messages.append(Received(str(m.topic), payload, bool(m.retain),
                                              time.perf_counter()))

    def send(self, topic: str, payload: bytes | str | dict) -> None:
        """Publish as this listener's user (QoS 1)."""
        if isinstance(payload, dict):
            payload = json.dumps(payload)
        self._outbox.append((topic, payload.encode() if isinstance(payload, str) else payload))

    def received(self, prefix: str = "") -> list[Received]:
        with self._lock:
            return [m for m in self.messages if m.topic.startswith(prefix)]

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> list[Received]:
        """Wait until `predicate(messages)` is true; the messages, or AssertionError."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msgs = self.received()
            if predicate(msgs):
                return msgs
            time.sleep(0.05)
        seen = [(m.topic, m.payload[:80]) for m in msgs]
        raise AssertionError(f"timed out; errors {self.errors}; received {seen}")

    def statuses(self, rig: str) -> list[str]:
        """The states the rig's status topic went through, in order."""
        return [m.json().get("state") for m in self.received(f"neurobench/{rig}/status")]
