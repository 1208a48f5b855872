"""ASC end to end on the virtual bench: the rig talks over real ptys, through pyserial, to a
simulated MLPerf Tiny DUT and a simulated LPM01A, and must measure the simulated truth.

Most commands run in this process (`rig_in_process`): a new interpreter's start-up and imports
cost ~1 s of CPU a `rig`, as much as a refusal's work. Still run as a user runs them: one
measurement (its table), one refusal (its single line on stderr), one `rig show`, `rig analyze`.
The virtual bench (`--device sim`, a `[sim]` bench) is its own processes either way."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from drivers.emon.accuracy import MonitorAccuracy
from drivers.emon.joulescope import joulescope_accuracy
from drivers.emon.lpm01a import ACCURACY as LPM01A_ACCURACY
from firmware.dut.asc_model import LinearAscModel
from rig.bench.config import load_bench
from rig.cli import main
from rig.datasets.synthetic import make_split
from rig.traces.analysis import analyze
from rig.traces.files import read_trace

from .runs import REPO, TRUTH, bench_variant, only_run, rig_in_process, run_rig

pytestmark = pytest.mark.slow


def expected_accuracy(samples_per_class: int = 10, seed: int = 0) -> float:
    """The DUT's model applied directly to the same test split (what the DUT must reproduce)."""
    model = LinearAscModel.load()
    test = make_split(samples_per_class, seed, "test")
    return float(np.mean([model.predict(x.tobytes()) == y
                          for x, y in zip(test.inputs, test.labels, strict=True)]))


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory) -> tuple[dict, Path]:
    """One `rig measure asc --device sim --json` run, shared by the checks below."""
    runs = tmp_path_factory.mktemp("runs")
    proc = rig_in_process("measure", "asc", "--device", "sim", "--runs-dir", str(runs),
                          "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)  # exactly one JSON object on stdout
    return out, only_run(runs)


def test_results_equal_the_simulated_truth_within_0_1_percent(sim_run) -> None:
    out, _ = sim_run
    s = out["summary"]
    assert out["status"] == "complete" and out["simulated"] is True and s["simulated"] is True
    for key, truth in TRUTH.items():
        assert s[key] == pytest.approx(truth, rel=1e-3), key
    assert s["latency_runs"] == 5 and s["energy_windows"] == 5
    assert s["latency_timer"] == "emon"
    assert all(c["ok"] for c in s["checks"]), s["checks"]


def test_the_manifest_records_the_virtual_duts_image_by_digest(sim_run) -> None:
    """Issue 38: the DUT the virtual bench ran (the host build of the C firmware) is recorded
    with its SHA-256 and size, beside its path, and `rig show` prints them."""
    _, run = sim_run
    manifest = json.loads((run / "manifest.json").read_text())
    vb = manifest["instruments"]["virtual_bench"]
    binary = Path(vb["dut"].removeprefix("c-shim (").split(")")[0])
    assert vb["images"] == {"dut": {"path": str(binary),
                                    "sha256": hashlib.sha256(binary.read_bytes()).hexdigest(),
                                    "size_bytes": binary.stat().st_size}}
    shown = rig_in_process("show", str(run))
    assert shown.returncode == 0, shown.stderr
    assert (f"virtual bench dut: {binary}, sha256 {vb['images']['dut']['sha256']}"
            in " ".join(shown.stdout.split()))


def test_accuracy_is_the_dut_models_on_every_test_sample(sim_run) -> None:
    s = sim_run[0]["summary"]
    assert s["samples"] == 40
    assert s["accuracy"] == pytest.approx(expected_accuracy(), abs=1e-12)
    assert s["accuracy"] > 0.5  # four classes: chance is 0.25


def test_run_folder_has_everything_labelled_simulated(sim_run) -> None:
    out, run = sim_run
    assert out["run"] == str(run)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["simulated"] is True
    assert manifest["bench"]["sim"]["active_power_mw"] == 3.6
    emon = manifest["instruments"]["emon"]
    assert emon["simulated"] is True and emon["version"].endswith("-sim")
    dut = manifest["instruments"]["dut"]
    assert dut["timestamp_mode"] == "energy"
    assert dut["capabilities"] == ["bload", "dbcrc", "elap", "lapcrc", "rcrc"]
    assert dut["model"] == "asc01"
    # gcc is on every machine this suite runs on: the real C firmware was the DUT.
    assert manifest["instruments"]["virtual_bench"]["dut"].startswith("c-shim")
    notes = [e["text"] for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())
             if e["event"] == "note"]
    assert "inputs are downloaded binary with CRC-32 (16000 bytes each)" in notes
    assert dut["vendor"] == "neurobench-rig host shim"
    assert {"python", "numpy", "pyserial", "pyjls"} <= set(manifest["software"])
    rows = pq.read_table(run / "results.parquet").to_pylist()
    kinds = [r["kind"] for r in rows]
    assert kinds.count("latency_run") == 5 and kinds.count("window") == 5
    assert kinds.count("idle") == 1 and kinds.count("sample") == 40
    assert all(r["simulated"] for r in rows)
    assert (run / "results.csv").read_text().count("\n") == len(rows) + 1


