"""Sample-exact energy inside GPIO windows, idle/active/dynamic power, and run statistics.

Energy of a window [start, end) is E = sum_k i[k] * v[k] / fs: each sample stands for one
sample period. Times are sample counts divided by the instrument's sample rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rig.errors import AnalysisError
from rig.traces.analysis.dot import BLOCK, float64_block, span_dots, span_sums
from rig.traces.analysis.dot import dot64 as _dot64
from rig.traces.analysis.edges import change_points, falling_edges, windows_from_edges
from rig.traces.analysis.range_signal import RangeSignal

#: Default replicability tolerance: every trial within 5% of the reported value.
REPLICABILITY_TOLERANCE = 0.05


def _check_signals(current: np.ndarray, voltage: np.ndarray, sample_rate: float) -> None:
    if current.ndim != 1 or voltage.ndim != 1:
        raise AnalysisError("current and voltage must be one-dimensional arrays")
    if len(current) != len(voltage):
        raise AnalysisError(
            f"current has {len(current)} samples but voltage has {len(voltage)}",
            hint="pass arrays from the same capture",
        )
    if not (math.isfinite(sample_rate) and sample_rate > 0):
        raise AnalysisError(f"sample rate must be a positive number of Hz, got {sample_rate}")


def window_energies(
    current: np.ndarray, voltage: np.ndarray, windows: np.ndarray, sample_rate: float
) -> np.ndarray:
    """Energy [J] of each [start, end) sample window: one float64 dot product per window
    (float32 samples too: products and sums in float64, see `rig.traces.analysis.dot`)."""
    current = np.asarray(current)
    voltage = np.asarray(voltage)
    windows = np.asarray(windows, dtype=np.int64).reshape(-1, 2)
    check_windows(current, voltage, windows, sample_rate)
    return span_dots(current, voltage, windows) / sample_rate


def check_windows(current: np.ndarray, voltage: np.ndarray, windows: np.ndarray,
                  sample_rate: float) -> None:
    """AnalysisError unless the signals pair up, the rate is a positive number and every
    (n, 2) row of `windows` is a non-empty [start, end) inside the trace (`window_energies`)."""
    _check_signals(current, voltage, sample_rate)
    n = len(current)
    if windows.size and (
        windows.min() < 0 or windows.max() > n or np.any(windows[:, 1] <= windows[:, 0])
    ):
        raise AnalysisError(f"windows must satisfy 0 <= start < end <= {n} samples")


def span_power(current: np.ndarray, voltage: np.ndarray, start: int, stop: int) -> float:
    """Mean power [W] over samples [start, stop)."""
    current = np.asarray(current)
    voltage = np.asarray(voltage)
    _check_signals(current, voltage, 1.0)
    if not 0 <= start < stop <= len(current):
        raise AnalysisError(
            f"span [{start}, {stop}) is not a non-empty range inside the "
            f"{len(current)}-sample trace"
        )
    return _dot64(current[start:stop], voltage[start:stop]) / (stop - start)


@dataclass(frozen=True, eq=False)
class SpanFigures:
    """What `span_figures` finds over a trace's spans."""

    #: sum(current * voltage) over each span, in float64 (its energy times the sample rate).
    dots: np.ndarray
    #: Each span's range occupancy (`span_range_occupancy`); None without a range signal.
    shares: list[dict[str, dict[str, float]]] | None
    #: With `whole`: whether every sample's product came out finite, which no NaN or infinite
    #: current sample lets happen (False: one did not, whatever made it). None when not looked
    #: at (no `whole`, or the figures were taken one by one).
    finite: bool | None = None


