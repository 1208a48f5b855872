"""`rig measure asc --scope`: each part of the method alone, on a fast virtual bench, through the
command line; `rig show --json` reads the same back; energy-only needs energy-mode firmware."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from firmware.dut.asc_model import LinearAscModel
from rig.bench.config import load_bench
from rig.cli import main
from rig.datasets.synthetic import make_split
from rig.errors import ConfigError
from rig.run import asc
from rig.run.events import IdleMeasured, LatencyRun, SampleClassified, WindowMeasured

from .runs import REPO, TRUTH, bench_variant, events, only_run

pytestmark = pytest.mark.slow

RUNS, SAMPLES_PER_CLASS = 3, 2
FAST = {
    "runs": ("runs = 5", f"runs = {RUNS}"),
    "min_run_s": ("min_run_s = 10.0", "min_run_s = 1.0"),
    "samples": ("samples_per_class = 10", f"samples_per_class = {SAMPLES_PER_CLASS}"),
    "speed": ("speed = 50", "speed = 100"),
}
PERFORMANCE_FIRMWARE = ('timestamp_mode = "energy"', 'timestamp_mode = "performance"')


def rig(*argv: str) -> tuple[int, str, str]:
    """`rig ...` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def measure(tmp: Path, scope: str, **replace: tuple[str, str]) -> tuple[dict[str, Any], Path]:
    bench = bench_variant(tmp, name=f"{scope}-bench", **FAST, **replace)
    runs = tmp / f"runs-{scope}"
    code, out, err = rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs),
                         "--json", "--scope", scope)
    assert code == 0, (code, out, err)
    return json.loads(out), only_run(runs)


@pytest.fixture(scope="module")
def scoped(tmp_path_factory) -> dict[str, tuple[dict[str, Any], Path]]:
    """One run per scope on the energy-mode sim bench, plus performance on performance-mode
    firmware."""
    tmp = tmp_path_factory.mktemp("scope")
    out = {scope: measure(tmp, scope) for scope in ("performance", "energy", "accuracy")}
    out["performance-fw"] = measure(tmp_path_factory.mktemp("fw"), "performance",
                                    mode=PERFORMANCE_FIRMWARE)
    return out


def kinds(run: Path) -> dict[str, int]:
    rows = pq.read_table(run / "results.parquet").to_pylist()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    return counts


def expected_accuracy() -> float:
    """The DUT's model applied directly to the same test split."""
    model = LinearAscModel.load()
    test = make_split(SAMPLES_PER_CLASS, 0, "test")
    return float(np.mean([model.predict(x.tobytes()) == y
                          for x, y in zip(test.inputs, test.labels, strict=True)]))


def test_performance_measures_latency_only(scoped) -> None:
    out, run = scoped["performance"]
    s = out["summary"]
    assert out["status"] == "complete"
    assert kinds(run) == {"latency_run": RUNS}
    assert s["scope"] == "performance"
    assert s["power"] == "not measured (a performance-only run)"
    assert s["latency_runs"] == RUNS and s["latency_timer"] == "emon"
    assert s["inferences_per_s"] == pytest.approx(TRUTH["inferences_per_s"], rel=1e-3)
    assert s["execution_time_mean_s"] == pytest.approx(TRUTH["execution_time_mean_s"], rel=1e-3)
    for key in ("idle_power_w", "active_power_w", "energy_per_inference_j", "samples",
                "accuracy", "energy_windows"):
        assert key not in s, key
    assert all(c["ok"] for c in s["checks"]), s["checks"]
    assert {c["name"] for c in s["checks"]} == {"latency replicable", "run length",
                                                 "timer agreement", "no lost samples"}
    # No test samples here: the execution time is the timed runs', and says so.
    assert s["execution_time_source"] == "timed_runs" and s["execution_time_runs"] == RUNS
    assert s["execution_time_note"].startswith("a performance-only run has no test samples")
    names = [e["event"] for e in events(run)]
    assert "idle_measured" not in names and "window_measured" not in names
    phases = [e["phase"] for e in events(run) if e["event"] == "phase_started"]
    assert phases == ["calibrate", "runs"]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["scope"] == "performance" and manifest["status"] == "complete"


