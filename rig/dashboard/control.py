"""Start and stop from the dashboard (`--operator` only): each request from the page becomes a
command of `rig serve`'s channel, checked against its schema (`rig.mqtt.commands.parse_command`)
before it is sent, and sent with the operator's broker login, which never leaves the server."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

from rig.bench.broker import MqttSettings, check_rig_name
from rig.errors import ConfigError
from rig.mqtt import topics
from rig.mqtt.commands import Refused, parse_command
from rig.mqtt.connection import client

#: How long a command waits for the rig's reply [s].
REPLY_TIMEOUT_S = 5.0
#: What the page may ask for: the command's own keys, nothing else.
PAGE_KEYS = {"action", "procedure", "bench", "sweep", "scope"}


def command_for(request: Any) -> tuple[str, dict[str, Any]]:
    """(rig, command) of a page's request {"rig", "action", ...}; Refused if it is not one."""
    if not isinstance(request, dict):
        raise Refused("expected a JSON object")
    rig = request.get("rig")
    if not isinstance(rig, str):
        raise Refused("no rig named")
    try:
        check_rig_name(rig, where="rig")
    except ConfigError as exc:
        raise Refused(str(exc)) from None
    unknown = set(request) - PAGE_KEYS - {"rig"}
    if unknown:
        raise Refused(f"unknown keys: {', '.join(sorted(map(str, unknown)))[:200]}")
    command = {"request_id": f"dashboard-{uuid.uuid4().hex[:12]}",
               **{k: v for k, v in request.items() if k in PAGE_KEYS}}
    parse_command(json.dumps(command).encode())  # the rig's own checks, before anything is sent
    return rig, command


class Operator:
    """Sends commands with the operator's login and waits for each reply."""

    def __init__(self, settings: MqttSettings) -> None:
        self.settings = settings

    async def send(self, rig: str, command: dict[str, Any],
                   timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        """The rig's reply to `command`, or {"ok": False, "reason": ...} if none came."""
        import aiomqtt

        try:
            async with client(self.settings, f"dashboard-op-{os.getpid()}-"
                              f"{uuid.uuid4().hex[:6]}", timeout=timeout) as mqtt:
                await mqtt.subscribe(topics.reply(rig), qos=1)
                await mqtt.publish(topics.cmd(rig), json.dumps(command).encode(), qos=1)
                async with asyncio.timeout(timeout):
                    async for message in mqtt.messages:
                        payload = message.payload if isinstance(message.payload, bytes) else b""
                        try:
                            reply = json.loads(payload.decode("utf-8"))
                        except (UnicodeDecodeError, json.JSONDecodeError):
                            continue
                        if isinstance(reply, dict) and \
                                reply.get("request_id") == command["request_id"]:
                            return reply
        except TimeoutError:
            return {"ok": False, "reason": f"no reply from {rig} within {timeout:g} s "
                    "(is it running `rig serve`?)"}
        except aiomqtt.MqttError as exc:
            return {"ok": False, "reason": f"cannot send to the broker: {exc}"}
        return {"ok": False, "reason": "the broker closed the connection"}