def span_pieces(spans: np.ndarray, n: int,
                current_range: np.ndarray | RangeSignal | None = None,
                range_names: Sequence[str] = (), *, whole: bool = False
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """The pieces `span_figures` dots for valid `spans` of an `n`-sample trace: (pieces, an
    (m, 2) array; inside, whether each lies inside a span), the spans cut at every span
    boundary and range change (`whole`: the samples outside every span too); None where the
    ranges change too often to take piece by piece."""
    packed = current_range if isinstance(current_range, RangeSignal) else None
    cuts = np.unique(np.concatenate((spans.ravel(), [0, n] if whole else [])).astype(np.int64))
    if current_range is not None and range_names and spans.size:
        lo, hi = int(spans.min()), int(spans.max())
        cuts = np.union1d(cuts, packed.changes(lo, hi) if packed is not None
                          else change_points(np.asarray(current_range)[lo:hi]) + lo)
    # A piece [cuts[k], cuts[k + 1]) lies wholly inside a span or wholly outside every one.
    depth = np.zeros(len(cuts), dtype=np.int64)
    np.add.at(depth, np.searchsorted(cuts, spans[:, 0]), 1)
    np.add.at(depth, np.searchsorted(cuts, spans[:, 1]), -1)
    inside = np.cumsum(depth)[:-1] > 0
    pieces = np.column_stack((cuts[:-1], cuts[1:]))
    if not whole:
        pieces, inside = pieces[inside], inside[inside]
    if len(pieces) * _LONG_RUN > int((pieces[:, 1] - pieces[:, 0]).sum()):
        return None  # runs of one range too short to take one by one
    return pieces, inside


def span_figures(current: np.ndarray, voltage: np.ndarray, spans: np.ndarray,
                 current_range: np.ndarray | RangeSignal | None = None,
                 range_names: Sequence[str] = (), *, whole: bool = False,
                 known: tuple[np.ndarray, np.ndarray] | None = None) -> SpanFigures:
    """For each [start, stop) row of `spans` (they may overlap or nest, as the idle span and
    its sub-spans do): sum(current * voltage) over it in float64, and where a range signal is
    given, how it spreads over the ranges. What `span_dots` and `span_range_occupancies`
    give, in one pass over the samples; `whole`: the samples outside every span are dotted
    too, so that `finite` tells whether any sample is lost (NaN) without another pass.

    The spans are cut at every span boundary and range change into pieces, each piece dotted
    once (`span_dots`), and each span's figures added up from its pieces (`math.fsum`). A
    piece's current sum is its dot / v where the voltage is set (one value for every sample:
    rounding apart, the same), else a second pass (`span_sums`). Ranges changing every few
    samples would make too many pieces: then the two are taken apart (and `finite` is None).
    `known`: (pieces, their dots) found already, as while the trace was read
    (`rig.traces.files.read_trace`'s `spans`): taken where the pieces are these."""
    current = np.asarray(current)
    voltage = np.asarray(voltage)
    _check_signals(current, voltage, 1.0)
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    n = len(current)
    check_spans(spans, n, "trace")
    packed = current_range if isinstance(current_range, RangeSignal) else None
    if current_range is not None:
        current_range = packed if packed is not None else np.asarray(current_range)
        check_spans(spans, len(current_range), "range signal")
    cut = span_pieces(spans, n, current_range, range_names, whole=whole)
    if cut is None:
        # Runs of one range too short to take one by one: each figure on its own.
        return SpanFigures(span_dots(current, voltage, spans), None if current_range is None
                           else span_range_occupancies(current, np.asarray(current_range),
                                                       range_names, spans))
    pieces, inside = cut
    if known is not None and np.array_equal(known[0], pieces):
        every_dot = known[1]
    else:
        every_dot = span_dots(current, voltage, pieces)
    finite = bool(np.isfinite(every_dot).all()) if whole else None
    pieces, piece_dots = pieces[inside], every_dot[inside]
    first = np.searchsorted(pieces[:, 0], spans[:, 0])  # each span: pieces [first, last)
    last = np.searchsorted(pieces[:, 1], spans[:, 1], "right")
    dots = np.array([_exact_sum(piece_dots[i:j]) for i, j in zip(first, last, strict=True)])
    if current_range is None:
        return SpanFigures(dots, None, finite)
    if not range_names:
        return SpanFigures(dots, [{} for _ in range(len(spans))], finite)
    v = float(voltage[0]) if voltage.strides == (0,) and n else math.nan
    piece_sums = (piece_dots / v if math.isfinite(v) and v != 0
                  else span_sums(current, pieces))
    width = len(range_names)
    column = (packed.at(pieces[:, 0]) if packed is not None  # one range a piece
              else current_range[pieces[:, 0]]).astype(np.intp)
    lengths = pieces[:, 1] - pieces[:, 0]
    shares: list[dict[str, dict[str, float]]] = []
    for (a, b), i, j in zip(spans.tolist(), first.tolist(), last.tolist(), strict=True):
        col = column[i:j]
        if int(col.max()) >= width:  # a sample whose range is not known
            shares.append({})
            continue
        counts = np.bincount(col, weights=lengths[i:j], minlength=width)
        sums = np.bincount(col, weights=piece_sums[i:j], minlength=width)
        if not np.isfinite(sums).all():  # lost (NaN) samples: counted, their current not
            sums = _finite_sums(current, np.asarray(current_range), width, a, b)
        shares.append({str(name): {"samples": int(c), "mean_current_a": float(t) / int(c)}
                       for name, c, t in zip(range_names, counts.tolist(), sums.tolist(),
                                             strict=True) if c})
    return SpanFigures(dots, shares, finite)


def _exact_sum(values: np.ndarray) -> float:
    """The correctly rounded sum of finite values (`math.fsum`); NaN or inf as a plain sum."""
    return math.fsum(values.tolist()) if np.isfinite(values).all() else float(values.sum())


def check_spans(spans: np.ndarray, n: int, what: str) -> None:
    """AnalysisError naming the first (n, 2) row that is not a non-empty span inside n samples."""
    bad = np.flatnonzero((spans[:, 0] < 0) | (spans[:, 1] <= spans[:, 0]) | (spans[:, 1] > n))
    if bad.size:
        start, stop = spans[bad[0]].tolist()
        raise AnalysisError(f"span [{start}, {stop}) is not a non-empty range inside the "
                            f"{n}-sample {what}")


#: Mean samples per run of one range from which each run is summed on its own (`span_sums`:
#: threaded, ~10 us of Python a run); below it, each block's runs are summed in one reduceat.
_LONG_RUN = 1 << 14


def span_range_occupancies(current: np.ndarray, current_range: np.ndarray,
                           range_names: Sequence[str], spans: np.ndarray
                           ) -> list[dict[str, dict[str, float]]]:
    """`span_range_occupancy` of each [start, stop) row of `spans`.

    Ranges change seldom (an instrument switches as the current moves, not every sample), so
    each span is cut into runs of one range where its range changes and each run's current is
    summed at once in float64 (no per-sample scatter, no float64 copy of a span): long runs
    each in its own `span_sums` task, short ones a block at a time in one reduceat."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    current_range = np.asarray(current_range)
    check_spans(spans, len(current_range), "range signal")
    if not spans.size or not range_names:
        return [{} for _ in range(len(spans))]
    width = len(range_names)
    lo, hi = int(spans[:, 0].min()), int(spans[:, 1].max())
    changes = change_points(current_range[lo:hi]) + lo  # the first sample of each new run
    # Each span's runs: [starts[k], starts[k + 1]) (the last to its stop), and their ranges.
    starts = [np.concatenate(([a], changes[np.searchsorted(changes, a, "right"):
                                           np.searchsorted(changes, b)]))
              for a, b in spans.tolist()]
    columns = [current_range[k].astype(np.intp) for k in starts]
    known = [int(c.max()) < width for c in columns]  # else a sample's range is not known
    runs = [np.column_stack((k, np.append(k[1:], b)))
            for k, (_, b), ok in zip(starts, spans.tolist(), known, strict=True) if ok]
    if not runs:
        return [{} for _ in range(len(spans))]
    runs_all = np.concatenate(runs)
    if len(runs_all) * _LONG_RUN <= int((runs_all[:, 1] - runs_all[:, 0]).sum()):
        run_sums = span_sums(current, runs_all)  # long runs: one threaded call for them all
        sums = np.split(run_sums, np.cumsum([len(r) for r in runs])[:-1])
    else:
        sums = [_run_sums(current, r) for r in runs]
    out: list[dict[str, dict[str, float]]] = []
    done = iter(zip(runs, sums, strict=True))
    for (a, b), column, ok in zip(spans.tolist(), columns, known, strict=True):
        if not ok:
            out.append({})
            continue
        run, run_sum = next(done)
        counts = np.bincount(column, weights=run[:, 1] - run[:, 0], minlength=width)
        per_range = np.bincount(column, weights=run_sum, minlength=width)
        if not np.isfinite(per_range).all():  # lost (NaN) samples: their range counts them,
            per_range = _finite_sums(current, current_range, width, a, b)  # their current not
        out.append({str(name): {"samples": int(c), "mean_current_a": float(v) / int(c)}
                    for name, c, v in zip(range_names, counts.tolist(), per_range.tolist(),
                                          strict=True) if c})
    return out


def _run_sums(current: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """The float64 current sum of each [start, stop) row of `runs` (consecutive runs of one
    range each), block by block: one reduceat per block over its pieces of runs."""
    starts = runs[:, 0]
    total = np.zeros(len(runs))
    for lo in range(int(runs[0, 0]), int(runs[-1, 1]), BLOCK):
        hi = min(lo + BLOCK, int(runs[-1, 1]))
        first = int(np.searchsorted(starts, lo, "right")) - 1  # the run holding sample lo
        last = int(np.searchsorted(starts, hi))  # runs [first, last) meet the block
        local = np.concatenate(([0], starts[first + 1:last] - lo))
        total[first:last] += np.add.reduceat(float64_block(current[lo:hi]), local)
    return total


def _finite_sums(current: np.ndarray, ranges: np.ndarray, width: int, start: int, stop: int
                 ) -> np.ndarray:
    """Each range's current summed over [start, stop), non-finite samples taken as 0."""
    amps = np.asarray(current[start:stop], dtype=np.float64)
    amps = np.where(np.isfinite(amps), amps, 0.0)
    return np.bincount(ranges[start:stop], weights=amps, minlength=width)


def span_range_occupancy(current: np.ndarray, current_range: np.ndarray,
                         range_names: Sequence[str], start: int, stop: int
                         ) -> dict[str, dict[str, float]]:
    """How samples [start, stop) spread over the current ranges a trace recorded
    (`Trace.current_range`, indices into `range_names`): {name: {"samples": n,
    "mean_current_a": their mean current}} for each range holding any, as the live recorder's
    `range_occupancy` gives it. Empty when a sample's range is not known (an index past the
    names: not recorded there)."""
    return span_range_occupancies(current, current_range, range_names,
                                  np.array([[start, stop]]))[0]


def median(values: Sequence[float] | np.ndarray) -> float:
    """Median of a non-empty set of values."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise AnalysisError("median of no values")
    return float(np.median(arr))


def mean_stderr(values: Sequence[float] | np.ndarray) -> tuple[float, float]:
    """Mean and standard error of the mean (sample std, ddof=1, / sqrt(n)); 0.0 for one value."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise AnalysisError("mean of no values")
    mean = float(arr.mean())
    if arr.size == 1:
        return mean, 0.0
    return mean, float(arr.std(ddof=1) / math.sqrt(arr.size))


def replicability(
    values: Sequence[float] | np.ndarray, tolerance: float = REPLICABILITY_TOLERANCE
) -> tuple[bool, float]:
    """Whether every value lies within `tolerance` (relative) of their mean, and the worst
    relative deviation found."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        raise AnalysisError("replicability of no values")
    mean = arr.mean()
    spread = np.abs(arr - mean)
    if mean == 0:
        max_dev = 0.0 if not spread.any() else math.inf
    else:
        max_dev = float(spread.max() / abs(mean))
    return bool(max_dev <= tolerance), max_dev


@dataclass(frozen=True)
class WindowEnergy:
    """One timed loop between two falling edges: samples [start_sample, end_sample)."""

    start_sample: int
    end_sample: int
    start_s: float
    end_s: float
    duration_s: float
    energy_j: float
    mean_power_w: float

    def to_dict(self) -> dict[str, float]:
        """JSON form: times in s, energy in J, power in W."""
        return {
            "start_s": self.start_s,
            "end_s": self.end_s,
            "duration_s": self.duration_s,
            "energy_j": self.energy_j,
            "mean_power_w": self.mean_power_w,
        }


@dataclass(frozen=True)
class EnergyAnalysis:
    """Energy figures of one trace: every window, and what the spec derives from them."""

    sample_rate_hz: float
    iterations: int
    windows: list[WindowEnergy]
    #: Mean of the windows' mean powers [W].
    active_power_w: float
    #: Median over windows of energy / iterations [J].
    energy_per_inference_j: float
    #: Per-inference execution time (window duration / iterations): mean and its stderr [s].
    exec_time_mean_s: float
    exec_time_stderr_s: float
    #: Every window's energy per inference within the tolerance of their mean?
    replicable: bool
    replicability_max_rel_dev: float
    #: The idle span [start_s, end_s) if one was given, and what it yields.
    idle_span_s: tuple[float, float] | None = None
    idle_power_w: float | None = None
    dynamic_power_w: float | None = None
    dynamic_energy_per_inference_j: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object `rig analyze --json` prints; idle keys only when an idle span was
        given."""
        out: dict[str, Any] = {
            "sample_rate_hz": self.sample_rate_hz,
            "windows": [w.to_dict() for w in self.windows],
            "active_power_w": self.active_power_w,
            "energy_per_inference_j": self.energy_per_inference_j,
        }
        if self.idle_power_w is not None:
            out["idle_power_w"] = self.idle_power_w
            out["dynamic_power_w"] = self.dynamic_power_w
            out["dynamic_energy_per_inference_j"] = self.dynamic_energy_per_inference_j
            out["idle_span_s"] = list(self.idle_span_s) if self.idle_span_s else None
        out["iterations"] = self.iterations
        out["exec_time_mean_s"] = self.exec_time_mean_s
        out["exec_time_stderr_s"] = self.exec_time_stderr_s
        out["replicability"] = {
            "ok": self.replicable,
            # inf (values around a zero mean) is not valid JSON: null instead.
            "max_rel_dev": (
                self.replicability_max_rel_dev
                if math.isfinite(self.replicability_max_rel_dev)
                else None
            ),
            "tolerance": REPLICABILITY_TOLERANCE,
        }
        return out


def _idle_samples(
    idle: tuple[float, float], sample_rate: float, n: int, windows: np.ndarray
) -> tuple[int, int]:
    start_s, end_s = (float(x) for x in idle)
    duration = n / sample_rate
    hint = f"give START:END in seconds with 0 <= START < END <= {duration:g}, the trace length"
    if not (math.isfinite(start_s) and math.isfinite(end_s)) or start_s >= end_s:
        raise AnalysisError(f"idle span {start_s:g}:{end_s:g} s is empty or reversed", hint=hint)
    start, stop = round(start_s * sample_rate), round(end_s * sample_rate)
    if start < 0 or stop > n:
        raise AnalysisError(
            f"idle span {start_s:g}:{end_s:g} s is outside the trace (0 to {duration:g} s)",
            hint=hint,
        )
    if start >= stop:
        raise AnalysisError(
            f"idle span {start_s:g}:{end_s:g} s holds no whole sample at {sample_rate:g} Hz",
            hint=hint,
        )
    overlap = np.flatnonzero((windows[:, 0] < stop) & (windows[:, 1] > start))
    if overlap.size:
        w = int(overlap[0])
        raise AnalysisError(
            f"idle span {start_s:g}:{end_s:g} s overlaps timed window {w + 1} "
            f"({windows[w, 0] / sample_rate:g} to {windows[w, 1] / sample_rate:g} s): "
            "idle power must come from a span where the DUT is not computing",
            hint="pick an idle span between or outside the windows",
        )
    return start, stop


def analyze(
    current: np.ndarray,
    voltage: np.ndarray,
    gpio: np.ndarray,
    sample_rate: float,
    iterations: int = 1,
    idle: tuple[float, float] | None = None,
    *,
    bit: int = 0,
) -> EnergyAnalysis:
    """Find the timed windows on `bit` of `gpio`, integrate their energy, and derive the
    figures the ASC energy method asks for (`iterations` inferences per window; `idle` a
    [start_s, end_s) span where the DUT is configured but not computing)."""
    current = np.asarray(current)
    voltage = np.asarray(voltage)
    gpio = np.asarray(gpio)
    sample_rate = float(sample_rate)
    _check_signals(current, voltage, sample_rate)
    if len(gpio) != len(current):
        raise AnalysisError(
            f"gpio has {len(gpio)} samples but current has {len(current)}",
            hint="pass arrays from the same capture",
        )
    if int(iterations) != iterations or iterations < 1:
        raise AnalysisError(f"iterations must be a positive integer, got {iterations!r}")
    iterations = int(iterations)

    windows = windows_from_edges(falling_edges(gpio, bit=bit), sample_rate)
    energies = window_energies(current, voltage, windows, sample_rate)
    bad = np.flatnonzero(~np.isfinite(energies))
    if bad.size:
        w = int(bad[0])
        raise AnalysisError(
            f"window {w + 1} ({windows[w, 0] / sample_rate:g} to "
            f"{windows[w, 1] / sample_rate:g} s) contains missing or non-finite samples",
            hint="the instrument dropped samples inside a timed window: repeat the measurement",
        )
    counts = windows[:, 1] - windows[:, 0]
    durations = counts / sample_rate
    powers = energies / durations
    per_inference = energies / iterations
    exec_mean, exec_stderr = mean_stderr(durations / iterations)
    ok, max_dev = replicability(per_inference)
    window_list = [
        WindowEnergy(
            start_sample=int(s),
            end_sample=int(e),
            start_s=float(s / sample_rate),
            end_s=float(e / sample_rate),
            duration_s=float(d),
            energy_j=float(en),
            mean_power_w=float(p),
        )
        for (s, e), d, en, p in zip(windows, durations, energies, powers, strict=True)
    ]
    active = float(powers.mean())

    idle_power = dynamic_power = dynamic_energy = None
    idle_span = None
    if idle is not None:
        start, stop = _idle_samples(idle, sample_rate, len(current), windows)
        idle_power = span_power(current, voltage, start, stop)
        if not math.isfinite(idle_power):
            raise AnalysisError(
                "the idle span contains missing or non-finite samples",
                hint="pick an idle span without gaps in the trace",
            )
        dynamic_power = active - idle_power
        dynamic_energy = dynamic_power * exec_mean
        idle_span = (float(idle[0]), float(idle[1]))

    return EnergyAnalysis(
        sample_rate_hz=sample_rate,
        iterations=iterations,
        windows=window_list,
        active_power_w=active,
        energy_per_inference_j=median(per_inference),
        exec_time_mean_s=exec_mean,
        exec_time_stderr_s=exec_stderr,
        replicable=ok,
        replicability_max_rel_dev=max_dev,
        idle_span_s=idle_span,
        idle_power_w=idle_power,
        dynamic_power_w=dynamic_power,
        dynamic_energy_per_inference_j=dynamic_energy,
    )
