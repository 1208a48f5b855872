"""The console view: progress bars while a run goes, and the summary table at its end."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rig.run.events import Event, Note, PhaseProgress, PhaseStarted, RunFinished, RunStarted
from rig.run.summary import ASC_FIGURES, figures_note
from rig.units import si


class ConsoleView:
    """A subscriber that shows the run as it happens (on stderr, so stdout stays clean)."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        self._tasks: dict[str, Any] = {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, RunStarted):
            label = " [yellow](SIMULATED: virtual bench)[/]" if event.simulated else ""
            if event.emulated:
                label += f" [yellow]({event.emulated.replace('emulated', 'EMULATED', 1)})[/]"
            dut = event.manifest.get("bench", {}).get("dut", {})
            if dut.get("kind") == "xylo" and not dut.get("hdk"):
                label += " [yellow](SIMULATED timing: XyloSim)[/]"
            self.console.print(f"[bold]{event.procedure.upper()}[/] on {event.device}{label}")
            self._progress.start()
        elif isinstance(event, PhaseStarted):
            self._tasks[event.phase] = self._progress.add_task(
                event.description or event.phase, total=event.total
            )
        elif isinstance(event, PhaseProgress) and event.phase in self._tasks:
            self._progress.update(self._tasks[event.phase], completed=event.done)
        elif isinstance(event, Note):
            style = "yellow" if event.level == "warning" else "dim"
            # A note's text is the rig's words, not markup: "[dut]" or "e-[...]" are shown as is.
            self._progress.console.print(f"[{style}]{event.level}: {escape(event.text)}[/]")
        elif isinstance(event, RunFinished):
            self._progress.stop()

    def close(self) -> None:
        """Stop the live display (also after errors)."""
        self._progress.stop()


#: Rows after the headline figures (`ASC_FIGURES`, which the report and the runner GUI show too).
_EXTRA_ROWS = [
    ("results_check", "Results", str),
    ("samples_failed", "Samples failed (result unverified)", str),
]

#: Figures whose numbers are times from the DUT: marked when its timing is simulated.
_TIME_ROWS = {"inferences_per_s", "execution_time_mean_s"}


def timing_label(summary: dict[str, Any]) -> str:
    """" (SIMULATED timing)" for a summary whose times are a simulator's, " (EMULATED timing)"
    for an emulator's (QEMU's instruction-counted guest time), else ""."""
    timing = str(summary.get("timing", ""))
    if timing.startswith("emulated"):
        return " (EMULATED timing)"
    return " (SIMULATED timing)" if timing.startswith("simulated") else ""


def summary_table(summary: dict[str, Any], *, title: str) -> Table:
    """The figures of an ASC summary as a table, checks included; a check that does not apply
    (ok None) reads "n/a", neither pass nor fail. A figure reads with its expanded uncertainty
    (`ASC_FIGURES`); under the table, what an incomplete budget misses."""
    note = figures_note(summary)
    table = Table(title=title, show_header=False, title_justify="left",
                  caption=escape(note) if note else None, caption_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    simulated = timing_label(summary)
    for key, label, fmt in ASC_FIGURES:
        if summary.get(key) is not None:
            if key in _TIME_ROWS and simulated:
                label += f" [yellow]{simulated.strip(' ()').split()[0]}[/]"
            table.add_row(label, fmt(summary))
    if summary.get("preprocess_time_mean_s") is not None:
        table.add_row("Pre-processing time per sample (mean ± standard error, test set)",
                      f"{si(summary['preprocess_time_mean_s'], 's')} ± "
                      f"{si(summary.get('preprocess_time_stderr_s'), 's', 2)}")
    for key, label, text in _EXTRA_ROWS:
        if summary.get(key) is not None:
            table.add_row(label, text(summary[key]))
    if "latency_runs" in summary:
        table.add_row("Timed runs", f"{summary['latency_runs']} ({summary['latency_timer']} timer)")
    for check in summary.get("checks", []):
        mark = {True: "[green]pass[/]", False: "[red]FAIL[/]"}.get(check["ok"], "[dim]n/a[/]")
        table.add_row(f"check: {check['name']}", f"{mark} {check['detail']}")
    return table
