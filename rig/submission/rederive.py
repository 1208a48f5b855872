"""Re-derive one run folder's reported numbers from its raw data: what `rig verify` checks of
each bundled run (issue 38, item 4), whatever the bundle's format.

ASC (`asc_checks`): every figure of the manifest's summary again from the trace and the events
(`rig analyze RUN`'s `reproduce_run`), each window and idle span integrated again; the trace
against the events (boundaries on its timestamp edges, every edge explained by an event in
order, sample count, lost samples, sample rate, the instrument named in the trace itself);
accuracy recounted from the per-sample results against the test set's labels; the method
(NeuroBench's 5 runs of >= 10 s and >= 10 iterations, the whole test set, replicability within
5 %) from the re-derived numbers, never from the summary's own checks; and the inference count
against two clocks it does not control (the DUT's timer, the test samples' one-inference times).

QUBO (`qubo_checks`): each point's cost evaluated again from its recorded solution on the
workload regenerated from its seed, its target against the BKS table (or the exact optimum
below 50 nodes), its BKS gap, its timeout held, its time to solution and energy, and the
sweep's summary rows.

Each check is a `Check` whose `item` is a stable name (the constants below; a failing one is
named in `rig verify`'s table) and whose `detail` names the numbers, the file and the field.
The trace is read once per run (`asc_checks(..., trace=...)` takes one read already, so a
benchmark can time the read and the re-derivation apart).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rig.datasets.testsets import labels_sha256
from rig.errors import ConfigError, RigError
from rig.run import asc
from rig.run.events import (
    Event,
    IdleMeasured,
    InstrumentInfo,
    LatencyRun,
    SampleClassified,
    SampleFailed,
    TestSetLoaded,
    TraceSaved,
    WindowMeasured,
)
from rig.run.reproduce import (
    FIGURES,
    TOLERANCE,
    Reproduction,
    integration_spans,
    relative_difference,
    reproduce_run,
)
from rig.run.store import RunRecord, load_run
from rig.submission.checks import Check
from rig.traces.analysis import replicability
from rig.traces.analysis.edges import flatnonzero_sparse
from rig.traces.analysis.timers import DUT_TICK_S, TIMER_TOLERANCE, timer_agreement
from rig.traces.files import JLS_RANGE, Trace, read_trace

# -- the method (NeuroBench ASC.md and rules.md; the rig's own bench values are not trusted) ----
#: Timed runs the method asks for (rules.md: "an average over 5 trials").
METHOD_RUNS = 5
#: Each timed run at least this long [s] and this many inferences (MLPerf Tiny's run rule).
METHOD_MIN_RUN_S = 10.0
METHOD_MIN_ITERATIONS = 10
#: rules.md: every trial within 5 % of the reported result.
METHOD_REPLICABILITY = 0.05
#: The timed runs' time per inference against the test samples' (one inference each, a
#: different input, the firmware's per-call overhead not amortised): they must agree within
#: this share, plus one tick of the clock that timed the samples.
INFERENCE_TIME_TOLERANCE = 0.05
#: Extra figures of the summary compared besides `reproduce.FIGURES` (from the events).
EXTRA_FIGURES = ("inferences_per_s", "latency_time_per_inference_mean_s",
                 "execution_time_mean_s", "execution_time_stderr_s")
#: Keys of the monitor's settings that name the instrument itself (drivers spell them so).
IDENTITY_KEYS = ("driver", "model", "serial", "serial_number", "version", "firmware", "hw",
                 "identity")

# -- QUBO ----------------------------------------------------------------------------------------
#: How far past its timeout a solve may end: the CPU SUTs' last slice, at most 5 % of the
#: timeout (at least 1 ms, at most 1 s: rig/qubo/suts.py `_SLICE_*`), runs out before the solver
#: stops (its result is then discarded), plus 1 ms, the solver's time resolution. Measured on
#: this host: cpu-sa 8.2 ms past a 0.2 s timeout, cpu-tabu 0.3 ms past 1 ms.
QUBO_SLICE_SHARE, QUBO_SLICE_MIN_S, QUBO_SLICE_MAX_S, QUBO_TICK_S = 0.05, 1e-3, 1.0, 1e-3

# -- item names (stable: `rig verify` prints them, tests name them) ------------------------------
RUN_COMPLETE = "run complete"
MANIFEST_EVENTS = "manifest agrees with events"
WINDOW_ENERGIES = "window energies re-derived"
IDLE_POWER = "idle power re-derived"
TIMED_RUNS = "timed runs re-derived"
UNCERTAINTY = "uncertainty budgets re-derived"
TRACE_READABLE = "trace readable"
TRACE_SAMPLES = "trace sample count"
LOST_SAMPLES = "lost samples accounted"
SAMPLE_RATE = "sample rate: trace = manifest"
TRACE_INSTRUMENT = "trace instrument = manifest"
ON_EDGES = "boundaries on timestamp edges"
IDLE_EDGES = "idle span on this trace's edges"
WINDOW_EDGES = "windows on this trace's edges"
EDGES_ACCOUNTED = "every trace edge accounted"
RATE_VS_DUT = "trace rate against the DUT timer"
LABELS_DIGEST = "test-set labels digest"
INDICES = "test-set indices complete"
LABELS_MATCH = "labels match the test set"
PREDICTIONS = "predictions match scores"
ACCURACY = "accuracy re-counted"
METHOD_RUN_COUNT = "method: 5 timed runs"
METHOD_RUN_LENGTH = "method: run length"
METHOD_TEST_SET = "method: whole test set"
METHOD_LATENCY = "method: latency replicable"
METHOD_ENERGY = "method: energy replicable"
ITERATIONS = "timed-run iterations = windows"
PER_INFERENCE_DUT = "time per inference: window vs DUT timer"
PER_INFERENCE_SAMPLES = "time per inference: timed runs vs test samples"
QUBO_SOLUTIONS = "QUBO solutions recorded"
QUBO_COST = "QUBO cost re-evaluated"
QUBO_TARGET = "QUBO target = BKS"
QUBO_GAP = "QUBO BKS gap recomputed"
QUBO_TIMEOUT = "QUBO timeout held"
QUBO_TTS = "QUBO time to solution re-derived"
QUBO_ENERGY = "QUBO energy re-derived"
QUBO_SUMMARY = "QUBO summary re-derived"


def figure_item(name: str) -> str:
    """The item of one summary figure's check: "energy_per_inference_j re-derived"."""
    return f"{name} re-derived"


#: How many offenders a detail names before it says "and N more".
_NAMED = 4


# -- ASC -----------------------------------------------------------------------------------------
@dataclass
class _Run:
    """What the ASC checks read of one run folder (the trace read once)."""

    record: RunRecord
    labels: np.ndarray | None
    trace: Trace | None
    trace_error: str | None
    saved: TraceSaved | None
    events: list[Event] = field(default_factory=list)
    windows: list[WindowMeasured] = field(default_factory=list)
    idles: list[IdleMeasured] = field(default_factory=list)
    runs: list[LatencyRun] = field(default_factory=list)
    samples: list[SampleClassified] = field(default_factory=list)
    failed: list[SampleFailed] = field(default_factory=list)
    #: The trace's falling edges (sample indices), once read.
    edges: np.ndarray | None = None
    #: `reproduce_run`'s result (None: no trace windows, or it refused: `reproduce_error`).
    rep: Reproduction | None = None
    reproduce_error: str | None = None
    #: Per timed-run index / test sample index: its trace window, where the edges give it.
    run_pairs: dict[int, tuple[int, int]] = field(default_factory=dict)
    sample_pairs: dict[int, tuple[int, int]] = field(default_factory=dict)
    #: What does not fit when the trace's edge pairs are laid beside the run's windows (empty:
    #: every edge accounted), and what the windows are, by kind.
    unaccounted: list[str] = field(default_factory=list)
    made: Counter[str] = field(default_factory=Counter)

    @property
    def manifest(self) -> dict[str, Any]:
        return self.record.manifest

    @property
    def summary(self) -> dict[str, Any]:
        s = self.manifest.get("summary")
        return s if isinstance(s, dict) else {}

    @property
    def scope(self) -> str:
        return str(self.manifest.get("scope") or "all")

    @property
    def fs(self) -> float:
        return self.trace.sample_rate if self.trace is not None else math.nan

    @property
    def trace_name(self) -> str:
        return self.saved.path if self.saved is not None else "the trace"

    @property
    def energy_mode(self) -> bool:
        """The DUT timed its windows with timestamp edges (energy-mode firmware)."""
        dut = (self.manifest.get("instruments") or {}).get("dut") or {}
        return (dut.get("timestamp_mode") == "energy" or bool(self.windows)
                or any(r.timer == "emon" for r in self.runs))

    def window(self, index: int) -> WindowMeasured | None:
        return next((w for w in self.windows if w.index == index), None)


