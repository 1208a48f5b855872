"""`rig devices`: list serial ports with their USB ids and what they are likely to be.

With `--probe`, also knock on each port: open it at 115200 baud, send the DUT protocol's
``name%`` and report what answered (a DUT's name and vendor, some other line, or nothing).
Every port gets its own short deadline, so a silent or busy port never holds the listing up.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from serial.tools import list_ports

from drivers.errors import DeviceError
from drivers.transport import SerialTransport
from protocols.dut.codec import DutDecoder, Name, Ready, cmd_name, encode_command
from rig.commands.common import print_json

#: USB ids of instruments and boards the rig knows.
KNOWN_USB = {
    (0x0483, 0x5740): "ST X-NUCLEO-LPM01A (PowerShield)",
    (0x2341, 0x805A): "Arduino Nano 33 BLE",
    (0x2341, 0x0043): "Arduino UNO (IO manager)",
    (0x2341, 0x0001): "Arduino UNO (IO manager)",
}
#: Instruments that are not sent a DUT handshake (they speak another protocol).
NOT_PROBED = {(0x0483, 0x5740)}
PROBE_BAUD = 115200
PROBE_TIMEOUT_S = 1.0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list serial ports and what they look like")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.add_argument("--probe", action="store_true",
                   help="send each port the DUT handshake (name%%) and show what answered")
    p.add_argument("--probe-timeout", type=float, default=PROBE_TIMEOUT_S, metavar="S",
                   help=f"seconds to wait for an answer per port (default {PROBE_TIMEOUT_S:g})")
    p.set_defaults(run=run)


def probe(port: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Send ``name%`` on `port`; what answered within `timeout_s`.

    {"answer": "dut", "name", "vendor"} for a DUT, {"answer": "other", "reply": first line} for
    anything else that spoke, {"answer": "none"} for silence, {"answer": "error", "reply":
    why} for a port that could not be used.
    """
    try:
        transport = SerialTransport(port, PROBE_BAUD, name=port)
    except DeviceError as exc:
        return {"answer": "error", "reply": exc.message}
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
        return {"answer": "error", "reply": exc.message}
    finally:
        transport.close()
    for event in events:
        if isinstance(event, Name):
            return {"answer": "dut", "name": event.name, "vendor": event.vendor}
    line = bytes(raw).replace(b"\x00", b"").strip().split(b"\n")[0].strip()
    if line:
        return {"answer": "other", "reply": line[:80].decode("ascii", errors="replace")}
    return {"answer": "none"}


def _describe(handshake: dict[str, Any] | None) -> str:
    if handshake is None:
        return ""
    answer = handshake["answer"]
    if answer == "dut":
        return f"  [DUT '{handshake['name']}' ({handshake['vendor']})]"
    if answer == "other":
        return f"  [answered: {handshake['reply']}]"
    if answer == "error":
        return f"  [not probed: {handshake['reply']}]"
    if answer == "skipped":
        return "  [not probed: an instrument]"
    return "  [no answer]"


def run(args: argparse.Namespace) -> int:
    ports = []
    for info in sorted(list_ports.comports(), key=lambda p: p.device):
        ids = (info.vid, info.pid) if info.vid is not None else None
        entry: dict[str, Any] = {
            "port": info.device,
            "vid": f"{info.vid:04x}" if info.vid is not None else None,
            "pid": f"{info.pid:04x}" if info.pid is not None else None,
            "description": info.description,
            "serial_number": info.serial_number,
            "looks_like": KNOWN_USB.get(ids) if ids else None,
        }
        if args.probe:
            entry["handshake"] = (
                {"answer": "skipped"} if ids in NOT_PROBED
                else probe(info.device, args.probe_timeout)
            )
        ports.append(entry)
    if args.json:
        print_json({"ports": ports})
        return 0
    if not ports:
        print("no serial ports found (is the board plugged in? `rig sim` starts a virtual bench)")
        return 0
    for p in ports:
        ids = f"{p['vid']}:{p['pid']}" if p["vid"] else "----:----"
        print(f"{p['port']:<20} {ids}  {p['looks_like'] or p['description']}"
              f"{_describe(p.get('handshake'))}")
    return 0
