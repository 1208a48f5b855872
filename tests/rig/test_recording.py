"""The live pipeline (`EmonRecorder`): edges, running energy at edges, gaps, JLS output, memory."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.errors import DeviceTimeout
from rig.errors import AnalysisError
from rig.run.recording import EmonRecorder
from rig.traces.analysis import analyze, falling_edges, span_power
from rig.traces.files import read_trace

FS = 100_000.0
V = 1.8
#: Sine period in samples: every window below spans whole periods, so its mean is closed-form.
PERIOD = 50


def closed_form_stream(
    n_pre: int, windows: list[tuple[int, int]], level_a: list[float], tail: int = 1000
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[float]]:
    """A loud preamble (1 A, so that the running energy is large when the windows come), then
    windows [start, start + length) at `level_a` plus a sine of whole periods, separated by idle.

    Returns current, voltage, gpio and each window's exact mean power.
    """
    n = windows[-1][0] + windows[-1][1] + tail
    k = np.arange(n)
    current = np.full(n, 0.5e-3)  # idle between windows
    current[:n_pre] = 1.0
    gpio = np.ones(n, dtype=np.uint8)
    truth = []
    for (start, length), level in zip(windows, level_a, strict=True):
        assert length % PERIOD == 0 and start >= n_pre
        span = slice(start, start + length)
        current[span] = level + 0.2 * level * np.sin(2 * np.pi * (k[span] - start) / PERIOD)
        gpio[start : start + 3] = 0  # a 3-sample pulse: its falling edge is the window start
        gpio[start + length : start + length + 2] = 0
        truth.append(level * V)
    return current, np.full(n, V), gpio, truth


def feed(rec: EmonRecorder, current, voltage, gpio, sizes: list[int], first: int = 0) -> None:
    """Feed the arrays in chunks of the given sizes (cycled)."""
    lo, j = 0, 0
    while lo < len(current):
        m = sizes[j % len(sizes)]
        j += 1
        hi = min(lo + m, len(current))
        rec.on_chunk(Chunk(first + lo, current[lo:hi], voltage[lo:hi], gpio[lo:hi]))
        lo = hi


WINDOWS = [(400_000, 20_000), (430_000, 5_000), (460_000, 100_000)]
LEVELS = [3.6e-3, 1.2e-3, 2.5e-3]


@pytest.mark.parametrize("sizes", [[1000], [997, 1, 4096, 3], [65_536]])
def test_window_power_matches_closed_form_and_old_dot(sizes: list[int]) -> None:
    current, voltage, gpio, truth = closed_form_stream(400_000, WINDOWS, LEVELS)
    rec = EmonRecorder(FS)
    feed(rec, current, voltage, gpio, sizes)
    edges = rec.edges()
    assert edges == falling_edges(gpio).tolist()
    assert edges == [e for s, n in WINDOWS for e in (s, s + n)]
    assert rec.samples == rec.received == len(current) and rec.dropped == 0
    for w, (start, end) in enumerate(zip(edges[::2], edges[1::2], strict=True)):
        got = rec.mean_power(start, end)
        old = span_power(current, voltage, start, end)  # the previous implementation: np.dot
        assert got == pytest.approx(old, rel=1e-9, abs=0)
        assert got == pytest.approx(truth[w], rel=1e-9, abs=0)
        assert old == pytest.approx(truth[w], rel=1e-9, abs=0)
    # An idle span between two windows (end edge of one to start edge of the next).
    assert rec.mean_power(edges[1], edges[2]) == pytest.approx(0.5e-3 * V, rel=1e-9)
    # And across several windows: the same as one dot product over it all.
    assert rec.mean_power(edges[0], edges[-1]) == pytest.approx(
        span_power(current, voltage, edges[0], edges[-1]), rel=1e-9
    )
    assert rec.energy_j == pytest.approx(float(np.dot(current, voltage)) / FS, rel=1e-12)


def test_edge_on_chunk_boundaries_and_level_carried_across_chunks() -> None:
    gpio = np.array([1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0, 0, 1], dtype=np.uint8)
    gpio = gpio | 0b110  # other bits must not matter
    n = len(gpio)
    current = np.arange(1, n + 1, dtype=np.float64)
    rec = EmonRecorder(1000.0)
    # Cuts right before (2), inside (3) and right after a falling edge (5, 9, 10).
    for lo, hi in [(0, 2), (2, 3), (3, 5), (5, 9), (9, 10), (10, n)]:
        rec.on_chunk(Chunk(lo, current[lo:hi], np.ones(hi - lo), gpio[lo:hi]))
    assert rec.edges() == [2, 5, 9]
    assert rec.edges(1) == [5, 9]
    # Exact: sum of k+1 for k in [2, 5) is 3+4+5, over 3 samples.
    assert rec.mean_power(2, 5) == 4.0
    assert rec.mean_power(5, 9) == (6 + 7 + 8 + 9) / 4


def test_a_low_line_at_the_start_is_an_edge_at_sample_zero() -> None:
    rec = EmonRecorder(1000.0)
    rec.on_chunk(Chunk(0, np.ones(4), np.ones(4), np.array([0, 0, 1, 0], dtype=np.uint8)))
    assert rec.edges() == [0, 3]
    assert rec.mean_power(0, 3) == 1.0


def test_gap_makes_only_the_windows_over_it_nan() -> None:
    current, voltage, gpio, truth = closed_form_stream(10_000, WINDOWS, LEVELS)
    rec = EmonRecorder(FS)
    lost = (432_000, 432_700)  # inside the second window [430_000, 435_000)
    feed(rec, current[: lost[0]], voltage[: lost[0]], gpio[: lost[0]], [1000])
    feed(rec, current[lost[1] :], voltage[lost[1] :], gpio[lost[1] :], [1000], first=lost[1])
    assert rec.gaps == [lost]
    assert rec.dropped == 700
    assert rec.samples == len(current) and rec.received == len(current) - 700
    e = rec.edges()
    assert e == [e for s, n in WINDOWS for e in (s, s + n)]
    assert math.isnan(rec.mean_power(e[2], e[3]))
    assert math.isnan(rec.mean_power(e[0], e[5]))  # any span over the gap
    assert rec.mean_power(e[0], e[1]) == pytest.approx(truth[0], rel=1e-9)
    assert rec.mean_power(e[4], e[5]) == pytest.approx(truth[2], rel=1e-9)
    assert rec.gaps_in(e[2], e[3]) == [lost]
    assert rec.gaps_in(e[4], e[5]) == []


def test_a_window_starting_right_after_a_gap_fails_too() -> None:
    """Its start edge shows on the first sample after the gap, but the line may have fallen
    anywhere inside it: that window is as unknown as one over the gap."""
    gpio = np.ones(40, dtype=np.uint8)
    gpio[[5, 20, 30, 35]] = 0
    ones = np.ones(40)
    rec = EmonRecorder(1000.0)
    rec.on_chunk(Chunk(0, ones[:10], ones[:10], gpio[:10]))
    rec.on_chunk(Chunk(20, ones[20:], ones[20:], gpio[20:]))  # samples 10..19 lost
    assert rec.edges() == [5, 20, 30, 35]
    assert math.isnan(rec.mean_power(5, 20))
    assert math.isnan(rec.mean_power(20, 30))
    assert rec.gaps_in(20, 30) == [(10, 20)]
    assert rec.mean_power(30, 35) == 1.0


def test_non_finite_sample_fails_its_window_only() -> None:
    current, voltage, gpio, truth = closed_form_stream(10_000, WINDOWS, LEVELS)
    current[WINDOWS[0][0] + 7] = np.nan
    rec = EmonRecorder(FS)
    feed(rec, current, voltage, gpio, [4096])
    e = rec.edges()
    assert math.isnan(rec.mean_power(e[0], e[1]))
    assert rec.mean_power(e[2], e[3]) == pytest.approx(truth[1], rel=1e-9)
    assert rec.mean_power(e[4], e[5]) == pytest.approx(truth[2], rel=1e-9)
    assert math.isfinite(rec.energy_j)


def test_overlapping_chunk_keeps_what_was_there() -> None:
    rec = EmonRecorder(1000.0)
    gpio = np.array([1, 0, 1, 1], dtype=np.uint8)
    rec.on_chunk(Chunk(0, np.full(4, 2.0), np.ones(4), gpio))
    # Samples 2..5 again, then 6, 7: the repeated ones (as 9.0) must be ignored.
    rec.on_chunk(Chunk(2, np.array([9.0, 9.0, 3.0, 3.0]), np.ones(4),
                       np.array([1, 1, 0, 1], dtype=np.uint8)))
    assert rec.samples == 6 and rec.received == 6
    assert rec.gaps == [(4, 2)] and rec.dropped == 0
    assert rec.edges() == [1, 4]
    assert rec.mean_power(1, 4) == 2.0


def test_mean_power_needs_edge_indices() -> None:
    rec = EmonRecorder(1000.0)
    rec.on_chunk(Chunk(0, np.ones(10), np.ones(10), np.array([1, 0] * 5, dtype=np.uint8)))
    with pytest.raises(AnalysisError, match="sample 2 is not a timestamp edge"):
        rec.mean_power(2, 5)
    with pytest.raises(AnalysisError, match="not a non-empty range"):
        rec.mean_power(5, 5)


def test_waits_time_out_with_counts_and_surface_callback_errors() -> None:
    rec = EmonRecorder(1000.0)
    rec.on_chunk(Chunk(0, np.ones(5), np.ones(5), np.ones(5, dtype=np.uint8)))
    with pytest.raises(DeviceTimeout, match="for 1 timestamp edges, have 5 samples and 0 edges"):
        rec.wait_for_edges(1, timeout_s=0.0)
    rec.wait_for_samples(5, timeout_s=0.0)  # already there: no wait
    rec.on_chunk(Chunk(5, np.ones(2), np.ones(2), np.ones(2, dtype=np.float64)))  # bad gpio type
    with pytest.raises(TypeError):
        rec.wait_for_samples(100, timeout_s=5.0)


def test_stop_after_keeps_exactly_that_many_samples(tmp_path: Path) -> None:
    path = tmp_path / "t.jls"
    rec = EmonRecorder(1000.0, path, stop_after=2500)
    current = np.linspace(0, 1, 4000)
    gpio = np.ones(4000, dtype=np.uint8)
    gpio[[100, 2400, 2600]] = 0
    feed(rec, current, np.full(4000, 2.0), gpio, [1000])
    rec.wait_for_samples(2500, timeout_s=0.0)
    assert rec.samples == 2500 and rec.edges() == [100, 2400]
    rec.close()
    trace = read_trace(path)
    assert len(trace) == 2500
    np.testing.assert_array_equal(trace.current, current[:2500].astype(np.float32))


def test_trace_file_holds_the_stream_and_annotations(tmp_path: Path) -> None:
    current, voltage, gpio, _ = closed_form_stream(1000, WINDOWS[:2], LEVELS[:2], tail=500)
    path = tmp_path / "t.jls"
    rec = EmonRecorder(FS, path, simulated=True)
    # A gap: samples [2000, 2100) never arrive.
    feed(rec, current[:2000], voltage[:2000], gpio[:2000], [700])
    feed(rec, current[2100:], voltage[2100:], gpio[2100:], [700], first=2100)
    e = rec.edges()
    rec.annotate(e[0], "run 1 start")
    rec.close()
    rec.close()  # twice is fine
    rec.annotate(e[1], "after close: ignored")
    trace = read_trace(path)
    assert trace.simulated and len(trace) == len(current)
    np.testing.assert_array_equal(trace.gpio[:2000], gpio[:2000])
    assert np.isnan(trace.current[2000:2100]).all()
    np.testing.assert_array_equal(trace.current[2100:], current[2100:].astype(np.float32))
    assert (e[0], "run 1 start") in trace.meta["annotations"]
    result = analyze(trace.current, trace.voltage, trace.gpio, trace.sample_rate)
    for w, window in enumerate(result.windows):
        assert window.start_sample == e[2 * w] and window.end_sample == e[2 * w + 1]
        # The file stores float32: the same power to float32 precision.
        assert window.mean_power_w == pytest.approx(rec.mean_power(*e[2 * w : 2 * w + 2]), 1e-6)


def test_memory_does_not_grow_with_samples() -> None:
    """No per-sample array survives a chunk: what is kept grows with edges only."""
    rec = EmonRecorder(FS)
    chunk = 8192
    current = np.full(chunk, 1e-3)
    voltage = np.full(chunk, V)
    gpio = np.ones(chunk, dtype=np.uint8)
    gpio[100:110] = 0  # one edge per chunk

    def kept_bytes() -> int:
        return sum(v.nbytes for v in vars(rec).values() if isinstance(v, np.ndarray))

    for k in range(200):
        rec.on_chunk(Chunk(k * chunk, current, voltage, gpio))
    after_200 = kept_bytes()
    for k in range(200, 1000):
        rec.on_chunk(Chunk(k * chunk, current, voltage, gpio))
    assert rec.samples == 1000 * chunk and rec.edge_count == 1000
    # Edge storage (3 x 8 bytes per edge, doubling) and one chunk of scratch, nothing more.
    assert kept_bytes() <= chunk * 8 + 3 * 8 * 2048
    assert after_200 <= chunk * 8 + 3 * 8 * 1024
    assert rec.mean_power(rec.edges()[0], rec.edges()[-1]) == pytest.approx(1e-3 * V, rel=1e-12)


def test_window_late_in_a_long_loud_run_keeps_full_precision() -> None:
    """20 M samples of ~1 A before a 0.1 mA window: the cumulative energy is ~10^8 times the
    window's, so an uncompensated running sum would lose the window's digits."""
    rng = np.random.default_rng(7)
    chunk = 10_000
    loud = rng.uniform(0.5, 1.5, chunk)
    volts = np.full(chunk, V)
    high = np.ones(chunk, dtype=np.uint8)
    rec = EmonRecorder(FS)
    for k in range(2000):
        rec.on_chunk(Chunk(k * chunk, loud, volts, high))
    start = rec.samples
    current, voltage, gpio, truth = closed_form_stream(0, [(0, 500)], [1e-4], tail=100)
    feed(rec, current, voltage, gpio, [97], first=start)
    e = rec.edges()
    assert e == [start, start + 500]
    assert rec.mean_power(*e) == pytest.approx(truth[0], rel=1e-9, abs=0)
    assert rec.mean_power(*e) == pytest.approx(span_power(current, voltage, 0, 500), rel=1e-9)


def test_a_monitor_fault_ends_a_wait_at_once_not_by_timeout() -> None:
    """A monitor that cut the DUT off on its own thread (Joulescope over-voltage) is heard."""
    from drivers.errors import VoltageLimitError

    faults: list[BaseException] = []
    rec = EmonRecorder(1000.0, fault=lambda: faults[0] if faults else None)
    faults.append(VoltageLimitError("Joulescope: measured 3.9 V is above the limit of 3.3 V"))
    # Without the hook this wait would end in DeviceTimeout after 2 s; the type tells them apart.
    with pytest.raises(VoltageLimitError, match=r"3\.9 V"):
        rec.wait_for_samples(10, timeout_s=2.0)


# -- the idle span's sub-spans (checkpoints of the running energy) ----------------------------
def stepped_span(levels: list[float], part: int, before: int = 3_000, after: int = 2_000
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """A span framed by two falling edges whose consecutive `part`-sample stretches sit at
    `levels` [A] (a loud 1 A before it, so the running sum is large), and its edges."""
    n = before + part * len(levels) + after
    current = np.full(n, 1.0)
    start, stop = before, before + part * len(levels)
    for j, level in enumerate(levels):
        current[start + j * part : start + (j + 1) * part] = level
    current[stop:] = 0.5
    gpio = np.ones(n, dtype=np.uint8)
    gpio[start : start + 3] = 0
    gpio[stop : stop + 3] = 0
    return current, np.full(n, V), gpio, start, stop


@pytest.mark.parametrize("sizes", [[1000], [997, 1, 4096, 3], [65_536]])
def test_checkpoints_split_a_span_into_its_exact_sub_span_powers(sizes: list[int]) -> None:
    levels = [1e-3 * (1 + j) for j in range(10)]  # 1 .. 10 mA, 2_000 samples each
    current, voltage, gpio, start, stop = stepped_span(levels, 2_000)
    rec = EmonRecorder(FS)
    rec.keep_checkpoints(100)  # turned on before the span's first edge, as the procedure does
    feed(rec, current, voltage, gpio, sizes)
    assert rec.edges() == [start, stop]
    bounds, powers = rec.span_powers(start, stop, 10)
    # 3_000 and 2_000 are multiples of 100: the equal split falls on checkpoints exactly.
    assert bounds == [start + 2_000 * j for j in range(11)]
    assert powers == pytest.approx([lv * V for lv in levels], rel=1e-12)
    assert rec.mean_power(start, stop) == pytest.approx(np.mean(levels) * V, rel=1e-12)


def test_sub_spans_are_near_equal_when_the_split_misses_checkpoints() -> None:
    current, voltage, gpio, start, stop = stepped_span([2e-3] * 7, 1_001, before=3_017)
    rec = EmonRecorder(FS)
    rec.keep_checkpoints(64)
    feed(rec, current, voltage, gpio, [777])
    bounds, powers = rec.span_powers(start, stop, 10)
    counts = np.diff(bounds)
    assert bounds[0] == start and bounds[-1] == stop and len(bounds) == 11
    assert np.all(np.abs(counts - (stop - start) / 10) <= 64), counts
    assert all(b % 64 == 0 for b in bounds[1:-1])  # interior boundaries are checkpoints
    assert powers == pytest.approx([2e-3 * V] * 10, rel=1e-12)


def test_a_sub_span_over_lost_samples_is_nan_and_stopping_forgets_the_checkpoints() -> None:
    current, voltage, gpio, start, stop = stepped_span([1e-3] * 10, 1_000)
    rec = EmonRecorder(FS)
    rec.keep_checkpoints(50)
    lost = (start + 4_200, start + 4_300)  # inside the fifth sub-span [4_000, 5_000)
    feed(rec, current[: lost[0]], voltage[: lost[0]], gpio[: lost[0]], [333])
    feed(rec, current[lost[1]:], voltage[lost[1]:], gpio[lost[1]:], [333], first=lost[1])
    bounds, powers = rec.span_powers(start, stop, 10)
    assert bounds == [start + 1_000 * j for j in range(11)]
    assert [math.isnan(p) for p in powers] == [j == 4 for j in range(10)]
    assert powers[5] == pytest.approx(1e-3 * V, rel=1e-12)
    rec.keep_checkpoints(None)
    assert rec.span_powers(start, stop, 10) == ([], [])  # nothing kept: no sub-spans
    with pytest.raises(ValueError, match="checkpoint interval"):
        rec.keep_checkpoints(0)


def test_no_checkpoints_are_kept_unless_asked() -> None:
    current, voltage, gpio, start, stop = stepped_span([1e-3] * 10, 1_000)
    rec = EmonRecorder(FS)
    feed(rec, current, voltage, gpio, [1000])
    assert rec.span_powers(start, stop, 10) == ([], [])
    assert rec.mean_power(start, stop) == pytest.approx(1e-3 * V, rel=1e-12)