def test_performance_on_performance_firmware_times_with_the_dut(scoped) -> None:
    out, run = scoped["performance-fw"]
    s = out["summary"]
    assert out["status"] == "complete" and kinds(run) == {"latency_run": RUNS}
    assert s["latency_timer"] == "dut"
    # The DUT's µs timer counts whole 12.5 ms inferences: exact.
    assert s["inferences_per_s"] == pytest.approx(80.0, rel=1e-9)
    assert s["power"] == "not measured (a performance-only run)"
    (timers,) = [c for c in s["checks"] if c["name"] == "timer agreement"]
    assert timers["ok"] is None and timers["detail"].startswith("not applicable: only the DUT")
    assert out["status"] == "complete"  # a check that does not apply fails nothing


def test_energy_measures_idle_windows_and_latency_no_samples(scoped) -> None:
    out, run = scoped["energy"]
    s = out["summary"]
    assert out["status"] == "complete"
    assert kinds(run) == {"idle": 1, "latency_run": RUNS, "window": RUNS}
    assert s["scope"] == "energy" and "power" not in s
    for key in ("idle_power_w", "active_power_w", "dynamic_power_w", "energy_per_inference_j",
                "dynamic_energy_per_inference_j", "inferences_per_s"):
        assert s[key] == pytest.approx(TRUTH[key], rel=1e-3), key
    assert s["energy_windows"] == RUNS and s["latency_runs"] == RUNS
    assert "samples" not in s and "accuracy" not in s
    assert s["execution_time_source"] == "timed_runs"
    assert s["dynamic_energy_source"] == ("dynamic_power_w x execution_time_mean_s "
                                          f"({RUNS} timed runs: the run has no test samples)")
    assert all(c["ok"] for c in s["checks"]), s["checks"]
    phases = [e["phase"] for e in events(run) if e["event"] == "phase_started"]
    assert phases == ["calibrate", "idle", "runs"]


def test_accuracy_measures_the_test_set_only(scoped) -> None:
    out, run = scoped["accuracy"]
    s = out["summary"]
    assert out["status"] == "complete"
    n = 4 * SAMPLES_PER_CLASS  # four classes
    assert kinds(run) == {"sample": n}
    assert s["scope"] == "accuracy" and s["samples"] == n
    assert s["accuracy"] == pytest.approx(expected_accuracy(), abs=1e-12)
    assert s["power"] == "not measured (an accuracy-only run)"
    # ASC.md's execution time: every test sample, timed by the DUT's own µs counter.
    assert s["execution_time_source"] == "test_set" and s["execution_time_samples"] == n
    assert s["execution_time_timer"] == "dut"
    assert s["execution_time_mean_s"] == pytest.approx(12.5e-3, rel=1e-9)
    assert s["execution_time_stderr_s"] == pytest.approx(0.0, abs=1e-12)
    (timers,) = [c for c in s["checks"] if c["name"] == "timer agreement"]
    assert timers["ok"] is True and timers["detail"].startswith(f"{n} windows")
    for key in ("latency_runs", "inferences_per_s", "idle_power_w", "energy_per_inference_j"):
        assert key not in s, key
    phases = [e["phase"] for e in events(run) if e["event"] == "phase_started"]
    assert phases == ["accuracy"]


@pytest.mark.parametrize("scope", ["performance", "energy", "accuracy"])
def test_show_json_reports_the_same_summary(scoped, scope: str) -> None:
    out, run = scoped[scope]
    code, shown, err = rig("show", str(run), "--json")
    assert code == 0, err
    data = json.loads(shown)
    assert data["status"] == "complete"
    assert data["summary"] == out["summary"]
    assert data["measured"] == kinds(run)


@pytest.mark.parametrize("scope", ["performance", "accuracy"])
def test_show_recomputes_a_killed_scoped_run_with_its_scope(scoped, scope: str,
                                                            tmp_path: Path) -> None:
    """Without run_finished (a kill -9), `rig show` recomputes the summary: same scope text."""
    out, run = scoped[scope]
    copy = tmp_path / run.name
    copy.mkdir()
    lines = (run / "events.jsonl").read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["event"] == "run_finished"
    (copy / "events.jsonl").write_text("".join(lines[:-1]))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "running"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    code, shown, err = rig("show", str(copy), "--json")
    assert code == 0, err
    data = json.loads(shown)
    assert data["status"] == "incomplete"
    # The same summary, `simulated` included: `rig show` says it beside the figures.
    assert data["summary"] == out["summary"] and data["summary"]["simulated"] is True


