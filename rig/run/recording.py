"""The live energy-monitor pipeline: chunk -> timestamp edges -> running energy -> JLS file.

Memory stays bounded however long a run lasts: no sample is kept once its chunk is handled.
What the procedure needs later is kept per *edge* instead: the sample index of every falling edge
of the DUT's timestamp line and the cumulative energy of the stream up to that sample. The
energy of a window or idle span between two edges is then E(end edge) - E(start edge).

The running energy is a compensated float64 sum (a `hi + lo` pair, Neumaier): each chunk's
products i*v are summed pairwise by numpy, and the chunk sums are added with their rounding error
carried in `lo`. The difference of two cumulative values is thus as accurate as one dot product
over the window, however far into the run the window lies.

Where the monitor tells the current range of each sample (`Chunk.current_range`: a PPK2, an
auto-ranging Joulescope), each edge also keeps the cumulative sample count and current sum per
range, so that `range_occupancy` says how many of a window's samples were in each range and
their mean current there (for the uncertainty budget: each range's accuracy for its share),
and the trace stores the range signal. Memory grows with edges x ranges, never with samples.

Lost samples (sample-id gaps) and non-finite samples are remembered as sample ranges; any window
that overlaps one has NaN energy, so the procedure fails it instead of reporting it short.

The JLS trace stops, finished and readable, once its disk has less than a reserve left
(`trace_space.space_left`): pyjls reports no write error on a full disk (it drops the data and
prints to stderr), so the recorder watches the free space itself and raises `StorageError`.

`on_chunk` runs on the driver's thread and does only numpy work per sample; the procedure thread
waits on sample counts and edge counts (instrument quantities), never on host time.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from drivers.emon.base import Chunk
from drivers.errors import DeviceTimeout
from rig.errors import AnalysisError, StorageError
from rig.run.live_power import PowerDecimator, PowerPreview
from rig.traces.files import JLS_CURRENT, TraceWriter, check_jls_length
from rig.traces.space import binary_size, space_left, write_failure

#: Initial room for edges (the arrays double when full: memory grows with edges, not samples).
_EDGE_CAPACITY = 1024
#: Samples read back at a time by `lost_in_trace` (16 MiB of float32): memory stays bounded.
_READ_BACK_CHUNK = 1 << 22
#: Host seconds between two looks at the trace disk's free space (one cheap statvfs call).
SPACE_CHECK_S = 0.25


def read_back_lost(path: Path, invalid: np.ndarray, expected: int
                   ) -> tuple[int, int | None, int]:
    """`EmonRecorder.lost_in_trace`'s pass over a trace file: the samples of its first
    `expected` that read back not finite outside the stream's own `invalid` (n, 2) sample
    ranges, the first of them (None: none), and how many samples the file holds (at most
    `expected`). pyjls errors propagate."""
    import pyjls

    lost, first = 0, None
    with pyjls.Reader(str(path)) as reader:
        current = next((x for x in reader.signals.values() if x.name == JLS_CURRENT), None)
        length = 0 if current is None else min(int(current.length), expected)
        for start in range(0, length, _READ_BACK_CHUNK):
            count = min(_READ_BACK_CHUNK, length - start)
            assert current is not None
            ids = start + np.flatnonzero(
                ~np.isfinite(reader.fsr(current.signal_id, start, count)))
            if ids.size and invalid.size:  # not lost: the stream's own gaps and NaNs
                k = np.searchsorted(invalid[:, 0], ids, side="right") - 1
                ids = ids[(k < 0) | (ids >= invalid[np.maximum(k, 0), 1])]
            if ids.size:
                lost += int(ids.size)
                first = int(ids[0]) if first is None else first
    return lost, first, length


#: The child that reads back a trace file pyjls must repair (`_read_back_in_child`): reads
#: {"path", "invalid", "expected"} as JSON on stdin, prints `read_back_lost`'s three numbers.
_READ_BACK_CHILD = """
import json, sys
import numpy as np
from rig.run.recording import read_back_lost
ask = json.load(sys.stdin)
found = read_back_lost(ask["path"], np.array(ask["invalid"], dtype=np.int64).reshape(-1, 2),
                       ask["expected"])
