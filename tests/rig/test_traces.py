"""Trace files: CSV and JLS v2 round trips, streaming writes, and clear errors."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pyjls
import pytest

from rig.errors import AnalysisError
from rig.traces.analysis import analyze
from rig.traces.files import (
    JLS_CURRENT,
    JLS_GPIO,
    JLS_POWER,
    JLS_VOLTAGE,
    TraceWriter,
    read_trace,
    write_csv_trace,
)


def sample_arrays(n: int = 5000, seed: int = 3) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    current = rng.uniform(1e-6, 5e-3, n)
    voltage = rng.uniform(1.7, 1.9, n)
    gpio = rng.integers(0, 256, n).astype(np.uint8)
    return current, voltage, gpio


# ---- CSV -----------------------------------------------------------------------------------


def test_csv_round_trip_is_exact(tmp_path: Path) -> None:
    current, voltage, gpio = sample_arrays()
    path = tmp_path / "t.csv"
    write_csv_trace(path, current, voltage, gpio)
    assert path.read_text().splitlines()[0] == "current_a,voltage_v,gpio"
    trace = read_trace(path, sample_rate=2000)
    assert trace.sample_rate == 2000.0
    assert np.array_equal(trace.current, current)
    assert np.array_equal(trace.voltage, voltage)
    assert np.array_equal(trace.gpio, gpio) and trace.gpio.dtype == np.uint8
    assert trace.duration_s == 2.5 and len(trace) == 5000
    assert not trace.simulated


def test_csv_column_order_comes_from_the_header(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("# exported by hand\ngpio, note ,voltage_v,current_a\n1,7,1.8,0.5\n0,8,3.3,2\n")
    trace = read_trace(path, sample_rate=10)
    assert trace.current.tolist() == [0.5, 2.0]
    assert trace.voltage.tolist() == [1.8, 3.3]
    assert trace.gpio.tolist() == [1, 0]


def test_csv_missing_columns_are_named_with_the_header_found(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("current,voltage_v\n1,2\n")
    with pytest.raises(AnalysisError) as info:
        read_trace(path, sample_rate=10)
    assert "missing column(s) current_a, gpio" in info.value.message
    assert "header found: current,voltage_v" in info.value.message


def test_csv_needs_a_sample_rate(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    write_csv_trace(path, [1.0], [1.0], [1])
    with pytest.raises(AnalysisError) as info:
        read_trace(path)
    assert info.value.hint == "pass --sample-rate HZ"
    with pytest.raises(AnalysisError, match="positive"):
        read_trace(path, sample_rate=-5)


def test_csv_bad_number_names_the_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("current_a,voltage_v,gpio\n1,1.8,1\n1,x,1\n")
    with pytest.raises(AnalysisError, match=r"line 3, column voltage_v: 'x' is not a number"):
        read_trace(path, sample_rate=10)


def test_csv_gpio_must_be_an_integer_bit_field(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("current_a,voltage_v,gpio\n1,1.8,1\n1,1.8,0.5\n")
    with pytest.raises(AnalysisError, match=r"line 3, column gpio: 0\.5 is not an integer"):
        read_trace(path, sample_rate=10)


def test_csv_without_samples(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("current_a,voltage_v,gpio\n")
    with pytest.raises(AnalysisError, match="no samples"):
        read_trace(path, sample_rate=10)
    path.write_text("")
    with pytest.raises(AnalysisError, match="empty CSV"):
        read_trace(path, sample_rate=10)


# ---- JLS -----------------------------------------------------------------------------------


def write_jls(
    path: Path,
    current: np.ndarray,
    voltage: np.ndarray,
    gpio: np.ndarray,
    first: int = 0,
    parts: int = 4,
    **kw: object,
) -> None:
    bounds = np.linspace(0, len(current), parts + 1).astype(int)
    with TraceWriter(path, 1000, **kw) as w:
        for lo, hi in itertools.pairwise(bounds):
            w.append(first + lo, current[lo:hi], voltage[lo:hi], gpio[lo:hi])


def test_jls_round_trip_in_several_appends(tmp_path: Path) -> None:
    current, voltage, gpio = sample_arrays()
    path = tmp_path / "t.jls"
    write_jls(path, current, voltage, gpio, first=12345, parts=7)
    trace = read_trace(path)
    assert trace.sample_rate == 1000.0
    assert len(trace) == len(current)
    assert np.array_equal(trace.gpio, gpio)
    assert np.array_equal(trace.current, current.astype(np.float32))
    assert np.array_equal(trace.voltage, voltage.astype(np.float32))
    assert trace.current.dtype == np.float64
    assert trace.meta["first_sample_id"] == 12345
    assert trace.meta["format"] == "jls"


def test_new_jls_files_hold_no_power_signal(tmp_path: Path) -> None:
    """Power is current x voltage: derived on read, not stored (9 bytes a sample, not 13)."""
    current, voltage, gpio = sample_arrays(1000)
    path = tmp_path / "t.jls"
    write_jls(path, current, voltage, gpio)
    with pyjls.Reader(str(path)) as r:
        names = {s.name: s for s in r.signals.values() if s.signal_id != 0}
    assert JLS_POWER not in names
    assert sorted(names) == sorted([JLS_CURRENT, JLS_VOLTAGE, JLS_GPIO])
    assert names["current"].units == "A" and names["voltage"].units == "V"
    assert names["gpi0"].data_type == pyjls.DataType.U8


def write_old_style_jls(
    path: Path, current: np.ndarray, voltage: np.ndarray, gpio: np.ndarray, rate: int = 1000
) -> None:
    """A trace as the rig wrote it before power was dropped: signals 1-4 with power at 3."""
    with pyjls.Writer(str(path)) as w:
        w.source_def(1, name="neurobench-rig", vendor="neurobench-rig", model="measured",
                     version="0.1.0", serial_number="")
        signals = (
            (1, "current", pyjls.DataType.F32, "A", current.astype(np.float32)),
            (2, "voltage", pyjls.DataType.F32, "V", voltage.astype(np.float32)),
            (3, "power", pyjls.DataType.F32, "W", (current * voltage).astype(np.float32)),
            (4, "gpi0", pyjls.DataType.U8, "", gpio.astype(np.uint8)),
        )
        for sid, name, dtype, units, _ in signals:
            w.signal_def(sid, 1, pyjls.SignalType.FSR, dtype, rate, name=name, units=units)
        w.user_data(1, {"simulated": False, "sample_rate_hz": rate})
        for sid, *_, data in signals:
            w.fsr(sid, 0, data)


def test_old_jls_files_with_a_power_signal_still_read(tmp_path: Path) -> None:
    current, voltage, gpio = sample_arrays(3000)
    old, new = tmp_path / "old.jls", tmp_path / "new.jls"
    write_old_style_jls(old, current, voltage, gpio)
    write_jls(new, current, voltage, gpio)
    with pyjls.Reader(str(old)) as r:
        assert JLS_POWER in {s.name for s in r.signals.values()}
    a, b = read_trace(old), read_trace(new)
    assert a.sample_rate == b.sample_rate == 1000.0 and len(a) == len(b) == 3000
    assert np.array_equal(a.current, b.current)
    assert np.array_equal(a.voltage, b.voltage)
    assert np.array_equal(a.gpio, b.gpio)
    assert np.array_equal(a.current, current.astype(np.float32))


def test_simulated_flag_is_visible_in_the_file(tmp_path: Path) -> None:
    current, voltage, gpio = sample_arrays(100)
    sim, real = tmp_path / "sim.jls", tmp_path / "real.jls"
    write_jls(sim, current, voltage, gpio, simulated=True, source="virtual bench")
    write_jls(real, current, voltage, gpio)
    with pyjls.Reader(str(sim)) as r:
        source = next(s for s in r.sources.values() if s.source_id == 1)
    assert "SIMULATED" in source.name and source.model == "SIMULATED"
    trace = read_trace(sim)
    assert trace.simulated and trace.meta["user_data"]["simulated"] is True
    assert trace.meta["source"]["name"] == "virtual bench [SIMULATED]"
    real_trace = read_trace(real)
    assert not real_trace.simulated and real_trace.meta["user_data"]["simulated"] is False


def test_annotations_land_on_array_indices(tmp_path: Path) -> None:
    current, voltage, gpio = sample_arrays(300)
    path = tmp_path / "t.jls"
    with TraceWriter(path, 1000) as w:
        w.append(1000, current, voltage, gpio)
        w.annotate(1042, "window 1 start")
    assert read_trace(path).meta["annotations"] == [(42, "window 1 start")]


def test_a_gap_is_nan_with_gpio_held_and_annotated(tmp_path: Path) -> None:
    n = 100
    current, voltage = np.full(n, 1e-3), np.full(n, 1.8)
    gpio = np.ones(n, dtype=np.uint8)
    path = tmp_path / "t.jls"
    with TraceWriter(path, 1000) as w:
        w.append(0, current, voltage, gpio)
        w.append(n + 50, current, voltage, gpio)
        assert w.dropped_samples == 50 and w.samples_written == 2 * n
        with pytest.raises(ValueError, match="overlap"):
            w.append(n, current, voltage, gpio)
    trace = read_trace(path)
    assert len(trace) == 250
    assert np.isnan(trace.current[100:150]).all() and np.isnan(trace.voltage[100:150]).all()
    assert np.isfinite(trace.current[:100]).all() and np.isfinite(trace.current[150:]).all()
    assert (trace.gpio == 1).all()  # held high: a gap must not fake a timestamp edge
    assert trace.meta["annotations"] == [(100, "gap: 50 samples dropped by the instrument")]


def test_fractional_rates_round_trip_exactly(tmp_path: Path) -> None:
    """An N6705's rates (1/(k x 20.48 us)) are never whole hertz; JLS headers only hold those."""
    with TraceWriter(tmp_path / "a.jls", 9765.625) as w:
        w.append(0, np.full(100, 1e-3), np.full(100, 1.8), np.ones(100, dtype=np.uint8))
    trace = read_trace(tmp_path / "a.jls")
    assert trace.sample_rate == 9765.625 and len(trace) == 100
    assert trace.duration_s == pytest.approx(100 / 9765.625, rel=1e-12)


