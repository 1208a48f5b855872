"""`rig sweep qubo SWEEP.toml` and `rig sweep resume RUN`: overnight QUBO sweeps, checkpointed."""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from rig.commands.common import print_json
from rig.commands.mqtt import add_mqtt_arguments, telemetry_for
from rig.errors import ConfigError
from rig.qubo.sweep import (
    CONTENDED_CPU_SHARE,
    SweepOutcome,
    SweepPointDone,
    SweepResumed,
    contended,
    cpu_share,
    load_sweep,
    power_line,
    resume_sweep,
    start_sweep,
    with_tuning,
)
from rig.run.events import Event, Note, RunFinished, RunStarted


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="run an overnight QUBO sweep, or resume one")
    actions = p.add_subparsers(dest="sweep_action", metavar="ACTION", required=True)
    q = actions.add_parser("qubo", help="run every point of a SWEEP.toml into one run folder")
    q.add_argument("sweep_file", type=Path, metavar="SWEEP.toml",
                   help="suts x nodes x densities x seeds x timeouts (see sweeps/example.toml)")
    q.add_argument("--runs-dir", type=Path, default=Path("runs"),
                   help="where run folders go (default: ./runs)")
    q.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    q.add_argument("--tuning", type=Path, default=None, metavar="FILE",
                   help="a `rig qubo tune` file: its SUT gets the parameters of the nearest "
                        "(nodes, density) entry (overrides [sweep] tuning)")
    _add_cluster_arguments(q)
    add_mqtt_arguments(q)
    # Hidden: a closed-form point function, for tests of checkpoint and resume.
    q.add_argument("--stand-in", action="store_true", help=argparse.SUPPRESS)
    q.set_defaults(run=run)
    r = actions.add_parser("resume", help="continue a sweep run folder where it stopped")
    r.add_argument("run_folder", type=Path, metavar="RUN", help="a sweep folder under runs/")
    r.add_argument("--retry-failed", action="store_true",
                   help="also measure again the points recorded as failed")
    r.add_argument("--json", action="store_true", help="print the outcome as one JSON object")
    _add_cluster_arguments(r)
    add_mqtt_arguments(r)
    r.set_defaults(run=run)


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """--cluster: the points go to `rig worker`s through a Dask scheduler (rig/cluster)."""
    parser.add_argument("--cluster", metavar="ADDRESS", default=None,
                        help="measure the points on the rig workers of this Dask scheduler "
                             "(tcp://HOST:8786); this process still writes the run folder")
    parser.add_argument("--retries", type=int, default=None, metavar="N",
                        help="with --cluster: tries again a point that failed on the rig up "
                             "to N times before recording it as failed (default 1)")


def _dispatch(args: argparse.Namespace) -> Any:
    """The cluster dispatcher for --cluster, None without it."""
    if args.cluster is None:
        if args.retries is not None:
            raise ConfigError("--retries needs --cluster",
                              hint="a local sweep records a failed point at once")
        return None
    from rig.cluster.dispatch import DEFAULT_RETRIES, ClusterDispatch

    retries = DEFAULT_RETRIES if args.retries is None else args.retries
    return ClusterDispatch(args.cluster, retries=retries)


