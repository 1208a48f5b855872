"""`rig dut`: talk to one DUT on a serial port: who it is, download an input, run inferences.

For a person debugging a board and for scripted checks (`--json`). Every step has a deadline and
every reply is checked by the DUT client, so a silent or confused board ends in a one-line error.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from drivers.dut.client import COMMAND_TIMEOUT_S, DutClient
from drivers.errors import DeviceTimeout
from drivers.transport import SerialTransport
from protocols.errors import RigError
from rig.commands.common import print_json

#: How long `info` listens for a boot banner before asking `caps` instead: as long as the
#: MLPerf Tiny runner waits (a slower board's banner comes well after 0.5 s).
BOOT_WAIT_S = 2.0


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dut", help="talk to one DUT: info, load an input, run inferences")
    p.add_argument("--port", required=True, help="the DUT's serial port (`rig devices` lists them)")
    p.add_argument("--baud", type=int, default=115200, help="baud rate (default 115200)")
    p.add_argument("--timeout", type=_positive, default=COMMAND_TIMEOUT_S, metavar="S",
                   help=f"seconds a short command may take (default {COMMAND_TIMEOUT_S:g})")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    info = actions.add_parser("info", help="name, vendor, profile, model, mode, capabilities")
    info.add_argument("--boot-wait", type=float, default=BOOT_WAIT_S, metavar="S",
                      help=f"seconds to listen for a boot banner first (default {BOOT_WAIT_S:g})")
    info.add_argument("--json", action="store_true", help="print one JSON object")

    load = actions.add_parser("load", help="download a file into the DUT's input buffer")
    load.add_argument("file", type=Path, help="the raw input bytes")
    load.add_argument("--json", action="store_true", help="print one JSON object")

    infer = actions.add_parser("infer", help="run inferences on the loaded input")
    infer.add_argument("iterations", type=int, help="timed inferences")
    infer.add_argument("--warmup", type=int, default=0, help="untimed inferences first (0)")
    infer.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    action = {"info": _info, "load": _load, "infer": _infer}[args.action]
    transport = SerialTransport(args.port, args.baud, name="DUT")
    with DutClient(transport, command_timeout_s=args.timeout) as client:
        out = action(client, args)
    if args.json:
        print_json(out)
    else:
        for key, value in out.items():
            shown = ", ".join(value) if isinstance(value, list) and key == "capabilities" else value
            print(f"{key:<15} {'-' if shown in (None, '') else shown}")
    return 0


def dut_info(client: DutClient, boot_wait_s: float) -> dict[str, Any]:
    """Who the DUT is. The timestamp mode comes from a boot banner if one arrives within
    `boot_wait_s`, else from the ``caps`` reply, else it is "unknown"."""
    banner_mode: str | None = None
    # A board that booted before the port was opened says nothing: then ask instead.
    if boot_wait_s > 0:
        with contextlib.suppress(DeviceTimeout):
            banner_mode = client.wait_for_boot(boot_wait_s)
    capabilities = client.negotiate()
    info = client.identify()
    return {
        "name": info.name,
        "vendor": info.vendor,
        "profile": info.profile,
        "model": info.model,
        "timestamp_mode": banner_mode or client.timestamp_mode or "unknown",
        "capabilities": sorted(capabilities),
    }


def _info(client: DutClient, args: argparse.Namespace) -> dict[str, Any]:
    return dut_info(client, args.boot_wait)


def _load(client: DutClient, args: argparse.Namespace) -> dict[str, Any]:
    path: Path = args.file
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RigError(f"cannot read {path}: {exc.strerror or exc}",
                       hint="give the path of a file with the raw input bytes") from exc
    if not data:
        raise RigError(f"{path} is empty", hint="give a file with the raw input bytes")
    result = client.load(data)
    return {"bytes": result.n_bytes, "method": result.method, "verified": True,
            "attempts": result.attempts}


def _infer(client: DutClient, args: argparse.Namespace) -> dict[str, Any]:
    client.negotiate()  # learns the timestamp mode from firmware that says it on `caps`
    result = client.infer(args.iterations, args.warmup)
    return {
        "iterations": result.iterations,
        "elapsed_us": result.elapsed_us,  # None from plain energy-mode firmware
        "results": [float(v) for v in result.results],
        # True when they came with a matching CRC-32 (rcrc); plain firmware's are unchecked.
        "results_checked": result.checked,
    }