def asc_checks(run: Path, labels: np.ndarray | None, *,
               trace: Trace | None = None, record: RunRecord | None = None) -> list[Check]:
    """Every re-derivation check of one ASC run folder. `labels`: the test set's labels in
    order (the bundle carries them; None: the checks that need them say so, not applicable).
    `trace`: the run's trace when the caller has read it (a benchmark timing the read apart);
    else it is read here, once. `record`: `load_run(run)` when the caller has it. `ConfigError`
    for a folder that is not an ASC run."""
    if record is None:
        record = load_run(run)
    procedure = record.manifest.get("procedure")
    if procedure != "asc":
        raise ConfigError(f"{record.path} is not an ASC run folder (procedure {procedure!r})",
                          hint="asc_checks takes a folder `rig measure asc` wrote")
    r = _read(record, labels, trace)
    checks = [_run_complete(r), _manifest_events(r)]
    checks += _figures(r)
    checks += _trace_checks(r)
    checks += _accuracy_checks(r)
    checks += _method_checks(r)
    checks += _inference_count_checks(r)
    name = record.path.name
    return [Check(c.item, c.ok, c.detail, name) for c in checks]  # replace()'s, quicker


def _read(record: RunRecord, labels: np.ndarray | None, trace: Trace | None) -> _Run:
    events = record.events
    saved = next((e for e in reversed(events) if isinstance(e, TraceSaved)), None)
    r = _Run(record, None if labels is None else np.asarray(labels), None, None, saved, events,
             windows=[e for e in events if isinstance(e, WindowMeasured)
                      and e.end_sample > e.start_sample],
             idles=[e for e in events if isinstance(e, IdleMeasured)
                    and e.end_sample > e.start_sample],
             runs=[e for e in events if isinstance(e, LatencyRun)],
             samples=[e for e in events if isinstance(e, SampleClassified)],
             failed=[e for e in events if isinstance(e, SampleFailed)])
    if trace is not None:
        r.trace = trace
    elif saved is None:
        if r.windows or r.idles:
            r.trace_error = ("events.jsonl names trace sample ids (window_measured, "
                             "idle_measured) but no trace_saved event names a trace")
    else:
        path = record.path / saved.path
        if not path.resolve().is_relative_to(record.path.resolve()):
            # A bundle is someone else's data: never read outside the run folder it names.
            r.trace_error = (f"events.jsonl trace_saved path {saved.path!r} lies outside the "
                             "run folder")
        elif not path.is_file():
            r.trace_error = f"{saved.path} (events.jsonl trace_saved path) is missing"
        else:
            try:
                # The one read of the run's samples, float32 as stored (exact; every sum
                # over them is float64: rig.traces.analysis.dot).
                r.trace = read_trace(path, dtype=np.float32, spans=integration_spans(
                    r.windows, r.idles) if r.windows else None)
            except RigError as exc:
                r.trace_error = exc.message
    if r.trace is not None:
        r.edges = r.trace.falling_edges()
        if r.energy_mode:
            _account(r)
        if r.windows:
            try:
                r.rep = reproduce_run(record.path, trace=r.trace, record=record, edges=r.edges)
            except RigError as exc:
                r.reproduce_error = exc.message
    return r


def _run_complete(r: _Run) -> Check:
    finished = r.record.finished
    said = finished.status if finished is not None else "no run_finished event (incomplete)"
    manifest = r.manifest.get("status")
    ok = finished is not None and finished.status == "complete" and manifest == "complete"
    return Check(RUN_COMPLETE, ok, f"events.jsonl run_finished status: {said}; manifest.json "
                 f"status: {manifest}")


def _manifest_events(r: _Run) -> Check:
    """manifest.json says what events.jsonl says: summary, status, instruments, traces, test
    set (the run store wrote both from the same events; an edit to one shows)."""
    m, finished = r.manifest, r.record.finished
    wrong: list[str] = []
    if r.record.manifest_error:
        wrong.append(f"manifest.json unreadable: {r.record.manifest_error}")
    if finished is not None:
        wrong += [f"summary{p}" for p in _differences(m.get("summary"), finished.summary)]
        if m.get("status") != finished.status:
            wrong.append(f"status ({m.get('status')!r} vs run_finished {finished.status!r})")
    for e in r.events:
        if isinstance(e, InstrumentInfo):
            recorded = (m.get("instruments") or {}).get(e.role)
            wrong += [f"instruments.{e.role}{p}" for p in _differences(recorded, e.info)]
        elif isinstance(e, TestSetLoaded):
            wrong += [f"test_set{p}" for p in _differences(m.get("test_set"), e.test_set)]
    saved = [{"path": e.path, "samples": e.samples, "dropped": e.dropped}
             for e in r.events if isinstance(e, TraceSaved)]
    if saved or m.get("traces"):
        wrong += [f"traces{p}" for p in _differences(m.get("traces"), saved)]
    if wrong:
        return Check(MANIFEST_EVENTS, False, "manifest.json differs from events.jsonl at "
                     + _names(wrong))
    return Check(MANIFEST_EVENTS, True, "manifest.json summary, status, instruments, traces and "
                 "test_set equal what events.jsonl recorded")


# -- 1. figures -------------------------------------------------------------------------------
def _figures(r: _Run) -> list[Check]:
    stored = r.summary
    if r.windows and r.rep is None:
        why = r.trace_error or r.reproduce_error or "no trace"
        return [Check(figure_item(n), False, f"manifest.json summary.{n} = {stored.get(n)!r} "
                      f"cannot be re-derived: {why}") for n in FIGURES if n in stored] + [
            Check(WINDOW_ENERGIES, False, f"not re-derived: {why}")]
    if r.rep is not None:
        recomputed, source = r.rep.summary, f"{r.trace_name} and events.jsonl"
        checks = [_figure_check(f.name, f.manifest, f.recomputed, source) for f in r.rep.figures]
        names: tuple[str, ...] = EXTRA_FIGURES
    else:  # no energy windows: the figures come from the events alone
        recomputed = asc.summarize(r.events, bench=r.manifest.get("bench"), scope=r.scope)
        source, checks, names = "events.jsonl", [], (*FIGURES, *EXTRA_FIGURES)
    for name in names:
        a, b = stored.get(name), recomputed.get(name)
        if a is not None or b is not None:
            checks.append(_figure_check(name, a, b, source))
    if r.rep is not None:
        checks += [_window_energies(r), _idle_power(r)]
    checks.append(_timed_runs(r))
    checks.append(_uncertainty(stored.get("uncertainty"), recomputed.get("uncertainty"), source))
    return checks


#: What each figure's GUM budget states besides numbers (`rig.run.asc_uncertainty`): equal.
_BUDGET_WORDS = ("figure", "unit", "coverage", "complete", "unknown", "lower_bound")
_COMPONENT_WORDS = ("name", "type", "source", "published", "correlation_group", "sign")


def _uncertainty(stored: Any, again: Any, source: str) -> Check:
    """Each figure's uncertainty budget as the summary states it (the report prints it: ± U
    and an appendix of components) against the budget made again from the re-derived events:
    the same components, each standard uncertainty, u_c and U within `TOLERANCE` of the
    figure (absolute in its unit: a zero repeatability re-derived as 1e-20 is no edit), k and
    U/|value| within `TOLERANCE`. A budget shrunk in the manifest and in run_finished alike
    (which `MANIFEST_EVENTS` cannot see) fails here."""
    where = "manifest.json summary.uncertainty"
    if not stored and not again:
        return Check(UNCERTAINTY, None, f"no figure has an uncertainty budget ({where} absent, "
                     f"none re-derived from {source})")
    if not isinstance(stored, dict) or not isinstance(again, dict):
        return Check(UNCERTAINTY, False, f"{where} = {type(stored).__name__}; re-derived from "
                     f"{source}: {type(again).__name__} (budgets on one side only)")
    wrong: list[str] = []
    for name in dict.fromkeys([*stored, *again]):
        a, b = stored.get(name), again.get(name)
        if not isinstance(a, dict) or not isinstance(b, dict):
            wrong.append(f"{name} (a budget on one side only)")
            continue
        wrong += [f"{name}{p}" for p in _budget_differences(a, b)]
    if wrong:
        return Check(UNCERTAINTY, False, f"{where} differs from the budgets re-derived from "
                     f"{source} at " + _names(wrong))
    return Check(UNCERTAINTY, True, f"{len(stored)} figures' budgets ({', '.join(stored)}): "
                 f"every component, u_c, k and U as re-derived from {source}")


