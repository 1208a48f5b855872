"""A simulated Otii TCP server (the Otii 3 app's, port 1905) with one Otii Arc (or Ace) that
powers and measures the shared `World`'s DUT. Simulated, not measured.

It speaks `protocols.otii` on 127.0.0.1 (a free port unless told), one thread per client, and
answers the commands the driver sends (drivers/emon/otii.py) plus a few neighbours, with the
server's own error codes: "Invalid command", "Missing key in request", "Invalid key value",
"Device not connected", "Not logged in", "No license", "Could not login", "Command failure".

- Licensing: the app is logged in (`logged_in`) or not; ``otii_login`` takes the `accounts`
  given (none by default: every login is refused, "Could not login"); an Automation license
  (id 1) must be reserved (``otii_reserve_license``) before any ``arc_*``, ``project_*`` or
  ``recording_*`` command ("No license" otherwise).
- The device: ``arc_set_main_voltage`` (0.5-5 V) sets the World's supply, ``arc_set_main``
  switches it; ``arc_set_max_current`` 0.001-5 A; ``arc_set_range`` low/high (kept, not
  modelled); an Arc samples at 4 kS/s (``arc_set_channel_samplerate`` is "Command failure" on
  it), an Ace at what it is set to (1 000-50 000 Hz here).
- A recording started at t0 (``project_start_recording``) has sample k of every analog channel
  over [t0 + k P, t0 + (k + 1) P), P = 1 / rate: ``mc`` the exact mean current of the power
  model quantised to the Arc's resolution in its range (5 nA up to 20 mA, 82 uA up to 2.7 A,
  1.5 mA above: Qoitech's figures as published in Elektor's review), ``mv`` the supply while the
  output was on during the sample (0 V otherwise), ``sp`` the mean voltage of the DUT's
  timestamp line (wired to Sense+: the supply, 0 V while the output is off or inside a pulse).
  ``i1`` (GPI1, with the expansion port enabled) holds one event per change of the timestamp
  line: its level at the recording's start, then each pulse's fall and rise and each output
  switch. Data are served only up to `World.observable_ns` while recording, up to the stop time
  after ``project_stop_recording``. Memory stays bounded: the World forgets what every channel
  has been read past, and reading it again is a "Command failure".

Faults for the tests: `drop_connections()` closes every client's socket at once (the server
keeps listening, as the app does), `refuse_logins` / `logged_in` make the login fail.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from protocols import otii as wire
from protocols.errors import ProtocolError
from virtual_bench.instrument import LoopbackServer
from virtual_bench.world import NS, World

log = logging.getLogger(__name__)

#: Current resolution of the Arc per range: (largest current in the range [A], step [A]).
ARC_RESOLUTION = ((0.020, 5e-9), (2.7, 82e-6), (5.0, 1.5e-3))
ARC_RATE_HZ = 4000
#: The rates [Hz] the simulated Ace takes (a span: the real list is not checked here).
ACE_RATE_SPAN_HZ = (1000, 50000)
DEVICE_IDS = {"Arc": "Arc512031204843494E3130393033313036",
              "Ace": "Ace512031204843494E3130393033319999"}
#: Commands that need neither a login nor a license.
_OPEN = {"otii_is_logged_in", "otii_login", "otii_logout", "otii_get_licenses",
         "otii_reserve_license", "otii_return_license", "otii_has_license"}
ANALOG = (wire.MAIN_CURRENT, wire.MAIN_VOLTAGE, wire.SENSE_PLUS)
#: Channels the Arc takes in ``arc_enable_channel`` (only some are simulated: see ANALOG).
KNOWN_CHANNELS = {"mc", "mp", "mv", "ac", "av", "sp", "sn", "vb", "vj", "tp", "rx", "i1", "i2"}


class ServerError(Exception):
    """A request the server refuses: becomes an ``error`` message."""

    def __init__(self, errorcode: str, **data: Any) -> None:
        super().__init__(errorcode)
        self.errorcode = errorcode
        self.data = data


def quantise_current(amps: np.ndarray) -> np.ndarray:
    """Round to the Arc's resolution in the range that holds each value (it auto-ranges)."""
    a = np.asarray(amps, dtype=np.float64)
    step = np.full(a.shape, ARC_RESOLUTION[-1][1])
    for top, res in reversed(ARC_RESOLUTION):
        step = np.where(np.abs(a) <= top, res, step)
    return np.round(a / step) * step


