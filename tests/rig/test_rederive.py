"""`rig.submission.rederive`: each check of one run folder holds on an honest run and fails, by
name, on the one thing changed.

The ASC runs here are written by the run store from events made in closed form: a trace at
1 kHz whose currents (2**-11 A idle, 2**-9 A active, at 2 V) are exact in float32, so every
figure is a power of two and every sum exact; the windows are where the test put the pulses.
The QUBO sweeps come from a point function whose solution is a greedy independent set: its cost
is minus its size, known without evaluating x^T Q x.
"""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rig.bench.config import load_bench
from rig.datasets import testsets
from rig.errors import ConfigError
from rig.qubo.sweep import parse_sweep, start_sweep, summarize
from rig.qubo.sweep import read_sweep as read_sweep_folder
from rig.qubo.targets import table
from rig.qubo.workloads import generate
from rig.run import asc
from rig.run.events import (
    Event,
    IdleMeasured,
    InstrumentInfo,
    LatencyRun,
    RunFinished,
    RunStarted,
    SampleClassified,
    TestSetLoaded,
    TraceSaved,
    WindowMeasured,
)
from rig.run.store import EVENTS, MANIFEST, RunStore
from rig.submission import rederive
from rig.submission.checks import Check
from rig.submission.rederive import asc_checks, qubo_checks
from rig.traces.files import TraceWriter

REPO = Path(__file__).resolve().parents[2]

FS = 1000.0
VOLTS = 2.0
I_IDLE, I_ACTIVE = 2.0**-11, 2.0**-9  # A: exact in float32
P_IDLE, P_ACTIVE = I_IDLE * VOLTS, I_ACTIVE * VOLTS  # 2**-10 W and 2**-8 W
ITERATIONS = 816
RUN_SAMPLES = 10_200  # 10.2 s at 1 kHz: 816 inferences of 12.5 ms
DUT_INFERENCE_S = 0.0125
SAMPLE_SAMPLES = 13  # each test sample's window: 13 ms by the monitor, 12.5 ms by the DUT
LABELS = np.array([2, 1, 0, 3])
PREDICTED = (2, 1, 3, 3)  # 3 of 4 right
EMON = {"driver": "fake", "model": "FAKE-1", "serial": "S123", "version": "2.0",
        "sample_rate_hz": FS, "voltage_v": VOLTS}
IDLE = (500, 2500)
CALIBRATION = (100, 225)


def unit_test_set() -> testsets.TestSet:
    return testsets.TestSet([bytes([k]) * 16 for k in range(4)], LABELS, "unit test set")


# -- a closed-form ASC run folder ------------------------------------------------------------
def asc_run(root: Path, *, runs: int = 5, run_samples: int = RUN_SAMPLES,
            iterations: int = ITERATIONS, factors: tuple[float, ...] | None = None,
            scope: str = "all", predicted: tuple[int, ...] = PREDICTED,
            trace_instrument: dict[str, Any] | None = None, nan_at: int | None = None,
            dropped: int = 0, extra_pulse: int | None = None, energy_mode: bool = True
            ) -> Path:
    """A complete run folder, written by the run store from closed-form events; `factors`
    scales each timed run's active current (replicability); `extra_pulse` puts a stray pulse
    pair there; `nan_at` three lost samples; `energy_mode=False` a performance-mode run with
    no trace."""
    factors = factors or (1.0,) * runs
    bench = load_bench(REPO / "benches" / "sim.toml").snapshot()
    store = RunStore.create(root, "asc", "unit")
    events: list[Event] = []

    def publish(event: Event) -> None:
        events.append(event)
        store(event)

    publish(RunStarted(run_id="unit", procedure="asc", device="unit",
                       manifest={"bench": bench, "run_folder": store.path.name, "scope": scope}))
    if energy_mode:
        publish(InstrumentInfo(role="emon", info=dict(EMON)))
    publish(InstrumentInfo(role="dut", info={
        "name": "dut", "vendor": "unit", "model": "asc01", "capabilities": ["elap", "rcrc"],
        "timestamp_mode": "energy" if energy_mode else "performance", "simulated": False}))
    publish(TestSetLoaded(test_set=testsets.test_set_digest(unit_test_set())))

    run_starts = [3000 + k * (run_samples + 800) for k in range(runs)]
    first_sample = (run_starts[-1] + run_samples + 1000) if runs else 3000
    sample_starts = [first_sample + 100 * j for j in range(len(LABELS))]
    n = sample_starts[-1] + 500
    current = np.full(n, I_IDLE)
    edges: list[int] = []
    if scope != "accuracy":
        current[CALIBRATION[0]:CALIBRATION[1]] = I_ACTIVE
        edges += CALIBRATION
    if scope in ("all", "energy") and energy_mode:
        edges += IDLE
        a, b = IDLE
        mid = (a + b) // 2
        publish(IdleMeasured(start_sample=a, end_sample=b, duration_s=(b - a) / FS,
                             power_w=P_IDLE, sub_span_edges=(a, mid, b),
                             sub_span_powers_w=(P_IDLE, P_IDLE)))
    if scope != "accuracy":
        for k, (a, factor) in enumerate(zip(run_starts, factors, strict=True)):
            b = a + run_samples
            current[a:b] = I_ACTIVE * factor
            edges += (a, b)
            seconds = (b - a) / FS
            publish(LatencyRun(index=k, iterations=iterations, elapsed_s=seconds,
                               time_per_inference_s=seconds / iterations,
                               inferences_per_s=iterations / seconds,
                               timer="emon" if energy_mode else "dut", dut_elapsed_s=seconds,
                               emon_elapsed_s=seconds if energy_mode else None))
            if energy_mode and scope != "performance":
                power = P_ACTIVE * factor
                energy = power * (b - a) / FS
                publish(WindowMeasured(index=k, iterations=iterations, start_sample=a,
                                       end_sample=b, start_s=a / FS, end_s=b / FS,
                                       duration_s=seconds, energy_j=energy, mean_power_w=power,
                                       energy_per_inference_j=energy / iterations))
    if scope in ("all", "accuracy"):
        for j, (a, label, guess) in enumerate(zip(sample_starts, LABELS, predicted,
                                                  strict=True)):
            b = a + SAMPLE_SAMPLES
            current[a:b] = I_ACTIVE
            edges += (a, b)
            scores = [0.1] * 4
            scores[guess] = 0.7
            publish(SampleClassified(
                index=j, label=int(label), predicted=guess, correct=guess == label,
                scores=scores, execution_time_s=DUT_INFERENCE_S, timer="dut",
                dut_time_s=DUT_INFERENCE_S,
                emon_time_s=(b - a) / FS if energy_mode else None))
    if extra_pulse is not None:
        edges += (extra_pulse, extra_pulse + 20)
    if energy_mode:
        gpio = np.ones(n, dtype=np.uint8)
        for e in edges:
            gpio[e:e + 2] = 0  # a 2-sample low pulse: one falling edge at e
        if nan_at is not None:
            current[nan_at:nan_at + 3] = np.nan
        with TraceWriter(store.path / "traces" / "emon.jls", FS,
                         instrument=EMON if trace_instrument is None else trace_instrument) as w:
            w.append(0, current, np.full(n, VOLTS), gpio)
        publish(TraceSaved(path="traces/emon.jls", samples=n, sample_rate_hz=FS,
                           dropped=dropped))
    summary = asc.summarize(events, bench=bench, scope=scope)
    summary["simulated"] = False
    publish(RunFinished(status="complete", summary=summary))
    return store.path


