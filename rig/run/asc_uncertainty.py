"""The GUM budget of each ASC figure, from a run's events (`asc.summarize` puts it in the
summary's ``uncertainty``, so it reaches the manifest, `rig show --json` and `rig analyze RUN`).

Inputs, all from the events: the energy monitor's declared accuracy (its `InstrumentInfo`'s
``accuracy``, `drivers.emon.accuracy`), the range each reading was taken in (see below), the
trace's voltage (``trace_voltage``: measured, or the value the monitor set), the sample rate;
the idle spans, the energy windows, the timed runs and the test samples.

The model, figure by figure (P = I·V, each power a mean over samples of current × voltage):

- idle and active power: Type A over the windows, and over the idle spans or, for a single
  span, its near-equal sub-spans (batch means, `asc.IDLE_SUB_SPANS`); Type B the current's accuracy
  at I = P/V in its range (gain part and offset part), and the voltage's (measured, or the
  set supply's; ∂P/∂V = I). A mean power is a ratio of a sum to a sample count, so the sample
  clock and the window edges do not enter it.

  Which range: where the instrument told each sample's range (a PPK2, an auto-ranging
  Joulescope), the spans record how their samples spread over the ranges
  (``current_ranges``); with f_r the readings' fraction in range r and I_r their mean current
  there (P = V·Σ f_r·I_r), range r adds a gain term g_r·f_r·|I_r|·V and an offset term
  f_r·o_r·V (`range_shares`). Otherwise every reading is taken in one range: the settings'
  ``current_range`` (the configured one, or the one the instrument reported: its
  ``current_range_source``), else the smallest declared range whose full scale holds I = P/V
  (what autoranging would pick: inferred). Each term's source says which.
- energy per inference (P·T/N per window, the median of the windows): Type A over the windows
  (the standard deviation of the mean, used for the median too); the power's Type B terms
  carried by T/N; the sample clock's relative tolerance on T; each window edge placed within ±
  one sample (two rectangular terms of half-width 1/fs on T). The edge terms are taken for one
  window, not divided by √n, although edge errors differ window to window (conservative: the
  Type A term already sees part of them).
- dynamic power = active − idle, and dynamic energy per inference = dynamic power × execution
  time (the two budgets carried by their sensitivities: t and P_dyn).
- inferences per second (median of the runs) and the execution time: Type A over the runs or
  samples; Type B from the timer that timed them: the DUT's lap counter (its resolution, ± 1 µs
  per reading or the `m-lap-resolution-us` it reports, and its oscillator's tolerance: the
  bench's ``[dut] clock_ppm`` with its ``clock_source``, else unknown) or the monitor (its
  sample clock and the two edges).

What is assumed correlated, and why (`rig.traces.analysis.uncertainty.combine` adds a group's
terms linearly, r = +1): the *gain* error of one current range, because idle and active
readings taken by the same instrument in the same range are scaled by the same gain error, so in
dynamic = active − idle it scales with (P_a − P_i) and does not add twice; and the *supply
voltage* error, because idle and active run on the same set (or measured) supply, so it too
scales with (I_a − I_i). Taken independent: every Type A term; each reading's offset (the
same range's offset would cancel in the difference too, but its drift between the idle span and
the windows is not known, so counting it twice errs on the large side); idle and active read in
different ranges (an auto-ranging instrument) are two independent gain errors; the timer's
terms against the power's (different instruments or different quantities).

Unknown terms (an instrument whose accuracy is not published, one value with no Type A
estimate, the DUT's oscillator) make the budget incomplete: its u_c is then the known terms'
lower bound and U = 2·u_c (`rig.traces.analysis.uncertainty`), ``complete`` is false and
``unknown`` names the missing terms; never a guessed figure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from drivers.emon.accuracy import MonitorAccuracy, NotPublished, Spec
from rig.run.events import (
    Event,
    IdleMeasured,
    InstrumentInfo,
    LatencyRun,
    SampleClassified,
    TraceSaved,
    WindowMeasured,
)
from rig.traces.analysis.uncertainty import (
    Budget,
    Component,
    combine,
    rectangular,
    type_a,
    type_a_from_stderr,
    unknown,
)

#: The DUT's lap counter counts whole microseconds (``m-lap-us``): ± 1 µs per reading.
DUT_TIMER_RESOLUTION_S = 1e-6
#: The source of the DUT oscillator's unknown term.
DUT_CLOCK_UNKNOWN = ("not declared: the DUT's timer runs on its own oscillator, whose "
                     "tolerance the bench does not give ([dut] clock_ppm and clock_source; the "
                     "`timer agreement` check compares it with the monitor's clock where both "
                     "see a window, a consistency check, not a calibration)")
#: Where there is no monitor declaration to take Type B terms from.
NO_DECLARATION = ("instrument accuracy not published: the run's energy monitor declared no "
                  "accuracy (power from the DUT's rails, or a run recorded before monitors "
                  "declared theirs)")
#: The order budgets are listed in (the summary's own keys).
FIGURES = ("idle_power_w", "active_power_w", "dynamic_power_w", "energy_per_inference_j",
           "dynamic_energy_per_inference_j", "inferences_per_s", "execution_time_mean_s")


@dataclass(frozen=True)
class Monitor:
    """What the budget needs of the energy monitor, read from its `InstrumentInfo`."""

    accuracy: MonitorAccuracy | None
    #: The range it recorded (None: auto-ranging, found by the current).
    range_name: str | None
    #: The trace's voltage [V] and whether it was measured (else set, or given).
    voltage_v: float | None
    voltage_measured: bool
    sample_rate_hz: float | None
    driver: str
    #: The DUT timer's oscillator tolerance (relative), from the bench's ``[dut] clock_ppm``
    #: and ``clock_source``; None: not declared.
    dut_clock: Spec | None = None
    #: Where `range_name` came from, in the budget's words ("reported by the instrument ...",
    #: "the configured range"); "" with no range name.
    range_source: str = ""


@dataclass(frozen=True)
class RangeShare:
    """One current range's part of a figure's readings, from the spans' recorded occupancy
    (`IdleMeasured.current_ranges`, `WindowMeasured.current_ranges`). The figure is the mean of
    its spans' mean powers, so each span weighs the same: `fraction` is the mean over the spans
    of the part of each span's samples taken in this range, and `current_a` the mean over the
    spans of (samples in this range x their mean current) / the span's samples: the range's
    contribution to the figure's mean current (P = V x the sum of every range's `current_a`)."""

    name: str
    fraction: float
    current_a: float

    @property
    def mean_current_a(self) -> float:
        """The mean current of this range's readings [A]."""
        return self.current_a / self.fraction if self.fraction else 0.0


