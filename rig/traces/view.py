"""What the energy-trace viewer shows, computed without a GUI: any stored trace as summaries per
pixel column, raw samples when zoomed in, the measurement on top (a run folder's idle span,
energy windows and timestamp edges), and the markers' statistics.

Memory and time do not grow with the trace's length: a JLS file is read through its own
multi-resolution summaries (`pyjls.Reader.fsr_statistics`) for any view wider than a couple of
samples per pixel, and raw samples only for narrow views. Marker statistics come from raw samples
through `rig.traces.analysis.SpanAccumulator`, the code `rig analyze --span` uses.

A run folder (its trace with the windows on top) is opened one room up, by `rig.run.view`.
The GUI (`gui/viewer.py`) only draws what these return.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rig.errors import AnalysisError, ConfigError
from rig.traces.analysis import SpanAccumulator, SpanStats, falling_edges, span_samples
from rig.traces.files import (
    JLS_CURRENT,
    JLS_GPIO,
    JLS_POWER,
    JLS_RANGE,
    JLS_VOLTAGE,
    captured_c_output,
    check_jls_length,
    jls_error,
    open_jls_reader,
    read_trace,
    set_voltage_of,
    trace_end,
)

#: The plotted channels, top to bottom, and their units.
CHANNELS = ("current", "voltage", "power", "gpio")
UNITS = {"current": "A", "voltage": "V", "power": "W", "gpio": ""}
#: A view with at most this many samples per bin is drawn from raw samples.
RAW_SAMPLES_PER_BIN = 2
#: Raw samples read per call (bounds memory on marker spans and exports).
BLOCK = 1 << 20
#: Longest span the markers read raw; longer ones use the file's summaries (marked not exact).
SPAN_RAW_MAX = 8_000_000
#: Summary bins a long marker span is split into.
SPAN_BINS = 4096
#: Longest plain trace (no run folder) whose GPIO is searched for timestamp edges on open.
EDGE_SEARCH_MAX_SAMPLES = 20_000_000


@dataclass(frozen=True)
class Envelope:
    """One channel over a time range: per bin mean, min and max, or raw samples (`raw`)."""

    t: np.ndarray
    mean: np.ndarray
    min: np.ndarray
    max: np.ndarray
    raw: bool
    #: Seconds per point (a bin, or one sample when raw).
    step_s: float
    #: True where power's min/max are estimated from current and voltage summaries.
    approximate: bool = False


@dataclass(frozen=True)
class Mark:
    """A shaded span of a run: the idle span or an energy window (numbers as `rig show`)."""

    kind: str  # "idle" or "window"
    index: int
    start_s: float
    end_s: float
    duration_s: float
    mean_power_w: float
    energy_j: float
    energy_per_inference_j: float | None = None

    @property
    def label(self) -> str:
        """How the view numbers it: "idle" or "run 1"..."""
        return "idle" if self.kind == "idle" else f"run {self.index + 1}"


class TraceSource:
    """A trace file: sample rate, length, which channels it has, and reads by sample range."""

    path: Path
    sample_rate: float
    length: int
    simulated: bool
    #: What the file lacks, one sentence each (shown in the window).
    missing: list[str]
    first_sample_id: int = 0
    #: The first read the file refused (a chunk damaged after it was written), or None: the
    #: window says it and shows the rest; `rig view --png` ends on it (exit 2).
    damaged: AnalysisError | None = None

    def has(self, channel: str) -> bool:
        """Whether the channel can be shown (power needs current and voltage, or its own)."""
        raise NotImplementedError

    def read(self, channel: str, start: int, stop: int) -> np.ndarray:
        """Raw samples [start, stop) as float64 (power = current x voltage)."""
        raise NotImplementedError

    def _summary(self, channel: str, start: int, incr: int, bins: int) -> np.ndarray:
        """(bins, 3) mean, min, max per `incr` samples from `start`."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the file."""

    @property
    def duration_s(self) -> float:
        """Length in seconds (samples / rate)."""
        return self.length / self.sample_rate

    def envelope(self, channel: str, start_s: float, end_s: float, bins: int) -> Envelope:
        """`channel` over [start_s, end_s) in about `bins` points (one per pixel column)."""
        fs = self.sample_rate
        start = max(0, min(self.length - 1, math.floor(start_s * fs)))
        stop = max(start + 1, min(self.length, math.ceil(end_s * fs) + 1))
        bins = max(1, int(bins))
        n = stop - start
        if n <= bins * RAW_SAMPLES_PER_BIN:
            y = self.read(channel, start, stop)
            t = (start + np.arange(n)) / fs
            return Envelope(t, y, y, y, True, 1 / fs)
        incr = math.ceil(n / bins)
        count = max(1, n // incr)
        stats = self._summary(channel, start, incr, count)
        t = (start + incr * np.arange(count)) / fs
        return Envelope(t, stats[:, 0], stats[:, 1], stats[:, 2], False, incr / fs,
                        approximate=channel == "power" and not self._has_power_signal())

    def _has_power_signal(self) -> bool:
        return False

    def _summarised(self) -> bool:
        """Whether summaries come from the file (cheap) rather than from memory."""
        return False

    def span_stats(self, start_s: float, end_s: float) -> SpanStats:
        """The markers' statistics over [start_s, end_s), from raw samples block by block."""
        start, stop = span_samples(start_s, end_s, self.sample_rate, self.length)
        acc = SpanAccumulator(self.sample_rate, start)
        if stop - start > SPAN_RAW_MAX and self._summarised():
            # An hour at 1 MS/s is 29 GB: read the bins' summaries, and the tail raw.
            incr = math.ceil((stop - start) / SPAN_BINS)
            count = (stop - start) // incr
            acc.add_summary(incr, self._summary("current", start, incr, count),
                            self._summary("voltage", start, incr, count)[:, 0])
            start += incr * count
        for lo in range(start, stop, BLOCK):
            hi = min(stop, lo + BLOCK)
            acc.add(self.read("current", lo, hi), self.read("voltage", lo, hi))
        return acc.result()

    def export_csv(self, path: Path, start_s: float, end_s: float) -> int:
        """Raw samples of [start_s, end_s) as a CSV `rig analyze` reads; returns the count."""
        start, stop = span_samples(start_s, end_s, self.sample_rate, self.length)
        with open(path, "w", encoding="utf-8") as f:
            f.write(f"# neurobench-rig trace excerpt: {self.path}, samples {start}..{stop}, "
                    f"sample_rate_hz={self.sample_rate!r}\n")
            f.write("current_a,voltage_v,gpio\n")
            for lo in range(start, stop, BLOCK):
                hi = min(stop, lo + BLOCK)
                gpio = (self.read("gpio", lo, hi) if self.has("gpio")
                        else np.ones(hi - lo))  # no line: held high, so no fake edge
                table = np.column_stack((self.read("current", lo, hi),
                                         self.read("voltage", lo, hi), gpio))
                np.savetxt(f, table, delimiter=",", fmt=("%.9g", "%.9g", "%d"))
        return stop - start


class JlsSource(TraceSource):
    """A JLS v2 file, read through pyjls (raw samples and the file's own summaries)."""

    def __init__(self, path: Path) -> None:
        import pyjls

        self.path = path
        unclosed = check_jls_length(path)
        # What pyjls's C library prints (repairing a file cut off, refusing a damaged one) is
        # caught: never on the terminal, quoted in the error when it refuses the file.
        self._reader, _ = open_jls_reader(path)
        try:
            self._signals = {s.name: s for s in self._reader.signals.values()
                             if s.signal_type == pyjls.SignalType.FSR and s.signal_id != 0}
            self._gpio = next((self._signals[n] for n in (JLS_GPIO, "gpi[0]")
                               if n in self._signals), None)
            if self._gpio is not None:
                self._signals["gpio"] = self._gpio
            present = [s for s in self._signals.values() if s.length > 0]
            if not present:
                raise AnalysisError(f"{path} holds no samples",
                                    hint="the recording stopped before its first sample")
            # A recording cut off may hold samples of some signals only: show those.
            self._signals = {n: s for n, s in self._signals.items() if s.length > 0}
            self._gpio = self._signals.get("gpio")
            # The range signal may start later (with the first chunk that told its ranges):
            # the trace's length is its samples' (as `read_trace` has it).
            samples = [s for s in present if s.name != JLS_RANGE] or present
            self.length = min(s.length for s in samples)
            rate = float(present[0].sample_rate)
            meta = _user_data(self._reader)
            # Filler after the trace's end (`TraceWriter.close`) is not shown.
            self.length = trace_end(meta, self.length)
            exact = meta.get("sample_rate_hz")
            if isinstance(exact, int | float) and exact > 0 and round(exact) == rate:
                rate = float(exact)
            self.sample_rate = rate
            self.first_sample_id = int(present[0].sample_id_offset or 0)
            self.simulated = bool(meta.get("simulated"))
            #: (volts, source) when the file stores no voltage because the monitor set it.
            self.set_voltage = (None if JLS_VOLTAGE in self._signals
                                else set_voltage_of(meta))
            self.missing = []
            if unclosed:
                self.missing.append("the file was never closed (the recording was cut off): "
                                    "showing the samples pyjls recovered")
            for name, what in ((JLS_CURRENT, "current"), (JLS_VOLTAGE, "voltage")):
                if name not in self._signals and not (what == "voltage" and self.set_voltage):
                    self.missing.append(f"no {what} signal in the file")
            if self._gpio is None:
                self.missing.append("no GPIO signal (gpi0) in the file: the timestamp line is "
                                    "not shown")
            if not self.has("power"):
                self.missing.append("power needs current and voltage: not shown")
            if not (self.has("current") and self.has("voltage")):
                self.missing.append("marker energy and charge need current and voltage")
        except BaseException:
            self._reader.close()
            raise

    def has(self, channel: str) -> bool:
        if channel == "power":
            return self._has_power_signal() or (JLS_CURRENT in self._signals
                                                 and self.has("voltage"))
        if channel == "voltage" and self.set_voltage is not None:
            return True
        return {"current": JLS_CURRENT, "voltage": JLS_VOLTAGE,
                "gpio": "gpio"}[channel] in self._signals

    def _has_power_signal(self) -> bool:
        return JLS_POWER in self._signals

    def _summarised(self) -> bool:
        return True

    def _sig(self, channel: str) -> Any:
        name = {"current": JLS_CURRENT, "voltage": JLS_VOLTAGE, "power": JLS_POWER,
                "gpio": "gpio"}[channel]
        if name not in self._signals:
            raise AnalysisError(f"{self.path} has no {channel} signal")
        return self._signals[name]

    def read(self, channel: str, start: int, stop: int) -> np.ndarray:
        if channel == "power" and not self._has_power_signal():
            return self.read("current", start, stop) * self.read("voltage", start, stop)
        if channel == "voltage" and self.set_voltage is not None:
            return np.full(stop - start, self.set_voltage[0])
        sig = self._sig(channel)
        data = self._pyjls(self._reader.fsr, sig.signal_id, start, stop - start)
        if channel == "gpio" and sig.data_type & 0xFF == 1:  # u1: packed bits
            data = np.unpackbits(data, bitorder="little")[: stop - start]
        return np.asarray(data, dtype=np.float64)

    def _summary(self, channel: str, start: int, incr: int, bins: int) -> np.ndarray:
        if channel == "power" and not self._has_power_signal():
            # Old files carry a power signal; new ones derive it. From summaries, power per
            # bin is current's statistics x the bin's mean voltage: exact while the supply
            # holds still within a bin, which is what a bench supply does.
            i = self._summary("current", start, incr, bins)
            v = self._summary("voltage", start, incr, bins)[:, :1]
            return i * v
        if channel == "voltage" and self.set_voltage is not None:
            return np.full((bins, 3), self.set_voltage[0])
        sig = self._sig(channel)
        stats = self._pyjls(self._reader.fsr_statistics, sig.signal_id, start, incr, bins)
        return np.asarray(stats)[:, (0, 2, 3)].astype(np.float64)

    def _pyjls(self, call: Any, *args: Any) -> Any:
        """A pyjls read: what its C library prints caught, and a chunk it refuses (a CRC that
        does not match: the file was damaged after it was written) raised as AnalysisError
        naming the file, as `read_trace` does, instead of pyjls's bare RuntimeError."""
        reading: list[str] = []
        try:
            with captured_c_output() as reading:
                return call(*args)
        except (RuntimeError, OSError, ValueError) as exc:
            error = jls_error(self.path, exc, reading)
            self.damaged = self.damaged or error
            raise error from None

    def close(self) -> None:
        self._reader.close()


class ArraySource(TraceSource):
    """A trace held in memory (a CSV file: CSV traces are short by nature)."""

    def __init__(self, path: Path, sample_rate: float | None) -> None:
        trace = read_trace(path, sample_rate=sample_rate)
        self.path = path
        if len(trace) == 0:
            raise AnalysisError(f"{path} holds no samples", hint="record or export some first")
        self.sample_rate = trace.sample_rate
        self.length = len(trace)
        self.simulated = trace.simulated
        self.missing = []
        self._data = {"current": trace.current, "voltage": trace.voltage,
                      "gpio": trace.gpio.astype(np.float64),
                      "power": trace.current * trace.voltage}

    def has(self, channel: str) -> bool:
        return channel in self._data

    def read(self, channel: str, start: int, stop: int) -> np.ndarray:
        return self._data[channel][start:stop]

    def _summary(self, channel: str, start: int, incr: int, bins: int) -> np.ndarray:
        y = self._data[channel][start : start + incr * bins].reshape(bins, incr)
        return np.column_stack((y.mean(axis=1), y.min(axis=1), y.max(axis=1)))


@dataclass
class TraceView:
    """A trace opened for viewing, with the measurement of its run folder (if any) on top."""

    source: TraceSource
    title: str
    marks: list[Mark] = field(default_factory=list)
    #: DUT timestamp edges [s] (falling edges of the timestamp line).
    edges_s: np.ndarray = field(default_factory=lambda: np.empty(0))
    #: Things the user should know (what is missing, why edges were not searched...).
    notes: list[str] = field(default_factory=list)
    #: The run folder, when the view was opened from one.
    run: Path | None = None

    @property
    def simulated(self) -> bool:
        """Recorded on the virtual bench."""
        return self.source.simulated

    def close(self) -> None:
        """Release the trace file."""
        self.source.close()


def open_trace(path: str | Path, sample_rate: float | None = None) -> TraceView:
    """Open a .jls or .csv trace (a run folder: `rig.run.view.open_view`)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path} does not exist",
                          hint="give a .jls or .csv trace, or a run folder under runs/")
    suffix = path.suffix.lower()
    if suffix == ".jls":
        source: TraceSource = JlsSource(path)
    elif suffix == ".csv":
        source = ArraySource(path, sample_rate)
    else:
        raise ConfigError(f"cannot view {path}: not a .jls or .csv trace, nor a run folder",
                          hint="give a .jls or .csv trace, or a run folder under runs/")
    view = TraceView(source, path.name, notes=list(source.missing))
    view.edges_s = _search_edges(source, view.notes)
    return view


def _search_edges(source: TraceSource, notes: list[str]) -> np.ndarray:
    if not source.has("gpio"):
        return np.empty(0)
    if source.length > EDGE_SEARCH_MAX_SAMPLES:
        notes.append(f"timestamp edges are not searched in a plain trace longer than "
                     f"{EDGE_SEARCH_MAX_SAMPLES:,} samples (open its run folder to see them)")
        return np.empty(0)
    out, level = [], 1
    for lo in range(0, source.length, BLOCK):
        g = source.read("gpio", lo, min(source.length, lo + BLOCK)).astype(np.uint8)
        out.append(falling_edges(g, initial_level=level) + lo)
        level = int(g[-1]) & 1
    return np.concatenate(out) / source.sample_rate


def _user_data(reader: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {}

    def on_user_data(chunk_meta: int, data: Any) -> bool:
        if chunk_meta == 1 and isinstance(data, dict):
            meta.update(data)
        return False

    reader.user_data(on_user_data)
    return meta
