"""RangeSignal: a trace's current ranges as the JLS file stores them (u4, two a byte, low nibble
first), read like a uint8 array; where they change and their values at given samples come
from the packed bytes. Checked against a plain one-value-a-sample reading of the same bytes."""

from __future__ import annotations

import numpy as np
import pytest

from rig.traces.analysis import range_signal
from rig.traces.analysis.edges import change_points
from rig.traces.analysis.range_signal import RANGE_NOT_TOLD, RangeSignal


def plain(packed: np.ndarray, shift: int, length: int, n: int) -> np.ndarray:
    """One value a sample, nibble by nibble: the reference."""
    values = np.empty(2 * len(packed), dtype=np.uint8)
    values[0::2], values[1::2] = packed & 15, packed >> 4
    out = np.full(n, RANGE_NOT_TOLD, dtype=np.uint8)
    for k in range(max(0, shift), min(n, shift + length)):
        out[k] = values[k - shift]
    return out


def runs_of_ranges(rng: np.random.Generator, length: int, changes: int) -> np.ndarray:
    """`length` range values in a few runs (a range holds for many samples), packed."""
    cuts = np.sort(rng.choice(np.arange(1, length), size=min(changes, length - 1),
                              replace=False))
    values = np.repeat(rng.integers(0, 4, len(cuts) + 1),
                       np.diff(np.concatenate(([0], cuts, [length]))))
    if length % 2:  # the pad nibble after an odd count
        values = np.append(values, RANGE_NOT_TOLD)
    return (values[0::2] | (values[1::2] << 4)).astype(np.uint8)


@pytest.fixture(params=["whole", "blocks"])
def blocks(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The signal searched and unpacked in one block, or in blocks of a few bytes (each block
    boundary a place a change can hide, most blocks one range throughout)."""
    if request.param == "blocks":
        monkeypatch.setattr(range_signal, "_SEARCH_BYTES", 8)
        monkeypatch.setattr(range_signal, "_UNPACK_BYTES", 3)


@pytest.mark.parametrize(("shift", "length", "n"), [
    (0, 1000, 1000), (0, 999, 999), (301, 699, 1000), (300, 500, 1000), (-3, 1003, 1000),
    (-4, 1010, 1000), (5, 1, 20), (0, 0, 10), (700, 0, 1000), (-7, 3, 10)])
def test_it_reads_as_the_plain_array_and_finds_the_same_changes(shift: int, length: int,
                                                                n: int, blocks: None) -> None:
    rng = np.random.default_rng(abs(shift) * 1000 + length)
    packed = (runs_of_ranges(rng, length, 12) if length > 1
              else rng.integers(0, 4, (length + 1) // 2, dtype=np.uint8))
    signal = RangeSignal(packed, shift, length, n)
    expected = plain(packed, shift, length, n)
    assert len(signal) == n and np.array_equal(np.asarray(signal), expected)
    assert signal.tolist() == expected.tolist() and np.array_equal(signal[3:7], expected[3:7])
    everywhere = np.arange(n)
    fresh = RangeSignal(packed, shift, length, n)  # `at` before anything is unpacked
    assert np.array_equal(fresh.at(everywhere), expected) and fresh._unpacked is None
    spans = [(int(a), int(b)) for a, b in np.sort(rng.integers(0, n + 1, (40, 2)), axis=1)]
    # Searched span by span; then the whole trace's, kept, and every span taken from them.
    kept = False
    for lo, hi in [*spans, (0, n), *spans]:
        want = change_points(expected[lo:hi]) + lo if hi - lo > 1 else np.empty(0)
        assert np.array_equal(fresh.changes(lo, hi), want), (lo, hi)
        kept = kept or (lo, hi) == (0, n)
        assert (fresh._changes is not None) == kept, (lo, hi)
    assert fresh._changes is not None and not fresh._changes.flags.writeable
    assert fresh._unpacked is None


def test_a_range_changing_every_sample_and_nibbles_alike_in_every_byte(blocks: None) -> None:
    """Worst cases for a byte-wise search: every value differs from the last (0x10 bytes
    repeated: equal bytes, unequal nibbles), runs of one byte value (0x11: no change), and one
    change right after a block of one range (0x11 then 0x22 at byte 8)."""
    step = np.full(32, 0x11, dtype=np.uint8)
    step[8:] = 0x22
    for packed, n in ((np.full(32, 0x10, dtype=np.uint8), 64),
                      (np.full(32, 0x11, dtype=np.uint8), 64),
                      (np.full(32, 0x21, dtype=np.uint8), 63), (step, 64), (step, 17)):
        signal = RangeSignal(packed, 0, n, n)
        expected = plain(packed, 0, n, n)
        assert np.array_equal(signal.changes(0, n), change_points(expected))
        assert np.array_equal(signal.changes(3, n - 2), change_points(expected[3:n - 2]) + 3)
        assert np.array_equal(np.asarray(signal), expected)


def test_a_signal_shorter_than_its_bytes_say_is_refused() -> None:
    with pytest.raises(ValueError, match="3 bytes of the range signal for 7 samples"):
        RangeSignal(np.zeros(3, dtype=np.uint8), 0, 7, 10)


def test_an_index_outside_the_trace_is_refused() -> None:
    signal = RangeSignal(np.zeros(5, dtype=np.uint8), 0, 10, 10)
    with pytest.raises(IndexError):
        signal.at(np.array([10]))
