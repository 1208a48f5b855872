"""Statistics of one span of a trace, as a bench scope's markers show them: duration, mean, min
and max of current and power, charge and energy.

`SpanStatistics` accumulates blocks of raw samples (so a span longer than memory can be read
block by block) and `span_statistics` is the one-block case. `rig analyze --span` and the
viewer's markers both use it, so they can never disagree. Sums are float64, energy like
`window_energies`: E = sum(i[k] * v[k]) / fs.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from rig.errors import AnalysisError
from rig.traces.analysis.energy import _dot64


@dataclass(frozen=True)
class SpanStats:
    """What two markers read off a span of `samples` samples."""

    start_s: float
    end_s: float
    samples: int
    duration_s: float
    current_mean_a: float
    current_min_a: float
    current_max_a: float
    power_mean_w: float
    power_min_w: float
    power_max_w: float
    charge_c: float
    energy_j: float
    #: Samples in the span the instrument lost (NaN): every figure is then NaN, never a guess.
    lost_samples: int = 0
    #: False when a span too long to read raw was taken from the file's summaries: then
    #: power and energy use each bin's mean voltage (exact for a steady supply).
    exact: bool = True

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON."""
        return asdict(self)


class SpanAccumulator:
    """Adds up consecutive blocks of raw samples of one span (or of per-bin summaries)."""

    def __init__(self, sample_rate: float, start_sample: int) -> None:
        if not (math.isfinite(sample_rate) and sample_rate > 0):
            raise AnalysisError(f"sample rate must be a positive number of Hz, got {sample_rate}")
        self.sample_rate = float(sample_rate)
        self.start_sample = int(start_sample)
        self.samples = 0
        self._sum_i = 0.0
        self._sum_p = 0.0
        self._min_i = self._min_p = math.inf
        self._max_i = self._max_p = -math.inf
        self._lost = 0
        self._exact = True

    def add(self, current: np.ndarray, voltage: np.ndarray) -> None:
        """The next block of the span (current [A], voltage [V], same length)."""
        i = np.asarray(current)
        v = np.asarray(voltage)
        if i.shape != v.shape or i.ndim != 1:
            raise AnalysisError("current and voltage blocks must be 1-D and of equal length")
        if not len(i):
            return
        lost = int(np.count_nonzero(np.isnan(i) | np.isnan(v)))
        self._lost += lost
        p = i.astype(np.float64) * v
        self._sum_i += float(np.sum(i, dtype=np.float64))
        self._sum_p += _dot64(i, v)
        if lost < len(i):
            self._min_i = min(self._min_i, float(np.nanmin(i)))
            self._max_i = max(self._max_i, float(np.nanmax(i)))
            self._min_p = min(self._min_p, float(np.nanmin(p)))
            self._max_p = max(self._max_p, float(np.nanmax(p)))
        self.samples += len(i)

    def add_summary(self, samples: int, current: np.ndarray, voltage_mean: np.ndarray) -> None:
        """Bins of `samples` samples each: current's (mean, min, max) rows and voltage means.

        For spans too long to read raw: charge and current extremes stay exact; power and
        energy take each bin's mean voltage, and the result is marked not exact.
        """
        cur = np.asarray(current, dtype=np.float64).reshape(-1, 3)
        v = np.asarray(voltage_mean, dtype=np.float64).reshape(-1)
        if not len(cur):
            return
        lost = ~(np.isfinite(cur).all(axis=1) & np.isfinite(v))
        self._lost += int(np.count_nonzero(lost)) * samples
        p = cur * v[:, None]
        self._sum_i += float(np.sum(cur[:, 0])) * samples
        self._sum_p += float(np.sum(p[:, 0])) * samples
        if not lost.all():
            self._min_i = min(self._min_i, float(np.nanmin(cur[:, 1])))
            self._max_i = max(self._max_i, float(np.nanmax(cur[:, 2])))
            self._min_p = min(self._min_p, float(np.nanmin(np.minimum(p[:, 1], p[:, 2]))))
            self._max_p = max(self._max_p, float(np.nanmax(np.maximum(p[:, 1], p[:, 2]))))
        self.samples += samples * len(cur)
        self._exact = False

    def result(self) -> SpanStats:
        """The statistics of everything added so far."""
        n, fs = self.samples, self.sample_rate
        if n == 0:
            raise AnalysisError("the span holds no samples",
                                hint="place the two markers at least one sample apart")
        nan = math.nan if self._lost else None

        def pick(value: float) -> float:
            return nan if nan is not None else value

        return SpanStats(
            start_s=self.start_sample / fs,
            end_s=(self.start_sample + n) / fs,
            samples=n,
            duration_s=n / fs,
            current_mean_a=pick(self._sum_i / n),
            current_min_a=pick(self._min_i),
            current_max_a=pick(self._max_i),
            power_mean_w=pick(self._sum_p / n),
            power_min_w=pick(self._min_p),
            power_max_w=pick(self._max_p),
            charge_c=pick(self._sum_i / fs),
            energy_j=pick(self._sum_p / fs),
            lost_samples=self._lost,
            exact=self._exact,
        )


def span_statistics(current: np.ndarray, voltage: np.ndarray, sample_rate: float,
                    start: int, stop: int) -> SpanStats:
    """Statistics of samples [start, stop) of whole-trace arrays."""
    n = len(current)
    if len(voltage) != n:
        raise AnalysisError(f"current has {n} samples but voltage has {len(voltage)}")
    if not 0 <= start < stop <= n:
        raise AnalysisError(f"span [{start}, {stop}) is not a non-empty range inside the "
                            f"{n}-sample trace")
    acc = SpanAccumulator(sample_rate, start)
    acc.add(current[start:stop], voltage[start:stop])
    return acc.result()


def span_samples(start_s: float, end_s: float, sample_rate: float, length: int) -> tuple[int, int]:
    """The sample range [start, stop) a span in seconds covers, clipped to the trace.

    A sample k stands for [k/fs, (k+1)/fs): the span takes every sample whose start lies in
    [start_s, end_s).
    """
    if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s <= start_s:
        raise AnalysisError(f"bad span {start_s:g}:{end_s:g} s: START must be before END",
                            hint="give START:END in seconds, e.g. --span 0.5:1.5")
    start = max(0, math.ceil(start_s * sample_rate - 1e-9))
    stop = min(length, math.ceil(end_s * sample_rate - 1e-9))
    if stop <= start:
        raise AnalysisError(f"span {start_s:g}:{end_s:g} s holds no sample of the "
                            f"{length / sample_rate:g} s trace")
    return start, stop