def monitor_of(events: Sequence[Event], bench: dict[str, Any]) -> Monitor:
    """The monitor's declaration, range, voltage and rate as the run recorded them."""
    info = next((e.info for e in events
                 if isinstance(e, InstrumentInfo) and e.role == "emon"), {})
    accuracy = None
    if isinstance(info.get("accuracy"), dict):
        try:
            accuracy = MonitorAccuracy.from_json(info["accuracy"])
        except (KeyError, TypeError, ValueError):
            accuracy = None  # a damaged declaration declares nothing
    found = info.get("trace_voltage")
    trace_voltage: dict[str, Any] = found if isinstance(found, dict) else {}
    measured = bool(trace_voltage.get("measured", False))
    emon = bench.get("emon", {}) if isinstance(bench.get("emon"), dict) else {}
    voltage = (trace_voltage.get("set_v") if not measured else None) \
        or info.get("voltage_v") or emon.get("supply_voltage_v")
    rate = next((e.sample_rate_hz for e in reversed(events)
                 if isinstance(e, TraceSaved) and e.sample_rate_hz > 0), None) \
        or info.get("sample_rate_hz") or emon.get("sample_rate_hz")
    rng = info.get("current_range")
    fixed = rng not in (None, "", "auto")
    range_source = (str(info.get("current_range_source") or "the configured range") if fixed
                    else "")
    dut = bench.get("dut", {}) if isinstance(bench.get("dut"), dict) else {}
    dut_clock = None
    try:
        ppm = float(dut.get("clock_ppm") or 0.0)
        if ppm > 0 and str(dut.get("clock_source") or "").strip():
            dut_clock = Spec(ppm / 1e6, 0.0, f"lab: {str(dut['clock_source']).strip()}")
    except (TypeError, ValueError):
        dut_clock = None  # a damaged snapshot declares nothing
    return Monitor(
        accuracy=accuracy,
        range_name=str(rng) if fixed else None,
        range_source=range_source,
        voltage_v=float(voltage) if voltage else None,
        voltage_measured=measured,
        sample_rate_hz=float(rate) if rate else None,
        driver=str(info.get("driver") or emon.get("driver") or "energy monitor"),
        dut_clock=dut_clock,
    )


