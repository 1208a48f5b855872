"""`rig sim`: serve a virtual bench in the foreground (simulated DUT + LPM01A on ptys)."""

from __future__ import annotations

import argparse
import contextlib
import threading
import tomllib

from rig.bench.saving import bench_to_toml
from rig.commands.common import add_bench_arguments, bench_from_args, print_json
from rig.run.measure import sigterm_as_interrupt
from rig.sim.bench import VirtualBench
from rig.sim.description import parse_description


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="start a virtual bench and print its ports")
    add_bench_arguments(p)
    p.add_argument("--speed", type=float, default=None,
                   help="simulated seconds per host second (default: the bench file's)")
    p.add_argument("--power-on", action="store_true",
                   help="switch the DUT's supply on at once (to talk to it with `rig dut`)")
    p.add_argument("--json", action="store_true", help="print the ports as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    bench, _ = bench_from_args(args)
    described = parse_description(tomllib.loads(bench_to_toml(bench)), bench.path)
    with VirtualBench(described, speed=args.speed) as vb:
        if args.power_on:  # as the LPM01A would: supply at the bench's voltage, then on
            vb.world.set_supply(bench.emon.supply_voltage_v)
            vb.world.power(True)
        if args.json:
            print_json({"ports": vb.ports, "speed": vb.world.clock.speed, "dut": vb.dut_impl,
                        "powered": vb.world.powered, "simulated": True})
        else:
            print(f"virtual bench up (SIMULATED, {vb.world.clock.speed:g}x real time)")
            print(f"  DUT    (MLPerf Tiny protocol, {vb.dut_impl}): {vb.ports['dut']}")
            if "emon" in vb.ports:
                print(f"  energy monitor ({vb.emon_driver}):{'':<19}{vb.ports['emon']}")
            if "io_manager" in vb.ports:
                print(f"  IO manager (Arduino UNO pass-through):      {vb.ports['io_manager']}")
            power = "on" if vb.world.powered else (
                "off until the LPM01A says `pwr on`" if vb.emon_driver == "lpm01a"
                else f"off until the {vb.emon_driver} switches it on")
            print(f"  DUT supply: {power}; Ctrl-C stops the bench")
        with contextlib.suppress(KeyboardInterrupt), sigterm_as_interrupt():
            threading.Event().wait()
    return 0
