"""rig.traces.analysis against closed-form answers: known power levels inside known windows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rig.errors import AnalysisError
from rig.traces.analysis import (
    analyze,
    falling_edges,
    mean_stderr,
    median,
    replicability,
    span_power,
    window_energies,
    windows_from_edges,
)

FS = 1000.0
V = 1.8
P_IDLE = 1.2e-3
P_ACTIVE = 3.6e-3


def bench_trace(
    n: int, windows: list[tuple[int, int]], pulse: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Idle power everywhere, active power inside each [start, end), a low pulse of `pulse`
    samples starting at every window boundary (the DUT's start and end timestamps)."""
    voltage = np.full(n, V)
    current = np.full(n, P_IDLE / V)
    gpio = np.ones(n, dtype=np.uint8)
    for start, end in windows:
        current[start:end] = P_ACTIVE / V
        gpio[start : start + pulse] = 0
        gpio[end : end + pulse] = 0
    return current, voltage, gpio


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# ---- edges ---------------------------------------------------------------------------------


def test_falling_edges_of_wide_pulses_are_the_first_low_samples() -> None:
    gpio = np.array([1, 1, 0, 0, 0, 1, 1, 0, 1, 0, 0], dtype=np.uint8)
    assert falling_edges(gpio).tolist() == [2, 7, 9]
    assert falling_edges(gpio).dtype == np.int64


def test_edge_at_index_zero_depends_on_initial_level() -> None:
    gpio = np.array([0, 0, 1, 0], dtype=np.uint8)
    assert falling_edges(gpio, initial_level=1).tolist() == [0, 3]
    assert falling_edges(gpio, initial_level=0).tolist() == [3]


def test_edge_at_last_sample() -> None:
    gpio = np.array([1, 1, 1, 0], dtype=np.uint8)
    assert falling_edges(gpio).tolist() == [3]


def test_only_the_requested_bit_counts() -> None:
    # bit 0: 1,1,0,0,1 ; bit 1 toggles every sample ; bit 7 always set.
    gpio = np.array(
        [0b1000_0011, 0b1000_0001, 0b1000_0010, 0b1000_0000, 0b1000_0011], dtype=np.uint8
    )
    assert falling_edges(gpio, bit=0).tolist() == [2]
    assert falling_edges(gpio, bit=1).tolist() == [1, 3]
    assert falling_edges(gpio, bit=7).tolist() == []


def test_falling_edges_rejects_bad_input() -> None:
    with pytest.raises(AnalysisError, match="integer"):
        falling_edges(np.array([1.0, 0.0]))
    with pytest.raises(AnalysisError, match="bit 8"):
        falling_edges(np.array([1, 0], dtype=np.uint8), bit=8)
    assert falling_edges(np.array([], dtype=np.uint8)).size == 0


def test_windows_pair_consecutive_edges() -> None:
    w = windows_from_edges(np.array([5, 9, 20, 31]))
    assert w.tolist() == [[5, 9], [20, 31]]
    assert w.shape == (2, 2)


def test_no_edges_says_so_and_points_at_wiring_and_firmware() -> None:
    with pytest.raises(AnalysisError) as info:
        windows_from_edges(np.array([], dtype=np.int64))
    assert info.value.message == "no falling edges on the timestamp line"
    assert "GPIO wiring" in info.value.hint
    assert "energy timestamp mode" in info.value.hint


def test_odd_edges_name_the_count_and_the_unpaired_edge() -> None:
    with pytest.raises(AnalysisError) as info:
        windows_from_edges(np.array([100, 250, 4000]), sample_rate=FS)
    msg = info.value.message
    assert "(3)" in msg
    assert "sample 100 (0.100000 s)" in msg and "sample 4000 (4.000000 s)" in msg
    assert "reset" in info.value.hint and "cut off" in info.value.hint
    with pytest.raises(AnalysisError) as info:
        windows_from_edges(np.array([7]))
    assert info.value.message.endswith(
        "(1): they do not pair into windows; the only edge is at sample 7"
    )


def test_analyze_reports_odd_edges_from_a_trace() -> None:
    current, voltage, gpio = bench_trace(5000, [(1000, 2000)])
    gpio[3000:3002] = 0
    with pytest.raises(AnalysisError, match=r"\(3\).*sample 3000 \(3\.000000 s\)"):
        analyze(current, voltage, gpio, FS)


# ---- energy --------------------------------------------------------------------------------


