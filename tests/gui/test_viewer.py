"""The energy viewer offscreen: marker statistics against the analysis and the closed form, a run
folder's marks and list, missing channels, bad input at the terminal, navigation by keys,
summaries instead of the whole trace, and `rig view --png`."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import shutil
from pathlib import Path

import numpy as np
from PySide6 import QtCore, QtGui, QtWidgets

from rig.cli import main
from rig.run.view import open_view
from rig.traces.analysis import span_statistics
from rig.traces.files import write_csv_trace
from tests.requires import LazyModule
from tests.trace_samples import FS, V, step_trace, write_jls

# pyqtgraph (1-2 s cold) only when a test here runs, not in every xdist worker at collection.
gui_viewer = LazyModule("gui.viewer")

STAT_FIELDS = ("duration_s", "current_mean_a", "current_min_a", "current_max_a", "power_mean_w",
               "power_min_w", "power_max_w", "charge_c", "energy_j")


@pytest.fixture
def open_window(qtbot):
    """Open a trace in a ViewerWindow; the window and the trace are closed after the test."""
    opened = []

    def make(path: Path, sample_rate: float | None = None, **kwargs) -> gui_viewer.ViewerWindow:
        view = open_view(path, sample_rate=sample_rate)
        window = gui_viewer.ViewerWindow(view, **kwargs)
        qtbot.addWidget(window)
        window.resize(1200, 800)
        window.show()
        qtbot.waitExposed(window)
        window.refresh_now()
        opened.append(view)
        return window

    yield make
    for view in opened:
        view.close()


@pytest.fixture
def steps(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """1 mW for 2 s then 3 mW for 1 s at 1 kHz and 1.8 V (JLS), with its arrays."""
    current, voltage, gpio = step_trace([(1e-3, 2.0), (3e-3, 1.0)])
    return write_jls(tmp_path / "steps.jls", current, voltage, gpio), current, voltage


# -- markers -------------------------------------------------------------------------------------
def test_marker_stats_equal_the_analysis_and_the_closed_form(open_window, steps) -> None:
    path, current, voltage = steps
    window = open_window(path)
    window.set_markers(2.5, 0.5)  # either order: the span is the sorted pair
    stats = window.marker_stats()
    assert stats is not None and window.markers() == (2.5, 0.5)
    # The file holds float32: compare with the analysis on the same float32 samples...
    f32 = span_statistics(current.astype(np.float32), voltage.astype(np.float32), FS, 500, 2500)
    for key in STAT_FIELDS:
        assert getattr(stats, key) == pytest.approx(getattr(f32, key), rel=1e-12), key
    assert stats.samples == 2000 and stats.start_s == 0.5 and stats.end_s == 2.5
    # ...and with the closed form: 1.5 s at 1 mW, then 0.5 s at 3 mW.
    closed = {"duration_s": 2.0, "energy_j": 1.5e-3 + 1.5e-3, "power_mean_w": 3e-3 / 2,
              "power_min_w": 1e-3, "power_max_w": 3e-3, "current_min_a": 1e-3 / V,
              "current_max_a": 3e-3 / V, "charge_c": 3e-3 / V, "current_mean_a": 1.5e-3 / V}
    for key, value in closed.items():
        assert getattr(stats, key) == pytest.approx(value, rel=1e-6), key
    # The panel shows those numbers.
    energy = gui_viewer.si_format(stats.energy_j, "J")
    assert window._stat_labels["energy"].text() == energy == "3.000 mJ"
    assert window._stat_labels["p_mean"].text() == "1.500 mW"
    assert window.marker_message() == ""


def test_markers_start_inside_the_view_and_move_together(open_window, qtbot,
                                                         steps) -> None:
    window = open_window(steps[0])
    a, b = window.markers()
    assert (a, b) == pytest.approx((1.0, 2.0))  # 1/3 and 2/3 of the 3 s view
    assert window.marker_stats().energy_j == pytest.approx(1e-3, rel=1e-6)
    # Dragging one line moves its mirror on every plot, and the stats follow.
    first = window._marker_lines[-1][1]
    first.setValue(2.75)
    first.sigPositionChangeFinished.emit(first)
    assert window.markers() == (1.0, 2.75)
    assert {pair[1].value() for pair in window._marker_lines} == {2.75}
    assert window.marker_stats().energy_j == pytest.approx(1e-3 + 0.75 * 3e-3, rel=1e-6)
    # While a short span is dragged, the numbers follow without waiting for the release.
    first.setValue(2.5)
    qtbot.waitUntil(lambda: window.marker_stats().end_s == 2.5, timeout=2000)
    assert window.marker_stats().energy_j == pytest.approx(1e-3 + 0.5 * 3e-3, rel=1e-6)


def test_an_empty_span_says_why_in_the_panel(open_window, steps) -> None:
    window = open_window(steps[0])
    window.set_markers(1.2, 1.2)
    assert window.marker_stats() is None
    assert "START must be before END" in window.marker_message()
    assert window.stats_message.isVisibleTo(window)
    window.set_markers(1.0, 1.5)  # and it recovers
    assert window.marker_stats() is not None and window.marker_message() == ""


def test_a_span_read_from_summaries_says_so(open_window, steps, monkeypatch) -> None:
    import rig.traces.view

    monkeypatch.setattr(rig.traces.view, "SPAN_RAW_MAX", 100)  # as for hours at 1 MS/s
    window = open_window(steps[0])
    window.set_markers(0.0, 3.0)
    stats = window.marker_stats()
    assert stats is not None and not stats.exact
    assert stats.energy_j == pytest.approx(5e-3, rel=1e-6)  # a steady supply: still right
    assert "summaries" in window.marker_message()


def test_exports_of_the_marked_range(open_window, steps, tmp_path: Path) -> None:
    window = open_window(steps[0])
    window.set_markers(1.9, 2.1)
    assert window.export_csv(tmp_path / "cut.csv") == 200
    again = open_view(tmp_path / "cut.csv", sample_rate=FS)
    try:
        energy = again.source.span_stats(0, 0.2).energy_j
    finally:
        again.close()
    assert energy == pytest.approx(window.marker_stats().energy_j, rel=1e-6)
    png = window.export_png(tmp_path / "v.png")
    assert QtGui.QImage(str(png)).size() == window.size()


# -- a run folder --------------------------------------------------------------------------------
def test_run_folder_marks_list_and_row_click(open_window, sim_run, qtbot) -> None:
    run, show = sim_run
    window = open_window(run)
    meas = show["measurements"]
    idle, windows = meas["idle_spans"], meas["energy_windows"]
    assert len(windows) == 5 and len(idle) == 1
    si = gui_viewer.si_format
    expected = [("idle", si(i["duration_s"], "s"), si(i["power_w"], "W"),
                 si(i["power_w"] * i["duration_s"], "J"), "—") for i in idle]
    expected += [(f"run {w['index'] + 1}", si(w["duration_s"], "s"), si(w["mean_power_w"], "W"),
                  si(w["energy_j"], "J"), si(w["energy_per_inference_j"], "J")) for w in windows]
    assert window.mark_rows() == expected

    # One shaded region per mark on every plot, exactly over the mark's samples.
    import pyqtgraph as pg

    fs, first = window.source.sample_rate, window.source.first_sample_id
    spans = sorted(((i["start_sample"] - first) / fs, (i["end_sample"] - first) / fs)
                   for i in idle + windows)
    for channel in window.shown_channels():
        regions = sorted(item.getRegion() for item in window.plot_item(channel).items
                         if isinstance(item, pg.LinearRegionItem))
        assert np.allclose(regions, spans, rtol=0, atol=1e-9), channel
    labels = [item.toPlainText() for item in window.plot_item("power").items
              if isinstance(item, pg.TextItem)]
    assert sorted(labels) == sorted(row[0] for row in expected)
    assert "SIMULATED" in window.windowTitle() and "SIMULATED" in window.title_label.text()

    # Clicking a row zooms to that window with a small margin.
    w3 = windows[2]
    a, b = (w3["start_sample"] - first) / fs, (w3["end_sample"] - first) / fs
    rect = window.marks_table.visualItemRect(window.marks_table.item(3, 1))
    qtbot.mouseClick(window.marks_table.viewport(), QtCore.Qt.MouseButton.LeftButton,
                     pos=rect.center())
    x0, x1 = window.visible_range()
    assert x0 < a < b < x1 and (x1 - x0) == pytest.approx((b - a) * 1.1, rel=1e-6)
    window.marks_table.selectRow(0)  # the idle span, by selection (keyboard navigation)
    x0, x1 = window.visible_range()
    assert x0 < (idle[0]["start_sample"] - first) / fs < (idle[0]["end_sample"] - first) / fs < x1
    # Markers on a window's edges read the window's energy (same samples, same sums).
    window.set_markers(a, b)
    assert window.marker_stats().energy_j == pytest.approx(w3["energy_j"], rel=1e-6)


def test_timestamp_edges_drawn_on_the_gpio_plot(open_window, sim_run) -> None:
    window = open_window(sim_run[0])
    x, _ = window._edge_item.getData()
    assert len(x) == 2 * len(window.view.edges_s)  # every edge visible at full view
    window.set_range(0.0, window.view.marks[0].end_s + 0.01)
    window.refresh_now()
    x, _ = window._edge_item.getData()
    assert set(np.unique(x)) == set(window.view.edges_s[:2])


# -- channels ------------------------------------------------------------------------------------
def test_jls_without_gpio_shows_current_voltage_power_and_says_so(open_window,
                                                                  tmp_path: Path) -> None:
    import pyjls

    path = tmp_path / "cv.jls"
    current = np.full(3000, 2e-3, dtype=np.float32)
    voltage = np.full(3000, 3.3, dtype=np.float32)
    with pyjls.Writer(str(path)) as w:
        w.source_def(1, name="bench", vendor="x", model="y", version="1", serial_number="1")
        for sig, name, units in ((1, "current", "A"), (2, "voltage", "V")):
            w.signal_def(sig, 1, pyjls.SignalType.FSR, pyjls.DataType.F32, 1000, name=name,
                         units=units)
        w.fsr(1, 0, current)
        w.fsr(2, 0, voltage)
    window = open_window(path)
    assert window.shown_channels() == ["current", "voltage", "power"]
    notes = window.notes_label.text()
    assert window.notes_label.isVisibleTo(window) and "no GPIO signal" in notes
    assert "SIMULATED" not in window.windowTitle()
    assert window.marker_stats().power_mean_w == pytest.approx(6.6e-3, rel=1e-6)
    env = window.drawn_envelope("power")
    assert np.nanmax(env.max) == pytest.approx(6.6e-3, rel=1e-6)


# -- bad input at the terminal ------------------------------------------------------------------
def _truncated(tmp: Path) -> Path:
    current, voltage, gpio = step_trace([(1e-3, 20.0)])
    whole = write_jls(tmp / "whole.jls", current, voltage, gpio)
    cut = tmp / "cut.jls"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    return cut


def _empty_csv(tmp: Path) -> Path:
    path = tmp / "empty.csv"
    path.write_text("current_a,voltage_v,gpio\n")
    return path


def _run_without_trace(tmp: Path, run: Path) -> Path:
    copy = tmp / "run"
    shutil.copytree(run, copy)
    shutil.rmtree(copy / "traces")
    return copy


@pytest.mark.parametrize("make, words", [
    (lambda tmp, run: _truncated(tmp), "truncated"),
    (lambda tmp, run: _empty_csv(tmp), "no samples"),
    (lambda tmp, run: _run_without_trace(tmp, run), "without a trace"),
    (lambda tmp, run: tmp / "missing.jls", "does not exist"),
], ids=["truncated-jls", "empty-csv", "run-without-trace", "missing-file"])
def test_bad_input_is_one_line_at_the_terminal(tmp_path: Path, sim_run, capsys, make,
                                               words) -> None:
    path = make(tmp_path, sim_run[0])
    out = tmp_path / "out.png"
    assert main(["view", str(path), "--sample-rate", "1000", "--png", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rig: error: ") and words in err
    assert "Traceback" not in err and not out.exists()


def _flipped_data_byte(tmp: Path, run: Path) -> Path:
    """A copy of the run folder whose trace has one byte flipped inside a chunk of samples:
    pyjls opens the file (the damage is not in what it reads on open), and refuses the chunk
    (CRC) only when the viewer reads those samples."""
    from rig.errors import AnalysisError
    from rig.traces.files import open_jls_reader
    from rig.traces.integrity import check_jls_intact

    copy = Path(shutil.copytree(run, tmp / "flipped"))
    trace = copy / "traces" / "emon.jls"
    whole = trace.read_bytes()
    for k in range(len(whole) // 5, len(whole) // 2, len(whole) // 50):
        data = bytearray(whole)
        data[k] ^= 0x01
        trace.write_bytes(bytes(data))
        try:
            open_jls_reader(trace)[0].close()
        except AnalysisError:
            continue
        with pytest.raises(AnalysisError, match="MESSAGE_INTEGRITY"):
            check_jls_intact(trace)
        return copy
    pytest.fail("no byte of the trace's samples found to flip")


@pytest.mark.parametrize("what", ["run", "trace"])
def test_a_flipped_byte_in_the_samples_is_one_line_at_the_terminal(
        tmp_path: Path, sim_run, capfd, what: str) -> None:
    """Issue 38: exit 1 with a traceback (`RuntimeError: rd_fsr MESSAGE_INTEGRITY[9]`) and
    pyjls's own lines before; now one line naming the file and what is wrong, exit 2."""
    run = _flipped_data_byte(tmp_path, sim_run[0])
    trace = run / "traces" / "emon.jls"
    out = tmp_path / "out.png"
    assert main(["view", str(run if what == "run" else trace), "--png", str(out)]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"rig: error: cannot read JLS file {trace}: ")
    assert "The message integrity check failed" in err and "crc32 mismatch" in err
    assert "Traceback" not in err and not out.exists()