def test_energy_on_performance_firmware_is_a_one_line_error(tmp_path: Path) -> None:
    bench = bench_variant(tmp_path, **FAST, mode=PERFORMANCE_FIRMWARE)
    runs = tmp_path / "runs"
    code, out, err = rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs),
                         "--scope", "energy")
    assert code == 2, (out, err)
    assert "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("rig: error: ")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0]
    assert "energy-only run needs energy timestamp mode" in errors[0]
    assert "performance mode" in errors[0] and "flash energy-mode firmware" in errors[0]
    run = only_run(runs)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "energy timestamp mode" in manifest["error"]
    assert not (run / "results.parquet").exists() or kinds(run) == {}


def test_unknown_scope_is_refused_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["measure", "asc", "--device", "sim", "--scope", "latency"])
    assert exit_.value.code == 2
    assert "invalid choice: 'latency'" in capsys.readouterr().err


# -- the pieces, without a bench --------------------------------------------------------------
def test_procedure_refuses_an_unknown_scope() -> None:
    bench = load_bench(REPO / "benches" / "sim.toml")
    with pytest.raises(ConfigError, match="unknown ASC scope 'latency'") as err:
        asc.AscProcedure(bench, SimpleNamespace(timestamp_mode="energy"), None, print,
                         scope="latency")
    assert "performance" in err.value.hint
    assert asc.SCOPES == ("all", "performance", "energy", "accuracy")


def test_measure_asc_refuses_an_unknown_scope_before_anything_opens(tmp_path: Path) -> None:
    from rig.run.measure import measure_asc

    bench = load_bench(REPO / "benches" / "sim.toml")
    with pytest.raises(ConfigError, match="unknown ASC scope 'latency'"):
        measure_asc(bench, device="sim", runs_root=tmp_path / "runs", scope="latency")
    assert not (tmp_path / "runs").exists()  # no folder, no virtual bench, no DUT powered


LATENCY = [LatencyRun(index=i, iterations=800, elapsed_s=10.0, time_per_inference_s=0.0125,
                      inferences_per_s=80.0, timer="dut") for i in range(3)]
SAMPLES = [SampleClassified(index=i, label=i % 4, predicted=0, correct=i % 4 == 0,
                            scores=[1.0, 0.0, 0.0, 0.0]) for i in range(8)]
IDLE = [IdleMeasured(start_sample=0, end_sample=2000, duration_s=2.0, power_w=1.2e-3)]
WINDOWS = [WindowMeasured(index=i, iterations=800, start_sample=0, end_sample=10_000,
                          duration_s=10.0, energy_j=0.036, mean_power_w=3.6e-3,
                          energy_per_inference_j=45e-6) for i in range(3)]


def test_summary_of_each_scope_in_closed_form() -> None:
    s = asc.summarize(LATENCY, scope="performance")
    assert s["scope"] == "performance" and s["power"] == "not measured (a performance-only run)"
    assert s["inferences_per_s"] == 80.0 and s["latency_runs"] == 3
    s = asc.summarize(SAMPLES, scope="accuracy")
    assert s["accuracy"] == 2 / 8 and s["power"] == "not measured (an accuracy-only run)"
    s = asc.summarize(LATENCY + IDLE + WINDOWS, scope="energy")
    assert s["scope"] == "energy" and "power" not in s
    assert s["dynamic_power_w"] == pytest.approx(2.4e-3, rel=1e-12)
    assert s["dynamic_energy_per_inference_j"] == pytest.approx(2.4e-3 * 0.0125, rel=1e-12)
    # An energy run that got no window says why, as an unscoped one does.
    assert asc.summarize(LATENCY, scope="energy")["power"].startswith("unavailable: needs")
    # The default scope adds no key: summaries of runs from before scopes read the same.
    s = asc.summarize(LATENCY)
    assert "scope" not in s and s["power"].startswith("unavailable: needs")
