"""How the rig reads a PPK2's stream as Nordic's app reads it: the spike filter around range
switches (closed forms, and a per-sample transcription of the rule on random streams), the
counter (out-of-sequence words apart from lost samples), and the metadata's zeros and user gains.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import ProtocolError
from protocols.ppk2 import (
    OOS_TOLERANCE,
    Calibration,
    CounterSequencer,
    SpikeFilter,
    SpikeFilterParams,
    encode_words,
    parse_metadata,
    running_average,
)

A, A5 = 0.18, 0.06  # the defaults (Nordic's spikeFilterSlice.ts, ppk2-api's PPK2_API)


def switch(x_a: float, k_a: int, x_b: float, k_b: int, before: int = 20,
           after: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """`before` samples of x_a in range k_a, then `after` of x_b in range k_b."""
    return (np.r_[np.full(before, x_a), np.full(after, x_b)],
            np.r_[np.full(before, k_a), np.full(after, k_b)])


def test_the_defaults_are_nordic_s() -> None:
    assert SpikeFilterParams().as_dict() == {"alpha": 0.18, "alpha5": 0.06, "samples": 3}


def test_a_switch_between_low_ranges_reads_the_running_average_for_three_samples() -> None:
    # Constant x_a before the switch: its running average is x_a exactly. From the switch on,
    # sample j reads the average x_b + (x_a - x_b) (1 - alpha)^(j+1) for j < 3, then x_b.
    x_a, x_b = 0.5e-3, 2e-3
    x, k = switch(x_a, 0, x_b, 1)
    got = SpikeFilter().apply(x, k)
    expected = x.copy()
    for j in range(3):
        expected[20 + j] = x_b + (x_a - x_b) * (1 - A) ** (j + 1)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=0)
    assert got[20] == pytest.approx(A * x_b + (1 - A) * x_a, rel=1e-13)


def test_a_switch_into_range_4_holds_two_samples_then_uses_alpha5() -> None:
    # Into range 4: the first two samples stay out of both averages and read the average
    # before them (x_a); the third reads alpha5 x_b + (1 - alpha5) x_a; then x_b.
    x_a, x_b = 40e-3, 300e-3
    x, k = switch(x_a, 3, x_b, 4)
    got = SpikeFilter().apply(x, k)
    expected = x.copy()
    expected[20:23] = [x_a, x_a, A5 * x_b + (1 - A5) * x_a]
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=0)


def test_out_of_range_4_the_held_samples_are_not_in_the_average() -> None:
    # 3 -> 4 -> 3: samples 20, 21 (the first two of range 4) never entered the alpha average,
    # so at the switch back (sample 25) the average holds x_a decayed over samples 22..25 only.
    x = np.r_[np.full(20, 1.0), np.full(5, 5.0), np.full(5, 2.0)]
    k = np.r_[np.full(20, 3), np.full(5, 4), np.full(5, 3)]
    got = SpikeFilter().apply(x, k)
    avg = 1.0
    for v in (5.0, 5.0, 5.0, 2.0):  # samples 22, 23, 24, 25
        avg = A * v + (1 - A) * avg
    assert got[25] == pytest.approx(avg, rel=1e-13)
    assert got[24] == 5.0  # range 4 from sample 20: 23 and 24 are past the three filtered


def test_chunks_cut_anywhere_filter_as_one() -> None:
    x, k = switch(1e-3, 1, 7e-3, 2, before=5, after=5)
    whole = SpikeFilter().apply(x, k)
    for cut in range(1, len(x)):
        f = SpikeFilter()
        parts = np.r_[f.apply(x[:cut], k[:cut]), f.apply(x[cut:], k[cut:])]
        np.testing.assert_allclose(parts, whole, rtol=1e-13, atol=0)


def test_reset_forgets_the_previous_acquisition() -> None:
    f = SpikeFilter()
    f.apply(np.array([1.0, 1.0]), np.array([0, 0]))
    f.reset()
    x = np.array([3.0, 3.0])
    np.testing.assert_array_equal(f.apply(x, np.array([2, 2])), x)  # no switch from range 0


@pytest.mark.parametrize("bad", [{"alpha": 0}, {"alpha5": 1.5}, {"samples": 0},
                                 {"samples": 2.5}])
def test_bad_filter_settings_are_refused(bad) -> None:
    with pytest.raises(ProtocolError, match="spike filter"):
        SpikeFilterParams(**bad)


def transcribed(x: np.ndarray, k: np.ndarray, p: SpikeFilterParams) -> np.ndarray:
    """The filter rule one sample at a time, as both references state it (the test's oracle)."""
    avg = avg4 = prev = None
    left = since = 0
    out = []
    for v, r in zip(x.tolist(), np.minimum(k, 4).tolist(), strict=True):
        before, before4 = avg, avg4
        avg = v if avg is None else p.alpha * v + (1 - p.alpha) * avg
        avg4 = v if avg4 is None else p.alpha5 * v + (1 - p.alpha5) * avg4
        prev = r if prev is None else prev
        y = v
        if prev != r or left > 0:
            if prev != r:
                since, left = 0, p.samples
            else:
                since += 1
            if r == 4:
                if since < 2:
                    avg, avg4 = before, before4
                y = avg4
            else:
                y = avg
            left -= 1
        prev = r
        out.append(y)
    return np.array(out)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-9, 1.0), st.integers(0, 7)), min_size=1, max_size=300),
       st.integers(1, 6), st.lists(st.integers(0, 300), max_size=4))
