"""The energy-trace viewer: one stored trace (a .jls or .csv file, or a run folder) as stacked
plots of current, voltage, power and GPIO on one time axis, the run's idle span and energy
windows on top, and two markers whose statistics are the numbers `rig analyze --span` prints.

Everything drawn comes from `rig.traces.view`: per-pixel summaries (or raw samples when zoomed
in), the marks and the span statistics. Nothing here measures; it only draws. A plot never gets
more than about one bin per pixel column (over the view and a quarter of it either side), so an
hour at 1 MS/s pans and zooms as fast as a minute.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets

from rig.errors import BENCH_ERRORS, RigError
from rig.traces.analysis import SpanStats
from rig.traces.view import CHANNELS, UNITS, Envelope, Mark, TraceView
from rig.units import si

#: Range changes closer together than this are drawn once (mouse drags fire per event).
REFRESH_MS = 15
#: Marker statistics follow a drag live while the span holds fewer samples than this (about
#: 40 ms of reading at 1 MS/s); longer spans are measured when the marker is let go.
LIVE_STATS_MAX_SAMPLES = 1_000_000
#: Envelopes cover this fraction of the view on each side, so a pan shows no empty edge.
PAD_FRACTION = 0.25
#: Timestamp edges are drawn as lines only while at most this many are in view.
MAX_EDGE_LINES = 400

TITLES = {"current": "current", "voltage": "voltage", "power": "power", "gpio": "GPIO"}
COLOURS = {"current": "#1f5fbf", "voltage": "#2b8a3e", "power": "#c0392b", "gpio": "#6a3d9a"}
#: Relative plot heights (the GPIO line needs little).
STRETCH = {"current": 3, "voltage": 2, "power": 3, "gpio": 1}
IDLE_BRUSH = (90, 150, 210, 60)
WINDOW_BRUSH = (245, 160, 40, 60)
MARKER_COLOUR = "#111111"
AXIS_COLOUR = "#333333"
GRID_MAJOR = "#d4d4d4"
GRID_MINOR = "#ededed"
BACKGROUND = "w"



def si_format(value: float | None, unit: str, digits: int = 4) -> str:
    """`value` with an SI prefix, as the report writes it (`rig.units.si`)."""
    return si(value, unit, digits)


def _seconds(value: float, sample_rate: float) -> str:
    """A time in seconds to the resolution of one sample."""
    decimals = max(0, min(9, math.ceil(math.log10(sample_rate) - 1e-9)))
    return f"{value:.{decimals}f} s"


class _ChannelPlot:
    """One channel's plot: a min/max band with the mean line, or raw samples as steps."""

    def __init__(self, plot: pg.PlotItem, channel: str) -> None:
        self.plot = plot
        self.channel = channel
        colour = QtGui.QColor(COLOURS[channel])
        # The min/max band as one vertical segment per bin (a pixel column), in an opaque tint:
        # a filled polygon along noisy min/max costs ~20 ms per plot and repaint in Qt's raster
        # engine, segments ~1 ms, and opaque segments may overlap without darker stripes.
        # GPIO pulses are often one bin wide and its mean says little: a stronger band there.
        tint = _tint(colour, 0.8 if channel == "gpio" else 0.4)
        self.band = pg.PlotDataItem(pen=pg.mkPen(tint, width=1), connect="pairs")
        self.mean = pg.PlotDataItem(pen=pg.mkPen(colour, width=1))  # 1 px: the fast path
        for item in (self.band, self.mean):
            # We hand over about one point per pixel already: pyqtgraph's own downsampling
            # and clipping would only cost time.
            item.setDownsampling(ds=1, auto=False)
            item.setClipToView(False)
            plot.addItem(item)
        # A light grid of our own: the axes' grid costs ~10 ms per plot and repaint.
        self.grid = [pg.PlotDataItem(pen=pg.mkPen(c, width=1), connect="pairs")
                     for c in (GRID_MAJOR, GRID_MINOR)]
        for item in self.grid:
            item.setZValue(-30)
            plot.addItem(item, ignoreBounds=True)
        self.envelope: Envelope | None = None

    def draw(self, env: Envelope) -> None:
        """Show `env`: raw samples as steps of one sample each, else band plus mean."""
        self.envelope = env
        if env.raw:
            # Sample k stands for [k/fs, (k+1)/fs): steps with those edges line up exactly
            # with the shaded windows, which start and end on sample boundaries.
            x = np.append(env.t, env.t[-1] + env.step_s) if len(env.t) else env.t
            self.mean.setData(x, env.mean, stepMode="center")
            self.band.setData([], [])
        else:
            x = env.t + env.step_s / 2  # a bin's summary belongs to its middle
            self.mean.setData(x, env.mean, stepMode=None)
            keep = np.isfinite(env.min) & np.isfinite(env.max)  # lost samples: no segment
            self.band.setData(np.repeat(x[keep], 2),
                              np.column_stack((env.min[keep], env.max[keep])).ravel())

    def draw_grid(self, x0: float, x1: float, width: int) -> None:
        """Grid lines at the axes' major and minor ticks of the current view."""
        vb = self.plot.getViewBox()
        y0, y1 = vb.viewRange()[1]
        xt = self.plot.getAxis("bottom").tickValues(x0, x1, width)
        yt = ([(1.0, [0.0, 1.0])] if self.channel == "gpio"  # its only ticks
              else self.plot.getAxis("left").tickValues(y0, y1, max(1, vb.height())))
        for level, item in enumerate(self.grid):
            xs = np.asarray(xt[level][1] if level < len(xt) else [], dtype=float)
            # Minor lines in time only: across a plot's height they would only add noise.
            ys = np.asarray(yt[0][1] if level == 0 and yt else [], dtype=float)
            # Vertical lines then horizontal ones, as pairs of points.
            px = np.concatenate((np.repeat(xs, 2), np.tile([x0, x1], len(ys))))
            py = np.concatenate((np.tile([y0, y1], len(xs)), np.repeat(ys, 2)))
            item.setData(px, py)

    def visible_limits(self, x0: float, x1: float) -> tuple[float, float] | None:
        """Lowest and highest value drawn inside [x0, x1] (None if nothing finite)."""
        env = self.envelope
        if env is None or not len(env.t):
            return None
        inside = (env.t + env.step_s >= x0) & (env.t <= x1)
        if not inside.any():
            return None
        lo, hi = env.min[inside], env.max[inside]
        if not (np.isfinite(lo).any() and np.isfinite(hi).any()):
            return None
        return float(np.nanmin(lo)), float(np.nanmax(hi))

    def items(self) -> list[pg.PlotDataItem]:
        """The curves handed to pyqtgraph: the band's segments and the mean (or raw) line."""
        return [self.band, self.mean]


