"""Qoitech Otii Arc / Ace through the Otii TCP server (the Otii 3 desktop app, or otii_server),
speaking its JSON protocol (`protocols.otii`) over one TCP connection: our own client, not
Qoitech's otii_tcp_client.

Address: ``host[:port][/device]`` (port 1905 by default; ``device``: a device id or name when
the server sees more than one Arc/Ace).

Connecting. The server says who it is (an ``information`` message), then: ``otii_is_logged_in``;
if not, ``otii_login`` with ``OTII_USERNAME`` / ``OTII_PASSWORD`` from the environment (the
Qoitech clients' convention; a refused login is a `DeviceError` naming the user);
``otii_has_license`` "Automation", and if not, ``otii_get_licenses`` + ``otii_reserve_license``
of a free license that includes Automation (returned, and a login made here logged out, at
`close()`); ``otii_get_devices`` (Arc, Ace); ``arc_get_version``; the active project
(``otii_get_active_project``, else ``otii_create_project``) and ``arc_add_to_project``.

Configuring. ``arc_set_main_voltage`` then ``arc_get_main_voltage`` (the read-back voltage is
checked against the bench limit too), ``arc_set_max_current`` (the Otii cuts its output above it),
``arc_set_range`` "low" (the Otii auto-ranges; "high" would force the high range and lose the
low range's resolution), ``arc_enable_channel`` for ``mc`` (main current), ``mv`` (main voltage)
and the timestamp line's channel, and the sample rate: an Ace takes
``arc_set_channel_samplerate``; an Arc samples at a fixed rate (4 kS/s), read with
``arc_get_channel_samplerate`` and a different request is refused.

The timestamp line (``timestamp_input``):

- ``"gpio"`` (default): the DUT's timestamp GPIO on the expansion port's GPI1 (``i1``);
  ``arc_enable_exp_port`` and ``arc_set_exp_voltage`` (the digital I/O level, the DUT's supply
  voltage, at least 1.2 V) first. A digital channel reports each change of the input with its
  time, not samples: a sample reads low when the input was low at any time within its period,
  so a pulse far shorter than a sample still marks the sample that holds it. Until the input has
  been seen high once, it reads high (an unpowered DUT holds its line at 0 V).
- ``"aux"``: the line wired to the Sense+ input (``sp``), an analog voltage sampled with the
  current and thresholded with hysteresis (`aux_line.LineThreshold`). Sense+ averages each
  sample's period: hold the timestamp low for at least two sample periods (500 us on an Arc).
  4-wire sensing is then not available.

Recording. ``project_start_recording``, then ``project_get_last_recording`` for its id; a worker
thread polls the running recording (``recording_get_channel_data_count``, then
``recording_get_channel_data`` in blocks of at most 40 000 values, every ``POLL_S``) and delivers
`Chunk`s. The GPI's events are read after the analog count, and the last ``EVENT_LAG_S`` of
samples are held back while recording, so an edge the server files a little after the samples
around it still lands in its sample. ``project_stop_recording`` at `stop()`, then the rest is
read. Every block's timestamp must continue the sample grid (index x interval): a block that
does not is a `ProtocolError`, never a silent shift. The data stay in the Otii project too (the
app's own export, e.g. ``project_save``, is left to the lab).

Faults. A reply that is an ``error`` is an `OtiiServerError` naming the command and the server's
errorcode. A connection the server closes (app quit, network) ends the recording at once
(`fault`); `power_off()` then reconnects to switch the main output off (the app keeps the output
on when a client goes away) and stops the recording.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from drivers.emon import check_current_range, ranges
from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy, Spec
from drivers.emon.aux_line import LineThreshold
from drivers.emon.base import (
    AcquisitionThread,
    Chunk,
    ChunkCallback,
    EnergyMonitor,
    check_voltage,
    identifies_as_simulator,
)
from drivers.errors import DeviceError, DeviceTimeout, PortError, VoltageLimitError
from protocols import otii as wire
from protocols.errors import ProtocolError

log = logging.getLogger(__name__)

#: Host seconds between two polls of the running recording.
POLL_S = 0.05
#: Seconds of samples held back while recording, for GPI events filed late by the server.
EVENT_LAG_S = 0.05
#: Seconds to wait for the answer to one request (a data block of 40 000 values included).
REPLY_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 5.0
#: Device types the driver drives (``otii_get_devices``).
DEVICE_TYPES = ("Arc", "Ace")
#: The Arc's fixed main-channel sample rate [Hz].
ARC_RATE_HZ = 4000
#: Lowest digital I/O voltage of the expansion port [V] (``arc_set_exp_voltage``: 1.2-5 V).
EXP_VOLTAGE_MIN_V = 1.2
#: License types that include Automation (what the TCP API needs), as the server names them.
AUTOMATION_LICENSES = ("Automation", "All", "Admin", "Enterprise")
#: Where the timestamp line enters: the GPI1 digital input, or the Sense+ analog input.
TIMESTAMP_INPUTS = {"gpio": wire.GPI1, "aux": wire.SENSE_PLUS}
USERNAME_ENV = "OTII_USERNAME"
PASSWORD_ENV = "OTII_PASSWORD"
_SERVER_HINT = ("check that the Otii 3 app (or otii_server) runs with its TCP server enabled "
                f"(default port {wire.DEFAULT_PORT}) and that the address is right")


#: Qoitech's page the low-range figures were read on (first-hand, 2026-11-28).
QOITECH_ACCURACY_PAGE = ("Qoitech blog 'How accurate is your low current measurement?' "
                         "(qoitech.com/?p=4659), main channel, low currents")
#: Where the rest was looked for.
OTII_SEARCHED = (
    "the same Qoitech page (low range only); docs.qoitech.com user manual pages; docs/pages "
    "search 'Otii Arc accuracy', 'Otii Arc technical specifications current measurement "
    "accuracy high range'; a third-party article's range limits (Elektor) are not taken")
#: Main-channel current accuracy in the low range, per model, as Qoitech publishes it.
OTII_LOW_RANGE = {
    # Otii Arc: ±(0.1 % + 50 nA) (QOITECH_ACCURACY_PAGE).
    "Arc": Spec(gain=0.001, offset=50e-9, source=f"{QOITECH_ACCURACY_PAGE}: Otii Arc "
                                                 "±(0.1 % + 50 nA)"),
    # Otii Ace: ±(0.05 % + 25 nA) (QOITECH_ACCURACY_PAGE).
    "Ace": Spec(gain=0.0005, offset=25e-9, source=f"{QOITECH_ACCURACY_PAGE}: Otii Ace "
                                                   "±(0.05 % + 25 nA)"),
}


def otii_accuracy(model: str | None, *, measures_voltage: bool = True) -> MonitorAccuracy:
    """An Otii `model` ("Arc", "Ace"; None before the device is known): its low range's
    published figure; the high range, the voltage and the clock not published."""
    low: Spec | NotPublished = OTII_LOW_RANGE.get(model or "", NotPublished(
        what=f"Otii current accuracy of model {model!r}",
        searched=f"{QOITECH_ACCURACY_PAGE} (figures for the Arc and the Ace only)"))
    name = f"Otii {model}" if model else "Otii"
    return MonitorAccuracy(
        current_ranges=(
            # Neither range's extent (the switch-over current) is published by Qoitech.
            RangeAccuracy("low", None, low),
            RangeAccuracy("high", None, NotPublished(
                what=f"{name} current accuracy in the high range", searched=OTII_SEARCHED)),
        ),
        voltage=(NotPublished(what=f"{name} main voltage measurement accuracy",
                              searched=OTII_SEARCHED) if measures_voltage else None),
        voltage_set=NotPublished(what=f"{name} main output voltage accuracy",
                                 searched=OTII_SEARCHED),
        clock=NotPublished(what=f"{name} sample clock tolerance", searched=OTII_SEARCHED),
        notes="The Otii auto-ranges between its low and high ranges (arc_set_range low) and "
              "the rig does not record which range a sample was in; Qoitech publishes no "
              "switch-over current, so a reading's range cannot be told from its value and "
              "the low-range figure applies only where the range is known to be low.",
    )


class OtiiServerError(DeviceError):
    """The server answered a request with an ``error`` message."""

    def __init__(self, message: str, *, cmd: str, errorcode: str, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.cmd = cmd
        self.errorcode = errorcode


class OtiiConnection:
    """One TCP connection to an Otii server: requests out, their answers back, in order."""

    def __init__(self, host: str, port: int, *, timeout_s: float = REPLY_TIMEOUT_S,
                 sock: socket.socket | None = None) -> None:
        self.host, self.port = host, port
        self.where = f"{host}:{port}"
        self.timeout_s = timeout_s
        self.server_info: dict[str, Any] = {}
        self._trans_id = 0
        self._splitter = wire.MessageSplitter()
        self._inbox: list[dict[str, Any]] = []
        self._lock = threading.RLock()
        self.closed = False
        if sock is None:
            try:
                sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
            except OSError as exc:
                raise PortError(f"otii: cannot connect to the Otii TCP server at {self.where}: "
                                f"{exc.strerror or exc}", hint=_SERVER_HINT) from exc
        self.sock = sock
        self.sock.settimeout(timeout_s)
        hello = self._receive("the greeting")
        if hello.get("type") != "information":
            self.close()
            raise ProtocolError(f"otii: {self.where} greeted with {str(hello)[:80]}, not an "
                                "Otii server's information message")
        self.server_info = dict(hello.get("data") or {})

    def request(self, cmd: str, data: dict[str, Any] | None = None, *,
                timeout_s: float | None = None) -> dict[str, Any]:
        """Send `cmd`, return its answer's ``data`` ({} when it has none)."""
        with self._lock:
            if self.closed:
                raise DeviceError(f"otii: {cmd}: the connection to {self.where} is closed",
                                  hint=_SERVER_HINT)
            self._trans_id += 1
            trans_id = str(self._trans_id)
            try:
                self.sock.sendall(wire.encode(wire.request(cmd, trans_id, data)))
            except OSError as exc:
                self.close()
                raise DeviceError(f"otii: sending {cmd} to {self.where} failed: {exc}",
                                  hint=_SERVER_HINT) from exc
            deadline = time.monotonic() + (timeout_s or self.timeout_s)
            while True:
                msg = self._receive(cmd, deadline)
                kind = msg.get("type")
                if kind in ("information", "progress"):
                    continue  # no answer to anything
                if msg.get("trans_id") != trans_id:
                    raise ProtocolError(f"otii: answer to transaction {msg.get('trans_id')!r} "
                                        f"while waiting for {cmd} ({trans_id})")
                if kind == "error":
                    raise self._error(cmd, msg)
                if kind != "response":
                    raise ProtocolError(f"otii: {cmd}: unexpected message type {kind!r}")
                payload = msg.get("data")
                return payload if isinstance(payload, dict) else {}

    def _error(self, cmd: str, msg: dict[str, Any]) -> OtiiServerError:
        code = str(msg.get("errorcode", "?"))
        detail = msg.get("data") or {}
        extra = detail.get("message") if isinstance(detail, dict) else None
        text = f"otii: the server refused {cmd}: {code}" + (f" ({extra})" if extra else "")
        hint = {
            wire.NO_LICENSE: "reserve an Automation license for this user in the Otii app",
            wire.NOT_LOGGED_IN: f"log in in the Otii app, or set {USERNAME_ENV}/{PASSWORD_ENV}",
        }.get(code, "check the value against the Otii's ranges")
        return OtiiServerError(text, cmd=cmd, errorcode=code, hint=hint)

    def _receive(self, what: str, deadline: float | None = None) -> dict[str, Any]:
        """The next message; `DeviceTimeout` past `deadline`, `DeviceError` if the server
        closes the connection."""
        deadline = deadline or time.monotonic() + self.timeout_s
        while not self._inbox:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeviceTimeout(f"otii: no answer to {what} from {self.where} within "
                                    f"{self.timeout_s:g} s", hint=_SERVER_HINT)
            try:
                self.sock.settimeout(left)
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError as exc:
                self.close()
                raise DeviceError(f"otii: the connection to {self.where} failed during {what}: "
                                  f"{exc}", hint=_SERVER_HINT) from exc
            if not data:
                self.close()
                raise DeviceError(f"otii: the Otii TCP server at {self.where} closed the "
                                  f"connection during {what}", hint=_SERVER_HINT)
            self._inbox += self._splitter.feed(data)
        return self._inbox.pop(0)

    def close(self) -> None:
        """Close the socket; safe to call twice."""
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.close()


