"""Serial ports: list them with their USB ids and what they are likely to be, and optionally knock
on each with the DUT protocol's ``name%`` to see what answers.

`scan_ports` is what `rig devices` prints and what the runner GUI lists; the lister is
injectable because ptys (a virtual bench's ports) are not in the OS's port list.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Callable, Iterable
from typing import Any

from serial.tools import list_ports

from drivers.errors import DeviceError, PortError
from drivers.transport import SerialTransport
from protocols.dut.codec import DutDecoder, Name, Ready, cmd_name, encode_command

#: USB ids of instruments and boards the rig knows.
KNOWN_USB = {
    (0x0483, 0x5740): "ST X-NUCLEO-LPM01A (PowerShield)",
    (0x1915, 0xC00A): "Nordic Power Profiler Kit II (PPK2)",
    (0x2341, 0x805A): "Arduino Nano 33 BLE",
    (0x2341, 0x0043): "Arduino UNO (IO manager)",
    (0x2341, 0x0001): "Arduino UNO (IO manager)",
}
#: Instruments that are not sent a DUT handshake (they speak another protocol; a PPK2 would take
#: the bytes of ``name%`` as opcodes).
NOT_PROBED = {(0x0483, 0x5740), (0x1915, 0xC00A)}
PROBE_BAUD = 115200
PROBE_TIMEOUT_S = 1.0

#: What `scan_ports` says about a port: listed only (or spoke, but not the DUT protocol), a DUT
#: answered ``name%``, opened exclusively by another program, could not be used, or a known
#: instrument that is not probed.
PORT_STATES = ("found", "answering", "busy", "error", "instrument")

#: A lister returns objects shaped like pyserial's ListPortInfo (device, vid, pid, ...).
Lister = Callable[[], Iterable[Any]]


def port_fault(exc: PortError) -> str:
    """Why a port could not be opened: "missing", "busy" or "error" (from the transport's
    message, see `drivers.transport._port_error`)."""
    text = exc.message
    if " is busy" in text:
        return "busy"
    if "does not exist" in text or "cannot open" in text or "No such file" in text:
        return "missing"
    return "error"


def device_fault(port: str) -> str | None:
    """Why `port` cannot be a serial port, from its name alone (nothing is opened): "does not
    exist", or "is not a serial device (a directory)"; None for a character device (a UART, a
    pty, a /dev/serial/by-id link to one), a pyserial URL ("socket://HOST:PORT") or, on
    Windows, a COM port (which only opening tells)."""
    if "://" in port or (os.name == "nt" and re.fullmatch(r"(\\\\\.\\)?COM\d+", port, re.I)):
        return None
    try:
        mode = os.stat(port).st_mode
    except (OSError, ValueError):  # no such path, a broken link, a NUL in the name
        return "does not exist"
    if stat.S_ISCHR(mode):
        return None
    kind = ("a directory" if stat.S_ISDIR(mode) else "a regular file" if stat.S_ISREG(mode)
            else "a block device" if stat.S_ISBLK(mode) else "not a character device")
    return f"is not a serial device ({kind})"


def probe(port: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Send ``name%`` on `port`; what answered within `timeout_s`.

    {"answer": "dut", "name", "vendor"} for a DUT, {"answer": "other", "reply": first line} for
    anything else that spoke, {"answer": "none"} for silence, {"answer": "error", "reply":
    why} for a port that could not be used.
    """
    return _knock(port, timeout_s)[0]


def _knock(port: str, timeout_s: float) -> tuple[dict[str, Any], str]:
    """`probe`'s answer and the port's state (one of `PORT_STATES`)."""
    try:
        transport = SerialTransport(port, PROBE_BAUD, name=port)
    except PortError as exc:
        state = "busy" if port_fault(exc) == "busy" else "error"
        return {"answer": "error", "reply": exc.message}, state
    raw = bytearray()
    events: list[Any] = []
    decoder = DutDecoder()
    try:
        transport.write(encode_command(cmd_name()))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not any(isinstance(e, Ready) for e in events):
            data = transport.read()
            raw += data
            events += decoder.feed(data)
    except DeviceError as exc:
        return {"answer": "error", "reply": exc.message}, "error"
    finally:
        transport.close()
    for event in events:
        if isinstance(event, Name):
            return {"answer": "dut", "name": event.name, "vendor": event.vendor}, "answering"
    line = bytes(raw).replace(b"\x00", b"").strip().split(b"\n")[0].strip()
    if line:
        return {"answer": "other", "reply": line[:80].decode("ascii", errors="replace")}, "found"
    return {"answer": "none"}, "found"


def scan_ports(
    probe: bool = False,
    timeout_s: float = PROBE_TIMEOUT_S,
    lister: Lister | None = None,
) -> list[dict[str, Any]]:
    """Every port `lister` (default: pyserial's `comports`) reports, sorted by path.

    Each entry: port, vid, pid (hex strings or None), description, serial_number, looks_like,
    state (one of `PORT_STATES`) and, with `probe`, handshake (see `probe`). Each port gets its
    own `timeout_s`, so a silent port never holds the listing up. Without probing a port is not
    opened (opening resets many Arduinos), so "busy" is only known when probing.
    """
    lister = lister if lister is not None else list_ports.comports
    ports = []
    for info in sorted(lister(), key=lambda p: p.device):
        ids = (info.vid, info.pid) if info.vid is not None else None
        entry: dict[str, Any] = {
            "port": info.device,
            "vid": f"{info.vid:04x}" if info.vid is not None else None,
            "pid": f"{info.pid:04x}" if info.pid is not None else None,
            "description": info.description,
            "serial_number": info.serial_number,
            "looks_like": KNOWN_USB.get(ids) if ids else None,
        }
        if ids in NOT_PROBED:
            entry["state"] = "instrument"
            if probe:
                entry["handshake"] = {"answer": "skipped"}
        elif probe:
            entry["handshake"], entry["state"] = _knock(info.device, timeout_s)
        else:
            entry["state"] = "found"
        ports.append(entry)
    return ports

