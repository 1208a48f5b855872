"""A started telemetry for one measurement, from a bench's [mqtt] table and/or --mqtt options."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

from rig.errors import ConfigError
from rig.mqtt.settings import MqttSettings, resolve


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


def new_telemetry(settings: MqttSettings, **options: Any) -> Any:
    """An `MqttTelemetry`, or a ConfigError saying how to install aiomqtt."""
    try:
        import aiomqtt  # noqa: F401

        from rig.mqtt.telemetry import MqttTelemetry
    except ImportError as exc:
        raise ConfigError(f"MQTT needs aiomqtt, which is not installed ({exc})",
                          hint="pip install 'neurobench-rig[mqtt]'") from None
    return MqttTelemetry(settings, **options)


#: TCP_NODELAY for every client of ours (and the tests' listener).
NODELAY = ((socket.IPPROTO_TCP, socket.TCP_NODELAY, 1),)


@contextlib.contextmanager
def started(settings: MqttSettings | None) -> Iterator[Any]:
    """A started `MqttTelemetry` (None without settings), closed however the body ends:
    status offline, the queue flushed within a few seconds."""
    if settings is None:
        yield None
        return
    telemetry = new_telemetry(settings).start()
    try:
        yield telemetry
    finally:
        telemetry.close()


def bench_telemetry(bench: Any) -> contextlib.AbstractContextManager[Any]:
    """`started` for a bench's own [mqtt] table (None when it has none)."""
    table = getattr(bench, "mqtt", None)
    return started(resolve(table) if table is not None else None)
