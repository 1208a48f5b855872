"""One test per way to cheat on one run (issue 38, item 6), each caught by name by
`rig.submission.rederive` on a real run folder: a virtual-bench ASC run (the whole method: 5
runs of 10.2 s, one test sample per class, at 200x speed) and a QUBO sweep on cpu-tabu. One
honest run of each per module; each cheat edits a copy, as a lab would edit its own folder
(the digests and signature over it are the bundle's business: re-sealing does not help here).
The runs are made in this process (`rig_in_process`): what is tested is the re-derivation, and
the console scripts' start-up and imports were a third of the module's CPU (`rig measure` and
`rig sweep` as a user runs them are other modules' business).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.bench.config import load_bench
from rig.datasets.testsets import load_test_set, test_set_digest
from rig.run.events import IdleMeasured
from rig.run.store import load_run
from rig.submission import rederive
from rig.submission.rederive import asc_checks, qubo_checks
from rig.traces.analysis import window_energies
from rig.traces.files import TraceWriter, read_trace
from tests.rig.test_rederive import (
    by_item,
    edit_events,
    edit_manifest,
    edit_point,
    failed,
    inflate,
    of,
    read_events,
    resummarize,
    write_events,
)

from .runs import bench_variant, only_run, rig_in_process

pytestmark = pytest.mark.slow

FAST = {"speed": ("speed = 50", "speed = 200"),
        "samples": ("samples_per_class = 10", "samples_per_class = 1")}
#: The other session: another bench, so its idle span lies elsewhere and draws less.
OTHER = {"idle_power": ("idle_power_mw = 1.20", "idle_power_mw = 0.90"),
         "idle_s": ("idle_s = 2.0", "idle_s = 1.5")}
SWEEP = """[sweep]
suts = ["cpu-tabu"]
nodes = [25]
densities = [0.1]
seeds = [0]
timeouts = [0.05, 0.2]
"""


def measure(tmp: Path, name: str, **replace: tuple[str, str]) -> tuple[Path, Path]:
    """A `rig measure asc` run on the virtual bench: (run folder, bench file)."""
    bench = bench_variant(tmp, name, **FAST, **replace)
    done = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir",
                          str(tmp / name), "--json")
    assert done.returncode == 0, done.stderr
    runs = [p for p in (tmp / name).iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0], bench


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray, Path]:
    """The honest run, its test set's labels (loaded again from the bench file, not from the
    run) and a second session's run."""
    tmp = tmp_path_factory.mktemp("cheats")
    run, bench = measure(tmp, "honest")
    labels = load_test_set(load_bench(bench)).labels
    other, _ = measure(tmp, "other", **OTHER)
    return run, labels, other


@pytest.fixture
def honest(measured: tuple[Path, np.ndarray, Path]) -> Path:
    return measured[0]


@pytest.fixture
def labels(measured: tuple[Path, np.ndarray, Path]) -> np.ndarray:
    return measured[1]


@pytest.fixture
def copy(honest: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(honest, tmp_path / honest.name))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("sweep")
    (tmp / "cheat.toml").write_text(SWEEP)
    done = rig_in_process("sweep", "qubo", str(tmp / "cheat.toml"), "--runs-dir",
                          str(tmp / "runs"), "--json")
    assert done.returncode == 0, done.stderr
    return only_run(tmp / "runs")


@pytest.fixture
def sweep_copy(sweep: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(sweep, tmp_path / sweep.name))


# -- untouched ------------------------------------------------------------------------------
def test_an_untouched_asc_run_passes_every_check(honest: Path, labels: np.ndarray) -> None:
    checks = asc_checks(honest, labels)
    assert [c for c in checks if c.ok is not True] == []
    items = by_item(checks)
    assert "calibration run, idle span, 5 timed runs, 4 test samples" in \
        items[rederive.EDGES_ACCOUNTED].detail
    # The procedure recorded its test set's identity: the set the bench loads, hashed.
    bench = load_bench(json.loads((honest / "manifest.json").read_text())["bench"]["path"])
    manifest = json.loads((honest / "manifest.json").read_text())
    assert manifest["test_set"] == test_set_digest(load_test_set(bench))


def test_an_untouched_sweep_passes_every_check(sweep: Path) -> None:
    checks = qubo_checks(sweep)
    # No RAPL on a VM: the energy check may not apply; nothing fails.
    assert [c for c in checks if c.ok is False] == []
    assert by_item(checks)[rederive.QUBO_COST].ok is True


# -- one test per cheat ---------------------------------------------------------------------
def test_a_figure_edited_in_the_summary(copy: Path, labels: np.ndarray) -> None:
    edit_manifest(copy, lambda m: m["summary"].update(
        energy_per_inference_j=m["summary"]["energy_per_inference_j"] * 0.95))
    assert failed(asc_checks(copy, labels)) == {"energy_per_inference_j re-derived",
                                                rederive.MANIFEST_EVENTS}