def asc_budgets(events: Sequence[Event], summary: dict[str, Any], bench: dict[str, Any]
                ) -> dict[str, Budget]:
    """The budget of each ASC figure the summary has, by the summary's key."""
    mon = monitor_of(events, bench)
    idles = [e for e in events if isinstance(e, IdleMeasured)]
    windows = [e for e in events if isinstance(e, WindowMeasured)]
    runs = [e for e in events if isinstance(e, LatencyRun)]
    samples = [e for e in events if isinstance(e, SampleClassified)
               and e.execution_time_s is not None]
    out: dict[str, Budget] = {}

    idle_terms: list[Component] = []
    if "idle_power_w" in summary:
        p_i = float(summary["idle_power_w"])
        idle_terms = [_idle_repeatability(idles),
                      *_power_terms(mon, p_i, "idle", range_shares(idles))]
        out["idle_power_w"] = combine("idle power", p_i, "W", idle_terms)

    active_terms: list[Component] = []
    if "active_power_w" in summary:
        p_a = float(summary["active_power_w"])
        active_terms = [type_a("active power: repeatability", [w.mean_power_w for w in windows],
                               source=f"the {len(windows)} energy windows"),
                        *_power_terms(mon, p_a, "active", range_shares(windows))]
        out["active_power_w"] = combine("active power", p_a, "W", active_terms)
        out["energy_per_inference_j"] = _energy_budget(mon, summary, windows, active_terms)

    time_terms = _time_terms(mon, summary, runs, samples)
    if "dynamic_power_w" in summary:
        dynamic = float(summary["dynamic_power_w"])
        # idle enters with a negative sensitivity: a correlated group's terms then cancel.
        dyn_terms = active_terms + [c.scaled(-1.0) for c in idle_terms]
        out["dynamic_power_w"] = combine("dynamic power", dynamic, "W", dyn_terms)
        if "dynamic_energy_per_inference_j" in summary and time_terms is not None:
            t = float(summary["execution_time_mean_s"])
            out["dynamic_energy_per_inference_j"] = combine(
                "dynamic energy per inference", float(summary["dynamic_energy_per_inference_j"]),
                "J", [c.scaled(t, f"{c.name} (x execution time)") for c in dyn_terms]
                + [c.scaled(dynamic, f"{c.name} (x dynamic power)") for c in time_terms])

    if "inferences_per_s" in summary and runs:
        out["inferences_per_s"] = _latency_budget(mon, summary, runs)
    if "execution_time_mean_s" in summary and time_terms is not None:
        out["execution_time_mean_s"] = combine(
            "execution time per inference", float(summary["execution_time_mean_s"]), "s",
            time_terms)
    return {key: out[key] for key in FIGURES if key in out}


