"""`rig devices`: list serial ports with their USB ids and what they are likely to be."""

from __future__ import annotations

import argparse

from serial.tools import list_ports

from rig.commands.common import print_json

#: USB ids of instruments and boards the rig knows.
KNOWN_USB = {
    (0x0483, 0x5740): "ST X-NUCLEO-LPM01A (PowerShield)",
    (0x2341, 0x805A): "Arduino Nano 33 BLE",
    (0x2341, 0x0043): "Arduino UNO (IO manager)",
    (0x2341, 0x0001): "Arduino UNO (IO manager)",
}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list serial ports and what they look like")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    ports = []
    for info in sorted(list_ports.comports(), key=lambda p: p.device):
        ids = (info.vid, info.pid) if info.vid is not None else None
        ports.append({
            "port": info.device,
            "vid": f"{info.vid:04x}" if info.vid is not None else None,
            "pid": f"{info.pid:04x}" if info.pid is not None else None,
            "description": info.description,
            "serial_number": info.serial_number,
            "looks_like": KNOWN_USB.get(ids) if ids else None,
        })
    if args.json:
        print_json({"ports": ports})
        return 0
    if not ports:
        print("no serial ports found (is the board plugged in? `rig sim` starts a virtual bench)")
        return 0
    for p in ports:
        ids = f"{p['vid']}:{p['pid']}" if p["vid"] else "----:----"
        print(f"{p['port']:<20} {ids}  {p['looks_like'] or p['description']}")
    return 0
