"""Report figures and the workflow diagram: which figures are drawn for which data, that each
PNG decodes to the column size, shows something, carries the label stamp, and that the trace
figure reads a JLS file written by the rig's own TraceWriter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyjls
import pytest

from rig.traces.files import TraceWriter
from tests.requires import LazyModule

# matplotlib (2-3 s cold) only when a test here runs, not in every xdist worker at collection.
figures = LazyModule("rig.report.figures")
workflow = LazyModule("rig.report.workflow")

RATE = 1000  # Hz
SECONDS = 30
IDLE = (2000, 4000)  # samples
WINDOWS = ((5000, 10000), (12000, 17000), (19000, 24000))
VOLTS = 1.8
I_IDLE, I_ACTIVE = 1e-3, 5e-3  # A
ASC_KEYS = {"asc-trace", "asc-throughput", "asc-energy", "asc-replicability"}


# ---- inputs built by hand ---------------------------------------------------------------------


def asc_show(ips: list[float], epi: list[float], *, windows: bool = True,
             idle: bool = True) -> dict[str, Any]:
    """An ASC `rig show --json` dict: one timed run per `ips`, one window per `epi`."""
    latency = [{"index": i, "iterations": 100, "elapsed_s": 100 / v,
                "time_per_inference_s": 1 / v, "inferences_per_s": v, "timer": "emon"}
               for i, v in enumerate(ips)]
    wins = []
    if windows:
        for i, (e, (s0, s1)) in enumerate(zip(epi, WINDOWS, strict=False)):
            wins.append({"index": i, "iterations": 100, "start_sample": s0, "end_sample": s1,
                         "start_s": s0 / RATE, "end_s": s1 / RATE, "duration_s": (s1 - s0) / RATE,
                         "energy_j": e * 100, "mean_power_w": e * 100 / ((s1 - s0) / RATE),
                         "energy_per_inference_j": e})
    idles = ([{"start_sample": IDLE[0], "end_sample": IDLE[1], "duration_s": 2.0,
               "power_w": I_IDLE * VOLTS}] if idle else [])
    summary: dict[str, Any] = {"latency_runs": len(ips)}
    if ips:
        summary["inferences_per_s"] = float(np.median(ips))
    if wins:
        summary["energy_per_inference_j"] = float(np.median(epi[: len(wins)]))
    else:
        summary["power"] = "unavailable (simulator): XyloSim has no power rails"
    return {"run": "/x", "status": "complete", "procedure": "asc", "simulated": True,
            "summary": summary,
            "measurements": {"latency_runs": latency, "energy_windows": wins,
                             "idle_spans": idles}}


def trace_arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Idle current outside the windows, active inside; a one-sample GPIO pulse at each start."""
    n = SECONDS * RATE
    current = np.full(n, I_IDLE)
    gpio = np.ones(n, dtype=np.uint8)
    for s0, s1 in WINDOWS:
        current[s0:s1] = I_ACTIVE
        gpio[s0] = 0
    return current, np.full(n, VOLTS), gpio


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trace") / "emon.jls"
    current, voltage, gpio = trace_arrays()
    with TraceWriter(path, RATE, simulated=True) as w:
        for lo in range(0, len(current), 7000):  # in chunks, as a recording arrives
            w.append(lo, current[lo:lo + 7000], voltage[lo:lo + 7000], gpio[lo:lo + 7000])
    return path


