"""`rig analyze TRACE`: energy inside the GPIO timestamp windows of a stored trace.

`rig analyze RUN_FOLDER`: a finished run's energy figures recomputed from its own trace, with
the windows and iteration counts of its events, and compared with its manifest
(`rig.run.reproduce`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from rig.errors import RigError
from rig.run.reproduce import TOLERANCE, Reproduction, reproduce_run
from rig.traces.analysis import (
    REPLICABILITY_TOLERANCE,
    EnergyAnalysis,
    analyze,
    span_samples,
    span_statistics,
)
from rig.traces.analysis.uncertainty import unknown_terms, with_uncertainty
from rig.traces.files import Trace, read_trace

_IDLE_HINT = "use START:END in seconds, e.g. --idle 0:2"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `rig analyze`."""
    p = subparsers.add_parser(
        "analyze",
        help="energy per inference from a trace (.jls or .csv), or reproduce a run's figures",
        description=(
            "Find the DUT's timestamp windows (pairs of falling edges on GPIO bit 0), integrate "
            "energy inside each, and report active, idle and dynamic power and energy per "
            "inference. Given a run folder instead, recompute the run's figures from its trace "
            "with the windows and iterations of its events and compare them with its manifest. "
            "Exit code 1 when a check fails (replicability, or a figure that does not reproduce)."
        ),
    )
    p.add_argument("trace", metavar="TRACE|RUN_FOLDER",
                   help="a .jls (JLS v2) or .csv trace file, or a finished run folder")
    p.add_argument(
        "--sample-rate", type=float, metavar="HZ", help="samples per second (CSV traces only)"
    )
    p.add_argument(
        "--iterations",
        type=int,
        metavar="N",
        help="inferences inside each timed window (default 1)",
    )
    p.add_argument(
        "--idle",
        metavar="START:END",
        help="a span in seconds where the DUT is ready but not computing, for idle power",
    )
    p.add_argument(
        "--span",
        metavar="START:END",
        help="instead of the windows: statistics of one span in seconds (as the viewer's "
        "markers show them: duration, mean/min/max current and power, charge, energy)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(run=run)
    return p


def parse_idle(text: str, option: str = "--idle") -> tuple[float, float]:
    """Parse `START:END` in seconds."""
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = float(parts[0]), float(parts[1])
    except ValueError:
        raise RigError(f"bad {option} {text!r}", hint=_IDLE_HINT.replace("--idle", option)) \
            from None
    if not (math.isfinite(start) and math.isfinite(end)) or start >= end:
        raise RigError(f"bad {option} {text!r}: START must be before END",
                       hint=_IDLE_HINT.replace("--idle", option))
    return start, end


def run(args: argparse.Namespace) -> int:
    """Analyse the trace and print the result (table, or JSON with --json); 1 when a check
    failed."""
    if Path(args.trace).is_dir():
        return _run_folder(args)
    if args.iterations is None:
        args.iterations = 1
    idle = parse_idle(args.idle) if args.idle is not None else None
    if args.iterations < 1:
        raise RigError(
            f"--iterations must be at least 1, got {args.iterations}",
            hint="give the number of inferences the DUT ran inside each window",
        )
    trace = read_trace(args.trace, sample_rate=args.sample_rate)
    if args.span is not None:
        return _print_span(args, trace)
    result = analyze(
        trace.current,
        trace.voltage,
        trace.gpio,
        trace.sample_rate,
        iterations=args.iterations,
        idle=idle,
    )
    if args.json:
        out = result.to_dict()
        out["trace"] = str(args.trace)
        out["simulated"] = trace.simulated
        print(json.dumps(out))
    else:
        _print_table(args.trace, trace, result)
    return 0 if result.replicable else 1


def _run_folder(args: argparse.Namespace) -> int:
    """`rig analyze RUN_FOLDER`: the manifest's figures against the trace's."""
    given = [opt for opt, value in (("--sample-rate", args.sample_rate),
                                    ("--iterations", args.iterations), ("--idle", args.idle),
                                    ("--span", args.span)) if value is not None]
    if given:
        raise RigError(f"{', '.join(given)} cannot be used with a run folder: its windows, idle "
                       "spans and iterations come from its events",
                       hint="drop the option, or give the trace file (traces/emon.jls)")
    result = reproduce_run(args.trace)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        _print_reproduction(result)
    if not result.ok:
        print(f"rig: not reproduced: {', '.join(result.failed)}", file=sys.stderr)
        return 1
    return 0


def _print_reproduction(result: Reproduction) -> None:
    """Plain aligned lines (a run's figure names are long; a pipe is 80 columns)."""
    label = " SIMULATED" if result.simulated else ""
    print(f"{result.run}{label}: {result.windows} window(s) and {result.idle_spans} idle "
          f"span(s) of its events, recomputed from {result.trace.name} at "
          f"{result.sample_rate_hz:g} Hz (limit {TOLERANCE:g} relative)")
    print(f"{'figure':<31}{'manifest':>19}{'recomputed':>19}{'rel. diff':>10}")
    for f in result.figures:
        stored = "missing" if f.manifest is None else f"{f.manifest:.12g}"
        again = "missing" if f.recomputed is None else f"{f.recomputed:.12g}"
        diff = "" if f.relative_difference is None else f"{f.relative_difference:.1e}"
        print(f"{f.name:<31}{stored:>19}{again:>19}{diff:>10}  {'ok' if f.ok else 'FAILED'}")
    if result.off_edge_samples:
        print("windows on timestamp edges FAILED: sample(s) "
              f"{', '.join(map(str, result.off_edge_samples[:10]))} are not falling edges of "
              "the trace's GPIO bit 0")
    else:
        print("windows on timestamp edges ok")
    _print_budgets(result.uncertainty)


def _print_budgets(budgets: dict[str, Any]) -> None:
    """Each re-derived figure with its expanded uncertainty, and what an incomplete budget
    misses (`--json` has every component)."""
    if not budgets:
        return
    print("uncertainty (re-derived; GUM budgets in --json):")
    for b in budgets.values():
        unit = "/s" if b.get("unit") == "1/s" else str(b.get("unit", ""))
        print(f"  {b.get('figure', '?')!s:<31}{with_uncertainty(b.get('value'), unit, b)}")
        if not b.get("complete", True):
            print(f"  {'':<31}unknown: {', '.join(unknown_terms(b))}")


def _print_span(args: argparse.Namespace, trace: Trace) -> int:
    """`--span START:END`: the markers' statistics over that span."""
    lo, hi = parse_idle(args.span, "--span")
    start, stop = span_samples(lo, hi, trace.sample_rate, len(trace))
    stats = span_statistics(trace.current, trace.voltage, trace.sample_rate, start, stop)
    if args.json:
        print(json.dumps({**stats.to_dict(), "trace": str(args.trace),
                          "simulated": trace.simulated}))
        return 0
    label = " SIMULATED" if trace.simulated else ""
    print(f"{args.trace}{label}: span {stats.start_s:.9g}-{stats.end_s:.9g} s, "
          f"{stats.samples} samples")
    rows = [
        ("duration", f"{stats.duration_s:.9g} s"),
        ("current mean / min / max", f"{stats.current_mean_a:.6g} / {stats.current_min_a:.6g} / "
                                     f"{stats.current_max_a:.6g} A"),
        ("power mean / min / max", f"{stats.power_mean_w:.6g} / {stats.power_min_w:.6g} / "
                                   f"{stats.power_max_w:.6g} W"),
        ("charge", f"{stats.charge_c:.6g} C"),
        ("energy", f"{stats.energy_j:.6g} J"),
    ]
    if stats.lost_samples:
        rows.append(("lost samples", f"{stats.lost_samples} (figures are NaN)"))
    for name, value in rows:
        print(f"{name:<26}{value}")
    return 0


def _print_table(path: str, trace: Trace, result: EnergyAnalysis) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    label = " [bold yellow]SIMULATED[/]" if trace.simulated else ""
    console.print(
        f"[bold]{path}[/]{label}: {len(trace)} samples at {trace.sample_rate:g} Hz "
        f"({trace.duration_s:.6g} s), {result.iterations} inference(s) per window"
    )
    table = Table(title="Timed windows (falling edges on GPIO bit 0)")
    table.add_column("#", justify="right")
    for name in ("start s", "end s", "duration s", "energy µJ", "power mW", "µJ/inf."):
        table.add_column(name, justify="right")
    for k, w in enumerate(result.windows, start=1):
        table.add_row(
            str(k),
            f"{w.start_s:.6f}",
            f"{w.end_s:.6f}",
            f"{w.duration_s:.6f}",
            f"{w.energy_j * 1e6:.4f}",
            f"{w.mean_power_w * 1e3:.4f}",
            f"{w.energy_j / result.iterations * 1e6:.4f}",
        )
    console.print(table)
    n = len(result.windows)
    console.print(f"active power            {result.active_power_w * 1e3:.4f} mW")
    console.print(
        f"energy per inference    {result.energy_per_inference_j * 1e6:.4f} µJ "
        f"(median of {n} window(s))"
    )
    console.print(
        f"execution time          {result.exec_time_mean_s * 1e3:.4f} ms "
        f"± {result.exec_time_stderr_s * 1e3:.4f} ms (mean ± stderr per inference)"
    )
    dynamic_w, dynamic_j = result.dynamic_power_w, result.dynamic_energy_per_inference_j
    if result.idle_power_w is not None and dynamic_w is not None and dynamic_j is not None:
        lo, hi = result.idle_span_s or (0.0, 0.0)
        console.print(
            f"idle power              {result.idle_power_w * 1e3:.4f} mW ({lo:g}-{hi:g} s)"
        )
        console.print(f"dynamic power           {dynamic_w * 1e3:.4f} mW")
        console.print(
            f"dynamic energy          {dynamic_j * 1e6:.4f} µJ "
            "per inference"
        )
    dev = result.replicability_max_rel_dev * 100
    if result.replicable:
        console.print(f"replicability           ok (windows within {dev:.2f}% of their mean)")
    else:
        console.print(
            f"replicability           [bold red]FAILED[/]: a window deviates {dev:.2f}% from "
            f"the mean (limit {REPLICABILITY_TOLERANCE * 100:g}%)"
        )