def _budget_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where one figure's stated budget `a` differs from the re-derived `b` (".U", ...)."""
    if a == b:  # one C-level compare: the same budget, every number equal
        return []
    values: list[Any] = [a.get("value"), b.get("value")]
    scale = max((abs(float(v)) for v in values if _is_number(v)), default=0.0)

    def close(x: Any, y: Any, within: float) -> bool:
        if x is None and y is None:
            return True
        return _is_number(x) and _is_number(y) and abs(float(x) - float(y)) <= within

    out = [f".{k}" for k in _BUDGET_WORDS if a.get(k) != b.get(k)]
    out += [f".{k}" for k in ("value", "k") if not (a.get(k) is None and b.get(k) is None)
            and not _same(a.get(k), b.get(k))]
    # In the figure's unit, within rounding of the figure; U/|value| within rounding of 1.
    out += [f".{k}" for k in ("u_c", "U") if not close(a.get(k), b.get(k), TOLERANCE * scale)]
    if not close(a.get("relative_U"), b.get("relative_U"), TOLERANCE):
        out.append(".relative_U")
    parts_a, parts_b = a.get("components") or [], b.get("components") or []
    if len(parts_a) != len(parts_b):
        return [*out, f".components ({len(parts_a)} vs {len(parts_b)})"]
    for k, (p, q) in enumerate(zip(parts_a, parts_b, strict=True)):
        if not isinstance(p, dict) or not isinstance(q, dict):
            out.append(f".components[{k}]")
            continue
        label = f".components[{k}] ({p.get('name')})"
        out += [f"{label}.{w}" for w in _COMPONENT_WORDS if p.get(w) != q.get(w)]
        if not close(p.get("value"), q.get("value"), TOLERANCE * scale):
            out.append(f"{label}.value")
    return out


def _figure_check(name: str, stored: Any, again: Any, source: str) -> Check:
    where = f"manifest.json summary.{name} = {stored!r}"
    if not _is_number(stored) or not _is_number(again):
        return Check(figure_item(name), False, f"{where}; re-derived from {source}: {again!r} "
                     "(a figure missing on one side, or not a finite number)")
    diff = relative_difference(float(stored), float(again))
    ok = diff <= TOLERANCE
    return Check(figure_item(name), ok, f"{where}; re-derived from {source}: {again!r} "
                 f"(relative difference {diff:.2e} {'<=' if ok else '>'} {TOLERANCE:g})")


def _window_energies(r: _Run) -> Check:
    assert r.rep is not None
    fields = ("duration_s", "energy_j", "mean_power_w", "energy_per_inference_j")
    wrong = []
    for old, new in zip(r.events, r.rep.events, strict=True):
        if isinstance(old, WindowMeasured) and old.end_sample > old.start_sample:
            wrong += [f"window {old.index} {f} {getattr(old, f)!r} (trace: {getattr(new, f)!r})"
                      for f in fields if not _same(getattr(old, f), getattr(new, f))]
    if wrong:
        return Check(WINDOW_ENERGIES, False, f"events.jsonl window_measured differs from "
                     f"{r.trace_name} integrated again: " + _names(wrong))
    return Check(WINDOW_ENERGIES, True, f"{len(r.windows)} window_measured events: "
                 f"{', '.join(fields)} equal {r.trace_name} integrated again (within "
                 f"{TOLERANCE:g})")


def _idle_power(r: _Run) -> Check:
    assert r.rep is not None
    if not r.idles:
        return Check(IDLE_POWER, None, "no idle span with trace sample ids in events.jsonl")
    wrong = []
    for old, new in zip(r.events, r.rep.events, strict=True):
        if isinstance(old, IdleMeasured) and isinstance(new, IdleMeasured) \
                and old.end_sample > old.start_sample:
            span = f"idle span {old.start_sample}..{old.end_sample}"
            if not _same(old.power_w, new.power_w):
                wrong.append(f"{span} power_w {old.power_w!r} (trace: {new.power_w!r})")
            if len(old.sub_span_powers_w) != len(new.sub_span_powers_w) or not all(
                    _same(a, b) for a, b in zip(old.sub_span_powers_w, new.sub_span_powers_w,
                                                strict=True)):
                wrong.append(f"{span} sub_span_powers_w")
    if wrong:
        return Check(IDLE_POWER, False, f"events.jsonl idle_measured differs from "
                     f"{r.trace_name} over the same samples: " + _names(wrong))
    powers = ", ".join(f"{i.power_w:.6g} W" for i in r.idles)
    return Check(IDLE_POWER, True, f"idle_measured power_w ({powers}) and its sub-spans equal "
                 f"{r.trace_name} over the same samples")


def _timed_runs(r: _Run) -> Check:
    """Each latency_run's own arithmetic, and its elapsed time against its window's samples."""
    if not r.runs:
        return Check(TIMED_RUNS, None, "no latency_run event (an accuracy-only run)")
    wrong = []
    for run in r.runs:
        name = f"latency_run {run.index}"
        if not (_is_number(run.elapsed_s) and run.elapsed_s > 0 and run.iterations > 0):
            wrong.append(f"{name}: elapsed_s {run.elapsed_s!r}, iterations {run.iterations!r}")
            continue
        if not _same(run.time_per_inference_s, run.elapsed_s / run.iterations):
            wrong.append(f"{name}: time_per_inference_s {run.time_per_inference_s!r} != "
                         "elapsed_s / iterations")
        if not _same(run.inferences_per_s, run.iterations / run.elapsed_s):
            wrong.append(f"{name}: inferences_per_s {run.inferences_per_s!r} != "
                         "iterations / elapsed_s")
        pair = r.run_pairs.get(run.index) or _window_pair(r, run.index)
        if run.timer == "emon" and pair is not None and r.trace is not None:
            seconds = (pair[1] - pair[0]) / r.fs
            for f in ("elapsed_s", "emon_elapsed_s"):
                value = getattr(run, f)
                if value is not None and not _same(value, seconds):
                    wrong.append(f"{name}: {f} {value!r}, its window in {r.trace_name} "
                                 f"{seconds!r} s")
    if wrong:
        return Check(TIMED_RUNS, False, "events.jsonl latency_run: " + _names(wrong))
    return Check(TIMED_RUNS, True, f"{len(r.runs)} latency_run events: time per inference and "
                 "inferences per second from their elapsed time and iterations"
                 + (f"; elapsed = their windows' samples in {r.trace_name}"
                    if r.trace is not None and r.windows else ""))


def _window_pair(r: _Run, index: int) -> tuple[int, int] | None:
    w = r.window(index)
    return None if w is None else (w.start_sample, w.end_sample)


# -- 2. the trace against the events ----------------------------------------------------------
def _trace_checks(r: _Run) -> list[Check]:
    if r.trace is None and r.trace_error is None:
        return [Check(TRACE_READABLE, None, "the run recorded no energy-monitor trace "
                      "(no trace_saved event): nothing to hold its events against")]
    if r.trace is None:
        return [Check(TRACE_READABLE, False, r.trace_error or "unreadable")]
    t = r.trace
    checks = [Check(TRACE_READABLE, True, f"{r.trace_name}: {len(t)} samples at "
                    f"{t.sample_rate:g} Hz ({t.duration_s:.6g} s), read once")]
    checks += [_trace_samples(r), _lost_samples(r), _sample_rate(r), _trace_instrument(r)]
    checks += _edge_checks(r)
    checks.append(_rate_vs_dut(r))
    return checks


def _trace_samples(r: _Run) -> Check:
    assert r.trace is not None
    n = len(r.trace)
    wrong = []
    if r.saved is not None and r.saved.samples != n:
        wrong.append(f"events.jsonl trace_saved samples = {r.saved.samples}")
    for entry in r.manifest.get("traces") or []:
        if isinstance(entry, dict) and r.saved is not None and entry.get("path") == r.saved.path \
                and entry.get("samples") != n:
            wrong.append(f"manifest.json traces[{entry.get('path')}].samples = "
                         f"{entry.get('samples')}")
    lengths = r.trace.meta.get("samples_by_signal") or {}
    # The 4-bit range signal is written two samples a byte: an odd count ends on a pad value.
    short = {k: v for k, v in lengths.items()
             if v != n and not (k == JLS_RANGE and v == n + 1 and n % 2)}
    if short:  # the reader keeps the shortest signal's length: a signal was cut
        wrong.append(f"its signals hold {lengths} samples")
    detail = f"{r.trace_name} holds {n} samples ({n} / {r.fs:g} Hz = {n / r.fs:.6g} s)"
    if wrong:
        return Check(TRACE_SAMPLES, False, detail + "; but " + "; ".join(wrong))
    return Check(TRACE_SAMPLES, True, detail + " = events.jsonl trace_saved samples = "
                 "manifest.json traces[].samples, every signal as long")


