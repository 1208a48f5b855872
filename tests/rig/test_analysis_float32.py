"""Window integration of float32 samples (instruments, JLS traces): float64 accuracy against
closed forms, on spans long enough to go through many blocks and the helper threads."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from rig.errors import AnalysisError
from rig.traces.analysis import SpanAccumulator, analyze, span_power, window_energies
from rig.traces.analysis import dot as dot_mod
from rig.traces.analysis.dot import BLOCK, dot64

FS = 1_000_000.0
#: Long enough for several blocks, the helper threads and a partial last block and row.
N = 5 * BLOCK + 4096 * 3 + 77


def piecewise(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """float32 current and voltage constant on random segments; the segment bounds."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, n), 40, replace=False))
    bounds = list(zip([0, *cuts.tolist()], [*cuts.tolist(), n], strict=True))
    current = np.empty(n, np.float32)
    voltage = np.empty(n, np.float32)
    for a, b in bounds:
        current[a:b] = rng.uniform(1e-4, 5e-3)
        voltage[a:b] = rng.uniform(1.7, 3.4)
    return current, voltage, bounds


def exact_energy(current: np.ndarray, voltage: np.ndarray, bounds, lo: int, hi: int) -> float:
    """Closed form: sum over segments of count * i * v, in exact rational arithmetic."""
    total = Fraction(0)
    for a, b in bounds:
        a, b = max(a, lo), min(b, hi)
        if a < b:
            total += (b - a) * Fraction(float(current[a])) * Fraction(float(voltage[a]))
    return float(total / Fraction(FS))


def fsum_dot(a: np.ndarray, b: np.ndarray) -> float:
    """The correctly rounded sum of the (exact) float64 products."""
    return math.fsum((a.astype(np.float64) * b.astype(np.float64)).tolist())


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


def test_long_float32_windows_match_closed_form_to_float64_precision() -> None:
    current, voltage, bounds = piecewise(N, 1)
    windows = np.array([[0, N], [3, N - 5], [BLOCK - 1, 3 * BLOCK + 2], [10, 4000]])
    got = window_energies(current, voltage, windows, FS)
    for (lo, hi), e in zip(windows, got, strict=True):
        assert rel(e, exact_energy(current, voltage, bounds, lo, hi)) < 1e-12
    # A float32 accumulation (what np.dot does on these arrays) is far off that mark.
    assert rel(float(np.dot(current, voltage)) / FS,
               exact_energy(current, voltage, bounds, 0, N)) > 1e-10


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_noisy_float32_is_the_correctly_rounded_sum_whatever_the_threads(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(2)
    current = rng.uniform(0, 1e-2, N).astype(np.float32)
    voltage = rng.uniform(1.7, 1.9, N).astype(np.float32)
    monkeypatch.setattr(dot_mod, "_THREADS", threads)
    got = dot64(current, voltage)
    exact = fsum_dot(current, voltage)
    assert rel(got, exact) < 1e-13
    # Row sums are pairwise and block sums exact: the threads cannot change a bit.
    monkeypatch.setattr(dot_mod, "_THREADS", 1)
    assert dot64(current, voltage) == got


@pytest.mark.parametrize(
    ("cur_dtype", "volt_dtype"),
    [(">f4", ">f4"), ("<f4", "<f8"), ("<f8", "<f4"), (">f8", ">f8"), ("<f2", "<f4")],
)
def test_other_dtypes_and_byte_orders_go_the_same_way(cur_dtype: str, volt_dtype: str) -> None:
    rng = np.random.default_rng(3)
    n = 2 * BLOCK + 999
    current = rng.uniform(0, 1e-2, n).astype(cur_dtype)
    voltage = rng.uniform(1.7, 1.9, n).astype(volt_dtype)
    assert rel(dot64(current, voltage), fsum_dot(current, voltage)) < 1e-13


def test_strided_float32_views() -> None:
    rng = np.random.default_rng(4)
    both = rng.uniform(0, 1e-2, (2 * BLOCK + 5, 2)).astype(np.float32)
    current, voltage = both[:, 0], both[:, 1]  # interleaved, as a raw two-channel record
    assert rel(dot64(current, voltage), fsum_dot(current, voltage)) < 1e-13


def test_short_spans_and_empty() -> None:
    current = np.array([1e-3, 2e-3, 3e-3], np.float32)
    voltage = np.array([1.8, 1.8, 3.3], np.float32)
    assert dot64(current[:0], voltage[:0]) == 0.0
    assert dot64(current, voltage) == fsum_dot(current, voltage)


def test_span_power_and_span_statistics_use_the_float64_path() -> None:
    current, voltage, bounds = piecewise(N, 5)
    lo, hi = 1234, N - 4321
    mean = exact_energy(current, voltage, bounds, lo, hi) * FS / (hi - lo)
    assert rel(span_power(current, voltage, lo, hi), mean) < 1e-12
    acc = SpanAccumulator(FS, lo)
    for a in range(lo, hi, 3 * BLOCK):  # blocks as the viewer reads them
        b = min(a + 3 * BLOCK, hi)
        acc.add(current[a:b], voltage[a:b])
    assert rel(acc.result().energy_j, mean * (hi - lo) / FS) < 1e-12


@pytest.mark.parametrize("where", [0, BLOCK + 17, N - 4])
def test_a_lost_sample_makes_only_its_window_nan(where: int) -> None:
    current, voltage, _ = piecewise(N, 6)
    current[where] = np.nan
    other = [0, 10] if where else [N - 10, N]
    got = window_energies(current, voltage, np.array([[0, N], other]), FS)
    assert math.isnan(got[0]) and math.isfinite(got[1])
    gpio = np.ones(N, np.uint8)
    gpio[:3] = 0
    gpio[N - 3 :] = 0
    with pytest.raises(AnalysisError, match=r"window 1 .* missing"):
        analyze(current, voltage, gpio, FS)


def test_infinities_give_inf_or_nan_not_an_error() -> None:
    current, voltage, _ = piecewise(N, 7)
    current[5] = np.inf
    assert dot64(current, voltage) == math.inf
    current[3 * BLOCK] = -np.inf  # +inf and -inf in different blocks: NaN, as np.dot gives
    assert math.isnan(dot64(current, voltage))


@pytest.mark.parametrize("threads", [1, 2])
def test_many_windows_in_one_call_each_get_their_own_exact_sum(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows of every size, one call: the blocks of all windows share one queue."""
    rng = np.random.default_rng(8)
    current = rng.uniform(0, 1e-2, N).astype(np.float32)
    voltage = rng.uniform(1.7, 1.9, N).astype(np.float32)
    monkeypatch.setattr(dot_mod, "_THREADS", threads)
    edges = np.sort(rng.choice(np.arange(1, N), 61, replace=False))
    windows = np.concatenate([[[0, 1]], np.stack([edges[:-1], edges[1:]], axis=1), [[0, N]]])
    got = window_energies(current, voltage, windows, FS)
    for (lo, hi), e in zip(windows, got, strict=True):
        assert rel(e, fsum_dot(current[lo:hi], voltage[lo:hi]) / FS) < 1e-13
    assert window_energies(current, voltage, np.empty((0, 2), np.int64), FS).shape == (0,)
