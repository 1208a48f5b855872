"""The re-derivation's one pass over a trace (`span_figures`) against the figures taken one by
one (float64 dots, a per-sample bincount of each range), and the helpers it rests on: sparse
change finding, run sums, the float32 trace read, a helper thread that stalls."""

from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from rig.errors import AnalysisError
from rig.traces.analysis import dot as dot_mod
from rig.traces.analysis.dot import BLOCK, span_dots, span_sums
from rig.traces.analysis.edges import change_points, falling_edges, flatnonzero_sparse
from rig.traces.analysis.energy import (
    span_figures,
    span_range_occupancies,
    span_range_occupancy,
)
from rig.traces.files import RANGE_NOT_TOLD, TraceWriter, read_trace

NAMES = ("R0", "R1", "R2", "R3", "R4")


def by_sample(current: np.ndarray, ranges: np.ndarray, start: int, stop: int
              ) -> dict[str, dict[str, float]]:
    """The occupancy the plain way: every sample's range counted, its current added in
    float64 (lost samples add nothing), as the live recorder does."""
    index = ranges[start:stop].astype(np.intp)
    if int(index.max()) >= len(NAMES):
        return {}
    amps = current[start:stop].astype(np.float64)
    amps[~np.isfinite(amps)] = 0.0
    counts = np.bincount(index, minlength=len(NAMES))
    sums = np.bincount(index, weights=amps, minlength=len(NAMES))
    return {n: {"samples": int(c), "mean_current_a": float(s) / int(c)}
            for n, c, s in zip(NAMES, counts, sums, strict=True) if c}


