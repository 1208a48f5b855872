"""`rig analyze RUN_FOLDER`: a virtual-bench run's energy figures recomputed from its own trace
reproduce its manifest to 1e-9; one tampered number (in the manifest or in the trace) fails with
exit 1 naming what it changed; a folder it cannot reproduce is refused with exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rig.run.events import IdleMeasured, WindowMeasured
from rig.run.store import load_run
from rig.traces.files import TraceWriter, read_trace

from .runs import TRUTH, fast_energy_run, run_rig

pytestmark = pytest.mark.slow

RUNS = 2
FAST = {
    "runs": ("runs = 5", f"runs = {RUNS}"),
    "min_run_s": ("min_run_s = 10.0", "min_run_s = 1.0"),
    "samples": ("samples_per_class = 10", "samples_per_class = 1"),
    "speed": ("speed = 50", "speed = 100"),
}
FIGURES = ["idle_power_w", "active_power_w", "dynamic_power_w", "energy_per_inference_j",
           "dynamic_energy_per_inference_j"]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """One short energy-mode run on the virtual bench (LPM01A at 1 kHz)."""
    return fast_energy_run(tmp_path_factory.mktemp("reproduce"), **FAST)


@pytest.fixture
def copy(measured: Path, tmp_path: Path) -> Path:
    """A copy of the run folder to tamper with."""
    return Path(shutil.copytree(measured, tmp_path / measured.name))


def analyze(run: Path) -> tuple[int, dict, str]:
    done = run_rig("analyze", str(run), "--json")
    return done.returncode, json.loads(done.stdout) if done.stdout else {}, done.stderr


def test_a_run_reproduces_from_its_trace(measured: Path) -> None:
    code, out, err = analyze(measured)
    assert code == 0, err
    assert out["ok"] is True and out["failed"] == [] and out["simulated"] is True
    assert out["windows"] == RUNS and out["idle_spans"] == 1 and out["off_edge_samples"] == []
    assert [f["name"] for f in out["figures"]] == FIGURES
    manifest = json.loads((measured / "manifest.json").read_text())["summary"]
    for f in out["figures"]:
        assert f["ok"] is True and f["relative_difference"] <= 1e-9, f
        assert f["manifest"] == manifest[f["name"]]
        # And the figure is the bench's simulated truth (the LPM01A prints 4 digits).
        assert f["recomputed"] == pytest.approx(TRUTH[f["name"]], rel=2e-3)
    # The LPM01A sets the supply: no voltage signal, the set value and its source instead.
    trace = read_trace(measured / "traces" / "emon.jls")
    assert "voltage" not in trace.meta["samples_by_signal"]
    assert trace.voltage_set == {"volts": 1.8, "source": "set: LPM01A volt 1800m"}
    emon = json.loads((measured / "manifest.json").read_text())["instruments"]["emon"]
    assert emon["trace_voltage"] == {"measured": False, "set_v": 1.8,
                                     "source": "set: LPM01A volt 1800m"}
    table = run_rig("analyze", str(measured))
    assert table.returncode == 0
    assert "SIMULATED" in table.stdout and "windows on timestamp edges ok" in table.stdout
    assert sum(line.endswith("  ok") for line in table.stdout.splitlines()) == len(FIGURES)


def test_a_tampered_manifest_figure_fails_by_name(copy: Path) -> None:
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["summary"]["active_power_w"] *= 1 + 1e-7  # far below any display, above 1e-9
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, out, err = analyze(copy)
    assert code == 1
    assert out["failed"] == ["active_power_w"]
    [bad] = [f for f in out["figures"] if not f["ok"]]
    assert bad["relative_difference"] == pytest.approx(1e-7, rel=1e-3)
    assert "not reproduced: active_power_w" in err
    table = run_rig("analyze", str(copy))
    assert table.returncode == 1
    assert [line.split()[0] for line in table.stdout.splitlines()
            if line.endswith("FAILED")] == ["active_power_w"]


def rewrite_trace(run: Path, sample: int, factor: float) -> None:
    """The run's trace with one current sample scaled by `factor`, written as the rig does."""
    path = run / "traces" / "emon.jls"
    trace = read_trace(path)
    trace.current[sample] *= factor
    path.unlink()
    kept = trace.voltage_set  # the LPM01A sets the supply: the file stores no voltage
    set_voltage = (kept["volts"], kept["source"]) if kept else None
    with TraceWriter(path, trace.sample_rate, simulated=trace.simulated,
                     set_voltage=set_voltage) as w:
        w.append(0, trace.current, trace.voltage, trace.gpio)


def test_one_tampered_idle_sample_fails_the_figures_it_enters(copy: Path) -> None:
    [idle] = [e for e in load_run(copy).events if isinstance(e, IdleMeasured)]
    rewrite_trace(copy, (idle.start_sample + idle.end_sample) // 2, 1.01)
    code, out, _ = analyze(copy)
    assert code == 1
    # Idle power, and the two figures derived from it; the windows' figures stay exact.
    assert out["failed"] == ["idle_power_w", "dynamic_power_w", "dynamic_energy_per_inference_j"]
    idle_check = out["figures"][0]
    # One sample of the span 1% higher: idle power up by 1% / span length.
    span = idle.end_sample - idle.start_sample
    assert idle_check["recomputed"] / idle_check["manifest"] - 1 == pytest.approx(
        0.01 / span, rel=1e-3)


def test_one_tampered_window_sample_fails_active_power(copy: Path) -> None:
    first = next(e for e in load_run(copy).events if isinstance(e, WindowMeasured))
    rewrite_trace(copy, first.start_sample + 10, 1.5)
    code, out, _ = analyze(copy)
    assert code == 1
    assert "active_power_w" in out["failed"] and "idle_power_w" not in out["failed"]


def test_an_unfinished_run_exits_2(copy: Path) -> None:
    lines = (copy / "events.jsonl").read_text().splitlines()
    kept = [line for line in lines if '"event": "run_finished"' not in line]
    assert len(kept) == len(lines) - 1
    (copy / "events.jsonl").write_text("\n".join(kept) + "\n")
    done = run_rig("analyze", str(copy))
    assert done.returncode == 2
    assert "the run is unfinished (status incomplete)" in done.stderr


def test_a_run_without_its_trace_exits_2(copy: Path) -> None:
    (copy / "traces" / "emon.jls").unlink()
    done = run_rig("analyze", str(copy))
    assert done.returncode == 2 and "its trace traces/emon.jls is missing" in done.stderr


def test_trace_options_are_refused_for_a_run_folder(measured: Path) -> None:
    done = run_rig("analyze", str(measured), "--iterations", "5")
    assert done.returncode == 2 and "--iterations cannot be used with a run folder" in done.stderr


def test_the_human_output_shows_each_figure_with_its_uncertainty(measured: Path) -> None:
    """Without --json: every re-derived budget as figure ± U (k), incomplete ones marked, with
    the terms they miss (the virtual LPM01A publishes no supply or clock accuracy)."""
    done = run_rig("analyze", str(measured))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    start = lines.index("uncertainty (re-derived; GUM budgets in --json):")
    (energy,) = [x for x in lines[start:] if x.strip().startswith("energy per inference")]
    assert " ± ≥" in energy and energy.endswith("(k=2, incomplete)")
    assert "unknown: supply voltage, lpm01a sample clock" in lines[lines.index(energy) + 1]
