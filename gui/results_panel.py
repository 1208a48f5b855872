"""A finished run: its summary (the numbers `rig show` prints), the replicability verdict, and
the way on to the viewer and the report; and the earlier runs under the runs folder."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6 import QtCore, QtGui, QtWidgets

from rig.errors import BENCH_ERRORS
from rig.qubo.sweep import power_line
from rig.report.runs import run_summary
from rig.run.store import REFUSED, list_runs
from rig.run.summary import (
    ASC_FIGURES,
    REFUSED_TEXT,
    asc_figure_rows,
    figure_budget,
    figures_note,
    replicability_verdict,
)
from rig.traces.analysis.uncertainty import SHOWN_NOTE, unknown_terms, with_uncertainty
from rig.units import si

VERDICT_STYLE = {True: "background:#d3f0d8;", False: "background:#f8d7da;",
                 None: "background:#eeeeee;"}


class ResultsPanel(QtWidgets.QWidget):
    """The summary of one run folder."""

    open_viewer = QtCore.Signal(object)
    make_report = QtCore.Signal(object)
    message = QtCore.Signal(str, str, str)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.path: Path | None = None
        self.data: dict[str, Any] = {}
        self.title = QtWidgets.QLabel("no run yet")
        self.title.setObjectName("resultsTitle")
        self.title.setWordWrap(True)
        self.title.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        self.verdict = QtWidgets.QLabel("")
        self.verdict.setObjectName("verdict")
        self.verdict.setWordWrap(True)
        self.verdict.setContentsMargins(6, 4, 6, 4)
        self.table = QtWidgets.QTableWidget(0, 2)
        self.table.setObjectName("summaryTable")
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.viewer_button = QtWidgets.QPushButton("Open in viewer")
        self.report_button = QtWidgets.QPushButton("Make report")
        self.folder_button = QtWidgets.QPushButton("Open folder")
        self.viewer_button.clicked.connect(lambda: self.open_viewer.emit(self.path))
        self.report_button.clicked.connect(lambda: self.make_report.emit(self.path))
        self.folder_button.clicked.connect(self._open_folder)
        buttons = QtWidgets.QHBoxLayout()
        for b in (self.viewer_button, self.report_button, self.folder_button):
            buttons.addWidget(b)
            b.setEnabled(False)
        buttons.addStretch(1)
        box = QtWidgets.QVBoxLayout(self)
        box.addWidget(self.title)
        box.addWidget(self.verdict)
        box.addWidget(self.table, 1)
        box.addLayout(buttons)

    def show_run(self, path: Path) -> bool:
        """Read `path` like `rig show --json` and show it; False (and a message) if unreadable."""
        try:
            data = run_summary(path)
        except BENCH_ERRORS as exc:
            self.message.emit("error", exc.message, exc.hint)
            return False
        self.path, self.data = Path(path), data
        sim = "  ·  SIMULATED" if data.get("simulated") else ""
        what = data.get("procedure") or "run"
        damaged = data.get("manifest_error")
        mark = " · DAMAGED" if damaged else ""
        self.title.setText(f"<b>{what.upper()} · {data['status']}{mark}</b>{sim}<br>{path}")
        if "points_total" in data:
            self._show_sweep(data)
        else:
            self._show_asc(data)
        self.viewer_button.setEnabled((self.path / "traces" / "emon.jls").is_file())
        self.viewer_button.setToolTip("" if self.viewer_button.isEnabled()
                                      else "this run has no energy trace")
        self.report_button.setEnabled(not damaged)
        self.report_button.setToolTip("a report needs the run's manifest.json" if damaged else "")
        self.folder_button.setEnabled(True)
        if damaged:
            self.message.emit("warning", f"{path}: {damaged}; shown is what events.jsonl still "
                              "holds", "the measurements are safe in events.jsonl; restore "
                              "manifest.json from a copy of the folder to make a report")
        return True

    def _show_asc(self, data: dict[str, Any]) -> None:
        s = data["summary"]
        rows = list(asc_figure_rows(s))
        if note := figures_note(s):  # under the figures: what their "≥" means
            rows.append(("Uncertainty", note))
        if "latency_runs" in s:
            rows.append(("Timed runs", f"{s['latency_runs']} ({s['latency_timer']} timer)"))
        if "preprocess_time_mean_s" in s:
            rows.append(("Pre-processing time per sample",
                         f"{si(s['preprocess_time_mean_s'], 's')} ± "
                         f"{si(s['preprocess_time_stderr_s'], 's', 2)}"))
        if s.get("dropped_samples") is not None:
            rows.append(("Samples lost by the monitor", str(s["dropped_samples"])))
        for c in s.get("checks", []):
            # ok None: the check does not apply to this run (neither passed nor failed).
            mark = {True: "pass", False: "FAIL"}.get(c["ok"], "n/a")
            rows.append((f"check: {c['name']}", f"{mark} — {c['detail']}"))
        if data.get("error"):
            rows.append(("error", data["error"]))
        self._fill(("Metric", "Value"), rows)
        self._budget_tips(s)
        ok, text = replicability_verdict(s)
        self.verdict.setText(text)
        self.verdict.setStyleSheet(VERDICT_STYLE[ok])

    def _show_sweep(self, data: dict[str, Any]) -> None:
        rows = []
        for r in data["summary"]:
            gap = "—" if r["gap_mean"] is None else f"{r['gap_mean']:+.4f}"
            power = ("unavailable" if r["power_w_mean"] is None
                     else with_uncertainty(r["power_w_mean"], "W",
                                           (r.get("uncertainty") or {}).get("power_w_mean")))
            rows.append((r["sut"], str(r["nodes"]), f"{r['density']:g}",
                         si(r["timeout_s"], "s"), gap, power,
                         f"{r['seeds']}/{r['seeds_expected']}"
                         + (f" ({r['failed']} failed)" if r["failed"] else "")))
        self._fill(("SUT", "nodes", "density", "timeout", "gap (mean)", "power (mean)",
                    "seeds"), rows)
        for i, r in enumerate(data["summary"]):  # why a row has no (or partial) power
            if r.get("power_status") and (cell := self.table.item(i, 5)) is not None:
                cell.setToolTip(r["power_status"])  # (_fill made every cell)
        failed = data["points_failed"]
        power = f"; {power_line(data['power'])}" if data.get("power") else ""
        self.verdict.setText(f"{data['points_done']}/{data['points_total']} points measured"
                             + (f", {failed} failed" if failed else "") + power)
        self.verdict.setStyleSheet(VERDICT_STYLE[None if not data["points_done"]
                                                 else failed == 0])

    def _fill(self, headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
        self.table.clear()
        self.table.setColumnCount(len(headers))
        self.table.setHorizontalHeaderLabels(list(headers))
        self.table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            for j, value in enumerate(row):
                item = QtWidgets.QTableWidgetItem(value)
                if j > 0 and len(headers) == 2:
                    item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight
                                          | QtCore.Qt.AlignmentFlag.AlignVCenter)
                if value.startswith("FAIL"):
                    item.setForeground(QtGui.QColor("#b02a37"))
                self.table.setItem(i, j, item)
        self.table.resizeColumnsToContents()

    def _budget_tips(self, summary: dict[str, Any]) -> None:
        """Each figure's cell explains its ± (and names what an incomplete budget misses)."""
        labels = {label: key for key, label, _ in ASC_FIGURES}
        for row in range(self.table.rowCount()):
            key = labels.get(_cell_text(self.table, row, 0))
            budget = figure_budget(summary, key) if key else None
            cell = self.table.item(row, 1)
            if budget is None or cell is None:
                continue
            tip = SHOWN_NOTE
            if not budget.get("complete", True):
                tip += f". Unknown here: {', '.join(unknown_terms(budget))}"
            cell.setToolTip(tip + ". Every component: rig show RUN --json, or the report.")

    def cell_texts(self) -> dict[str, str]:
        """Metric -> value text of an ASC summary table (for tests and copy-paste)."""
        return {_cell_text(self.table, r, 0): _cell_text(self.table, r, 1)
                for r in range(self.table.rowCount())}

    def _open_folder(self) -> None:
        if self.path is not None:
            QtGui.QDesktopServices.openUrl(QtCore.QUrl.fromLocalFile(str(self.path)))


