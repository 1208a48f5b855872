"""The fleet and the pages that follow it: the viewer's broker subscription folds every message
into the `Fleet`, and each connected page gets the updates that concern it.

Everything runs on the server's asyncio loop: one task follows the broker (and reconnects with
back-off when it goes away), each page's event stream reads its own bounded queue. A page that
cannot keep up loses its stream (it reconnects and gets the current state at once) rather than
making the server hold an unbounded backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rig.bench.broker import MqttSettings
from rig.dashboard.fleet import Fleet
from rig.mqtt.connection import client

#: Reconnect back-off [s]: first wait and the most it grows to.
BACKOFF_S = (0.25, 5.0)
#: Updates a page may have waiting before its stream is closed (it then reconnects).
PAGE_QUEUE = 5000


@dataclass(eq=False)  # pages are kept in a set: each one is itself
class Page:
    """One connected page: the run it follows (None: the fleet page) and its queue."""

    run: tuple[str, str] | None = None
    queue: asyncio.Queue[list[dict[str, Any]] | None] = field(
        default_factory=lambda: asyncio.Queue(PAGE_QUEUE))

    def wants(self, update: dict[str, Any]) -> bool:
        if update["type"] in ("rig", "broker", "dropped"):
            return True
        return self.run is not None and (update.get("rig"), update.get("run_id")) == self.run


class Hub:
    """The fleet, the broker's state as the dashboard sees it, and the pages."""

    def __init__(self, fleet: Fleet | None = None, clock: Callable[[], float] = time.time) -> None:
        self.fleet = fleet or Fleet()
        self.clock = clock
        self.pages: set[Page] = set()
        self.broker: dict[str, Any] = {"connected": False, "since": clock(), "reason": "starting"}
        self.messages = 0

    # -- pages -----------------------------------------------------------------------------
    def attach(self, run: tuple[str, str] | None = None) -> Page:
        page = Page(run)
        self.pages.add(page)
        return page

    def detach(self, page: Page) -> None:
        self.pages.discard(page)

    def snapshot(self, run: tuple[str, str] | None = None) -> dict[str, Any]:
        """What a page gets first: every rig, the broker's state, and the run it follows."""
        out = {"type": "snapshot", **self.fleet.snapshot(), "broker": self.broker}
        if run is not None:
            out["run"] = self.fleet.run_snapshot(*run)
        return out

    def publish(self, updates: list[dict[str, Any]]) -> None:
        """Hand updates to every page that wants them (never waits)."""
        if not updates:
            return
        for page in list(self.pages):
            mine = [u for u in updates if page.wants(u)]
            if not mine:
                continue
            try:
                page.queue.put_nowait(mine)
            except asyncio.QueueFull:  # too slow: close its stream, it reconnects afresh
                self.pages.discard(page)
                with contextlib.suppress(asyncio.QueueFull):
                    page.queue.get_nowait()
                    page.queue.put_nowait(None)

    def take(self, topic: str, payload: bytes, retained: bool = False) -> None:
        """Fold one broker message in and tell the pages."""
        self.messages += 1
        before = sum(self.fleet.dropped.values())
        updates = self.fleet.take(topic, payload, retained=retained, now=self.clock())
        if sum(self.fleet.dropped.values()) != before:
            updates.append({"type": "dropped", "dropped": self.fleet.dropped})
        self.publish(updates)

    def set_broker(self, connected: bool, reason: str = "") -> None:
        if connected == self.broker["connected"] and reason == self.broker.get("reason"):
            return
        self.broker = {"connected": connected, "since": self.clock(), "reason": reason}
        self.publish([{"type": "broker", "broker": self.broker}])

    def close_pages(self) -> None:
        """End every page's stream (the server is stopping)."""
        for page in list(self.pages):
            with contextlib.suppress(asyncio.QueueFull):
                page.queue.put_nowait(None)
        self.pages.clear()

    # -- the broker ------------------------------------------------------------------------
    async def follow(self, settings: MqttSettings) -> None:
        """Subscribe as the viewer and fold every message in, until cancelled; reconnect
        with back-off whenever the broker goes away (the pages show a banner meanwhile)."""
        import aiomqtt

        backoff = BACKOFF_S[0]
        while True:
            try:
                async with client(settings, f"dashboard-{os.getpid()}-{id(self) & 0xFFFF:04x}",
                                  timeout=5, keepalive=5) as mqtt:
                    for topic in self.fleet.subscriptions():
                        await mqtt.subscribe(topic, qos=1)
                    self.set_broker(True)
                    backoff = BACKOFF_S[0]
                    async for message in mqtt.messages:
                        payload = message.payload if isinstance(message.payload, bytes) \
                            else str(message.payload or "").encode()
                        self.take(str(message.topic), payload, bool(message.retain))
                self.set_broker(False, "the broker closed the connection")
            except aiomqtt.MqttCodeError as exc:
                self.set_broker(False, f"the broker refused the dashboard: {exc}")
            except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
                self.set_broker(False, f"cannot reach the broker {settings.broker}: {exc}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_S[1])