def test_stored_trace_reanalysed_gives_the_live_numbers(sim_run) -> None:
    """The JLS trace in the run folder holds the same windows the live pipeline measured."""
    _, run = sim_run
    trace = read_trace(run / "traces" / "emon.jls")
    assert trace.simulated and trace.sample_rate == 1000
    result = analyze(trace.current, trace.voltage, trace.gpio, trace.sample_rate)
    # calibration + idle span + 5 runs + 40 samples, two edges each
    assert len(result.windows) == 1 + 1 + 5 + 40
    live = [json.loads(x) for x in (run / "events.jsonl").read_text().splitlines()]
    live_windows = [e for e in live if e["event"] == "window_measured"]
    for stored, event in zip(result.windows[2:7], live_windows, strict=True):
        assert (stored.start_sample, stored.end_sample) == (
            event["start_sample"], event["end_sample"])
        assert stored.energy_j == pytest.approx(event["energy_j"], rel=1e-6)
    marks = dict(trace.meta["annotations"])
    first = live_windows[0]
    assert marks[first["start_sample"]].startswith("run 0 start (")
    assert marks[first["end_sample"]].startswith("run 0 end: 45 uJ/inf")


def test_show_reads_the_folder_back(sim_run) -> None:
    out, run = sim_run
    proc = rig_in_process("show", str(run), "--json")
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert shown["status"] == "complete" and shown["simulated"] is True
    assert shown["measured"] == {"idle": 1, "latency_run": 5, "sample": 40, "window": 5}
    assert shown["summary"]["energy_per_inference_j"] == out["summary"]["energy_per_inference_j"]
    text = run_rig("show", str(run))  # the file's one `rig show` as a user runs it
    assert text.returncode == 0 and "SIMULATED" in text.stdout and "complete" in text.stdout


