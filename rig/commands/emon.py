"""`rig emon record`: capture an energy monitor's stream to a JLS file, no DUT protocol involved.

The capture length is a sample count (duration x rate), not host time: the monitor's own
sample ids decide when it is complete. The DUT supply is switched off and the instrument closed
on every way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from drivers.emon import (
    DRIVERS,
    EnergyMonitor,
    check_current_range,
    check_voltage,
    monitor_class,
    open_monitor,
)
from rig.bench.config import TIMESTAMP_INPUTS
from rig.commands.common import print_json
from rig.errors import BENCH_ERRORS, RigError
from rig.run.recording import EmonRecorder, trace_voltage
from rig.traces.space import check_trace_space

#: Default bench voltage limit [V]: what a 3.3 V DUT tolerates.
DEFAULT_BENCH_LIMIT_V = 3.3
#: Monitors that take the timestamp line on an auxiliary input (`--timestamp-input aux`).
AUX_DRIVERS = ("n6705", "otii")
#: Host-time slack on top of the capture's own duration before giving up on the monitor.
WAIT_SLACK_S = 15.0


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `rig emon` and its `record` subcommand."""
    p = subparsers.add_parser("emon", help="energy monitor on its own: record a trace")
    sub = p.add_subparsers(dest="emon_command", metavar="ACTION", required=True)
    rec = sub.add_parser(
        "record",
        help="power the DUT from the monitor and record current, voltage and GPIO to a .jls file",
        description=(
            "Open the energy monitor, set the supply voltage and sample rate, power the DUT, "
            "record exactly round(DURATION x RATE) samples, then power off. The .jls file opens "
            "with `rig analyze` and the Joulescope UI."
        ),
    )
    rec.add_argument("--driver", required=True, choices=sorted(DRIVERS), help="monitor driver")
    where = rec.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", metavar="P", help="serial port (e.g. /dev/ttyACM0)")
    where.add_argument("--resource", metavar="R", help="VISA resource or device address")
    rec.add_argument("--duration", type=float, required=True, metavar="S", help="seconds")
    rec.add_argument("--voltage", type=float, required=True, metavar="V", help="DUT supply [V]")
    rec.add_argument("--rate", type=float, required=True, metavar="HZ", help="samples per second")
    rec.add_argument("--out", type=Path, required=True, metavar="FILE.jls", help="trace file")
    rec.add_argument("--range", default="auto", metavar="R", dest="current_range",
                     help='current range: "auto" (default), a Joulescope range such as "18 mA", '
                     'or amps for a Keysight, e.g. 0.1')
    rec.add_argument("--ppk2-mode", choices=("source", "ampere"), default="source",
                     help="PPK2 only: source meter (it supplies the DUT, default) or ampere meter "
                     "(the bench's supply at --voltage feeds the DUT through it)")
    rec.add_argument("--timestamp-input", choices=TIMESTAMP_INPUTS, default="gpio",
                     help="where the DUT's timestamp line enters the monitor: gpio (its logic "
                     "or trigger input, default) or aux (an N6705's N6781A/N6785A auxiliary "
                     "voltage input, logged with the current; an Otii's Sense+ input)")
    rec.add_argument(
        "--bench-limit", type=float, default=DEFAULT_BENCH_LIMIT_V, metavar="V",
        help=f"refuse supply voltages above this (default {DEFAULT_BENCH_LIMIT_V:g} V)",
    )
    rec.add_argument("--simulated", action="store_true",
                     help="label the trace simulated (the monitor is a virtual bench's)")
    rec.add_argument("--json", action="store_true", help="print one JSON object")
    rec.set_defaults(run=run)
    return p


def _check_args(args: argparse.Namespace) -> None:
    """Everything that can be refused before the instrument is touched."""
    if not (math.isfinite(args.duration) and args.duration > 0):
        raise RigError(f"--duration must be a positive number of seconds, got {args.duration:g}")
    if not (math.isfinite(args.rate) and args.rate > 0 and args.rate == round(args.rate)):
        raise RigError(
            f"--rate must be a positive whole number of Hz, got {args.rate:g}",
            hint="JLS files store whole Hz, e.g. --rate 1000",
        )
    if round(args.duration * args.rate) < 1:
        raise RigError(
            f"--duration {args.duration:g} s at {args.rate:g} Hz is less than one sample",
            hint="record for longer or at a higher rate",
        )
    if args.out.suffix.lower() != ".jls":
        raise RigError(f"--out must name a .jls file, got {args.out}", hint="e.g. --out trace.jls")
    if not args.out.parent.is_dir():
        raise RigError(f"--out: folder {args.out.parent} does not exist",
                       hint="create it first or pick another path")
    check_voltage(args.voltage, args.bench_limit, who=args.driver)
    args.current_range = check_current_range(args.driver, args.current_range)
    if args.timestamp_input == "aux" and args.driver not in AUX_DRIVERS:
        raise RigError(f"--timestamp-input aux needs an N6705 with an N6781A/N6785A SMU (its "
                       f"auxiliary voltage input) or an Otii (Sense+); the {args.driver} has no "
                       "auxiliary input", hint="use --timestamp-input gpio")
    if args.ppk2_mode != "source" and args.driver != "ppk2":
        raise RigError(f"--ppk2-mode {args.ppk2_mode} is a PPK2 setting, not one of the "
                       f"{args.driver}'s", hint="drop --ppk2-mode, or use --driver ppk2")