def _idle_repeatability(idles: Sequence[IdleMeasured]) -> Component:
    """Type A of the idle power: from the spans when there are several, else from the one
    span's equal sub-spans (batch means, `asc.IDLE_SUB_SPANS`). The batch means see the span's
    own fluctuation; they assume it outlasts its correlation time (10 sub-spans of a 10 s span
    are 1 s each) and cannot see a drift that is slower than the span."""
    name = "idle power: repeatability"
    if len(idles) == 1 and len(idles[0].sub_span_powers_w) >= 2:
        parts = [float(p) for p in idles[0].sub_span_powers_w]
        return type_a(name, parts, source=f"the idle span's {len(parts)} near-equal sub-spans "
                      "(batch means of one span)")
    return type_a(name, [i.power_w for i in idles], source=f"the {len(idles)} idle span(s)")


# -- power ------------------------------------------------------------------------------------
def range_shares(spans: Sequence[IdleMeasured | WindowMeasured]) -> list[RangeShare] | None:
    """Each recorded range's share of the spans' readings (`RangeShare`), largest first; None
    when any span has no record of its ranges (a monitor that does not tell them, an older
    run) or a record that does not add up."""
    if not spans:
        return None
    fraction: dict[str, float] = {}
    current: dict[str, float] = {}
    for span in spans:
        record = span.current_ranges
        try:
            counts = {str(k): int(v["samples"]) for k, v in record.items()}
            means = {str(k): float(v["mean_current_a"]) for k, v in record.items()}
        except (AttributeError, KeyError, TypeError, ValueError):
            return None  # a damaged record tells nothing
        total = sum(counts.values())
        if not record or total <= 0 or not all(math.isfinite(m) for m in means.values()):
            return None
        for name, count in counts.items():
            fraction[name] = fraction.get(name, 0.0) + count / total / len(spans)
            current[name] = current.get(name, 0.0) + count * means[name] / total / len(spans)
    return sorted((RangeShare(name, fraction[name], current[name]) for name in fraction),
                  key=lambda r: -r.fraction)


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3g} %"


def _occupancy_text(shares: Sequence[RangeShare]) -> str:
    """'97 % of samples in 18 mA, 3 % in 180 mA'."""
    parts = [f"{_percent(r.fraction)} in {r.name}" for r in shares]
    parts[0] = parts[0].replace(" in ", " of samples in ", 1)
    return ", ".join(parts)


def _power_terms(mon: Monitor, power: float, what: str,
                 shares: Sequence[RangeShare] | None = None) -> list[Component]:
    """Type B terms of a mean power P = I·V read by the monitor: the current's gain and offset
    in its range (at I = P/V; with `shares`, the range each reading was recorded in: each
    range's figure for its share), and the voltage (∂P/∂V = I)."""
    if mon.accuracy is None:
        return [unknown(f"{what} power: instrument accuracy", source=NO_DECLARATION)]
    if mon.voltage_v is None or mon.voltage_v <= 0:
        return [unknown(f"{what} power: current and voltage accuracy",
                        source="the trace's supply voltage is not recorded, so the current a "
                               "power stands for is not known")]
    volts = mon.voltage_v
    current = power / volts
    if shares:
        terms = _recorded_range_terms(mon, shares, volts, what)
    else:
        terms = _current_terms(mon, current, volts, what)
    terms.append(_voltage_term(mon, current, volts, what))
    return terms


def _current_terms(mon: Monitor, current: float, volts: float, what: str) -> list[Component]:
    """The current's terms with every reading in one range: the configured (or reported)
    one, else the smallest declared range whose full scale holds the mean current."""
    acc = mon.accuracy
    assert acc is not None
    label = f"{what} power: {mon.driver} current"
    if isinstance(acc.current_ranges, NotPublished):
        return [unknown(label, source=acc.current_ranges.message)]
    try:
        rng = acc.range_for(current, mon.range_name)
    except KeyError as exc:
        return [unknown(label, source=f"instrument accuracy not published: {exc.args[0]}")]
    if rng is None:
        figure = acc.current_half_width(current)  # the NotPublished saying why
        message = figure.message if isinstance(figure, NotPublished) else "range not known"
        return [unknown(label, source=message)]
    if isinstance(rng.current, NotPublished):
        return [unknown(f"{label} ({rng.name} range)", source=rng.current.message)]
    where = (f"range: {mon.range_source}" if mon.range_name is not None
             else "range: inferred from the mean current (the smallest declared range whose "
                  "full scale holds it; the instrument did not record it)")
    return _range_terms(mon, rng.name, rng.current, 1.0, current, volts, what,
                        f"at {current:.4g} A in the {rng.name} range ({where})")