def test_human_output_has_table_and_run_folder(tmp_path: Path) -> None:
    # the file's one measurement as a user runs it (the console script, its table)
    proc = run_rig("measure", "asc", "--device", "sim", "--runs-dir", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "Energy per inference" in proc.stdout and "45.00 µJ" in proc.stdout
    assert f"run folder: {only_run(tmp_path)}" in proc.stdout.replace("\n", "")


def test_performance_mode_times_with_the_dut_timer(tmp_path: Path, capsys) -> None:
    bench = bench_variant(tmp_path, mode=('timestamp_mode = "energy"',
                                          'timestamp_mode = "performance"'),
                          speed=("speed = 50", "speed = 100"))
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    s = out["summary"]
    assert s["latency_timer"] == "dut"
    # The DUT's µs timer counts whole 12.5 ms inferences: exact.
    assert s["inferences_per_s"] == pytest.approx(80.0, rel=1e-9)
    assert "energy_per_inference_j" not in s and s["power"].startswith("unavailable")
    assert s["accuracy"] == pytest.approx(expected_accuracy(), abs=1e-12)


def test_python_dut_measures_the_same(tmp_path: Path, capsys) -> None:
    """Without the C shim the Python simulation of the same firmware gives the same figures."""
    bench = bench_variant(tmp_path, dut=('dut = "auto"', 'dut = "python"'),
                          speed=("speed = 50", "speed = 100"))
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    for key, truth in TRUTH.items():
        assert out["summary"][key] == pytest.approx(truth, rel=1e-3), key
    assert out["summary"]["accuracy"] == pytest.approx(expected_accuracy(), abs=1e-12)
    manifest = json.loads((Path(out["run"]) / "manifest.json").read_text())
    assert manifest["instruments"]["virtual_bench"]["dut"] == "python"


def test_bench_limit_is_enforced_before_anything_starts(tmp_path: Path) -> None:
    bench = bench_variant(tmp_path, v=("supply_voltage_v = 1.8", "supply_voltage_v = 3.5"))
    # the file's one refusal as a user runs it: nothing else on stderr
    proc = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"))
    assert proc.returncode == 2
    assert "3.5 V is above the bench voltage limit of 3.3 V" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()  # no run folder, no virtual bench, no instrument


def test_bench_file_loads_like_the_shipped_one() -> None:
    assert load_bench(REPO / "benches" / "sim.toml").asc.runs == 5


def test_failed_checks_exit_1_and_are_kept(tmp_path: Path) -> None:
    """A run whose own replicability check fails: exit 1, status failed-checks, data kept."""
    strict = "idle_s = 2.0\nreplicability_tolerance = 1e-9"
    bench = bench_variant(tmp_path, tol=("idle_s = 2.0", strict),
                          speed=("speed = 50", "speed = 100"))
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir",
                          str(tmp_path / "r"), "--json")
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "failed-checks"
    failed = [c["name"] for c in out["summary"]["checks"] if not c["ok"]]
    assert "energy replicable" in failed
    assert out["summary"]["energy_per_inference_j"] == pytest.approx(45e-6, rel=1e-3)


def test_through_an_io_manager(tmp_path: Path) -> None:
    """benches/sim-io-manager.toml: the DUT reached only through the UNO's pass-through."""
    proc = rig_in_process("measure", "asc", "--device", "sim-io-manager", "--runs-dir",
                          str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key, truth in TRUTH.items():
        assert out["summary"][key] == pytest.approx(truth, rel=1e-3), key
    assert out["summary"]["samples"] == 8
    assert out["summary"]["accuracy"] == pytest.approx(expected_accuracy(2), abs=1e-12)
    run = Path(out["run"])
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["instruments"]["io_manager"]["name"]
    notes = [e["text"] for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())
             if e["event"] == "note"]
    # Hex behind the IO manager, checked by the DUT's db crc (passed through), not read back.
    assert any("downloaded hex, checked by CRC-32" in n for n in notes)


