"""`MqttTelemetry`: the event-bus subscriber that reports a rig to the lab's broker.

It never stands in the way of a measurement. The bus hands it an event on the procedure's
thread and it only appends the event to a bounded queue; the JSON encoding, the connection
and every publish happen on its own thread, in its own asyncio loop (aiomqtt needs one). A
broker that is down, slow or goes away costs telemetry, never a sample or a run:

- run events (QoS 1) wait in the queue while the broker is away; past `settings.queue` the
  newest are dropped, so what arrives is the run's first events, in order;
- the power summary (QoS 0) and the retained status keep only their latest value;
- everything dropped is counted per run, each kind of trouble is logged once, and the thread
  reconnects with back-off (0.25 s doubling to 10 s);
- before RunFinished it hands the bus a `TelemetryReport` (offered, published, dropped,
  pending), which the run store writes into the manifest.

The broker publishes the retained will `{"state": "offline"}` on the status topic if the rig
process dies; a clean close publishes it itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import socket
import ssl
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rig import __version__
from rig.bench.broker import MqttSettings
from rig.errors import ConfigError
from rig.mqtt import topics
from rig.mqtt.connection import client
from rig.run.events import (
    Event,
    InstrumentInfo,
    LedgerAppended,
    PhaseProgress,
    PhaseStarted,
    RunFinished,
    RunStarted,
    TelemetryReport,
)
from rig.run.live_power import PowerPreview
from rig.run.store import event_line

#: Run events, replies and power summaries published in one pipelined batch.
BATCH = 64
#: Longest wait for one publish to be acknowledged before the connection counts as lost [s].
PUBLISH_TIMEOUT_S = 5.0
#: Reconnect back-off [s]: first wait, and the most it grows to.
BACKOFF_S = (0.25, 10.0)
#: How long the pump sleeps when there is nothing to send [s].
IDLE_POLL_S = 0.05
#: At run end, how long `closing_events` waits for queued events to reach a connected broker.
DRAIN_AT_END_S = 2.0
KEEPALIVE_S = 10
#: QoS 1 messages awaiting their PUBACK at once (paho allows 20 by default).
INFLIGHT = 200

#: paho's own log lines ("failed to receive on socket") stay out of the user's terminal: the
#: telemetry thread says what happened once, in words.
_PAHO_LOG = logging.getLogger("rig.mqtt.paho")
_PAHO_LOG.addHandler(logging.NullHandler())
_PAHO_LOG.propagate = False
_PAHO_LOG.setLevel(logging.ERROR)  # no record is even made for the chatter below

#: Connect return codes that mean "your login is wrong", not "try again later".
_AUTH_CODES = {4, 5, 134, 135}

Log = Callable[[str], None]
CommandHandler = Callable[[bytes], dict[str, Any] | None]


def _stderr_log(text: str) -> None:
    print(f"rig: mqtt: {text}", file=sys.stderr, flush=True)


@dataclass
class Counts:
    """Messages of one run: offered to the queue, acknowledged by the broker, dropped."""

    offered: int = 0
    published: int = 0
    dropped: int = 0

    @property
    def pending(self) -> int:
        return max(0, self.offered - self.published - self.dropped)


@dataclass
class _Message:
    topic: str
    #: An Event (encoded on the telemetry thread) or a dict (JSON).
    body: Any
    qos: int
    retain: bool = False
    counts: Counts | None = None

    def payload(self) -> bytes:
        if isinstance(self.body, Event):
            return event_line(self.body).encode()
        return json.dumps(self.body, separators=(",", ":")).encode()


class PowerSummarizer:
    """Folds the live power previews (5 ms min/max/mean bins) into one summary per
    `1/rate_hz` seconds: mean, min and max over every bin since the last summary.

    The rate is wall-clock (it limits what the broker gets, whatever the virtual bench's
    speed); what a summary covers (`t_s`, `interval_s`, `samples`) comes from the monitor's
    sample ids. Consecutive summaries tile the stream without gaps."""

    def __init__(self, rate_hz: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.period_s = 1.0 / rate_hz
        self._clock = clock
        #: Wall time at clock 0: each summary's `at` is read off the clock that paces them, so
        #: two summaries' `at` lie as far apart as the pacing let them (a second clock read
        #: later, after a thread switch, put two rated summaries ~99 ms apart under load).
        self._epoch = time.time() - clock()
        self._last: float | None = None
        self._first: int | None = None
        self._samples = 0
        self._sum = 0.0
        self._min = math.inf
        self._max = -math.inf
        self._fs = 0.0

    def add(self, preview: PowerPreview) -> list[dict[str, Any]]:
        """Take one preview; the summary that is due, if one is."""
        if not preview.mean_w or preview.sample_rate_hz <= 0:
            return []
        self._fs = preview.sample_rate_hz
        n = max(1, preview.step) * len(preview.mean_w)
        if self._first is None:
            self._first = preview.first_sample
        self._samples += n
        self._sum += float(np.sum(preview.mean_w)) * max(1, preview.step)
        self._min = min(self._min, float(np.min(preview.min_w)))
        self._max = max(self._max, float(np.max(preview.max_w)))
        now = self._clock()
        if self._last is None:
            self._last = now
        if now - self._last < self.period_s:
            return []
        self._last = now
        return self._summary(now)

    def flush(self) -> list[dict[str, Any]]:
        """The summary of what was gathered since the last one (none if nothing was)."""
        return self._summary(self._clock())

    def _summary(self, now: float) -> list[dict[str, Any]]:
        if self._first is None or not self._samples:
            return []
        summary = {
            "t_s": self._first / self._fs,
            "interval_s": self._samples / self._fs,
            # the float sum of a flat stretch can put its mean one ulp outside [min, max]
            "mean_w": min(max(self._sum / self._samples, self._min), self._max),
            "min_w": self._min,
            "max_w": self._max,
            "samples": self._samples,
            "at": self._epoch + now,
        }
        self._first = self._first + self._samples
        self._samples, self._sum, self._min, self._max = 0, 0.0, math.inf, -math.inf
        return [summary]


def _disconnection(client: Any) -> asyncio.Future | None:
    """The future aiomqtt completes when the connection goes (a private attribute of
    aiomqtt 2.x; without it, a lost connection shows as a publish timeout)."""
    fut = getattr(client, "_disconnected", None)
    return fut if isinstance(fut, asyncio.Future) else None


def _lost_error(lost: asyncio.Future) -> BaseException:
    """Why the connection went (and the future's exception marked as retrieved)."""
    exc = lost.exception() if not lost.cancelled() else None
    return exc if exc is not None else ConnectionError("the broker closed the connection")


class MqttTelemetry:
    """Publishes a rig's events, status and power summaries; optionally takes commands.

    Use as an event-bus subscriber (`__call__`), a live-power tap (`power`), and a context
    manager or `start()`/`close()` pair around the runs it reports.
    """

    SINK = "mqtt"

    def __init__(self, settings: MqttSettings, *, on_command: CommandHandler | None = None,
                 log: Log | None = None) -> None:
        self.settings = settings
        self._on_command = on_command
        self._log_fn = log or _stderr_log
        self._logged: set[str] = set()
        self._lock = threading.Lock()
        self._queue: deque[_Message] = deque()
        self._power_slot: _Message | None = None
        self._status: dict[str, Any] = {"state": "idle"}
        self._status_version = 0
        self._status_sent = -1
        self._run_id: str | None = None
        self._procedure = ""
        #: The run's numbers are simulated: its RunStarted said so, or an instrument did since.
        self._simulated = False
        self.run_counts = Counts()
        self.totals = Counts()
        self._summarizer = PowerSummarizer(settings.power_rate_hz)
        self._closing = threading.Event()
        self._connected = threading.Event()
        self._first_attempt = threading.Event()
        #: Why the broker will never take this rig as configured (bad login, untrusted
        #: certificate): raised by start() instead of retrying all night.
        self.refusal: ConfigError | None = None
        self.connections = 0
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, *, wait_s: float = 5.0) -> MqttTelemetry:
        """Start the telemetry thread and wait up to `wait_s` for the first connection.

        A login the broker refuses is a ConfigError (nothing is measured yet); a broker that
        cannot be reached is logged and retried in the background while the rig goes on."""
        self._thread = threading.Thread(target=self._thread_main, name="mqtt-telemetry",
                                        daemon=True)
        self._thread.start()
        self._first_attempt.wait(wait_s)
        if self.refusal is not None:
            self.close(timeout=1.0)
            raise self.refusal
        if not self._connected.is_set():
            self._once("unreachable", f"cannot reach the broker {self.settings.broker} yet; "
                       "the run goes on and telemetry is retried in the background")
        return self

    def __enter__(self) -> MqttTelemetry:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def close(self, timeout: float = 3.0) -> None:
        """Publish `offline`, flush what the broker takes within `timeout`, and stop."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(timeout + PUBLISH_TIMEOUT_S)
        with self._lock:
            left = list(self._queue) + ([self._power_slot] if self._power_slot else [])
            self._queue.clear()
            self._power_slot = None
        for msg in left:
            self._count_dropped(msg)
        if self.totals.dropped:
            self._log_fn(f"{self.totals.dropped} of {self.totals.offered} telemetry messages "
                         f"did not reach the broker {self.settings.broker}")

    # -- the bus side (any thread; never blocks) -------------------------------------------
    def __call__(self, event: Event) -> None:
        if event.transient:
            if isinstance(event, PowerPreview):
                self.power(event)
            elif isinstance(event, LedgerAppended):  # retained: the broker holds the last head
                self._offer(_Message(topics.ledger(self.settings.rig),
                                     {"seq": event.seq, "digest": event.digest,
                                      "run": event.run, "at": event.at},
                                     qos=1, retain=True, counts=self.run_counts), power=False)
            return
        if isinstance(event, RunStarted) or event.kind == "sweep_resumed":
            with self._lock:  # a new run (or a resumed one, in this process): counts afresh
                self.run_counts = Counts()
        if isinstance(event, RunStarted):
            self._run_id = event.run_id
            self._procedure = event.procedure
            self._simulated = bool(event.simulated)
            self._summarizer = PowerSummarizer(self.settings.power_rate_hz)
            self.set_status(state="running", procedure=event.procedure, device=event.device,
                            run_id=event.run_id, phase=None, progress=None, error=None,
                            simulated=self._simulated)
        elif isinstance(event, InstrumentInfo) and event.info.get("simulated"):
            self._simulated = True  # e.g. a XyloSim DUT, known once it answered `caps`
            self.set_status(simulated=True)
        elif (named := getattr(event, "run_id", "")) and self._run_id is None:
            self._run_id = named  # a resumed sweep: its first event names the run
        run_id = self._run_id or "unknown"
        if isinstance(event, RunFinished):
            self._flush_power()
        self._offer(_Message(topics.run_event(self.settings.rig, run_id, event.kind), event,
                             qos=1, counts=self.run_counts), power=False)
        self._follow(event)

    def power(self, preview: PowerPreview) -> None:
        """Live-power tap (`measure_asc(live=[...])`): called on the monitor's thread."""
        for summary in self._summarizer.add(preview):
            self._offer_power(summary)

    def closing_events(self) -> list[Event]:
        """The TelemetryReport the bus publishes before RunFinished (see EventBus.publish)."""
        self._flush_power()
        deadline = time.monotonic() + DRAIN_AT_END_S
        while self._connected.is_set() and time.monotonic() < deadline:
            with self._lock:
                if not self._queue and self._power_slot is None:
                    break
            time.sleep(0.01)
        with self._lock:
            c = self.run_counts
            return [TelemetryReport(sink=self.SINK, target=self.settings.public(),
                                    offered=c.offered, published=c.published,
                                    dropped=c.dropped, pending=c.pending)]

    def set_status(self, **fields: Any) -> None:
        """Change the retained status; only the latest value is ever sent."""
        with self._lock:
            self._status = {**self._status, **fields}
            self._status_version += 1

    def send_reply(self, reply: dict[str, Any]) -> None:
        """Queue a command reply (QoS 1; not part of any run's counts)."""
        self._offer(_Message(topics.reply(self.settings.rig), reply, qos=1), power=False)

    @property
    def status(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._status)

    def _follow(self, event: Event) -> None:
        """Keep the retained status in step with the run."""
        if isinstance(event, PhaseStarted):
            self.set_status(phase=event.phase,
                            progress={"done": 0, "total": event.total})
        elif isinstance(event, PhaseProgress):
            self.set_status(phase=event.phase,
                            progress={"done": event.done, "total": event.total})
        elif event.kind == "sweep_point":
            done = self._status.get("progress") or {}
            total = done.get("total")
            self.set_status(phase="points", progress={"done": int(done.get("done") or 0) + 1,
                                                      "total": total})
        elif event.kind == "sweep_resumed":
            self.set_status(state="running", procedure="sweep", phase="points",
                            progress={"done": getattr(event, "done", 0),
                                      "total": getattr(event, "total", None)})
        elif isinstance(event, RunStarted) and event.manifest.get("points_total"):
            self.set_status(phase="points",
                            progress={"done": 0, "total": event.manifest["points_total"]})
        elif isinstance(event, RunFinished):
            last = {"run_id": self._run_id, "status": event.status}
            if event.status == "failed":
                self.set_status(state="error", error=event.error or "the run failed",
                                last_run=last, phase=None, progress=None)
            else:
                self.set_status(state="idle", error=None, last_run=last, phase=None,
                                progress=None, run_id=None, procedure=None, device=None,
                                simulated=None)
            self._run_id = None

    def _flush_power(self) -> None:
        for summary in self._summarizer.flush():
            self._offer_power(summary)

    def _offer_power(self, summary: dict[str, Any]) -> None:
        run_id = self._run_id or "unknown"
        self._offer(_Message(topics.power(self.settings.rig, run_id),
                             {"run_id": run_id, "simulated": self._simulated, **summary}, qos=0,
                             counts=self.run_counts),
                    power=True)

    def _offer(self, msg: _Message, *, power: bool) -> None:
        dropped: _Message | None = None
        with self._lock:
            if msg.counts is not None:
                msg.counts.offered += 1
                self.totals.offered += 1
            if power:  # only the latest summary matters: a newer one replaces an unsent one
                dropped, self._power_slot = self._power_slot, msg
            elif len(self._queue) >= self.settings.queue:
                dropped = msg
            else:
                self._queue.append(msg)
        if dropped is not None:
            self._count_dropped(dropped)
            if not power:
                self._once("queue-full", f"telemetry queue full ({self.settings.queue} "
                           "messages): newer run events are dropped until the broker "
                           "takes them (counted in the run's manifest)")

    def _count_dropped(self, msg: _Message) -> None:
        if msg.counts is None:
            return
        with self._lock:
            msg.counts.dropped += 1
            self.totals.dropped += 1

    def _count_published(self, msg: _Message) -> None:
        if msg.counts is None:
            return
        with self._lock:
            msg.counts.published += 1
            self.totals.published += 1

    def _once(self, key: str, text: str) -> None:
        if key not in self._logged:
            self._logged.add(key)
            self._log_fn(text)

    # -- the telemetry thread ----------------------------------------------------------------
    def _thread_main(self) -> None:
        try:
            asyncio.run(self._serve())
        except Exception as exc:  # a bug here must never take a measurement down
            self._once("crash", f"telemetry stopped: {type(exc).__name__}: {exc}")
        finally:
            self._connected.clear()
            self._first_attempt.set()

    def _client(self) -> Any:
        import aiomqtt

        s = self.settings
        offline = json.dumps(self._status_payload({"state": "offline"})).encode()
        return client(
            s, f"{s.rig}-{os.getpid()}-{id(self) & 0xFFFF:04x}",
            will=aiomqtt.Will(topics.status(s.rig), offline, qos=1, retain=True),
            keepalive=KEEPALIVE_S, timeout=PUBLISH_TIMEOUT_S, logger=_PAHO_LOG,
            max_inflight_messages=INFLIGHT,
        )

    async def _serve(self) -> None:
        import aiomqtt

        loop = asyncio.get_running_loop()

        def quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            # aiomqtt leaves futures holding "Unexpected disconnection" unread when a
            # connection drops; the loss is already handled and said once
            if isinstance(context.get("exception"), aiomqtt.MqttError | OSError):
                return
            loop.default_exception_handler(context)

        loop.set_exception_handler(quiet)
        backoff = BACKOFF_S[0]
        while not self._closing.is_set():
            reader: asyncio.Task | None = None
            try:
                async with self._client() as client:
                    self.connections += 1
                    if self.connections > 1:
                        self._log_fn(f"reconnected to {self.settings.broker}")
                        self._logged.discard("lost")
                    self._logged.discard("unreachable")
                    self._status_sent = -1  # the broker may have lost the retained status
                    if self._on_command is not None:
                        await client.subscribe(topics.cmd(self.settings.rig), qos=1)
                        reader = asyncio.create_task(self._read(client))
                    self._connected.set()
                    self._first_attempt.set()
                    backoff = BACKOFF_S[0]
                    await self._pump(client)
                    await client.publish(topics.status(self.settings.rig),
                                         json.dumps(self._status_payload(
                                             {"state": "offline"})).encode(),
                                         qos=1, retain=True, timeout=PUBLISH_TIMEOUT_S)
                    return
            except aiomqtt.MqttCodeError as exc:
                rc = getattr(exc.rc, "value", exc.rc)
                if self.connections == 0 and rc in _AUTH_CODES:
                    s = self.settings
                    self.refusal = ConfigError(
                        f"MQTT broker {s.broker} refused the login of "
                        f"{s.broker.username or '(no user)'}: {exc}",
                        hint="check the user name in the URL and the password in "
                        "RIG_MQTT_PASSWORD or --mqtt-password-file")
                    self._first_attempt.set()
                    return
                self._lost(exc)
            except (aiomqtt.MqttError, OSError, TimeoutError) as exc:
                # aiomqtt wraps the TLS failure; an untrusted certificate never heals itself
                cert = exc if isinstance(exc, ssl.SSLCertVerificationError) else exc.__context__
                if self.connections == 0 and isinstance(cert, ssl.SSLCertVerificationError):
                    self.refusal = ConfigError(
                        f"MQTT broker {self.settings.broker}: its TLS certificate is not "
                        f"trusted ({cert.verify_message})",
                        hint="give the CA that signed it with --mqtt-ca FILE "
                        "(or [mqtt] ca_file)")
                    self._first_attempt.set()
                    return
                self._lost(exc)
            finally:
                self._connected.clear()
                if reader is not None:
                    reader.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await reader
            self._first_attempt.set()
            waited = 0.0
            while waited < backoff and not self._closing.is_set():
                await asyncio.sleep(0.05)
                waited += 0.05
            backoff = min(backoff * 2, BACKOFF_S[1])

    def _lost(self, exc: BaseException) -> None:
        key = "lost" if self.connections else "unreachable"
        self._once(key, f"{'lost' if self.connections else 'cannot reach'} the broker "
                   f"{self.settings.broker} ({exc}); telemetry is queued or dropped until it "
                   "is back, the measurement goes on")

    async def _pump(self, client: Any) -> None:
        """Send status, queued events and the power summary until closing and drained."""
        while True:
            batch: list[_Message] = []
            with self._lock:
                if self._status_version != self._status_sent:
                    batch.append(_Message(topics.status(self.settings.rig),
                                          self._status_payload(self._status), qos=1,
                                          retain=True))
                    self._status_sent = self._status_version
                while self._queue and len(batch) < BATCH:
                    batch.append(self._queue.popleft())
                if self._power_slot is not None and len(batch) < BATCH:
                    batch.append(self._power_slot)
                    self._power_slot = None
            lost = _disconnection(client)
            if not batch:
                if self._closing.is_set():
                    return
                if lost is not None and lost.done():
                    raise _lost_error(lost)
                await asyncio.sleep(IDLE_POLL_S)
                continue
            # paho sends in call order; the tasks start in creation order, so the broker
            # sees the run's events in order while their acknowledgements overlap.
            sending = asyncio.ensure_future(asyncio.gather(
                *(client.publish(m.topic, m.payload(), qos=m.qos, retain=m.retain,
                                 timeout=PUBLISH_TIMEOUT_S) for m in batch),
                return_exceptions=True))
            if lost is not None:
                # aiomqtt leaves a publish waiting out its timeout after the connection is
                # gone: notice the loss at once instead, and reconnect
                await asyncio.wait({sending, lost}, return_when=asyncio.FIRST_COMPLETED)
                if not sending.done():
                    sending.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await sending
                    for msg in batch:
                        self._count_dropped(msg)
                    self._status_sent = -1
                    raise _lost_error(lost)
            results = await sending
            failure: BaseException | None = None
            for msg, result in zip(batch, results, strict=True):
                if isinstance(result, BaseException):
                    self._count_dropped(msg)
                    if msg.retain:
                        self._status_sent = -1
                    failure = failure or result
                else:
                    self._count_published(msg)
            if failure is not None:
                raise failure

    async def _read(self, client: Any) -> None:
        async for message in client.messages:
            payload = message.payload if isinstance(message.payload, bytes) else \
                str(message.payload or "").encode()
            try:
                reply = self._on_command(payload) if self._on_command else None
            except Exception as exc:  # a handler bug answers, it does not kill the channel
                reply = {"ok": False, "reason": f"internal error: {type(exc).__name__}"}
            if reply is not None:
                self.send_reply(reply)

    def _status_payload(self, status: dict[str, Any]) -> dict[str, Any]:
        return {"rig": self.settings.rig, **status, "at": time.time(),
                "host": socket.gethostname(), "pid": os.getpid(), "version": __version__,
                "serving": self._on_command is not None}