def sweep_show(*, power: bool, tts: bool = True, sut: str = "sut-a") -> dict[str, Any]:
    """A sweep `rig show --json` dict: gap falls with the timeout, grows with the size."""
    rows = []
    for nodes in (10, 20, 40):
        for density in (0.1, 0.3):
            for timeout in (0.001, 0.01, 0.1):
                gap = nodes / 100 * density / (timeout * 100)
                reached = {"0.1": 5, "0.05": 3 if nodes == 40 else 5, "0.01": 0}
                rows.append({
                    "sut": sut, "nodes": nodes, "density": density, "timeout_s": timeout,
                    "seeds": 5, "seeds_expected": 5, "failed": 0, "gap_mean": gap,
                    "power_w_mean": 1.0 + nodes / 100 if power else None,
                    "power_seeds": 5 if power else 0,
                    "power_status": None if power else "power unavailable: no instrument",
                    "tts": ({k: {"reached": r, "latency_s_mean": 1e-4 * nodes if r else None,
                                 "energy_j_mean": None, "energy_seeds": 0}
                             for k, r in reached.items()} if tts else {}),
                })
    largest = [{"sut": sut, "density": 0.1, "timeout_s": 0.1, "nodes": 40},
               {"sut": sut, "density": 0.3, "timeout_s": 0.1, "nodes": None}]
    return {"run": "/s", "status": "complete", "procedure": "qubo-sweep", "simulated": False,
            "sweep": {"suts": [sut], "nodes": [10, 20, 40], "densities": [0.1, 0.3],
                      "timeouts": [0.001, 0.01, 0.1], "seeds": [0, 1, 2, 3, 4]},
            "summary": rows, "largest_solved": largest}


# ---- checks on the PNGs -----------------------------------------------------------------------


def image(path: Path) -> np.ndarray:
    from matplotlib.image import imread

    return imread(path)[:, :, :3]


def assert_png(fig: figures.FigureFile, height_in: float | None = None) -> np.ndarray:
    """The PNG of `fig`, checked: the column's width, `height_in` (default the figures'), not
    blank, a caption."""
    height_in = figures.HEIGHT_IN if height_in is None else height_in
    assert fig.path.is_file(), fig.path
    assert fig.caption.strip(), fig.key
    img = image(fig.path)
    h, w = img.shape[:2]
    dpi = figures.DPI
    assert abs(w - figures.WIDTH_IN * dpi) <= 3 and abs(h - height_in * dpi) <= 3, (fig.key, w, h)
    assert img.std() > 0.01, f"{fig.key} is blank"
    return img


def has_colour(img: np.ndarray, rgb: tuple[int, int, int], tol: float = 4 / 255,
               at_least: int = 50) -> bool:
    """Whether at least `at_least` pixels are within `tol` of the colour `rgb` (0..255)."""
    close = np.all(np.abs(img - np.array(rgb) / 255) <= tol, axis=2)
    return int(close.sum()) >= at_least


def over_white(hex_rgb: str, alpha: float) -> tuple[int, int, int]:
    """The colour a shading of `hex_rgb` at `alpha` gives on white."""
    rgb = [int(hex_rgb[i:i + 2], 16) for i in (1, 3, 5)]
    return tuple(round(255 - alpha * (255 - c)) for c in rgb)  # type: ignore[return-value]


# ---- ASC --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory, trace: Path) -> list[figures.FigureFile]:
    """The four ASC figures of a run with a trace, drawn once for the tests that look at them."""
    show = asc_show([80.0, 81.0, 79.0, 80.5, 80.0], [4.5e-5, 4.6e-5, 4.4e-5])
    out = tmp_path_factory.mktemp("asc")
    files = figures.asc_figures([figures.AscRunInput("sim", show, trace)], out, "s1")
    assert all(f.path == out / f"s1-{f.key}.png" for f in files)
    return files


def test_a_run_with_a_trace_gets_all_four_figures(traced_run: list[figures.FigureFile]) -> None:
    by_key = {f.key: f for f in traced_run}
    assert set(by_key) == ASC_KEYS and len(traced_run) == 4
    for f in traced_run:
        assert_png(f, figures.TRACE_HEIGHT_IN if f.key == "asc-trace" else figures.HEIGHT_IN)
    cap = by_key["asc-trace"].caption
    assert "30 s at 1 kHz" in cap and "3 energy windows" in cap and "raw samples" in cap


