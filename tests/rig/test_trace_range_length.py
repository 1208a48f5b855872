"""The trace's current-range signal is as long as its other signals when read back (found by the
soak, benchmarks/soak.py, issue 39: `rig verify` failed every PPK2 run with 'trace sample
count: ... its signals hold {'current': 5483803, 'gpi0': 5483803, 'current_range': 5483804}').

The range signal is u4, two values to a byte: an odd number of samples is written with one pad
value in the last byte's high half, which pyjls counts as a sample. A range signal that starts
after the first samples (the first chunk that tells its ranges) covers the samples from there
on. Either way `samples_by_signal`, which `rig verify` holds against the trace's length, must
say how many of the trace's samples each signal covers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rig.traces.files import JLS_RANGE, RANGE_NOT_TOLD, TraceWriter, read_trace

NAMES = ("low", "high")


def chunk(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.full(n, 1e-3), np.full(n, 1.8), np.zeros(n, dtype=np.uint8)


@pytest.mark.parametrize("n", [1000, 1001])
def test_the_range_signal_is_as_long_as_the_trace(tmp_path: Path, n: int) -> None:
    writer = TraceWriter(tmp_path / "t.jls", 1000.0)
    ranges = (np.arange(n) % 2).astype(np.uint8)
    writer.append(0, *chunk(n), current_range=ranges, range_names=NAMES)
    writer.close()
    trace = read_trace(tmp_path / "t.jls")
    assert len(trace) == n
    assert set(trace.meta["samples_by_signal"].values()) == {n}
    assert trace.current_range is not None
    assert np.array_equal(trace.current_range, ranges)


def test_a_range_signal_that_starts_later_covers_the_rest(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "t.jls", 1000.0)
    writer.append(0, *chunk(301))  # a chunk that tells no ranges
    writer.append(301, *chunk(500), current_range=np.ones(500, dtype=np.uint8),
                  range_names=NAMES)
    writer.close()
    trace = read_trace(tmp_path / "t.jls")
    assert len(trace) == 801
    assert trace.meta["samples_by_signal"][JLS_RANGE] == 801
    assert trace.current_range is not None
    assert set(trace.current_range[:301]) == {RANGE_NOT_TOLD}
    assert set(trace.current_range[301:]) == {1}
