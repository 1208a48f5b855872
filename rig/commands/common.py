"""Arguments and helpers shared by several subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rig.config import Bench, load_bench, resolve_device


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """`--device NAME` or `--bench FILE`."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--device", metavar="NAME",
                       help="a bench from benches/ by name (e.g. sim)")
    group.add_argument("--bench", metavar="FILE", type=Path, help="a bench TOML file")


def bench_from_args(args: argparse.Namespace, default: str = "sim") -> tuple[Bench, str]:
    """The validated bench and a short device label for the run folder."""
    if args.bench is not None:
        bench = load_bench(args.bench)
        return bench, args.bench.stem
    name = args.device or default
    return load_bench(resolve_device(name)), name


def print_json(data: Any) -> None:
    """One JSON object on stdout."""
    json.dump(data, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")
    sys.stdout.flush()  # a parent process may be waiting for this line (rig sim --json)
