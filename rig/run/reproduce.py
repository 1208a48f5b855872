"""Reproduce a finished ASC run's energy figures from its raw trace (`rig analyze RUN_FOLDER`).

The windows and idle spans (sample ranges) and iteration counts come from the run's own events;
their energy and power are integrated again from the trace file with `rig.traces.analysis`, and the
run's summary function (`asc.summarize`) derives the figures from them, so the manifest's idle,
active and dynamic power and energy per inference must come back to `TOLERANCE` (relative).
Where the trace holds each sample's current range, how every window and idle span spread over
the ranges is counted again from it too (their uncertainty budgets take each range's share);
a trace without it keeps what the events recorded.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rig.errors import AnalysisError, ConfigError
from rig.run import asc
from rig.run.events import Event, IdleMeasured, TraceSaved, WindowMeasured
from rig.run.store import RunRecord, load_run
from rig.run.summary import run_simulated
from rig.traces.analysis.energy import check_windows, span_figures
from rig.traces.files import Trace, read_trace

#: Relative difference allowed between a stored figure and its recomputation (float rounding).
TOLERANCE = 1e-9
#: The figures recomputed from the trace, in the order they are printed.
FIGURES = ("idle_power_w", "active_power_w", "dynamic_power_w", "energy_per_inference_j",
           "dynamic_energy_per_inference_j")
_FOLDER_HINT = "give a finished ASC run folder whose energy monitor recorded a trace"


@dataclass(frozen=True)
class FigureCheck:
    """One figure: as the manifest states it, as the trace gives it, and their difference."""

    name: str
    manifest: float | None
    recomputed: float | None
    relative_difference: float | None
    ok: bool

    def to_dict(self) -> dict[str, Any]:
        """Plain data for JSON (NaN and inf as null)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class Reproduction:
    """`rig analyze RUN_FOLDER`: every figure compared, and whether the windows sit on edges."""

    run: Path
    trace: Path
    simulated: bool
    sample_rate_hz: float
    windows: int
    idle_spans: int
    figures: list[FigureCheck]
    #: Window and idle boundaries that are not falling edges of the trace's timestamp line.
    off_edge_samples: list[int]
    #: The GUM budget of each figure, re-derived from the recomputed figures (the summary's
    #: ``uncertainty``, `rig.run.asc_uncertainty`).
    uncertainty: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: The whole summary `asc.summarize` gives from the re-derived events, and those events
    #: (windows and idle spans integrated again from the trace, the rest as recorded): what
    #: `rig verify` compares figure by figure and event by event (`rig.submission.rederive`).
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    events: list[Event] = dataclasses.field(default_factory=list)
    #: True when every sample of the trace is a finite number (none lost), as the pass over
    #: it found; None when it could not tell (a caller that needs to know looks itself).
    trace_finite: bool | None = None

    @property
    def ok(self) -> bool:
        """Every figure reproduced and every boundary on an edge."""
        return all(f.ok for f in self.figures) and not self.off_edge_samples

    @property
    def failed(self) -> list[str]:
        """Names of what did not reproduce."""
        names = [f.name for f in self.figures if not f.ok]
        return names + (["windows on timestamp edges"] if self.off_edge_samples else [])

    def to_dict(self) -> dict[str, Any]:
        """The JSON object `rig analyze RUN_FOLDER --json` prints."""
        return {
            "run": str(self.run), "trace": str(self.trace), "simulated": self.simulated,
            "sample_rate_hz": self.sample_rate_hz, "windows": self.windows,
            "idle_spans": self.idle_spans, "tolerance": TOLERANCE,
            "figures": [f.to_dict() for f in self.figures],
            "off_edge_samples": self.off_edge_samples, "ok": self.ok, "failed": self.failed,
            "uncertainty": self.uncertainty,
        }