def parse_address(address: str) -> tuple[str, int, str | None]:
    """``host[:port][/device]`` -> (host, port, device or None)."""
    text = address.strip()
    device = None
    if "/" in text:
        text, _, device = text.partition("/")
        device = device.strip() or None
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = text, str(wire.DEFAULT_PORT)
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536:
        raise DeviceError(f"otii: address {address!r} is not host[:port][/device]",
                          hint=f"e.g. 127.0.0.1:{wire.DEFAULT_PORT}")
    return host, port, device


@dataclass
class GpiLine:
    """A digital input's change events -> per-sample GPIO bits, chunk by chunk (vectorised).

    Sample k covers [t0 + k * dt, t0 + (k + 1) * dt); it reads low (0) when the input was low at
    any time within it. Until the input has been high once, lows are ignored (see the module).
    """

    t0: float = 0.0
    dt: float = 1.0
    level: int = 1
    armed: bool = False
    times: np.ndarray = field(default_factory=lambda: np.empty(0))
    levels: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.uint8))

    def add(self, times: np.ndarray, levels: np.ndarray) -> None:
        """Events read from the server (in time order, after those added before)."""
        if not self.armed and levels.size:
            high = np.flatnonzero(levels == 1)
            if high.size == 0:
                return  # still unpowered: nothing counts yet
            self.armed = True
            times, levels = times[high[0]:], levels[high[0]:]
        self.times = np.concatenate((self.times, times))
        self.levels = np.concatenate((self.levels, levels))

    def bits(self, first: int, n: int) -> np.ndarray:
        """Bits of samples [first, first + n); consumes the events before their end."""
        start, end = self.t0 + first * self.dt, self.t0 + (first + n) * self.dt
        used = int(np.searchsorted(self.times, end, side="left"))
        times, levels = self.times[:used], self.levels[:used]
        self.times, self.levels = self.times[used:], self.levels[used:]
        # Segments of constant level: [start or event, next event or end).
        seg_t = np.concatenate(([start], np.maximum(times, start)))
        seg_v = np.concatenate(([self.level], levels))
        seg_end = np.concatenate((seg_t[1:], [end]))
        if seg_v.size:
            self.level = int(seg_v[-1])
        low = seg_v == 0
        out = np.ones(n, dtype=np.uint8)
        if not low.any():
            return out
        # Sample positions from the grid's origin (not from `start`, which carries the rounding
        # of first x dt); an event within a millionth of a sample of a boundary is on it.
        k0 = np.floor((seg_t[low] - self.t0) / self.dt + 1e-6).astype(np.int64) - first
        k1 = np.ceil((seg_end[low] - self.t0) / self.dt - 1e-6).astype(np.int64) - first
        # [k0, k1): the samples a low segment overlaps (a zero-length one, an event pair at
        # one time, still marks the sample that holds it).
        k1 = np.maximum(k1, k0 + 1)
        cover = np.zeros(n + 1, dtype=np.int64)
        np.add.at(cover, np.clip(k0, 0, n), 1)
        np.add.at(cover, np.clip(k1, 0, n), -1)
        out[np.cumsum(cover[:n]) > 0] = 0
        return out


