"""`rig sim`: start a virtual bench (simulated DUT + energy monitor on ptys) and print its ports.

The virtual bench runs as its own process (`python -m virtual_bench`); this command starts it,
prints what it reported and keeps it serving until Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import threading

from rig.bench.config import NUMBER_SPANS, SPEED_HINT
from rig.bench.virtual import VirtualBenchProcess
from rig.commands.common import add_bench_arguments, bench_from_args, print_json
from rig.errors import ConfigError
from rig.run.measure import sigterm_as_interrupt


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="start a virtual bench and print its ports")
    add_bench_arguments(p)
    p.add_argument("--speed", type=float, default=None,
                   help="simulated seconds per host second, "
                        f"{NUMBER_SPANS['sim.speed'].text()} (default: the bench file's)")
    p.add_argument("--power-on", action="store_true",
                   help="switch the DUT's supply on at once (to talk to it with `rig dut`)")
    p.add_argument("--json", action="store_true", help="print the ports as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    bench, _ = bench_from_args(args)
    span = NUMBER_SPANS["sim.speed"]
    if args.speed is not None and not (math.isfinite(args.speed) and span.holds(args.speed)):
        raise ConfigError(f"--speed: expected a number {span.text()}, found {args.speed!r}",
                          hint=SPEED_HINT)
    with VirtualBenchProcess(bench, speed=args.speed, power_on=args.power_on) as vb:
        if args.json:
            print_json({"ports": vb.ports, "speed": vb.speed, "dut": vb.dut_impl,
                        "powered": vb.powered, "simulated": True})
        else:
            print(f"virtual bench up (SIMULATED, {vb.speed:g}x real time)")
            print(f"  DUT    (MLPerf Tiny protocol, {vb.dut_impl}): {vb.ports['dut']}")
            if "emon" in vb.ports:
                print(f"  energy monitor ({vb.emon_driver}):{'':<19}{vb.ports['emon']}")
            if "io_manager" in vb.ports:
                print(f"  IO manager (Arduino UNO pass-through):      {vb.ports['io_manager']}")
            power = "on" if vb.powered else (
                "off until the LPM01A says `pwr on`" if vb.emon_driver == "lpm01a"
                else f"off until the {vb.emon_driver} switches it on")
            print(f"  DUT supply: {power}; Ctrl-C stops the bench", flush=True)
        with contextlib.suppress(KeyboardInterrupt), sigterm_as_interrupt():
            while vb.running:  # until Ctrl-C, or the bench process ends on its own
                threading.Event().wait(0.5)
    return 0
