"""`rig gui`: the runner window, from plugging in to a finished run without a terminal.

Left: the bench (pick, edit, save) and its devices (ports, handshake). Right: what to run, Start
and Stop, progress per phase, the live power trace, and tabs for the event log, the results and
the earlier runs. The window is one more subscriber of the procedure's event bus: the rig runs
the measurement on a worker thread (`gui.run_session`), and nothing here computes a number.
"""

from __future__ import annotations

import html
import itertools
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from gui.background import Background, Done
from gui.bench_panel import BenchPanel
from gui.devices_panel import DevicesPanel
from gui.live_plot import LivePowerPlot
from gui.results_panel import EarlierRuns, ResultsPanel
from gui.run_session import AscJob, RunSession, SessionEnd, SweepJob
from rig.errors import ConfigError
from rig.qubo.sweep import KNOWN_SUTS, SweepPointDone, SweepResumed, load_sweep, parse_sweep
from rig.run.asc import SCOPES
from rig.run.events import (
    Event,
    IdleMeasured,
    InstrumentInfo,
    LatencyRun,
    Note,
    PhaseProgress,
    PhaseStarted,
    RunFinished,
    RunStarted,
    SampleClassified,
    TraceSaved,
    WindowMeasured,
)
from rig.run.measure import asc_phase_seconds
from rig.units import si

#: How often the live plot takes the monitor's previews [ms].
LIVE_MS = 100
#: Lines kept in the event log.
LOG_LINES = 5000
PROCEDURES = ("ASC", "QUBO point", "QUBO sweep file")
BANNER_STYLE = {
    "error": "background:#f8d7da; color:#58151c; border:1px solid #f1aeb5;",
    "warning": "background:#fff3cd; color:#664d03; border:1px solid #ffe69c;",
    "info": "background:#d1e7dd; color:#0a3622; border:1px solid #a3cfbb;",
}
ENDING = {
    "complete": ("info", "run complete"),
    "failed-checks": ("warning", "run finished, but some checks failed (see Results)"),
    "interrupted": ("warning", "run stopped: the DUT was powered off; the run folder is marked "
                               "interrupted and keeps everything measured"),
    "failed": ("error", "run failed"),
    "refused": ("error", "run not started"),
}