@dataclass
class Recording:
    """One recording of the simulated project."""

    recording_id: int
    t0_ns: int
    period_ns: int
    channels: set[str]
    stop_ns: int | None = None
    #: (time [ns], level) of GPI1, built up to `events_until_ns`.
    events: list[tuple[int, int]] = field(default_factory=list)
    events_until_ns: int = 0
    #: Per analog channel: the first index still readable (before it, the World forgot).
    forgotten: int = 0
    read_up_to: dict[str, int] = field(default_factory=dict)


class SimOtii(LoopbackServer):
    """The Otii app's TCP server with one Arc/Ace powering the World's DUT."""

    def __init__(self, world: World, *, device_type: str = "Arc", logged_in: bool = True,
                 accounts: dict[str, str] | None = None) -> None:
        if device_type not in DEVICE_IDS:
            raise ValueError(f"device type {device_type!r} is not Arc or Ace")
        self.world = world
        self.device_type = device_type
        self.device_id = DEVICE_IDS[device_type]
        self.logged_in = logged_in
        self.accounts = dict(accounts or {})
        self.user = "lab" if logged_in else ""
        self.license_reserved_to = ""
        self.lock = threading.RLock()
        self.commands_seen: list[str] = []
        self.main_voltage = 3.3
        self.max_current = 0.5
        self.range = "low"
        self.main_on = False
        self.exp_port = False
        self.exp_voltage = 3.3
        self.enabled: set[str] = set()
        self.rate_hz = ARC_RATE_HZ
        self.project_id: int | None = None
        self.in_project = False
        self.recordings: list[Recording] = []
        #: Output switches (time, on) for the voltage channels.
        self.output_log: list[tuple[int, bool]] = []
        self._listener: socket.socket | None = None
        self._clients: list[socket.socket] = []
        self._init_threads()
        self.port = 0
        self._handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
            name[4:]: getattr(self, name) for name in dir(self) if name.startswith("cmd_")}

    # -- life cycle ---------------------------------------------------------------------------
    def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1:`port` (0 picks a free port)."""
        self._listen(port, 4, "sim-otii-accept")

    @property
    def address(self) -> str:
        """``host:port`` as the driver takes it."""
        return f"127.0.0.1:{self.port}"

    #: The virtual bench lists a network instrument's `resource` as its port.
    resource = address

    def close(self) -> None:
        """Stop listening and serving; safe to call twice."""
        self._closing.set()
        self.drop_connections()
        self._stop_listening()

    def drop_connections(self) -> None:
        """Close every client's connection now (the app stays up and keeps its state)."""
        with self.lock:
            clients, self._clients = self._clients, []
        for conn in clients:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                conn.close()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            with self.lock:
                self._clients.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True,
                                      name="sim-otii-client")
            thread.start()
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        splitter = wire.MessageSplitter()
        hello = {"type": "information", "info": "connected",
                 "data": {"otii_version": "3.5.5", "protocol_version": "0.1",
                          "server": "otii-server (simulated)"}}
        with contextlib.suppress(OSError), conn:
            conn.sendall(wire.encode(hello))
            while not self._closing.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                try:
                    messages = splitter.feed(data)
                except ProtocolError as exc:
                    conn.sendall(wire.encode(wire.error("", "", "Not able to parse request",
                                                        {"parse_error": str(exc)})))
                    return
                for msg in messages:
                    conn.sendall(wire.encode(self.handle(msg)))

    # -- requests -------------------------------------------------------------------------------
    def handle(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The answer to one request message."""
        cmd = str(msg.get("cmd", ""))
        trans_id = str(msg.get("trans_id", ""))
        data = msg.get("data") or {}
        with self.lock:
            self.commands_seen.append(cmd)
            try:
                if msg.get("type") != "request" or not isinstance(data, dict):
                    raise ServerError("Not able to parse request")
                handler = self._handlers.get(cmd)
                if handler is None:
                    raise ServerError(wire.INVALID_COMMAND)
                if cmd not in _OPEN:
                    if not self.logged_in:
                        raise ServerError(wire.NOT_LOGGED_IN)
                    if self.license_reserved_to != self.user:
                        raise ServerError(wire.NO_LICENSE)
                if cmd.startswith("arc_") and _need(data, "device_id") != self.device_id:
                    raise ServerError("Device not connected", device_id=data["device_id"])
                answer = handler(data)
            except ServerError as exc:
                return wire.error(cmd, trans_id, exc.errorcode, exc.data)
        return wire.response(cmd, trans_id, answer)

    # licensing
    def cmd_otii_is_logged_in(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"logged_in": self.logged_in}

    def cmd_otii_login(self, data: dict[str, Any]) -> None:
        user, password = _need(data, "username"), _need(data, "password")
        if self.accounts.get(user) != password:
            raise ServerError(wire.COULD_NOT_LOGIN)
        self.logged_in, self.user = True, user

    def cmd_otii_logout(self, data: dict[str, Any]) -> None:
        self.logged_in, self.user, self.license_reserved_to = False, "", ""

    def cmd_otii_get_licenses(self, data: dict[str, Any]) -> dict[str, Any]:
        if not self.logged_in:
            raise ServerError(wire.NOT_LOGGED_IN)
        return {"licenses": [{"id": 1, "type": "Automation", "available": True,
                              "reserved_to": self.license_reserved_to,
                              "hostname": "sim" if self.license_reserved_to else ""}]}

    def cmd_otii_reserve_license(self, data: dict[str, Any]) -> None:
        if _need(data, "license_id") != 1 or self.license_reserved_to not in ("", self.user):
            raise ServerError("License could not be reserved")
        self.license_reserved_to = self.user

    def cmd_otii_return_license(self, data: dict[str, Any]) -> None:
        if _need(data, "license_id") != 1 or self.license_reserved_to != self.user:
            raise ServerError("License could not be returned")
        self.license_reserved_to = ""

    def cmd_otii_has_license(self, data: dict[str, Any]) -> dict[str, Any]:
        kind = _need(data, "license_type")
        return {"has_license": bool(self.logged_in and kind == "Automation"
                                    and self.license_reserved_to == self.user)}

    # devices and projects
    def cmd_otii_get_devices(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"devices": [{"device_id": self.device_id, "name": f"{self.device_type} I",
                             "type": self.device_type}]}

    def cmd_arc_get_version(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"hw_version": f"{self.device_type} (simulated)", "fw_version": "1.1.7"}

    def cmd_arc_add_to_project(self, data: dict[str, Any]) -> None:
        self.in_project = True

    def cmd_otii_get_active_project(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"project_id": -1 if self.project_id is None else self.project_id}

    def cmd_otii_create_project(self, data: dict[str, Any]) -> dict[str, Any]:
        self.project_id = 1
        return {"project_id": self.project_id}

    # the device
    def cmd_arc_set_main_voltage(self, data: dict[str, Any]) -> None:
        self.main_voltage = _number(data, "value", 0.5, 5.0)
        self.world.set_supply(self.main_voltage)

    def cmd_arc_get_main_voltage(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.main_voltage}

    def cmd_arc_set_max_current(self, data: dict[str, Any]) -> None:
        self.max_current = _number(data, "value", 0.001, 5.0)

    def cmd_arc_get_max_current(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.max_current}

    def cmd_arc_set_range(self, data: dict[str, Any]) -> None:
        value = _need(data, "range")
        if value not in ("low", "high"):
            raise ServerError(wire.INVALID_KEY_VALUE, key="range", value=value)
        self.range = value

    def cmd_arc_get_range(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"range": self.range}

    def cmd_arc_enable_exp_port(self, data: dict[str, Any]) -> None:
        self.exp_port = bool(_need(data, "enable"))

    def cmd_arc_set_exp_voltage(self, data: dict[str, Any]) -> None:
        self.exp_voltage = _number(data, "value", 1.2, 5.0)

    def cmd_arc_enable_channel(self, data: dict[str, Any]) -> None:
        channel = _need(data, "channel")
        if channel not in KNOWN_CHANNELS:
            raise ServerError(wire.INVALID_KEY_VALUE, key="channel", value=channel)
        if _need(data, "enable"):
            self.enabled.add(channel)
        else:
            self.enabled.discard(channel)

    def cmd_arc_get_channel_samplerate(self, data: dict[str, Any]) -> dict[str, Any]:
        _need(data, "channel")
        return {"value": self.rate_hz}

    def cmd_arc_set_channel_samplerate(self, data: dict[str, Any]) -> None:
        _need(data, "channel")
        if self.device_type == "Arc":
            raise ServerError(wire.COMMAND_FAILURE,
                              message="sample rate can only be set on an Ace")
        rate = _number(data, "value", *ACE_RATE_SPAN_HZ)
        if rate != int(rate) or any(r.stop_ns is None for r in self.recordings):
            raise ServerError(wire.INVALID_KEY_VALUE, key="value", value=rate)
        self.rate_hz = int(rate)

    def cmd_arc_set_main(self, data: dict[str, Any]) -> None:
        on = bool(_need(data, "enable"))
        if on != self.main_on:
            self.main_on = on
            self.output_log.append((self.world.power(on), on))

    def cmd_arc_get_main(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.main_on}

    # recordings
    def _project(self, data: dict[str, Any]) -> None:
        if self.project_id is None or _need(data, "project_id") != self.project_id:
            raise ServerError("Project does not exist")

    def cmd_project_start_recording(self, data: dict[str, Any]) -> None:
        self._project(data)
        if not self.in_project:
            raise ServerError(wire.COMMAND_FAILURE, message="no device in the project")
        self._stop_running()
        period = NS // self.rate_hz
        channels = set(self.enabled)
        if not self.exp_port:
            channels -= set(wire.DIGITAL_CHANNELS)  # the digital pins need the expansion port
        self.recordings.append(Recording(len(self.recordings) + 1, self.world.clock.now_ns(),
                                         period, channels))

    def cmd_project_stop_recording(self, data: dict[str, Any]) -> None:
        self._project(data)
        self._stop_running()

    def _stop_running(self) -> None:
        for rec in self.recordings:
            if rec.stop_ns is None:
                rec.stop_ns = max(rec.t0_ns, self.world.observable_ns())

    def cmd_project_get_last_recording(self, data: dict[str, Any]) -> dict[str, Any]:
        self._project(data)
        if not self.recordings:
            return {"recording_id": -1}
        rec = self.recordings[-1]
        return {"recording_id": rec.recording_id, "name": f"Recording {rec.recording_id}",
                "measurements": [{"device_id": self.device_id, "channel": c}
                                 for c in sorted(rec.channels)]}

    def cmd_recording_is_running(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"running": self._recording(data).stop_ns is None}

    def _recording(self, data: dict[str, Any]) -> Recording:
        rid = _need(data, "recording_id")
        for rec in self.recordings:
            if rec.recording_id == rid:
                return rec
        raise ServerError(wire.INVALID_KEY_VALUE, key="recording_id", value=rid)

    def _channel(self, rec: Recording, data: dict[str, Any]) -> str:
        if _need(data, "device_id") != self.device_id:
            raise ServerError("Device not connected", device_id=data["device_id"])
        channel = _need(data, "channel")
        if channel not in rec.channels:
            raise ServerError(wire.COMMAND_FAILURE, message=f"no {channel} data in recording")
        if channel not in (*ANALOG, *wire.DIGITAL_CHANNELS):
            raise ServerError(wire.COMMAND_FAILURE, message=f"{channel} is not simulated")
        return channel

    def _until(self, rec: Recording) -> int:
        return self.world.observable_ns() if rec.stop_ns is None else rec.stop_ns

    def cmd_recording_get_channel_data_count(self, data: dict[str, Any]) -> dict[str, Any]:
        rec = self._recording(data)
        channel = self._channel(rec, data)
        if channel in wire.DIGITAL_CHANNELS:
            self._extend_events(rec)
            return {"count": len(rec.events)}
        return {"count": max(0, (self._until(rec) - rec.t0_ns) // rec.period_ns)}

    def cmd_recording_get_channel_data(self, data: dict[str, Any]) -> dict[str, Any]:
        rec = self._recording(data)
        channel = self._channel(rec, data)
        index = int(_number(data, "index", 0, 2**62))
        count = int(_number(data, "count", 0, 2**62))
        if channel in wire.DIGITAL_CHANNELS:
            self._extend_events(rec)
            picked = rec.events[index : index + count]
            return {"data_type": "digital", "values": [
                {"timestamp": (t - rec.t0_ns) / NS, "value": bool(v)} for t, v in picked]}
        available = max(0, (self._until(rec) - rec.t0_ns) // rec.period_ns)
        count = max(0, min(count, available - index))
        if index < rec.forgotten:
            raise ServerError(wire.COMMAND_FAILURE, message="data before sample "
                              f"{rec.forgotten} are no longer kept by the simulator")
        starts = rec.t0_ns + (index + np.arange(count, dtype=np.int64)) * rec.period_ns
        values = self._analog(channel, starts, rec.period_ns) if count else np.empty(0)
        rec.read_up_to[channel] = max(rec.read_up_to.get(channel, 0), index + count)
        self._forget(rec)
        return {"data_type": "analog", "timestamp": index * rec.period_ns / NS,
                "interval": rec.period_ns / NS, "values": values.tolist()}

    # -- the samples ----------------------------------------------------------------------------
    def _analog(self, channel: str, starts: np.ndarray, period: int) -> np.ndarray:
        with self.world.lock:
            volts = self.world.supply_v
        if channel == wire.MAIN_CURRENT:
            return quantise_current(self.world.mean_current(starts, period))
        a, b = int(starts[0]), int(starts[-1]) + period
        off = self._off_intervals(a, b)
        if channel == wire.MAIN_VOLTAGE:  # the supply wherever the output was on in the sample
            low_time = _covered(off, starts, period)
            return np.where(low_time < period, volts, 0.0)
        lows = _merged(off + self.world.pulses_between(a, b))  # Sense+: the timestamp line
        return volts * (1.0 - _covered(lows, starts, period) / period)

    def _off_intervals(self, a: int, b: int) -> list[tuple[int, int]]:
        """Spans of [a, b) in which the output was off."""
        out: list[tuple[int, int]] = []
        off_from: int | None = a
        for t, on in self.output_log:
            if on and off_from is not None:
                out.append((off_from, t))
                off_from = None
            elif not on and off_from is None:
                off_from = t
        if off_from is not None:
            out.append((off_from, b))
        return [(max(lo, a), min(hi, b)) for lo, hi in out if hi > a and lo < b]

    def _level(self, t: int) -> int:
        """The timestamp line at `t`: high while the output is on and outside a pulse."""
        on = False
        for ts, state in self.output_log:
            if ts <= t:
                on = state
        if not on:
            return 0
        return 0 if self.world.pulses_between(t, t + 1) else 1

    def _extend_events(self, rec: Recording) -> None:
        """GPI1's events over [what was reported, what may be reported now).

        Half-open, like the analog samples: an out-of-process DUT's horizon is the time it
        began work at, and it may declare a pulse at exactly that time after this has run.
        """
        until = self._until(rec)
        a = rec.events_until_ns
        if not rec.events:
            rec.events.append((rec.t0_ns, self._level(rec.t0_ns)))
            a = rec.t0_ns
        if until <= a:
            return
        times = {t for t, _ in self.output_log if a <= t < until}
        for fall, rise in self.world.pulses_between(a, until):
            times.update(x for x in (fall, rise) if a <= x < until)
        for t in sorted(times):
            level = self._level(t)
            if level != rec.events[-1][1]:
                rec.events.append((t, level))
        rec.events_until_ns = until

    def _forget(self, rec: Recording) -> None:
        """Let the World drop history every channel has been read past (bounded memory)."""
        analog = [c for c in rec.channels if c in ANALOG]
        if not analog or any(c not in rec.read_up_to for c in analog):
            return
        index = min(rec.read_up_to[c] for c in analog)
        t = rec.t0_ns + index * rec.period_ns
        if any(c in rec.channels for c in wire.DIGITAL_CHANNELS):
            t = min(t, rec.events_until_ns)
        if t - (rec.t0_ns + rec.forgotten * rec.period_ns) >= NS:
            self.world.forget_before(t)
            rec.forgotten = max(rec.forgotten, (t - rec.t0_ns) // rec.period_ns)


def _need(data: dict[str, Any], key: str) -> Any:
    if key not in data:
        raise ServerError("Missing key in request", key=key)
    return data[key]


def _number(data: dict[str, Any], key: str, lo: float, hi: float) -> float:
    value = _need(data, key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ServerError("Invalid key type", key=key, expected_type="number",
                          received_type=type(value).__name__)
    if not lo <= value <= hi:
        raise ServerError(wire.INVALID_KEY_VALUE, key=key, value=value)
    return float(value)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _covered(spans: list[tuple[int, int]], starts: np.ndarray, period: int) -> np.ndarray:
    """How long [s, s + period) lies inside the (disjoint) `spans`, for each start [ns]."""
    if not spans:
        return np.zeros(len(starts))
    x = np.asarray(_merged(spans), dtype=np.float64).ravel()
    total = np.concatenate(([0.0], np.cumsum(x[1::2] - x[0::2])))
    y = np.empty(len(x))
    y[0::2], y[1::2] = total[:-1], total[1:]
    bounds = np.concatenate((starts, [starts[-1] + period])).astype(np.float64)
    return np.diff(np.interp(bounds, x, y))


__all__ = ["SimOtii", "quantise_current"]
