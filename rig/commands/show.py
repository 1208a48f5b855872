"""`rig show RUN`: read a run folder back and summarise it: an ASC run (also an incomplete one),
or a QUBO sweep (gap and power per workload and timeout)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from rig.commands.common import print_json
from rig.commands.sweep import sweep_table
from rig.errors import ConfigError
from rig.qubo.sweep import CONTENDED_CPU_SHARE, RUNNING, is_sweep, power_line, sweep_summary
from rig.run.console import summary_table
from rig.run.store import INCOMPLETE, REFUSED, load_run
from rig.run.summary import REFUSED_TEXT, asc_summary


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
        return _damaged(data)
    summary, counts = data["summary"], data["measured"]
    out = Console()
    sim = " (SIMULATED)" if data["simulated"] else ""
    if data.get("emulated"):  # QEMU: not simulated, not hardware either
        sim += f" ({data['emulated'].replace('emulated', 'EMULATED', 1)})"
    out.print(f"[bold]{record.path}[/]", soft_wrap=True)
    _say_damaged(out, data, bool(record.events))
    out.print(f"{data['procedure'] or '?'} on {data['device'] or '?'}{sim}, "
              f"started {data['started_at'] or 'unknown'}")
    out.print(f"measured by: neurobench-rig {data['rig_version'] or '(not recorded)'}")
    for role, image in (data.get("images") or {}).items():
        digest = (f"sha256 {image['sha256']}, {image['size_bytes']:,} bytes"
                  if image.get("sha256") else f"not read ({image.get('error', '?')})")
        out.print(f"{role}: {escape(str(image.get('path')))}, {digest}", soft_wrap=True)
    style = "green" if record.status == "complete" else "yellow"
    out.print(f"status: [{style}]{record.status}[/]")
    if record.status == INCOMPLETE:
        out.print("[yellow]the run ended without finishing (killed or crashed); below is "
                  "everything it had measured[/]")
    if record.status == REFUSED:
        out.print(f"[yellow]{REFUSED_TEXT}[/]")
    if "error" in data:
        out.print(f"error: {data['error']}")
    measured = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "nothing"
    out.print(f"measured: {measured}")
    out.print(summary_table(summary, title="Summary"))
    return _damaged(data)


def _say_damaged(out: Console, data: dict[str, Any], has_events: bool) -> None:
    """Above everything else: the manifest could not be read, so what follows is from events."""
    if "manifest_error" not in data:
        return
    held = ("below is what events.jsonl still holds" if has_events
            else "and events.jsonl holds no readable events")
    out.print(f"[red]damaged run folder: {data['manifest_error']}[/]; {held}", soft_wrap=True)


def _damaged(data: dict[str, Any]) -> int:
    """Exit 0, or the one-line error (exit 2) of a folder whose manifest is damaged, after its
    events were shown."""
    if "manifest_error" not in data:
        return 0
    raise ConfigError(
        f"{data['run']}: {data['manifest_error']}; shown is what events.jsonl still holds",
        hint="the measurements are safe in events.jsonl; restore manifest.json from a copy of "
             "the folder before `rig report`, which needs it",
    )


def show_sweep(args: argparse.Namespace) -> int:
    """A sweep folder: status, points done, and gap and power per workload and timeout."""
    data = sweep_summary(args.run_folder)
    if args.json:
        print_json(data)
        return _damaged(data)
    out = Console()
    sim = " (SIMULATED: stand-in points)" if data["simulated"] else ""
    out.print(f"[bold]{data['run']}[/]", soft_wrap=True)
    _say_damaged(out, data, True)
    resumed = f", resumed {data['resumes']} time(s)" if data["resumes"] else ""
    out.print(f"QUBO sweep {data['sweep']['name']}{sim}, started {data['started_at']}{resumed}")
    out.print(f"measured by: neurobench-rig {data['rig_version'] or '(not recorded)'}")
    style = "green" if data["status"] == "complete" else "yellow"
    out.print(f"status: [{style}]{data['status']}[/]")
    out.print(f"points: {data['points_done']}/{data['points_total']} done "
              f"({data['points_failed']} failed)")
    if data.get("points_contended"):
        out.print(f"[yellow]{data['points_contended']} point(s) contended: the solver had the "
                  f"CPU for under {CONTENDED_CPU_SHARE:.0%} of its solve (a busy host): they "
                  "understate the SUT[/]")
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
    if "power" in data:
        out.print(escape(power_line(data["power"], reasons=False)))
    for check in data.get("checks", []):
        mark = {True: "[green]ok[/]", False: "[red]FAILED[/]"}.get(check["ok"], "n/a")
        out.print(f"check {escape(check['name'])}: {mark}: {escape(check['detail'])}",
                  soft_wrap=True)
    return _damaged(data)