def _warn(text: str) -> None:
    """One warning line on stderr (before the live display starts)."""
    print(f"rig: warning: {text}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    view = None if args.json else SweepProgressView()
    subscribers: list[Callable[[Event], None]] = [view] if view else []
    try:
        with telemetry_for(args) as telemetry:
            if telemetry:
                subscribers.append(telemetry)
            if args.sweep_action == "qubo":
                spec = load_sweep(args.sweep_file)
                if args.tuning is not None:
                    spec = with_tuning(spec, args.tuning)
                outcome = start_sweep(spec, runs_root=args.runs_dir, stand_in=args.stand_in,
                                      subscribers=subscribers, dispatch=_dispatch(args))
            else:
                outcome = resume_sweep(args.run_folder, retry_failed=args.retry_failed,
                                       subscribers=subscribers, dispatch=_dispatch(args),
                                       warn=_warn)
    finally:
        if view:
            view.close()
    return report(outcome, as_json=args.json)


def report(outcome: SweepOutcome, *, as_json: bool) -> int:
    """Print the outcome; exit 0 when every point was measured, 1 when some failed."""
    summary = outcome.summary
    if as_json:
        print_json({
            "run": str(outcome.run_path), "status": outcome.status, "ran": outcome.ran,
            "simulated": outcome.simulated,
            **{k: summary[k] for k in ("points_done", "points_total", "points_failed",
                                       "points_contended")},
            "summary": summary["rows"],
            "power": summary["power"],
            "checks": summary.get("checks", []),
            **({"error": str(outcome.error)} if outcome.error else {}),
        })
    else:
        out = Console()
        label = " (SIMULATED: stand-in points)" if outcome.simulated else ""
        out.print(sweep_table(summary["rows"],
                              title=f"QUBO sweep: fixed timeout, mean over seeds{label}"))
        out.print(f"status: [bold]{outcome.status}[/], {summary['points_done']}/"
                  f"{summary['points_total']} points ({summary['points_failed']} failed)")
        out.print(escape(power_line(summary["power"], reasons=False)))
        out.print(f"run folder: {outcome.run_path}", soft_wrap=True)
    if outcome.error is not None:
        raise outcome.error
    failed_checks = [c for c in summary.get("checks", []) if c["ok"] is False]
    for check in failed_checks:  # e.g. `uncertainty within bound`: one line each, to stderr
        print(f"rig: check failed: {check['name']}: {check['detail']}", file=sys.stderr)
    return 1 if summary["points_failed"] or failed_checks else 0


def sweep_table(rows: list[dict[str, Any]], *, title: str) -> Table:
    """(sut, nodes, density, timeout) -> mean gap, power and energy over the seeds (the title
    says "mean over seeds").

    A power cell without power for every seed points to a note under the table ([1], [2]...)
    that says why (the rows' `power_status`: what was missing and what to enable); the power
    sources are listed under the table (a stand-in's says SIMULATED)."""
    table = Table(title=title, title_justify="left", caption_justify="left")
    for name in ("SUT", "nodes", "density", "timeout"):
        table.add_column(name, justify="left" if name == "SUT" else "right")
    table.add_column("gap", justify="right", no_wrap=True)
    table.add_column("power", justify="right", no_wrap=True)
    table.add_column("energy", justify="right", no_wrap=True)
    table.add_column("seeds", justify="right")
    sources: set[str] = set()
    notes: dict[str, int] = {}
    marks: set[str] = set()  # which uncertainty marks the cells use, explained under the table
    contended_seeds = 0
    for row in rows:
        gap = "—" if row["gap_mean"] is None else f"{row['gap_mean']:+.4f}"
        if row["power_w_mean"] is None:
            power = "unavailable" if row["seeds"] else "—"
        else:
            power = _with_u(row["power_w_mean"], "W", row, "power_w_mean", marks)
            if row["power_seeds"] < row["seeds"]:
                power += f" ({row['power_seeds']}/{row['seeds']} seeds)"
        if row["seeds"] and row.get("power_status"):
            power += f" \\[{notes.setdefault(row['power_status'], len(notes) + 1)}]"
        energy = "—" if row.get("energy_j_mean") is None else _with_u(
            row["energy_j_mean"], "J", row, "energy_j_mean", marks)
        if row.get("power_source"):
            sources.add(row["power_source"])
        seeds = f"{row['seeds']}/{row['seeds_expected']}"
        if row["failed"]:
            seeds += f" [red]({row['failed']} failed)[/]"
        if row.get("contended"):
            seeds += " [yellow]\\[c][/]"  # a footnote: the cell stays narrow on 80 columns
            contended_seeds += row["contended"]
        table.add_row(row["sut"], str(row["nodes"]), f"{row['density']:g}",
                      f"{row['timeout_s']:g} s", gap, power, energy, seeds)
    lines = [f"power source: {escape('; '.join(sorted(sources)))}"] if sources else []
    lines += [f"\\[{n}] {escape(why)}" for why, n in notes.items()]
    if marks:
        lines.append(_U_NOTE + "; ".join(_U_MARKS[m] for m in sorted(marks)) +
                     " (`rig show --json`: each budget, its k and its unknown terms)")
    if contended_seeds:
        lines.append(f"\\[c] contended: {contended_seeds} seed(s) whose solver had the CPU for "
                     f"under {CONTENDED_CPU_SHARE:.0%} of its solve (a busy host) understate the "
                     "SUT: measure them again on an idle host")
    if lines:
        table.caption = "\n".join(lines)
    return table


_U_NOTE = "±U%: expanded uncertainty relative to the figure (coverage ~95 %); "
_U_MARKS = {"lower": "±≥U%: a lower bound, some terms of the budget are not published",
            "unknown": "no mark: U unknown, the published terms give no bound above 0.01 %"}


def _with_u(value: float, unit: str, row: dict[str, Any], figure: str, marks: set[str]) -> str:
    """A sweep cell with its expanded uncertainty as a share of the figure, kept narrow for an
    80-column table (the report has the full `with_uncertainty` text with k and U): "1.100 W
    ±1.8%", "±≥1.8%" when the budget is incomplete, nothing when nothing of it is known."""
    shown = f"{value:#.4g} {unit}"
    b = (row.get("uncertainty") or {}).get(figure)
    if not b:
        return shown
    share = 100 * float(b.get("U") or 0.0) / abs(value) if value else 0.0
    complete = b.get("complete") is True
    # Below 0.01 % a lower bound says nothing (equal seeds leave ~1e-13 % of float round-off).
    if not complete and share < 0.01:
        marks.add("unknown")
        return shown
    if not complete:
        marks.add("lower")
    return f"{shown} ±{'' if complete else '≥'}{share:.2g}%"


class _MeanEtaColumn(ProgressColumn):
    """ETA from the mean point time so far (rich's own ETA follows the recent speed)."""

    def render(self, task: Any) -> Text:
        if task.fields.get("worker"):
            return Text("")  # a cluster worker's line: its share of the points, no ETA
        eta = task.fields.get("eta_s")
        if eta is None:
            return Text("ETA --:--:--", style="progress.remaining")
        seconds = round(eta)
        return Text(f"ETA {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}",
                    style="progress.remaining")


class SweepProgressView:
    """A subscriber that shows points done / total with an ETA, on stderr (console only); on a
    cluster also the points each worker measured, and the dispatcher's notes."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), _MeanEtaColumn(), console=self.console,
        )
        self._task: Any = None
        self._times: list[float] = []
        self._done = 0
        self._total = 0
        #: Per cluster worker: its progress task and how many points it measured.
        self._workers: dict[str, list[Any]] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            self._begin(f"sweep {event.device}", 0, int(event.manifest.get("points_total", 0)))
        elif isinstance(event, SweepResumed):
            self._begin("sweep (resumed)", event.done, event.total)
        elif isinstance(event, SweepPointDone) and self._task is not None:
            self._done += 1
            self._times.append(event.wall_s)
            if event.worker:
                self._count_worker(event.worker)
            # On a cluster the workers measure side by side (at least those seen so far).
            eta = (statistics.fmean(self._times) * max(0, self._total - self._done)
                   / max(1, len(self._workers)))
            self._progress.update(self._task, completed=self._done, eta_s=eta)
            if event.status != "ok":
                self._progress.console.print(f"[yellow]point {event.key} failed: "
                                             f"{event.error}[/]")
            elif contended(event.result):
                self._progress.console.print(
                    f"[yellow]point {event.key}: the solver had the CPU for "
                    f"{cpu_share(event.result):.0%} of its solve (a busy host): it understates "
                    "the SUT[/]")
        elif isinstance(event, Note) and event.level == "warning":
            self._progress.console.print(f"[yellow]{escape(event.text)}[/]")
        elif isinstance(event, RunFinished):
            self.close()

    def _count_worker(self, worker: dict[str, Any]) -> None:
        """One more point measured by `worker` (a line per worker under the bar)."""
        name = f"{worker.get('name')} ({worker.get('host')})"
        entry = self._workers.get(name)
        if entry is None:
            task = self._progress.add_task(f"  {escape(name)}", total=self._total or None,
                                           worker=True)
            entry = self._workers[name] = [task, 0]
        entry[1] += 1
        self._progress.update(entry[0], completed=entry[1],
                              description=f"  {escape(name)}: {entry[1]} points")

    def _begin(self, label: str, done: int, total: int) -> None:
        self._done, self._total = done, total
        self._task = self._progress.add_task(label, total=total, completed=done, eta_s=None)
        self._progress.start()

    def close(self) -> None:
        """Stop the live display (also after errors)."""
        self._progress.stop()