def test_trace_figure_shades_the_idle_span_and_the_windows(
        tmp_path: Path, trace: Path, traced_run: list[figures.FigureFile]) -> None:
    img = image(next(f for f in traced_run if f.key == "asc-trace").path)
    assert has_colour(img, over_white("#ff7f0e", 0.16)), "no energy window shaded"
    assert has_colour(img, over_white("#2ca02c", 0.2)), "no idle span shaded"
    # Without windows and idle spans in the show dict, nothing is shaded (and, with no timed
    # runs either, the trace is the only figure).
    bare = asc_show([], [], windows=False, idle=False)
    [fig] = figures.asc_figures([figures.AscRunInput("sim", bare, trace)], tmp_path, "u")
    assert fig.key == "asc-trace"
    img = image(fig.path)
    assert not has_colour(img, over_white("#ff7f0e", 0.16))
    assert not has_colour(img, over_white("#2ca02c", 0.2))


def test_trace_without_a_power_signal_is_drawn_from_current_and_voltage(tmp_path: Path) -> None:
    path = tmp_path / "old.jls"
    current, voltage, gpio = trace_arrays()
    with pyjls.Writer(str(path)) as w:
        w.source_def(1, name="old", vendor="v", model="m", version="1", serial_number="")
        for sid, name, dtype, data in ((1, "current", pyjls.DataType.F32, current),
                                       (2, "voltage", pyjls.DataType.F32, voltage),
                                       (3, "gpi0", pyjls.DataType.U8, gpio)):
            w.signal_def(sid, 1, pyjls.SignalType.FSR, dtype, RATE, name=name)
            w.fsr(sid, 0, data.astype(np.float32 if dtype == pyjls.DataType.F32 else np.uint8))
    show = asc_show([], [4.5e-5] * 3)
    files = figures.asc_figures([figures.AscRunInput("old", show, path)], tmp_path, "o")
    fig = next(f for f in files if f.key == "asc-trace")
    assert_png(fig, figures.TRACE_HEIGHT_IN)
    assert "no power signal" in fig.caption


def test_a_run_without_windows_gets_throughput_and_replicability_only(tmp_path: Path) -> None:
    show = asc_show([1.0, 1.0, 1.02, 0.99, 1.0], [], windows=False, idle=False)
    files = figures.asc_figures([figures.AscRunInput("xylo", show, None)], tmp_path, "x")
    assert {f.key for f in files} == {"asc-throughput", "asc-replicability"}
    for f in files:
        assert_png(f)


@pytest.mark.parametrize("content", [None, b"not a JLS file at all" * 10])
def test_a_missing_or_broken_trace_means_no_trace_figure(tmp_path: Path,
                                                         content: bytes | None) -> None:
    path = tmp_path / "emon.jls"
    if content is not None:
        path.write_bytes(content)
    show = asc_show([80.0] * 5, [4.5e-5] * 3)
    files = figures.asc_figures([figures.AscRunInput("r", show, path)], tmp_path, "m")
    assert {f.key for f in files} == ASC_KEYS - {"asc-trace"}


def test_the_trace_figure_comes_from_the_first_run_whose_trace_reads(tmp_path: Path,
                                                                      trace: Path) -> None:
    show = asc_show([], [], windows=False)  # the trace figure only
    run = figures.AscRunInput
    runs = [run("gone", show, tmp_path / "gone.jls"), run("a", show, trace), run("b", show, trace)]
    traces = [f for f in figures.asc_figures(runs, tmp_path, "f") if f.key == "asc-trace"]
    assert len(traces) == 1 and "run a " in traces[0].caption


def test_the_label_is_stamped_top_right(tmp_path: Path) -> None:
    show = asc_show([80.0, 82.0, 78.0], [], windows=False, idle=False)
    plain = figures.asc_figures([figures.AscRunInput("r", show, None)], tmp_path / "plain", "p")
    stamped = figures.asc_figures([figures.AscRunInput("r", show, None)], tmp_path / "stamped", "p",
                          label="SIMULATED (virtual bench)")
    for a, b in zip(plain, stamped, strict=True):
        diff = np.any(image(a.path) != image(b.path), axis=2)
        assert diff.any(), f"{a.key}: the label changed nothing"
        rows, cols = np.nonzero(diff)
        h, w = diff.shape
        assert rows.max() < 0.1 * h and cols.min() > 0.5 * w, f"{a.key}: not top right"
        assert has_colour(image(b.path), (139, 0, 0), tol=0.05, at_least=20)  # darkred text


