"""`rig sim`: serve a virtual bench in the foreground (simulated DUT + LPM01A on ptys)."""

from __future__ import annotations

import argparse
import contextlib
import threading

from rig.commands.common import add_bench_arguments, bench_from_args, print_json
from rig.runner import sigterm_as_interrupt
from rig.sim.bench import VirtualBench


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="start a virtual bench and print its ports")
    add_bench_arguments(p)
    p.add_argument("--speed", type=float, default=None,
                   help="simulated seconds per host second (default: the bench file's)")
    p.add_argument("--json", action="store_true", help="print the ports as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    bench, _ = bench_from_args(args)
    with VirtualBench(bench, speed=args.speed) as vb:
        if args.json:
            print_json({"ports": vb.ports, "speed": vb.world.clock.speed, "simulated": True})
        else:
            print(f"virtual bench up (SIMULATED, {vb.world.clock.speed:g}x real time)")
            print(f"  DUT    (MLPerf Tiny protocol, 115200 baud): {vb.ports['dut']}")
            print(f"  LPM01A (PowerShield protocol):              {vb.ports['emon']}")
            print("  the DUT is powered through the LPM01A (`pwr on`); Ctrl-C stops the bench")
        with contextlib.suppress(KeyboardInterrupt), sigterm_as_interrupt():
            threading.Event().wait()
    return 0
