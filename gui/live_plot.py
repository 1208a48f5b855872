"""The live power trace of a running measurement: the last few seconds of the monitor's stream.

Fed with `PowerPreview`s (min/max/mean per few-ms bin, made on the monitor's thread by
`rig.run.live_power`); it keeps a bounded ring of bins and draws the min/max envelope and the mean.
Nothing here is a measurement: the numbers of a run come from its events and its trace file.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6 import QtGui, QtWidgets

from rig.run.live_power import PowerPreview
from rig.units import si

#: Seconds of stream shown.
WINDOW_S = 10.0
#: Bins kept (the oldest are dropped): enough for WINDOW_S at the finest bin.
RING_BINS = 8192
POWER_COLOUR = "#c0392b"


class LivePowerPlot(QtWidgets.QWidget):
    """A scrolling power plot with a one-line readout of the latest level."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._t = np.full(RING_BINS, np.nan)
        self._lo = np.full(RING_BINS, np.nan)
        self._hi = np.full(RING_BINS, np.nan)
        self._mean = np.full(RING_BINS, np.nan)
        self._count = 0  # bins written in total (the ring's write position is count % size)
        self.bins_seen = 0
        self.last_time_s: float | None = None
        self.plot = pg.PlotWidget(background="w")
        self.plot.setMinimumHeight(160)
        item = self.plot.getPlotItem()
        item.setLabel("left", "power", units="W")
        item.setLabel("bottom", "monitor time", units="s")
        item.showGrid(x=True, y=True, alpha=0.25)
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        item.setXRange(0.0, WINDOW_S, padding=0)
        item.setYRange(0.0, 5e-3, padding=0)
        colour = QtGui.QColor(POWER_COLOUR)
        band = QtGui.QColor(colour)
        band.setAlpha(90)
        # The min/max envelope is one path of vertical segments, one per bin: a filled band
        # between two curves costs pyqtgraph a shape rebuild per curve per update.
        self._envelope = pg.PlotDataItem(pen=pg.mkPen(band, width=1), connect="pairs")
        self._mean_curve = pg.PlotDataItem(pen=pg.mkPen(colour, width=1.5), connect="finite")
        for curve in (self._envelope, self._mean_curve):
            item.addItem(curve)
        self.readout = QtWidgets.QLabel("no monitor stream yet")
        self.readout.setObjectName("liveReadout")
        box = QtWidgets.QVBoxLayout(self)
        box.setContentsMargins(0, 0, 0, 0)
        box.setSpacing(2)
        box.addWidget(self.readout)
        box.addWidget(self.plot, 1)

    def clear(self) -> None:
        """Forget the stream (a new run starts)."""
        for a in (self._t, self._lo, self._hi, self._mean):
            a.fill(np.nan)
        self._count = 0
        self.bins_seen = 0
        self.last_time_s = None
        for curve in (self._envelope, self._mean_curve):
            curve.setData([], [])
        self.plot.getPlotItem().setXRange(0.0, WINDOW_S, padding=0)
        self.plot.getPlotItem().enableAutoRange(y=True)
        self.readout.setText("no monitor stream yet")

    def add(self, previews: list[PowerPreview]) -> None:
        """Append previews (GUI thread) and redraw once."""
        if not previews:
            return
        for p in previews:
            t = p.times_s()
            n = len(t)
            if n == 0:
                continue
            if n > RING_BINS:
                t = t[-RING_BINS:]
                lo, hi, mean = (np.asarray(v[-RING_BINS:]) for v in (p.min_w, p.max_w, p.mean_w))
                n = RING_BINS
            else:
                lo, hi, mean = (np.asarray(v) for v in (p.min_w, p.max_w, p.mean_w))
            at = (self._count + np.arange(n)) % RING_BINS
            self._t[at], self._lo[at], self._hi[at], self._mean[at] = t, lo, hi, mean
            self._count += n
            self.bins_seen += n
        self._redraw()

    def _ordered(self) -> tuple[np.ndarray, ...]:
        """The ring's bins, oldest first, within the last WINDOW_S."""
        if self._count < RING_BINS:
            idx = np.arange(self._count)
        else:
            idx = (self._count + np.arange(RING_BINS)) % RING_BINS
        t = self._t[idx]
        keep = t >= t[-1] - WINDOW_S
        return tuple(a[idx][keep] for a in (self._t, self._lo, self._hi, self._mean))

    def _redraw(self) -> None:
        t, lo, hi, mean = self._ordered()
        if t.size == 0:
            return
        ok = np.isfinite(lo) & np.isfinite(hi)
        self._envelope.setData(np.repeat(t[ok], 2), np.column_stack((lo[ok], hi[ok])).ravel())
        self._mean_curve.setData(t, mean)
        end = float(t[-1])
        self.plot.getPlotItem().setXRange(max(0.0, end - WINDOW_S), max(end, WINDOW_S),
                                          padding=0)
        self.last_time_s = end
        recent = mean[t >= end - 0.25]
        level = float(np.nanmean(recent)) if np.isfinite(recent).any() else float("nan")
        self.readout.setText(f"power {si(level, 'W')} (mean of the last 0.25 s)  ·  "
                             f"monitor time {end:.1f} s")

    def visible_bins(self) -> np.ndarray:
        """Mean power of the bins drawn now (for tests)."""
        return self._ordered()[3]

