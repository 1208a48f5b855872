"""The recorder's count of each window's samples per current range (where the monitor tells
each sample's range: a PPK2, an auto-ranging Joulescope), and the trace's range signal."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.emon.base import Chunk
from rig.run.recording import EmonRecorder
from rig.traces.analysis.energy import span_range_occupancy
from rig.traces.files import RANGE_NOT_TOLD, TraceWriter, read_trace

FS = 1000.0
NAMES = ("R0", "R1", "R2", "R3", "R4")
#: Each range's current [A] (every sample in one range reads the same).
LEVEL = {0: 5e-6, 1: 60e-6, 2: 700e-6, 3: 8e-3, 4: 90e-3}
#: Runs of (range, samples): R0 0..150, R1 ..200, R2 ..320, R0 ..350, R3 ..600, R4 ..900,
#: R0 ..1100; the falling edges make the windows [100, 400) and [400, 1000).
RUNS = [(0, 150), (1, 50), (2, 120), (0, 30), (3, 250), (4, 300), (0, 200)]
EDGES = (100, 400, 1000)
#: What each window holds, counted by hand from RUNS (R0 in the first: 100..150, 320..350).
EXPECTED = {(100, 400): {"R0": 50 + 30, "R1": 50, "R2": 120, "R3": 50},
            (400, 1000): {"R3": 200, "R4": 300, "R0": 100}}


def stream() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ranges = np.concatenate([np.full(n, r, np.uint8) for r, n in RUNS])
    current = np.array([LEVEL[int(r)] for r in ranges])
    gpio = np.ones(len(ranges), np.uint8)
    gpio[list(EDGES)] = 0
    return current, gpio, ranges


def feed(rec: EmonRecorder, sizes: list[int], names: tuple[str, ...] = NAMES,
         ranged: bool = True) -> np.ndarray:
    current, gpio, ranges = stream()
    lo, j = 0, 0
    while lo < len(current):
        hi = min(lo + sizes[j % len(sizes)], len(current))
        j += 1
        rec.on_chunk(Chunk(lo, current[lo:hi], np.full(hi - lo, 1.8), gpio[lo:hi],
                           current_range=ranges[lo:hi] if ranged else None,
                           range_names=names if ranged else ()))
        lo = hi
    return ranges


@pytest.mark.parametrize("sizes", [[1100], [7], [100, 300, 600], [1, 99, 1, 299]])
def test_each_window_counts_its_samples_and_mean_current_per_range(sizes: list[int]) -> None:
    rec = EmonRecorder(FS)
    feed(rec, sizes)
    assert rec.edges() == list(EDGES)
    for (start, stop), counts in EXPECTED.items():
        got = rec.range_occupancy(start, stop)
        assert {k: v["samples"] for k, v in got.items()} == counts
        for name, r in got.items():
            assert r["mean_current_a"] == pytest.approx(LEVEL[NAMES.index(name)], rel=1e-12)
    assert rec.range_occupancy(100, 1000)["R0"]["samples"] == 180


def test_chunks_naming_ranges_in_another_order_count_by_name() -> None:
    rec = EmonRecorder(FS)
    current, gpio, ranges = stream()
    # The second half of the stream comes with its names reversed, its indices to match.
    rec.on_chunk(Chunk(0, current[:500], np.full(500, 1.8), gpio[:500],
                       current_range=ranges[:500], range_names=NAMES))
    rec.on_chunk(Chunk(500, current[500:], np.full(600, 1.8), gpio[500:],
                       current_range=(4 - ranges[500:]).astype(np.uint8),
                       range_names=NAMES[::-1]))
    assert {k: v["samples"] for k, v in rec.range_occupancy(400, 1000).items()} == \
        EXPECTED[(400, 1000)]


def test_no_occupancy_where_the_monitor_tells_no_range_or_not_for_every_sample() -> None:
    rec = EmonRecorder(FS)
    feed(rec, [250], ranged=False)
    assert rec.range_occupancy(100, 400) == {}
    rec = EmonRecorder(FS)
    current, gpio, ranges = stream()
    rec.on_chunk(Chunk(0, current[:300], np.full(300, 1.8), gpio[:300],
                       current_range=ranges[:300], range_names=NAMES))
    rec.on_chunk(Chunk(300, current[300:], np.full(800, 1.8), gpio[300:]))  # tells none
    assert rec.range_occupancy(100, 400) == {}


def test_an_overlapping_chunk_and_stop_after_keep_the_ranges_aligned() -> None:
    current, gpio, ranges = stream()
    rec = EmonRecorder(FS, stop_after=1001)
    rec.on_chunk(Chunk(0, current[:350], np.full(350, 1.8), gpio[:350],
                       current_range=ranges[:350], range_names=NAMES))
    # Repeats samples 300..349, then goes on past the capture's end.
    rec.on_chunk(Chunk(300, current[300:], np.full(800, 1.8), gpio[300:],
                       current_range=ranges[300:], range_names=NAMES))
    assert rec.samples == 1001
    for (start, stop), counts in EXPECTED.items():
        assert {k: v["samples"] for k, v in rec.range_occupancy(start, stop).items()} == counts


def test_the_trace_holds_each_samples_range_and_analysis_counts_it_again(
        tmp_path: Path) -> None:
    path = tmp_path / "t.jls"
    rec = EmonRecorder(FS, path)
    ranges = feed(rec, [33, 8, 101])
    rec.close()
    trace = read_trace(path)
    assert trace.range_names == NAMES
    assert trace.current_range is not None and trace.current_range.tolist() == ranges.tolist()
    for start, stop in EXPECTED:
        again = span_range_occupancy(trace.current, trace.current_range, trace.range_names,
                                     start, stop)
        live = rec.range_occupancy(start, stop)
        assert {k: v["samples"] for k, v in again.items()} == EXPECTED[(start, stop)]
        for name, r in live.items():  # the float32 samples the trace holds, both ways
            assert again[name]["mean_current_a"] == pytest.approx(r["mean_current_a"],
                                                                  rel=1e-12)


def test_a_trace_without_ranges_reads_as_before_and_a_gap_reads_not_told(
        tmp_path: Path) -> None:
    plain = tmp_path / "plain.jls"
    with TraceWriter(plain, FS) as w:
        w.append(0, np.ones(10), np.ones(10), np.ones(10, np.uint8))
    trace = read_trace(plain)
    assert trace.current_range is None and trace.range_names == ()
    gapped = tmp_path / "gapped.jls"
    with TraceWriter(gapped, FS) as w:
        w.append(0, np.ones(3), np.ones(3), np.ones(3, np.uint8))  # before any range is told
        w.append(3, np.ones(5), np.ones(5), np.ones(5, np.uint8),
                 current_range=np.array([0, 1, 0, 1, 1], np.uint8), range_names=("A", "B"))
        w.append(10, np.ones(3), np.ones(3), np.ones(3, np.uint8),  # 2 samples lost
                 current_range=np.array([2, 2, 0], np.uint8), range_names=("A", "B", "C"))
    trace = read_trace(gapped)
    x = RANGE_NOT_TOLD
    assert trace.range_names == ("A", "B", "C")
    assert trace.current_range.tolist() == [x, x, x, 0, 1, 0, 1, 1, x, x, 2, 2, 0]
    assert span_range_occupancy(trace.current, trace.current_range, trace.range_names,
                                3, 8) == {"A": {"samples": 2, "mean_current_a": 1.0},
                                          "B": {"samples": 3, "mean_current_a": 1.0}}
    assert span_range_occupancy(trace.current, trace.current_range, trace.range_names,
                                7, 11) == {}  # holds samples whose range is not known
