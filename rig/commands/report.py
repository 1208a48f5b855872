"""`rig report RUN... --out DIR`: the NeuroBench submission report from run folders.

`rig report --template [RUN...]` prints a system.toml to fill in (with a table per system of the
given runs). Exit codes: 0 written, 2 bad input (a folder that is not a run, an unfinished run
without --allow-incomplete, a run whose trace is damaged without --allow-damaged-traces, a bad
system.toml, --strict with unfilled fields).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

from rig.commands.common import print_json
from rig.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="write the NeuroBench report (md, html, pdf) from runs")
    p.add_argument("runs", type=Path, nargs="*", metavar="RUN",
                   help="ASC run folders and QUBO sweep folders, in the order to report them")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="folder for report.md/.html/.pdf, figures/ and results.json")
    p.add_argument("--system", type=Path, metavar="TOML",
                   help="system.toml: what only the submitter can say (see --template)")
    p.add_argument("--format", default="md,html,pdf",
                   help="comma-separated formats to write (default: md,html,pdf)")
    p.add_argument("--template", action="store_true",
                   help="print a system.toml to fill in (one table per system of the RUNs)")
    p.add_argument("--strict", action="store_true",
                   help="refuse (exit 2) while a required system.toml field is empty")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="report interrupted or failed runs too, marked as such")
    p.add_argument("--allow-damaged-traces", action="store_true",
                   help="report runs whose trace is missing, cut short or fails its CRC too, "
                   "marked as not re-derivable (default: refuse them, exit 2)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.template:
        return _template(args.runs)
    from rig.report.writer import write_report

    if args.out is None:
        raise ConfigError("--out DIR is missing", hint="rig report RUN... --out report/")
    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    err = Console(stderr=True)
    quiet = args.json or not sys.stderr.isatty()
    outcome = write_report(
        args.runs, args.out, system_file=args.system, formats=formats,
        allow_incomplete=args.allow_incomplete,
        allow_damaged_traces=args.allow_damaged_traces, strict=args.strict,
        progress=None if quiet else (lambda text: err.print(f"[dim]{text}…[/]")),
    )
    if args.json:
        print_json({"out": str(outcome.out_dir),
                    "files": {k: str(v) for k, v in outcome.files.items()},
                    "systems": [s.id for s in outcome.systems],
                    "missing": outcome.missing})
        return 0
    out = Console()
    for kind, path in outcome.files.items():
        out.print(f"{kind:>5}: {path}", soft_wrap=True)
    if outcome.missing:
        out.print(f"[yellow]{len(outcome.missing)} field(s) to be completed by the submitter "
                  f"(marked in the report): {', '.join(outcome.missing)}[/]", soft_wrap=True)
        out.print("[yellow]fill them in a system.toml (rig report --template RUN... prints one) "
                  "and pass --system[/]", soft_wrap=True)
    return 0


def _template(paths: list[Path]) -> int:
    from rig.report.runs import group_systems, read_run
    from rig.report.system import template

    systems = group_systems([read_run(p) for p in paths]) if paths else []
    sys.stdout.write(template([(s.id, f"{s.task}: {s.name}") for s in systems]))
    return 0