class RunnerWindow(QtWidgets.QMainWindow):
    """The runner: bench, devices, run, results."""

    def __init__(self, *, runs_root: Path = Path("runs"), bench: str | None = None,
                 port_lister: Callable[[], list[Any]] | None = None,
                 hotplug: bool = True) -> None:
        super().__init__()
        self.setWindowTitle("NeuroBench rig — runner")
        self.session: RunSession | None = None
        self.last_end: SessionEnd | None = None
        self._viewers: list[QtWidgets.QWidget] = []
        self._jobs: set[Background] = set()
        self._phases: dict[str, dict[str, Any]] = {}
        self._estimates: dict[str, float] = {}
        self._point_times: list[float] = []
        self._points = (0, 0)
        self._started_at: float | None = None
        self._hotplug = hotplug
        #: The last report written (rig.report.writer.ReportOutcome).
        self.last_report: Any = None

        self.banner = QtWidgets.QLabel()
        self.banner.setObjectName("banner")
        self.banner.setWordWrap(True)
        self.banner.setTextFormat(QtCore.Qt.TextFormat.RichText)
        self.banner.setOpenExternalLinks(True)
        self.banner.setContentsMargins(8, 6, 8, 6)
        self.banner.hide()
        self.banner_level = ""

        self.bench_panel = BenchPanel()
        self.devices = DevicesPanel(lister=port_lister)
        self.bench_panel.message.connect(self.say)
        self.devices.message.connect(self.say)
        self.devices.ports_changed.connect(self.bench_panel.set_ports)
        self.devices.check_button.clicked.connect(self._check_bench)
        left = QtWidgets.QWidget()
        lbox = QtWidgets.QVBoxLayout(left)
        lbox.setContentsMargins(0, 0, 0, 0)
        lbox.addWidget(self.bench_panel)
        lbox.addWidget(self.devices, 1)
        scroll = QtWidgets.QScrollArea()
        scroll.setWidget(left)
        scroll.setWidgetResizable(True)
        scroll.setMinimumWidth(430)

        right = QtWidgets.QWidget()
        rbox = QtWidgets.QVBoxLayout(right)
        rbox.setContentsMargins(0, 0, 0, 0)
        rbox.addWidget(self._build_run_box())
        rbox.addWidget(self._build_progress_box())
        self.live = LivePowerPlot()
        rbox.addWidget(self.live, 2)
        self.log = QtWidgets.QPlainTextEdit()
        self.log.setObjectName("eventLog")
        self.log.setReadOnly(True)
        self.log.setMaximumBlockCount(LOG_LINES)
        self.log.setFont(QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont))
        self.results = ResultsPanel()
        self.results.message.connect(self.say)
        self.results.open_viewer.connect(self.open_viewer)
        self.results.make_report.connect(self.make_report)
        self.earlier = EarlierRuns()
        self.earlier.reopen.connect(self._reopen)
        self.tabs = QtWidgets.QTabWidget()
        self.tabs.addTab(self.log, "Event log")
        self.tabs.addTab(self.results, "Results")
        self.tabs.addTab(self.earlier, "Earlier runs")
        rbox.addWidget(self.tabs, 3)

        splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        splitter.addWidget(scroll)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        central = QtWidgets.QWidget()
        cbox = QtWidgets.QVBoxLayout(central)
        cbox.setContentsMargins(6, 6, 6, 6)
        cbox.addWidget(self.banner)
        cbox.addWidget(splitter, 1)
        self.setCentralWidget(central)
        self.statusBar().showMessage("ready")

        self._live_timer = QtCore.QTimer(self)
        self._live_timer.setInterval(LIVE_MS)
        self._live_timer.timeout.connect(self._drain_previews)
        self._clock = QtCore.QTimer(self)
        self._clock.setInterval(500)
        self._clock.timeout.connect(self._tick)

        self.runs_dir.setText(str(runs_root))
        self.earlier.set_root(runs_root)
        self.bench_panel.changed.connect(self._bench_changed)
        if bench is not None:
            self.bench_panel.select(bench)
        elif self.bench_panel.choice.findText("sim") >= 0:
            self.bench_panel.select("sim")
        self._procedure_changed()
        self._set_running(False)
        if hotplug:
            self.devices.start_hotplug()
        self.resize(1500, 980)

    # -- construction ---------------------------------------------------------------------------
    def _build_run_box(self) -> QtWidgets.QGroupBox:
        box = QtWidgets.QGroupBox("Run")
        self.procedure = QtWidgets.QComboBox()
        self.procedure.setObjectName("procedure")
        self.procedure.addItems(list(PROCEDURES))
        self.procedure.currentIndexChanged.connect(self._procedure_changed)
        self.scope = QtWidgets.QComboBox()
        self.scope.setObjectName("ascScope")
        self.scope.addItems(list(SCOPES))
        self.scope.setToolTip("all; performance (latency only); energy (idle power and energy "
                              "windows); accuracy (the test set)")
        self.sut = QtWidgets.QComboBox()
        self.sut.addItems(list(KNOWN_SUTS))
        self.nodes = QtWidgets.QSpinBox()
        self.nodes.setRange(2, 1_000_000)
        self.nodes.setValue(50)
        self.density = QtWidgets.QDoubleSpinBox()
        self.density.setRange(0.001, 1.0)
        self.density.setDecimals(3)
        self.density.setSingleStep(0.01)
        self.density.setValue(0.1)
        self.seed = QtWidgets.QSpinBox()
        self.seed.setRange(0, 1_000_000)
        self.timeout = QtWidgets.QDoubleSpinBox()
        self.timeout.setRange(0.001, 3600.0)
        self.timeout.setDecimals(3)
        self.timeout.setValue(0.1)
        self.timeout.setSuffix(" s")
        self.sweep_file = QtWidgets.QLineEdit()
        self.sweep_file.setPlaceholderText("SWEEP.toml (e.g. sweeps/example.toml)")
        browse = QtWidgets.QPushButton("…")
        browse.setMaximumWidth(32)
        browse.clicked.connect(self._browse_sweep)
        self.runs_dir = QtWidgets.QLineEdit()
        self.start_button = QtWidgets.QPushButton("Start")
        self.start_button.setObjectName("start")
        self.start_button.setStyleSheet("QPushButton { font-weight: bold; padding: 4px 18px; }")
        self.start_button.clicked.connect(self.start)
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.stop_button.setObjectName("stop")
        self.stop_button.setToolTip("stop like Ctrl-C: DUT powered off, run folder marked "
                                    "interrupted, measured data kept")
        self.stop_button.clicked.connect(self.stop)

        self._asc_row = _row(QtWidgets.QLabel("Measure"), self.scope)
        self._point_row = _row(QtWidgets.QLabel("SUT"), self.sut, QtWidgets.QLabel("nodes"),
                               self.nodes, QtWidgets.QLabel("density"), self.density,
                               QtWidgets.QLabel("seed"), self.seed,
                               QtWidgets.QLabel("timeout"), self.timeout)
        self._sweep_row = _row(self.sweep_file, browse)
        top = _row(QtWidgets.QLabel("Procedure"), self.procedure, QtWidgets.QLabel("Runs folder"),
                   self.runs_dir, self.start_button, self.stop_button)
        lay = QtWidgets.QVBoxLayout(box)
        for w in (top, self._asc_row, self._point_row, self._sweep_row):
            lay.addWidget(w)
        return box

    def _build_progress_box(self) -> QtWidgets.QGroupBox:
        box = QtWidgets.QGroupBox("Progress")
        self.run_title = QtWidgets.QLabel("idle")
        self.run_title.setObjectName("runTitle")
        self.clock_label = QtWidgets.QLabel("")
        self.clock_label.setObjectName("clock")
        head = _row(self.run_title, self.clock_label)
        self.phase_grid = QtWidgets.QGridLayout()
        self.phase_grid.setColumnStretch(1, 1)
        lay = QtWidgets.QVBoxLayout(box)
        lay.addWidget(head)
        lay.addLayout(self.phase_grid)
        return box

    # -- messages -------------------------------------------------------------------------------
    def say(self, level: str, text: str = "", hint: str | None = "") -> None:
        """Show a message in the banner ("clear" hides it); errors also go to the log."""
        if level == "clear":
            self.banner.hide()
            self.banner_level = ""
            return
        body = html.escape(text)
        if hint:
            body += f"<br><i>{html.escape(hint)}</i>"
        self.show_banner(level, body)
        if level in ("error", "warning"):
            self._log(f"{level}: {text}" + (f" ({hint})" if hint else ""))

    def show_banner(self, level: str, rich: str) -> None:
        """The banner with rich text (already escaped)."""
        self.banner.setText(rich)
        self.banner.setStyleSheet(BANNER_STYLE.get(level, BANNER_STYLE["info"]))
        self.banner_level = level
        self.banner.show()

    def banner_text(self) -> str:
        """The banner's text without markup (for tests)."""
        doc = QtGui.QTextDocument()
        doc.setHtml(self.banner.text())
        return doc.toPlainText() if self.banner.isVisible() else ""

    def _log(self, line: str) -> None:
        self.log.appendPlainText(f"{time.strftime('%H:%M:%S')}  {line}")

    # -- bench ----------------------------------------------------------------------------------
    def _bench_changed(self) -> None:
        self.devices.device_table.setRowCount(0)
        self.devices.states = []

    def _check_bench(self) -> None:
        try:
            bench = self.bench_panel.bench()
        except ConfigError as exc:
            self.say("error", exc.message, exc.hint)
            return
        self.devices.check(bench)

    # -- run ------------------------------------------------------------------------------------
    def _procedure_changed(self, *_args: object) -> None:
        which = self.procedure.currentText()
        self._asc_row.setVisible(which == "ASC")
        self._point_row.setVisible(which == "QUBO point")
        self._sweep_row.setVisible(which == "QUBO sweep file")

    def _browse_sweep(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Sweep file", "sweeps",
                                                        "Sweep files (*.toml)")
        if path:
            self.sweep_file.setText(path)

    def _job(self) -> AscJob | SweepJob:
        """What Start runs, from the form (ConfigError when the form is not valid)."""
        runs_root = Path(self.runs_dir.text().strip() or "runs")
        which = self.procedure.currentText()
        if which == "ASC":
            bench = self.bench_panel.bench()
            return AscJob(bench, self.bench_panel.device_label(), runs_root,
                          self.scope.currentText())
        if which == "QUBO point":
            raw = {"sweep": {
                "suts": [self.sut.currentText()], "nodes": [self.nodes.value()],
                "densities": [self.density.value()], "seeds": [self.seed.value()],
                "timeouts": [self.timeout.value()],
                "name": f"{self.sut.currentText()}-n{self.nodes.value()}",
            }}
            spec = parse_sweep(raw, Path("QUBO point (runner window)"))
            return SweepJob(spec, runs_root)
        text = self.sweep_file.text().strip()
        if not text:
            raise ConfigError("no sweep file chosen", hint="pick a SWEEP.toml, e.g. "
                              "sweeps/example.toml")
        return SweepJob(load_sweep(Path(text)), runs_root)

    def start(self) -> bool:
        """Start the chosen procedure; False (and a message) when it cannot start."""
        if self.session is not None and self.session.running:
            return False
        try:
            job = self._job()
        except ConfigError as exc:
            self.say("error", exc.message, exc.hint)
            return False
        self.devices.stop_hotplug()  # a probe must not knock on the ports the run uses
        if self.devices.busy:  # one is knocking now: start once it is done
            self.say("info", "waiting for the port scan to finish before starting…")
            self.start_button.setEnabled(False)
            QtCore.QTimer.singleShot(100, self._start_when_free)
            return True
        self.say("clear")
        self._reset_progress()
        self._estimates = (asc_phase_seconds(job.bench, job.scope)
                           if isinstance(job, AscJob) else {})
        self.live.clear()
        self.log.clear()
        self.run_title.setText(f"<b>{html.escape(job.title())}</b>")
        self._log(f"starting: {job.title()}")
        self.session = RunSession(job, self)
        self.session.run_event.connect(self.on_event)
        self.session.ended.connect(self._ended)
        self._started_at = time.monotonic()
        self._set_running(True)
        self.session.start()
        self._live_timer.start()
        self._clock.start()
        return True

    def _start_when_free(self) -> None:
        if self.devices.busy:
            QtCore.QTimer.singleShot(100, self._start_when_free)
        else:
            self.start()

    def stop(self) -> None:
        """Stop the run at its next safe point (the same clean stop as Ctrl-C)."""
        if self.session is not None and self.session.running:
            self.session.stop()
            self.stop_button.setEnabled(False)
            self.statusBar().showMessage("stopping: powering the DUT off…")
            self._log("stop asked: the run ends at its next safe point, the DUT is powered off")

    def _set_running(self, running: bool) -> None:
        self.start_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.bench_panel.setEnabled(not running)
        self.devices.check_button.setEnabled(not running)
        self.devices.rescan_button.setEnabled(not running)
        self.procedure.setEnabled(not running)
        self.statusBar().showMessage("running" if running else "ready")

    @property
    def running(self) -> bool:
        """Whether a run is going."""
        return self.session is not None and self.session.running

    # -- events (GUI thread) --------------------------------------------------------------------
    def on_event(self, event: Event) -> None:
        """One event of the run: progress, log, results."""
        if isinstance(event, PhaseStarted):
            self._phase(event.phase, event.description or event.phase, event.total)
        elif isinstance(event, PhaseProgress):
            self._progress(event.phase, event.done, event.total)
        elif isinstance(event, RunStarted) and event.procedure != "asc":
            total = int(event.manifest.get("points_total", 0))
            self._points = (0, total)
            self._phase("points", "sweep points", total)
        elif isinstance(event, SweepResumed):
            self._points = (event.done, event.total)
        elif isinstance(event, SweepPointDone):
            done, total = self._points
            self._points = (done + 1, total)
            self._point_times.append(event.wall_s)
            self._progress("points", done + 1, total)
        line = describe(event)
        if line is not None:
            self._log(line)

    def _reset_progress(self) -> None:
        while self.phase_grid.count():
            item = self.phase_grid.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        self._phases.clear()
        self._point_times = []
        self._points = (0, 0)
        self.clock_label.setText("")

    def _phase(self, name: str, description: str, total: int | None) -> None:
        row = len(self._phases)
        label = QtWidgets.QLabel(description)
        bar = QtWidgets.QProgressBar()
        bar.setObjectName(f"phase-{name}")
        bar.setRange(0, total or 0)
        bar.setFormat("%v / %m")
        self.phase_grid.addWidget(label, row, 0)
        self.phase_grid.addWidget(bar, row, 1)
        for p in self._phases.values():  # an earlier phase is over when the next begins
            if p["bar"].maximum() > 0:
                p["bar"].setValue(p["bar"].maximum())
        self._phases[name] = {"bar": bar, "label": label, "t0": time.monotonic(), "done": 0,
                              "total": total}

    def _progress(self, name: str, done: int, total: int | None) -> None:
        p = self._phases.get(name)
        if p is None:
            return
        if total:
            p["bar"].setMaximum(total)
        p["bar"].setValue(done)
        p["done"], p["total"] = done, total

    def phase_values(self) -> dict[str, tuple[int, int]]:
        """phase -> (value, maximum) of its bar (for tests)."""
        return {k: (p["bar"].value(), p["bar"].maximum()) for k, p in self._phases.items()}

    def remaining_s(self) -> float | None:
        """Estimated host seconds left: the current phase from its own pace, later phases
        from the bench's numbers; sweeps from the mean point time."""
        if self._point_times:
            done, total = self._points
            return statistics.fmean(self._point_times) * max(0, total - done)
        if not self._phases:
            return sum(self._estimates.values()) or None
        names = list(self._phases)
        name = names[-1]
        p = self._phases[name]
        now = time.monotonic()
        # The bench's numbers guess high for a real DUT they do not know: scale the phases to
        # come by how the finished ones compared with their guesses.
        took = sum(self._phases[b]["t0"] - self._phases[a]["t0"]
                   for a, b in itertools.pairwise(names) if a in self._estimates)
        guessed = sum(self._estimates[a] for a in names[:-1] if a in self._estimates)
        scale = took / guessed if took > 0 and guessed > 0 else 1.0
        elapsed = now - p["t0"]
        if p["done"] and p["total"]:
            left = elapsed / p["done"] * (p["total"] - p["done"])
        else:
            left = max(0.0, self._estimates.get(name, 0.0) * scale - elapsed)
        later = list(self._estimates)
        after = later[later.index(name) + 1:] if name in later else []
        return left + scale * sum(self._estimates[k] for k in after)

    def _tick(self) -> None:
        if self._started_at is None:
            return
        elapsed = time.monotonic() - self._started_at
        left = self.remaining_s() if self.running else None
        text = f"elapsed {_clock(elapsed)}"
        if left is not None and math.isfinite(left):
            text += f"  ·  about {_clock(left)} left"
        self.clock_label.setText(text)

    def _drain_previews(self) -> None:
        if self.session is None:
            return
        previews = []
        queue = self.session.previews
        while queue:
            previews.append(queue.popleft())
        self.live.add(previews)

    def _ended(self, end: SessionEnd) -> None:
        self._drain_previews()
        self._live_timer.stop()
        self._tick()
        self._clock.stop()
        self.last_end = end
        self._set_running(False)
        if self._hotplug:
            self.devices.start_hotplug()
        level, text = ENDING.get(end.status, ("error", f"run ended: {end.status}"))
        parts = [f"<b>{html.escape(text)}</b>"]
        if end.message:
            parts.append(html.escape(end.message))
        if end.hint:
            parts.append(f"<i>{html.escape(end.hint)}</i>")
        if end.run_path is not None:
            url = QtCore.QUrl.fromLocalFile(str(end.run_path.resolve())).toString()
            parts.append(f'run folder kept: <a href="{url}">{html.escape(str(end.run_path))}</a>')
        self.show_banner(level, "<br>".join(parts))
        self._log(f"{end.status}: {end.message or text}")
        if end.traceback:
            self._log(end.traceback)
        self.earlier.refresh()
        if end.run_path is not None and self.results.show_run(end.run_path):
            self.tabs.setCurrentWidget(self.results)
        self.statusBar().showMessage(f"ready — last run {end.status}")

    # -- results --------------------------------------------------------------------------------
    def _reopen(self, path: Path) -> None:
        if self.results.show_run(path):
            self.tabs.setCurrentWidget(self.results)

    def open_viewer(self, path: Path | None) -> QtWidgets.QWidget | None:
        """The run's trace in the viewer (`rig view`), as a window of its own."""
        if path is None:
            return None
        from gui.viewer import ViewerWindow
        from rig.errors import BENCH_ERRORS
        from rig.run.view import open_view

        try:
            view = open_view(path)
        except BENCH_ERRORS as exc:
            self.say("error", exc.message, exc.hint)
            return None
        viewer = ViewerWindow(view)
        viewer.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        viewer.destroyed.connect(lambda *_: self._viewers.remove(viewer)
                                 if viewer in self._viewers else None)
        self._viewers.append(viewer)
        viewer.show()
        return viewer

    def make_report(self, path: Path | None, *, formats: tuple[str, ...] = ("md", "html", "pdf")
                    ) -> None:
        """`rig report RUN --out reports/RUN` off the GUI thread (beside the runs folder: run
        folders are never modified); a link to it when written."""
        if path is None:
            return
        from rig.report.writer import write_report

        out = report_folder(path)
        self.results.report_button.setEnabled(False)
        self.statusBar().showMessage("writing the report…")
        job: Background

        def work() -> Any:
            return write_report([path], out, formats=formats, allow_incomplete=True)

        def done(result: Done) -> None:
            self._jobs.discard(job)
            self.results.report_button.setEnabled(True)
            self.statusBar().showMessage("ready")
            if not result.ok:
                self.say("error", f"report: {result.error}", result.hint)
                return
            files = result.value.files
            main = files.get("pdf") or files.get("html") or files.get("md")
            links = ", ".join(
                f'<a href="{QtCore.QUrl.fromLocalFile(str(Path(p).resolve())).toString()}">'
                f"{html.escape(kind)}</a>" for kind, p in files.items())
            missing = result.value.missing
            note = (f"<br><i>{len(missing)} field(s) to be completed by the submitter: "
                    f"{html.escape(', '.join(missing))} (rig report --template)</i>"
                    if missing else "")
            self.show_banner("info", f"<b>report written</b>: {html.escape(str(main))} "
                                     f"({links}){note}")
            self.last_report = result.value

        job = Background(work, done, self, name="rig-report")
        self._jobs.add(job)
        job.start()

    # -- closing --------------------------------------------------------------------------------
    def closeEvent(self, event: QtGui.QCloseEvent) -> None:  # noqa: N802 (Qt's name)
        """A run still going is stopped cleanly (DUT powered off) before the window goes."""
        self.devices.stop_hotplug()
        if self.session is not None and self.session.running:
            self.session.stop()
            self.statusBar().showMessage("stopping the run: powering the DUT off…")
            deadline = time.monotonic() + 60
            while self.session.running and time.monotonic() < deadline:
                QtWidgets.QApplication.processEvents(
                    QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 50)
                self.session.join(0.05)
        for viewer in list(self._viewers):
            viewer.close()
        super().closeEvent(event)