def test_the_instrument_settings_travel_with_the_samples(tmp_path: Path) -> None:
    """The monitor's settings snapshot is in the file's user data (numpy values as numbers,
    anything else JSON cannot hold as text), so a trace says how it was taken on its own; the
    accuracy declaration (kilobytes) stays in the manifest."""
    settings = {"driver": "ppk2", "spike_filter": {"applied": True, "alpha": np.float64(0.18),
                                                   "samples": np.int64(3)},
                "port": Path("/dev/ttyACM0"), "accuracy": {"current_ranges": ["kilobytes"]}}
    with TraceWriter(tmp_path / "a.jls", 1000, instrument=settings) as w:
        w.append(0, np.full(10, 1e-3), np.full(10, 1.8), np.ones(10, dtype=np.uint8))
    with TraceWriter(tmp_path / "b.jls", 1000) as w:
        w.append(0, np.full(10, 1e-3), np.full(10, 1.8), np.ones(10, dtype=np.uint8))
    assert read_trace(tmp_path / "a.jls").meta["user_data"]["instrument"] == {
        "driver": "ppk2", "spike_filter": {"applied": True, "alpha": 0.18, "samples": 3},
        "port": "/dev/ttyACM0"}
    assert "instrument" not in read_trace(tmp_path / "b.jls").meta["user_data"]


