"""`rig show RUN`: read a run folder back and summarise it: an ASC run (also an incomplete one),
or a QUBO sweep (gap and power per workload and timeout)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from rig.commands.common import print_json
from rig.commands.sweep import sweep_table
from rig.console import summary_table
from rig.run_summary import asc_summary, sweep_summary
from rig.store import INCOMPLETE, load_run
from rig.sweep import RUNNING, is_sweep


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="summarise a stored run folder")
    p.add_argument("run_folder", type=Path, metavar="RUN", help="a folder under runs/")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    record = load_run(args.run_folder)
    if is_sweep(record.manifest):
        return show_sweep(args)
    data = asc_summary(record)
    if args.json:
        print_json(data)
        return 0
    summary, counts = data["summary"], data["measured"]
    out = Console()
    sim = " (SIMULATED)" if data["simulated"] else ""
    out.print(f"[bold]{record.path}[/]", soft_wrap=True)
    out.print(f"{data['procedure']} on {data['device']}{sim}, started {data['started_at']}")
    style = "green" if record.status == "complete" else "yellow"
    out.print(f"status: [{style}]{record.status}[/]")
    if record.status == INCOMPLETE:
        out.print("[yellow]the run ended without finishing (killed or crashed); below is "
                  "everything it had measured[/]")
    if "error" in data:
        out.print(f"error: {data['error']}")
    measured = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"
    out.print(f"measured: {measured}")
    out.print(summary_table(summary, title="Summary"))
    return 0


def show_sweep(args: argparse.Namespace) -> int:
    """A sweep folder: status, points done, and gap and power per workload and timeout."""
    data = sweep_summary(args.run_folder)
    if args.json:
        print_json(data)
        return 0
    out = Console()
    sim = " (SIMULATED: stand-in points)" if data["simulated"] else ""
    out.print(f"[bold]{data['run']}[/]", soft_wrap=True)
    resumed = f", resumed {data['resumes']} time(s)" if data["resumes"] else ""
    out.print(f"QUBO sweep {data['sweep']['name']}{sim}, started {data['started_at']}{resumed}")
    style = "green" if data["status"] == "complete" else "yellow"
    out.print(f"status: [{style}]{data['status']}[/]")
    out.print(f"points: {data['points_done']}/{data['points_total']} done "
              f"({data['points_failed']} failed)")
    if data["status"] == RUNNING:
        out.print("[yellow]another rig process is measuring this sweep right now[/]")
    elif data["status"] != "complete":
        out.print(f"[yellow]continue it with: rig sweep resume {data['run']}[/]", soft_wrap=True)
    if data["bad_lines"]:
        out.print(f"[yellow]{data['bad_lines']} unreadable line(s) in events.jsonl "
                  "(a write torn by a kill): ignored; a point in it is measured again on resume[/]")
    if "error" in data:
        out.print(f"error: {data['error']}")
    out.print(sweep_table(data["summary"], title="Fixed timeout: mean over seeds"))
    return 0