class ViewerWindow(QtWidgets.QMainWindow):
    """One `TraceView`: stacked plots, shaded marks, two markers and their statistics."""

    def __init__(self, view: TraceView, parent: QtWidgets.QWidget | None = None, *,
                 range_s: tuple[float, float] | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.source = view.source
        self._stats: SpanStats | None = None
        self._stats_error: str | None = None
        self._syncing = False
        self._channels: dict[str, _ChannelPlot] = {}
        self._mark_labels: list[tuple[Mark, pg.TextItem]] = []
        self._edge_item: pg.PlotDataItem | None = None
        self._marker_lines: list[tuple[pg.InfiniteLine, pg.InfiniteLine]] = []

        title = view.title + (" — SIMULATED" if view.simulated else "")
        self.setWindowTitle(f"{title} — rig view")
        self._refresh_timer = self._single_shot(REFRESH_MS, self.refresh_now)
        self._stats_timer = self._single_shot(50, self._update_stats)

        self._build_plots()
        self._build_marks()
        self._build_markers()
        side = self._build_side_panel()
        splitter = QtWidgets.QSplitter(QtCore.Qt.Orientation.Horizontal)
        splitter.addWidget(self.plots)
        splitter.addWidget(side)
        splitter.setStretchFactor(0, 1)
        splitter.setStretchFactor(1, 0)
        splitter.setCollapsible(0, False)
        central = QtWidgets.QWidget()
        box = QtWidgets.QVBoxLayout(central)
        box.setContentsMargins(6, 4, 6, 2)
        box.setSpacing(2)
        box.addWidget(self._build_banner())
        box.addWidget(splitter, 1)
        self.setCentralWidget(central)
        self._build_actions()
        self._build_status()

        start, end = range_s if range_s is not None else (0.0, self.source.duration_s)
        self.set_range(start, end)
        a, b = self.visible_range()
        self.set_markers(a + (b - a) / 3, a + 2 * (b - a) / 3)
        self.resize(1400, 900)
        self.refresh_now()

    # -- construction ----------------------------------------------------------------------------
    def _single_shot(self, ms: int, slot: Callable[[], None]) -> QtCore.QTimer:
        timer = QtCore.QTimer(self)
        timer.setSingleShot(True)
        timer.setInterval(ms)
        timer.timeout.connect(slot)
        return timer

    def _build_banner(self) -> QtWidgets.QWidget:
        banner = QtWidgets.QWidget()
        row = QtWidgets.QVBoxLayout(banner)
        row.setContentsMargins(2, 2, 2, 2)
        row.setSpacing(1)
        src = self.source
        badge = ("&nbsp;<span style='background:#b71c1c; color:white; font-weight:bold'>"
                 "&nbsp;SIMULATED&nbsp;</span>" if self.view.simulated else "")
        rate = si_format(src.sample_rate, "Hz", 4)
        self.title_label = QtWidgets.QLabel(
            f"<b>{_html(self.view.title)}</b>{badge}&nbsp;&nbsp;"
            f"<span style='color:#555'>{rate} · {src.length:,} samples · "
            f"{_seconds(src.duration_s, src.sample_rate)}</span>")
        self.title_label.setTextInteractionFlags(
            QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        row.addWidget(self.title_label)
        notes = list(self.view.notes)
        if self.view.simulated:
            notes.insert(0, "recorded on the virtual bench: every number is simulated")
        self.notes_label = QtWidgets.QLabel("<br>".join("⚠ " + _html(n) for n in notes))
        self.notes_label.setStyleSheet("color: #8a4b00;")
        self.notes_label.setWordWrap(True)
        self.notes_label.setVisible(bool(notes))
        row.addWidget(self.notes_label)
        return banner

    def _build_plots(self) -> None:
        self.plots = pg.GraphicsLayoutWidget()
        self.plots.setBackground(BACKGROUND)
        self.plots.setMinimumWidth(320)
        self.plots.ci.setSpacing(4)
        shown = [ch for ch in CHANNELS if self.source.has(ch)]
        if not shown:
            raise RigError(f"{self.source.path} has no channel to show")
        duration = self.source.duration_s
        first: pg.PlotItem | None = None
        for row, ch in enumerate(shown):
            plot = self.plots.addPlot(row=row, col=0)
            self.plots.ci.layout.setRowStretchFactor(row, STRETCH[ch])
            vb = plot.getViewBox()
            # x only: the y axis follows the visible data, so the mouse must not take it over.
            plot.setMouseEnabled(x=True, y=False)
            plot.setMenuEnabled(False)
            plot.hideButtons()
            vb.disableAutoRange()
            vb.setLimits(xMin=0.0, xMax=duration,
                         minXRange=min(duration, 8 / self.source.sample_rate))
            left = plot.getAxis("left")
            left.setWidth(76)
            left.setLabel(TITLES[ch], units=UNITS[ch] or None)
            for name in ("left", "bottom"):
                axis = plot.getAxis(name)
                axis.setPen(pg.mkPen(AXIS_COLOUR))
                axis.setTextPen(pg.mkPen(AXIS_COLOUR))
            if ch == "gpio":
                left.setTicks([[(0, "0"), (1, "1")]])
                vb.setYRange(-0.15, 1.15, padding=0)
            if first is None:
                first = plot
            else:
                plot.setXLink(first)
            self._channels[ch] = _ChannelPlot(plot, ch)
        last = self._channels[shown[-1]].plot
        for ch in shown[:-1]:
            self._channels[ch].plot.getAxis("bottom").setStyle(showValues=False)
        last.setLabel("bottom", "time", units="s")
        assert first is not None
        self._master = first.getViewBox()
        self._master.sigXRangeChanged.connect(self._schedule_refresh)
        self._master.sigResized.connect(self._schedule_refresh)

    def _build_marks(self) -> None:
        label_plot = self._channels.get("power") or next(iter(self._channels.values()))
        for mark in self.view.marks:
            brush = IDLE_BRUSH if mark.kind == "idle" else WINDOW_BRUSH
            for chp in self._channels.values():
                region = pg.LinearRegionItem((mark.start_s, mark.end_s), brush=pg.mkBrush(brush),
                                             hoverBrush=pg.mkBrush(brush),
                                             pen=pg.mkPen(None), movable=False)
                region.setZValue(-20)
                chp.plot.addItem(region, ignoreBounds=True)
            label = pg.TextItem(mark.label, color="#222222", anchor=(0.5, 0),
                                fill=pg.mkBrush(255, 255, 255, 190))
            label.setZValue(30)
            label_plot.plot.addItem(label, ignoreBounds=True)
            self._mark_labels.append((mark, label))
        self._label_plot = label_plot
        if "gpio" in self._channels and len(self.view.edges_s):
            self._edge_item = pg.PlotDataItem(
                pen=pg.mkPen(QtGui.QColor(60, 60, 60, 150), width=1,
                             style=QtCore.Qt.PenStyle.DotLine), connect="pairs")
            self._edge_item.setZValue(-10)
            self._channels["gpio"].plot.addItem(self._edge_item, ignoreBounds=True)

    def _build_markers(self) -> None:
        pen = pg.mkPen(MARKER_COLOUR, width=1.5, style=QtCore.Qt.PenStyle.DashLine)
        hover = pg.mkPen("#d81b60", width=2.5)
        bounds = (0.0, self.source.duration_s)
        for k, chp in enumerate(self._channels.values()):
            pair = []
            for name in ("A", "B"):
                line = pg.InfiniteLine(angle=90, movable=True, pen=pen, hoverPen=hover,
                                       bounds=bounds,
                                       label=name if k == 0 else None,
                                       labelOpts={"position": 0.9, "color": "#ffffff",
                                                  "fill": pg.mkBrush(MARKER_COLOUR),
                                                  "anchors": [(0.5, 0), (0.5, 0)]})
                line.setZValue(40)
                line.sigPositionChanged.connect(self._marker_moved)
                line.sigPositionChangeFinished.connect(self._marker_released)
                chp.plot.addItem(line, ignoreBounds=True)
                pair.append(line)
            self._marker_lines.append((pair[0], pair[1]))

    def _build_side_panel(self) -> QtWidgets.QWidget:
        side = QtWidgets.QWidget()
        col = QtWidgets.QVBoxLayout(side)
        col.setContentsMargins(4, 0, 0, 0)

        group = QtWidgets.QGroupBox("Markers A–B (as rig analyze --span)")
        grid = QtWidgets.QGridLayout(group)
        grid.setHorizontalSpacing(10)
        grid.setVerticalSpacing(2)
        self._stat_labels: dict[str, QtWidgets.QLabel] = {}
        rows = [("a", "A"), ("b", "B"), ("dt", "Δt"), ("samples", "samples"), (None, None),
                ("i_mean", "current mean"), ("i_min", "current min"), ("i_max", "current max"),
                (None, None), ("p_mean", "power mean"), ("p_min", "power min"),
                ("p_max", "power max"), (None, None), ("charge", "charge"),
                ("energy", "energy")]
        mono = QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.SystemFont.FixedFont)
        for r, (key, text) in enumerate(rows):
            if key is None:
                grid.setRowMinimumHeight(r, 6)
                continue
            name = QtWidgets.QLabel(text)
            name.setStyleSheet("color: #555;")
            value = QtWidgets.QLabel("—")
            value.setFont(mono)
            value.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight)
            value.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
            if key == "energy":
                bold = QtGui.QFont(mono)
                bold.setBold(True)
                value.setFont(bold)
                name.setStyleSheet("color: #222; font-weight: bold;")
            grid.addWidget(name, r, 0)
            grid.addWidget(value, r, 1)
            self._stat_labels[key] = value
        self.stats_message = QtWidgets.QLabel("")
        self.stats_message.setWordWrap(True)
        self.stats_message.setVisible(False)
        grid.addWidget(self.stats_message, len(rows), 0, 1, 2)
        col.addWidget(group)

        self.marks_table = QtWidgets.QTableWidget(0, 5)
        self.marks_table.setHorizontalHeaderLabels(
            ["mark", "duration", "mean\npower", "energy", "energy /\ninference"])
        self.marks_table.verticalHeader().setVisible(False)
        self.marks_table.setEditTriggers(QtWidgets.QAbstractItemView.EditTrigger.NoEditTriggers)
        self.marks_table.setSelectionBehavior(
            QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.marks_table.setSelectionMode(
            QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.marks_table.setToolTip("click a row to zoom to it")
        for mark in self.view.marks:
            r = self.marks_table.rowCount()
            self.marks_table.insertRow(r)
            cells = [mark.label, si_format(mark.duration_s, "s"),
                     si_format(mark.mean_power_w, "W"), si_format(mark.energy_j, "J"),
                     si_format(mark.energy_per_inference_j, "J")]
            shade = QtGui.QColor(*(IDLE_BRUSH if mark.kind == "idle" else WINDOW_BRUSH))
            shade.setAlpha(110)  # the colour of its shading in the plots
            for c, text in enumerate(cells):
                item = QtWidgets.QTableWidgetItem(text)
                if c == 0:
                    item.setBackground(shade)
                else:
                    item.setTextAlignment(QtCore.Qt.AlignmentFlag.AlignRight
                                          | QtCore.Qt.AlignmentFlag.AlignVCenter)
                self.marks_table.setItem(r, c, item)
        self.marks_table.resizeColumnsToContents()
        self.marks_table.verticalHeader().setDefaultSectionSize(
            self.marks_table.fontMetrics().height() + 8)
        table_px = (sum(self.marks_table.columnWidth(c) for c in range(5))
                    + self.marks_table.verticalScrollBar().sizeHint().width() + 24)
        self.marks_table.horizontalHeader().setStretchLastSection(True)
        # As wide as the list needs and no wider: the plots get the rest.
        side.setFixedWidth(max(270, min(table_px, 440)))
        self.marks_table.cellClicked.connect(lambda row, _col: self.zoom_to_mark(row))
        self.marks_table.itemSelectionChanged.connect(self._mark_selected)
        marks_group = QtWidgets.QGroupBox("Measurement (as rig show)")
        inner = QtWidgets.QVBoxLayout(marks_group)
        inner.setContentsMargins(4, 4, 4, 4)
        inner.addWidget(self.marks_table)
        marks_group.setVisible(bool(self.view.marks))
        col.addWidget(marks_group, 1)
        if not self.view.marks:
            col.addStretch(1)
        return side

    def _build_actions(self) -> None:
        bar = self.addToolBar("view")
        bar.setMovable(False)
        file_menu = self.menuBar().addMenu("&File")
        view_menu = self.menuBar().addMenu("&View")

        def action(text: str, slot: Callable[[], object], keys: tuple[str, ...] = (),
                   menu: QtWidgets.QMenu = view_menu, toolbar: bool = True) -> QtGui.QAction:
            act = QtGui.QAction(text, self)
            act.setShortcuts([QtGui.QKeySequence(k) for k in keys])
            act.setShortcutContext(QtCore.Qt.ShortcutContext.WindowShortcut)
            act.triggered.connect(lambda _checked=False: slot())
            menu.addAction(act)
            self.addAction(act)  # shortcuts work with the menu bar hidden too
            if toolbar:
                bar.addAction(act)
            return act

        self.fit_action = action("Fit all", self.fit_all, ("Home",))
        action("Zoom in", lambda: self.zoom(2.0), ("+", "=", "Ctrl++"))
        action("Zoom out", lambda: self.zoom(0.5), ("-", "Ctrl+-"))
        action("Pan left", lambda: self.pan(-0.1), ("Left",), toolbar=False)
        action("Pan right", lambda: self.pan(0.1), ("Right",), toolbar=False)
        action("Markers to view", self.markers_to_view, ("M",))
        bar.addSeparator()
        self.export_csv_action = action("Export marked range as CSV…", self._ask_export_csv,
                                        ("Ctrl+E",), menu=file_menu)
        self.export_png_action = action("Save view as PNG…", self._ask_export_png,
                                        ("Ctrl+S",), menu=file_menu)
        file_menu.addSeparator()
        action("Close", self.close, ("Ctrl+W",), menu=file_menu, toolbar=False)

    def _build_status(self) -> None:
        self.range_label = QtWidgets.QLabel()
        self.statusBar().addWidget(self.range_label, 1)
        help_text = QtWidgets.QLabel("wheel: zoom · drag: pan · ←/→ pan · +/− zoom · Home: all "
                                     "· drag A/B to measure")
        help_text.setStyleSheet("color: #777;")
        # Yields its room first when the window is narrow.
        help_text.setMinimumWidth(1)
        help_text.setAlignment(QtCore.Qt.AlignmentFlag.AlignRight)
        self.statusBar().addPermanentWidget(help_text)

    # -- drawing ---------------------------------------------------------------------------------
    def _schedule_refresh(self, *_args: object) -> None:
        # A throttle, not a debounce: a long drag still redraws every REFRESH_MS.
        if not self._refresh_timer.isActive():
            self._refresh_timer.start()

    def refresh_now(self) -> None:
        """Fetch the envelopes of the visible range and redraw, synchronously."""
        self._refresh_timer.stop()
        x0, x1 = self.visible_range()
        span = x1 - x0
        width = self.plot_width_px()
        pad = span * PAD_FRACTION
        # A bit more than one bin per pixel column, so the band's segments leave no gaps.
        bins = max(16, math.ceil(1.05 * width * (1 + 2 * PAD_FRACTION)))
        mode = ""
        for ch, chp in self._channels.items():
            try:
                env = self.source.envelope(ch, x0 - pad, x1 + pad, bins)
            except BENCH_ERRORS as exc:  # a channel the file cannot give: say so, keep the rest
                self.statusBar().showMessage(str(exc), 10_000)
                continue
            chp.draw(env)
            if env.raw:
                mode = "raw samples"
            else:
                per = round(env.step_s * self.source.sample_rate)
                mode = f"summaries ({per:,} samples per point)"
                if env.approximate:
                    mode += "; power min/max from current x mean voltage per point"
            if ch != "gpio":
                # Room above the trace for the marks' labels on the plot that carries them.
                self._fit_y(chp, x0, x1, top=0.22 if chp is self._label_plot and
                            self._mark_labels else 0.08)
            chp.draw_grid(x0 - pad, x1 + pad, round(width * (1 + 2 * PAD_FRACTION)))
        self._place_mark_labels(x0, x1, width)
        self._draw_edges(x0, x1, width)
        src = self.source
        self.range_label.setText(
            f"view {_seconds(x0, src.sample_rate)} … {_seconds(x1, src.sample_rate)} "
            f"({si_format(span, 's')})   ·   {mode}")

    def _fit_y(self, chp: _ChannelPlot, x0: float, x1: float, top: float) -> None:
        limits = chp.visible_limits(x0, x1)
        if limits is None:
            return
        lo, hi = limits
        if hi - lo <= 1e-9 * max(abs(lo), abs(hi)):  # flat: centre it with some room
            half = abs(hi) * 0.05 or 1e-12
            lo, hi = lo - half, hi + half
        else:
            lo, hi = lo - (hi - lo) * 0.08, hi + (hi - lo) * top
        chp.plot.getViewBox().setYRange(lo, hi, padding=0)

    def _place_mark_labels(self, x0: float, x1: float, width: int) -> None:
        if not self._mark_labels:
            return
        top = self._label_plot.plot.getViewBox().viewRange()[1][1]
        px_per_s = width / (x1 - x0)
        for mark, label in self._mark_labels:
            a, b = max(mark.start_s, x0), min(mark.end_s, x1)
            visible = (b - a) * px_per_s >= label.boundingRect().width() + 4
            label.setVisible(visible)
            if visible:
                label.setPos((a + b) / 2, top)

    def _draw_edges(self, x0: float, x1: float, width: int) -> None:
        if self._edge_item is None:
            return
        edges = self.view.edges_s
        lo, hi = np.searchsorted(edges, [x0, x1])
        shown = edges[lo:hi] if hi - lo <= min(MAX_EDGE_LINES, width // 3) else edges[:0]
        self._edge_item.setData(np.repeat(shown, 2),
                                np.tile([-0.15, 1.15], len(shown)))

    # -- markers ---------------------------------------------------------------------------------
    def _marker_moved(self, line: pg.InfiniteLine) -> None:
        if self._syncing:
            return
        which = next(k for pair in self._marker_lines for k, ln in enumerate(pair)
                     if ln is line)
        self._syncing = True
        try:
            for pair in self._marker_lines:
                if pair[which] is not line:
                    pair[which].setValue(line.value())
        finally:
            self._syncing = False
        self._show_positions()
        a, b = sorted(self.markers())
        if ((b - a) * self.source.sample_rate <= LIVE_STATS_MAX_SAMPLES
                and not self._stats_timer.isActive()):
            self._stats_timer.start()  # a throttle: every 50 ms during a drag

    def _marker_released(self, _line: pg.InfiniteLine) -> None:
        self._update_stats()

    def _show_positions(self) -> None:
        a, b = self.markers()
        fs = self.source.sample_rate
        self._stat_labels["a"].setText(_seconds(a, fs))
        self._stat_labels["b"].setText(_seconds(b, fs))
        self._stat_labels["dt"].setText(si_format(abs(b - a), "s"))

    def _update_stats(self) -> None:
        self._stats_timer.stop()
        a, b = sorted(self.markers())
        try:
            stats = self.source.span_stats(a, b)
        except BENCH_ERRORS as exc:
            self._stats, self._stats_error = None, str(exc)
        else:
            self._stats, self._stats_error = stats, None
        self._show_stats()

    def _show_stats(self) -> None:
        s = self._stats
        values = {
            "samples": f"{s.samples:,}" if s else "—",
            "i_mean": si_format(s.current_mean_a, "A") if s else "—",
            "i_min": si_format(s.current_min_a, "A") if s else "—",
            "i_max": si_format(s.current_max_a, "A") if s else "—",
            "p_mean": si_format(s.power_mean_w, "W") if s else "—",
            "p_min": si_format(s.power_min_w, "W") if s else "—",
            "p_max": si_format(s.power_max_w, "W") if s else "—",
            "charge": si_format(s.charge_c, "C") if s else "—",
            "energy": si_format(s.energy_j, "J") if s else "—",
        }
        for key, text in values.items():
            self._stat_labels[key].setText(text)
        if s is not None:
            # Δt of the samples actually counted (markers snap to sample starts).
            self._stat_labels["dt"].setText(si_format(s.duration_s, "s"))
        message, colour = self._stats_error, "#b71c1c"
        if s is not None and s.lost_samples:
            message = (f"{s.lost_samples:,} samples in the span were lost by the instrument: "
                       "the figures are not computed")
        elif s is not None and not s.exact:
            message, colour = ("a span this long is read from the file's summaries: charge and "
                               "current are exact, power and energy use each summary bin's "
                               "mean voltage"), "#8a4b00"
        self.stats_message.setStyleSheet(f"color: {colour};")
        self.stats_message.setText(message or "")
        self.stats_message.setVisible(bool(message))

    # -- public API ------------------------------------------------------------------------------
    def plot_width_px(self) -> int:
        """Width of the plot area in pixels (how many summary points a view needs)."""
        return max(100, round(self._master.width()))

    def visible_range(self) -> tuple[float, float]:
        """The time range on screen [s]."""
        x0, x1 = self._master.viewRange()[0]
        return float(x0), float(x1)

    def set_range(self, start_s: float, end_s: float) -> None:
        """Show [start_s, end_s] (clipped to the trace)."""
        if end_s < start_s:
            start_s, end_s = end_s, start_s
        # Past an end of the trace the view slides back inside, keeping its span.
        duration = self.source.duration_s
        span = min(end_s - start_s, duration)
        start_s = max(0.0, min(start_s, duration - span))
        self._master.setXRange(start_s, start_s + span, padding=0)
        self._schedule_refresh()

    def zoom(self, factor: float, center_s: float | None = None) -> None:
        """Zoom in by `factor` (2: half the span) around `center_s` (default the middle)."""
        x0, x1 = self.visible_range()
        c = (x0 + x1) / 2 if center_s is None else center_s
        half = (x1 - x0) / factor / 2
        self.set_range(c - half, c + half)

    def pan(self, fraction: float) -> None:
        """Move the view by `fraction` of its width (negative: earlier)."""
        x0, x1 = self.visible_range()
        shift = (x1 - x0) * fraction
        self.set_range(x0 + shift, x1 + shift)

    def fit_all(self) -> None:
        """Show the whole trace."""
        self.set_range(0.0, self.source.duration_s)

    def markers(self) -> tuple[float, float]:
        """Positions of markers A and B [s]."""
        a, b = self._marker_lines[0]
        return float(a.value()), float(b.value())

    def set_markers(self, a_s: float, b_s: float) -> None:
        """Place markers A and B [s] and compute their statistics now."""
        self._syncing = True
        try:
            for a, b in self._marker_lines:
                a.setValue(a_s)
                b.setValue(b_s)
        finally:
            self._syncing = False
        self._show_positions()
        self._update_stats()

    def markers_to_view(self) -> None:
        """Bring the markers to 1/3 and 2/3 of the visible range."""
        x0, x1 = self.visible_range()
        self.set_markers(x0 + (x1 - x0) / 3, x0 + 2 * (x1 - x0) / 3)

    def marker_stats(self) -> SpanStats | None:
        """Statistics between the markers (None when the span cannot be measured)."""
        return self._stats

    def marker_message(self) -> str:
        """What the stats panel says instead of (or about) the numbers; "" if nothing."""
        return self.stats_message.text()

    def mark_rows(self) -> list[tuple[str, ...]]:
        """The measurement list as shown: one tuple of cell texts per mark."""
        table = self.marks_table
        return [tuple(_cell_text(table, r, c) for c in range(table.columnCount()))
                for r in range(table.rowCount())]

    def zoom_to_mark(self, index: int) -> None:
        """Show mark `index` (a row of the list) with a small margin either side."""
        if not 0 <= index < len(self.view.marks):
            return
        mark = self.view.marks[index]
        margin = max((mark.end_s - mark.start_s) * 0.05, 4 / self.source.sample_rate)
        self.set_range(mark.start_s - margin, mark.end_s + margin)

    def _mark_selected(self) -> None:
        rows = self.marks_table.selectionModel().selectedRows()
        if rows:
            self.zoom_to_mark(rows[0].row())

    def channel_curves(self, channel: str) -> list[pg.PlotDataItem]:
        """The curves of `channel` handed to pyqtgraph (empty if the channel is not shown)."""
        chp = self._channels.get(channel)
        return chp.items() if chp else []

    def shown_channels(self) -> list[str]:
        """The plotted channels, top to bottom."""
        return list(self._channels)

    def drawn_envelope(self, channel: str) -> Envelope | None:
        """What `channel` shows now."""
        chp = self._channels.get(channel)
        return chp.envelope if chp else None

    def plot_item(self, channel: str) -> pg.PlotItem:
        """The plot of `channel` (for screenshots' geometry)."""
        return self._channels[channel].plot

    def export_csv(self, path: str | Path) -> int:
        """Raw samples between the markers as CSV; returns how many."""
        a, b = sorted(self.markers())
        return self.source.export_csv(Path(path), a, b)

    def export_png(self, path: str | Path) -> Path:
        """The window as it is on screen, as a PNG."""
        path = Path(path)
        if not self.grab().save(str(path), "PNG"):
            raise OSError(f"cannot write {path}")
        return path

    # -- dialogs ---------------------------------------------------------------------------------
    def _ask_export_csv(self) -> None:
        a, b = sorted(self.markers())
        stem = Path(str(self.source.path)).stem
        name, _ = QtWidgets.QFileDialog.getSaveFileName(
            self, "Export marked range as CSV", f"{stem}_{a:.3f}-{b:.3f}s.csv",
            "CSV trace (*.csv)")
        if name:
            self._report(lambda: f"{self.export_csv(name):,} samples written to {name}")

    def _ask_export_png(self) -> None:
        stem = Path(str(self.source.path)).stem
        name, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Save view as PNG",
                                                        f"{stem}.png", "PNG image (*.png)")
        if name:
            self._report(lambda: f"saved {self.export_png(name)}")

    def _report(self, work: Callable[[], str]) -> None:
        try:
            self.statusBar().showMessage(work(), 10_000)
        except (*BENCH_ERRORS, OSError) as exc:
            QtWidgets.QMessageBox.warning(self, "rig view", str(exc))

    def keyPressEvent(self, event: QtGui.QKeyEvent) -> None:  # noqa: N802
        """The navigation keys, when they reach the window without its shortcuts firing
        (the window not active, or keys sent to it directly)."""
        key = QtCore.Qt.Key
        moves: dict[int, Callable[[], None]] = {
            key.Key_Left: lambda: self.pan(-0.1), key.Key_Right: lambda: self.pan(0.1),
            key.Key_Plus: lambda: self.zoom(2.0), key.Key_Equal: lambda: self.zoom(2.0),
            key.Key_Minus: lambda: self.zoom(0.5), key.Key_Home: self.fit_all,
        }
        move = moves.get(event.key())
        if move is None:
            super().keyPressEvent(event)
            return
        move()
        event.accept()

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:  # noqa: N802
        """Stop pending redraws (the trace is closed by whoever opened it)."""
        self._refresh_timer.stop()
        self._stats_timer.stop()
        super().closeEvent(event)


def _cell_text(table: QtWidgets.QTableWidget, row: int, col: int) -> str:
    """A cell's text ("" for a cell without an item; the tables here fill every cell)."""
    item = table.item(row, col)
    return "" if item is None else item.text()


def _tint(colour: QtGui.QColor, amount: float) -> QtGui.QColor:
    """`colour` mixed with white: `amount` of the colour."""
    return QtGui.QColor(*(round(255 - (255 - c) * amount)
                          for c in (colour.red(), colour.green(), colour.blue())))


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_png(view: TraceView, path: str | Path, *, range_s: tuple[float, float] | None = None,
               size: tuple[int, int] = (1400, 900)) -> Path:
    """Draw `view` in a window that is never shown on screen and save it as a PNG."""
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["rig view"])
    previous = QtCore.qInstallMessageHandler(_quiet_offscreen)
    window = ViewerWindow(view, range_s=range_s)
    try:
        # Laid out and painted like a shown window, but never mapped on a display.
        window.setAttribute(QtCore.Qt.WidgetAttribute.WA_DontShowOnScreen, True)
        window.resize(*size)
        window.show()
        app.processEvents()
        if range_s is not None:
            window.set_range(*range_s)
        window.refresh_now()
        app.processEvents()
        if view.source.damaged is not None:  # a window shows the rest; a picture would not say
            raise view.source.damaged
        return window.export_png(path)
    finally:
        window.close()
        window.deleteLater()
        QtCore.qInstallMessageHandler(previous)


def _quiet_offscreen(mode: QtCore.QtMsgType, context: QtCore.QMessageLogContext,
                     message: str) -> None:
    """Qt's messages, less the offscreen plugin's note that windows have no size hints."""
    if "propagateSizeHints" not in message:
        print(message, file=sys.stderr)