def test_replicability_marks_points_outside_the_band_red(tmp_path: Path) -> None:
    red = (0xD6, 0x27, 0x28)
    inside = asc_show([80.0, 81.0, 79.0], [], windows=False, idle=False)
    outside = asc_show([80.0, 90.0, 70.0], [], windows=False, idle=False)
    [a] = [f for f in figures.asc_figures([figures.AscRunInput("r", inside, None)], tmp_path, "in")
           if f.key == "asc-replicability"]
    [b] = [f for f in figures.asc_figures([figures.AscRunInput("r", outside, None)], tmp_path,
                                          "out") if f.key == "asc-replicability"]
    assert not has_colour(image(a.path), red, at_least=10)
    # Two red markers (plus the legend's): red in at least two separate column ranges.
    close = np.all(np.abs(image(b.path) - np.array(red) / 255) <= 4 / 255, axis=2)
    cols = np.flatnonzero(close.any(axis=0))
    assert cols.size and 1 + np.count_nonzero(np.diff(cols) > 1) >= 2, "points not red"
    assert "12.5 %" in b.caption  # 90/80 - 1, the rig's max deviation from the mean


def test_several_runs_are_several_series(tmp_path: Path) -> None:
    runs = [figures.AscRunInput(f"run-{i}", asc_show([80.0 + i, 80.5, 79.5], [4.5e-5, 4.6e-5]),
                                None) for i in range(3)]
    files = figures.asc_figures(runs, tmp_path, "m")
    assert {f.key for f in files} == ASC_KEYS - {"asc-trace"}
    assert "run-2" in next(f.caption for f in files if f.key == "asc-throughput")


# ---- QUBO -------------------------------------------------------------------------------------


def test_a_sweep_without_power_has_no_power_figure(tmp_path: Path) -> None:
    files = figures.qubo_figures("sut-a", [figures.SweepInput("small", sweep_show(power=False))],
                                 tmp_path, "q")
    assert {f.key for f in files} == {"qubo-gap", "qubo-tts", "qubo-largest"}
    for f in files:
        assert f.path == tmp_path / f"q-{f.key}.png"
        assert_png(f)
    tts = next(f for f in files if f.key == "qubo-tts")
    assert "100 ms" in tts.caption and "3 of the 5" not in tts.caption


def test_a_sweep_with_power_has_a_power_figure(tmp_path: Path) -> None:
    sweep = figures.SweepInput("standin", sweep_show(power=True, tts=False))
    files = figures.qubo_figures("sut-a", [sweep], tmp_path, "q", label="SIMULATED (stand-in)")
    assert {f.key for f in files} == {"qubo-gap", "qubo-power", "qubo-largest"}
    for f in files:
        assert_png(f)


def test_qubo_figures_only_for_the_sut_asked(tmp_path: Path) -> None:
    sweeps = [figures.SweepInput("a", sweep_show(power=True)),
              figures.SweepInput("b", sweep_show(power=False))]
    assert figures.qubo_figures("someone-else", sweeps, tmp_path, "q") == []
    two = figures.qubo_figures("sut-a", sweeps, tmp_path, "q2")
    assert {f.key for f in two} == {"qubo-gap", "qubo-power", "qubo-tts", "qubo-largest"}


def test_no_gap_means_no_gap_figure(tmp_path: Path) -> None:
    show = sweep_show(power=False, tts=False)
    for row in show["summary"]:
        row["gap_mean"] = None
    show["largest_solved"] = []
    assert figures.qubo_figures("sut-a", [figures.SweepInput("s", show)], tmp_path, "q") == []


# ---- workflow ---------------------------------------------------------------------------------


