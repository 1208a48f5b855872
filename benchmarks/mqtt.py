"""MQTT telemetry: what the broker carries, and what it costs the measurement.

Starts a real mosquitto on 127.0.0.1 (a free port, the docs' ACL; stopped at the end), then:

1. Run events (QoS 1) handed by the bus to `MqttTelemetry` as fast as it takes them:
   `published_per_s` acknowledged by the broker, `delivered_per_s` to a second client
   subscribed on it; `lost` never arrived there. The broker here queues up to 100 000 messages
   per subscriber: with mosquitto's default `max_queued_messages 1000`, a subscriber fed a
   burst faster than 20 in flight per round trip lets it through loses the excess.
2. The 2 MS/s ingest of benchmarks/ingest.py with MQTT off (no live tap, no subscriber) and on
   (the live power tap feeding 10 Hz summaries plus 20, then 200, run events a second through
   the bus), alternated `--reps` times:
   - free-running: `slowdown_pct` = how much longer the same stream takes to ingest with MQTT
     on (fastest of the reps; goal < 2 %);
   - in real time at 2 MS/s: `realtime_dropped_off` / `realtime_dropped_on` (goal 0 both).

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.mqtt.broker: the same broker setup the tests use

from ingest import run as ingest  # noqa: E402  (benchmarks/ingest.py, beside this file)

from rig.bench.broker import resolve  # noqa: E402
from rig.mqtt.telemetry import MqttTelemetry  # noqa: E402
from rig.run.events import EventBus, Note, RunFinished, RunStarted  # noqa: E402
from tests.mqtt.broker import USERS, Broker  # noqa: E402
from tests.mqtt.listener import Listener  # noqa: E402

#: Run events a second during the ingest comparison: what an ASC run sends while a monitor
#: records (a few a second: windows, notes, accuracy samples on real hardware; ~20 on the
#: virtual bench at speed 50), and a stress load ten times that.
EVENT_RATES = (20, 200)


def telemetry(broker: Broker, rate_hz: float = 10.0, queue: int = 100_000) -> MqttTelemetry:
    from dataclasses import replace

    settings = resolve(url=broker.url("rig-a"), power_rate_hz=rate_hz,
                       env={"RIG_MQTT_PASSWORD": USERS["rig-a"]})
    return MqttTelemetry(replace(settings, queue=queue), log=lambda text: None).start()


def events_per_s(broker: Broker, n: int) -> dict[str, float]:
    """Run events through the broker: acknowledged to the rig (`published_per_s`) and
    delivered to one subscriber (`delivered_per_s`), from the first publish."""
    with Listener(broker, filters=("neurobench/rig-a/run/#",)) as listener:
        t = telemetry(broker)
        bus = EventBus()
        bus.subscribe(t)
        t0 = time.perf_counter()
        bus.publish(RunStarted(run_id="bench", procedure="bench"))
        for i in range(n):
            bus.publish(Note(text=f"event {i}"))
        handed_s = time.perf_counter() - t0
        acked_s = delivered_s = math.nan
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = time.perf_counter() - t0
            if math.isnan(acked_s) and t.totals.published >= n + 1:
                acked_s = now
            if math.isnan(delivered_s) and len(listener.received()) >= n + 1:
                delivered_s = now
            if not (math.isnan(acked_s) or math.isnan(delivered_s)):
                break
            time.sleep(0.002)
        received = listener.received()
        got = len(received)
        bus.publish(RunFinished(status="complete"))
        t.close()
    last = received[-1].at - t0 if received else math.nan
    return {"events": n + 1, "published_per_s": (n + 1) / acked_s,
            "delivered_per_s": got / last,
            "lost": n + 1 - got, "bus_handover_us_per_event": 1e6 * handed_s / (n + 1)}


def ingest_with_mqtt(broker: Broker | None, seconds: float, realtime: bool,
                     events_per_s: float = EVENT_RATES[0]) -> dict[str, float]:
    """One ingest run; with a broker: live tap + a thread publishing run events."""
    if broker is None:
        return ingest(seconds, realtime)
    t = telemetry(broker)
    bus = EventBus()
    bus.subscribe(t)
    bus.publish(RunStarted(run_id="ingest", procedure="bench"))
    stop = threading.Event()

    def procedure() -> None:  # the procedure thread's events, at a steady rate
        i = 0
        while not stop.wait(1 / events_per_s):
            bus.publish(Note(text=f"step {i}"))
            i += 1

    thread = threading.Thread(target=procedure, daemon=True)
    thread.start()
    try:
        result = ingest(seconds, realtime, preview=t.power)
    finally:
        stop.set()
        thread.join()
        bus.publish(RunFinished(status="complete"))
        t.close()
    result["telemetry_published"] = t.totals.published
    result["telemetry_dropped"] = t.totals.dropped
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=20.0,
                        help="signal seconds per free-running ingest")
    parser.add_argument("--realtime-seconds", type=float, default=5.0,
                        help="signal (= wall) seconds per real-time ingest")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rig-mqtt-bench-") as tmp:
        broker = Broker(Path(tmp) / "broker", extra=("max_queued_messages 100000",)).start()
        try:
            for key, value in events_per_s(broker, args.events).items():
                print(f"{key}: {value:.6g}")
            walls: dict[str, list[float]] = {"off": [], **{f"on@{r}": [] for r in EVENT_RATES}}
            for _ in range(args.reps):  # alternated, so drift hits all alike
                walls["off"].append(ingest_with_mqtt(None, args.seconds, False)["wall_s"])
                for rate in EVENT_RATES:
                    walls[f"on@{rate}"].append(
                        ingest_with_mqtt(broker, args.seconds, False, rate)["wall_s"])
            # the fastest of the reps: what the pipeline costs, not what else ran meanwhile
            print(f"ingest_wall_s_off: {min(walls['off']):.4f} (fastest of {args.reps} reps "
                  f"of {args.seconds:g} s at 2 MS/s, free-running; median "
                  f"{statistics.median(walls['off']):.4f})")
            for rate in EVENT_RATES:
                on = walls[f"on@{rate}"]
                slowdown = 100 * (min(on) / min(walls["off"]) - 1)
                print(f"ingest_wall_s_on_{rate}_events_per_s: {min(on):.4f} (median "
                      f"{statistics.median(on):.4f}); slowdown_pct: {slowdown:.2f} (goal < 2)")
            rt_off = ingest_with_mqtt(None, args.realtime_seconds, realtime=True)
            rt_on = ingest_with_mqtt(broker, args.realtime_seconds, realtime=True)
            print(f"realtime_dropped_off: {rt_off['dropped']} (goal 0)")
            print(f"realtime_dropped_on: {rt_on['dropped']} (goal 0)")
            print(f"realtime_cpu_fraction_off: {rt_off['cpu_fraction']:.3f}")
            print(f"realtime_cpu_fraction_on: {rt_on['cpu_fraction']:.3f}")
            print(f"realtime_telemetry_published: {rt_on['telemetry_published']}, dropped: "
                  f"{rt_on['telemetry_dropped']}")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
