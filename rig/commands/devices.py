"""`rig devices`: list serial ports with their USB ids and what they are likely to be.

With `--probe`, also knock on each port: open it at 115200 baud, send the DUT protocol's
``name%`` and report what answered (a DUT's name and vendor, some other line, or nothing).
Every port gets its own short deadline, so a silent or busy port never holds the listing up.

With `--check`, handshake the devices of one bench instead (`--device NAME` or `--bench FILE`)
without measuring: one line per device with its state; exit 0 only if every used device
answered.
"""

from __future__ import annotations

import argparse
from typing import Any

from serial.tools import list_ports

from rig.bench.ports import PROBE_TIMEOUT_S, scan_ports
from rig.commands.common import add_bench_arguments, bench_from_args, print_json
from rig.errors import ConfigError
from rig.run.bench_check import BenchCheck, check_bench


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("devices", help="list serial ports and what they look like")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.add_argument("--probe", action="store_true",
                   help="send each port the DUT handshake (name%%) and show what answered")
    p.add_argument("--probe-timeout", type=float, default=PROBE_TIMEOUT_S, metavar="S",
                   help=f"seconds to wait for an answer per port (default {PROBE_TIMEOUT_S:g})")
    p.add_argument("--check", action="store_true",
                   help="handshake one bench's devices (--device NAME or --bench FILE, "
                   "default sim) without measuring; exit 1 unless every used one answers")
    add_bench_arguments(p)
    p.set_defaults(run=run)


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
    if args.check:
        if args.probe:
            raise ConfigError("--check and --probe do not go together",
                              hint="--probe knocks on every port; --check on one bench's")
        return _run_check(args)
    if args.device is not None or args.bench is not None:
        raise ConfigError("--device and --bench go with --check",
                          hint="rig devices --check --device NAME")
    ports = scan_ports(probe=args.probe, timeout_s=args.probe_timeout,
                       lister=list_ports.comports)
    for p in ports:
        del p["state"]  # the listing's output is as it always was
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


def _run_check(args: argparse.Namespace) -> int:
    bench, _ = bench_from_args(args)
    result: BenchCheck = check_bench(bench)
    if args.json:
        print_json(result.as_dict())
    else:
        print(f"bench: {bench.name} ({bench.path})")
        for device in result.devices:
            print(f"{device.role:<14} {device.state:<12} {device.detail}")
        for note in result.notes:
            print(f"note: {note}")
    return 0 if result.ok else 1
