"""A lab's own accuracy figures on the virtual bench (issue 37): `[emon.accuracy]` gives the
LPM01A's supply setting and sample clock that ST does not publish, `[dut] clock_ppm` the DUT
oscillator's tolerance. Every budget then becomes complete and equals the closed form (the idle
span's Type A from its ten sub-spans).

The runs are made in this process (their JSON and folder are what is read); one refusal still
runs as a user runs it (the console script: exit 2, one line on stderr)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from drivers.emon.accuracy import MonitorAccuracy, Spec
from drivers.emon.lpm01a import ACCURACY as LPM01A_ACCURACY

from .runs import bench_variant, events, only_run, rig_in_process, run_rig

pytestmark = pytest.mark.slow

CERT = "calibration certificate 1234, 2026-03-01"
#: The lab's figures: ± (1 % + 5 mV) on the set supply, ± 100 ppm on the sample clock.
LAB = f"""
[emon.accuracy]
voltage_gain = 0.01
voltage_offset_v = 0.005
clock_ppm = 100
source = "{CERT}"
"""
VOLTS, FS = 1.8, 1000.0
ROOT3 = math.sqrt(3)


def lab_bench(tmp_path: Path, name: str, bound: str, lab: str = LAB,
              dut_clock: str = 'clock_ppm = 50\nclock_source = "DUT crystal datasheet"\n'
              ) -> Path:
    """benches/sim.toml made short (2 runs of 1 s, one sample per class), with the lab's
    figures, the DUT's clock and a bound."""
    return bench_variant(
        tmp_path, name,
        spc=("samples_per_class = 10", "samples_per_class = 1"),
        runs=("runs = 5", "runs = 2"), run_s=("min_run_s = 10.0", "min_run_s = 1.0"),
        dut=('timestamp_mode = "energy"\n', f'timestamp_mode = "energy"\n{dut_clock}'),
        emon=("supply_voltage_v = 1.8\n", f"supply_voltage_v = 1.8\n{lab}"),
        bound=("idle_s = 2.0", f"idle_s = 2.0\nmax_relative_uncertainty = {bound}"))


def measure(bench: Path, runs: Path, *args: str) -> tuple[int, dict, Path]:
    """`rig measure asc --json` in this process (its JSON and folder are what is read)."""
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs),
                          "--json", *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout), only_run(runs)


def stderr(values: list[float]) -> float:
    """The standard deviation of the mean."""
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def bound_check(out: dict) -> dict:
    (check,) = [c for c in out["summary"]["checks"] if c["name"] == "uncertainty within bound"]
    return check


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory) -> tuple[int, dict, Path]:
    tmp = tmp_path_factory.mktemp("lab")
    return measure(lab_bench(tmp, "lab", "0.05"), tmp / "runs")


def test_the_manifest_declares_the_lab_s_figures_beside_st_s(lab_run) -> None:
    manifest = json.loads((lab_run[2] / "manifest.json").read_text())
    declared = MonitorAccuracy.from_json(manifest["instruments"]["emon"]["accuracy"])
    assert declared.current_ranges == LPM01A_ACCURACY.current_ranges  # ST's 2 % kept
    for spec in (declared.voltage_set, declared.clock):
        assert isinstance(spec, Spec) and spec.source == f"lab: {CERT}"
    assert "voltage set, clock" in declared.notes
    assert manifest["bench"]["emon_accuracy"]["clock_ppm"] == 100.0


def test_active_power_and_energy_budgets_are_complete_and_equal_the_closed_form(lab_run
                                                                               ) -> None:
    s = lab_run[1]["summary"]
    budgets = s["uncertainty"]
    p, e = s["active_power_w"], s["energy_per_inference_j"]
    supply = (0.01 * VOLTS + 0.005) / VOLTS  # the lab's supply half-width, relative
    windows = [ev for ev in events(lab_run[2]) if ev["event"] == "window_measured"]
    t = sum(w["duration_s"] for w in windows) / len(windows)
    active = budgets["active_power_w"]
    assert active["complete"] and active["k"] == 2.0
    # Type A over the windows, ST's 2 % gain, the lab's supply (x I = P/V).
    type_a = stderr([w["mean_power_w"] for w in windows])
    assert active["U"] == pytest.approx(
        2 * math.sqrt(type_a**2 + (0.02 * p / ROOT3) ** 2 + (supply * p / ROOT3) ** 2),
        rel=1e-9)
    energy = budgets["energy_per_inference_j"]
    assert energy["complete"] and energy["k"] == 2.0
    # Type A, ST's gain and the lab's supply (x T/N), the lab's clock (100 ppm of T) and one
    # sample at each edge of T (x E/T).
    type_a = stderr([w["energy_per_inference_j"] for w in windows])
    expected = 2 * math.sqrt(type_a**2 + (e / ROOT3) ** 2 * (
        0.02**2 + supply**2 + 100e-6**2 + 2 * (1 / FS / t) ** 2))
    assert energy["U"] == pytest.approx(expected, rel=1e-9)