def _lost_samples(r: _Run) -> Check:
    """Lost samples are NaN in the trace (`TraceWriter` fills each gap): as many as the run
    declared dropped at most, and none inside a window or the idle span."""
    assert r.trace is not None
    current = r.trace.current
    # The re-derivation's pass over every sample said whether any is lost; else a sum is NaN
    # or inf when any sample is (one pass, no mask). Only then are they found.
    clean = (r.rep.trace_finite if r.rep is not None and r.rep.trace_finite is not None
             else bool(np.isfinite(np.add.reduce(current))) if len(current) else True)
    bad = np.empty(0, np.int64) if clean else flatnonzero_sparse(~np.isfinite(current))
    dropped = sum(e.dropped for e in r.events if isinstance(e, TraceSaved))
    stated = r.summary.get("dropped_samples")
    wrong = []
    if bad.size > dropped:
        wrong.append(f"{bad.size} non-finite samples in {r.trace_name}, more than the "
                     f"{dropped} events.jsonl trace_saved dropped declares")
    if stated is not None and stated != dropped:
        wrong.append(f"manifest.json summary.dropped_samples = {stated}, trace_saved "
                     f"dropped = {dropped}")
    spans = [(f"window {w.index}", w.start_sample, w.end_sample) for w in r.windows]
    spans += [("idle span", i.start_sample, i.end_sample) for i in r.idles]
    for name, a, b in spans:
        inside = int(np.searchsorted(bad, b) - np.searchsorted(bad, a))
        if inside:
            wrong.append(f"{name} ({a}..{b}) holds {inside} lost samples")
    detail = (f"{bad.size} lost (non-finite) samples in {r.trace_name}; events.jsonl "
              f"trace_saved dropped = {dropped}")
    if wrong:
        return Check(LOST_SAMPLES, False, "; ".join(wrong))
    return Check(LOST_SAMPLES, True, detail + "; no window or idle span holds one")


def _sample_rate(r: _Run) -> Check:
    """The trace's own rate (its header, exact in its user data) is the rate every other place
    states, and every duration in the events is its samples over that rate."""
    assert r.trace is not None
    fs = r.fs
    stated: list[tuple[str, Any]] = []
    emon = (r.manifest.get("instruments") or {}).get("emon") or {}
    stated.append(("manifest.json instruments.emon.sample_rate_hz", emon.get("sample_rate_hz")))
    for e in r.events:
        if isinstance(e, TraceSaved):
            stated.append(("events.jsonl trace_saved sample_rate_hz", e.sample_rate_hz))
        elif isinstance(e, InstrumentInfo) and e.role == "emon":
            stated.append(("events.jsonl instrument_info emon sample_rate_hz",
                           e.info.get("sample_rate_hz")))
    own = (r.trace.meta.get("user_data") or {}).get("instrument") or {}
    if "sample_rate_hz" in own:
        stated.append((f"{r.trace_name} user data instrument.sample_rate_hz",
                       own["sample_rate_hz"]))
    wrong = [f"{where} = {value!r}" for where, value in stated
             if not (_is_number(value) and _same(float(value), fs))]
    for w in r.windows:
        seconds = (w.end_sample - w.start_sample) / fs
        for f, value in (("duration_s", w.duration_s), ("start_s", w.start_s),
                         ("end_s", w.end_s)):
            want = {"duration_s": seconds, "start_s": w.start_sample / fs,
                    "end_s": w.end_sample / fs}[f]
            if not _same(value, want):
                wrong.append(f"events.jsonl window_measured {w.index} {f} = {value!r} "
                             f"({want!r} at {fs:g} Hz)")
    for i in r.idles:
        if not _same(i.duration_s, (i.end_sample - i.start_sample) / fs):
            wrong.append(f"events.jsonl idle_measured duration_s = {i.duration_s!r}")
    requested = ((r.manifest.get("bench") or {}).get("emon") or {}).get("sample_rate_hz")
    asked = f" (the bench asked {requested:g} Hz)" if _is_number(requested) else ""
    if wrong:
        return Check(SAMPLE_RATE, False, f"{r.trace_name} was recorded at {fs:g} Hz but "
                     + _names(wrong))
    return Check(SAMPLE_RATE, True, f"{r.trace_name} {fs:g} Hz{asked} = every rate stated "
                 f"({len(stated)} places) and every duration in events.jsonl")


def _trace_instrument(r: _Run) -> Check:
    """The instrument the trace names in its own user data (`TraceWriter`'s `instrument`: the
    monitor's settings when it recorded) is the manifest's `instruments.emon`."""
    assert r.trace is not None
    user = r.trace.meta.get("user_data") or {}
    own = user.get("instrument")
    manifest = (r.manifest.get("instruments") or {}).get("emon")
    if not isinstance(own, dict):
        return Check(TRACE_INSTRUMENT, False, f"{r.trace_name} names no instrument (its user "
                     "data has no `instrument`): nothing binds it to this run's monitor")
    if not isinstance(manifest, dict):
        return Check(TRACE_INSTRUMENT, False, "manifest.json has no instruments.emon to hold "
                     f"{r.trace_name}'s instrument against")
    wrong = [f"{k}: trace {own[k]!r}, manifest {manifest.get(k)!r}" for k in own
             if _differences(own[k], manifest.get(k))]
    if bool(user.get("simulated")) and not r.manifest.get("simulated"):
        wrong.append("the trace says simulated, manifest.json does not")
    identity = ", ".join(f"{k} {own[k]}" for k in IDENTITY_KEYS if k in own)
    if wrong:
        return Check(TRACE_INSTRUMENT, False, f"{r.trace_name} user data instrument differs "
                     "from manifest.json instruments.emon: " + _names(wrong))
    return Check(TRACE_INSTRUMENT, True, f"{r.trace_name} names {identity or 'an instrument'}; "
                 f"its {len(own)} settings equal manifest.json instruments.emon")


def _edge_checks(r: _Run) -> list[Check]:
    """The events' windows against the trace's timestamp edges: each boundary an edge, each
    window and idle span one pair of consecutive edges, and every edge of the trace one of the
    windows the procedure made, in its order (calibration, idle span, timed runs, test samples;
    `rig.run.asc`), none left over."""
    assert r.trace is not None and r.edges is not None
    if not r.energy_mode:
        why = ("performance-mode firmware: the DUT's timer times the runs; the timestamp line "
               "carries no windows")
        return [Check(x, None, why) for x in (ON_EDGES, IDLE_EDGES, WINDOW_EDGES,
                                              EDGES_ACCOUNTED)]
    edges = r.edges
    pos = {int(e): k for k, e in enumerate(edges.tolist())}
    checks = []
    spans: list[WindowMeasured | IdleMeasured] = [*r.windows, *r.idles]
    off = r.rep.off_edge_samples if r.rep is not None else [
        s for w in spans for s in (w.start_sample, w.end_sample) if s not in pos]
    checks.append(Check(ON_EDGES, not off, (
        f"events.jsonl window/idle boundaries not falling edges of {r.trace_name}'s timestamp "
        f"line: samples {_names([str(s) for s in off])}") if off else (
        f"every window and idle boundary in events.jsonl is a falling edge of "
        f"{r.trace_name}'s timestamp line ({len(edges)} edges)")))

    def pair_issue(name: str, a: int, b: int) -> str | None:
        k = pos.get(a)
        if k is None:
            return f"{name} starts at sample {a}, not an edge"
        nxt = int(edges[k + 1]) if k + 1 < len(edges) else None
        if nxt != b:
            return (f"{name} is samples {a}..{b}; the trace's edge after {a} is "
                    f"{'none' if nxt is None else nxt}")
        return None

    idle_issues = [x for i in r.idles
                   if (x := pair_issue("idle span", i.start_sample, i.end_sample))]
    if r.idles:
        idle_text = ", ".join(f"{i.start_sample}..{i.end_sample}" for i in r.idles)
        checks.append(Check(IDLE_EDGES, not idle_issues, (
            "events.jsonl idle_measured: " + _names(idle_issues)) if idle_issues else (
            f"idle span {idle_text} (events.jsonl idle_measured) is a pair of consecutive edges "
            f"of {r.trace_name}")))
    else:
        checks.append(Check(IDLE_EDGES, None, "no idle span with trace sample ids"))
    window_issues = [x for w in r.windows
                     if (x := pair_issue(f"window {w.index}", w.start_sample, w.end_sample))]
    twice = [f"window {k}" for k, n in Counter(
        (w.start_sample, w.end_sample) for w in r.windows).items() if n > 1]
    window_issues += [f"{t} claimed twice" for t in twice]
    if r.windows:
        checks.append(Check(WINDOW_EDGES, not window_issues, (
            "events.jsonl window_measured: " + _names(window_issues)) if window_issues else (
            f"{len(r.windows)} windows (events.jsonl window_measured), each a pair of "
            f"consecutive edges of {r.trace_name}")))
    else:
        checks.append(Check(WINDOW_EDGES, None, "no window with trace sample ids"))
    checks.append(_edges_accounted(r))
    return checks


