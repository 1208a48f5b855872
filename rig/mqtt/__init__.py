"""MQTT telemetry and remote control: one more subscriber of the event bus.

Where the broker is and who the rig is (a bench's `[mqtt]` table, `--mqtt`) is read with the
bench file, in `rig.bench.broker`.

- `topics`: the topic layout under `neurobench/<rig>/`.
- `connection`: `client`, how every MQTT client of ours connects (login, TLS, Nagle off).
- `session`: a started telemetry for one measurement (`started`, `bench_telemetry`).
- `telemetry`: `MqttTelemetry`, the subscriber that publishes events, status and power
  summaries from its own thread, never in the way of a measurement.
- `commands`: the schema-checked command channel of `rig serve` (start, stop, status).
- `board`: what `rig mqtt watch` shows, folded from status and run messages.

Only `telemetry` and the commands that talk to a broker import aiomqtt (the `mqtt` extra).
"""