# -- editing a run folder as a cheater would ----------------------------------------------------
def read_events(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / EVENTS).read_text().splitlines() if line]


def write_events(run: Path, records: list[dict[str, Any]]) -> None:
    (run / EVENTS).write_text("".join(json.dumps(r) + "\n" for r in records))


def edit_events(run: Path, change: Callable[[list[dict[str, Any]]], Any]) -> None:
    records = read_events(run)
    change(records)
    write_events(run, records)


def edit_manifest(run: Path, change: Callable[[dict[str, Any]], Any]) -> None:
    manifest = json.loads((run / MANIFEST).read_text())
    change(manifest)
    (run / MANIFEST).write_text(json.dumps(manifest, indent=2))


def resummarize(run: Path) -> None:
    """The summary made again from the (edited) events, in the manifest and in run_finished:
    a cheater who keeps the run consistent with itself."""
    manifest = json.loads((run / MANIFEST).read_text())
    records = read_events(run)
    events = [Event.from_record(r) for r in records]
    summary = asc.summarize(events, bench=manifest.get("bench"),
                            scope=manifest.get("scope", "all"))
    summary["simulated"] = manifest["summary"].get("simulated", False)
    for r in records:
        if r["event"] == "run_finished":
            r["summary"] = summary
    write_events(run, records)
    edit_manifest(run, lambda m: m.update(summary=summary))


def of(records: list[dict[str, Any]], kind: str, **match: Any) -> dict[str, Any]:
    """The one event of `kind` whose fields equal `match`."""
    [found] = [r for r in records if r["event"] == kind
               and all(r.get(k) == v for k, v in match.items())]
    return found


def failed(checks: list[Check]) -> set[str]:
    return {c.item for c in checks if c.ok is False}


def by_item(checks: list[Check]) -> dict[str, Check]:
    items = [c.item for c in checks]
    assert len(items) == len(set(items)), "an item named twice"
    return {c.item: c for c in checks}


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return asc_run(tmp_path_factory.mktemp("honest"))


@pytest.fixture
def copy(honest: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(honest, tmp_path / honest.name))


# -- the honest run -----------------------------------------------------------------------------
def test_the_closed_form_run_passes_every_check(honest: Path) -> None:
    summary = json.loads((honest / MANIFEST).read_text())["summary"]
    # The figures are the closed form's (powers of two), so what passes below is right.
    assert summary["idle_power_w"] == P_IDLE and summary["active_power_w"] == P_ACTIVE
    assert summary["energy_per_inference_j"] == pytest.approx(P_ACTIVE * 10.2 / 816, rel=1e-15)
    assert summary["accuracy"] == 0.75
    checks = asc_checks(honest, LABELS)
    assert {c.ok for c in checks} == {True}, [c for c in checks if c.ok is not True]
    assert {c.run for c in checks} == {honest.name}
    items = by_item(checks)
    for figure in ("idle_power_w", "active_power_w", "dynamic_power_w",
                   "energy_per_inference_j", "dynamic_energy_per_inference_j",
                   "inferences_per_s", "execution_time_mean_s"):
        assert rederive.figure_item(figure) in items
    assert "calibration run, idle span, 5 timed runs, 4 test samples" in \
        items[rederive.EDGES_ACCOUNTED].detail
    assert "3 of 4 = 0.75" in items[rederive.ACCURACY].detail
    assert "model FAKE-1, serial S123, version 2.0" in items[rederive.TRACE_INSTRUMENT].detail


