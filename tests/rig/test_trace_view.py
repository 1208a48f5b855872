"""The viewer's data layer without Qt: span statistics (the markers and `rig analyze --span`),
envelopes from the file's summaries or raw samples, a run folder's marks, and bad input."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from rig.cli import main
from rig.errors import AnalysisError, ConfigError
from rig.run.view import open_view, run_marks
from rig.traces.analysis import SpanAccumulator, span_samples, span_statistics
from rig.traces.files import write_csv_trace
from tests.trace_samples import FS, V, step_trace, write_jls


# -- span statistics -------------------------------------------------------------------------
def test_span_statistics_closed_form() -> None:
    current, voltage, _ = step_trace([(1e-3, 2.0), (3e-3, 1.0)])
    s = span_statistics(current, voltage, FS, 0, len(current))
    assert s.duration_s == pytest.approx(3.0)
    assert s.energy_j == pytest.approx(1e-3 * 2 + 3e-3 * 1, rel=1e-12)
    assert s.power_mean_w == pytest.approx(5e-3 / 3, rel=1e-12)
    assert s.power_min_w == pytest.approx(1e-3) and s.power_max_w == pytest.approx(3e-3)
    assert s.charge_c == pytest.approx((1e-3 * 2 + 3e-3) / V, rel=1e-12)
    assert s.current_max_a == pytest.approx(3e-3 / V)
    # Only the 3 mW second:
    s = span_statistics(current, voltage, FS, 2000, 3000)
    assert s.energy_j == pytest.approx(3e-3, rel=1e-12) and s.start_s == 2.0 and s.end_s == 3.0


def test_blocks_add_up_to_the_whole() -> None:
    rng = np.random.default_rng(1)
    current = rng.uniform(0, 1e-2, 10_001).astype(np.float32)
    voltage = rng.uniform(1.7, 1.9, 10_001).astype(np.float32)
    whole = span_statistics(current, voltage, FS, 0, len(current))
    acc = SpanAccumulator(FS, 0)
    for lo in range(0, len(current), 777):
        acc.add(current[lo : lo + 777], voltage[lo : lo + 777])
    parts = acc.result()
    for key, value in whole.to_dict().items():
        assert getattr(parts, key) == pytest.approx(value, rel=1e-12), key


def test_lost_samples_make_every_figure_nan() -> None:
    current, voltage, _ = step_trace([(1e-3, 1.0)])
    current[10:20] = np.nan
    s = span_statistics(current, voltage, FS, 0, len(current))
    assert s.lost_samples == 10 and math.isnan(s.energy_j) and math.isnan(s.current_min_a)


def test_span_samples_bounds() -> None:
    assert span_samples(0.5, 1.5, FS, 3000) == (500, 1500)
    assert span_samples(-1, 10, FS, 3000) == (0, 3000)
    with pytest.raises(AnalysisError, match="START must be before END"):
        span_samples(2, 1, FS, 3000)
    with pytest.raises(AnalysisError, match="holds no sample"):
        span_samples(5, 6, FS, 3000)


def test_analyze_span_cli_equals_the_viewers_numbers(tmp_path: Path, capsys) -> None:
    current, voltage, gpio = step_trace([(1e-3, 2.0), (3e-3, 1.0)])
    path = write_jls(tmp_path / "t.jls", current, voltage, gpio)
    assert main(["analyze", str(path), "--span", "1.5:2.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    view = open_view(path)
    try:
        stats = view.source.span_stats(1.5, 2.5)
    finally:
        view.close()
    for key, value in stats.to_dict().items():
        assert out[key] == value, key
    # float32 storage: 0.5 s at 1 mW and 0.5 s at 3 mW.
    assert out["energy_j"] == pytest.approx(0.5e-3 + 1.5e-3, rel=1e-6)
    assert main(["analyze", str(path), "--span", "2:1"]) == 2


# -- envelopes -----------------------------------------------------------------------------------
def test_envelope_from_summaries_and_raw(tmp_path: Path) -> None:
    current, voltage, gpio = step_trace([(1e-3, 20.0), (3e-3, 20.0)], fs=10_000)
    path = write_jls(tmp_path / "t.jls", current, voltage, gpio, fs=10_000)
    view = open_view(path)
    try:
        src = view.source
        assert src.length == 400_000 and src.sample_rate == 10_000
        env = src.envelope("power", 0, 40, 400)
        assert not env.raw and len(env.t) <= 400
        lo, hi = env.t < 19.9, env.t > 20.1
        assert np.allclose(env.mean[lo], 1e-3, rtol=1e-6)
        assert np.allclose(env.max[hi], 3e-3, rtol=1e-6)
        edge = np.flatnonzero((env.t <= 20.0) & (env.t + env.step_s > 20.0))
        assert env.min[edge] == pytest.approx(1e-3, rel=1e-6)
        assert env.max[edge] == pytest.approx(3e-3, rel=1e-6)
        raw = src.envelope("current", 19.995, 20.005, 400)
        assert raw.raw and len(raw.t) <= 102 and raw.step_s == pytest.approx(1e-4)
        assert np.array_equal(raw.min, raw.max)
        # New files carry no power signal: power is current x voltage on read.
        assert src.read("power", 0, 5) == pytest.approx(current[:5] * voltage[:5], rel=1e-6)
    finally:
        view.close()


def test_csv_trace_and_export_round_trip(tmp_path: Path) -> None:
    current, voltage, gpio = step_trace([(1e-3, 1.0), (2e-3, 1.0)])
    gpio[500] = 0
    write_csv_trace(tmp_path / "t.csv", current, voltage, gpio)
    view = open_view(tmp_path / "t.csv", sample_rate=FS)
    try:
        assert view.edges_s == pytest.approx([0.5])
        env = view.source.envelope("power", 0, 2, 100)
        assert env.mean[:45] == pytest.approx(1e-3) and env.mean[-45:] == pytest.approx(2e-3)
        n = view.source.export_csv(tmp_path / "cut.csv", 0.9, 1.1)
    finally:
        view.close()
    assert n == 200
    again = open_view(tmp_path / "cut.csv", sample_rate=FS)
    try:
        s = again.source.span_stats(0, 0.2)
    finally:
        again.close()
    assert s.energy_j == pytest.approx(0.1 * 1e-3 + 0.1 * 2e-3, rel=1e-6)


# -- run folders and bad input -------------------------------------------------------------------
def test_run_marks_are_the_shown_numbers() -> None:
    show = {"measurements": {
        "idle_spans": [{"start_sample": 100, "end_sample": 300, "duration_s": 0.2,
                        "power_w": 1e-3}],
        "energy_windows": [{"index": 0, "start_sample": 400, "end_sample": 1400,
                            "duration_s": 1.0, "mean_power_w": 3e-3, "energy_j": 3e-3,
                            "energy_per_inference_j": 3e-5},
                           {"index": 1, "start_sample": 0, "end_sample": 0, "duration_s": 10,
                            "mean_power_w": 1, "energy_j": 10,
                            "energy_per_inference_j": 0.1}]}}  # rails: no samples, no mark
    idle, window = run_marks(show, 1000.0)
    assert (idle.label, idle.start_s, idle.end_s, idle.energy_j) == ("idle", 0.1, 0.3, 2e-4)
    assert (window.label, window.start_s, window.end_s) == ("run 1", 0.4, 1.4)
    assert window.energy_per_inference_j == 3e-5


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "nope.jls", "does not exist"),
    (lambda d: (d / "t.txt").write_text("x") and d / "t.txt", "not a .jls or .csv"),
    (lambda d: (d / "e.csv").write_text("current_a,voltage_v,gpio\n") and d / "e.csv",
     "no samples"),
    (lambda d: (d / "run").mkdir() or d / "run", "not a run folder"),
])
def test_bad_input_is_one_clear_error(tmp_path: Path, make, message) -> None:
    path = make(tmp_path)
    with pytest.raises((ConfigError, AnalysisError), match=message):
        open_view(path, sample_rate=FS)


def test_truncated_jls_and_run_without_trace(tmp_path: Path) -> None:
    current, voltage, gpio = step_trace([(1e-3, 5.0)])
    path = write_jls(tmp_path / "t.jls", current, voltage, gpio)
    cut = tmp_path / "cut.jls"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    try:
        view = open_view(cut)
    except AnalysisError as exc:
        assert "JLS" in str(exc)
    else:  # pyjls may recover what a cut file still holds: then it must hold no more
        try:
            assert view.source.length <= len(current)
        finally:
            view.close()
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"procedure": "asc"}))
    (run / "events.jsonl").write_text("")
    with pytest.raises(ConfigError, match="run folder without a trace"):
        open_view(run)
    shutil.rmtree(run)


def test_long_spans_use_the_summaries_and_say_so(tmp_path: Path, monkeypatch) -> None:
    import rig.traces.view as tv

    current, voltage, gpio = step_trace([(1e-3, 3.3), (3e-3, 6.7)], fs=10_000)
    path = write_jls(tmp_path / "t.jls", current, voltage, gpio, fs=10_000)
    view = open_view(path)
    try:
        exact = view.source.span_stats(0.05, 9.95)
        monkeypatch.setattr(tv, "SPAN_RAW_MAX", 1000)
        quick = view.source.span_stats(0.05, 9.95)
    finally:
        view.close()
    assert exact.exact and not quick.exact
    assert quick.samples == exact.samples and quick.start_s == exact.start_s
    for key in ("energy_j", "charge_c", "power_mean_w", "current_min_a", "current_max_a",
                "power_min_w", "power_max_w"):
        assert getattr(quick, key) == pytest.approx(getattr(exact, key), rel=1e-6), key
    assert quick.energy_j == pytest.approx(1e-3 * 3.25 + 3e-3 * 6.65, rel=1e-6)


def test_rig_analyze_refuses_a_halved_jls(tmp_path: Path, capsys) -> None:
    current, voltage, gpio = step_trace([(1e-3, 5.0)])
    path = write_jls(tmp_path / "t.jls", current, voltage, gpio)
    cut = tmp_path / "cut.jls"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert main(["analyze", str(cut), "--span", "0:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is truncated" in err[0]