def test_an_uncertainty_budget_shrunk_in_both_summaries(copy: Path, labels: np.ndarray) -> None:
    """The energy per inference's expanded uncertainty halved where the report reads it (U,
    u_c, U/|value| and each component), in the manifest and in run_finished alike, so the two
    still agree: the budget made again from the run's own events and trace does not."""

    def shrink(summary: dict[str, Any]) -> None:
        budget = summary["uncertainty"]["energy_per_inference_j"]
        for key in ("U", "u_c", "relative_U"):
            budget[key] *= 0.5
        for part in budget["components"]:
            if part["value"] is not None:
                part["value"] *= 0.5

    edit_manifest(copy, lambda m: shrink(m["summary"]))
    edit_events(copy, lambda rs: shrink(of(rs, "run_finished")["summary"]))
    checks = by_item(asc_checks(copy, labels))
    assert failed(list(checks.values())) == {rederive.UNCERTAINTY}
    detail = checks[rederive.UNCERTAINTY].detail
    assert detail.startswith("manifest.json summary.uncertainty differs from the budgets "
                             "re-derived from traces/emon.jls and events.jsonl at ")
    assert "energy_per_inference_j.u_c" in detail and "energy_per_inference_j.U" in detail
    assert "idle_power_w" not in detail


def test_a_trace_current_scaled_by_0_9(copy: Path, labels: np.ndarray) -> None:
    """The whole trace rewritten as the rig writes one, its user data (instrument, set
    voltage) kept: only the samples differ from what the events were derived from."""
    path = copy / "traces" / "emon.jls"
    trace = read_trace(path)
    user = trace.meta["user_data"]
    kept = trace.voltage_set
    path.unlink()
    with TraceWriter(path, trace.sample_rate, simulated=trace.simulated,
                     set_voltage=(kept["volts"], kept["source"]) if kept else None,
                     instrument=user["instrument"]) as w:
        w.append(0, trace.current * 0.9, trace.voltage, trace.gpio)
    checks = by_item(asc_checks(copy, labels))
    got = failed(list(checks.values()))
    assert {"idle_power_w re-derived", "active_power_w re-derived", "dynamic_power_w re-derived",
            "energy_per_inference_j re-derived", "dynamic_energy_per_inference_j re-derived",
            rederive.WINDOW_ENERGIES, rederive.IDLE_POWER, rederive.UNCERTAINTY} <= got
    assert "relative difference 1.00e-01" in checks["active_power_w re-derived"].detail
    # The rewrite kept everything else: the instrument it names, its edges, its rate.
    assert checks[rederive.TRACE_INSTRUMENT].ok and checks[rederive.EDGES_ACCOUNTED].ok
    assert checks[rederive.SAMPLE_RATE].ok


def test_a_window_narrowed_in_the_events(copy: Path, labels: np.ndarray) -> None:
    """Window 2 starts 100 samples late; its energy and duration re-derived from the trace
    over the narrowed span and the summary made again: consistent with itself."""
    trace = read_trace(copy / "traces" / "emon.jls")

    def narrow(records: list[dict[str, Any]]) -> None:
        w = of(records, "window_measured", index=2)
        w["start_sample"] += 100
        [energy] = window_energies(trace.current, trace.voltage,
                                   np.array([[w["start_sample"], w["end_sample"]]]),
                                   trace.sample_rate)
        w["duration_s"] = (w["end_sample"] - w["start_sample"]) / trace.sample_rate
        w["start_s"] = w["start_sample"] / trace.sample_rate
        w["energy_j"] = float(energy)
        w["mean_power_w"] = w["energy_j"] / w["duration_s"]
        w["energy_per_inference_j"] = w["energy_j"] / w["iterations"]

    edit_events(copy, narrow)
    resummarize(copy)
    checks = by_item(asc_checks(copy, labels))
    assert checks[rederive.WINDOW_EDGES].ok is False
    assert "window 2 starts at sample" in checks[rederive.WINDOW_EDGES].detail
    assert checks[rederive.ON_EDGES].ok is False
    assert checks[rederive.WINDOW_ENERGIES].ok is True  # the cheat was consistent


def test_the_inference_count_inflated(copy: Path, labels: np.ndarray) -> None:
    """Window 1 claims 25 % more inferences: its energy per inference drops by a fifth."""
    iterations = of(read_events(copy), "window_measured", index=1)["iterations"]
    edit_events(copy, lambda rs: inflate(rs, 1, round(iterations * 1.25), latency_too=False))
    resummarize(copy)
    checks = by_item(asc_checks(copy, labels))
    assert checks[rederive.ITERATIONS].ok is False
    assert checks[rederive.PER_INFERENCE_DUT].ok is False
    assert "window 1:" in checks[rederive.PER_INFERENCE_DUT].detail