def test_writer_refuses_bad_rates_and_use_after_close(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="positive"):
        TraceWriter(tmp_path / "a.jls", 0)
    w = TraceWriter(tmp_path / "b.jls", 1000)
    w.close()
    w.close()
    with pytest.raises(ValueError, match="closed"):
        w.append(0, [1.0], [1.0], [1])


def test_jls_missing_signal_names_the_signals_present(tmp_path: Path) -> None:
    path = tmp_path / "t.jls"
    w = pyjls.Writer(str(path))
    w.source_def(1, name="x", vendor="", model="", version="", serial_number="")
    w.signal_def(1, 1, pyjls.SignalType.FSR, pyjls.DataType.F32, 1000, name="current", units="A")
    w.fsr(1, 0, np.ones(10, dtype=np.float32))
    w.close()
    with pytest.raises(AnalysisError) as info:
        read_trace(path)
    assert "missing signal(s) voltage, gpi0" in info.value.message
    assert "signals present: current" in info.value.message


def test_jls_joulescope_style_one_bit_gpi(tmp_path: Path) -> None:
    """Recordings from the Joulescope UI store gpi[0] as packed 1-bit samples."""
    n = 1000
    path = tmp_path / "ui.jls"
    bits = np.zeros(n, dtype=np.uint8)
    bits[100:900] = 1
    w = pyjls.Writer(str(path))
    w.source_def(1, name="JS220", vendor="Jetperch", model="JS220", version="", serial_number="")
    for sig, name, dt, units in (
        (1, "current", pyjls.DataType.F32, "A"),
        (2, "voltage", pyjls.DataType.F32, "V"),
        (3, "gpi[0]", pyjls.DataType.U1, ""),
    ):
        w.signal_def(sig, 1, pyjls.SignalType.FSR, dt, 1000, name=name, units=units)
    w.fsr(1, 0, np.full(n, 2e-3, dtype=np.float32))
    w.fsr(2, 0, np.full(n, 2.0, dtype=np.float32))
    w.fsr(3, 0, np.packbits(bits, bitorder="little"))
    w.close()
    trace = read_trace(path)
    assert np.array_equal(trace.gpio, bits)
    assert not trace.simulated