def test_with_a_joulescope(tmp_path: Path) -> None:
    """benches/sim-joulescope.toml: the real Joulescope driver over the Driver stand-in; the
    DUT is connected by its current range and its GPIO read on GPI0."""
    proc = rig_in_process("measure", "asc", "--device", "sim-joulescope", "--runs-dir",
                          str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    for key, truth in TRUTH.items():
        assert out["summary"][key] == pytest.approx(truth, rel=1e-3), key
    manifest = json.loads((Path(out["run"]) / "manifest.json").read_text())
    assert manifest["instruments"]["emon"]["driver"] == "joulescope"
    assert manifest["instruments"]["emon"]["simulated"] is True
    # The simulator stands for a JS220 (1 kHz here): the run declares that model's accuracy.
    declared = manifest["instruments"]["emon"]["accuracy"]
    assert MonitorAccuracy.from_json(declared) == joulescope_accuracy("js220")


def test_the_manifest_carries_the_lpm01a_s_published_accuracy(sim_run) -> None:
    """The simulated LPM01A is reached through the real driver, so the run declares the real
    board's accuracy (UM2243 §10), with its source, for the uncertainty budget."""
    manifest = json.loads((sim_run[1] / "manifest.json").read_text())
    declared = manifest["instruments"]["emon"]["accuracy"]
    assert MonitorAccuracy.from_json(declared) == LPM01A_ACCURACY
    (dynamic,) = declared["current_ranges"]
    assert dynamic["current"]["gain"] == 0.02 and "UM2243" in dynamic["current"]["source"]


def test_every_figure_has_its_gum_budget_in_manifest_show_and_analyze(sim_run) -> None:
    """The LPM01A's 2 % gain (UM2243 §10) is a published Type B term: 0.02·P/√3 on active
    power and 0.02·(P_a − P_i)/√3 on dynamic power (one range: the gain is correlated); ST
    publishes no supply setting or sample clock accuracy, so the budgets are incomplete."""
    out, run = sim_run
    budgets = out["summary"]["uncertainty"]
    assert set(budgets) == set(TRUTH)
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["summary"]["uncertainty"] == budgets
    shown = json.loads(rig_in_process("show", str(run), "--json").stdout)
    assert shown["summary"]["uncertainty"] == budgets
    s = out["summary"]
    active = {c["name"]: c for c in budgets["active_power_w"]["components"]}
    gain = active["active power: current gain (dynamic range)"]
    assert gain["value"] == pytest.approx(0.02 * s["active_power_w"] / np.sqrt(3))
    assert gain["type"] == "B" and "UM2243" in gain["source"] and gain["published"]
    dynamic = budgets["dynamic_power_w"]
    assert dynamic["u_c"] == pytest.approx(
        0.02 * s["dynamic_power_w"] / np.sqrt(3), rel=1e-3)  # the Type A terms are tiny
    assert not dynamic["complete"] and "active power: supply voltage" in dynamic["unknown"]
    assert all(b["coverage"] == 0.95 and b["lower_bound"] for b in budgets.values())
    analyzed = json.loads(run_rig("analyze", str(run), "--json").stdout)
    assert analyzed["uncertainty"]["active_power_w"]["u_c"] == pytest.approx(
        budgets["active_power_w"]["u_c"], rel=1e-6)


def test_a_bound_fails_the_run_naming_each_figure(tmp_path: Path) -> None:
    """A bound is never met by a figure with a term not published: with the LPM01A (supply
    setting and sample clock not published) every figure is named, exit 1."""
    bench = bench_variant(tmp_path, idle=("idle_s = 2.0", "idle_s = 2.0\n"
                                          "max_relative_uncertainty = 1.0"))
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir",
                          str(tmp_path / "runs"), "--json")
    assert proc.returncode == 1, proc.stderr
    (check,) = [c for c in json.loads(proc.stdout)["summary"]["checks"]
                if c["name"] == "uncertainty within bound"]
    assert check["ok"] is False and check["detail"].startswith("7 of 7 figures beyond")
    assert "energy per inference: uncertainty incomplete (unknown: supply voltage, lpm01a " \
           "sample clock)" in check["detail"]


@pytest.mark.parametrize("bound", ["1.5", "-0.01"])
def test_a_bound_outside_0_1_is_refused_in_one_line(tmp_path: Path, bound: str) -> None:
    bench = bench_variant(tmp_path, idle=("idle_s = 2.0", "idle_s = 2.0\n"
                                          f"max_relative_uncertainty = {bound}"))
    runs = tmp_path / "runs"
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"rig: error: {bench}: [procedure.asc] "
                                   "max_relative_uncertainty: expected a number in [0, 1], "
                                   f"found {float(bound)!r}")
    assert not runs.exists() or not any(runs.iterdir())