def report_folder(run: Path) -> Path:
    """Where the window writes a run's report: reports/<run> beside the runs folder."""
    return run.parent.parent / "reports" / run.name


def describe(event: Event) -> str | None:
    """One log line for an event, or None for events the log leaves out."""
    if isinstance(event, RunStarted):
        sim = " (SIMULATED)" if event.simulated else ""
        return f"{event.procedure} on {event.device}{sim}: run folder " \
               f"{event.manifest.get('run_folder', '')}"
    if isinstance(event, PhaseStarted):
        return f"— {event.description or event.phase}"
    if isinstance(event, Note):
        return f"{event.level}: {event.text}"
    if isinstance(event, InstrumentInfo):
        info = event.info
        name = (info.get("name") or info.get("model") or info.get("idn") or info.get("dut")
                or info.get("driver") or "")
        keys = ("vendor", "timestamp_mode", "version", "firmware", "serial", "port")
        extra = ", ".join(f"{k} {info[k]}" for k in keys if info.get(k))
        return f"{event.role}: {name}" + (f" ({extra})" if extra else "")
    if isinstance(event, LatencyRun):
        return (f"run {event.index + 1}: {event.iterations} inferences in "
                f"{si(event.elapsed_s, 's')} ({event.inferences_per_s:#.4g} /s, {event.timer} "
                "timer)")
    if isinstance(event, WindowMeasured):
        return (f"window {event.index + 1}: {si(event.energy_j, 'J')}, mean "
                f"{si(event.mean_power_w, 'W')}, {si(event.energy_per_inference_j, 'J')} per "
                "inference")
    if isinstance(event, IdleMeasured):
        return f"idle: {si(event.power_w, 'W')} over {si(event.duration_s, 's')}"
    if isinstance(event, SampleClassified):
        return None if event.correct else (f"sample {event.index}: predicted "
                                           f"{event.predicted}, label {event.label}")
    if isinstance(event, TraceSaved):
        return (f"trace: {event.samples} samples at {si(event.sample_rate_hz, 'Hz')}, "
                f"{event.dropped} dropped -> {event.path}")
    if isinstance(event, SweepPointDone):
        if event.status != "ok":
            return f"point {event.key}: failed: {event.error}"
        gap = event.result.get("gap")
        return f"point {event.key}: gap {gap if gap is None else f'{gap:+.4f}'}"
    if isinstance(event, RunFinished):
        return f"finished: {event.status}" + (f" — {event.error}" if event.error else "")
    return None


def _row(*widgets: QtWidgets.QWidget) -> QtWidgets.QWidget:
    w = QtWidgets.QWidget()
    lay = QtWidgets.QHBoxLayout(w)
    lay.setContentsMargins(0, 0, 0, 0)
    for x in widgets:
        lay.addWidget(x)
    lay.addStretch(1)
    return w


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}"