def test_jls_sample_rate_argument_must_agree(tmp_path: Path) -> None:
    path = tmp_path / "t.jls"
    write_jls(path, *sample_arrays(10), parts=1)
    assert read_trace(path, sample_rate=1000).sample_rate == 1000.0
    with pytest.raises(AnalysisError, match="recorded at 1000 Hz"):
        read_trace(path, sample_rate=2000)


def test_unknown_missing_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(AnalysisError, match="not found"):
        read_trace(tmp_path / "nope.jls")
    other = tmp_path / "t.parquet"
    other.write_bytes(b"x")
    with pytest.raises(AnalysisError, match=r"unknown trace format '\.parquet'"):
        read_trace(other)
    bad = tmp_path / "bad.jls"
    bad.write_bytes(b"not a jls file at all" * 10)
    with pytest.raises(AnalysisError, match="is not a JLS v2 file"):
        read_trace(bad)


def test_energy_from_a_jls_trace_matches_closed_form(tmp_path: Path) -> None:
    v, p_idle, p_active = 1.8, 1.2e-3, 3.6e-3
    n = 6000
    current = np.full(n, p_idle / v)
    current[1000:3000] = p_active / v
    current[4000:5000] = p_active / v
    gpio = np.ones(n, dtype=np.uint8)
    for edge in (1000, 3000, 4000, 5000):
        gpio[edge : edge + 2] = 0
    path = tmp_path / "run.jls"
    write_jls(path, current, np.full(n, v), gpio, parts=5, simulated=True)
    trace = read_trace(path)
    r = analyze(trace.current, trace.voltage, trace.gpio, trace.sample_rate, idle=(5.5, 6.0))
    assert [w.energy_j for w in r.windows] == pytest.approx([p_active * 2, p_active], rel=1e-6)
    assert r.idle_power_w == pytest.approx(p_idle, rel=1e-6)
    assert math.isclose(r.dynamic_power_w, p_active - p_idle, rel_tol=1e-5)