@pytest.mark.parametrize("option, value", [("--range", "2:1"), ("--range", "a:b"),
                                            ("--range", "5"), ("--size", "800"),
                                            ("--size", "10x10"), ("--png", "x.jpg")])
def test_bad_options_name_the_option(steps, capsys, option, value) -> None:
    assert main(["view", str(steps[0]), option, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and option.lstrip("-") in err


# -- navigation ----------------------------------------------------------------------------------
def test_keys_zoom_pan_and_fit(open_window, qtbot, tmp_path: Path) -> None:
    current, voltage, gpio = step_trace([(1e-3, 50.0), (2e-3, 50.0)])
    window = open_window(write_jls(tmp_path / "t.jls", current, voltage, gpio))
    assert window.visible_range() == pytest.approx((0.0, 100.0))
    window.set_range(20.0, 60.0)
    key = QtCore.Qt.Key
    for k, expected in [(key.Key_Plus, (30.0, 50.0)), (key.Key_Minus, (20.0, 60.0)),
                        (key.Key_Equal, (30.0, 50.0)), (key.Key_Right, (32.0, 52.0)),
                        (key.Key_Left, (30.0, 50.0)), (key.Key_Home, (0.0, 100.0))]:
        qtbot.keyClick(window, k)
        assert window.visible_range() == pytest.approx(expected, abs=1e-9), k
    window.zoom(4.0, center_s=10.0)  # would start before 0: slides back, same span
    assert window.visible_range() == pytest.approx((0.0, 25.0))
    window.set_range(90.0, 99.0)
    window.pan(0.5)  # stops at the end, keeping the span
    assert window.visible_range() == pytest.approx((91.0, 100.0))
    window.fit_all()
    assert window.visible_range() == pytest.approx((0.0, 100.0))


def test_wheel_zooms_time_only(open_window, qtbot, steps) -> None:
    window = open_window(steps[0])
    vb = window.plot_item("power").getViewBox()
    y_before = vb.viewRange()[1]
    view = window.plots
    pos = view.mapFromScene(vb.mapToScene(vb.boundingRect().center()))
    wheel = QtGui.QWheelEvent(QtCore.QPointF(pos), QtCore.QPointF(view.mapToGlobal(pos)),
                              QtCore.QPoint(0, 0), QtCore.QPoint(0, 120),
                              QtCore.Qt.MouseButton.NoButton,
                              QtCore.Qt.KeyboardModifier.NoModifier,
                              QtCore.Qt.ScrollPhase.NoScrollPhase, False)
    QtWidgets.QApplication.sendEvent(view.viewport(), wheel)
    x0, x1 = window.visible_range()
    assert 0 < x1 - x0 < 3.0  # zoomed in around the pointer
    assert vb.viewRange()[1] == pytest.approx(y_before)  # y stays the data's
    qtbot.wait(50)  # the coalesced redraw follows on its own
    assert window.drawn_envelope("power").t[0] <= x0


def test_range_and_markers_survive_a_resize(open_window, qtbot, steps) -> None:
    window = open_window(steps[0])
    window.set_range(0.7, 2.3)
    window.set_markers(1.1, 1.9)
    width = window.plot_width_px()
    for size in ((800, 600), (1600, 1000)):
        window.resize(*size)
        qtbot.wait(60)  # the resize and the coalesced redraw
        assert window.visible_range() == pytest.approx((0.7, 2.3), abs=1e-12)
        assert window.markers() == pytest.approx((1.1, 1.9), abs=1e-12)
        assert window.plot_width_px() != width  # it did resize
        width = window.plot_width_px()
        # The redraw after the resize asked for points by the new width: one per pixel over
        # the view and a quarter of it either side (raw samples: up to 2 per pixel).
        env = window.drawn_envelope("power")
        assert len(env.t) <= (2 if env.raw else 1) * 1.05 * 1.5 * width + 2


# -- summaries, never the whole trace ------------------------------------------------------------
def test_a_million_samples_are_drawn_as_pixel_summaries(open_window, tmp_path: Path) -> None:
    fs = 100_000.0
    t = np.arange(1_000_000) / fs
    current = (1e-3 + 5e-4 * np.sin(2 * np.pi * 3 * t)).astype(np.float32)
    gpio = (np.arange(len(t)) % 10_000 > 5).astype(np.uint8)
    path = write_jls(tmp_path / "long.jls", current, np.full(len(t), V), gpio, fs=fs)
    window = open_window(path)
    width = window.plot_width_px()
    for channel in window.shown_channels():
        env = window.drawn_envelope(channel)
        assert not env.raw
        band, mean = window.channel_curves(channel)
        # The mean: one point per bin; the band: one vertical segment (two points) per bin;
        # about one bin per pixel column over the view and a quarter of it either side.
        x, y = mean.getData()
        assert 0.9 * width <= len(x) == len(y) <= 2 * width, channel
        x, y = band.getData()
        assert len(x) == len(y) == 2 * len(env.t) <= 4 * width, channel
        assert np.array_equal(y[0::2], env.min) and np.array_equal(y[1::2], env.max)
        for curve in (band, mean):
            assert curve.opts["autoDownsample"] is False and curve.opts["clipToView"] is False
    # Zoomed in to 100 samples: the raw samples themselves, as steps one sample wide.
    window.set_range(5.0, 5.0 + 100 / fs)
    window.refresh_now()
    env = window.drawn_envelope("current")
    assert env.raw and env.step_s == pytest.approx(1 / fs)
    x, y = window.channel_curves("current")[1].getData()
    first = round(env.t[0] * fs)
    assert np.array_equal(y, current[first : first + len(y)].astype(np.float64))
    assert len(x) == len(y) + 1  # step edges
    assert 100 <= len(y) <= 2 * 100 + 4  # the view and a quarter of it either side


# -- PNG from the command line -------------------------------------------------------------------
def test_rig_view_png(steps, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out.png"
    assert main(["view", str(steps[0]), "--png", str(out), "--range", "1.5:2.5",
                 "--size", "800x600"]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    image = QtGui.QImage(str(out))
    assert (image.width(), image.height()) == (800, 600)
    power = QtGui.QColor(gui_viewer.COLOURS["power"])
    colours, power_pixels = set(), 0
    for y in range(0, 600, 2):
        for x in range(0, 800, 2):
            c = image.pixelColor(x, y)
            colours.add(c.rgb())
            if (abs(c.red() - power.red()) + abs(c.green() - power.green())
                    + abs(c.blue() - power.blue())) < 40:
                power_pixels += 1
    assert len(colours) > 20 and power_pixels > 50


def test_csv_trace_renders(tmp_path: Path) -> None:
    current, voltage, gpio = step_trace([(1e-3, 1.0), (2e-3, 1.0)])
    gpio[500] = 0
    write_csv_trace(tmp_path / "t.csv", current, voltage, gpio)
    view = open_view(tmp_path / "t.csv", sample_rate=FS)
    try:
        out = gui_viewer.render_png(view, tmp_path / "t.png", size=(900, 700))
    finally:
        view.close()
    assert QtGui.QImage(str(out)).size() == QtCore.QSize(900, 700)
