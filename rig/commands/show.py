"""`rig show RUN`: read a run folder back and summarise it (also an incomplete one)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console

from rig.commands.common import print_json
from rig.console import summary_table
from rig.procedures import asc
from rig.store import INCOMPLETE, load_run


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("show", help="summarise a stored run folder")
    p.add_argument("run_folder", type=Path, metavar="RUN", help="a folder under runs/")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    record = load_run(args.run_folder)
    manifest = record.manifest
    if record.finished is not None and record.finished.summary:
        summary = record.finished.summary
    else:  # killed before it finished: recompute from what it had measured
        summary = asc.summarize(record.events, bench=manifest.get("bench"))
    counts: dict[str, int] = {}
    for row in record.rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    data = {
        "run": str(record.path),
        "status": record.status,
        "procedure": manifest.get("procedure"),
        "device": manifest.get("device"),
        "simulated": bool(manifest.get("simulated")),
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        "measured": counts,
        "summary": summary,
    }
    if record.finished is not None and record.finished.error:
        data["error"] = record.finished.error
    if args.json:
        print_json(data)
        return 0
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