def test_the_trace_is_read_once(honest: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rig.run.reproduce

    reads = []
    real = rederive.read_trace
    monkeypatch.setattr(rederive, "read_trace",
                        lambda p, **kw: reads.append(p) or real(p, **kw))
    monkeypatch.setattr(rig.run.reproduce, "read_trace",
                        lambda p, **kw: pytest.fail("read again"))
    # The run folder too: its events are read once, not again to re-derive the figures.
    monkeypatch.setattr(rig.run.reproduce, "load_run", lambda p: pytest.fail("loaded again"))
    asc_checks(honest, LABELS)
    assert len(reads) == 1
    # A trace read by the caller (a benchmark timing the read apart) is not read at all.
    trace = real(honest / "traces" / "emon.jls")
    assert failed(asc_checks(honest, LABELS, trace=trace)) == set()
    assert len(reads) == 1


def test_not_an_asc_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is not a run folder"):
        asc_checks(tmp_path, LABELS)
    sweep = qubo_sweep(tmp_path)
    with pytest.raises(ConfigError, match="not an ASC run folder"):
        asc_checks(sweep, LABELS)


# -- 1. figures -----------------------------------------------------------------------------
@pytest.mark.parametrize("figure", ["idle_power_w", "energy_per_inference_j",
                                    "inferences_per_s"])
def test_a_figure_edited_in_the_manifest_fails_by_name(copy: Path, figure: str) -> None:
    edit_manifest(copy, lambda m: m["summary"].update({figure: m["summary"][figure] * 0.99}))
    checks = asc_checks(copy, LABELS)
    assert failed(checks) == {rederive.figure_item(figure), rederive.MANIFEST_EVENTS}
    assert "relative difference 1.0" in by_item(checks)[rederive.figure_item(figure)].detail


def test_a_figure_edited_everywhere_fails_against_the_trace(copy: Path) -> None:
    """The summary edited in the manifest and in run_finished alike."""
    def change(records: list[dict[str, Any]]) -> None:
        of(records, "run_finished")["summary"]["active_power_w"] *= 1.001

    edit_events(copy, change)
    edit_manifest(copy, lambda m: m["summary"].update(active_power_w=P_ACTIVE * 1.001))
    assert failed(asc_checks(copy, LABELS)) == {"active_power_w re-derived"}


def test_a_window_energy_edited_in_the_events_fails(copy: Path) -> None:
    def change(records: list[dict[str, Any]]) -> None:
        w = of(records, "window_measured", index=1)
        w["energy_j"] *= 0.9
        w["mean_power_w"] *= 0.9
        w["energy_per_inference_j"] *= 0.9

    edit_events(copy, change)
    resummarize(copy)
    got = failed(asc_checks(copy, LABELS))
    assert rederive.WINDOW_ENERGIES in got and "active_power_w re-derived" in got


def test_a_latency_run_edited_fails(copy: Path) -> None:
    def change(records: list[dict[str, Any]]) -> None:
        run = of(records, "latency_run", index=3)
        run["elapsed_s"] = run["emon_elapsed_s"] = 9.8
        run["time_per_inference_s"] = 9.8 / ITERATIONS
        run["inferences_per_s"] = ITERATIONS / 9.8

    edit_events(copy, change)
    resummarize(copy)
    got = failed(asc_checks(copy, LABELS))
    assert {rederive.TIMED_RUNS, rederive.EDGES_ACCOUNTED} <= got


def test_a_run_that_ended_in_failed_checks_is_named(copy: Path) -> None:
    edit_events(copy, lambda rs: of(rs, "run_finished").update(status="failed-checks"))
    edit_manifest(copy, lambda m: m.update(status="failed-checks"))
    assert failed(asc_checks(copy, LABELS)) == {rederive.RUN_COMPLETE}


# -- 2. the trace against the events -----------------------------------------------------------
def test_a_window_narrowed_in_the_events_fails_by_name(copy: Path) -> None:
    def change(records: list[dict[str, Any]]) -> None:
        w = of(records, "window_measured", index=2)
        w["start_sample"] += 40  # consistent: duration and energy over the narrowed span
        w["start_s"] = w["start_sample"] / FS
        w["duration_s"] = (w["end_sample"] - w["start_sample"]) / FS
        w["energy_j"] = P_ACTIVE * w["duration_s"]
        w["energy_per_inference_j"] = w["energy_j"] / ITERATIONS

    edit_events(copy, change)
    resummarize(copy)
    checks = by_item(asc_checks(copy, LABELS))
    for item in (rederive.ON_EDGES, rederive.WINDOW_EDGES, rederive.EDGES_ACCOUNTED):
        assert checks[item].ok is False, item
    assert "window 2 starts at sample" in checks[rederive.WINDOW_EDGES].detail
    assert checks[rederive.IDLE_EDGES].ok is True


def test_a_stray_pulse_on_the_line_is_not_accounted(tmp_path: Path) -> None:
    run = asc_run(tmp_path, extra_pulse=2700)
    checks = asc_checks(run, LABELS)
    assert failed(checks) == {rederive.EDGES_ACCOUNTED}
    assert "edge pair 2 is samples 2700..2720, but timed run 0 is 3000..13200" in \
        by_item(checks)[rederive.EDGES_ACCOUNTED].detail


def test_a_run_left_out_of_the_events_is_seen_on_the_trace(copy: Path) -> None:
    def drop_run_4(records: list[dict[str, Any]]) -> None:
        records.remove(of(records, "latency_run", index=4))
        records.remove(of(records, "window_measured", index=4))

    edit_events(copy, drop_run_4)
    resummarize(copy)
    got = failed(asc_checks(copy, LABELS))
    assert {rederive.EDGES_ACCOUNTED, rederive.METHOD_RUN_COUNT} <= got


def test_the_sample_rate_changed_in_the_manifest_fails_by_name(copy: Path) -> None:
    edit_manifest(copy, lambda m: m["instruments"]["emon"].update(sample_rate_hz=1100.0))
    checks = by_item(asc_checks(copy, LABELS))
    assert checks[rederive.SAMPLE_RATE].ok is False
    assert "instruments.emon.sample_rate_hz = 1100.0" in checks[rederive.SAMPLE_RATE].detail


def test_a_window_duration_at_another_rate_fails(copy: Path) -> None:
    edit_events(copy, lambda rs: of(rs, "window_measured", index=0).update(duration_s=9.2727))
    assert rederive.SAMPLE_RATE in failed(asc_checks(copy, LABELS))


def test_a_trace_naming_another_instrument_fails(tmp_path: Path) -> None:
    run = asc_run(tmp_path, trace_instrument={**EMON, "serial": "S999"})
    checks = asc_checks(run, LABELS)
    assert failed(checks) == {rederive.TRACE_INSTRUMENT}
    assert "serial: trace 'S999', manifest 'S123'" in by_item(checks)[
        rederive.TRACE_INSTRUMENT].detail


def test_a_trace_naming_no_instrument_fails(tmp_path: Path) -> None:
    run = asc_run(tmp_path / "a")
    path = run / "traces" / "emon.jls"
    from rig.traces.files import read_trace

    trace = read_trace(path)
    path.unlink()
    with TraceWriter(path, FS) as w:  # as `rig analyze`'s tests rewrite one: no instrument
        w.append(0, trace.current, trace.voltage, trace.gpio)
    assert failed(asc_checks(run, LABELS)) == {rederive.TRACE_INSTRUMENT}


def test_lost_samples_must_be_declared(tmp_path: Path) -> None:
    undeclared = asc_run(tmp_path / "a", nan_at=50)
    assert failed(asc_checks(undeclared, LABELS)) == {rederive.LOST_SAMPLES}
    declared = asc_run(tmp_path / "b", nan_at=50, dropped=3)
    assert failed(asc_checks(declared, LABELS)) == set()


def test_a_sample_count_edited_fails(copy: Path) -> None:
    edit_events(copy, lambda rs: of(rs, "trace_saved").update(samples=10))
    edit_manifest(copy, lambda m: m["traces"][0].update(samples=10))
    assert failed(asc_checks(copy, LABELS)) == {rederive.TRACE_SAMPLES}


def test_an_unreadable_trace_fails_every_figure(copy: Path) -> None:
    path = copy / "traces" / "emon.jls"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    checks = asc_checks(copy, LABELS)
    got = failed(checks)
    assert {rederive.TRACE_READABLE, "idle_power_w re-derived",
            "energy_per_inference_j re-derived", rederive.WINDOW_ENERGIES} <= got
    assert "truncated" in by_item(checks)[rederive.TRACE_READABLE].detail


def test_a_trace_path_outside_the_run_folder_is_not_read(copy: Path) -> None:
    shutil.copy(copy / "traces" / "emon.jls", copy.parent / "elsewhere.jls")
    edit_events(copy, lambda rs: of(rs, "trace_saved").update(path="../elsewhere.jls"))
    checks = by_item(asc_checks(copy, LABELS))
    assert checks[rederive.TRACE_READABLE].ok is False
    assert "lies outside the run folder" in checks[rederive.TRACE_READABLE].detail


def test_an_idle_span_from_elsewhere_fails(copy: Path) -> None:
    def change(records: list[dict[str, Any]]) -> None:
        idle = of(records, "idle_measured")
        idle.update(start_sample=600, end_sample=2300, duration_s=1.7, power_w=P_IDLE * 0.8,
                    sub_span_edges=[600, 1450, 2300], sub_span_powers_w=[P_IDLE * 0.8] * 2)

    edit_events(copy, change)
    resummarize(copy)
    got = failed(asc_checks(copy, LABELS))
    assert {rederive.IDLE_EDGES, rederive.IDLE_POWER, rederive.EDGES_ACCOUNTED,
            "idle_power_w re-derived", "dynamic_power_w re-derived"} <= got


def test_a_performance_mode_run_has_no_trace_to_check(tmp_path: Path) -> None:
    run = asc_run(tmp_path, energy_mode=False)
    checks = by_item(asc_checks(run, LABELS))
    assert failed(list(checks.values())) == set()
    assert checks[rederive.TRACE_READABLE].ok is None
    assert checks["inferences_per_s re-derived"].ok is True
    assert "events.jsonl" in checks["inferences_per_s re-derived"].detail
    assert checks[rederive.METHOD_RUN_LENGTH].ok is True


# -- 3. accuracy --------------------------------------------------------------------------------
def test_other_labels_fail_the_digest_and_the_recount(honest: Path) -> None:
    other = LABELS.copy()
    other[0] = 1  # sample 0 was predicted 2: now wrong
    checks = by_item(asc_checks(honest, other))
    assert failed(list(checks.values())) == {rederive.LABELS_DIGEST, rederive.LABELS_MATCH,
                                             rederive.ACCURACY}
    assert "2 of 4 = 0.5" in checks[rederive.ACCURACY].detail


def test_without_labels_the_manifest_gives_the_test_set_size(honest: Path) -> None:
    checks = by_item(asc_checks(honest, None))
    assert checks[rederive.LABELS_DIGEST].ok is None
    assert checks[rederive.LABELS_MATCH].ok is None
    assert checks[rederive.INDICES].ok is True
    assert "manifest.json test_set.samples" in checks[rederive.INDICES].detail


def test_a_run_without_a_test_set_identity_fails(copy: Path) -> None:
    edit_events(copy, lambda rs: rs.remove(of(rs, "test_set")))
    edit_manifest(copy, lambda m: m.pop("test_set"))
    assert rederive.LABELS_DIGEST in failed(asc_checks(copy, LABELS))


def test_accuracy_edited_in_the_manifest_fails_by_name(copy: Path) -> None:
    edit_manifest(copy, lambda m: m["summary"].update(accuracy=1.0, correct=4))
    assert failed(asc_checks(copy, LABELS)) == {rederive.ACCURACY, rederive.MANIFEST_EVENTS}


def test_a_prediction_flipped_in_the_events_fails_against_its_scores(copy: Path) -> None:
    edit_events(copy, lambda rs: of(rs, "sample_classified", index=2).update(
        predicted=0, correct=True))
    resummarize(copy)
    assert failed(asc_checks(copy, LABELS)) == {rederive.PREDICTIONS}


def test_accuracy_counted_on_part_of_the_test_set_fails_by_name(copy: Path) -> None:
    edit_events(copy, lambda rs: rs.remove(of(rs, "sample_classified", index=2)))
    resummarize(copy)
    checks = by_item(asc_checks(copy, LABELS))
    assert checks[rederive.INDICES].ok is False
    assert "1 of 4 indices missing (2)" in checks[rederive.INDICES].detail
    assert checks[rederive.METHOD_TEST_SET].ok is False
    assert checks[rederive.ACCURACY].ok is True  # 3 of 3: right, but not of the test set


def test_a_sample_counted_twice_fails(copy: Path) -> None:
    def change(records: list[dict[str, Any]]) -> None:
        records.insert(records.index(of(records, "trace_saved")),
                       dict(of(records, "sample_classified", index=1)))

    edit_events(copy, change)
    resummarize(copy)
    checks = by_item(asc_checks(copy, LABELS))
    assert "indices counted twice: 1" in checks[rederive.INDICES].detail


# -- 4. the method ------------------------------------------------------------------------------
def test_three_runs_are_not_the_method(tmp_path: Path) -> None:
    assert failed(asc_checks(asc_run(tmp_path, runs=3), LABELS)) == {rederive.METHOD_RUN_COUNT}


def test_short_runs_are_not_the_method(tmp_path: Path) -> None:
    run = asc_run(tmp_path, run_samples=2000, iterations=160)  # 2 s each
    checks = by_item(asc_checks(run, LABELS))
    assert failed(list(checks.values())) == {rederive.METHOD_RUN_LENGTH}
    assert "run 0: 2 s, 160 iterations" in checks[rederive.METHOD_RUN_LENGTH].detail


def test_a_window_10_percent_off_is_not_replicable(tmp_path: Path) -> None:
    run = asc_run(tmp_path, factors=(1.0, 1.0, 1.0, 1.0, 1.25))
    checks = by_item(asc_checks(run, LABELS))
    assert failed(list(checks.values())) == {rederive.METHOD_ENERGY}
    # Mean 1.05: the last window 1.25 / 1.05 - 1 = 19.048 % off.
    assert "largest deviation from their mean 19.048%" in checks[rederive.METHOD_ENERGY].detail


# -- 5. the inference count -------------------------------------------------------------------
def inflate(records: list[dict[str, Any]], index: int, iterations: int, *,
            latency_too: bool) -> None:
    w = of(records, "window_measured", index=index)
    w["iterations"] = iterations
    w["energy_per_inference_j"] = w["energy_j"] / iterations
    if latency_too:
        run = of(records, "latency_run", index=index)
        run["iterations"] = iterations
        run["time_per_inference_s"] = run["elapsed_s"] / iterations
        run["inferences_per_s"] = iterations / run["elapsed_s"]


def test_an_inflated_window_count_fails_against_the_dut_timer(copy: Path) -> None:
    """One window's count up by 25 %: its energy per inference drops 20 %, which the DUT's
    timer (and the other windows) give away; the median run still matches the samples."""
    edit_events(copy, lambda rs: inflate(rs, 1, 1020, latency_too=False))
    resummarize(copy)
    checks = by_item(asc_checks(copy, LABELS))
    assert failed(list(checks.values())) == {rederive.ITERATIONS, rederive.PER_INFERENCE_DUT,
                                             rederive.METHOD_ENERGY}
    assert "window 1: 10 ms by traces/emon.jls" in checks[rederive.PER_INFERENCE_DUT].detail


def test_a_count_inflated_in_every_event_fails_against_the_test_samples(copy: Path) -> None:
    """Window and timed run alike: the DUT's timer agrees, the one-inference samples do not."""
    edit_events(copy, lambda rs: [inflate(rs, k, 1020, latency_too=True) for k in range(5)])
    resummarize(copy)
    checks = by_item(asc_checks(copy, LABELS))
    assert failed(list(checks.values())) == {rederive.PER_INFERENCE_SAMPLES}
    # 10.2 s / 1020 = 10 ms against the samples' 12.5 ms: -20 %.
    assert "10 ms per inference" in checks[rederive.PER_INFERENCE_SAMPLES].detail
    assert "-20.00%" in checks[rederive.PER_INFERENCE_SAMPLES].detail


# -- the test set's identity ----------------------------------------------------------------------
def test_test_set_digest_is_the_documented_hash() -> None:
    t = unit_test_set()
    inputs = hashlib.sha256()
    for k in range(4):
        inputs.update((16).to_bytes(8, "little") + bytes([k]) * 16)
    labels = hashlib.sha256(b"".join(int(v).to_bytes(8, "little", signed=True)
                                     for v in (2, 1, 0, 3))).hexdigest()
    got = testsets.test_set_digest(t)
    assert got == {"description": "unit test set", "samples": 4,
                   "sha256_inputs": inputs.hexdigest(), "sha256_labels": labels,
                   "sha256": hashlib.sha256(inputs.digest() + bytes.fromhex(labels)).hexdigest()}
    # The same bytes split otherwise are another set.
    other = testsets.TestSet([bytes([0]) * 15, bytes([0]) + bytes([1]) * 16,
                              *t.inputs[2:]], LABELS, "")
    assert testsets.test_set_digest(other)["sha256_inputs"] != got["sha256_inputs"]


def test_labels_digest_refuses_fractions() -> None:
    assert testsets.labels_sha256(np.array([2.0, 1.0])) == testsets.labels_sha256([2, 1])
    with pytest.raises(ValueError, match="class indices"):
        testsets.labels_sha256(np.array([0.5]))


def test_the_asc_procedure_records_its_test_set(tmp_path: Path) -> None:
    """The event the procedure publishes reaches the manifest as `test_set` (the procedure's
    own run: tests/e2e/test_rederive_cheats.py)."""
    digest = testsets.test_set_digest(unit_test_set())
    store = RunStore.create(tmp_path, "asc", "unit")
    store(RunStarted(run_id="x", procedure="asc", device="unit"))
    store(TestSetLoaded(test_set=digest))
    assert json.loads((store.path / MANIFEST).read_text())["test_set"] == digest


# -- QUBO -----------------------------------------------------------------------------------------
NODES, DENSITY, TIMEOUT, POWER_W = 25, 0.1, 0.1, 2.0
FOUND_AT = 0.04


def greedy_point(point: Any) -> dict[str, Any]:
    """A point whose solution is the greedy independent set (nodes in order): its cost is
    minus its size, with no x^T Q x evaluated."""
    workload = generate(point.nodes, point.density, point.seed)
    neighbours: dict[int, set[int]] = {}
    for i, j in workload.edges.tolist():
        neighbours.setdefault(i, set()).add(j)
        neighbours.setdefault(j, set()).add(i)
    chosen: list[int] = []
    for v in range(point.nodes):
        if not neighbours.get(v, set()) & set(chosen):
            chosen.append(v)
    cost = -len(chosen)
    target = table()[(point.nodes, point.density, point.seed)]
    gap = (cost - target) / abs(target)
    tts = {f"{t:g}": ({"latency_s": FOUND_AT, "energy_j": POWER_W * FOUND_AT, "cost": cost}
                      if gap <= t else None) for t in (0.1, 0.05, 0.01)}
    return {"sut": point.sut, "cost": cost, "target": target, "target_method": "table",
            "gap": gap, "elapsed_s": point.timeout_s, "timer": "sut", "steps": None,
            "power_w": POWER_W, "power_status": "measured (rapl)", "power_source": "rapl",
            "energy_j": POWER_W * point.timeout_s, "improvements": [[0.0, 0], [FOUND_AT, cost]],
            "tts": tts, "load_s": 0.01, "solver_cpu_s": point.timeout_s,
            "solution": chosen}


def qubo_sweep(root: Path, *, stand_in: bool = False) -> Path:
    spec = parse_sweep({"sweep": {"suts": ["cpu-tabu"], "nodes": [NODES],
                                  "densities": [DENSITY], "seeds": [0, 1],
                                  "timeouts": [TIMEOUT]}}, root / "unit.toml")
    outcome = start_sweep(spec, runs_root=root / "sweeps",
                          point_function=None if stand_in else greedy_point,
                          stand_in=stand_in)
    assert outcome.status == "complete"
    return outcome.run_path


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return qubo_sweep(tmp_path_factory.mktemp("sweep"))


@pytest.fixture
def sweep_copy(sweep: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(sweep, tmp_path / sweep.name))


def edit_point(run: Path, seed: int, change: Callable[[dict[str, Any]], Any], *,
               resummarize_sweep: bool = True, **match: Any) -> None:
    """Edit one point's result in events.jsonl (and the summary made again from it)."""
    records = read_events(run)
    change(of(records, "sweep_point", seed=seed, **match)["result"])
    write_events(run, records)
    if resummarize_sweep:
        record = read_sweep_folder(run, check_running=False)
        rows = summarize(record.spec, record.done)["rows"]
        edit_manifest(run, lambda m: m["summary"].update(rows=rows))


def test_an_honest_sweep_passes_every_check(sweep: Path) -> None:
    checks = qubo_checks(sweep)
    assert {c.ok for c in checks} == {True}, [c for c in checks if c.ok is not True]
    assert {c.run for c in checks} == {sweep.name}
    assert "2 targets from the BKS table" in by_item(checks)[rederive.QUBO_TARGET].detail


def test_a_qubo_cost_edited_fails_by_name(sweep_copy: Path) -> None:
    def change(result: dict[str, Any]) -> None:
        result["cost"] -= 1
        result["improvements"][-1][1] -= 1
        result["gap"] = (result["cost"] - result["target"]) / abs(result["target"])
        result["tts"] = {k: v and {**v, "cost": result["cost"]} for k, v in
                         result["tts"].items()}

    edit_point(sweep_copy, 1, change)
    checks = by_item(qubo_checks(sweep_copy))
    assert checks[rederive.QUBO_COST].ok is False
    assert "recorded, its solution costs" in checks[rederive.QUBO_COST].detail
    assert checks[rederive.QUBO_SUMMARY].ok is True  # consistent with the edited points


def test_a_qubo_point_past_its_timeout_fails_by_name(sweep_copy: Path) -> None:
    """A longer solve passed off as one of this timeout: it ran, on its CPU, past it."""
    edit_point(sweep_copy, 0, lambda r: r.update(elapsed_s=3 * TIMEOUT, solver_cpu_s=3 * TIMEOUT,
                                                 energy_j=POWER_W * 3 * TIMEOUT))
    checks = by_item(qubo_checks(sweep_copy))
    assert failed(list(checks.values())) == {rederive.QUBO_TIMEOUT}
    assert "elapsed_s 0.30000000000000004 > timeout 0.1 s + 0.006 s" in checks[
        rederive.QUBO_TIMEOUT].detail


def test_a_solve_the_host_kept_off_its_cpu_may_end_past_the_timeout(sweep_copy: Path) -> None:
    """Wall time past the timeout that the SUT's own CPU count says it spent waiting (a busy
    host): allowed on top of the last slice; the same overrun on the CPU is not."""
    edit_point(sweep_copy, 0, lambda r: r.update(elapsed_s=1.5 * TIMEOUT,
                                                 solver_cpu_s=TIMEOUT,
                                                 energy_j=POWER_W * 1.5 * TIMEOUT))
    assert rederive.QUBO_TIMEOUT not in failed(qubo_checks(sweep_copy))
    edit_point(sweep_copy, 0, lambda r: r.update(solver_cpu_s=1.2 * TIMEOUT))
    checks = by_item(qubo_checks(sweep_copy))
    assert checks[rederive.QUBO_TIMEOUT].ok is False
    assert "off the CPU (elapsed_s - solver_cpu_s)" in checks[rederive.QUBO_TIMEOUT].detail


def test_a_qubo_cost_found_after_the_timeout_fails(sweep_copy: Path) -> None:
    edit_point(sweep_copy, 0, lambda r: r["improvements"][-1].__setitem__(0, 0.2))
    got = failed(qubo_checks(sweep_copy))
    assert rederive.QUBO_TIMEOUT in got and rederive.QUBO_TTS in got


def test_the_timeout_allowance_is_one_slice_and_a_tick() -> None:
    assert rederive.timeout_allowance(0.2) == pytest.approx(0.011)
    assert rederive.timeout_allowance(0.001) == pytest.approx(0.002)
    assert rederive.timeout_allowance(100.0) == pytest.approx(1.001)


@pytest.mark.parametrize(("change", "item"), [
    (lambda r: r.pop("solution"), rederive.QUBO_SOLUTIONS),
    (lambda r: r.update(solution=[3, 1]), rederive.QUBO_SOLUTIONS),
    (lambda r: r.update(solution=[0, 25]), rederive.QUBO_SOLUTIONS),
    (lambda r: r.update(target=r["target"] + 1,
                        gap=(r["cost"] - r["target"] - 1) / abs(r["target"] + 1)),
     rederive.QUBO_TARGET),
    (lambda r: r.update(gap=r["gap"] + 0.01), rederive.QUBO_GAP),
    (lambda r: r["tts"].update({"0.1": {"latency_s": 0.001, "energy_j": 0.002,
                                        "cost": r["cost"]}}), rederive.QUBO_TTS),
    (lambda r: r.update(energy_j=r["energy_j"] * 0.9), rederive.QUBO_ENERGY),
])
def test_each_qubo_field_is_re_derived(sweep_copy: Path, change: Callable[[dict], Any],
                                       item: str) -> None:
    edit_point(sweep_copy, 1, change)
    assert item in failed(qubo_checks(sweep_copy))


def test_a_qubo_summary_edited_fails(sweep_copy: Path) -> None:
    edit_manifest(sweep_copy, lambda m: m["summary"]["rows"][0].update(gap_mean=0.0))
    checks = by_item(qubo_checks(sweep_copy))
    assert failed(list(checks.values())) == {rederive.QUBO_SUMMARY}
    assert ".gap_mean" in checks[rederive.QUBO_SUMMARY].detail


def test_a_stand_in_sweep_has_nothing_to_re_evaluate(tmp_path: Path) -> None:
    checks = by_item(qubo_checks(qubo_sweep(tmp_path, stand_in=True)))
    assert checks[rederive.QUBO_COST].ok is None and checks[rederive.QUBO_SUMMARY].ok is True


def test_the_results_table_leaves_the_solution_out(sweep: Path) -> None:
    """The solution stays in the point's event; results.csv keeps one scalar row per point."""
    with (sweep / "results.csv").open() as f:
        header = next(csv.reader(f))
    assert "cost" in header and "solution" not in header


def test_uncertainty_budgets_compared_within_rounding_of_their_figure() -> None:
    """`rederive._uncertainty` on hand-made budgets: rounding (a zero repeatability made
    again as 1e-20 of a 5e-5 J figure, U off by 1e-12 of it) holds; a shrunk U, a component
    dropped or renamed, a budget on one side only fail by name; no budget does not apply."""
    import copy as copying

    part = {"name": "energy: repeatability", "type": "A", "source": "5 windows",
            "published": True, "correlation_group": None, "sign": 1, "value": 0.0, "dof": 4.0}
    meter = {**part, "name": "energy: current", "type": "B", "value": 5e-7, "dof": "inf"}
    budget = {"figure": "energy per inference", "unit": "J", "value": 5e-5,
              "components": [part, meter], "u_c": 5e-7, "k": 2.0, "U": 1e-6,
              "relative_U": 0.02, "coverage": 0.95, "complete": True, "unknown": [],
              "lower_bound": False}
    stated = {"energy_per_inference_j": budget}
    again = copying.deepcopy(stated)
    again["energy_per_inference_j"]["components"][0]["value"] = 1e-20
    again["energy_per_inference_j"]["U"] = 1e-6 + 5e-17
    assert rederive._uncertainty(stated, again, "t").ok is True

    def varied(change: Callable[[dict[str, Any]], Any]) -> str:
        other = copying.deepcopy(stated)
        change(other["energy_per_inference_j"])
        check = rederive._uncertainty(stated, other, "t")
        assert check.ok is False
        return check.detail

    assert "energy_per_inference_j.U" in varied(lambda b: b.update(U=0.5e-6))
    assert "energy_per_inference_j.relative_U" in varied(lambda b: b.update(relative_U=0.01))
    assert "energy_per_inference_j.components (2 vs 1)" in varied(
        lambda b: b["components"].pop())
    assert "components[1] (energy: current).name" in varied(
        lambda b: b["components"][1].update(name="energy: something else"))
    assert "energy_per_inference_j.complete" in varied(lambda b: b.update(complete=False))
    assert "idle_power_w (a budget on one side only)" in rederive._uncertainty(
        stated, {**stated, "idle_power_w": budget}, "t").detail
    assert rederive._uncertainty(None, {}, "t").ok is None
    assert rederive._uncertainty(stated, None, "t").ok is False


def test_the_highest_score_is_found_as_numpy_finds_it() -> None:
    """`_highest` (plain Python for a few finite scores) against `np.argmax`: ties to the
    first, a NaN counted highest, ints and floats mixed, tuples, none at all."""
    from rig.submission.rederive import _highest

    rng = np.random.default_rng(3)
    for _ in range(2000):
        scores = rng.choice([0.0, 1.0, -1.0, 0.5, 2.0], size=int(rng.integers(1, 7))).tolist()
        assert _highest(scores) == int(np.argmax(scores)), scores
    assert _highest([1, 3.0, 3]) == 1 and _highest((0.1, 0.7, 0.2)) == 1
    assert _highest([1.0, float("nan"), 2.0]) == int(np.argmax([1.0, float("nan"), 2.0])) == 1
    assert _highest([]) is None
