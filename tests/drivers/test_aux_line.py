"""`LineThreshold`: a timestamp line logged as per-sample minimum voltages becomes GPIO bits whose
falling edges sit exactly where closed-form waveforms put them (short pulses, noise, slow edges,
hysteresis, an unpowered start, chunk boundaries)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from drivers.emon.aux_line import LineThreshold

V = 1.8  # the DUT's I/O voltage: thresholds at 0.54 V and 1.26 V
P = 500e-6  # seconds per logged sample
RAW = 5.12e-6  # the instrument's raw readings behind each sample's minimum


def falling(bits: np.ndarray, before: int = 1) -> list[int]:
    """Indices k where the bit goes 1 -> 0 (k = 0 against the level `before`)."""
    b = np.concatenate(([before], bits)).astype(int)
    return (np.flatnonzero((b[:-1] == 1) & (b[1:] == 0))).tolist()


def minima(wave, samples: int) -> np.ndarray:
    """Per-sample minimum of `wave(t)` over raw readings every `RAW` seconds."""
    t = np.arange(0.0, samples * P, RAW)
    v = wave(t)
    k = (t // P).astype(int)
    out = np.full(samples, np.inf)
    np.minimum.at(out, k, v)
    return out


def pulses(starts_s: list[float], width_s: float):
    """A line at V, low for `width_s` from each start."""
    def wave(t: np.ndarray) -> np.ndarray:
        low = np.zeros(t.shape, dtype=bool)
        for s in starts_s:
            low |= (t >= s) & (t < s + width_s)
        return np.where(low, 0.0, V)
    return wave


def test_a_pulse_much_shorter_than_a_sample_marks_the_sample_that_holds_it() -> None:
    starts = [0.0101, 0.0523, 0.0523 + 3.2 * P]  # 10 us pulses, two of them 3 samples apart
    line = LineThreshold.for_supply(V)
    bits = line.bits(minima(pulses(starts, 10e-6), 200))
    assert falling(bits) == [int(s // P) for s in starts]
    assert bits.sum() == 200 - 3  # each pulse is one low sample; high again after it


def test_noise_between_the_thresholds_never_toggles() -> None:
    rng = np.random.default_rng(7)
    n = 20_000
    noise = rng.normal(0.0, 0.05 * V, n)  # 90 mV rms on a 1.8 V line: 14 sigma from 0.54 V
    high = V + noise
    low = np.abs(noise)
    level = np.concatenate([high[:5000], low[5000:12000], high[12000:]])
    bits = LineThreshold.for_supply(V).bits(level)
    assert falling(bits) == [5000]
    assert bits[:5000].all() and not bits[5000:12000].any() and bits[12000:].all()


def test_a_slow_falling_edge_is_one_edge_where_it_crosses_the_low_threshold() -> None:
    # Linear fall from V to 0 over 20 samples from t0, then a slow rise 100 samples later.
    t0, fall = 37.3 * P, 20 * P
    rise_at = t0 + 100 * P

    def wave(t: np.ndarray) -> np.ndarray:
        down = np.clip(1 - (t - t0) / fall, 0, 1) * V
        up = np.clip((t - rise_at) / fall, 0, 1) * V
        return np.where(t < rise_at, down, up)

    line = LineThreshold.for_supply(V)
    bits = line.bits(minima(wave, 400))
    cross = t0 + fall * (1 - 0.3)  # V(t) = 0.3 x V
    first_below = (np.floor(cross / RAW) + 1) * RAW  # the first raw reading after it
    assert falling(bits) == [int(first_below // P)]
    # High again once a whole sample's minimum is above 70 %: after the rise passes 0.7 V.
    back = rise_at + 0.7 * fall
    first_high = np.flatnonzero(bits[int(cross // P):])[0] + int(cross // P)
    assert first_high == int(back // P) + 1


def test_hysteresis_a_level_hovering_around_one_threshold_keeps_its_bit() -> None:
    k = np.arange(1000)
    hover_mid = 0.5 * V + 0.15 * V * np.sin(k / 3.0)  # 35 %..65 %: between both thresholds
    hover_low = 0.3 * V + 0.12 * V * np.sin(k / 3.0)  # crosses 30 % both ways, never above 70 %
    level = np.concatenate([np.full(10, V), hover_mid, hover_low, np.full(10, V)])
    bits = LineThreshold.for_supply(V).bits(level)
    assert falling(bits) == [1010 + int(np.flatnonzero(hover_low < 0.3 * V)[0])]
    assert bits[:1010].all()  # hovering mid-way never reads low
    assert bits[-10:].all()  # back above 70 %: high


def test_an_unpowered_start_is_not_a_timestamp() -> None:
    # The monitor starts before the DUT is switched on: the line is 0 V, then rises to V.
    level = np.concatenate([np.zeros(50), np.linspace(0, V, 5), np.full(20, V), [0.0], [V]])
    line = LineThreshold.for_supply(V)
    bits = line.bits(level)
    assert falling(bits) == [75]  # only the real pulse
    assert bits[:75].all() and line.armed


def test_a_line_never_seen_high_stays_unarmed() -> None:
    line = LineThreshold.for_supply(V)
    assert line.bits(np.zeros(100)).all() and not line.armed


def test_chunk_boundaries_change_nothing() -> None:
    starts = [0.00131 + 0.0111 * i for i in range(30)]  # none on a sample boundary
    level = minima(pulses(starts, 40e-6), 800)
    level[300:303] = np.nan  # readings the instrument could not make keep the level
    whole = LineThreshold.for_supply(V).bits(level)
    line = LineThreshold.for_supply(V)
    cuts = [0, 1, 2, 5, 77, 78, 300, 301, 302, 555, 800]
    parts = np.concatenate([line.bits(level[a:b]) for a, b in itertools.pairwise(cuts)])
    np.testing.assert_array_equal(parts, whole)
    assert falling(whole) == [int(s // P) for s in starts]


def test_thresholds_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="0 < low < high"):
        LineThreshold(1.2, 0.6)
