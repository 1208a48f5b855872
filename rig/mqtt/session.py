"""A started telemetry for one measurement, from a bench's [mqtt] table and/or --mqtt options."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rig.bench.broker import MqttSettings, resolve
from rig.errors import ConfigError


def new_telemetry(settings: MqttSettings, **options: Any) -> Any:
    """An `MqttTelemetry`, or a ConfigError saying how to install aiomqtt."""
    try:
        import aiomqtt  # noqa: F401

        from rig.mqtt.telemetry import MqttTelemetry
    except ImportError as exc:
        raise ConfigError(f"MQTT needs aiomqtt, which is not installed ({exc})",
                          hint="pip install 'neurobench-rig[mqtt]'") from None
    return MqttTelemetry(settings, **options)


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
