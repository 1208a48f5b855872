"""`rig measure asc`: run a benchmark procedure on a bench and store the run folder."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from rig.commands.common import (
    add_bench_arguments,
    add_override_arguments,
    bench_from_args,
    print_json,
)
from rig.console import ConsoleView, summary_table, timing_label
from rig.procedures import asc
from rig.runner import measure_asc

EXIT_FOR_STATUS = {"complete": 0, "failed-checks": 1}


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="run a benchmark and store the run folder")
    p.add_argument("benchmark", choices=["asc"], help="which benchmark (asc)")
    add_bench_arguments(p)
    add_override_arguments(p)
    p.add_argument("--scope", choices=asc.SCOPES, default="all",
                   help="what to measure: performance (latency), energy (idle power and energy "
                   "windows; energy-mode firmware), accuracy (the test set), or all (default)")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"),
                   help="where run folders go (default: ./runs)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    bench, device = bench_from_args(args)
    view = None if args.json else ConsoleView()
    try:
        outcome = measure_asc(
            bench, device=device, runs_root=args.runs_dir,
            subscribers=[view] if view else [], scope=args.scope,
        )
    finally:
        if view:
            view.close()
    if args.json:
        print_json({
            "run": str(outcome.run_path), "status": outcome.status,
            "simulated": bench.simulated, "summary": outcome.summary,
            **({"error": str(outcome.error)} if outcome.error else {}),
        })
    elif outcome.error is not None:
        Console(stderr=True).print(
            f"run folder: {outcome.run_path} ({outcome.status})", soft_wrap=True
        )
    else:
        out = Console()
        label = " (SIMULATED)" if bench.simulated else timing_label(outcome.summary)
        out.print(summary_table(outcome.summary, title=f"ASC on {device}{label}"))
        out.print(f"status: [bold]{outcome.status}[/]")
        out.print(f"run folder: {outcome.run_path}", soft_wrap=True)
    if outcome.error is not None:
        raise outcome.error
    return EXIT_FOR_STATUS.get(outcome.status, 1)