class EarlierRuns(QtWidgets.QWidget):
    """The run folders under the runs folder, newest first; double-click to reopen one."""

    reopen = QtCore.Signal(object)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.root: Path | None = None
        self.tree = QtWidgets.QTreeWidget()
        self.tree.setObjectName("earlierRuns")
        self.tree.setHeaderLabels(["Started", "Procedure", "Device", "Status", "Folder"])
        self.tree.setRootIsDecorated(False)
        self.tree.itemActivated.connect(self._activated)
        self.open_button = QtWidgets.QPushButton("Reopen")
        self.open_button.clicked.connect(self._open_selected)
        self.refresh_button = QtWidgets.QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(self.open_button)
        buttons.addWidget(self.refresh_button)
        buttons.addStretch(1)
        box = QtWidgets.QVBoxLayout(self)
        box.addWidget(self.tree, 1)
        box.addLayout(buttons)

    def set_root(self, root: Path) -> None:
        """List the runs under `root`."""
        self.root = root
        self.refresh()

    def refresh(self) -> None:
        """Read the manifests again."""
        self.tree.clear()
        if self.root is None or not self.root.is_dir():
            return
        for r in list_runs(self.root):
            sim = " (simulated)" if r["simulated"] else ""
            item = QtWidgets.QTreeWidgetItem([r["started_at"].replace("T", " ")[:19],
                                              r["procedure"], r["device"] + sim, r["status"],
                                              r["path"].name])
            item.setData(0, QtCore.Qt.ItemDataRole.UserRole, str(r["path"]))
            if r.get("damaged"):
                for col in range(5):
                    item.setToolTip(col, f"{r['damaged']}: reopen to see what events.jsonl "
                                         "still holds")
            elif r["status"] == REFUSED:
                for col in range(5):
                    item.setToolTip(col, REFUSED_TEXT)
            self.tree.addTopLevelItem(item)
        for col in range(4):
            self.tree.resizeColumnToContents(col)

    def paths(self) -> list[Path]:
        """The listed run folders, in order."""
        items = (self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount()))
        return [Path(item.data(0, QtCore.Qt.ItemDataRole.UserRole))
                for item in items if item is not None]  # (never None below the count)

    def _activated(self, item: QtWidgets.QTreeWidgetItem, _col: int = 0) -> None:
        self.reopen.emit(Path(item.data(0, QtCore.Qt.ItemDataRole.UserRole)))

    def _open_selected(self) -> None:
        item = self.tree.currentItem()
        if item is not None:
            self._activated(item)


def _cell_text(table: QtWidgets.QTableWidget, row: int, col: int) -> str:
    """A cell's text ("" for a cell without an item; the tables here fill every cell)."""
    item = table.item(row, col)
    return "" if item is None else item.text()