def test_closed_form_windows_idle_dynamic() -> None:
    windows = [(1000, 3000), (4000, 6000), (7000, 9000)]
    current, voltage, gpio = bench_trace(10_000, windows)
    r = analyze(current, voltage, gpio, FS, iterations=10, idle=(0.0, 0.9))

    assert [(w.start_sample, w.end_sample) for w in r.windows] == windows
    for w, (s, e) in zip(r.windows, windows, strict=True):
        assert w.start_s == s / FS and w.end_s == e / FS
        assert w.duration_s == 2.0
        assert rel(w.energy_j, P_ACTIVE * 2.0) < 1e-12
        assert rel(w.mean_power_w, P_ACTIVE) < 1e-12
    assert rel(r.active_power_w, P_ACTIVE) < 1e-12
    assert rel(r.energy_per_inference_j, P_ACTIVE * 2.0 / 10) < 1e-12
    assert r.exec_time_mean_s == pytest.approx(0.2, rel=1e-15)
    assert r.exec_time_stderr_s < 1e-15  # equal windows: zero up to rounding
    assert rel(r.idle_power_w, P_IDLE) < 1e-12
    assert rel(r.dynamic_power_w, P_ACTIVE - P_IDLE) < 1e-12
    assert rel(r.dynamic_energy_per_inference_j, (P_ACTIVE - P_IDLE) * 0.2) < 1e-12
    assert r.replicable and r.replicability_max_rel_dev < 1e-12

    d = r.to_dict()
    assert list(d)[:7] == [
        "sample_rate_hz",
        "windows",
        "active_power_w",
        "energy_per_inference_j",
        "idle_power_w",
        "dynamic_power_w",
        "dynamic_energy_per_inference_j",
    ]
    assert set(d["windows"][0]) == {"start_s", "end_s", "duration_s", "energy_j", "mean_power_w"}


def test_window_excludes_the_end_edge_sample() -> None:
    # One sample of 1 W exactly at the end edge must not count; one at the start edge must.
    current, voltage, gpio = bench_trace(100, [(10, 20)], pulse=1)
    current[:] = 0.0
    current[10] = 1.0 / V
    current[20] = 1.0 / V
    r = analyze(current, voltage, gpio, FS)
    assert rel(r.windows[0].energy_j, 1.0 / FS) < 1e-15


def test_without_idle_there_are_no_idle_figures() -> None:
    current, voltage, gpio = bench_trace(3000, [(500, 1500)])
    r = analyze(current, voltage, gpio, FS)
    assert r.idle_power_w is None and r.dynamic_power_w is None
    assert r.dynamic_energy_per_inference_j is None
    assert "idle_power_w" not in r.to_dict()


def test_exec_time_stderr_median_and_replicability_over_unequal_windows() -> None:
    # Durations 2.0, 2.08, 1.92 s over 10 inferences: exec 0.2, 0.208, 0.192 s.
    windows = [(1000, 3000), (4000, 6080), (7000, 8920)]
    current, voltage, gpio = bench_trace(10_000, windows)
    r = analyze(current, voltage, gpio, FS, iterations=10, idle=(9.5, 10.0))
    assert r.exec_time_mean_s == pytest.approx(0.2, rel=1e-12)
    assert r.exec_time_stderr_s == pytest.approx(0.008 / math.sqrt(3), rel=1e-9)
    assert rel(r.energy_per_inference_j, P_ACTIVE * 0.2) < 1e-12  # median
    assert r.replicable
    assert r.replicability_max_rel_dev == pytest.approx(0.04, rel=1e-9)
    assert rel(r.dynamic_energy_per_inference_j, (P_ACTIVE - P_IDLE) * 0.2) < 1e-12


def test_replicability_fails_beyond_five_percent() -> None:
    windows = [(1000, 3000), (4000, 6400)]  # energies 7.2 and 8.64 mJ: 9.09% from the mean
    current, voltage, gpio = bench_trace(8000, windows)
    r = analyze(current, voltage, gpio, FS)
    assert not r.replicable
    assert r.replicability_max_rel_dev == pytest.approx(0.2 / 2.2, rel=1e-9)


def test_float32_input_is_integrated_in_float64() -> None:
    windows = [(1000, 3000)]
    current, voltage, gpio = bench_trace(4000, windows)
    c32, v32 = current.astype(np.float32), voltage.astype(np.float32)
    r = analyze(c32, v32, gpio, FS)
    expected = float(np.dot(c32[1000:3000].astype(np.float64), v32[1000:3000])) / FS
    assert rel(r.windows[0].energy_j, expected) < 1e-12
    assert rel(r.windows[0].energy_j, P_ACTIVE * 2.0) < 1e-6


def test_window_energies_matches_direct_sum_and_checks_bounds() -> None:
    rng = np.random.default_rng(1)
    i, v = rng.random(500), rng.random(500)
    e = window_energies(i, v, np.array([[0, 10], [100, 500]]), 250.0)
    assert e[0] == pytest.approx(np.sum(i[:10] * v[:10]) / 250.0, rel=1e-13)
    assert e[1] == pytest.approx(np.sum(i[100:] * v[100:]) / 250.0, rel=1e-13)
    with pytest.raises(AnalysisError, match="windows must satisfy"):
        window_energies(i, v, np.array([[0, 501]]), 250.0)


def test_missing_samples_in_a_window_are_an_error() -> None:
    current, voltage, gpio = bench_trace(4000, [(1000, 3000)])
    current[1500] = np.nan
    with pytest.raises(AnalysisError, match=r"window 1 .* missing"):
        analyze(current, voltage, gpio, FS)