def test_the_dut_clock_completes_the_execution_time(lab_run) -> None:
    budget = lab_run[1]["summary"]["uncertainty"]["execution_time_mean_s"]
    clock = {c["name"]: c for c in budget["components"]}["execution time: DUT timer clock"]
    assert clock["value"] == pytest.approx(50e-6 * 12.5e-3 / ROOT3)
    assert clock["source"].startswith("lab: DUT crystal datasheet: ±50 ppm")
    assert budget["complete"]


def test_every_budget_is_complete_and_the_idle_one_equals_its_closed_form(lab_run) -> None:
    """The idle span's Type A comes from its ten sub-spans (batch means), so with the lab's
    figures every budget of the run is complete, the idle one is 2 sqrt(u_A^2 + (0.02 P_i /
    sqrt 3)^2 + (supply P_i / sqrt 3)^2), the dynamic one carries idle's gain and supply
    correlated with active's (they scale with P_a - P_i), and the loose bound passes."""
    code, out, run = lab_run
    s = out["summary"]
    budgets = s["uncertainty"]
    assert {k: b["unknown"] for k, b in budgets.items() if not b["complete"]} == {}
    (idle,) = [ev for ev in events(run) if ev["event"] == "idle_measured"]
    windows = [ev for ev in events(run) if ev["event"] == "window_measured"]
    p_i, p_a = s["idle_power_w"], s["active_power_w"]
    supply = (0.01 * VOLTS + 0.005) / VOLTS
    idle_a = stderr(idle["sub_span_powers_w"])
    assert len(idle["sub_span_powers_w"]) == 10
    assert budgets["idle_power_w"]["U"] == pytest.approx(
        2 * math.sqrt(idle_a**2 + (0.02 * p_i / ROOT3) ** 2 + (supply * p_i / ROOT3) ** 2),
        rel=1e-9)
    active_a = stderr([w["mean_power_w"] for w in windows])
    dynamic = budgets["dynamic_power_w"]
    assert dynamic["complete"] and dynamic["k"] == 2.0
    # two groups (the range's gain, the supply), each linear within, in quadrature between
    assert dynamic["U"] == pytest.approx(2 * math.sqrt(
        active_a**2 + idle_a**2 + (0.02 * (p_a - p_i) / ROOT3) ** 2
        + (supply * (p_a - p_i) / ROOT3) ** 2), rel=1e-9)
    check = bound_check(out)
    assert code == 0 and check["ok"], check
    assert check["detail"] == "all 7 figures within U/|value| <= 0.05 (95 %)"


def test_a_tight_bound_fails_the_complete_figures_too(tmp_path: Path) -> None:
    code, out, _ = measure(lab_bench(tmp_path, "tight", "0.01"), tmp_path / "runs")
    check = bound_check(out)
    assert code == 1 and check["detail"].startswith("5 of 7 figures beyond U/|value| <= 0.01")
    assert "active power: U/|value|" in check["detail"]


def test_a_loose_bound_passes_where_every_figure_is_complete(tmp_path: Path) -> None:
    """Latency only (no idle span): with the lab's sample clock both figures are complete, and
    a loose bound passes (exit 0) where a tight one fails (exit 1)."""
    code, out, _ = measure(lab_bench(tmp_path, "loose", "0.05"), tmp_path / "loose",
                           "--scope", "performance")
    assert code == 0 and bound_check(out) == {
        "name": "uncertainty within bound", "ok": True,
        "detail": "all 2 figures within U/|value| <= 0.05 (95 %)"}
    code, out, _ = measure(lab_bench(tmp_path, "tight", "0.001"), tmp_path / "tight",
                           "--scope", "performance")
    assert code == 1 and bound_check(out)["detail"].startswith("2 of 2 figures beyond")


@pytest.mark.parametrize(("lab", "dut_clock", "message"), [
    (LAB.replace(f'source = "{CERT}"\n', ""), "",
     "[emon.accuracy] source is missing: every figure a lab declares cites where it comes from"),
    (LAB.replace("clock_ppm = 100", "clock_ppm = -100"), "",
     "[emon.accuracy] clock_ppm: expected a number in [0, 1000000] ppm, found -100"),
    ("", "clock_ppm = 50\n", "[dut] clock_ppm is given without clock_source"),
])
def test_a_figure_without_its_source_or_below_0_is_refused_in_one_line(
        tmp_path: Path, lab: str, dut_clock: str, message: str) -> None:
    bench = lab_bench(tmp_path, "refused", "0.05", lab=lab, dut_clock=dut_clock)
    runs = tmp_path / "runs"
    # the first as a user runs it (the console script prints nothing but its line)
    rig = run_rig if message.startswith("[emon.accuracy] source is missing") else rig_in_process
    proc = rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs))
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"rig: error: {bench}: {message}")
    assert not runs.exists() or not any(runs.iterdir())