class Otii(EnergyMonitor):
    """An Otii Arc or Ace behind the Otii TCP server: supply, main current/voltage, timestamp
    line on GPI1 or Sense+, streamed from a running recording."""

    driver = "otii"
    powers_dut = True
    sees_every_edge = True

    @classmethod
    def measures_voltage_with(cls, *, measure_voltage: bool = True, **options: Any) -> bool:
        """With mv recorded (the default; it falls back to the read-back voltage when mv
        samples off the current's grid)."""
        return measure_voltage

    def __init__(self, connection: OtiiConnection, *, voltage_limit_v: float,
                 simulated: bool = False, address: str = "", device: str | None = None,
                 timestamp_input: str = "gpio", current_limit_a: float = 0.1,
                 measure_voltage: bool = True,
                 credentials: tuple[str, str] | None = None,
                 connect: Callable[[], OtiiConnection] | None = None) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v)
        if timestamp_input not in TIMESTAMP_INPUTS:
            raise DeviceError(f"otii: timestamp input {timestamp_input!r} is not "
                              f"{' or '.join(TIMESTAMP_INPUTS)}",
                              hint='"gpio": GPI1 of the expansion port; "aux": Sense+')
        if not 0.001 <= current_limit_a <= 5.0:
            raise DeviceError(f"otii: current limit {current_limit_a:g} A is outside 0.001-5 A",
                              hint="the Otii's max current (arc_set_max_current) takes 1 mA-5 A")
        self.conn = connection
        self.address = address
        self.simulated = simulated
        self.device_wanted = device
        self.timestamp_input = timestamp_input
        self.line_channel = TIMESTAMP_INPUTS[timestamp_input]
        self.current_limit_a = current_limit_a
        self.measure_voltage = measure_voltage
        self.credentials = credentials
        #: Opens a new connection to the same server (power_off after a dropped connection).
        self._connect = connect
        self.device_id: str | None = None
        self.device: dict[str, Any] = {}
        self.version: dict[str, Any] = {}
        self.project_id: int | None = None
        self.recording_id: int | None = None
        self._logged_in_here = False
        self._reserved: list[int] = []
        self._voltage_v: float | None = None
        self._rate_hz: float | None = None
        self._settings: dict[str, Any] = {}
        self._recording = AcquisitionThread("otii", "recording")
        self._on_chunk: ChunkCallback | None = None
        self._running = False
        self._closed = False
        self._output_on = False

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def open(cls, address: str, *, voltage_limit_v: float, simulated: bool = False,
             current_range: str = ranges.AUTO, **options: Any) -> Otii:
        """Connect to the Otii server at `address`, log in / reserve a license if needed and
        pick the device. `current_range` must be "auto" (the Otii auto-ranges)."""
        check_current_range(cls.driver, current_range)
        host, port, device = parse_address(address)

        def connect() -> OtiiConnection:
            return OtiiConnection(host, port)

        conn = connect()
        try:
            monitor = cls(conn, voltage_limit_v=voltage_limit_v, simulated=simulated,
                          address=address, device=device, connect=connect, **options)
        except BaseException:
            conn.close()
            raise
        return cls._connect_or_close(monitor)

    def connect(self) -> None:
        """Log in and reserve a license if needed, pick the device, find the project."""
        self._log_in(self.conn)
        self._license(self.conn)
        self._pick_device()
        # The app keeps the output on when a client goes away: a crashed session may have
        # left the DUT powered at another bench's voltage. Off first, as the PPK2 does.
        self._arc("arc_set_main", enable=False)
        self._output_on = False
        self.version = self._arc("arc_get_version")
        # The virtual bench's Arc names its hardware "Arc (simulated)".
        self.simulated = self.simulated or identifies_as_simulator(
            str(self.version.get("hw_version", "")))
        self._project()

    def _log_in(self, conn: OtiiConnection) -> None:
        if conn.request("otii_is_logged_in").get("logged_in"):
            return
        user, password = self.credentials or (os.environ.get(USERNAME_ENV),
                                              os.environ.get(PASSWORD_ENV))
        if not user or not password:
            raise DeviceError(f"otii: the Otii software at {conn.where} is not logged in",
                              hint=f"log in in the Otii app, or set {USERNAME_ENV} and "
                              f"{PASSWORD_ENV} (your Qoitech account)")
        try:
            conn.request("otii_login", {"username": user, "password": password})
        except OtiiServerError as exc:
            raise DeviceError(f"otii: the Otii server at {conn.where} refused the login of "
                              f"{user!r}: {exc.errorcode}",
                              hint=f"check {USERNAME_ENV}/{PASSWORD_ENV} (your Qoitech "
                              "account) and that the Otii app can reach Qoitech's license "
                              "server") from None
        self._logged_in_here = True

    def _license(self, conn: OtiiConnection) -> None:
        if conn.request("otii_has_license", {"license_type": "Automation"}).get("has_license"):
            return
        licenses = conn.request("otii_get_licenses").get("licenses") or []
        free = [lic for lic in licenses if isinstance(lic, dict) and lic.get("available")
                and not lic.get("reserved_to") and lic.get("type") in AUTOMATION_LICENSES]
        if not free:
            raise DeviceError("otii: no free license with Automation (the TCP API) for this "
                              "user", hint="return one in the Otii app (User management) or "
                              "buy the Automation Toolbox")
        conn.request("otii_reserve_license", {"license_id": free[0]["id"]})
        self._reserved.append(free[0]["id"])

    def _pick_device(self) -> None:
        found = self.conn.request("otii_get_devices", {"timeout": 3},
                                  timeout_s=REPLY_TIMEOUT_S + 3).get("devices") or []
        devices = [d for d in found if isinstance(d, dict) and d.get("type") in DEVICE_TYPES]
        if self.device_wanted:
            devices = [d for d in devices
                       if self.device_wanted in (d.get("device_id"), d.get("name"))]
        names = ", ".join(f"{d.get('name')} ({d.get('device_id')})" for d in devices)
        if not devices:
            wanted = f" {self.device_wanted!r}" if self.device_wanted else ""
            raise DeviceError(f"otii: no Otii Arc/Ace{wanted} at {self.conn.where}",
                              hint="connect it by USB and check the Otii app sees it")
        if len(devices) > 1:
            raise DeviceError(f"otii: {len(devices)} devices at {self.conn.where}: {names}",
                              hint="name one in the address: host:port/<device id or name>")
        self.device = devices[0]
        self.device_id = str(devices[0]["device_id"])

    def _project(self) -> None:
        pid = self.conn.request("otii_get_active_project").get("project_id", -1)
        if pid is None or pid == -1:
            pid = self.conn.request("otii_create_project").get("project_id")
        self.project_id = int(pid)
        self._arc("arc_add_to_project")

    def _arc(self, cmd: str, conn: OtiiConnection | None = None, **data: Any) -> dict[str, Any]:
        """An ``arc_*`` request for the chosen device."""
        return (conn or self.conn).request(cmd, {"device_id": self.device_id, **data})

    # -- EnergyMonitor -------------------------------------------------------------------------
    @property
    def sample_rate(self) -> float:
        """Samples per second of the main current channel, as the Otii reports it."""
        if self._rate_hz is None:
            raise DeviceError("otii: sample rate asked before configure()",
                              hint="call configure(voltage, sample_rate) first")
        return self._rate_hz

    @property
    def fault(self) -> BaseException | None:
        """What stopped the recording thread, if anything (a waiting recorder ends with it)."""
        return self._recording.error

    @property
    def channels(self) -> list[str]:
        """The channels recorded: current, voltage if measured, the timestamp line's."""
        return [wire.MAIN_CURRENT, *([wire.MAIN_VOLTAGE] if self.measure_voltage else []),
                self.line_channel]

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Supply voltage (checked before anything is sent, and read back), max current,
        auto-range, channels, the expansion port for GPI1, the sample rate."""
        check_voltage(voltage, self.voltage_limit_v, who="otii")
        exp_v = max(EXP_VOLTAGE_MIN_V, float(voltage))
        if self.line_channel in wire.DIGITAL_CHANNELS:  # GPI1's I/O level reaches the DUT too
            check_voltage(exp_v, self.voltage_limit_v,
                          who=f"otii: expansion port I/O level (at least {EXP_VOLTAGE_MIN_V} V)")
        if self._running:
            raise DeviceError("otii: configure() during a recording", hint="stop() first")
        kind = self.device.get("type")
        if kind == "Arc" and round(sample_rate) != ARC_RATE_HZ:
            raise DeviceError(f"otii: an Otii Arc samples at {ARC_RATE_HZ} Hz, not "
                              f"{sample_rate:g} Hz", hint=f"set the sample rate to {ARC_RATE_HZ}")
        if not (sample_rate > 0 and sample_rate == round(sample_rate)):
            raise DeviceError(f"otii: sample rate {sample_rate:g} Hz is not a whole number",
                              hint="the Otii takes whole samples per second")
        self._voltage_v = None  # until the read-back is within the limit: power_on refuses
        self._arc("arc_set_main_voltage", value=float(voltage))
        read_back = float(self._arc("arc_get_main_voltage").get("value", math.nan))
        try:
            check_voltage(read_back, self.voltage_limit_v,
                          who="otii: arc_get_main_voltage read back")
        except VoltageLimitError:
            self.power_off()  # it is set already: never leave the DUT on above the limit
            raise
        self._arc("arc_set_max_current", value=float(self.current_limit_a))
        self._arc("arc_set_range", range="low")
        if self.line_channel in wire.DIGITAL_CHANNELS:
            self._arc("arc_enable_exp_port", enable=True)
            self._arc("arc_set_exp_voltage", value=exp_v)
        for channel in self.channels:
            self._arc("arc_enable_channel", channel=channel, enable=True)
        analog = [c for c in self.channels if c not in wire.DIGITAL_CHANNELS]
        if kind != "Arc":
            for channel in analog:
                self._arc("arc_set_channel_samplerate", channel=channel, value=int(sample_rate))
        rates = {c: float(self._arc("arc_get_channel_samplerate", channel=c).get("value", 0))
                 for c in analog}
        rate = rates[wire.MAIN_CURRENT]
        voltage_note = None
        if rates.get(wire.MAIN_VOLTAGE, rate) != rate:
            # Power then uses the read-back main voltage, as when mv is not recorded.
            self._arc("arc_enable_channel", channel=wire.MAIN_VOLTAGE, enable=False)
            self.measure_voltage = False
            voltage_note = (f"main voltage read back (mv samples at "
                            f"{rates.pop(wire.MAIN_VOLTAGE):g} Hz, off the current's grid)")
        if any(r != rate for r in rates.values()):
            raise DeviceError(f"otii: Sense+ samples at {rates.get(wire.SENSE_PLUS, 0):g} Hz, "
                              f"main current at {rate:g} Hz: not one grid",
                              hint='wire the timestamp line to GPI1 (timestamp_input = "gpio")')
        if rate != round(sample_rate):
            raise DeviceError(f"otii: asked for {sample_rate:g} Hz, the Otii samples at "
                              f"{rate:g} Hz", hint=f"set the sample rate to {rate:g}")
        self._voltage_v = read_back
        self._rate_hz = rate
        self._settings.update({
            "main_voltage_v": read_back, "max_current_a": self.current_limit_a,
            "current_range": "auto", "range_mode": "low (auto-ranging)",
            "channels": self.channels, "timestamp_input": self.timestamp_input,
            "timestamp_channel": {"i1": "GPI1 (expansion port)",
                                  "sp": "Sense+ (analog, thresholded)"}[self.line_channel],
        })
        if self.line_channel in wire.DIGITAL_CHANNELS:
            self._settings["exp_voltage_v"] = exp_v
        if not self.measure_voltage:
            self._settings["voltage_source"] = (
                voltage_note or "main voltage read back (mv not recorded)")

    def power_on(self) -> None:
        """``arc_set_main`` on, at the voltage `configure` read back within the limit."""
        if self._voltage_v is None:
            raise DeviceError("otii: power_on() before a successful configure()",
                              hint="call configure(voltage, sample_rate) first")
        self._arc("arc_set_main", enable=True)
        self._output_on = True
        self._settings["main"] = "on"

    def power_off(self) -> None:
        """``arc_set_main`` off; over a new connection if the server dropped ours. Never raises
        (it runs on error paths): a failure is logged and kept in `settings()`."""
        if self.device_id is None:
            return
        try:
            conn = self.conn
            if conn.closed and self._connect is not None:
                conn = self._reconnect(self._connect)
            self._arc("arc_set_main", conn, enable=False)
            self._output_on = False
            self._settings["main"] = "off"
            if conn is not self.conn or self._recording.error is not None:
                with contextlib.suppress(Exception):  # a recording left running by the fault
                    conn.request("project_stop_recording", {"project_id": self.project_id})
        except Exception as exc:  # never mask the original error
            log.warning("otii: could not switch the main output off: %s", exc)
            self._settings["main"] = f"unknown: switching it off failed ({exc})"

    def _reconnect(self, connect: Callable[[], OtiiConnection]) -> OtiiConnection:
        conn = connect()
        self._log_in(conn)
        self._license(conn)
        self.conn = conn
        return conn

    def start(self, on_chunk: ChunkCallback) -> None:
        """Start a recording; chunks go to `on_chunk` on the driver's thread."""
        if self._rate_hz is None:
            raise DeviceError("otii: start() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        if self._running:
            raise DeviceError("otii: start() while recording", hint="stop() first")
        self._on_chunk = on_chunk
        self._recording.reset()
        self.conn.request("project_start_recording", {"project_id": self.project_id})
        last = self.conn.request("project_get_last_recording", {"project_id": self.project_id})
        if last.get("recording_id", -1) in (-1, None):
            raise DeviceError("otii: the recording did not start",
                              hint="check the Otii app (channels enabled, device added)")
        self.recording_id = int(last["recording_id"])
        self._settings["recording_id"] = self.recording_id
        self._settings["recording_name"] = last.get("name")
        self._running = True
        self._recording.start(self._run_worker, name="otii-rec")

    def stop(self) -> None:
        """Stop the recording; every recorded sample has been delivered when this returns."""
        if not self._running:
            return
        error = self._recording.stop(REPLY_TIMEOUT_S * 3, lambda: DeviceTimeout(
            "otii: the recording did not end in time", hint=_SERVER_HINT))
        self._running = False
        if error is not None:
            raise error

    def close(self) -> None:
        """Stop, switch the output off, return what was reserved, disconnect. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            self._stop_while_closing()
        self.power_off()
        if not self.conn.closed:
            with contextlib.suppress(Exception):
                for license_id in self._reserved:
                    self.conn.request("otii_return_license", {"license_id": license_id})
                if self._logged_in_here:
                    self.conn.request("otii_logout")
        self.conn.close()

    def set_voltage(self) -> tuple[float, str] | None:
        """The read-back main voltage when mv is not recorded; None when it is."""
        if self.measure_voltage or not self._voltage_v:
            return None
        return self._voltage_v, "set: Otii " + self._settings.get(
            "voltage_source", "main voltage read back (mv not recorded)")

    def settings(self) -> dict[str, Any]:
        """Identity, every setting sent, the recording."""
        return {
            "driver": self.driver, "address": self.address, "simulated": self.simulated,
            "name": self.device.get("name"),
            "model": self.device.get("type", "?"), "version": self._version_text(),
            "serial": self.device_id, "resource": self.address,
            "device_id": self.device_id, "device_type": self.device.get("type"),
            "versions": self.version, "server": self.conn.server_info,
            "project_id": self.project_id, "voltage_v": self._voltage_v,
            "sample_rate_hz": self._rate_hz, "voltage_limit_v": self.voltage_limit_v,
            **dict(self._settings),
            "accuracy": self.accuracy().to_json(),
        }

    def accuracy(self) -> MonitorAccuracy:
        """`otii_accuracy` of this device's model (known once connected)."""
        return otii_accuracy(self.device.get("type"), measures_voltage=self.measure_voltage)

    def self_test(self) -> dict[str, Any]:
        """The device's versions again, and whether its main output is on."""
        self.version = self._arc("arc_get_version")
        return {"driver": self.driver, "model": self.device.get("type", "?"),
                "version": self._version_text(), "serial": self.device_id,
                "resource": self.address, "simulated": self.simulated, "device": self.device,
                "output_on": self._arc("arc_get_main").get("value"),
                "server": self.conn.server_info}

    def _version_text(self) -> str:
        """E.g. "1.1.7 (hardware Arc 1.1)" from ``arc_get_version``."""
        fw, hw = self.version.get("fw_version"), self.version.get("hw_version")
        return f"{fw or '?'}" + (f" (hardware {hw})" if hw else "")

    # -- recording -----------------------------------------------------------------------------
    def _run_worker(self) -> None:
        conn = self.conn  # the recording's connection (power_off may open another after a drop)
        try:
            self._record(conn)
        except DeviceError as exc:
            if not conn.closed:
                raise
            raise DeviceError(
                f"otii: the Otii TCP server at {conn.where} closed the connection "
                f"mid-recording, after {self.stats.samples} samples",
                hint="is the Otii app still running and reachable? The rig switched the "
                "output off over a new connection when it could; what was measured is kept",
            ) from exc

    def _count(self, conn: OtiiConnection, channel: str) -> int:
        return int(conn.request("recording_get_channel_data_count", {
            "recording_id": self.recording_id, "device_id": self.device_id,
            "channel": channel}).get("count", 0))

    def _data(self, conn: OtiiConnection, channel: str, index: int, count: int
              ) -> dict[str, Any]:
        return conn.request("recording_get_channel_data", {
            "recording_id": self.recording_id, "device_id": self.device_id, "channel": channel,
            "index": index, "count": count})

    def _record(self, conn: OtiiConnection) -> None:
        """Poll the running recording until stopped, then read what is left."""
        analog = [c for c in self.channels if c not in wire.DIGITAL_CHANNELS]
        digital = self.line_channel if self.line_channel in wire.DIGITAL_CHANNELS else None
        threshold = None if digital else LineThreshold.for_supply(self._voltage_v or 1.8)
        rate = self.sample_rate
        hold = round(EVENT_LAG_S * rate) if digital else 0
        line = GpiLine(dt=1.0 / rate)
        grid: tuple[float, float] | None = None  # (t0, dt) of the recording's sample grid
        done = events_read = 0
        stopped = False
        while True:
            if self._recording.stop_wanted.is_set() and not stopped:
                conn.request("project_stop_recording", {"project_id": self.project_id})
                stopped = True
            available = min(self._count(conn, c) for c in analog)
            if digital:
                total = self._count(conn, digital)
                if total > events_read:
                    times, levels = wire.digital_events(
                        self._data(conn, digital, events_read, total - events_read))
                    events_read += len(times)
                    line.add(times, levels)
            upto = available if stopped else available - hold
            while done < upto:
                n = min(upto - done, wire.MAX_VALUES_PER_REQUEST)
                blocks = {c: wire.analog_block(self._data(conn, c, done, n)) for c in analog}
                n = min(len(b.values) for b in blocks.values())
                if n == 0:
                    break
                grid = self._check_grid(blocks, done, grid)
                line.t0, line.dt = grid
                current = blocks[wire.MAIN_CURRENT].values[:n]
                if self.measure_voltage:
                    voltage = blocks[wire.MAIN_VOLTAGE].values[:n]
                else:
                    voltage = np.full(n, self._voltage_v or math.nan)
                if digital:
                    gpio = line.bits(done, n)
                else:
                    assert threshold is not None
                    gpio = threshold.bits(blocks[self.line_channel].values[:n])
                self._deliver(Chunk(done, current, voltage, gpio))
                done += n
            if stopped and done >= available:
                break
            if done >= upto:
                self._recording.stop_wanted.wait(POLL_S)
        if digital and not line.armed and done:
            self.stats.note("GPI1 was never high during the recording: is the DUT's timestamp "
                            "line wired to GPI1 and the expansion port at the DUT's voltage?")

    def _check_grid(self, blocks: dict[str, wire.AnalogBlock], index: int,
                    grid: tuple[float, float] | None) -> tuple[float, float]:
        """Every block must continue one sample grid: t0 + index x dt."""
        for channel, block in blocks.items():
            if grid is None:
                grid = (block.timestamp - index * block.interval, block.interval)
            t0, dt = grid
            if not math.isclose(block.interval, dt, rel_tol=1e-6):
                raise ProtocolError(f"otii: channel {channel} samples every {block.interval:g} s"
                                    f", main current every {dt:g} s: not one grid")
            if abs(block.timestamp - (t0 + index * dt)) > dt / 2:
                raise ProtocolError(
                    f"otii: channel {channel} sample {index} is at {block.timestamp:.6f} s, "
                    f"expected {t0 + index * dt:.6f} s: samples are missing from the recording")
        assert grid is not None
        return grid

    def _deliver(self, chunk: Chunk) -> None:
        self.stats.samples += len(chunk)
        if self._on_chunk is not None:
            self._on_chunk(chunk)