def ranged_trace(n: int, mean_run: int, seed: int, dtype: type = np.float32
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Current and runs of one range each, `mean_run` samples long on average."""
    rng = np.random.default_rng(seed)
    cuts = np.sort(rng.choice(np.arange(1, n), max(1, n // mean_run), replace=False))
    values = rng.integers(0, len(NAMES), len(cuts) + 1).astype(np.uint8)
    ranges = np.repeat(values, np.diff(np.concatenate(([0], cuts, [n]))))
    current: np.ndarray = (rng.random(n) * 1e-3 + 1e-5).astype(dtype)
    return current, ranges


def same_shares(got: dict[str, dict[str, float]], want: dict[str, dict[str, float]]) -> None:
    assert got.keys() == want.keys()
    for name, share in got.items():
        assert share["samples"] == want[name]["samples"]
        assert share["mean_current_a"] == pytest.approx(want[name]["mean_current_a"],
                                                        rel=1e-12)


@pytest.mark.parametrize("mean_run", [3, 700, 40_000, 2_000_000])
@pytest.mark.parametrize("set_voltage", [True, False])
def test_one_pass_equals_each_figure_taken_alone(mean_run: int, set_voltage: bool) -> None:
    n = 3 * BLOCK + 12_345
    current, ranges = ranged_trace(n, mean_run, seed=mean_run)
    voltage = (np.broadcast_to(np.float64(3.3), (n,)) if set_voltage
               else np.random.default_rng(1).uniform(1.7, 3.4, n).astype(np.float32))
    windows = [(1000, BLOCK + 5), (BLOCK + 5, 2 * BLOCK + 999), (2 * BLOCK + 1500, n - 7)]
    idle = (n - 7 - 60_000, n - 7)  # overlaps the last window: spans may overlap or nest
    subs = list(zip(np.linspace(*idle, 11, dtype=int)[:-1],
                    np.linspace(*idle, 11, dtype=int)[1:], strict=True))
    spans = np.array([*windows, idle, *subs])
    got = span_figures(current, voltage, spans, ranges, NAMES, whole=True)
    want = span_dots(current, voltage, spans)
    assert np.allclose(got.dots, want, rtol=1e-13, atol=0)
    # Runs too short to take one by one: the figures one by one, and no word on lost samples.
    assert got.finite is (True if mean_run > 10_000 else None)
    assert got.shares is not None and len(got.shares) == len(spans)
    for (a, b), share in zip(spans.tolist(), got.shares, strict=True):
        same_shares(share, by_sample(current, ranges, a, b))
    # span_range_occupancies alone (the fallback where runs are short) says the same.
    for (a, b), share in zip(spans.tolist(), span_range_occupancies(current, ranges, NAMES,
                                                                   spans), strict=True):
        same_shares(share, by_sample(current, ranges, a, b))


def test_lost_samples_unknown_ranges_and_no_ranges() -> None:
    n = 2 * BLOCK
    current, ranges = ranged_trace(n, 50_000, seed=3)
    voltage = np.broadcast_to(np.float64(1.8), (n,))
    current[[10, BLOCK + 3]] = np.nan  # lost: their window's energy NaN, counted, no current
    ranges[n - 100] = RANGE_NOT_TOLD
    spans = np.array([[0, 1000], [5000, BLOCK + 100], [BLOCK + 200, n]])
    got = span_figures(current, voltage, spans, ranges, NAMES, whole=True)
    assert math.isnan(got.dots[0]) and math.isnan(got.dots[1]) and math.isfinite(got.dots[2])
    assert got.finite is False
    assert got.shares is not None
    same_shares(got.shares[0], by_sample(current, ranges, 0, 1000))
    same_shares(got.shares[1], by_sample(current, ranges, 5000, BLOCK + 100))
    assert got.shares[2] == {}  # a sample whose range is not known
    plain = span_figures(current, voltage, spans)
    assert plain.shares is None and plain.finite is None
    assert np.array_equal(np.isnan(plain.dots), np.isnan(got.dots))
    # A trace without a lost sample outside the spans still says so: whole looks everywhere.
    current[[10, BLOCK + 3]] = 1e-3
    current[1500] = np.inf  # between two spans
    assert span_figures(current, voltage, spans, whole=True).finite is False


def test_spans_outside_the_trace_are_refused() -> None:
    current, ranges = ranged_trace(1000, 100, seed=4)
    voltage = np.ones(1000)
    for bad in ([[-1, 10]], [[5, 5]], [[900, 1001]]):
        with pytest.raises(AnalysisError, match="not a non-empty range"):
            span_figures(current, voltage, np.array(bad), ranges, NAMES)
    with pytest.raises(AnalysisError, match="range signal"):
        span_figures(current, voltage, np.array([[0, 1000]]), ranges[:500], NAMES)


def test_single_span_occupancy_is_the_recorders() -> None:
    current, ranges = ranged_trace(50_000, 400, seed=5, dtype=np.float64)
    current[123] = np.nan
    for a, b in [(0, 50_000), (100, 200), (7, 8), (49_000, 50_000)]:
        same_shares(span_range_occupancy(current, ranges, NAMES, a, b),
                    by_sample(current, ranges, a, b))


def test_span_sums_are_float64_sums_of_float32_samples() -> None:
    rng = np.random.default_rng(6)
    a = rng.random(3 * BLOCK + 5).astype(np.float32)
    spans = np.array([[0, len(a)], [3, 4], [BLOCK - 2, 2 * BLOCK + 7]])
    want = [math.fsum(a[s:e].astype(np.float64).tolist()) for s, e in spans.tolist()]
    assert np.allclose(span_sums(a, spans), want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("density", [0.0, 1e-6, 1e-3, 0.3, 1.0])
@pytest.mark.parametrize("n", [0, 1, 7, 4095, 4096, 4097, 300_001])
def test_sparse_nonzero_and_change_points(density: float, n: int) -> None:
    rng = np.random.default_rng(n)
    mask = rng.random(n) < density
    assert np.array_equal(flatnonzero_sparse(mask), np.flatnonzero(mask))
    assert np.array_equal(flatnonzero_sparse(mask[1::3]), np.flatnonzero(mask[1::3]))
    values = (rng.integers(0, 3, n) * (rng.random(n) < density)).astype(np.uint8)
    assert np.array_equal(change_points(values), np.flatnonzero(np.diff(values)) + 1)


def test_change_points_of_a_long_byte_line_block_by_block() -> None:
    """The word-wise search (`_byte_changes`): blocks of one value each, changes on block
    boundaries, a block whose words are alike but whose bytes are not, a change in the tail,
    and the same from an odd (unaligned) start."""
    block = 4096
    v = np.repeat(np.arange(40, dtype=np.uint8) % 3, block)  # a change at each boundary
    v[5 * block: 6 * block] = np.tile(np.array([1, 2], dtype=np.uint8), block // 2)
    v[9 * block + 17] = 9
    v = np.concatenate((v, np.array([0, 0, 4, 4, 0], dtype=np.uint8)))  # the tail
    for values in (v, v[1:], v[3:-1], v[: 8 * block]):
        want = np.flatnonzero(values[1:] != values[:-1]) + 1
        assert np.array_equal(change_points(values), want)
    assert np.array_equal(falling_edges(v, bit=1, initial_level=0), np.flatnonzero(
        ((v[:-1] >> 1) & 1) > ((v[1:] >> 1) & 1)) + 1)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int64])
def test_falling_edges_as_bit_by_bit(dtype: type) -> None:
    rng = np.random.default_rng(7)
    gpio: np.ndarray = rng.integers(0, 8, 5000).astype(dtype)
    if np.issubdtype(dtype, np.signedinteger):
        gpio[::7] = -3  # every bit of it high
    for bit in (0, 1, 2, 8 * np.dtype(dtype).itemsize - 1):
        for initial in (0, 1):
            high = ((gpio >> bit) & 1).astype(bool)
            want = np.flatnonzero(high[:-1] & ~high[1:]) + 1
            if initial and not high[0]:
                want = np.concatenate(([0], want))
            assert falling_edges(gpio, bit=bit, initial_level=initial).tolist() == want.tolist()


def test_a_float32_read_holds_the_float64_reads_values(tmp_path: Path) -> None:
    path = tmp_path / "t.jls"
    n = 20_001  # odd: the 4-bit range signal ends on a pad value
    current, ranges = ranged_trace(n, 300, seed=8)
    with TraceWriter(path, 1000.0) as w:
        w.append(0, current, np.full(n, 1.8), (np.arange(n) % 97 > 3).astype(np.uint8),
                 current_range=ranges, range_names=NAMES)
    wide, stored = read_trace(path), read_trace(path, dtype=np.float32)
    assert stored.current.dtype == np.float32 and wide.current.dtype == np.float64
    assert np.array_equal(stored.current.astype(np.float64), wide.current)
    assert np.array_equal(stored.voltage.astype(np.float64), wide.voltage)
    assert np.array_equal(stored.gpio, wide.gpio)
    assert stored.current_range is not None and wide.current_range is not None
    assert stored.current_range.tolist() == wide.current_range.tolist() == ranges.tolist()
    assert stored.meta["samples_by_signal"] == wide.meta["samples_by_signal"]


def test_a_helper_thread_off_its_cpu_is_not_waited_for(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """A helper the host stops halfway through a block: the caller does its blocks again and
    returns the same sums, without waiting for it."""
    monkeypatch.setattr(dot_mod, "_THREADS", 2)
    a = np.random.default_rng(9).random(6 * BLOCK).astype(np.float32)
    b = np.ones(len(a), np.float32)
    spans = np.array([[0, len(a)]])
    want = span_dots(a, b, spans)
    real = dot_mod._block_dot
    release = threading.Event()

    def stalled(x: np.ndarray, y: np.ndarray) -> float:
        if threading.current_thread() is not threading.main_thread():
            release.wait(5)  # a helper descheduled for far longer than the work takes
        return real(x, y)

    monkeypatch.setattr(dot_mod, "_block_dot", stalled)
    t0 = time.perf_counter()
    got = span_dots(a, b, spans)
    took = time.perf_counter() - t0
    release.set()
    assert took < 2.5 and got.tolist() == want.tolist()


def test_a_thread_joining_a_crew_takes_blocks_off_the_helpers_queue(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The thread that waits for a helper's `span_dots` (`Crew.join`) sums blocks too, and the
    sums are the same as one thread's."""
    a = np.random.default_rng(4).random(8 * BLOCK).astype(np.float32)
    b = np.random.default_rng(5).random(len(a)).astype(np.float32)
    spans = np.array([[0, 3 * BLOCK + 7], [3 * BLOCK + 7, len(a)]])
    want = span_dots(a, b, spans)
    joiner = threading.current_thread().name
    real = dot_mod._block_dot
    took = {"main": threading.Event(), "helper": threading.Event()}
    takers: list[str] = []

    def watched(x: np.ndarray, y: np.ndarray) -> float:
        me = threading.current_thread().name
        takers.append(me)
        mine, other = ("main", "helper") if me == joiner else ("helper", "main")
        took[mine].set()
        if takers.count(me) == 1:  # each holds its first block until the other has one
            took[other].wait(5)
        return real(x, y)

    monkeypatch.setattr(dot_mod, "_THREADS", 1)  # no pool helpers: the two threads alone
    monkeypatch.setattr(dot_mod, "_block_dot", watched)
    crew = dot_mod.Crew()
    with ThreadPoolExecutor(1, thread_name_prefix="test-helper") as pool:
        job = pool.submit(span_dots, a, b, spans, crew=crew)
        got = crew.join(job)
    assert got.tolist() == want.tolist()
    assert joiner in takers and any(t.startswith("test-helper") for t in takers)


def test_a_crew_whose_helper_posts_nothing_or_fails_is_not_waited_on_forever() -> None:
    """A job that never gets to its sums (no spans, or an error first): `join` returns its
    result or raises its error."""
    crew = dot_mod.Crew()
    with ThreadPoolExecutor(1) as pool:
        assert crew.join(pool.submit(lambda: "no sums")) == "no sums"
        crew = dot_mod.Crew()

        def fails() -> None:
            raise AnalysisError("spans refused")

        with pytest.raises(AnalysisError, match="spans refused"):
            crew.join(pool.submit(fails))