def _recorded_range_terms(mon: Monitor, shares: Sequence[RangeShare], volts: float,
                          what: str) -> list[Component]:
    """The current's terms from the range each reading was recorded in: per range r, with a
    fraction f_r of the readings at a mean current I_r, the gain term g_r·f_r·|I_r|·V (one
    instrument's gain in one range: correlated) and the offset term f_r·o_r·V; P = V·Σ f_r·I_r.
    A range with no published figure (or one the declaration lacks, "off") is unknown."""
    acc = mon.accuracy
    assert acc is not None
    label = f"{what} power: {mon.driver} current"
    said = f"recorded per sample by the instrument: {_occupancy_text(shares)}"
    if isinstance(acc.current_ranges, NotPublished):
        return [unknown(label, source=f"{acc.current_ranges.message} ({said})")]
    terms: list[Component] = []
    for share in shares:
        try:
            rng = acc.range_for(share.mean_current_a, share.name)
        except KeyError as exc:
            terms.append(unknown(f"{label} ({share.name} range)", source=(
                f"instrument accuracy not published: {exc.args[0]} ({said})")))
            continue
        assert rng is not None  # found by name
        if isinstance(rng.current, NotPublished):
            terms.append(unknown(f"{label} ({share.name} range)",
                                 source=f"{rng.current.message} ({said})"))
            continue
        terms += _range_terms(
            mon, share.name, rng.current, share.fraction, share.mean_current_a, volts, what,
            f"at {share.mean_current_a:.4g} A mean in the {share.name} range, "
            f"{_percent(share.fraction)} of the readings ({said})")
    return terms


def _range_terms(mon: Monitor, name: str, spec: Spec, fraction: float, current: float,
                 volts: float, what: str, at: str) -> list[Component]:
    """Gain and offset terms of the part `fraction` of a mean power read in range `name` at
    a mean current `current`: g·f·|I|·V (correlated per instrument and range) and f·o·V."""
    terms = [rectangular(
        f"{what} power: current gain ({name} range)", spec.gain * fraction * abs(current) * volts,
        source=f"{spec.source}: ±{spec.gain:.3g} of reading {at}, rectangular; the same error "
               "for every reading in this range (correlated)",
        group=f"{mon.driver} current gain, {name} range")]
    if spec.offset > 0:
        terms.append(rectangular(
            f"{what} power: current offset ({name} range)", spec.offset * fraction * volts,
            source=f"{spec.source}: ±{spec.offset:.3g} A {at}, rectangular"))
    return terms


def _voltage_term(mon: Monitor, current: float, volts: float, what: str) -> Component:
    acc = mon.accuracy
    assert acc is not None
    name = f"{what} power: supply voltage"
    group = "supply voltage"  # the same supply for idle and active (module docstring)
    if mon.voltage_measured:
        figure: Spec | NotPublished | None = acc.voltage
        how = "measured"
    elif acc.voltage_set is not None:
        figure, how = acc.voltage_set, "set by the monitor"
    else:
        return unknown(name, group=group, source=(
            f"instrument accuracy not published: the supply is the bench's ({volts:g} V, "
            "[emon] supply_voltage_v), not the monitor's; no accuracy is declared for it"))
    if figure is None:
        return unknown(name, group=group, source=f"the {mon.driver} declares no voltage figure")
    if isinstance(figure, NotPublished):
        return unknown(name, group=group, source=figure.message)
    half = figure.half_width(volts)
    return rectangular(name, half * abs(current), group=group, source=(
        f"{figure.source}: ±{half:.3g} V at {volts:g} V ({how}), times I = {current:.4g} A, "
        "rectangular; the same supply for idle and active (correlated)"))


