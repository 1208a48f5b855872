"""`rig compare RUN_A RUN_B`: whether two runs' results really differ, figure by figure: the
difference Δ = B − A, its expanded uncertainty from both runs' GUM budgets, and the verdict
(rig/traces/analysis/difference.py says the model and the rule).

Exit codes: 0 compared (also when figures differ), 1 with --expect-same when any figure is not
shown to be the same, 2 bad input (not a run folder, two different procedures, a run without
figures): one line, nothing written.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rig.commands.common import print_json
from rig.errors import ConfigError
from rig.run.compare import (
    RunFigures,
    compare_runs,
    counts,
    delta_and_u,
    only_in,
    run_figures,
)
from rig.traces.analysis.difference import DIFFERS, NOT_DISTINGUISHABLE, UNDECIDED, Comparison
from rig.units import si

VERDICT_HELP = (
    "Correlated between the runs: a term grouped in its run's budget (a current range's gain, "
    "the supply set) when both runs record the same monitor serial, range and voltage; "
    "everything else independent. Verdicts: 'differs' only with every term of both budgets "
    "known and |delta| > U; 'not distinguishable at k = ...' when |delta| <= U, where an "
    "incomplete budget (a term not published) uses U = 2 u_c of the known terms, the least the "
    "real U can be; else 'undecided' (the difference exceeds what is known of the "
    "uncertainty): never reported as a difference.")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "compare", help="whether two runs' results really differ, within their uncertainty",
        description="Each figure both runs have: A, B, the difference B - A, its expanded "
                    "uncertainty U from both GUM budgets, and the verdict. " + VERDICT_HELP,
    )
    p.add_argument("run_a", type=Path, metavar="RUN_A", help="a run folder (the reference)")
    p.add_argument("run_b", type=Path, metavar="RUN_B",
                   help="a run folder of the same procedure (ASC runs, or QUBO sweeps: rows "
                        "matched by sut, nodes, density and timeout)")
    p.add_argument("--json", action="store_true", help="print the comparison as one JSON object")
    p.add_argument("--expect-same", action="store_true",
                   help="exit 1 unless every figure is 'not distinguishable' (a figure that "
                        "differs, or is undecided because a term is not published, fails: "
                        "sameness is not shown), e.g. for a firmware project's CI")
    p.set_defaults(run=run)


def read_figures(path: Path) -> RunFigures:
    """A run folder's figures, as `rig show --json` reads them."""
    from rig.qubo.sweep import is_sweep, sweep_summary
    from rig.run.store import load_run
    from rig.run.summary import asc_summary

    record = load_run(path)
    if record.manifest_error is not None:
        raise ConfigError(f"{path}: {record.manifest_error}",
                          hint="restore manifest.json from a copy of the folder")
    shown = sweep_summary(path) if is_sweep(record.manifest) else asc_summary(record)
    return run_figures(str(path), record.manifest, shown)


def run(args: argparse.Namespace) -> int:
    a, b = read_figures(args.run_a), read_figures(args.run_b)
    comparisons = compare_runs(a, b)
    tally = counts(comparisons)
    not_same = [c for c in comparisons if c.verdict != NOT_DISTINGUISHABLE]
    if args.json:
        print_json({"a": a.name, "b": b.name, "procedure": a.procedure,
                    "figures": [c.to_json() for c in comparisons], "counts": tally,
                    # figures one run has and the other not (a sweep's row): not compared
                    "only_a": only_in(a, b), "only_b": only_in(b, a),
                    **({"expect_same": not not_same} if args.expect_same else {})})
    else:
        _print(a, b, comparisons, tally)
    if args.expect_same and not_same:
        err = Console(stderr=True, soft_wrap=True)
        for c in not_same:
            delta, u = delta_and_u(c)
            err.print(escape(f"rig compare: {c.key}: {c.verdict_text} (delta {delta}, "
                             f"U {u})"))
        return 1
    return 0


def _print(a: RunFigures, b: RunFigures, comparisons: list[Comparison], tally: dict[str, Any]
           ) -> None:
    out = Console(soft_wrap=True)
    out.print(f"A: [bold]{escape(a.name)}[/]")
    out.print(f"B: [bold]{escape(b.name)}[/]")
    table = Table(title=f"{a.procedure}: B - A, U at ~95 %")
    for name in ("figure", "A", "B", "delta", "U(delta)", "k", "verdict"):
        table.add_column(name, justify="left" if name in ("figure", "verdict") else "right")
    style = {DIFFERS: "red", UNDECIDED: "yellow", NOT_DISTINGUISHABLE: "green"}
    for c in comparisons:
        delta, u = delta_and_u(c)
        table.add_row(escape(c.key), si(c.a, c.unit), si(c.b, c.unit), delta, u, f"{c.k:.3g}",
                      f"[{style[c.verdict]}]{escape(c.verdict_text)}[/]")
    out.print(table)
    out.print(f"{tally[DIFFERS]} differ, {tally[NOT_DISTINGUISHABLE]} not distinguishable, "
              f"{tally[UNDECIDED]} undecided")
    if any(not c.delta.complete for c in comparisons):
        out.print("U a lower bound: a term of the budgets is not published, so U is 2 u_c of "
                  "the known terms, the least it can be; such a figure is never said to differ")
    for which, mine, other in (("A", a, b), ("B", b, a)):
        if only := only_in(mine, other):
            out.print(escape(f"only in {which} (not compared): {'; '.join(only)}"))
    if any(c.shared_groups for c in comparisons):
        shared = sorted({g for c in comparisons for g in c.shared_groups})
        out.print(f"correlated between the runs (the same instrument): {', '.join(shared)}")
    else:
        out.print("no term correlated between the runs (no instrument serial shared by both)")