def test_the_inference_count_inflated_in_every_event(copy: Path, labels: np.ndarray) -> None:
    """Every window and timed run alike: the DUT's lap counter over the inflated count agrees,
    the test samples (one inference each) do not."""
    iterations = of(read_events(copy), "window_measured", index=0)["iterations"]
    edit_events(copy, lambda rs: [inflate(rs, k, round(iterations * 1.25), latency_too=True)
                                  for k in range(5)])
    resummarize(copy)
    assert failed(asc_checks(copy, labels)) == {rederive.PER_INFERENCE_SAMPLES}


def test_an_idle_span_from_another_session(copy: Path, labels: np.ndarray,
                                           measured: tuple[Path, np.ndarray, Path]) -> None:
    other = load_run(measured[2])
    [stolen] = [e for e in other.events if isinstance(e, IdleMeasured)]
    [mine] = [e for e in load_run(copy).events if isinstance(e, IdleMeasured)]
    assert (stolen.start_sample, stolen.end_sample) != (mine.start_sample, mine.end_sample)

    def swap(records: list[dict[str, Any]]) -> None:
        records[records.index(of(records, "idle_measured"))] = stolen.to_record()

    edit_events(copy, swap)
    resummarize(copy)
    assert json.loads((copy / "manifest.json").read_text())["summary"]["idle_power_w"] == \
        pytest.approx(0.9e-3, rel=1e-3)  # the stolen span's power is now the run's
    checks = by_item(asc_checks(copy, labels))
    assert checks[rederive.IDLE_EDGES].ok is False
    assert checks[rederive.IDLE_POWER].ok is False
    assert checks["idle_power_w re-derived"].ok is False
    assert checks[rederive.WINDOW_EDGES].ok is True


def test_the_sample_rate_changed_in_the_manifest(copy: Path, labels: np.ndarray) -> None:
    def change(m: dict[str, Any]) -> None:
        m["instruments"]["emon"]["sample_rate_hz"] = 1100.0
        m["bench"]["emon"]["sample_rate_hz"] = 1100.0

    edit_manifest(copy, change)
    checks = by_item(asc_checks(copy, labels))
    assert checks[rederive.SAMPLE_RATE].ok is False
    assert "manifest.json instruments.emon.sample_rate_hz = 1100.0" in \
        checks[rederive.SAMPLE_RATE].detail


def test_accuracy_edited(copy: Path, labels: np.ndarray) -> None:
    """In the manifest and in run_finished alike (events.jsonl and manifest.json agree)."""
    def perfect(summary: dict[str, Any]) -> None:
        summary.update(accuracy=1.0, correct=summary["samples"])

    edit_events(copy, lambda rs: perfect(of(rs, "run_finished")["summary"]))
    edit_manifest(copy, lambda m: perfect(m["summary"]))
    assert failed(asc_checks(copy, labels)) == {rederive.ACCURACY}


def test_accuracy_counted_on_part_of_the_test_set(copy: Path, labels: np.ndarray) -> None:
    """The misclassified samples dropped from the events, the summary made again: 100 %."""
    records = read_events(copy)
    wrong = [r for r in records if r["event"] == "sample_classified" and not r["correct"]]
    assert wrong, "the virtual DUT's model misclassifies some sample"
    write_events(copy, [r for r in records if r not in wrong])
    resummarize(copy)
    assert json.loads((copy / "manifest.json").read_text())["summary"]["accuracy"] == 1.0
    checks = by_item(asc_checks(copy, labels))
    assert checks[rederive.INDICES].ok is False
    assert f"{len(wrong)} of {len(labels)} indices missing" in checks[rederive.INDICES].detail
    assert checks[rederive.METHOD_TEST_SET].ok is False


def test_a_qubo_cost_edited(sweep_copy: Path) -> None:
    def better(result: dict[str, Any]) -> None:
        result["cost"] -= 1
        result["improvements"][-1][1] -= 1
        result["gap"] = (result["cost"] - result["target"]) / abs(result["target"])

    edit_point(sweep_copy, 0, better, timeout_s=0.05)
    checks = by_item(qubo_checks(sweep_copy))
    assert checks[rederive.QUBO_COST].ok is False
    assert "its solution costs" in checks[rederive.QUBO_COST].detail


def test_a_qubo_point_whose_solve_overran_its_timeout(sweep_copy: Path) -> None:
    """The 0.2 s solve's result reported as the 0.05 s point's. Its CPU time is made its wall
    time, as on a free host: on a loaded one the solver may have got less than a quarter of
    its CPU, which the check takes for waiting (and a solve that ran 0.05 s of CPU is no
    longer solve passed off as a shorter one)."""
    records = read_events(sweep_copy)
    long = of(records, "sweep_point", timeout_s=0.2)["result"]
    long["solver_cpu_s"] = long["elapsed_s"]
    edit_point(sweep_copy, 0, lambda r: r.update(json.loads(json.dumps(long))), timeout_s=0.05)
    checks = by_item(qubo_checks(sweep_copy))
    assert checks[rederive.QUBO_TIMEOUT].ok is False
    assert "timeout 0.05 s" in checks[rederive.QUBO_TIMEOUT].detail
    assert checks[rederive.QUBO_COST].ok is True  # the solution is real: only late