# -- energy -----------------------------------------------------------------------------------
def _energy_budget(mon: Monitor, summary: dict[str, Any], windows: Sequence[WindowMeasured],
                   power_terms: Sequence[Component]) -> Budget:
    """Energy per inference E = P·T/N: the power's Type B terms times T/N, the clock and the
    edges on T, Type A over the windows."""
    energy = float(summary["energy_per_inference_j"])
    power = float(summary["active_power_w"])
    duration = math.fsum(w.duration_s for w in windows) / len(windows)
    per_watt = energy / power if power else 0.0  # T/N [s]
    terms: list[Component] = [type_a(
        "energy per inference: repeatability", [w.energy_per_inference_j for w in windows],
        source=f"the {len(windows)} energy windows (standard deviation of the mean, taken for "
               "their median)")]
    terms += [c.scaled(per_watt, c.name.replace("active power", "energy per inference"))
              for c in power_terms if c.type == "B"]
    if any(w.end_sample > w.start_sample for w in windows):  # timed by the monitor's samples
        terms += _sample_clock_terms(mon, duration, energy / duration if duration else 0.0,
                                     "energy per inference", "window")
    else:  # a window timed by the DUT (power from its rails): the DUT's timer on T
        terms += _dut_timer_terms(mon, energy / duration if duration else 0.0, 1,
                                  "energy per inference", None, duration)
    return combine("energy per inference", energy, "J", terms)


def _sample_clock_terms(mon: Monitor, duration: float, per_second: float, what: str,
                        span: str) -> list[Component]:
    """A duration T counted on the monitor's sample clock, carried into a figure by
    `per_second` (∂figure/∂T): the clock's tolerance, and ± one sample at each edge."""
    terms: list[Component] = []
    acc = mon.accuracy
    clock = (NotPublished("the sample clock", NO_DECLARATION) if acc is None
             else acc.clock_half_width(duration))  # a NotPublished's message is not used
    if isinstance(clock, NotPublished) or acc is None or not isinstance(acc.clock, Spec):
        terms.append(unknown(f"{what}: {mon.driver} sample clock",
                             source=clock.message if isinstance(clock, NotPublished)
                             else NO_DECLARATION))
    else:
        terms.append(rectangular(
            f"{what}: {mon.driver} sample clock", clock, sensitivity=per_second,
            source=f"{acc.clock.source}: ±{clock:.3g} s on a {duration:.4g} s {span}, "
                   "rectangular"))
    if mon.sample_rate_hz:
        for edge in ("start", "end"):
            terms.append(rectangular(
                f"{what}: {span} {edge} edge", 1.0 / mon.sample_rate_hz,
                sensitivity=per_second,
                source=f"the {span}'s {edge} edge placed within ± one sample (1/fs, fs = "
                       f"{mon.sample_rate_hz:g} Hz), rectangular"))
    else:
        terms.append(unknown(f"{what}: {span} edges",
                             source="the sample rate is not recorded"))
    return terms


# -- time -------------------------------------------------------------------------------------
def _dut_timer_terms(mon: Monitor, per_second: float, laps: int, what: str,
                     resolution_s: float | None, duration_s: float) -> list[Component]:
    """A time `duration_s` read on the DUT's lap counter (`laps` inferences per reading),
    carried by `per_second`: its resolution, and its oscillator (the bench's ``[dut]
    clock_ppm``, else unknown)."""
    res = resolution_s or DUT_TIMER_RESOLUTION_S
    said = ("the m-lap-resolution-us the DUT reported" if resolution_s
            else "the lap counter's whole microseconds (m-lap-us)")
    return [
        rectangular(f"{what}: DUT timer resolution", res / laps, sensitivity=per_second,
                    source=f"± {res * 1e6:g} us per reading ({said})"
                           + (f", over {laps} inferences" if laps > 1 else "")
                           + ", rectangular"),
        _dut_clock_term(mon, per_second, what, duration_s),
    ]


