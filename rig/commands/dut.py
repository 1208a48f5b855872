"""`rig dut`: talk to one DUT on a serial port: who it is, download an input, run inferences.

For a person debugging a board and for scripted checks (`--json`). Every step has a deadline and
every reply is checked by the DUT client, so a silent or confused board ends in a one-line error.
With `--device`/`--bench` instead of `--port` the DUT is reached as the bench wires it (through
its IO manager, on a virtual bench if it is one), powered by the bench's monitor and powered off
again on every way out.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from drivers.dut.client import COMMAND_TIMEOUT_S, DutClient
from drivers.errors import DeviceTimeout
from drivers.transport import SerialTransport
from protocols.errors import ActionableError
from rig.commands.common import add_bench_arguments, bench_from_args, print_json
from rig.errors import ConfigError, RigError
from rig.run.events import Event, EventBus, InstrumentInfo

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
    p.add_argument("--port", help="the DUT's serial port (`rig devices` lists them); or a bench:")
    add_bench_arguments(p)
    p.add_argument("--baud", type=int, default=None, help="baud rate (default 115200)")
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
    if args.device or args.bench:
        if args.port:
            raise ConfigError("give --port or --device/--bench, not both",
                              hint="--port talks to one DUT directly; a bench as it is wired")
        out = _on_bench(args, action)
    elif args.port:
        transport = SerialTransport(args.port, args.baud or 115200, name="DUT")
        with DutClient(transport, command_timeout_s=args.timeout) as client:
            out = action(client, args)
    else:
        raise ConfigError("no DUT given", hint="pass --port PORT, or --device NAME / --bench FILE")
    if args.json:
        print_json(out)
    else:
        for key, value in out.items():
            shown = ", ".join(value) if isinstance(value, list) and key == "capabilities" else value
            print(f"{key:<15} {'-' if shown in (None, '') else shown}")
    return 0


def _on_bench(args: argparse.Namespace, action: Any) -> dict[str, Any]:
    """Run `action` on the bench's DUT, connected (and powered) as `rig measure` does."""
    # the bench machinery only when asked
    from rig.run.measure import BenchParts, connect_bench, emulator_cause

    bench, _ = bench_from_args(args)
    bus = EventBus()
    io_manager: dict[str, Any] = {}

    def keep_io_manager(event: Event) -> None:
        if isinstance(event, InstrumentInfo) and event.role == "io_manager":
            io_manager.update(event.info)

    bus.subscribe(keep_io_manager)
    parts = BenchParts()
    try:
        connect_bench(bench, parts, bus)
        assert parts.dut is not None
        parts.dut.command_timeout_s = args.timeout
        out = action(parts.dut, args)
    except ActionableError as exc:
        # An emulated board whose QEMU aborted ("Lockup"): its port failed under the rig, and
        # QEMU's own words say why, as in a run (before `shutdown` ends QEMU).
        cause = emulator_cause(parts, exc)
        if cause is exc:
            raise
        raise cause from exc
    finally:
        parts.shutdown()  # the DUT is powered off first, whatever happened
    if io_manager:
        out["io_manager"] = f"{io_manager.get('name', '?')} {io_manager.get('version', '')}"
    return out


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
            "check": result.check, "attempts": result.attempts}


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