@dataclass(frozen=True)
class _Expected:
    """A window the procedure made, in order: its kind and name, its boundaries where an event
    names them, its duration where an event states it."""

    kind: str
    name: str
    bounds: tuple[int, int] | None = None
    seconds: float | None = None
    run: int | None = None
    sample: int | None = None


def _expected_windows(r: _Run) -> list[_Expected]:
    """The windows on the timestamp line, in the order `rig.run.asc` makes them."""
    out: list[_Expected] = []
    if r.scope != "accuracy":  # `_latency_and_energy` starts with a timed calibration run
        out.append(_Expected("calibration run", "calibration run"))
    with_window = {w.index for w in r.windows}
    for e in r.events:
        if isinstance(e, IdleMeasured) and e.end_sample > e.start_sample:
            out.append(_Expected("idle span", "idle span", (e.start_sample, e.end_sample)))
        elif isinstance(e, WindowMeasured) and e.end_sample > e.start_sample:
            run = next((x for x in r.runs if x.index == e.index), None)
            seconds = None if run is None else (run.emon_elapsed_s or run.elapsed_s)
            out.append(_Expected("timed runs", f"timed run {e.index}",
                                 (e.start_sample, e.end_sample), seconds, run=e.index))
        elif isinstance(e, LatencyRun) and e.timer == "emon" and e.index not in with_window:
            out.append(_Expected("timed runs", f"timed run {e.index}", None,
                                 e.emon_elapsed_s or e.elapsed_s, run=e.index))
        elif isinstance(e, SampleClassified) and (e.timer == "emon" or e.emon_time_s):
            out.append(_Expected("test samples", f"test sample {e.index}", None, e.emon_time_s,
                                 sample=e.index))
        elif isinstance(e, SampleFailed):
            out.append(_Expected("test samples", f"test sample {e.index} (failed)",
                                 sample=e.index))
    return out


def _account(r: _Run) -> None:
    """Lay the trace's edge pairs beside the windows the run's events made, in order: each
    pair must be the window in its place (its boundaries, or its duration, where the events
    give them). Sets `r.unaccounted`, `r.made` and the timed runs' and samples' pairs."""
    assert r.edges is not None
    expected = _expected_windows(r)
    r.made = Counter(w.kind for w in expected)
    edges = r.edges.tolist()
    if len(edges) % 2 and r.trace is not None and not (r.trace.gpio[edges[-1]:] & 1).any():
        # The line fell and stayed low to the trace's end: the DUT powered off (its GPIO
        # drops with its supply) as the run ended, not a window: set apart, said.
        r.made["DUT powered off (line low to the trace's end)"] = 1
        edges = edges[:-1]
    pairs = list(zip(edges[0::2], edges[1::2], strict=False))
    if len(edges) % 2:
        r.unaccounted.append(f"an odd number of edges ({len(edges)}): sample {edges[-1]} "
                             "ends no window")
    if len(pairs) != len(expected):
        r.unaccounted.append(f"{len(pairs)} windows (edge pairs) in the trace, "
                             f"{len(expected)} made by the run's events")
    for k, (want, (a, b)) in enumerate(zip(expected, pairs, strict=False)):
        seconds = (b - a) / r.fs
        if want.bounds is not None and want.bounds != (a, b):
            r.unaccounted.append(f"edge pair {k} is samples {a}..{b}, but {want.name} is "
                                 f"{want.bounds[0]}..{want.bounds[1]}")
            return  # one shift misplaces every later pair: the first says where
        if want.seconds is not None and not _same(want.seconds, seconds):
            r.unaccounted.append(f"edge pair {k} ({a}..{b}, {seconds:.6g} s) is not "
                                 f"{want.name} ({want.seconds:.6g} s in events.jsonl)")
            return
        if want.run is not None:
            r.run_pairs[want.run] = (a, b)
        if want.sample is not None:
            r.sample_pairs[want.sample] = (a, b)


def _edges_accounted(r: _Run) -> Check:
    assert r.edges is not None
    if r.unaccounted:
        return Check(EDGES_ACCOUNTED, False, f"{r.trace_name}: " + "; ".join(r.unaccounted))
    made = ", ".join(f"{n} {kind}" if n > 1 or kind.endswith("s") else kind
                     for kind, n in r.made.items())
    return Check(EDGES_ACCOUNTED, True, f"{len(r.edges)} falling edges of {r.trace_name} = "
                 f"{len(r.edges) // 2} windows, in order: {made or 'none'}")


def _rate_vs_dut(r: _Run) -> Check:
    """Samples = rate x duration: each window's sample count over the trace's rate against the
    DUT's own timer for the same window (`timer_agreement`), from the trace, not the events."""
    dut, emon, names = [], [], []
    for run in r.runs:
        pair = r.run_pairs.get(run.index) or _window_pair(r, run.index)
        if run.dut_elapsed_s and pair is not None:
            dut.append(run.dut_elapsed_s)
            emon.append((pair[1] - pair[0]) / r.fs)
            names.append(f"timed run {run.index}")
    for s in r.samples:
        pair = r.sample_pairs.get(s.index)
        if s.dut_time_s and pair is not None:
            dut.append(s.dut_time_s)
            emon.append((pair[1] - pair[0]) / r.fs)
            names.append(f"test sample {s.index}")
    if not dut:
        return Check(RATE_VS_DUT, None, "no window timed by both the DUT's timer and the trace "
                     "(firmware without `elap` reports no lap counter in energy mode)")
    result = timer_agreement(np.array(dut), np.array(emon), sample_period_s=1.0 / r.fs)
    worst = (f"{names[result.worst]}: {emon[result.worst]:.7g} s in {r.trace_name}, "
             f"{dut[result.worst]:.7g} s by the DUT (events.jsonl dut_elapsed_s/dut_time_s)")
    allowed = f"{result.tolerance:.1%} + {result.resolution_s:.3g} s"
    if result.ok:
        return Check(RATE_VS_DUT, True, f"{result.windows} windows: samples / {r.fs:g} Hz "
                     f"agree with the DUT's timer within {allowed}; closest to its limit {worst}")
    return Check(RATE_VS_DUT, False, f"{result.failed} of {result.windows} windows disagree "
                 f"beyond {allowed}: worst {worst} ({result.worst_relative:+.3%})")


# -- 3. accuracy ------------------------------------------------------------------------------
def _accuracy_checks(r: _Run) -> list[Check]:
    checks = [_labels_digest(r)]
    if r.scope in ("performance", "energy"):
        why = f"a {r.scope}-only run classifies no test sample"
        return checks + [Check(x, None, why) for x in (INDICES, LABELS_MATCH, PREDICTIONS,
                                                       ACCURACY)]
    size, source = _test_set_size(r)
    checks.append(_indices(r, size, source))
    checks.append(_labels_match(r))
    checks.append(_predictions(r))
    checks.append(_accuracy(r))
    return checks


def _test_set_size(r: _Run) -> tuple[int | None, str]:
    if r.labels is not None:
        return len(r.labels), "the test set's labels given"
    recorded = (r.manifest.get("test_set") or {}).get("samples")
    if isinstance(recorded, int):
        return recorded, "manifest.json test_set.samples"
    return None, "unknown"


