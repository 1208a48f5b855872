"""The live recorder on float32 chunks: products and running energy in float64, and the preview
still gets every chunk's products."""

from __future__ import annotations

import math

import numpy as np

from drivers.emon.base import Chunk
from rig.run.live_power import PowerPreview
from rig.run.recording import EmonRecorder

FS = 100_000.0


def test_float32_chunks_integrate_to_the_exact_float64_products() -> None:
    rng = np.random.default_rng(11)
    n = 200_000
    current = rng.uniform(1e-4, 5e-3, n).astype(np.float32)
    voltage = rng.uniform(1.7, 1.9, n).astype(np.float32)
    gpio = np.ones(n, np.uint8)
    gpio[10_000:10_003] = 0
    gpio[150_000:150_002] = 0
    previews: list[PowerPreview] = []
    rec = EmonRecorder(FS, preview=previews.append)
    for lo in range(0, n, 7_919):
        hi = min(lo + 7_919, n)
        rec.on_chunk(Chunk(lo, current[lo:hi], voltage[lo:hi], gpio[lo:hi]))
    rec.close()
    assert rec.error is None
    exact = (current.astype(np.float64) * voltage.astype(np.float64)).tolist()
    assert rec.edges() == [10_000, 150_000]
    window = math.fsum(exact[10_000:150_000]) / 140_000
    # float32 products (each rounded by up to 6e-8) would be off by ~1e-11 here.
    assert abs(rec.mean_power(10_000, 150_000) - window) / window < 1e-13
    assert abs(rec.energy_j - math.fsum(exact) / FS) / rec.energy_j < 1e-13
    # The preview decimator still reads the products from the recorder's scratch.
    step = previews[0].step
    means = np.concatenate([p.mean_w for p in previews])
    first = previews[0].first_sample
    want = np.array([math.fsum(exact[first + k * step : first + (k + 1) * step]) / step
                     for k in range(len(means))])
    np.testing.assert_allclose(means, want, rtol=1e-12, atol=0)


def test_float64_chunks_with_a_trace_integrate_what_the_file_stores(tmp_path) -> None:
    """A monitor giving float64 samples (the LPM01A's 4-digit readings): the trace stores them
    as float32, so the recorder integrates those float32 values; the window's power read back
    from the file is then the run's to 1e-12 (`rig analyze RUN_FOLDER` needs 1e-9)."""
    from rig.traces.analysis import window_energies
    from rig.traces.files import read_trace

    rng = np.random.default_rng(5)
    n = 50_000
    current = np.round(rng.uniform(1e-4, 5e-3, n), 7)  # not float32-representable
    voltage = np.full(n, 1.8)
    gpio = np.ones(n, np.uint8)
    gpio[[1_000, 40_000]] = 0
    rec = EmonRecorder(FS, tmp_path / "t.jls")
    for lo in range(0, n, 4_999):
        hi = min(lo + 4_999, n)
        rec.on_chunk(Chunk(lo, current[lo:hi], voltage[lo:hi], gpio[lo:hi]))
    rec.close()
    assert rec.error is None and rec.edges() == [1_000, 40_000]
    trace = read_trace(tmp_path / "t.jls")
    [energy] = window_energies(trace.current, trace.voltage, np.array([[1_000, 40_000]]), FS)
    from_file = energy * FS / 39_000
    assert abs(rec.mean_power(1_000, 40_000) - from_file) / from_file < 1e-12
