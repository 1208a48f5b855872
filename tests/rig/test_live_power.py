"""Live power previews: `PowerDecimator` bins against closed forms, the recorder's `preview=`
tap, the run store skipping transient events, and `measure_asc(live=)` on the virtual bench."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.base import Chunk
from rig.bench.config import load_bench
from rig.run.events import EventBus, LatencyRun, RunStarted
from rig.run.live_power import BIN_S, EMIT_S, PowerDecimator, PowerPreview
from rig.run.recording import EmonRecorder
from rig.run.store import RunStore, load_run
from rig.traces.files import read_trace

REPO = Path(__file__).resolve().parents[2]

#: A ramp p[k] = SLOPE * k: a bin of samples [a, a + step) has min SLOPE*a, max
#: SLOPE*(a + step - 1) and mean SLOPE*(a + (step - 1)/2), whatever the chunking.
SLOPE = 1e-6


def ramp(first: int, n: int) -> np.ndarray:
    return SLOPE * np.arange(first, first + n, dtype=np.float64)


def feed(dec: PowerDecimator, power: np.ndarray, sizes: list[int], first: int = 0) -> None:
    """Feed `power` (sample ids from `first`) in chunks of the given sizes (cycled)."""
    lo, j = 0, 0
    while lo < len(power):
        hi = min(lo + sizes[j % len(sizes)], len(power))
        j += 1
        dec.add(first + lo, power[lo:hi])
        lo = hi


def collect(rate: float, **kw: float) -> tuple[PowerDecimator, list[PowerPreview]]:
    out: list[PowerPreview] = []
    return PowerDecimator(rate, out.append, **kw), out


def bins(previews: list[PowerPreview]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every bin of `previews`: start sample id, min, max, mean."""
    starts = np.concatenate([p.first_sample + p.step * np.arange(len(p.mean_w))
                             for p in previews])
    lows = np.concatenate([p.min_w for p in previews])
    highs = np.concatenate([p.max_w for p in previews])
    means = np.concatenate([p.mean_w for p in previews])
    return starts, lows, highs, means


# -- PowerDecimator ---------------------------------------------------------------------------
@pytest.mark.parametrize("sizes", [[1], [3], [7, 1, 33, 2, 250], [4999], [5]])
def test_ramp_bins_are_closed_form_whatever_the_chunking(sizes: list[int]) -> None:
    fs, n, first = 1000.0, 3007, 1000  # 3.007 s from sample id 1000: 601 whole bins + 2
    dec, previews = collect(fs)
    feed(dec, ramp(first, n), sizes, first=first)
    assert dec.step == 5 and all(p.step == 5 and p.sample_rate_hz == fs for p in previews)
    dec.flush()  # the whole bins still pending; the 2 samples of a partial bin stay behind
    starts, lows, highs, means = bins(previews)
    # Bins tile the stream from its first sample id, one after the other, none lost.
    assert starts.tolist() == list(range(first, first + 601 * 5, 5))
    for p, q in itertools.pairwise(previews):
        assert q.first_sample == p.first_sample + p.step * len(p.mean_w)
    assert lows == pytest.approx(SLOPE * starts, rel=1e-12, abs=0)
    assert highs == pytest.approx(SLOPE * (starts + 4), rel=1e-12, abs=0)
    assert means == pytest.approx(SLOPE * (starts + 2), rel=1e-12, abs=0)


