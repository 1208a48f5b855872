"""Collects an energy monitor's chunks: keeps the samples for analysis, finds timestamp edges as
they arrive, and streams the raw trace to a JLS file in the run folder.

`on_chunk` runs on the driver's thread and does only numpy work; the procedure thread waits on
sample counts and edge counts (instrument quantities), never on host time.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from drivers.emon.base import Chunk
from drivers.errors import DeviceTimeout
from rig.analysis import falling_edges, span_power
from rig.traces import TraceWriter


class EmonRecorder:
    """The procedure's view of the energy-monitor stream."""

    def __init__(
        self, sample_rate: float, trace_path: Path | None = None, *, simulated: bool = False
    ) -> None:
        self.sample_rate = float(sample_rate)
        self.trace_path = trace_path
        self._writer = (
            TraceWriter(trace_path, sample_rate, simulated=simulated) if trace_path else None
        )
        self._cond = threading.Condition()
        self._current = np.empty(1 << 16)
        self._voltage = np.empty(1 << 16)
        self._n = 0
        self._last_bit = 1
        self._edges: list[int] = []
        #: Sample-id gaps seen in the stream: (expected id, id received).
        self.gaps: list[tuple[int, int]] = []
        self.error: BaseException | None = None

    # -- driver thread ------------------------------------------------------------------------
    def on_chunk(self, chunk: Chunk) -> None:
        """Append one chunk (called on the driver's thread)."""
        try:
            self._append(chunk)
        except BaseException as exc:  # surface on the procedure thread, never kill the driver
            with self._cond:
                self.error = exc
                self._cond.notify_all()

    def _append(self, chunk: Chunk) -> None:
        n = len(chunk)
        if n == 0:
            return
        current, voltage, gpio = chunk.current, chunk.voltage, chunk.gpio
        with self._cond:
            gap = chunk.first_sample_id - self._n
            if gap:
                self.gaps.append((self._n, chunk.first_sample_id))
            if gap > 0:
                # Lost samples stay as NaN so that indices remain sample ids and any window
                # over them comes out NaN (failed), never silently short.
                self._grow(self._n + gap)
                self._current[self._n : self._n + gap] = np.nan
                self._voltage[self._n : self._n + gap] = np.nan
                self._n += gap
            elif gap < 0:  # overlap: keep what we already have
                current, voltage, gpio = current[-gap:], voltage[-gap:], gpio[-gap:]
                n = len(current)
                if n == 0:
                    return
            self._grow(self._n + n)
            self._current[self._n : self._n + n] = current
            self._voltage[self._n : self._n + n] = voltage
            edges = falling_edges(gpio, bit=0, initial_level=self._last_bit) + self._n
            self._last_bit = int(gpio[-1] & 1)
            self._edges.extend(int(e) for e in edges)
            if self._writer is not None:
                self._writer.append(self._n, current, voltage, gpio)
            self._n += n
            self._cond.notify_all()

    def _grow(self, size: int) -> None:
        if size <= len(self._current):
            return
        cap = max(size, 2 * len(self._current))
        for name in ("_current", "_voltage"):
            old = getattr(self, name)
            new = np.empty(cap)
            new[: self._n] = old[: self._n]
            setattr(self, name, new)

    # -- procedure thread ---------------------------------------------------------------------
    @property
    def samples(self) -> int:
        """Samples received so far."""
        with self._cond:
            return self._n

    @property
    def edge_count(self) -> int:
        """Falling edges of the timestamp line seen so far."""
        with self._cond:
            return len(self._edges)

    def edges(self, start: int = 0) -> list[int]:
        """Sample indices of the falling edges from number `start` on."""
        with self._cond:
            return self._edges[start:]

    def wait_for_samples(self, count: int, timeout_s: float) -> None:
        """Block until `count` samples have arrived (deadline: `timeout_s` of host time)."""
        self._wait(lambda: self._n >= count, timeout_s, f"{count} samples")

    def wait_for_edges(self, count: int, timeout_s: float) -> list[int]:
        """Block until `count` edges in total have arrived; returns all edges."""
        self._wait(lambda: len(self._edges) >= count, timeout_s, f"{count} timestamp edges")
        return self.edges()

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not ready():
                if self.error is not None:
                    raise self.error
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeviceTimeout(
                        f"energy monitor: waited {timeout_s:.0f} s for {what}, have "
                        f"{self._n} samples and {len(self._edges)} edges",
                        hint="check that the monitor is acquiring and that the DUT's timestamp "
                        "GPIO is wired to its trigger/event input",
                    )
                self._cond.wait(min(left, 0.1))

    def mean_power(self, start: int, stop: int) -> float:
        """Mean power [W] over samples [start, stop)."""
        with self._cond:
            return span_power(self._current[: self._n], self._voltage[: self._n], start, stop)

    def gaps_in(self, start: int, stop: int) -> list[tuple[int, int]]:
        """Sample-id gaps that fall inside [start, stop)."""
        with self._cond:
            return [g for g in self.gaps if start <= g[0] < stop]

    def annotate(self, sample_id: int, text: str) -> None:
        """Mark a sample in the stored trace (window edges, so a viewer shows what was what)."""
        with self._cond:
            if self._writer is not None:
                self._writer.annotate(sample_id, text)

    def close(self) -> None:
        """Finish the trace file; safe to call twice."""
        with self._cond:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