def test_the_vectorised_filter_is_the_per_sample_rule(samples, n_after, cuts) -> None:
    x = np.array([s[0] for s in samples])
    k = np.array([s[1] for s in samples])
    p = SpikeFilterParams(samples=n_after)
    points = sorted({min(c, len(x)) for c in cuts})
    f = SpikeFilter(p)
    got = np.concatenate([f.apply(x[a:b], k[a:b])
                          for a, b in zip([0, *points], [*points, len(x)], strict=True)])
    np.testing.assert_allclose(got, transcribed(x, k, p), rtol=1e-12, atol=0)


def test_the_running_average_stays_exact_over_long_streams() -> None:
    # A constant input from a different start: y[n] = x + (start - x) (1 - a)^(n+1).
    n = 50_000
    y = running_average(np.full(n, 2.0), 0.06, 7.0)
    expected = 2.0 + 5.0 * 0.94 ** np.arange(1, n + 1)
    np.testing.assert_allclose(y, expected, rtol=1e-13, atol=0)


# -- the counter ---------------------------------------------------------------------------------
def words(counters: list[int]) -> np.ndarray:
    n = len(counters)
    raw = encode_words(np.zeros(n), np.zeros(n), np.array(counters), np.zeros(n))
    return np.frombuffer(raw, dtype="<u4")


def sequenced(counters: list[int], cuts: tuple[int, ...] = ()) -> tuple[list[int], list[int]]:
    seq, w = CounterSequencer(), words(counters)
    lost, oos = [], []
    points = [0, *cuts, len(w)]
    for a, b in itertools.pairwise(points):
        out = seq.feed(w[a:b])
        lost += out.lost_before.tolist()
        oos += out.out_of_sequence.astype(int).tolist()
    out = seq.feed(w[:0], final=True)
    return lost + out.lost_before.tolist(), oos + out.out_of_sequence.astype(int).tolist()


