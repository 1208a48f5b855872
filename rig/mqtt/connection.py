"""How every MQTT client of ours connects to the lab's broker: one place for login, TLS and Nagle
off, used by the telemetry, `rig mqtt` and the tests' listener."""

from __future__ import annotations

import socket
from typing import Any

from rig.bench.broker import MqttSettings

#: TCP_NODELAY for every client of ours (and the tests' listener).
NODELAY = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)


def client(settings: MqttSettings, identifier: str, **options: Any) -> Any:
    """An aiomqtt client for `settings`: login, TLS with the CA file, Nagle off (paho leaves
    it on, and each small PUBACK would then wait for the peer's delayed ACK)."""
    import aiomqtt

    s = settings
    tls = aiomqtt.TLSParameters(ca_certs=str(s.ca_file) if s.ca_file else None) \
        if s.tls else None
    return aiomqtt.Client(s.broker.host, s.broker.port, username=s.broker.username,
                          password=s.password, identifier=identifier, tls_params=tls,
                          socket_options=NODELAY, **options)