def workflow_stages() -> list[workflow.Stage]:
    """An ASC run's six stages, as the report draws them (a function: `Stage` is
    matplotlib's module, imported when a test runs)."""
    stage = workflow.Stage
    return [
        stage("Data initialisation", "host", "synthetic ASC audio, 40 x 1 s clips, seeded", False),
        stage("Host pre-processing", "host", "audio as int16 at 16000 Hz (not measured)", False),
        stage("Data loading", "link", "over UART at 921600 baud before each timed run", False),
        stage("On-device pre-processing", "dut", "log-mel band energies inside infer", True, True),
        stage("Inference", "dut", "model asc01 on the virtual DUT", True, True),
        stage("Post-processing", "host", "top-1 of the score vector", False),
    ]


def test_workflow_png(tmp_path: Path) -> None:
    path = tmp_path / "wf" / "workflow.png"
    got = workflow.draw_workflow(workflow_stages(), path, title="Workflow — ASC",
                                 measurement_note="power: LPM01A sources the DUT supply, 1 kHz")
    assert got == path
    img = assert_png(figures.FigureFile("workflow", path, "-"), workflow.HEIGHT_IN)
    assert has_colour(img, (0xE0, 0x7B, 0x00), tol=0.03), "no power-measurement outline"
    assert has_colour(img, (0x14, 0x52, 0xB8), tol=0.03), "no timed-window outline"


def test_workflow_without_measurement_has_no_outline(tmp_path: Path) -> None:
    stages = [workflow.Stage(s.name, s.where, s.detail, False, False) for s in workflow_stages()]
    stages[3] = workflow.Stage("On-device pre-processing", "none", "none", False)
    img = image(workflow.draw_workflow(stages, tmp_path / "w.png",
                                       title="Workflow — none measured"))
    assert not has_colour(img, (0xE0, 0x7B, 0x00), tol=0.03, at_least=5)
    assert not has_colour(img, (0x14, 0x52, 0xB8), tol=0.03, at_least=5)


def test_workflow_label_changes_the_image(tmp_path: Path) -> None:
    a = image(workflow.draw_workflow(workflow_stages(), tmp_path / "a.png", title="Workflow"))
    b = image(workflow.draw_workflow(workflow_stages(), tmp_path / "b.png", title="Workflow",
                            label="SIMULATED (virtual bench)"))
    assert a.shape == b.shape and np.any(a != b)


def test_measured_stages_group_into_contiguous_runs() -> None:
    assert workflow._groups([False, True, True, False, True]) == [(1, 2), (4, 4)]
    assert workflow._groups([True] * 3) == [(0, 2)]
    assert workflow._groups([False, False]) == []


def test_a_trace_with_a_set_voltage_is_drawn_from_current_and_the_set_value(
        tmp_path: Path) -> None:
    """An LPM01A's trace stores no voltage signal: the figure's power is current x the set
    value from the file's user data (before issue 25 there was no figure at all)."""
    from rig.report.figures import _read_excerpt

    path = tmp_path / "set.jls"
    current, voltage, gpio = trace_arrays()
    with TraceWriter(path, RATE, simulated=True,
                     set_voltage=(VOLTS, "set: LPM01A volt 1800m")) as w:
        w.append(0, current, voltage, gpio)
    show = asc_show([], [4.5e-5] * 3)
    files = figures.asc_figures([figures.AscRunInput("set", show, path)], tmp_path, "s")
    fig = next(f for f in files if f.key == "asc-trace")
    assert_png(fig, figures.TRACE_HEIGHT_IN)
    from rig.report.figures import _measurements

    ex = _read_excerpt(path, _measurements(show))
    assert ex is not None and ex.derived
    # Idle and active power: the two current levels x the set voltage, to float32 precision.
    assert np.nanmin(ex.p_min) == pytest.approx(I_IDLE * VOLTS, rel=1e-6)
    assert np.nanmax(ex.p_max) == pytest.approx(I_ACTIVE * VOLTS, rel=1e-6)