def relative_difference(a: float, b: float) -> float:
    """|a - b| relative to the larger magnitude (0 when both are 0; NaN if either is)."""
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def reproduce_run(path: str | Path, *, trace: Trace | None = None,
                  record: RunRecord | None = None,
                  edges: np.ndarray | None = None) -> Reproduction:
    """Recompute the run's energy figures from its trace; `ConfigError` (exit 2) for a folder
    that is not a finished run with a trace and energy windows. `trace`, `record`, `edges`:
    the run's trace, `load_run(path)` and `falling_edges(trace.gpio)` when the caller has them
    already (`rig verify` reads each run once)."""
    if record is None:
        record = load_run(path)
    run = record.path
    if record.finished is None:
        raise ConfigError(
            f"{run}: the run is unfinished (status {record.status}): its manifest holds no "
            "final figures to reproduce", hint=_FOLDER_HINT)
    manifest = record.manifest
    stored = manifest.get("summary")
    if not isinstance(stored, dict):
        raise ConfigError(f"{run}: manifest.json has no summary", hint=_FOLDER_HINT)
    windows = [e for e in record.events
               if isinstance(e, WindowMeasured) and e.end_sample > e.start_sample]
    idles = [e for e in record.events
             if isinstance(e, IdleMeasured) and e.end_sample > e.start_sample]
    if not windows:
        raise ConfigError(
            f"{run}: no energy window with trace sample ids in its events (a performance or "
            "accuracy run, or power from a DUT's rails): nothing to reproduce from a trace",
            hint=_FOLDER_HINT)
    trace_path = _trace_file(run, record.events)
    # Every window, idle span and idle sub-span (and their ranges' shares, where the trace
    # holds ranges) from one pass over the samples, which also tells whether any is lost:
    # a large trace's, while it is read.
    every = integration_spans(windows, idles)
    if trace is None:  # float32 as stored: exact, half the memory (sums are float64 anyway)
        trace = read_trace(trace_path, dtype=np.float32, spans=every)
    fs = trace.sample_rate

    spans = np.array([[w.start_sample, w.end_sample] for w in windows], dtype=np.int64)
    check_windows(trace.current, trace.voltage, spans, fs)
    subs = [list(itertools.pairwise(int(k) for k in i.sub_span_edges)) for i in idles]
    found = span_figures(trace.current, trace.voltage, every, trace.current_range,
                         trace.range_names, whole=True, known=trace.piece_dots)
    dots, shares = found.dots, found.shares
    _refuse_lost(run, trace, trace_path, every[: len(windows) + len(idles)],
                 [w.index for w in windows], dots[: len(windows) + len(idles)])
    energies = dots[: len(windows)] / fs
    powers = iter((dots[len(windows):] / (every[len(windows):, 1] - every[len(windows):, 0]))
                  .tolist())
    replaced: dict[int, Event] = {}
    for w, energy in zip(windows, energies.tolist(), strict=True):
        duration = (w.end_sample - w.start_sample) / fs
        replaced[id(w)] = dataclasses.replace(
            w, duration_s=duration, energy_j=energy, mean_power_w=energy / duration,
            energy_per_inference_j=energy / w.iterations)
    idle_powers = [next(powers) for _ in idles]
    for i, power, parts in zip(idles, idle_powers, subs, strict=True):
        replaced[id(i)] = dataclasses.replace(
            i, power_w=power, sub_span_powers_w=tuple(itertools.islice(powers, len(parts))))
    if shares is not None:  # the ranges' shares too, where the trace holds them
        for e, share in zip((*windows, *idles), shares, strict=False):
            span = replaced[id(e)]
            assert isinstance(span, WindowMeasured | IdleMeasured)
            replaced[id(e)] = dataclasses.replace(span, current_ranges=share)
    events = [replaced.get(id(e), e) for e in record.events]
    recomputed = asc.summarize(events, bench=manifest.get("bench"),
                               scope=manifest.get("scope", "all"))

    figures = []
    for name in FIGURES:
        a, b = stored.get(name), recomputed.get(name)
        if a is None and b is None:
            continue
        if a is None or b is None:  # one side lacks it: never a pass
            figures.append(FigureCheck(name, a, b, None, False))
            continue
        diff = relative_difference(float(a), float(b))
        figures.append(FigureCheck(name, float(a), float(b), diff, diff <= TOLERANCE))

    boundaries = np.concatenate([
        spans.ravel(), np.array([s for i in idles for s in (i.start_sample, i.end_sample)],
                                dtype=np.int64)]).tolist()
    if edges is None:
        edges = trace.falling_edges()
    # A few dozen boundaries against a few hundred edges: Python sets (numpy's unique and
    # isin cost more than the work on so few values); ascending, each once, as np.unique.
    on_edge = set(edges.tolist())
    off_edge = [s for s in sorted(set(boundaries)) if s not in on_edge]
    simulated = trace.simulated or run_simulated(record)  # the trace's or the run's word
    return Reproduction(run, trace_path, simulated, fs, len(windows), len(idles),
                        figures, off_edge, recomputed.get("uncertainty", {}), recomputed,
                        events, trace_finite=found.finite)


def integration_spans(windows: list[WindowMeasured], idles: list[IdleMeasured]) -> np.ndarray:
    """The [start, stop) rows `reproduce_run` integrates, in its order: every window, every
    idle span, then each idle span's sub-spans (events with a non-empty span only)."""
    rows = [(w.start_sample, w.end_sample) for w in windows]
    rows += [(i.start_sample, i.end_sample) for i in idles]
    rows += [pair for i in idles for pair in itertools.pairwise(int(k) for k in i.sub_span_edges)]
    return np.array(rows, dtype=np.int64).reshape(-1, 2)


def _refuse_lost(run: Path, trace: Trace, trace_path: Path, spans: np.ndarray,
                 window_indices: list[int], dots: np.ndarray) -> None:
    """AnalysisError naming each window and idle span whose samples in the trace are not all
    finite: a lost sample (NaN) there leaves nothing to integrate again (a trace whose writer
    lost data, as pyjls does on a full disk, or an edited one)."""
    bad = np.flatnonzero(~np.isfinite(dots)).tolist()
    if not bad:
        return
    named = []
    for k in bad[:5]:
        a, b = (int(x) for x in spans[k])
        # Windows by their events' index (as `rig verify` names them), then the idle spans.
        what = (f"window {window_indices[k]} [{a}, {b})" if k < len(window_indices)
                else f"idle span [{a}, {b})")
        lost = int(np.count_nonzero(~np.isfinite(trace.current[a:b])))
        named.append(f"{what}: {lost:,} of {b - a:,} samples")
    more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
    raise AnalysisError(
        f"{run}: its trace {trace_path.name} holds lost (not finite) samples inside "
        f"{'; '.join(named)}{more}: their energy cannot be integrated again from it",
        hint="the figures were measured live, but this trace cannot reproduce them: measure "
        "again (pyjls loses what it cannot write, as on a full disk)")


def _trace_file(run: Path, events: list[Event]) -> Path:
    """The run's energy-monitor trace (its `trace_saved` event names it)."""
    saved = [e for e in events if isinstance(e, TraceSaved)]
    if not saved:
        raise ConfigError(f"{run}: the run saved no energy-monitor trace", hint=_FOLDER_HINT)
    path = run / saved[-1].path
    if not path.is_file():
        raise ConfigError(f"{run}: its trace {saved[-1].path} is missing",
                          hint="copy the run folder whole, traces/ included")
    return path
