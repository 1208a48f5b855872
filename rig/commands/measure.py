"""`rig measure asc`: run a benchmark procedure on a bench and store the run folder.

`rig measure qubo`: one fixed-timeout QUBO point, stored as a one-point sweep folder (the same
record as a sweep point), so that `rig show`, `rig report`, the runner and `rig sweep resume`
read it as they read any sweep."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from rig.commands.common import (
    add_bench_arguments,
    add_override_arguments,
    bench_from_args,
    print_json,
)
from rig.commands.mqtt import add_mqtt_arguments, telemetry_for
from rig.errors import ConfigError
from rig.run import asc
from rig.run.console import ConsoleView, summary_table, timing_label
from rig.run.events import Event
from rig.run.measure import measure_asc

EXIT_FOR_STATUS = {"complete": 0, "failed-checks": 1}
#: What `rig measure qubo --json` and its console lines report of the point's result.
QUBO_FIELDS = ("gap", "cost", "target", "target_method", "elapsed_s", "load_s", "power_w",
               "power_status", "energy_j", "power_source", "solver_cpu_s")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("measure", help="run a benchmark and store the run folder")
    benchmarks = p.add_subparsers(dest="benchmark", metavar="BENCHMARK", required=True)
    a = benchmarks.add_parser("asc", help="ASC on a bench (bench file or --device ...)")
    add_bench_arguments(a)
    add_override_arguments(a)
    a.add_argument("--scope", choices=asc.SCOPES, default="all",
                   help="what to measure: performance (latency), energy (idle power and energy "
                   "windows; energy-mode firmware), accuracy (the test set), or all (default)")
    _common(a)
    a.set_defaults(run=run)
    q = benchmarks.add_parser(
        "qubo", help="one fixed-timeout QUBO point, stored as a one-point sweep folder")
    q.add_argument("--sut", required=True, help="cpu-tabu, cpu-sa or loihi2")
    q.add_argument("--nodes", type=int, required=True, help="graph nodes (>= 2)")
    q.add_argument("--density", type=float, required=True, help="edge density in (0, 1]")
    q.add_argument("--seed", type=int, required=True, help="workload seed (>= 0)")
    q.add_argument("--timeout", type=float, required=True, metavar="SECONDS",
                   help="the fixed timeout of the solve, in seconds (> 0)")
    q.add_argument("--max-relative-uncertainty", type=float, default=None, metavar="X",
                   help="the largest relative expanded uncertainty (U over the figure, ~95 %%) "
                   "the point's power and energy may have, in (0, 1]; beyond it, or unknown "
                   "(one seed has no Type A estimate), the check `uncertainty within bound` "
                   "fails the run (exit 1). Default: no bound")
    _common(q)
    q.set_defaults(run=run_qubo)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--runs-dir", type=Path, default=Path("runs"),
                   help="where run folders go (default: ./runs)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    add_mqtt_arguments(p)


def run(args: argparse.Namespace) -> int:
    bench, device = bench_from_args(args)
    view = None if args.json else ConsoleView()
    try:
        with telemetry_for(args, bench.mqtt) as telemetry:
            outcome = measure_asc(
                bench, device=device, runs_root=args.runs_dir,
                subscribers=[s for s in (view, telemetry) if s], scope=args.scope,
                live=[telemetry.power] if telemetry else [],
            )
    finally:
        if view:
            view.close()
    if args.json:
        print_json({
            "run": str(outcome.run_path), "status": outcome.status,
            "simulated": bench.simulated,
            **({"emulated": bench.emulated} if bench.emulated else {}),
            "summary": outcome.summary,
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


def qubo_spec(sut: str, nodes: int, density: float, seed: int, timeout: float,
              max_relative_uncertainty: float | None = None) -> Any:
    """The one-point SweepSpec of `rig measure qubo`; every bad value is a one-line error."""
    from rig.qubo.sweep import KNOWN_SUTS, SweepSpec

    if sut not in KNOWN_SUTS:
        raise ConfigError(f"--sut {sut!r}: expected one of {', '.join(KNOWN_SUTS)}")
    if nodes < 2:
        raise ConfigError(f"--nodes {nodes}: expected an integer >= 2")
    if not (0.0 < density <= 1.0):
        raise ConfigError(f"--density {density:g}: expected a number in (0, 1]")
    if seed < 0:
        raise ConfigError(f"--seed {seed}: expected an integer >= 0")
    if not (timeout > 0.0 and math.isfinite(timeout)):
        raise ConfigError(f"--timeout {timeout:g}: expected a number of seconds > 0")
    bound = max_relative_uncertainty
    if bound is not None and not (0.0 < bound <= 1.0):
        raise ConfigError(f"--max-relative-uncertainty {bound:g}: expected a number in (0, 1]")
    return SweepSpec(suts=(sut,), nodes=(nodes,), densities=(density,), timeouts=(timeout,),
                     seeds=(seed,), name=f"qubo-{sut}-n{nodes}", max_relative_uncertainty=bound)


def run_qubo(args: argparse.Namespace) -> int:
    from rig.qubo.sweep import SweepPointDone, start_sweep

    spec = qubo_spec(args.sut, args.nodes, args.density, args.seed, args.timeout,
                     args.max_relative_uncertainty)
    points: list[SweepPointDone] = []

    def collect(event: Event) -> None:
        if isinstance(event, SweepPointDone):
            points.append(event)

    status = Console(stderr=True)
    if not args.json:
        status.print(f"measuring {spec.name}: density {args.density:g}, seed {args.seed}, "
                     f"timeout {args.timeout:g} s ...")
    with telemetry_for(args) as telemetry:
        outcome = start_sweep(spec, runs_root=args.runs_dir,
                              subscribers=[collect, *([telemetry] if telemetry else [])])
    point = points[0] if points else None
    data: dict[str, Any] = {
        "run": str(outcome.run_path), "status": outcome.status,
        "point_status": None if point is None else point.status,
        "sut": args.sut, "nodes": args.nodes, "density": args.density, "seed": args.seed,
        "timeout_s": args.timeout,
        **{k: None if point is None else point.result.get(k) for k in QUBO_FIELDS},
        # The GUM budget of the point's power and energy, as a sweep row's (one seed: Type A
        # unknown, so the budget is incomplete), and its checks (`uncertainty within bound`).
        "uncertainty": rows[0].get("uncertainty") if (rows := outcome.summary["rows"]) else None,
        "checks": outcome.summary.get("checks", []),
    }
    error = (point.error if point is not None and point.error
             else str(outcome.error) if outcome.error else None)
    if error:
        data["error"] = error
    if args.json:
        print_json(data)
    else:
        _print_qubo(data)
    if outcome.error is not None:
        raise outcome.error
    failed_checks = [c for c in data["checks"] if c["ok"] is False]
    for check in failed_checks:  # `uncertainty within bound`: one line each, to stderr
        print(f"rig: check failed: {check['name']}: {check['detail']}", file=sys.stderr)
    return 0 if point is not None and point.status == "ok" and not failed_checks else 1


def _print_qubo(data: dict[str, Any]) -> None:
    from rig.qubo.sweep import contended, cpu_share  # QUBO modules only for QUBO

    out = Console()
    if data["point_status"] != "ok":
        Console(stderr=True).print(f"[red]point failed:[/] {escape(str(data.get('error')))}")
    else:
        gap = "—" if data["gap"] is None else f"{data['gap']:+.4f}"
        out.print(f"gap: [bold]{gap}[/] (cost {data['cost']} vs target {data['target']}, "
                  f"{data['target_method']})")
        load = "" if data["load_s"] is None else f", load {data['load_s']:.4g} s outside it"
        out.print(f"solve time: {data['elapsed_s']:.4g} s of a {data['timeout_s']:g} s "
                  f"timeout{load}")
        if contended(data):
            out.print(f"[yellow]warning:[/] the solver had the CPU for {cpu_share(data):.0%} of "
                      "its solve: the host was busy, so this point understates the SUT "
                      "(measure on an idle host)")
        if data["power_w"] is not None:
            energy = "" if data["energy_j"] is None else f", energy {data['energy_j']:#.4g} J"
            out.print(escape(f"power: {data['power_w']:#.4g} W{energy} "
                             f"({data['power_source'] or 'source not recorded'})"))
        else:
            why = str(data["power_status"] or "no reading")
            why = why if why.startswith("power unavailable") else f"power unavailable: {why}"
            out.print(escape(why))
    out.print(f"run folder: {data['run']}", soft_wrap=True)