def _labels_digest(r: _Run) -> Check:
    recorded = r.manifest.get("test_set")
    if not isinstance(recorded, dict):
        return Check(LABELS_DIGEST, False, "manifest.json has no test_set (the run recorded no "
                     "test-set identity): its accuracy cannot be tied to a test set")
    if r.labels is None:
        return Check(LABELS_DIGEST, None, "no test-set labels given to check "
                     f"manifest.json test_set.sha256_labels {recorded.get('sha256_labels')} "
                     "against")
    try:
        digest = labels_sha256(r.labels)
    except ValueError as exc:
        return Check(LABELS_DIGEST, False, f"the labels given cannot be hashed: {exc}")
    want, samples = recorded.get("sha256_labels"), recorded.get("samples")
    ok = digest == want and samples == len(r.labels)
    return Check(LABELS_DIGEST, ok, f"the {len(r.labels)} labels given hash to {digest}; "
                 f"manifest.json test_set.sha256_labels = {want}, test_set.samples = {samples}")


def _indices(r: _Run, size: int | None, source: str) -> Check:
    indices = [s.index for s in r.samples] + [f.index for f in r.failed]
    if size is None:
        return Check(INDICES, False, f"{len(indices)} samples in events.jsonl, but the test "
                     "set's size is unknown (no labels given, no manifest.json test_set)")
    counts = Counter(indices)
    twice = sorted(k for k, n in counts.items() if n > 1)
    outside = sorted(k for k in counts if not 0 <= k < size)
    missing = sorted(set(range(size)) - set(counts))
    wrong = []
    if missing:
        wrong.append(f"{len(missing)} of {size} indices missing ({_names(map(str, missing))})")
    if twice:
        wrong.append(f"indices counted twice: {_names(map(str, twice))}")
    if outside:
        wrong.append(f"indices outside the test set: {_names(map(str, outside))}")
    where = "events.jsonl sample_classified/sample_failed index"
    if wrong:
        return Check(INDICES, False, f"{where} against {size} samples ({source}): "
                     + "; ".join(wrong))
    return Check(INDICES, True, f"{where}: each of the {size} test-set indices ({source}) "
                 "exactly once")


def _labels_match(r: _Run) -> Check:
    if r.labels is None:
        return Check(LABELS_MATCH, None, "no test-set labels given")
    entries: list[SampleClassified | SampleFailed] = [*r.samples, *r.failed]
    wrong = [f"sample {e.index}: label {e.label}, test set "
             f"{'none' if not 0 <= e.index < len(r.labels) else int(r.labels[e.index])}"
             for e in entries
             if not 0 <= e.index < len(r.labels) or e.label != int(r.labels[e.index])]
    if wrong:
        return Check(LABELS_MATCH, False, "events.jsonl sample_classified label differs from "
                     "the test set's: " + _names(wrong))
    return Check(LABELS_MATCH, True, f"{len(r.samples) + len(r.failed)} sample labels in "
                 "events.jsonl equal the test set's at their index")


def _predictions(r: _Run) -> Check:
    """The class each sample was counted as is the DUT's highest score, and `correct` says
    whether it is the label: a prediction flipped in the events shows against its scores."""
    if not r.samples:
        return Check(PREDICTIONS, None, "no sample_classified event")
    wrong = []
    for s in r.samples:
        top = _highest(s.scores)
        if top != s.predicted:
            wrong.append(f"sample {s.index}: predicted {s.predicted}, highest score class {top}")
        elif s.correct != (s.predicted == s.label):
            wrong.append(f"sample {s.index}: correct {s.correct} for predicted {s.predicted}, "
                         f"label {s.label}")
    if wrong:
        return Check(PREDICTIONS, False, "events.jsonl sample_classified: " + _names(wrong))
    return Check(PREDICTIONS, True, f"{len(r.samples)} sample_classified events: predicted = "
                 "the class of the highest score, correct = (predicted = label)")


def _highest(scores: Any) -> int | None:
    """The index of the first highest score, as `np.argmax` (a NaN counts highest), or None
    for none: in Python for a plain list of finite numbers (a few, where numpy's call costs
    more than the work)."""
    if not len(scores):
        return None
    if isinstance(scores, list) and all(_is_number(x) for x in scores):
        return max(range(len(scores)), key=scores.__getitem__)
    return int(np.argmax(scores))


def _accuracy(r: _Run) -> Check:
    if not r.samples:
        stated = r.summary.get("accuracy")
        # Nothing to count: an accuracy stated from no sample fails, none stated does not apply.
        return Check(ACCURACY, False if stated is not None else None,
                     f"no sample_classified event; manifest.json summary.accuracy = {stated!r}")
    predicted = np.array([s.predicted for s in r.samples])
    if r.labels is not None:
        index = np.array([s.index for s in r.samples])
        inside = (index >= 0) & (index < len(r.labels))
        truth = np.full(len(index), -1)
        truth[inside] = r.labels[index[inside]]
        against = "the test set's labels"
    else:
        truth, against = np.array([s.label for s in r.samples]), "the events' own labels"
    correct = int(np.count_nonzero(predicted == truth))
    accuracy = correct / len(r.samples)
    s = r.summary
    stated = (s.get("accuracy"), s.get("samples"), s.get("correct"))
    ok = (_is_number(stated[0]) and _same(stated[0], accuracy)
          and stated[1] == len(r.samples) and stated[2] == correct)
    return Check(ACCURACY, ok, f"recounted against {against}: {correct} of {len(r.samples)} "
                 f"= {accuracy!r}; manifest.json summary.accuracy = {stated[0]!r}, samples = "
                 f"{stated[1]!r}, correct = {stated[2]!r}")


# -- 4. the method ----------------------------------------------------------------------------
def _run_seconds(r: _Run, run: LatencyRun) -> tuple[float, str]:
    """A timed run's length: its window's samples over the trace's rate (energy mode), else the
    DUT's timer."""
    pair = r.run_pairs.get(run.index) or _window_pair(r, run.index)
    if run.timer == "emon" and pair is not None and r.trace is not None:
        return (pair[1] - pair[0]) / r.fs, r.trace_name
    if run.dut_elapsed_s:
        return float(run.dut_elapsed_s), "events.jsonl latency_run dut_elapsed_s"
    return float(run.elapsed_s), f"events.jsonl latency_run elapsed_s ({run.timer} timer)"


def _method_checks(r: _Run) -> list[Check]:
    checks = []
    if r.scope == "accuracy":
        why = "an accuracy-only run has no timed runs"
        checks += [Check(x, None, why) for x in (METHOD_RUN_COUNT, METHOD_RUN_LENGTH,
                                                 METHOD_LATENCY, METHOD_ENERGY)]
    else:
        n = len(r.runs)
        checks.append(Check(METHOD_RUN_COUNT, n >= METHOD_RUNS, f"{n} latency_run events in "
                            f"events.jsonl; the method asks for {METHOD_RUNS} (rules.md)"))
        lengths = [(run, *_run_seconds(r, run)) for run in r.runs]
        short = [f"run {run.index}: {sec:.6g} s, {run.iterations} iterations"
                 for run, sec, _ in lengths
                 if not (sec >= METHOD_MIN_RUN_S and run.iterations >= METHOD_MIN_ITERATIONS)]
        source = lengths[0][2] if lengths else "no run"
        shortest = min((sec for _, sec, _ in lengths), default=math.nan)
        checks.append(Check(METHOD_RUN_LENGTH, bool(lengths) and not short, (
            f"runs shorter than {METHOD_MIN_RUN_S:g} s or {METHOD_MIN_ITERATIONS} iterations "
            f"(timed from {source}): " + _names(short)) if short else (
            f"every run >= {METHOD_MIN_RUN_S:g} s and >= {METHOD_MIN_ITERATIONS} iterations "
            f"(shortest {shortest:.6g} s, timed from {source})")))
        checks.append(_replicable(METHOD_LATENCY, "inferences per second",
                                  [run.iterations / sec for run, sec, _ in lengths if sec > 0],
                                  f"iterations / run length from {source}"))
        if r.rep is not None:
            epi = [e.energy_per_inference_j for e in r.rep.events
                   if isinstance(e, WindowMeasured) and e.end_sample > e.start_sample]
            checks.append(_replicable(METHOD_ENERGY, "energy per inference", epi,
                                      f"re-derived from {r.trace_name}"))
        else:
            checks.append(Check(METHOD_ENERGY, None, "no energy window re-derived from a trace"))
    if r.scope in ("performance", "energy"):
        checks.append(Check(METHOD_TEST_SET, None, f"a {r.scope}-only run classifies no test "
                            "sample"))
    else:
        size, source = _test_set_size(r)
        classified = len({s.index for s in r.samples})
        ok = size is not None and classified == size and not r.failed
        checks.append(Check(METHOD_TEST_SET, ok, f"{classified} distinct test samples "
                            f"classified (events.jsonl), {len(r.failed)} failed; the test set "
                            f"holds {size} ({source})"))
    return checks