def run(args: argparse.Namespace) -> int:
    """Record, then print what was recorded."""
    _check_args(args)
    # A trace that cannot fit is refused before the instrument is opened, not when it fills up.
    measured = monitor_class(args.driver).measures_voltage_with(
        timestamp_input=args.timestamp_input)
    ranged = monitor_class(args.driver).records_range_with(
        timestamp_input=args.timestamp_input, current_range=args.current_range)
    warning = check_trace_space(
        args.out.parent, args.duration, args.rate, voltage_measured=measured,
        range_recorded=ranged,
        hint="lower --rate, shorten --duration, or give an --out on another disk",
    )
    if warning:
        print(f"rig: warning: {warning}", file=sys.stderr)
    address = args.port if args.port is not None else args.resource
    options: dict[str, Any] = {"mode": args.ppk2_mode} if args.driver == "ppk2" else {}
    if args.timestamp_input == "aux":
        options["timestamp_input"] = "aux"
    monitor = open_monitor(
        args.driver, address, voltage_limit_v=args.bench_limit, simulated=args.simulated,
        current_range=args.current_range, **options,
    )
    recorder: EmonRecorder | None = None
    try:
        monitor.configure(args.voltage, args.rate)
        rate = float(monitor.sample_rate)
        count = round(args.duration * rate)
        # Simulated when the instrument says so in its identity reply (a virtual bench's). The
        # wait ends at once with the monitor's own fault (an unplugged LPM01A), not at its
        # deadline.
        simulated = bool(args.simulated or getattr(monitor, "simulated", False))
        recorder = EmonRecorder(rate, args.out, simulated=simulated, stop_after=count,
                                set_voltage=monitor.set_voltage(),
                                instrument=monitor.settings(),
                                fault=lambda: getattr(monitor, "fault", None))
        monitor.start(recorder.on_chunk)
        monitor.power_on()
        recorder.wait_for_samples(count, timeout_s=WAIT_SLACK_S + 2.0 * args.duration)
    except BENCH_ERRORS as exc:
        if recorder is not None and recorder.samples:  # what was measured is kept: say where
            exc.message += f"; the {recorder.samples} samples recorded are kept in {args.out}"
            exc.args = (exc.message,)
        raise
    finally:
        # Power first: whatever went wrong, the DUT must not stay supplied.
        _shutdown(monitor, recorder)
    report = _report(args, monitor, recorder, count)
    if args.json:
        print_json(report)
    else:
        _print(report)
    return 0


def _shutdown(monitor: EnergyMonitor, recorder: EmonRecorder | None) -> None:
    """Power off, stop, close, finish the file; every step runs even if one before failed."""
    first_error: BaseException | None = None
    for step in (monitor.power_off, monitor.stop, monitor.close,
                 recorder.close if recorder else None):
        if step is None:
            continue
        try:
            step()
        except (Exception, KeyboardInterrupt) as exc:
            first_error = first_error or exc
    if first_error is not None:
        raise first_error


def _report(
    args: argparse.Namespace, monitor: EnergyMonitor, recorder: EmonRecorder, count: int
) -> dict[str, Any]:
    rate = recorder.sample_rate
    if recorder.error is not None:
        raise recorder.error
    power = recorder.overall_mean_power()
    return {
        "out": str(args.out),
        "driver": args.driver,
        "simulated": bool(args.simulated or getattr(monitor, "simulated", False)),
        "samples": recorder.samples,
        "requested_samples": count,
        "sample_rate_hz": rate,
        "duration_s": recorder.samples / rate,
        "edges": recorder.edge_count,
        "mean_power_w": power if math.isfinite(power) else None,
        "energy_j": recorder.energy_j,
        "dropped": recorder.dropped + monitor.stats.dropped,
        "voltage_v": args.voltage,
        "trace_voltage": trace_voltage(recorder.set_voltage),
        "timestamp_input": args.timestamp_input,
        "current_range": monitor.settings().get("current_range", args.current_range),
    }


def _print(report: dict[str, Any]) -> None:
    label = " (SIMULATED)" if report["simulated"] else ""
    power = report["mean_power_w"]
    print(f"recorded {report['out']}{label}")
    print(f"samples      {report['samples']} at {report['sample_rate_hz']:g} Hz")
    print(f"duration     {report['duration_s']:.6g} s")
    print(f"edges        {report['edges']} (falling, GPIO bit 0)")
    print(f"mean power   {'n/a' if power is None else f'{power * 1e3:.6g} mW'}")
    print(f"dropped      {report['dropped']} samples")
