"""The Otii TCP server's wire format (Qoitech's Otii 3 desktop app or otii_server, port 1905).

Each message is one JSON object encoded as UTF-8 and terminated by ``\\r\\n``. On connect the
server sends ``{"type": "information", "info": "connected", "data": {"otii_version": ...,
"protocol_version": ..., "server": ...}}``. The client sends requests
``{"type": "request", "cmd": CMD, "trans_id": ID, "data": {...}}`` (``data`` left out when a
command takes none; ``trans_id`` is a string) and gets, for each, either
``{"type": "response", "cmd": CMD, "trans_id": ID[, "data": {...}]}`` or
``{"type": "error", "cmd": CMD, "trans_id": ID, "errorcode": TEXT, "data": {...}}``. Messages of
type ``"progress"`` (long operations) and ``"information"`` may come in between and carry no
answer. Sources: Qoitech's published TCP clients (otii-tcp-client-python/java/csharp) and the
TCP server reference (qoitech.com/help/tcpserver).

Channel data (``recording_get_channel_data``): an analog channel answers ``{"data_type":
"analog", "timestamp": T0, "interval": DT, "values": [...]}`` (seconds from the recording's
start; sample k of the answer is at T0 + k * DT); a digital channel (``i1``, ``i2``) answers
``{"data_type": "digital", "values": [{"timestamp": T, "value": BOOL}, ...]}``: one entry per
change of the input, not per sample. Pure: no sockets here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from protocols.errors import ProtocolError

DEFAULT_PORT = 1905
TERMINATOR = b"\r\n"
#: The longest message either side accepts (a full data answer is ~1 MB: 40 000 values).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Values the published clients ask for per ``recording_get_channel_data`` (analog).
MAX_VALUES_PER_REQUEST = 40_000

#: Channel names (``arc_enable_channel``): main current [A], main voltage [V], Sense+ [V],
#: the expansion port's two digital inputs.
MAIN_CURRENT = "mc"
MAIN_VOLTAGE = "mv"
SENSE_PLUS = "sp"
GPI1 = "i1"
GPI2 = "i2"
DIGITAL_CHANNELS = (GPI1, GPI2)

#: ``errorcode`` values the rig reacts to (the server's own words).
COULD_NOT_LOGIN = "Could not login"
NOT_LOGGED_IN = "Not logged in"
NO_LICENSE = "No license"
INVALID_COMMAND = "Invalid command"
INVALID_KEY_VALUE = "Invalid key value"
COMMAND_FAILURE = "Command failure"


def encode(message: dict[str, Any]) -> bytes:
    """One message on the wire: compact JSON, UTF-8, ``\\r\\n``."""
    try:
        text = json.dumps(message, separators=(",", ":"), allow_nan=False)
    except ValueError as exc:  # NaN/inf (not JSON), an int of more than 4300 digits
        raise ProtocolError(f"otii: message {message.get('cmd')!r} cannot be sent ({exc})",
                            hint="send finite numbers") from None
    return text.encode() + TERMINATOR


def request(cmd: str, trans_id: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """A request message (``data`` omitted when None)."""
    msg: dict[str, Any] = {"type": "request", "cmd": cmd, "trans_id": trans_id}
    if data is not None:
        msg["data"] = data
    return msg


def response(cmd: str, trans_id: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
    """A response message (``data`` omitted when None)."""
    msg: dict[str, Any] = {"type": "response", "cmd": cmd, "trans_id": trans_id}
    if data is not None:
        msg["data"] = data
    return msg


def error(cmd: str, trans_id: str, errorcode: str, data: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """An error message as the server sends it."""
    return {"type": "error", "cmd": cmd, "trans_id": trans_id, "errorcode": errorcode,
            "data": data or {}}


class MessageSplitter:
    """Bytes in, whole messages out: a message split over reads, or several in one, both work."""

    def __init__(self, max_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._buf = bytearray()
        self._max = max_bytes

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """The messages completed by `data`; `ProtocolError` for one that is not a JSON object."""
        self._buf += data
        out: list[dict[str, Any]] = []
        while True:
            end = self._buf.find(TERMINATOR)
            if end < 0:
                break
            raw = bytes(self._buf[:end])
            del self._buf[: end + len(TERMINATOR)]
            if raw.strip():
                out.append(decode(raw))
        if len(self._buf) > self._max:
            raise ProtocolError(f"otii: a message longer than {self._max} bytes without "
                                "\\r\\n: not the Otii TCP protocol")
        return out

    @property
    def pending(self) -> int:
        """Bytes of an unfinished message."""
        return len(self._buf)


def decode(raw: bytes) -> dict[str, Any]:
    """One message without its terminator."""
    try:
        msg = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # nested too deep
        raise ProtocolError(f"otii: not JSON: {raw[:60]!r} ({exc})") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ProtocolError(f"otii: a message without a type: {raw[:60]!r}")
    return msg


@dataclass(frozen=True)
class AnalogBlock:
    """Consecutive samples of an analog channel: sample k is at ``timestamp + k * interval``."""

    timestamp: float
    interval: float
    values: np.ndarray


def analog_block(data: Any, who: str = "otii") -> AnalogBlock:
    """The ``data`` of an analog ``recording_get_channel_data`` answer, checked."""
    if not isinstance(data, dict) or data.get("data_type") != "analog":
        raise ProtocolError(f"{who}: expected analog channel data, got {str(data)[:80]}")
    try:
        t0 = float(data["timestamp"])
        dt = float(data["interval"])
        # One C-level conversion of the whole list (a non-number fails here, not per sample).
        values = np.asarray(data["values"], dtype=np.float64)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # an int beyond float
        raise ProtocolError(f"{who}: bad analog channel data ({exc})") from None
    if values.ndim != 1 or not (math.isfinite(t0) and math.isfinite(dt) and dt > 0):
        raise ProtocolError(f"{who}: bad analog channel data (timestamp {t0}, interval {dt})")
    return AnalogBlock(t0, dt, values)


def digital_events(data: Any, who: str = "otii") -> tuple[np.ndarray, np.ndarray]:
    """(times [s], levels as uint8) of a digital ``recording_get_channel_data`` answer."""
    if not isinstance(data, dict) or data.get("data_type") != "digital":
        raise ProtocolError(f"{who}: expected digital channel data, got {str(data)[:80]}")
    entries = data.get("values")
    if not isinstance(entries, list):
        raise ProtocolError(f"{who}: digital channel data without values")
    try:  # one entry per input change (a few per timed run), not per sample
        times = np.array([float(e["timestamp"]) for e in entries], dtype=np.float64)
        levels = np.array([bool(e["value"]) for e in entries], dtype=np.uint8)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:  # an int beyond float
        raise ProtocolError(f"{who}: bad digital channel data ({exc})") from None
    if times.size > 1 and np.any(np.diff(times) < 0):
        raise ProtocolError(f"{who}: digital events out of time order")
    return times, levels