def test_step_levels_give_each_bins_exact_min_max_mean() -> None:
    """Levels that change every 13 samples (not a multiple of the 5-sample bin)."""
    fs, n = 1000.0, 1300
    k = np.arange(n)
    levels = np.array([1.2e-3, 3.6e-3, 0.0, 2.4e-3])
    power = levels[(k // 13) % 4]
    dec, previews = collect(fs)
    feed(dec, power, [6, 11, 2, 97])
    dec.flush()
    starts, lows, highs, means = bins(previews)
    assert len(starts) == n // 5
    for a, lo, hi, mean in zip(starts.tolist(), lows, highs, means, strict=True):
        inside = [levels[(j // 13) % 4] for j in range(a, a + 5)]  # the bin's five samples
        assert lo == min(inside) and hi == max(inside)
        assert mean == pytest.approx(sum(inside) / 5, rel=1e-12, abs=1e-18)
    # A bin inside one level is flat; one across a change is not.
    assert (lows[0], highs[0], means[0]) == (1.2e-3, 1.2e-3, pytest.approx(1.2e-3))
    assert (lows[2], highs[2]) == (1.2e-3, 3.6e-3)  # samples 10..14: 1.2 mW x3, 3.6 mW x2
    assert means[2] == pytest.approx((3 * 1.2e-3 + 2 * 3.6e-3) / 5, rel=1e-12)


def test_times_and_start_of_a_preview() -> None:
    dec, previews = collect(1000.0)
    feed(dec, ramp(250, 100), [100], first=250)
    assert len(previews) == 1
    p = previews[0]
    assert p.first_sample == 250 and p.step == 5 and len(p.mean_w) == 20
    assert p.start_s == 0.25
    # Bin i covers samples [250 + 5i, 255 + 5i): its centre is 2.5 samples in.
    assert p.times_s() == pytest.approx((250 + 5 * np.arange(20) + 2.5) / 1000.0, rel=1e-15)


def test_one_preview_per_emit_s_of_stream() -> None:
    """Chunks shorter than a bin: every preview is exactly EMIT_S of stream (20 bins of 5 ms)."""
    fs = 1000.0
    dec, previews = collect(fs)
    feed(dec, ramp(0, 999), [3])  # 1 s of stream but its last sample
    emit_bins = round(EMIT_S / BIN_S)
    assert emit_bins == 20
    assert [len(p.mean_w) for p in previews] == [emit_bins] * 9  # the 10th waits: 999 samples
    assert [p.first_sample for p in previews] == [100 * i for i in range(9)]
    assert all(len(p.mean_w) * p.step / fs == pytest.approx(EMIT_S) for p in previews)
    feed(dec, ramp(999, 1), [1], first=999)  # the last sample completes bin 199: the 10th
    assert len(previews) == 10 and previews[-1].first_sample == 900


def test_big_chunks_emit_at_least_emit_s_and_at_most_one_chunk_more() -> None:
    fs = 1000.0
    dec, previews = collect(fs)
    sizes = [7, 1, 33, 2, 250]
    feed(dec, ramp(0, 5000), sizes)  # 5 s
    most_bins = max(sizes) // 5 + 1
    for p in previews:
        assert 20 <= len(p.mean_w) < 20 + most_bins
    covered = sum(len(p.mean_w) for p in previews)
    assert 1000 - 20 < covered <= 1000  # all but what waits for the next 0.1 s


def test_custom_bin_and_emit_lengths() -> None:
    dec, previews = collect(10_000.0, bin_s=0.001, emit_s=0.05)  # 10-sample bins, 50 per preview
    feed(dec, ramp(0, 1000), [7])
    assert dec.step == 10
    assert [len(p.mean_w) for p in previews] == [50, 50]
    assert previews[1].mean_w == pytest.approx(SLOPE * (500 + 10 * np.arange(50) + 4.5),
                                               rel=1e-12)


def test_two_megasamples_per_second_bins_of_ten_thousand() -> None:
    fs = 2_000_000.0
    dec, previews = collect(fs)
    assert dec.step == 10_000
    n = 600_000  # 0.3 s
    feed(dec, ramp(0, n), [65_536, 4_096, 123_457])
    dec.flush()
    starts, lows, highs, means = bins(previews)
    assert all(p.step == 10_000 and p.sample_rate_hz == fs for p in previews)
    assert starts.tolist() == list(range(0, n, 10_000))  # 60 bins of 5 ms
    assert len(previews) >= 2 and all(len(p.mean_w) >= 20 for p in previews[:-1])
    assert previews[0].times_s()[0] == pytest.approx(0.0025, rel=1e-12)
    assert lows == pytest.approx(SLOPE * starts, rel=1e-12)
    assert highs == pytest.approx(SLOPE * (starts + 9_999), rel=1e-12)
    assert means == pytest.approx(SLOPE * (starts + 4_999.5), rel=1e-12)


def test_a_gap_flushes_and_bins_restart_at_the_new_id() -> None:
    dec, previews = collect(1000.0)
    # Samples [0, 53): 10 whole bins + 3 samples; then [137, 337) after 84 lost samples.
    feed(dec, ramp(0, 53), [53])
    assert previews == []  # 10 bins: not yet 0.1 s
    feed(dec, ramp(137, 200), [3], first=137)
    assert [(p.first_sample, len(p.mean_w)) for p in previews] == [(0, 10), (137, 20),
                                                                   (237, 20)]
    starts, lows, highs, means = bins(previews)
    # No bin straddles the gap: the first after it starts at 137, and every mean is its own
    # five samples' (a bin holding the 3 stranded samples 50..52 would not be).
    assert 50 not in starts.tolist()
    assert all(s + 5 <= 53 or s >= 137 for s in starts.tolist())
    assert means == pytest.approx(SLOPE * (starts + 2), rel=1e-12)
    assert lows == pytest.approx(SLOPE * starts, rel=1e-12)
    assert highs == pytest.approx(SLOPE * (starts + 4), rel=1e-12)


def test_a_gap_mid_bin_with_nothing_whole_pending_emits_nothing() -> None:
    dec, previews = collect(1000.0)
    dec.add(0, ramp(0, 3))  # part of a bin only
    dec.add(10, ramp(10, 100))  # gap: the 3 samples are dropped, never mixed in
    assert [(p.first_sample, len(p.mean_w)) for p in previews] == [(10, 20)]
    assert previews[0].mean_w == pytest.approx(SLOPE * (10 + 5 * np.arange(20) + 2), rel=1e-12)


def test_a_flat_bins_mean_stays_inside_its_min_and_max() -> None:
    # six samples of 0.7 W: their float mean is 0.7000000000000001, one ulp above the max
    assert np.full(6, 0.7).mean() > 0.7
    dec, previews = collect(1000.0, bin_s=0.006)
    feed(dec, np.full(600, 0.7), [7])
    dec.flush()
    _, lows, highs, means = bins(previews)
    assert len(means) == 100
    assert (lows == 0.7).all() and (highs == 0.7).all() and (means == 0.7).all()


def test_nan_stays_in_its_own_bin() -> None:
    power = ramp(0, 200)
    power[23] = np.nan  # bin 4 = samples [20, 25)
    dec, previews = collect(1000.0)
    feed(dec, power, [7, 13])
    starts, lows, highs, means = bins(previews)
    assert len(starts) == 40
    for values in (lows, highs, means):
        assert math.isnan(values[4])
        assert np.isfinite(np.delete(values, 4)).all()
    keep = np.arange(40) != 4
    assert means[keep] == pytest.approx(SLOPE * (starts[keep] + 2), rel=1e-12)
    assert lows[3] == pytest.approx(SLOPE * 15) and highs[5] == pytest.approx(SLOPE * 29)


def test_empty_chunk_and_flush_with_nothing_are_no_ops() -> None:
    dec, previews = collect(1000.0)
    dec.add(0, np.empty(0))
    dec.flush()
    dec.add(0, ramp(0, 4))
    dec.flush()  # no whole bin yet
    assert previews == []
    dec.add(4, ramp(4, 1))
    dec.flush()
    assert [(p.first_sample, p.mean_w) for p in previews] == [(0, [pytest.approx(2 * SLOPE)])]


def test_preview_is_a_transient_event() -> None:
    p = PowerPreview(first_sample=5, step=5, sample_rate_hz=1000.0, min_w=[1.0], max_w=[2.0],
                     mean_w=[1.5])
    assert p.kind == "power_preview" and p.transient is True
    assert LatencyRun.transient is False


# -- EmonRecorder(preview=) -------------------------------------------------------------------
def step_chunks(fs: float, sizes: list[int]) -> tuple[list[Chunk], np.ndarray]:
    """2 s at 1.8 V: idle 1.2 mW for 0.5 s, active 3.6 mW for 1 s, idle again for 0.5 s."""
    n = int(2 * fs)
    v = 1.8
    power = np.full(n, 1.2e-3)
    power[int(0.5 * fs): int(1.5 * fs)] = 3.6e-3
    current, voltage = power / v, np.full(n, v)
    gpio = np.ones(n, dtype=np.uint8)
    chunks, lo, j = [], 0, 0
    while lo < n:
        hi = min(lo + sizes[j % len(sizes)], n)
        j += 1
        chunks.append(Chunk(lo, current[lo:hi], voltage[lo:hi], gpio[lo:hi]))
        lo = hi
    return chunks, current * voltage


@pytest.mark.parametrize("fs", [1000.0, 100_000.0])
def test_recorder_previews_are_the_streams_power(fs: float) -> None:
    got: list[PowerPreview] = []
    rec = EmonRecorder(fs, preview=got.append)
    chunks, power = step_chunks(fs, [997, 1, 4096, 3])
    for c in chunks:
        rec.on_chunk(c)
    assert rec.error is None
    starts, lows, highs, means = bins(got)
    step = round(fs * BIN_S)
    assert all(p.step == step and p.sample_rate_hz == fs for p in got)
    assert starts.tolist() == list(range(0, len(starts) * step, step))
    covered = len(starts) * step
    assert covered > len(power) - round(fs * EMIT_S) - step  # all but the last < 0.1 s
    # Bins are 5 ms and the levels change on 0.5 s marks: every bin is flat at its level.
    truth = np.where((starts >= 0.5 * fs) & (starts < 1.5 * fs), 3.6e-3, 1.2e-3)
    assert means == pytest.approx(truth, rel=1e-12)
    assert lows == pytest.approx(truth, rel=1e-12) and highs == pytest.approx(truth, rel=1e-12)
    # The concatenated preview's mean is the known power of the samples it covers.
    active = np.count_nonzero(truth == 3.6e-3)
    idle = len(truth) - active
    assert float(np.mean(means)) == pytest.approx((active * 3.6e-3 + idle * 1.2e-3)
                                                  / len(truth), rel=1e-12)
    assert float(np.mean(means)) == pytest.approx(float(np.mean(power[:covered])), rel=1e-12)


def test_recorder_gap_and_nan_reach_the_preview_bins() -> None:
    fs = 1000.0
    got: list[PowerPreview] = []
    rec = EmonRecorder(fs, preview=got.append)
    n, v = 400, 2.0
    current = np.arange(n) * 1e-6 / v  # power = 1e-6 * k: the ramp
    current[312] = np.nan
    volts, gpio = np.full(n, v), np.ones(n, dtype=np.uint8)
    rec.on_chunk(Chunk(0, current[:103], volts[:103], gpio[:103]))
    rec.on_chunk(Chunk(161, current[161:], volts[161:], gpio[161:]))  # 58 lost samples
    assert rec.gaps == [(103, 161)]
    starts, lows, highs, means = bins(got)
    assert starts.tolist() == [*range(0, 100, 5), *range(161, 161 + 47 * 5, 5)]
    bad = starts.tolist().index(311)  # the bin [311, 316) holds the NaN sample
    assert math.isnan(means[bad]) and math.isnan(lows[bad]) and math.isnan(highs[bad])
    keep = np.arange(len(starts)) != bad
    assert means[keep] == pytest.approx(SLOPE * (starts[keep] + 2), rel=1e-12)


def test_recorder_preview_stops_at_stop_after() -> None:
    got: list[PowerPreview] = []
    rec = EmonRecorder(1000.0, stop_after=150, preview=got.append)
    chunks, _ = step_chunks(1000.0, [64])
    for c in chunks:
        rec.on_chunk(c)
    assert rec.samples == 150
    # 64-sample chunks: 12 bins, then 25 (>= 20: out they go), then 5 (waiting); none past 150.
    assert [(p.first_sample, len(p.mean_w)) for p in got] == [(0, 25)]


# -- the run store ----------------------------------------------------------------------------
def test_store_skips_transient_events(tmp_path: Path) -> None:
    store = RunStore.create(tmp_path, "asc", "sim")
    heard: list[str] = []
    bus = EventBus()
    bus.subscribe(store)
    bus.subscribe(lambda e: heard.append(e.kind))
    bus.publish(RunStarted(run_id="r", procedure="asc", device="sim", simulated=True,
                           manifest={"bench": {"name": "b"}}))
    bus.publish(PowerPreview(first_sample=0, step=5, sample_rate_hz=1000.0, min_w=[1e-3],
                             max_w=[2e-3], mean_w=[1.5e-3]))
    bus.publish(LatencyRun(index=0, iterations=800, elapsed_s=10.0, time_per_inference_s=0.0125,
                           inferences_per_s=80.0, timer="emon"))
    assert heard == ["run_started", "power_preview", "latency_run"]
    lines = (store.path / "events.jsonl").read_text().splitlines()
    assert [json.loads(x)["event"] for x in lines] == ["run_started", "latency_run"]
    assert [r["kind"] for r in load_run(store.path).rows] == ["latency_run"]


# -- measure_asc(live=) on the virtual bench --------------------------------------------------
@pytest.mark.slow
def test_measure_asc_live_previews(tmp_path: Path) -> None:
    from rig.run.measure import measure_asc

    text = (REPO / "benches" / "sim.toml").read_text()
    for old, new in [("runs = 5", "runs = 2"), ("min_run_s = 10.0", "min_run_s = 1.0"),
                     ("samples_per_class = 10", "samples_per_class = 1"),
                     ("speed = 50", "speed = 100")]:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "fast.toml"
    path.write_text(text)
    bench = load_bench(path)
    got: list[PowerPreview] = []
    outcome = measure_asc(bench, device="fast", runs_root=tmp_path / "r", live=[got.append])
    assert outcome.status == "complete", outcome.error

    fs = bench.emon.sample_rate_hz
    assert got and all(p.sample_rate_hz == fs and p.step == round(fs * BIN_S) for p in got)
    starts, lows, highs, means = bins(got)
    assert np.all(np.diff(starts) == round(fs * BIN_S))  # no gap: one tiling of the stream
    idle_w, active_w = bench.sim.idle_power_mw * 1e-3, bench.sim.active_power_mw * 1e-3
    # The monitor reports the world's power to 4 digits; before power-on the DUT draws 0 W.
    tol = 1e-3
    assert np.all(lows >= -1e-12) and np.all(highs <= active_w * (1 + tol))
    powered = lows >= idle_w * (1 - tol)
    # The DUT is on from its power-on to its power-off: every bin between is powered. Before
    # and after, the stream runs unpowered for host time x speed 100 (a loaded host's tens of
    # ms are seconds here), so their share of the bins says nothing; the powered span holds at
    # least the timed runs and the idle span (closed form from the bench).
    on = np.flatnonzero(powered)
    assert on.size and powered[on[0]: on[-1] + 1].all()
    o = bench.asc
    assert on.size * BIN_S >= o.runs * o.min_run_s + o.idle_s
    mean = float(np.mean(means[powered]))
    assert idle_w < mean < active_w
    assert means[powered].min() >= idle_w * (1 - tol)
    assert highs.max() == pytest.approx(active_w, rel=tol)  # the runs show up

    # The previews are the stored trace, binned: the same samples (the JLS keeps float32).
    trace = read_trace(outcome.run_path / "traces" / "emon.jls")
    p_trace = trace.current * trace.voltage
    step = got[0].step
    assert starts[-1] + step <= len(p_trace)
    blocks = np.stack([p_trace[s: s + step] for s in starts.tolist()])
    assert means == pytest.approx(blocks.mean(axis=1), rel=1e-6, abs=1e-12)
    assert lows == pytest.approx(blocks.min(axis=1), rel=1e-6, abs=1e-12)
    assert highs == pytest.approx(blocks.max(axis=1), rel=1e-6, abs=1e-12)

    kinds = [json.loads(x)["event"]
             for x in (outcome.run_path / "events.jsonl").read_text().splitlines()]
    assert "power_preview" not in kinds and kinds[-1] == "run_finished"