@pytest.mark.parametrize(("counters", "lost", "oos"), [
    # One word with a wrong counter, the count resumes: out of sequence, nothing lost.
    ([0, 1, 2, 40, 4, 5, 6, 7, 8], [0] * 9, [0, 0, 0, 1, 0, 0, 0, 0, 0]),
    # Five in a row: still tolerated (Nordic's app declares a loss at the 6th).
    ([0, 1, 2, 40, 41, 42, 43, 44, 8, 9], [0] * 10, [0, 0, 0, 1, 1, 1, 1, 1, 0, 0]),
    # Seven samples lost: counted exactly, at the word after them.
    ([0, 1, 2, 10, 11, 12, 13, 14, 15, 16], [0, 0, 0, 7, 0, 0, 0, 0, 0, 0], [0] * 10),
    # Across the counter's wrap.
    ([62, 63, 0, 1, 5, 6, 7, 8, 9, 10], [0, 0, 0, 0, 3, 0, 0, 0, 0, 0], [0] * 10),
    # A jump at the end of the stream, unresolved: a loss.
    ([0, 1, 2, 3, 9], [0, 0, 0, 0, 5], [0] * 5),
])
def test_lost_samples_and_out_of_sequence_words(counters, lost, oos) -> None:
    assert sequenced(counters) == (lost, oos)
    for cut in range(1, len(counters)):  # however the stream is cut
        assert sequenced(counters, (cut,)) == (lost, oos)


def test_six_wrong_counters_in_a_row_are_a_loss_not_out_of_sequence() -> None:
    lost, oos = sequenced([0, 1, 2, 40, 41, 42, 43, 44, 45, 9, 10])
    assert sum(oos) == 0 and lost[3] == (40 - 2 - 1) and lost[9] == (9 - 45 - 1) % 64
    assert OOS_TOLERANCE == 5


def test_held_words_wait_for_the_words_after_them() -> None:
    seq = CounterSequencer()
    out = seq.feed(words([0, 1, 2, 40, 4]))  # 4 resumes: decided at once
    assert len(out) == 5 and out.out_of_sequence.tolist() == [0, 0, 0, 1, 0]
    out = seq.feed(words([20, 21]))  # a jump with too few words after it
    assert len(out) == 0 and seq.held == 2
    out = seq.feed(words([22, 23, 24, 25]))
    assert len(out) == 6 and out.lost_before.tolist() == [15, 0, 0, 0, 0, 0]


# -- the metadata --------------------------------------------------------------------------------
def test_a_zero_reads_as_the_default_as_nordic_s_app_reads_it() -> None:
    cal = parse_metadata("Calibrated: 1\nGS0: 0\nGI1: 0\nUG2: 0\nR3: 0\nO0: 0\nS1: 0\n"
                         "GS1: 0.5\nEND\n")
    d = Calibration()
    assert cal.gs[0] == 1.0 and cal.gi[1] == 1.0 and cal.ug[2] == 1.0 and cal.r[3] == d.r[3]
    assert cal.gs[1] == 0.5 and cal.o[0] == 0.0 and cal.s[1] == 0.0
    assert len(cal.notes) == 4 and "GS0 reads 0: the default 1 is used" in cal.notes[0]


@pytest.mark.parametrize(("gains", "reset"), [
    ((1.0, 1.09, 0.9, 1.05, 0.91), False),
    ((1.0, 1.0, 1.0, 1.1001, 1.0), True),
    # Nordic's test, Math.abs(c - 1) > 0.1 in doubles, resets 1.1 (|1.1 - 1| is
    # 0.10000000000000009) and keeps 0.9 (0.09999999999999998): the rig computes the same.
    ((1.0, 1.1, 1.0, 1.0, 1.0), True),
    ((0.89, 1.02, 1.0, 1.0, 1.0), True),
])
def test_user_gains_outside_0_9_to_1_1_reset_all_five(gains, reset) -> None:
    text = "".join(f"UG{k}: {g}\n" for k, g in enumerate(gains)) + "END\n"
    cal = parse_metadata(text)
    assert cal.ug == ((1.0,) * 5 if reset else gains)
    assert any("user gains" in n for n in cal.notes) == reset


def test_the_metadata_can_write_a_value_as_text_that_reads_back_the_same() -> None:
    cal = Calibration(gs=(1.0, 0.01, 0.01, 0.01, 0.01), extra={"calibrated": "1"})
    text = cal.to_metadata({"GS0": "0", "UG1": "1.5"}).decode()
    assert "GS0: 0\n" in text and "UG1: 1.5\n" in text
    assert parse_metadata(text) == cal
