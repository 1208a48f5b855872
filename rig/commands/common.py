"""Arguments and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rig.bench.config import Bench, load_bench, resolve_device


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """`--device NAME` or `--bench FILE`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--device", metavar="NAME",
                       help="a bench by name (e.g. sim): ./benches, then the lab folder, "
                       "then the rig's own (`rig benches` lists them)")
    group.add_argument("--bench", metavar="FILE", type=Path, help="a bench TOML file")


def add_override_arguments(parser: argparse.ArgumentParser) -> None:
    """Command-line values that replace the bench file's (checked the same way)."""
    group = parser.add_argument_group("bench overrides")
    group.add_argument("--port", help="the DUT's serial port")
    group.add_argument("--baud", type=int, help="the DUT's baud rate")
    group.add_argument("--emon", metavar="DRIVER",
                       help="energy monitor driver (lpm01a, joulescope, n6705, 34465a, "
                       "ppk2, otii, none)")
    group.add_argument("--emon-port", metavar="ADDRESS",
                       help="the energy monitor's port, device path or VISA resource")
    group.add_argument("--voltage", type=float, help="DUT supply voltage [V]")
    group.add_argument("--sample-rate", type=float, help="energy monitor sample rate [Hz]")
    group.add_argument("--simulated", action="store_true", default=None,
                       help="label the run simulated (the ports lead to a virtual bench, "
                       "e.g. one served by `rig sim`)")


def _overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    pick = {
        ("dut", "port"): getattr(args, "port", None),
        ("dut", "baud"): getattr(args, "baud", None),
        ("emon", "driver"): getattr(args, "emon", None),
        ("emon", "port"): getattr(args, "emon_port", None),
        ("emon", "supply_voltage_v"): getattr(args, "voltage", None),
        ("emon", "sample_rate_hz"): getattr(args, "sample_rate", None),
        ("bench", "simulated"): getattr(args, "simulated", None),
    }
    out: dict[str, dict[str, Any]] = {}
    for (section, key), value in pick.items():
        if value is not None:
            out.setdefault(section, {})[key] = value
    return out


def bench_from_args(args: argparse.Namespace, default: str = "sim") -> tuple[Bench, str]:
    """The validated bench (with command-line overrides) and a short device label."""
    overrides = _overrides(args)
    if args.bench is not None:
        return load_bench(args.bench, overrides), args.bench.stem
    name = args.device or default
    return load_bench(resolve_device(name), overrides), name


def print_json(data: Any) -> None:
    """One JSON object on stdout."""
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()  # a parent process may be waiting for this line (rig sim --json)