@pytest.mark.parametrize(
    ("idle", "match"),
    [
        ((-1.0, 0.5), "outside the trace"),
        ((3.5, 4.5), "outside the trace"),
        ((0.5, 0.5), "empty or reversed"),
        ((0.8, 0.2), "empty or reversed"),
        ((0.1, 0.1004), "no whole sample"),
        ((0.5, 1.5), "overlaps timed window 1"),
        ((2.9, 3.0), "overlaps timed window 1"),
    ],
)
def test_bad_idle_spans(idle: tuple[float, float], match: str) -> None:
    current, voltage, gpio = bench_trace(4000, [(1000, 3000)])
    with pytest.raises(AnalysisError, match=match) as info:
        analyze(current, voltage, gpio, FS, idle=idle)
    assert info.value.hint


def test_idle_span_may_touch_a_window() -> None:
    current, voltage, gpio = bench_trace(4000, [(1000, 3000)])
    # [0, 1000) ends where the window starts: no overlap (the pulse's samples carry idle power).
    r = analyze(current, voltage, gpio, FS, idle=(0.0, 1.0))
    assert rel(r.idle_power_w, P_IDLE) < 1e-12


def test_analyze_input_checks() -> None:
    current, voltage, gpio = bench_trace(100, [(10, 20)])
    with pytest.raises(AnalysisError, match="iterations"):
        analyze(current, voltage, gpio, FS, iterations=0)
    with pytest.raises(AnalysisError, match="voltage has 99"):
        analyze(current, voltage[:-1], gpio, FS)
    with pytest.raises(AnalysisError, match="gpio has 99"):
        analyze(current, voltage, gpio[:-1], FS)
    with pytest.raises(AnalysisError, match="sample rate"):
        analyze(current, voltage, gpio, 0.0)


def test_span_power() -> None:
    current, voltage, _ = bench_trace(4000, [(1000, 3000)])
    assert rel(span_power(current, voltage, 0, 1000), P_IDLE) < 1e-12
    assert rel(span_power(current, voltage, 500, 1500), (P_IDLE + P_ACTIVE) / 2) < 1e-12
    with pytest.raises(AnalysisError, match="span"):
        span_power(current, voltage, 10, 10)
    with pytest.raises(AnalysisError, match="span"):
        span_power(current, voltage, 0, 4001)


# ---- statistics helpers --------------------------------------------------------------------


def test_statistics_helpers_closed_form() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    mean, err = mean_stderr([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5
    assert err == pytest.approx(math.sqrt(5 / 3) / 2, rel=1e-15)
    assert mean_stderr([7.0]) == (7.0, 0.0)
    assert replicability([100.0, 104.0, 96.0]) == (True, pytest.approx(0.04))
    assert replicability([100.0, 120.0]) == (False, pytest.approx(10 / 110))
    assert replicability([1.0, 1.0], tolerance=0.0) == (True, 0.0)
    assert replicability([0.0, 0.0]) == (True, 0.0)
    for fn in (median, mean_stderr, replicability):
        with pytest.raises(AnalysisError):
            fn([])


# ---- property: any window placement integrates to the constructed segment energies -----------


@st.composite
def placements(draw: st.DrawFn) -> tuple[list[tuple[int, int]], list[list[tuple[int, float]]], int]:
    """Windows separated by idle gaps; each window made of segments (length, power W)."""
    n_windows = draw(st.integers(1, 5))
    windows, segments = [], []
    pos = draw(st.integers(0, 20))
    for _ in range(n_windows):
        segs = draw(
            st.lists(
                st.tuples(st.integers(1, 40), st.floats(0.0, 0.05, allow_subnormal=False)),
                min_size=1,
                max_size=4,
            )
        )
        length = sum(s[0] for s in segs)
        if length < 2:  # the start pulse must end before the end edge
            segs = [(2, segs[0][1])]
            length = 2
        windows.append((pos, pos + length))
        segments.append(segs)
        pos += length + draw(st.integers(2, 30))  # the end pulse must end before the next edge
    return windows, segments, pos


@settings(max_examples=150, deadline=None)
@given(placements(), st.sampled_from([1000.0, 48_000.0, 1e6]))
def test_window_energies_equal_constructed_segment_energies(
    placement: tuple[list[tuple[int, int]], list[list[tuple[int, float]]], int], fs: float
) -> None:
    windows, segments, n = placement
    voltage = np.full(n, 3.3)
    current = np.full(n, 1e-3)  # idle outside windows: must not leak in
    gpio = np.ones(n, dtype=np.uint8)
    expected = []
    for (start, end), segs in zip(windows, segments, strict=True):
        gpio[start] = 0
        gpio[end] = 0
        k = start
        energy = 0.0
        for length, power in segs:
            current[k : k + length] = power / 3.3
            energy += power * length / fs
            k += length
        expected.append(energy)
    r = analyze(current, voltage, gpio, fs)
    assert [(w.start_sample, w.end_sample) for w in r.windows] == windows
    got = [w.energy_j for w in r.windows]
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-18)
