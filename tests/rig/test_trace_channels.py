"""Issue 25 item 1: a trace stores a voltage channel only where the monitor measures one.

Where the supply is set (an LPM01A, a PPK2) the file holds current and gpi0 only, with the set
value and its source in the user data; every reader (read_trace, the recorder's live figures,
the viewer's data layer) gives the same numbers as for a file that stored that voltage, and an
old-style file with a voltage signal still reads unchanged.
"""

from __future__ import annotations

import numpy as np
import pyjls
import pytest

from drivers.emon.base import Chunk
from rig.run.recording import EmonRecorder
from rig.traces.analysis import window_energies
from rig.traces.files import JLS_VOLTAGE, TraceWriter, read_trace
from rig.traces.view import JlsSource

FS = 100_000.0
SET = (1.8, "set: LPM01A volt 1800m")


def _samples(n: int, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    current = rng.uniform(1e-4, 5e-3, n)  # float64, not float32-representable
    gpio = np.ones(n, np.uint8)
    gpio[[n // 10, n // 2, 9 * n // 10]] = 0
    return current, gpio


def _signal_names(path) -> set[str]:
    reader = pyjls.Reader(str(path))
    try:
        return {s.name for s in reader.signals.values() if s.signal_id != 0}
    finally:
        reader.close()


def _write(path, current, gpio, set_voltage=None, chunk=10_000):
    voltage = np.full(len(current), 1.8)
    with TraceWriter(path, FS, set_voltage=set_voltage) as w:
        for lo in range(0, len(current), chunk):
            w.append(lo, current[lo:lo + chunk], voltage[lo:lo + chunk], gpio[lo:lo + chunk])
    return path


def test_a_set_voltage_trace_stores_current_and_gpio_only_at_most_5_3_bytes_per_sample(
        tmp_path) -> None:
    """Bytes per sample of a long trace: the size's slope between 1 M and 3 M samples (the
    file's fixed part, a few KiB of header and index, drops out)."""
    short, long = 1_000_000, 3_000_000
    current, gpio = _samples(long)
    sizes = {}
    for kind, set_voltage in (("measured", None), ("set", SET)):
        for n in (short, long):
            path = _write(tmp_path / f"{kind}{n}.jls", current[:n], gpio[:n], set_voltage)
            sizes[kind, n] = path.stat().st_size
    assert JLS_VOLTAGE in _signal_names(tmp_path / f"measured{short}.jls")
    assert JLS_VOLTAGE not in _signal_names(tmp_path / f"set{short}.jls")
    per_sample = {kind: (sizes[kind, long] - sizes[kind, short]) / (long - short)
                  for kind in ("measured", "set")}
    # f32 current + u8 gpi0 = 5 raw bytes (+ f32 voltage = 9), plus the JLS summaries.
    assert 5.0 < per_sample["set"] <= 5.3
    assert 9.0 < per_sample["measured"] <= 9.3


def test_read_trace_gives_the_set_voltage_and_its_source(tmp_path) -> None:
    current, gpio = _samples(50_000)
    path = _write(tmp_path / "set.jls", current, gpio, set_voltage=SET)
    trace = read_trace(path)
    assert len(trace.voltage) == len(trace) == 50_000
    assert np.all(trace.voltage == 1.8)
    assert trace.voltage_set == {"volts": 1.8, "source": "set: LPM01A volt 1800m"}
    assert trace.meta["user_data"]["voltage_source"] == "set: LPM01A volt 1800m"
    np.testing.assert_array_equal(trace.current, current.astype(np.float32))
    np.testing.assert_array_equal(trace.gpio, gpio)


def test_an_old_style_trace_with_a_voltage_signal_reads_unchanged(tmp_path) -> None:
    current, gpio = _samples(50_000)
    voltage = np.linspace(1.7, 1.9, len(current))  # measured: every sample its own value
    path = tmp_path / "old.jls"
    with TraceWriter(path, FS) as w:
        w.append(0, current, voltage, gpio)
    trace = read_trace(path)
    assert trace.voltage_set is None
    np.testing.assert_array_equal(trace.voltage, voltage.astype(np.float32))
    np.testing.assert_array_equal(trace.current, current.astype(np.float32))


def test_a_gap_in_a_set_voltage_trace_is_nan_current_and_nan_energy(tmp_path) -> None:
    current, gpio = _samples(30_000)
    path = tmp_path / "gap.jls"
    with TraceWriter(path, FS, set_voltage=SET) as w:
        w.append(0, current[:10_000], None, gpio[:10_000])
        w.append(20_000, current[20_000:], None, gpio[20_000:])
    trace = read_trace(path)
    assert np.isnan(trace.current[10_000:20_000]).all()
    assert not np.isnan(trace.current[:10_000]).any()
    [inside] = window_energies(trace.current, trace.voltage, np.array([[5_000, 25_000]]), FS)
    assert np.isnan(inside)


def test_the_recorder_integrates_what_a_set_voltage_trace_reproduces(tmp_path) -> None:
    """Live figures = the file's figures to 1e-12 (`rig analyze RUN_FOLDER` needs 1e-9), and
    the window energy is the closed-form sum of float32 current x the set voltage."""
    n = 200_000
    current, gpio = _samples(n)
    voltage = np.full(n, 1.8)
    rec = EmonRecorder(FS, tmp_path / "t.jls", set_voltage=SET)
    for lo in range(0, n, 7_001):
        hi = min(lo + 7_001, n)
        rec.on_chunk(Chunk(lo, current[lo:hi], voltage[lo:hi], gpio[lo:hi]))
    rec.close()
    assert rec.error is None
    a, b = n // 10, n // 2
    assert rec.edges()[:2] == [a, b]
    assert JLS_VOLTAGE not in _signal_names(tmp_path / "t.jls")
    trace = read_trace(tmp_path / "t.jls")
    [energy] = window_energies(trace.current, trace.voltage, np.array([[a, b]]), FS)
    exact = float(np.sum(current[a:b].astype(np.float32).astype(np.float64) * 1.8)) / FS
    assert energy == pytest.approx(exact, rel=1e-12)
    live = rec.mean_power(a, b) * (b - a) / FS
    assert live == pytest.approx(energy, rel=1e-12)


def test_the_viewer_shows_voltage_and_power_of_a_set_voltage_trace(tmp_path) -> None:
    n = 256_000
    current, gpio = _samples(n)
    path = _write(tmp_path / "set.jls", current, gpio, set_voltage=SET)
    source = JlsSource(path)
    try:
        assert source.has("voltage") and source.has("power")
        assert not any("voltage" in m or "power" in m for m in source.missing)
        np.testing.assert_array_equal(source.read("voltage", 100, 200), np.full(100, 1.8))
        power = source.read("power", 100, 200)
        stored = current[100:200].astype(np.float32).astype(np.float64)
        np.testing.assert_allclose(power, stored * 1.8, rtol=1e-15)
        env = source.envelope("power", 0.0, n / FS, 125)  # 2048 samples a bin
        assert not env.raw
        # From the summaries: each bin's power is 1.8 V x its current mean, min and max.
        whole = current.astype(np.float32).astype(np.float64) * 1.8
        incr = round(env.step_s * FS)
        bins = whole[: incr * len(env.mean)].reshape(len(env.mean), incr)
        np.testing.assert_allclose(env.mean, bins.mean(axis=1), rtol=1e-6)
        np.testing.assert_allclose(env.min, bins.min(axis=1), rtol=1e-6)
        np.testing.assert_allclose(env.max, bins.max(axis=1), rtol=1e-6)
        venv = source.envelope("voltage", 0.0, n / FS, 64)
        assert np.all(venv.mean == 1.8) and np.all(venv.min == 1.8) and np.all(venv.max == 1.8)
    finally:
        source.close()


def test_rig_analyze_reads_a_set_voltage_trace(tmp_path, capsys) -> None:
    """`rig analyze trace.jls --span`: energy = float32 current x the set voltage x time."""
    import json

    from rig.cli import main

    n = 30_000
    current = np.full(n, 1e-3)
    current[10_000:20_000] = 5e-3
    path = tmp_path / "set.jls"
    with TraceWriter(path, 1000, set_voltage=SET) as w:
        w.append(0, current, None, np.ones(n, np.uint8))
    assert main(["analyze", str(path), "--span", "10:20", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    want = float(np.float32(5e-3)) * 1.8 * 10.0
    assert out["samples"] == 10_000 and out["exact"] is True
    assert out["energy_j"] == pytest.approx(want, rel=1e-12)
    assert out["power_mean_w"] == pytest.approx(want / 10.0, rel=1e-12)