def _replicable(item: str, what: str, values: Sequence[float], source: str) -> Check:
    if not values:
        return Check(item, None, f"no {what} to compare")
    ok, dev = replicability(np.asarray(values), METHOD_REPLICABILITY)
    return Check(item, ok, f"{len(values)} runs' {what} ({source}): largest deviation from "
                 f"their mean {dev:.3%} (each must be within {METHOD_REPLICABILITY:.0%})")


# -- 5. the inference count -------------------------------------------------------------------
def _inference_count_checks(r: _Run) -> list[Check]:
    return [_iterations(r), _per_inference_dut(r), _per_inference_samples(r)]


def _iterations(r: _Run) -> Check:
    if not r.windows:
        return Check(ITERATIONS, None, "no energy window")
    wrong = []
    runs = {run.index: run for run in r.runs}
    for w in r.windows:
        run = runs.get(w.index)
        if run is None:
            wrong.append(f"window {w.index} has no latency_run")
        elif run.iterations != w.iterations:
            wrong.append(f"window {w.index}: iterations {w.iterations}, latency_run "
                         f"{run.iterations}")
    missing = sorted(set(runs) - {w.index for w in r.windows})
    if missing and r.scope != "performance":
        wrong.append(f"latency_run(s) {_names(map(str, missing))} have no window")
    if wrong:
        return Check(ITERATIONS, False, "events.jsonl window_measured against latency_run: "
                     + _names(wrong))
    return Check(ITERATIONS, True, f"{len(r.windows)} window_measured iterations = their "
                 "latency_run's (events.jsonl), one window per timed run")


def _per_inference_dut(r: _Run) -> Check:
    """A window's time per inference (its samples over the trace's rate, over the window's
    iteration count) against the DUT's (its lap counter over the run's iteration count): an
    iteration count inflated in one event shows as a window whose inferences got faster."""
    rows = []
    for w in r.windows:
        run = next((x for x in r.runs if x.index == w.index), None)
        if run is None or not run.dut_elapsed_s or r.trace is None or w.iterations <= 0 \
                or run.iterations <= 0:
            continue
        window_s = (w.end_sample - w.start_sample) / r.fs / w.iterations
        dut_s = run.dut_elapsed_s / run.iterations
        allowed = TIMER_TOLERANCE + (1.0 / r.fs + DUT_TICK_S) / run.dut_elapsed_s
        rows.append((w.index, window_s, dut_s, (window_s - dut_s) / dut_s, allowed))
    if not rows:
        return Check(PER_INFERENCE_DUT, None, "no window the DUT's timer also timed (energy-"
                     "mode firmware without `elap` reports no lap counter)")
    bad = [f"window {i}: {a * 1e3:.6g} ms by {r.trace_name} over window_measured iterations, "
           f"{b * 1e3:.6g} ms by the DUT over latency_run iterations ({rel:+.3%})"
           for i, a, b, rel, allowed in rows if abs(rel) > allowed]
    worst = max(rows, key=lambda x: abs(x[3]) / x[4])
    if bad:
        return Check(PER_INFERENCE_DUT, False, "time per inference disagrees beyond "
                     f"{TIMER_TOLERANCE:.1%} + a tick of each clock: " + _names(bad))
    return Check(PER_INFERENCE_DUT, True, f"{len(rows)} windows: time per inference by the "
                 f"trace and by the DUT's timer agree within {TIMER_TOLERANCE:.1%} + a tick "
                 f"(worst window {worst[0]}: {worst[3]:+.3%})")


def _per_inference_samples(r: _Run) -> Check:
    """The timed runs' time per inference (run length from the trace, over the iterations the
    events claim) against the test samples' (one inference each): an iteration count inflated
    consistently in every event of a run still shows against them."""
    if not r.runs or not r.samples:
        return Check(PER_INFERENCE_SAMPLES, None, "needs both timed runs and test samples")
    per_run = [sec / (w.iterations if (w := r.window(run.index)) else run.iterations)
               for run in r.runs if run.iterations > 0
               for sec, _ in [_run_seconds(r, run)]]
    dut = [s.dut_time_s for s in r.samples if s.dut_time_s]
    if len(dut) == len(r.samples):
        times, tick, clock = dut, DUT_TICK_S, "the DUT's timer (sample_classified dut_time_s)"
    else:
        times = [(p[1] - p[0]) / r.fs for s in r.samples if (p := r.sample_pairs.get(s.index))]
        tick, clock = 1.0 / r.fs if r.trace is not None else 0.0, r.trace_name
        if len(times) != len(r.samples):
            times = [float(s.execution_time_s) for s in r.samples if s.execution_time_s]
            clock = "events.jsonl sample_classified execution_time_s"
    if not per_run or not times:
        return Check(PER_INFERENCE_SAMPLES, None, "no timed run or test sample with a time")
    runs_s, samples_s = float(np.median(per_run)), float(np.mean(times))
    rel = (runs_s - samples_s) / samples_s
    allowed = INFERENCE_TIME_TOLERANCE + tick / samples_s
    ok = abs(rel) <= allowed
    return Check(PER_INFERENCE_SAMPLES, ok, f"timed runs: {runs_s * 1e3:.6g} ms per inference "
                 f"(median of run length / iterations); test samples: {samples_s * 1e3:.6g} ms "
                 f"(mean of {len(times)}, {clock}); {rel:+.2%}, allowed "
                 f"{INFERENCE_TIME_TOLERANCE:.0%} + one tick")


# -- QUBO ---------------------------------------------------------------------------------------
def timeout_allowance(timeout_s: float) -> float:
    """How far past `timeout_s` a solve may end (its last slice, plus the solver's tick)."""
    return min(max(QUBO_SLICE_SHARE * timeout_s, QUBO_SLICE_MIN_S), QUBO_SLICE_MAX_S) \
        + QUBO_TICK_S


def qubo_checks(run: Path) -> list[Check]:
    """Every re-derivation check of one QUBO run: a sweep folder (`rig sweep qubo`) or a
    one-point one (`rig measure qubo`). `ConfigError` for a folder that is not one."""
    from rig.qubo.sweep import STAND_IN, read_sweep, summarize

    record = read_sweep(run, check_running=False)
    name = record.path.name
    points = sorted(record.done.values(), key=lambda p: p.index)
    ok = [p for p in points if p.status == "ok"]
    checks = [Check(RUN_COMPLETE, record.status == "complete",
                    f"sweep status {record.status}: {len(record.done)} of {record.total} points "
                    f"on disk, {record.failed} failed")]
    if record.manifest.get("point_function") == STAND_IN:
        why = "stand-in points (manifest.json point_function): made-up numbers, no solution"
        checks += [Check(x, None, why) for x in (QUBO_SOLUTIONS, QUBO_COST, QUBO_TARGET,
                                                 QUBO_GAP, QUBO_TIMEOUT, QUBO_TTS, QUBO_ENERGY)]
    elif not ok:
        checks += [Check(x, None, "no point measured ok") for x in (
            QUBO_SOLUTIONS, QUBO_COST, QUBO_TARGET, QUBO_GAP, QUBO_TIMEOUT, QUBO_TTS,
            QUBO_ENERGY)]
    else:
        checks += _qubo_points(ok, record.spec.targets)
    again = summarize(record.spec, record.done)
    stored = (record.manifest.get("summary") or {})
    wrong = _differences(stored.get("rows"), again["rows"])
    checks.append(Check(QUBO_SUMMARY, not wrong, (
        "manifest.json summary.rows differ from the points in events.jsonl at rows"
        + _names(wrong)) if wrong else (
        f"manifest.json summary.rows ({len(again['rows'])}) = the points in events.jsonl "
        "summarised again")))
    return [Check(c.item, c.ok, c.detail, name) for c in checks]