def _dut_clock_term(mon: Monitor, per_second: float, what: str, duration_s: float
                    ) -> Component:
    name = f"{what}: DUT timer clock"
    if mon.dut_clock is None:
        return unknown(name, source=DUT_CLOCK_UNKNOWN)
    half = mon.dut_clock.half_width(duration_s)
    return rectangular(name, half, sensitivity=per_second, source=(
        f"{mon.dut_clock.source}: ±{mon.dut_clock.gain * 1e6:g} ppm, ±{half:.3g} s on "
        f"{duration_s:.4g} s ([dut] clock_ppm), rectangular"))


def _time_terms(mon: Monitor, summary: dict[str, Any], runs: Sequence[LatencyRun],
                samples: Sequence[SampleClassified]) -> list[Component] | None:
    """The execution time's terms (s per inference): Type A over what it is the mean of, and
    the timer's Type B terms; None without an execution time."""
    if "execution_time_mean_s" not in summary:
        return None
    mean = float(summary["execution_time_mean_s"])
    stderr = float(summary.get("execution_time_stderr_s") or 0.0)
    what = "execution time"
    if samples:
        terms = [type_a_from_stderr(f"{what}: repeatability", stderr, len(samples),
                                    source=f"the {len(samples)} test samples")]
        timers = {s.timer for s in samples}
        laps = 1
        resolution = max((s.dut_resolution_s for s in samples
                          if s.dut_resolution_s is not None), default=None)
    else:
        terms = [type_a_from_stderr(f"{what}: repeatability", stderr, len(runs),
                                    source=f"the {len(runs)} timed runs")]
        timers = {r.timer for r in runs}
        laps = min((r.iterations for r in runs), default=1) or 1
        resolution = max((r.dut_resolution_s for r in runs
                          if r.dut_resolution_s is not None), default=None)
    return terms + _timer_terms(mon, timers, mean, laps, resolution, what)


def _timer_terms(mon: Monitor, timers: set[str], per_inference_s: float, laps: int,
                 resolution_s: float | None, what: str) -> list[Component]:
    """The Type B terms of a time per inference taken `laps` inferences at a time by the
    timer(s) named (s per inference)."""
    if timers == {"dut"}:
        return _dut_timer_terms(mon, 1.0, laps, what, resolution_s, per_inference_s)
    if timers == {"emon"}:
        return [c.scaled(1.0 / laps) for c in
                _sample_clock_terms(mon, per_inference_s * laps, 1.0, what, "window")]
    return [unknown(f"{what}: timer", source=f"timed by {sorted(timers) or 'no'} timer(s): "
                                             "no single timer's terms apply")]


def _latency_budget(mon: Monitor, summary: dict[str, Any], runs: Sequence[LatencyRun]
                    ) -> Budget:
    """Inferences per second (the median of the runs): Type A over the runs' rates; the
    timer's terms on the time per inference, carried by ∂(1/t)/∂t = −1/t² (magnitude)."""
    ips = float(summary["inferences_per_s"])
    per = math.fsum(r.time_per_inference_s for r in runs) / len(runs)
    laps = min(r.iterations for r in runs) or 1
    resolution = max((r.dut_resolution_s for r in runs if r.dut_resolution_s is not None),
                     default=None)
    terms = [type_a("inferences per second: repeatability", [r.inferences_per_s for r in runs],
                    source=f"the {len(runs)} timed runs (standard deviation of the mean, taken "
                           "for their median)")]
    sensitivity = ips / per if per else 0.0
    terms += [c.scaled(sensitivity) for c in
              _timer_terms(mon, {r.timer for r in runs}, per, laps, resolution,
                           "inferences per second")]
    return combine("inferences per second", ips, "1/s", terms)


def budgets_json(budgets: dict[str, Budget]) -> dict[str, Any]:
    """The summary's ``uncertainty``: each budget's JSON by the figure's key."""
    return {key: b.to_json() for key, b in budgets.items()}