print(json.dumps(found))
"""
#: Host seconds the child may take: it reads the whole file (a slow disk, a long run).
READ_BACK_TIMEOUT_S = 900.0


def _read_back_in_child(path: Path, invalid: np.ndarray, expected: int
                        ) -> tuple[int, int | None, int] | str:
    """`read_back_lost` in a child Python, so that pyjls's C code crashing on a damaged file
    ends the child, not this process: its three numbers, or why there are none."""
    ask = json.dumps({"path": str(path), "invalid": invalid.tolist(), "expected": expected})
    try:
        done = subprocess.run([sys.executable, "-c", _READ_BACK_CHILD], input=ask,
                              capture_output=True, text=True, timeout=READ_BACK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"reading it back took over {READ_BACK_TIMEOUT_S:g} s (stopped)"
    except OSError as exc:  # no process to be had (out of memory, no executable)
        return f"no process could read it back: {exc}"
    said = "; ".join(dict.fromkeys(
        line.strip() for line in done.stderr.splitlines() if line.strip()))[-400:]
    if done.returncode < 0:
        return (f"pyjls died reading it back ({_signal_name(-done.returncode)})"
                + (f": {said}" if said else ""))
    try:
        lost, first, length = json.loads(done.stdout.strip().splitlines()[-1])
        return int(lost), None if first is None else int(first), int(length)
    except (ValueError, TypeError, IndexError):
        return f"pyjls could not read it back (exit status {done.returncode})" + (
            f": {said}" if said else "")


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _space_note(writer: TraceWriter) -> tuple[str, bool]:
    """The free space on the trace's disk as a note after a write error (a full disk is the
    usual cause: pyjls does not say so itself), and whether the disk is full (True where
    that cannot be told)."""
    try:
        free, reserve = space_left(writer.path.parent)
    except OSError:
        return "", True
    full = free < reserve
    return f"; {binary_size(free)} free on its disk" + (" (full)" if full else ""), full


def trace_voltage(set_voltage: tuple[float, str] | None) -> dict[str, Any]:
    """The manifest's word on the trace's voltage: measured (a signal), or set (a value)."""
    if set_voltage is None:
        return {"measured": True}
    return {"measured": False, "set_v": set_voltage[0], "source": set_voltage[1]}


class EmonRecorder:
    """The procedure's view of the energy-monitor stream.

    `stop_after` (samples) makes the recorder ignore everything from that sample id on, so that
    a capture holds exactly that many samples however late the instrument is stopped.
    """

    def __init__(
        self,
        sample_rate: float,
        trace_path: Path | None = None,
        *,
        simulated: bool = False,
        stop_after: int | None = None,
        fault: Callable[[], BaseException | None] | None = None,
        checkpoint: Callable[[], None] | None = None,
        preview: Callable[[PowerPreview], None] | None = None,
        set_voltage: tuple[float, str] | None = None,
        instrument: dict[str, Any] | None = None,
    ) -> None:
        self.sample_rate = float(sample_rate)
        #: (volts, source) of a supply the monitor sets rather than measures: integrated as
        #: current x that value, and the trace stores no voltage signal (only the value).
        self.set_voltage = set_voltage
        #: Asks the monitor for a fault it raised on its own thread (e.g. a Joulescope that cut
        #: the DUT off over voltage), so a wait ends with that fault at once, not a timeout.
        self._fault = fault
        #: Called while the procedure waits; may raise to abandon the wait (a Stop button).
        self._checkpoint = checkpoint
        #: Decimated power for a live display, made on the driver's thread (never blocks).
        self._preview = PowerDecimator(sample_rate, preview) if preview is not None else None
        self.trace_path = trace_path
        self.stop_after = stop_after
        self._writer = (
            TraceWriter(trace_path, sample_rate, simulated=simulated, set_voltage=set_voltage,
                        instrument=instrument, own_process=True)
            if trace_path else None
        )
        # `_cond` guards the counters below; `_writer_lock` the JLS writer, so that a slow disk
        # write never keeps the procedure thread from reading counts.
        self._cond = threading.Condition()
        self._writer_lock = threading.Lock()
        self._space_due = 0.0  # host time of the next free-space check
        self._trace_end: int | None = None  # samples in the trace, once it stopped early
        #: Why `lost_in_trace` could not read the trace file back (None: it could).
        self.read_back_problem: str | None = None
        self._n = 0  # next expected sample id (= samples so far, lost ones included)
        self._received = 0  # samples that actually arrived
        self._last_bit = 1
        # Cumulative sum of i*v over samples [0, k) as hi + lo (compensated).
        self._hi = 0.0
        self._lo = 0.0
        self._finite = 0  # samples whose product went into the sum
        self._edge_count = 0
        self._edge_at = np.empty(_EDGE_CAPACITY, dtype=np.int64)
        self._edge_hi = np.empty(_EDGE_CAPACITY, dtype=np.float64)
        self._edge_lo = np.empty(_EDGE_CAPACITY, dtype=np.float64)
        # Checkpoints of the running sum every `_every` samples while `keep_checkpoints` is on
        # (the idle span's sub-spans): a list, bounded by the span, not by the run.
        self._every: int | None = None
        self._next_mark = 0
        self._marks: dict[int, tuple[float, float]] = {}
        # Where the monitor tells each sample's current range (`Chunk.current_range`): the
        # range names met so far (the columns below), the running sample count and current sum
        # [A] per range, and both at every edge (memory: edges x ranges, never samples).
        self._range_names: list[str] = []
        self._range_maps: dict[tuple[str, ...], np.ndarray] = {}
        self._rcount = np.zeros(0, dtype=np.int64)
        self._rsum = np.zeros(0, dtype=np.float64)
        self._edge_rcount = np.zeros((_EDGE_CAPACITY, 0), dtype=np.int64)
        self._edge_rsum = np.zeros((_EDGE_CAPACITY, 0), dtype=np.float64)
        #: Sample-id gaps seen in the stream: (expected id, id received).
        self.gaps: list[tuple[int, int]] = []
        # Sample ranges [a, b) with no valid energy: lost samples and non-finite samples.
        self._invalid: list[tuple[int, int]] = []
        # Reused scratch for the products, so a chunk allocates nothing per sample.
        self._scratch = np.empty(0, dtype=np.float64)
        self.error: BaseException | None = None

    # -- driver thread ------------------------------------------------------------------------
    def on_chunk(self, chunk: Chunk) -> None:
        """Take one chunk (called on the driver's thread)."""
        try:
            self._take(chunk)
        except BaseException as exc:  # surface on the procedure thread, never kill the driver
            with self._cond:
                if self.error is None:
                    self.error = exc
                self._cond.notify_all()

    def _take(self, chunk: Chunk) -> None:
        current, voltage, gpio = chunk.current, chunk.voltage, chunk.gpio
        ranges = chunk.current_range
        first = int(chunk.first_sample_id)
        n = len(current)
        if n == 0:
            return
        with self._cond:
            if self.stop_after is not None and self._n >= self.stop_after:
                return  # the capture is complete: later samples are not part of it
            gap = first - self._n
            if gap:
                self.gaps.append((self._n, first))
            if gap > 0:
                end = first if self.stop_after is None else min(first, self.stop_after)
                # The first sample after the gap too: a level change across the gap shows as an
                # edge there, though it happened somewhere inside the gap.
                self._mark_invalid(self._n, end + 1)
                self._n = end
                self._cond.notify_all()
            elif gap < 0:  # overlap: keep what we already have
                current, voltage, gpio = current[-gap:], voltage[-gap:], gpio[-gap:]
                ranges = None if ranges is None else ranges[-gap:]
                first, n = self._n, n + gap
            if self.stop_after is not None:
                n = min(n, self.stop_after - first)
                current, voltage, gpio = current[:n], voltage[:n], gpio[:n]
                ranges = None if ranges is None else ranges[:n]
            if n <= 0:
                return
            if self.trace_path is not None:
                # The trace file stores float32 samples: integrate exactly those, so that the
                # run's figures are what its trace reproduces (`rig analyze RUN_FOLDER`, to
                # 1e-9), not ~1e-8 apart. Converted once here, the writer then reuses them.
                current = np.asarray(current, dtype=np.float32)
                voltage = np.asarray(voltage, dtype=np.float32)
            if self.set_voltage is not None:
                # What `read_trace` gives back for such a file: the set value, in float64.
                voltage = np.broadcast_to(np.float64(self.set_voltage[0]), (n,))
            edges_before = self._edge_count
            self._integrate(first, current, voltage, gpio)
            if ranges is not None:
                ranges = self._range_map(chunk.range_names)[ranges]
                self._count_ranges(first, current, ranges, edges_before)
            self._n = first + n
            self._received += n
            self._cond.notify_all()
        if self._preview is not None:  # outside the lock: only this thread uses `_scratch`
            self._preview.add(first, self._scratch[:n])
        if self._writer is not None:
            with self._writer_lock:
                if self._writer is not None:
                    self._write(self._writer, first, current, voltage, gpio, ranges)

    def _write(
        self, writer: TraceWriter, first: int, current: np.ndarray, voltage: np.ndarray,
        gpio: np.ndarray, ranges: np.ndarray | None = None,
    ) -> None:
        """Append to the trace (writer lock held), or stop it before the disk is full."""
        now = time.monotonic()
        if now >= self._space_due:
            self._space_due = now + SPACE_CHECK_S
            try:
                free, reserve = space_left(writer.path.parent)
            except OSError as exc:
                self._stop_trace(writer, write_failure(exc))
            if free < reserve:
                self._stop_trace(writer, f"the disk is full ({binary_size(free)} left, "
                                 f"{binary_size(reserve)} kept for finishing the run folder)")
        try:
            writer.append(first, current, voltage, gpio, current_range=ranges,
                          range_names=tuple(self._range_names))
        except OSError as exc:
            self._stop_trace(writer, write_failure(exc))
        except RuntimeError as exc:  # pyjls's own error, or its writer process ended
            self._writer_failed(writer, exc)

    def _writer_failed(self, writer: TraceWriter, exc: RuntimeError) -> NoReturn:
        """Stop the trace after pyjls (or its writer process) failed, naming the disk's room."""
        note, full = _space_note(writer)
        self._stop_trace(writer, f"the trace cannot be written ({exc}{note})", hint=None
                         if full else "the disk had room: see the system log (dmesg) for the "
                         "disk's own errors, then run again; the run stopped there and keeps "
                         "what it measured")

    def _stop_trace(self, writer: TraceWriter, why: str, hint: str | None = None) -> NoReturn:
        """Finish `writer`, the trace, with what it holds (a readable JLS file) and raise
        `StorageError` (`hint`: what to do, where it is not the full disk's)."""
        self._writer = None
        self._trace_end = writer.samples_written + writer.dropped_samples
        with contextlib.suppress(Exception):  # the file's end may not fit: it holds what it can
            writer.close()
        raise StorageError(
            f"{why}: trace file {writer.path} stopped at {self._trace_end:,} samples",
            hint=hint or "free space on that disk or write the runs to another one; the run "
            "stopped there and keeps what it measured",
        )

    def _integrate(
        self, first: int, current: np.ndarray, voltage: np.ndarray, gpio: np.ndarray
    ) -> None:
        """Edges of this chunk, and the running energy at each of them and at its end."""
        n = len(current)
        if len(self._scratch) < n:
            self._scratch = np.empty(max(n, 2 * len(self._scratch)), dtype=np.float64)
        prod = self._scratch[:n]
        # In float64 whatever the chunk's dtype: two float32 samples have an exact float64
        # product, which a float32 multiply would round (by up to 6e-8 relative).
        np.multiply(current, voltage, out=prod, dtype=np.float64)
        high = (gpio & 1).astype(bool)
        # Falling edge at k: high[k-1] and not high[k]; sample 0 against the previous chunk.
        edges = np.flatnonzero(high[:-1] > high[1:]) + 1
        if self._last_bit and not high[0]:
            edges = np.concatenate(([0], edges))
        self._last_bit = int(high[-1])
        if edges.size:
            self._reserve(self._edge_count + edges.size)
        marks: list[int] = []
        if self._every is not None:
            every = self._every
            if self._next_mark < first:  # lost samples: the next checkpoint after them
                self._next_mark += -(-(first - self._next_mark) // every) * every
            marks = list(range(self._next_mark - first, n, every))
            self._next_mark += len(marks) * every
        edge_list = edges.tolist()
        points = sorted(set(edge_list) | set(marks)) if marks else edge_list
        mark_set, edge_set = set(marks), set(edge_list)
        lo = 0
        # One pairwise sum per segment between edges: a loop per edge, not per sample.
        for k in points:
            self._add(prod[lo:k], first + lo)
            lo = k
            if k in mark_set:
                self._marks[first + k] = (self._hi, self._lo)
            if k in edge_set:
                i = self._edge_count
                self._edge_at[i] = first + k
                self._edge_hi[i] = self._hi
                self._edge_lo[i] = self._lo
                self._edge_count = i + 1
        self._add(prod[lo:], first + lo)

    def _range_map(self, names: tuple[str, ...]) -> np.ndarray:
        """The recorder's column of each of a chunk's range indices (lock held): a name met
        for the first time gets a new column, zero up to here."""
        found = self._range_maps.get(names)
        if found is not None:
            return found
        new = [name for name in dict.fromkeys(names) if name not in self._range_names]
        if new:
            self._range_names.extend(new)
            width = len(self._range_names)
            self._rcount = np.concatenate((self._rcount, np.zeros(len(new), np.int64)))
            self._rsum = np.concatenate((self._rsum, np.zeros(len(new))))
            for name in ("_edge_rcount", "_edge_rsum"):
                old = getattr(self, name)
                grown = np.zeros((len(old), width), dtype=old.dtype)
                grown[:, : old.shape[1]] = old
                setattr(self, name, grown)
        mapped = np.array([self._range_names.index(name) for name in names], dtype=np.intp)
        self._range_maps[names] = mapped
        return mapped

    def _count_ranges(self, first: int, current: np.ndarray, column: np.ndarray,
                      since_edge: int) -> None:
        """Add a chunk's samples to the running count and current sum of their ranges
        (`column`: each sample's column), and set both at the chunk's edges (those from number
        `since_edge` on, which `_integrate` just found). One bincount per chunk."""
        n, width = len(current), len(self._range_names)
        at = self._edge_at[since_edge : self._edge_count] - first
        # Segment s: the samples after s of this chunk's edges (an edge starts a segment).
        starts = np.zeros(n, dtype=np.intp)
        starts[at] = 1
        key = np.cumsum(starts) * width + column
        size = (len(at) + 1) * width
        amps = np.asarray(current, dtype=np.float64)
        amps = np.where(np.isfinite(amps), amps, 0.0)  # such a sample fails its window anyway
        counts = np.bincount(key, minlength=size).reshape(-1, width)
        sums = np.bincount(key, weights=amps, minlength=size).reshape(-1, width)
        cum_count = self._rcount + np.cumsum(counts, axis=0)
        cum_sum = self._rsum + np.cumsum(sums, axis=0)
        # Edge j comes before segment j + 1: the sums through segment j.
        self._edge_rcount[since_edge : self._edge_count] = cum_count[:-1]
        self._edge_rsum[since_edge : self._edge_count] = cum_sum[:-1]
        self._rcount, self._rsum = cum_count[-1], cum_sum[-1]

    def _add(self, prod: np.ndarray, first: int) -> None:
        """Add a segment's products to the running sum (Neumaier compensation)."""
        if prod.size == 0:
            return
        s = float(prod.sum())
        count = prod.size
        if not math.isfinite(s):
            # Rare: a sample the instrument could not measure. Its window must fail, the rest
            # of the run must not: keep the finite products and mark the bad range.
            bad = np.flatnonzero(~np.isfinite(prod))
            self._mark_invalid(first + int(bad[0]), first + int(bad[-1]) + 1)
            s = float(np.where(np.isfinite(prod), prod, 0.0).sum())
            count -= bad.size
        t = self._hi + s
        if abs(self._hi) >= abs(s):
            self._lo += (self._hi - t) + s
        else:
            self._lo += (s - t) + self._hi
        self._hi = t
        self._finite += count

    def _mark_invalid(self, start: int, stop: int) -> None:
        # Adjacent or overlapping ranges merge, so a long bad stretch is one entry.
        if self._invalid and start <= self._invalid[-1][1]:
            a, b = self._invalid[-1]
            self._invalid[-1] = (a, max(b, stop))
        else:
            self._invalid.append((start, stop))

    def _reserve(self, size: int) -> None:
        if size <= len(self._edge_at):
            return
        cap = max(size, 2 * len(self._edge_at))
        for name in ("_edge_at", "_edge_hi", "_edge_lo", "_edge_rcount", "_edge_rsum"):
            old = getattr(self, name)
            new = np.zeros((cap, *old.shape[1:]), dtype=old.dtype)
            new[: self._edge_count] = old[: self._edge_count]
            setattr(self, name, new)

    # -- procedure thread ---------------------------------------------------------------------
    @property
    def samples(self) -> int:
        """Samples so far, counted by sample id (lost samples included)."""
        with self._cond:
            return self._n

    @property
    def received(self) -> int:
        """Samples that actually arrived (lost ones not included)."""
        with self._cond:
            return self._received

    @property
    def trace_samples(self) -> int:
        """Samples in the trace file: all so far, unless the trace stopped early (a full disk)."""
        with self._cond:
            return self._n if self._trace_end is None else self._trace_end

    @property
    def edge_count(self) -> int:
        """Falling edges of the timestamp line seen so far."""
        with self._cond:
            return self._edge_count

    @property
    def dropped(self) -> int:
        """Samples missing from the stream (sum of the forward sample-id gaps)."""
        with self._cond:
            return sum(max(0, b - a) for a, b in self.gaps)

    @property
    def energy_j(self) -> float:
        """Energy [J] of every valid sample so far (lost and non-finite samples left out)."""
        with self._cond:
            return (self._hi + self._lo) / self.sample_rate

    def overall_mean_power(self) -> float:
        """Mean power [W] over every valid sample so far; NaN before the first one."""
        with self._cond:
            if self._finite == 0:
                return math.nan
            return (self._hi + self._lo) / self._finite

    def edges(self, start: int = 0) -> list[int]:
        """Sample indices of the falling edges from number `start` on."""
        with self._cond:
            return self._edge_at[start : self._edge_count].tolist()

    def wait_for_samples(self, count: int, timeout_s: float) -> None:
        """Block until `count` samples have arrived (deadline: `timeout_s` of host time)."""
        self._wait(lambda: self._n >= count, timeout_s, f"{count} samples")

    def wait_for_edges(self, count: int, timeout_s: float) -> list[int]:
        """Block until `count` edges in total have arrived; returns all edges."""
        self._wait(lambda: self._edge_count >= count, timeout_s, f"{count} timestamp edges")
        return self.edges()

    def check(self) -> None:
        """Raise what ended the recording (its own error, the monitor's fault) or a stop request.

        For waits outside the recorder (the DUT's replies during a run), so that they end as
        promptly as the recorder's own waits do.
        """
        with self._cond:
            error = self.error
        if error is not None:
            raise error
        if self._checkpoint is not None:
            self._checkpoint()
        fault = self._fault() if self._fault is not None else None
        if fault is not None:
            raise fault

    def _wait(self, ready: Callable[[], bool], timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not ready():
                if self.error is not None:
                    raise self.error
                if self._checkpoint is not None:
                    self._checkpoint()
                fault = self._fault() if self._fault is not None else None
                if fault is not None:
                    raise fault
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeviceTimeout(
                        f"energy monitor: waited {timeout_s:.0f} s for {what}, have "
                        f"{self._n} samples and {self._edge_count} edges",
                        hint="check that the monitor is acquiring and that the DUT's timestamp "
                        "GPIO is wired to its trigger/event input",
                    )
                self._cond.wait(min(left, 0.1))

    def mean_power(self, start: int, stop: int) -> float:
        """Mean power [W] over samples [start, stop), both sample indices of timestamp edges.

        NaN when the span holds lost or non-finite samples.
        """
        with self._cond:
            if not 0 <= start < stop <= self._n:
                raise AnalysisError(
                    f"span [{start}, {stop}) is not a non-empty range inside the "
                    f"{self._n}-sample stream"
                )
            a, b = self._edge_index(start), self._edge_index(stop)
            if any(lo < stop and hi > start for lo, hi in self._invalid):
                return math.nan
            # hi - hi is exact for nearby values (Sterbenz); lo carries what hi rounded off.
            total = (self._edge_hi[b] - self._edge_hi[a]) + (self._edge_lo[b] - self._edge_lo[a])
            return float(total) / (stop - start)

    def range_occupancy(self, start: int, stop: int) -> dict[str, dict[str, float]]:
        """How the samples [start, stop) (both timestamp edges) spread over the current ranges
        the monitor told: {range name: {"samples": count, "mean_current_a": their mean
        current}} for each range holding any. Empty where the monitor tells no range, or not
        for every sample of the span."""
        with self._cond:
            if not self._range_names:
                return {}
            a, b = self._edge_index(start), self._edge_index(stop)
            counts = self._edge_rcount[b] - self._edge_rcount[a]
            sums = self._edge_rsum[b] - self._edge_rsum[a]
            if int(counts.sum()) != stop - start:
                return {}
            return {name: {"samples": int(c), "mean_current_a": float(s) / int(c)}
                    for name, c, s in zip(self._range_names, counts.tolist(), sums.tolist(),
                                          strict=True) if c}

    def keep_checkpoints(self, every: int | None) -> None:
        """Keep the running energy every `every` samples from now on (None: stop, and forget
        those kept), so that `span_powers` can split a span into sub-spans: the idle span's
        batch means. Memory grows with the checkpoints kept, never with the samples."""
        with self._cond:
            if every is None:
                self._every = None
                self._marks.clear()
                return
            if int(every) < 1:
                raise ValueError(f"a checkpoint interval is >= 1 sample, got {every!r}")
            self._every = int(every)
            self._next_mark = -(-self._n // self._every) * self._every

    def span_powers(self, start: int, stop: int, parts: int) -> tuple[list[int], list[float]]:
        """Split the edge-framed span [start, stop) at kept checkpoints into up to `parts`
        sub-spans of near-equal length (each boundary the checkpoint nearest to an equal
        split): their boundaries (``parts + 1`` sample ids, `start` and `stop` included) and
        mean powers [W]. Empty lists when fewer than two sub-spans can be made (too few
        checkpoints inside); NaN for a sub-span that holds lost or non-finite samples."""
        with self._cond:
            inside = np.array(sorted(k for k in self._marks if start < k < stop), dtype=np.int64)
            if inside.size == 0 or parts < 2:
                return [], []
            targets = start + (stop - start) * np.arange(1, parts) / parts
            pick = np.abs(inside[None, :] - targets[:, None]).argmin(axis=1)
            bounds = [start, *sorted(set(inside[pick].tolist())), stop]
            cumulative = [self._cumulative_at(k) for k in bounds]
            powers = []
            for (a, b), ((ha, la), (hb, lb)) in zip(
                    itertools.pairwise(bounds), itertools.pairwise(cumulative), strict=True):
                bad = any(lo < b and hi > a for lo, hi in self._invalid)
                powers.append(math.nan if bad else float((hb - ha) + (lb - la)) / (b - a))
            return bounds, powers

    def _cumulative_at(self, sample: int) -> tuple[float, float]:
        """The running sum (hi, lo) at a kept checkpoint or an edge (lock held)."""
        if sample in self._marks:
            return self._marks[sample]
        i = self._edge_index(sample)
        return float(self._edge_hi[i]), float(self._edge_lo[i])

    def _edge_index(self, sample: int) -> int:
        edges = self._edge_at[: self._edge_count]
        i = int(np.searchsorted(edges, sample))
        if i == len(edges) or edges[i] != sample:
            raise AnalysisError(
                f"sample {sample} is not a timestamp edge: the live recorder keeps energy only "
                "at edges",
                hint="pass sample indices returned by edges()/wait_for_edges(), or analyse the "
                "stored trace file with `rig analyze`",
            )
        return i

    def gaps_in(self, start: int, stop: int) -> list[tuple[int, int]]:
        """Sample-id gaps that make [start, stop) invalid: inside it, or just before its start."""
        with self._cond:
            return [g for g in self.gaps if g[0] < stop and g[1] >= start]

    def annotate(self, sample_id: int, text: str) -> None:
        """Mark a sample in the stored trace (window edges, so a viewer shows what was what)."""
        with self._writer_lock:
            if self._writer is not None:
                try:
                    self._writer.annotate(sample_id, text)
                except RuntimeError as exc:  # its writer process ended: as a chunk's write
                    self._writer_failed(self._writer, exc)

    def lost_in_trace(self) -> tuple[int, int | None]:
        """After `close`: how many samples the trace file holds as lost (not finite) where the
        stream delivered finite ones, and the first such sample id (None: none), read back
        from the file. pyjls loses data it cannot write without telling its caller (on a full
        disk it prints to stderr and reads back NaN there), which the free-space checks
        between chunks cannot always forestall; samples past the file's end count too.
        (0, None) without a trace.

        A file the writer could not close (its header says length 0) or whose length is not
        its size is read back in a child process: pyjls repairs such a file in place as it
        opens it, C code that met a full disk's debris there and took the whole `rig serve`
        down with it (soak, CI). Where the child dies or fails, `read_back_problem` says so
        and the file counts as holding none of the samples."""
        self.read_back_problem = None
        if self.trace_path is None or not self.trace_path.is_file():
            return 0, None
        with self._cond:
            expected = self._n if self._trace_end is None else self._trace_end
            invalid = np.array(self._invalid, dtype=np.int64).reshape(-1, 2)
        try:
            closed = not check_jls_length(self.trace_path)
        except AnalysisError:
            closed = False
        if closed:
            try:
                lost, first, length = read_back_lost(self.trace_path, invalid, expected)
            except Exception as exc:  # pyjls raises its own kinds on a file it cannot read
                self.read_back_problem = f"pyjls could not read it back: {exc}"
                return expected, 0  # holds none of them
        else:
            found = _read_back_in_child(self.trace_path, invalid, expected)
            if isinstance(found, str):
                self.read_back_problem = found
                return expected, 0
            lost, first, length = found
        if length < expected:
            lost += expected - length
            first = length if first is None else first
        return lost, first

    def close(self) -> None:
        """Hand over the last whole preview bins and finish the trace file; safe twice."""
        if self._preview is not None:
            self._preview.flush()
        end = None
        with self._writer_lock:
            if self._writer is not None:
                writer, self._writer = self._writer, None
                # What the file holds: a chunk counted as the trace closed (between `_take`'s
                # count and its write) is not in it, and the trace says so (not a lost sample).
                end = writer.samples_written + writer.dropped_samples
                writer.close()
        if end is not None:
            with self._cond:
                if self._trace_end is None or end < self._trace_end:
                    self._trace_end = end