def _qubo_points(points: Sequence[Any], targets_mode: str) -> list[Check]:
    """The per-point checks, each over every point measured ok (details name the points)."""
    from rig.qubo.procedure import time_to_solution
    from rig.qubo.suts import LOIHI_PROFILER, LOIHI_PROFILER_SIMULATED, SolveResult
    from rig.qubo.targets import EXACT_BELOW, exact, table
    from rig.qubo.workloads import WorkloadError, cost, generate
    from rig.qubo.workloads import gap as bks_gap

    issues: dict[str, list[str]] = {x: [] for x in (QUBO_SOLUTIONS, QUBO_COST, QUBO_TARGET,
                                                    QUBO_GAP, QUBO_TIMEOUT, QUBO_TTS,
                                                    QUBO_ENERGY)}
    counted = Counter[str]()
    known = table()
    workloads: dict[tuple[int, float, int], Any] = {}
    exact_costs: dict[tuple[int, float, int], int] = {}
    for p in points:
        res, where = p.result, f"point {p.key}"
        key = (p.nodes, p.density, p.seed)
        try:
            workload = workloads.get(key) or workloads.setdefault(key, generate(*key))
        except WorkloadError as exc:
            issues[QUBO_COST].append(f"{where}: its workload cannot be regenerated ({exc})")
            continue
        recorded_cost, target = res.get("cost"), res.get("target")
        # The solution: the nodes set to 1, ascending, each once, inside the graph.
        solution = res.get("solution")
        state = None
        if not isinstance(solution, list):
            issues[QUBO_SOLUTIONS].append(f"{where} has no solution")
        else:
            nodes = np.asarray(solution)
            if nodes.size and (nodes.dtype.kind not in "iu" or nodes.min() < 0
                               or nodes.max() >= p.nodes or np.any(np.diff(nodes) <= 0)):
                issues[QUBO_SOLUTIONS].append(f"{where}: solution is not ascending node "
                                              f"indices in 0..{p.nodes - 1}")
            else:
                state = np.zeros(p.nodes, dtype=bool)
                state[nodes.astype(np.int64)] = True
        again = None
        if state is not None:
            again = int(cost(workload, state))
            counted["cost"] += 1
            if again != recorded_cost:
                issues[QUBO_COST].append(f"{where}: cost {recorded_cost!r} recorded, its "
                                         f"solution costs {again}")
        improvements = res.get("improvements") or []
        if improvements and improvements[-1][1] != recorded_cost:
            issues[QUBO_COST].append(f"{where}: cost {recorded_cost!r}, last improvement "
                                     f"{improvements[-1][1]!r}")
        # The target: the official table's where the sweep took it from there; exact below 50.
        if not isinstance(target, int):
            issues[QUBO_TARGET].append(f"{where}: target {target!r} is not a whole number")
        elif key in known and (targets_mode == "table" or res.get("target_method") == "table"):
            counted["table"] += 1
            if known[key] != target:
                issues[QUBO_TARGET].append(f"{where}: target {target}, the BKS table "
                                           f"{known[key]}")
        elif p.nodes < EXACT_BELOW:
            if key not in exact_costs:
                exact_costs[key] = exact(workload).cost
            counted["exact"] += 1
            if exact_costs[key] != target:
                issues[QUBO_TARGET].append(f"{where}: target {target}, the exact optimum "
                                           f"{exact_costs[key]}")
        else:
            counted["not recomputed"] += 1
        # The gap from the re-evaluated cost.
        if isinstance(target, int) and target != 0:
            base = again if again is not None else recorded_cost
            if _is_number(base):
                want = bks_gap(base, target)
                if not (_is_number(res.get("gap")) and _same(float(res["gap"]), want)):
                    issues[QUBO_GAP].append(f"{where}: gap {res.get('gap')!r}, (cost {base} - "
                                            f"target {target}) / |target| = {want!r}")
        # The timeout: the solve ended in it, and its best solution was found in it.
        limit = p.timeout_s + timeout_allowance(p.timeout_s)
        elapsed = res.get("elapsed_s")
        # A host that kept the solver off its CPU (other work) stretches the last slice past
        # the timeout by as much: the SUT's own cpu_s says how long it waited, so that wait is
        # allowed on top (a longer solve passed off as a shorter one waited for nothing).
        cpu = res.get("solver_cpu_s")
        waited = (max(0.0, float(elapsed) - float(cpu))
                  if _is_number(elapsed) and _is_number(cpu) else 0.0)
        if not (_is_number(elapsed) and 0 <= float(elapsed) <= limit + waited):
            issues[QUBO_TIMEOUT].append(
                f"{where}: elapsed_s {elapsed!r} > timeout {p.timeout_s:g} s + "
                f"{limit - p.timeout_s:.3g} s" + (f" + {waited:.3g} s off the CPU (elapsed_s - "
                                                  "solver_cpu_s)" if waited else ""))
        best = next((t for t, c in improvements if c == recorded_cost), None)
        if best is None:
            issues[QUBO_TIMEOUT].append(f"{where}: no improvement reached its cost "
                                        f"{recorded_cost!r}")
        elif not (_is_number(best) and best <= limit):
            issues[QUBO_TIMEOUT].append(f"{where}: its cost was found at {best!r} s, after "
                                        f"its {p.timeout_s:g} s timeout")
        # Time to solution and energy, from the improvements and the power.
        power = res.get("power_w")
        if isinstance(target, int) and target != 0:
            timeline = SolveResult(int(recorded_cost or 0), np.zeros(0, dtype=bool),
                                   [(float(t), int(c)) for t, c in improvements])
            tts = time_to_solution(timeline, target, power_w=power)
            wrong = _differences(res.get("tts"), tts)
            if wrong:
                issues[QUBO_TTS].append(f"{where}: tts{wrong[0]}")
        if power is not None and res.get("power_source") not in (LOIHI_PROFILER,
                                                                  LOIHI_PROFILER_SIMULATED):
            counted["energy"] += 1
            want = float(power) * float(elapsed) if _is_number(elapsed) else math.nan
            if not (_is_number(res.get("energy_j")) and _same(float(res["energy_j"]), want)):
                issues[QUBO_ENERGY].append(f"{where}: energy_j {res.get('energy_j')!r}, "
                                           f"power_w x elapsed_s = {want!r}")
    n = len(points)
    held = {
        QUBO_SOLUTIONS: f"{n} points: each solution is ascending node indices of its graph",
        QUBO_COST: f"{counted['cost']} points: the cost of the solution on the workload "
                   "regenerated from (nodes, density, seed) = the cost recorded",
        QUBO_TARGET: f"{counted['table']} targets from the BKS table, {counted['exact']} exact "
                     f"optima recomputed, {counted['not recomputed']} (tabu) not recomputed",
        QUBO_GAP: f"{n} points: gap = (cost - target) / |target|",
        QUBO_TIMEOUT: f"{n} points: solve ended and best cost found within the timeout "
                      f"(+ {QUBO_SLICE_SHARE:.0%} + {QUBO_TICK_S * 1e3:g} ms: the last slice)",
        QUBO_TTS: f"{n} points: time to each gap threshold from the improvement timeline",
        QUBO_ENERGY: f"{counted['energy']} points: energy_j = power_w x elapsed_s",
    }
    out = []
    for item, found in issues.items():
        if found:
            out.append(Check(item, False, "events.jsonl sweep_point result: " + _names(found)))
        elif item == QUBO_TARGET and counted["table"] + counted["exact"] == 0:
            out.append(Check(item, None, held[item]))
        elif item == QUBO_ENERGY and not counted["energy"]:
            out.append(Check(item, None, "no point with power measured by the rig"))
        else:
            out.append(Check(item, True, held[item]))
    return out


# -- helpers ------------------------------------------------------------------------------------
def _is_number(value: Any) -> bool:
    """A finite int or float (never a bool)."""
    kind = type(value)
    if kind is float:  # the usual case first: ~2x quicker than the isinstance tests
        return math.isfinite(value)
    if kind is int:
        return True
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def _same(a: Any, b: Any) -> bool:
    """Two numbers equal within `TOLERANCE` (relative): float rounding, never a tampering."""
    if not (_is_number(a) and _is_number(b)):
        return False
    return relative_difference(float(a), float(b)) <= TOLERANCE


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two JSON values differ (numbers within `TOLERANCE`), as ".key[index]" paths."""
    if isinstance(a, dict) and isinstance(b, dict):
        if a == b:  # one C-level compare (the usual case: both written from the same dict)
            return []
        out = []
        for k in dict.fromkeys([*a, *b]):
            out += _differences(a.get(k), b.get(k), f"{path}.{k}")
        return out
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        if len(a) != len(b):
            return [f"{path} ({len(a)} vs {len(b)} entries)"]
        out = []
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            out += _differences(x, y, f"{path}[{k}]")
        return out
    if _is_number(a) and _is_number(b):
        return [] if _same(a, b) else [path]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [path]


def _names(items: Iterable[str]) -> str:
    """The first few of `items`, and how many more."""
    listed = list(items)
    shown = "; ".join(listed[:_NAMED])
    return shown + (f"; and {len(listed) - _NAMED} more" if len(listed) > _NAMED else "")
