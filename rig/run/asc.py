"""Acoustic scene classification: latency, accuracy and energy, as NeuroBench ASC.md asks.

- Latency: `runs` timed runs on one loaded input, each at least `min_run_s` and
  `min_iterations`; inferences per second per run; the score is the median.
- Energy (energy-mode firmware with an energy monitor): the same runs are GPIO windows; energy
  per inference is the median over windows; idle power is measured over a span framed by two
  timestamp pulses while the DUT is configured and ready; dynamic = active - idle; dynamic energy
  per inference = dynamic power x mean execution time.
- Accuracy: every test sample through the DUT, top-1. Firmware offering `rcrc` sends each
  result with its CRC-32; a sample whose result fails it every time it is asked (the client asks
  again up to 8 times) is recorded failed, by name, and
  fails the `results verified` check (the other samples are kept); plain MLPerf Tiny firmware's
  results are unchecked and the summary says so.
- Execution time (ASC.md): mean and standard error over all test samples, each timed by the
  DUT as it went through; a run without test samples (performance or energy only) falls back
  to the timed runs and says so (`execution_time_source`).

Times come from the DUT's microsecond timer (performance mode, and energy-mode firmware that
offers `elap`) or from the energy monitor's sample counts between edges (energy mode), never from
the host clock. Where both clocks see a window, the `timer agreement` check compares them. The
procedure publishes events and returns the summary; it does not print or write files.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from drivers.dut.client import DutClient, GarbledReply, InferResult, LoadResult, ResultError
from drivers.dut.qemu import emulated_label
from drivers.errors import DeviceTimeout
from protocols.dut.codec import CAP_ELAP, CAP_RESULT_CRC, CAP_SIMTIME, Message, cmd_infer
from rig.bench.config import Bench
from rig.datasets.synthetic import CLASSES
from rig.datasets.testsets import TestSet, load_test_set, test_set_digest
from rig.errors import ConfigError, MeasurementFailed
from rig.run.asc_uncertainty import asc_budgets, budgets_json
from rig.run.events import (
    Event,
    IdleMeasured,
    InstrumentInfo,
    LatencyRun,
    Note,
    PhaseProgress,
    PhaseStarted,
    SampleClassified,
    SampleFailed,
    TestSetLoaded,
    TraceSaved,
    WindowMeasured,
)
from rig.run.recording import EmonRecorder
from rig.run.trace_deadline import ReplyDeadlinePassed, TraceDeadline
from rig.traces.analysis import mean_stderr, replicability
from rig.traces.analysis.timers import TIMER_TOLERANCE, timer_agreement
from rig.traces.analysis.uncertainty import beyond_bound
from rig.units import si

#: ASC.md: a simulated analog front end's spikes reach the SNN through a side channel; the
#: AFE itself must be measured on the chip with the audio played into its microphone.
AFE_POWER_NOTE = (
    "pre-processing here is the AFE simulator feeding spikes through a side channel; on real "
    "hardware the analog front end's time and power are measured with the dataset audio played "
    "over speakers into the device microphone (ASC.md)"
)

#: Extra length on top of `min_run_s` so a run stays above it despite calibration error.
RUN_MARGIN = 1.02

#: How many more times a timed run (or a sample's inference) is run when the DUT's reply to its
#: `infer` came back garbled where it cannot be asked again (an echo, a lap line of firmware
#: without `lapcrc`): the client never sends `infer` twice itself (issue 39).
RERUNS = 3

#: How long the rig waits for the DUT to finish an `infer`: this many times the time expected...
DEADLINE_FACTOR = 3.0
#: ... but never less than this [s] (command overhead, a slow UART, a busy host).
MIN_DEADLINE_S = 30.0
#: Seconds per inference assumed for the calibration run when the bench declares none (no
#: `[dut] inference_time_s`, no `[sim]`): 10 calibration inferences then get the 30 s floor.
FIRST_CALL_INFERENCE_S = 1.0

#: The idle span's repeatability (Type A) comes from this many equal sub-spans of it (batch
#: means, ν = 9): one span measured once tells no spread, and a second span would lengthen
#: every run. The sub-spans see the span's own fluctuation, not a drift across the session.
IDLE_SUB_SPANS = 10
#: Checkpoints of the running energy kept through the idle span, so that each sub-span
#: boundary lies within 1/IDLE_CHECKPOINTS of the span from an equal split.
IDLE_CHECKPOINTS = 200

#: Which parts of the method a run measures: "performance" the timed runs (latency), "energy"
#: idle power and the timed runs as energy windows (needs energy-mode firmware and a monitor),
#: "accuracy" the test set through the DUT, "all" everything.
SCOPES = ("all", "performance", "energy", "accuracy")


@dataclass(frozen=True)
class Timed:
    """One timed `infer`: what the instruments saw."""

    iterations: int
    elapsed_s: float
    timer: str
    results: np.ndarray
    window: tuple[int, int] | None = None
    #: Power [W] the DUT reported for the timed inferences (a Xylo HDK's rails), if any.
    rail_power_w: float | None = None
    #: The window by each clock [s]: the DUT's lap counter and the monitor's sample count.
    dut_s: float | None = None
    emon_s: float | None = None
    #: How finely the DUT's clock tells one inference's time [s] (``m-lap-resolution-us``).
    dut_resolution_s: float | None = None


class AscProcedure:
    """Runs the ASC method against a booted DUT (and an acquiring energy monitor, if any)."""

    def __init__(
        self,
        bench: Bench,
        dut: DutClient,
        recorder: EmonRecorder | None,
        publish: Callable[[Event], None],
        *,
        scope: str = "all",
        simulated: bool = False,
        on_calibrated: Callable[[float, LoadResult], Event | None] | None = None,
    ) -> None:
        if scope not in SCOPES:
            raise ConfigError(f"unknown ASC scope {scope!r}",
                              hint=f"choose one of {', '.join(SCOPES)}")
        self.scope = scope
        #: Whether the numbers come from a simulation: the bench's or a monitor's word, and
        #: the DUT's own (`simtime` in its caps) once it has answered.
        self.simulated = simulated
        self.bench = bench
        self.opts = bench.asc
        self.dut = dut
        self.recorder = recorder
        self.publish = publish
        # Each reply garbled on the line that the client asks again is said in the run's notes.
        dut.on_retry = lambda text: publish(Note(text=text))
        #: Called once the calibration has timed an inference (seconds each) and downloaded
        #: the first input (how): the run's trace is projected again from them (measure.py);
        #: what it returns is published.
        self.on_calibrated = on_calibrated
        self.energy_mode = dut.timestamp_mode == "energy"
        if self.energy_mode and recorder is None:
            raise MeasurementFailed(
                "the DUT firmware is in energy timestamp mode but the bench has no energy monitor",
                hint="add an [emon] to the bench, or use performance-mode firmware",
            )
        if scope == "energy" and not self.energy_mode:
            raise ConfigError(
                "an energy-only run needs energy timestamp mode, but the DUT firmware is in "
                f"{dut.timestamp_mode or 'an unknown'} mode",
                hint="flash energy-mode firmware, or measure performance or accuracy",
            )
        self._edges_used = recorder.edge_count if recorder else 0
        #: Timed runs run again because their reply came back garbled (`_infer_whole`).
        self.reruns = 0
        # Seconds per inference the reply deadlines assume, and where the figure came from:
        # the bench's declaration until the calibration run has measured it.
        if bench.dut.inference_time_s > 0:
            self._expected_s, self._expected_from = (bench.dut.inference_time_s,
                                                     "[dut] inference_time_s")
        elif bench.sim is not None:
            self._expected_s, self._expected_from = (bench.sim.inference_ms / 1e3,
                                                     "[sim] inference_ms")
        else:
            self._expected_s, self._expected_from = (
                FIRST_CALL_INFERENCE_S, "assumed: the bench declares no [dut] inference_time_s")

    # -- the method ---------------------------------------------------------------------------
    def run(self) -> None:
        """Identify, calibrate, measure idle, the timed runs, then accuracy; the run's notes
        end with what the DUT's line cost (replies asked again, timed runs re-run), if any."""
        try:
            self._run()
        finally:
            self._note_line_count()

    def _note_line_count(self) -> None:
        """One note counting the replies garbled on the DUT's line: asked again by the client
        (by command) and `infer` re-runs; nothing when the line was clean."""
        asked = getattr(getattr(self.dut, "stats", None), "asked_again", None) or {}
        parts = []
        if asked:
            each = ", ".join(f"{k} {v}" for k, v in sorted(asked.items()))
            parts.append(f"{sum(asked.values())} garbled replies asked again ({each})")
        if self.reruns:
            parts.append(f"{self.reruns} infer re-runs (replies garbled where they cannot be "
                         "asked again)")
        if parts:
            self.publish(Note(level="warning", text="DUT line: " + "; ".join(parts)))

    def _run(self) -> None:
        capabilities = self.dut.negotiate()  # plain MLPerf Tiny firmware: empty
        info = self.dut.identify()
        # A DUT whose lap counter is a simulator's time base is a simulator (XyloSim).
        dut_simulated = CAP_SIMTIME in capabilities
        self.simulated = self.simulated or dut_simulated
        self.publish(InstrumentInfo(role="dut", info={
            "name": info.name, "vendor": info.vendor, "profile": info.profile,
            "model": info.model, "timestamp_mode": self.dut.timestamp_mode,
            "capabilities": sorted(capabilities),
            "port": self.bench.dut.port, "baud": self.bench.dut.baud,
            "simulated": dut_simulated,
        }))
        if CAP_RESULT_CRC not in capabilities:
            self.publish(Note(level="warning", text=RESULTS_UNCHECKED))
        test = load_test_set(self.bench)
        # Its identity in the manifest (`test_set`): accuracy is recounted against its labels.
        self.publish(TestSetLoaded(test_set=test_set_digest(test)))
        self.publish(Note(text=f"test set: {test.description}"
                          + (f"; pre-processing: {test.preprocess_method}"
                             if test.preprocess_method else "")))
        if test.preprocess_method:
            self.publish(Note(text=AFE_POWER_NOTE))
        if self.scope != "accuracy":
            self._latency_and_energy(test)
        if self.scope in ("all", "accuracy"):
            self._accuracy(test)

    def _latency_and_energy(self, test: TestSet) -> None:
        """Calibrate, measure idle (energy), then the timed runs."""
        self.publish(PhaseStarted(phase="calibrate", description="time one short run", total=1))
        loaded = self.dut.load(test.inputs[0])
        how = {("binary", "crc"): "binary with CRC-32", ("hex", "crc"): "hex, checked by CRC-32",
               }.get((loaded.method, loaded.check), "hex, checked by read-back")
        self.publish(Note(text=f"inputs are downloaded {how} ({loaded.n_bytes} bytes each)"))
        host_start = time.monotonic()
        cal = self._timed(self.opts.calibration_iterations, 0, "the calibration run")
        host_s = time.monotonic() - host_start
        per_inference = cal.elapsed_s / cal.iterations
        iterations = max(
            self.opts.min_iterations, math.ceil(self.opts.min_run_s * RUN_MARGIN / per_inference)
        )
        # From now on the deadlines assume the measured time (the host's wait if longer: a
        # simulator slower than its own time base). Host time bounds a wait, it measures nothing.
        self._expected_s = max(per_inference, host_s / cal.iterations)
        self._expected_from = "calibration run"
        self.publish(PhaseProgress(phase="calibrate", done=1, total=1))
        self.publish(Note(text=f"calibration: {per_inference * 1e3:.4g} ms per inference "
                               f"({cal.timer} timer); {iterations} iterations per run; "
                               "reply deadline "
                               f"{self._deadline_s(iterations + self.opts.warmup):.4g} s per run"))
        if self.on_calibrated is not None:
            event = self.on_calibrated(per_inference, loaded)
            if event is not None:
                self.publish(event)

        if self.scope == "performance":
            self.publish(Note(text="performance only: idle power and energy are not measured"))
        elif self.energy_mode:
            self._measure_idle()
        elif self.bench.dut.kind == "xylo" and self.bench.dut.hdk:
            self._measure_rail_idle()
        elif self.bench.dut.kind == "xylo":
            self.publish(Note(level="warning", text="XyloSim has no power rails: power and "
                              "energy are unavailable (simulator)"))
        else:
            self.publish(Note(level="warning", text="performance-mode firmware: energy and "
                              "power are not measured (they need energy timestamp mode)"))

        self.publish(PhaseStarted(phase="runs", total=self.opts.runs,
                                  description=f"{self.opts.runs} runs x {iterations} inferences"))
        for index in range(self.opts.runs):
            t = self._timed(iterations, self.opts.warmup, f"timed run {index}")
            self.publish(LatencyRun(
                index=index, iterations=t.iterations, elapsed_s=t.elapsed_s,
                time_per_inference_s=t.elapsed_s / t.iterations,
                inferences_per_s=t.iterations / t.elapsed_s, timer=t.timer,
                dut_elapsed_s=t.dut_s, emon_elapsed_s=t.emon_s,
                dut_resolution_s=t.dut_resolution_s, simulated=self.simulated,
            ))
            if self.scope == "performance":
                pass  # the same runs, timed only: no energy asked for
            elif t.window is not None:
                self._publish_window(index, t, t.window)
            elif t.rail_power_w is not None:
                self._publish_rail_window(index, t, t.rail_power_w)
            self.publish(PhaseProgress(phase="runs", done=index + 1, total=self.opts.runs))

    def _accuracy(self, test: TestSet) -> None:
        """Every test sample through the DUT, one inference each."""
        self.publish(PhaseStarted(phase="accuracy", total=len(test),
                                  description=f"{len(test)} test samples through the DUT"))
        for index, (x, label) in enumerate(zip(test.inputs, test.labels, strict=True)):
            self.dut.load(x)
            try:
                t = self._timed(1, 0, f"sample {index}")
            except ResultError as exc:
                # The inference ran, its result is unknown: the sample fails, by name, and
                # the pass goes on (what was measured stays; the check fails the run).
                if self.energy_mode:
                    self._next_window()  # its two edges belong to this sample
                self.publish(SampleFailed(index=index, label=int(label), reason=exc.message))
                self.publish(Note(level="warning", text=f"sample {index} failed: "
                                  f"{exc.message}; it is not counted in the accuracy"))
                self.publish(PhaseProgress(phase="accuracy", done=index + 1, total=len(test)))
                continue
            scores = [float(s) for s in t.results]
            if len(scores) != len(CLASSES):
                raise MeasurementFailed(
                    f"the DUT returned {len(scores)} scores for sample {index}, expected "
                    f"{len(CLASSES)} ({', '.join(CLASSES)})",
                    hint="the firmware's model does not match the ASC task",
                )
            predicted = int(np.argmax(t.results))
            # The DUT's µs timer where it reported one: a monitor at 1 kHz would time a 12.5 ms
            # inference as 12 or 13 ms; the two are compared by the `timer agreement` check.
            timer, seconds = ("dut", t.dut_s) if t.dut_s is not None else (t.timer, t.elapsed_s)
            self.publish(SampleClassified(
                index=index, label=int(label), predicted=predicted,
                correct=predicted == int(label), scores=scores, execution_time_s=seconds,
                timer=timer, dut_time_s=t.dut_s, emon_time_s=t.emon_s,
                dut_resolution_s=t.dut_resolution_s,
                preprocess_s=_item(test.preprocess_s, index),
                preprocess_host_s=_item(test.preprocess_host_s, index),
                simulated=self.simulated,
            ))
            self.publish(PhaseProgress(phase="accuracy", done=index + 1, total=len(test)))

    # -- pieces -------------------------------------------------------------------------------
    def _timed(self, iterations: int, warmup: int, what: str) -> Timed:
        """One `infer`, timed by the DUT timer or by the energy monitor's edges; `what` names
        it in the notes (a re-run after a garbled reply, `_infer_whole`)."""
        if self.energy_mode:
            self._check_no_stray_edges()
        result = self._infer_whole(iterations, warmup, what)
        dut_s = None if result.elapsed_us is None else result.elapsed_us / 1e6
        if not self.energy_mode:
            if dut_s is None:
                raise MeasurementFailed(
                    "the DUT printed no m-lap-us timestamps in performance mode"
                )
            return Timed(iterations, dut_s, "dut", result.results,
                         rail_power_w=rail_power(result.messages), dut_s=dut_s,
                         dut_resolution_s=lap_resolution(result.messages))
        start, end = self._next_window()
        elapsed = (end - start) / self._emon.sample_rate
        # Energy-mode firmware offering `elap` also reports its lap counter: a second clock.
        return Timed(iterations, elapsed, "emon", result.results, (start, end),
                     dut_s=dut_s, emon_s=elapsed)

    @property
    def _emon(self) -> EmonRecorder:
        """The energy monitor's recorder, which energy mode has (the constructor checks)."""
        if self.recorder is None:
            raise MeasurementFailed("no energy monitor to measure with",
                                    hint="add an [emon] to the bench")
        return self.recorder

    def _deadline_s(self, inferences: int) -> float:
        """How long to wait for `inferences` inferences: max(30 s, 3x the expected time)."""
        return max(MIN_DEADLINE_S, DEADLINE_FACTOR * inferences * self._expected_s)

    def _infer_whole(self, iterations: int, warmup: int, what: str) -> InferResult:
        """`_infer`, run again (at most `RERUNS` more times) when the DUT ran it but its reply
        came back garbled where it cannot be asked again: in energy mode the garbled run's two
        timestamp edges are consumed first, and each re-run is said in the notes. A reply that
        does not show whether the DUT ran it cannot be re-run in energy mode (its edges would
        be taken for the next run's): the run ends naming it."""
        reasons: list[str] = []
        while True:
            try:
                return self._infer(iterations, warmup)
            except GarbledReply as exc:
                reasons.append(exc.reason)
                if self.energy_mode and not exc.ran:
                    raise MeasurementFailed(
                        f"{exc.message}: whether the DUT ran {what} (and pulsed its timestamp "
                        "line) cannot be told, so it is not run again", hint=exc.hint) from None
                if len(reasons) > RERUNS:
                    raise MeasurementFailed(
                        f"the DUT's reply to {exc.command!r} ({what}) came back garbled "
                        f"{len(reasons)} times, re-run after each: {'; '.join(reasons)}",
                        hint=exc.hint) from None
                if self.energy_mode:
                    self._next_window()  # its two edges belong to the garbled run
                self.reruns += 1
                self.publish(Note(text=f"{what} re-run: the DUT's reply to {exc.command!r} "
                                       f"came back garbled ({exc.reason}); nothing of it is "
                                       f"kept (re-run {len(reasons)} of at most {RERUNS})"))
                if self.energy_mode:
                    self._check_no_stray_edges()

    def _infer(self, iterations: int, warmup: int) -> InferResult:
        """`infer` with a deadline from the expected time; a lost reply ends the run with an
        error naming the missing line and what was expected. While the monitor records, the
        deadline is counted in its samples too (`TraceDeadline`): a hung DUT stops the trace
        one deadline of its own time on, not `speed` times that on a virtual bench."""
        expected = (iterations + warmup) * self._expected_s
        deadline_s = self._deadline_s(iterations + warmup)
        checkpoint = self.dut.checkpoint
        if self.recorder is not None:
            self.dut.checkpoint = TraceDeadline(
                self.recorder, deadline_s, cmd_infer(iterations, warmup), self.dut.name,
                start_edges=self._edges_used if self.energy_mode else None).wrap(checkpoint)
        try:
            return self.dut.infer(iterations, warmup, timeout_s=deadline_s)
        except (DeviceTimeout, ReplyDeadlinePassed) as exc:
            raise type(exc)(
                f"{exc.message} (expected {expected:.4g} s: {iterations + warmup} inferences "
                f"at {self._expected_s * 1e3:.4g} ms, {self._expected_from})",
                hint=exc.hint) from None
        finally:
            self.dut.checkpoint = checkpoint

    def _next_window(self) -> tuple[int, int]:
        """The next two falling edges: the start and end pulses of the run just done."""
        want = self._edges_used + 2
        edges = self._emon.wait_for_edges(want, timeout_s=30.0)
        start, end = edges[self._edges_used : want]
        self._edges_used = want
        return start, end

    def _check_no_stray_edges(self) -> None:
        extra = self._emon.edge_count - self._edges_used
        if extra:
            raise MeasurementFailed(
                f"{extra} unexpected falling edge(s) on the timestamp line",
                hint="check the GPIO wiring for noise and that only the DUT drives the line",
            )

    def _measure_idle(self) -> None:
        """Idle power between two timestamp pulses, the DUT configured, ready and untouched."""
        self._check_no_stray_edges()
        fs = self._emon.sample_rate
        self.publish(PhaseStarted(phase="idle", description=f"idle power over "
                                  f"{self.opts.idle_s:g} s", total=1))
        # Checkpoints of the running energy through the span, so it can be split into
        # IDLE_SUB_SPANS batch means (its repeatability); dropped once the span is measured.
        self._emon.keep_checkpoints(max(1, round(self.opts.idle_s * fs) // IDLE_CHECKPOINTS))
        self.dut.timestamp()
        start = self._emon.wait_for_edges(self._edges_used + 1, timeout_s=30.0)[-1]
        self._emon.wait_for_samples(start + round(self.opts.idle_s * fs),
                                       timeout_s=30.0 + 10.0 * self.opts.idle_s)
        self.dut.timestamp()
        end = self._emon.wait_for_edges(self._edges_used + 2, timeout_s=30.0)[-1]
        self._edges_used += 2
        power = self._emon.mean_power(start, end)
        self._require_finite(power, start, end, "idle span")
        bounds, powers = self._emon.span_powers(start, end, IDLE_SUB_SPANS)
        self._emon.keep_checkpoints(None)
        self._emon.annotate(start, "idle span start")
        self._emon.annotate(end, "idle span end")
        self.publish(IdleMeasured(start_sample=start, end_sample=end,
                                  duration_s=(end - start) / fs, power_w=power,
                                  sub_span_edges=tuple(bounds),
                                  sub_span_powers_w=tuple(powers),
                                  current_ranges=self._emon.range_occupancy(start, end),
                                  simulated=self.simulated))
        self.publish(PhaseProgress(phase="idle", done=1, total=1))

    def _measure_rail_idle(self) -> None:
        """Idle power from the DUT's own rails: configured, ready, fed no input (Xylo HDK)."""
        ms = round(self.opts.idle_s * 1000)
        self.publish(PhaseStarted(phase="idle", total=1,
                                  description=f"idle power from the rails over {ms} ms"))
        events = self.dut.command(f"idle {ms}", timeout_s=60.0 + 10 * self.opts.idle_s)
        power = rail_power(tuple(e.text for e in events if isinstance(e, Message)))
        if power is None:
            raise MeasurementFailed("the DUT reported no power rails for `idle`",
                                    hint="power from the rails needs a Xylo HDK")
        self.publish(IdleMeasured(duration_s=ms / 1000, power_w=power,
                                  simulated=self.simulated))
        self.publish(PhaseProgress(phase="idle", done=1, total=1))

    def _publish_rail_window(self, index: int, t: Timed, rail_power_w: float) -> None:
        """A timed run whose power came from the DUT's rails (`t.rail_power_w`, a stream of
        >= min_run_s)."""
        energy = rail_power_w * t.elapsed_s
        self.publish(WindowMeasured(
            index=index, iterations=t.iterations, duration_s=t.elapsed_s, energy_j=energy,
            mean_power_w=rail_power_w, energy_per_inference_j=energy / t.iterations,
            simulated=self.simulated,
        ))

    def _publish_window(self, index: int, t: Timed, window: tuple[int, int]) -> None:
        start, end = window  # t.window
        fs = self._emon.sample_rate
        power = self._emon.mean_power(start, end)
        self._require_finite(power, start, end, f"window {index}")
        energy = power * (end - start) / fs
        self._emon.annotate(start, f"run {index} start ({t.iterations} inferences)")
        self._emon.annotate(end, f"run {index} end: {energy / t.iterations * 1e6:.4g} uJ/inf")
        self.publish(WindowMeasured(
            index=index, iterations=t.iterations, start_sample=start, end_sample=end,
            start_s=start / fs, end_s=end / fs, duration_s=(end - start) / fs, energy_j=energy,
            mean_power_w=power, energy_per_inference_j=energy / t.iterations,
            current_ranges=self._emon.range_occupancy(start, end), simulated=self.simulated,
        ))

    def _require_finite(self, power: float, start: int, end: int, what: str) -> None:
        if not math.isfinite(power):
            gaps = self._emon.gaps_in(start, end)
            raise MeasurementFailed(
                f"{what} (samples {start}..{end}) has lost samples {gaps}",
                hint="the energy monitor dropped data; lower the sample rate or fix the USB link",
            )


# -- the summary: a pure function of the events, so `rig show` gets the same from a stored run ---
#: `execution_time_source`: which measurement the execution time is the mean of.
FROM_TEST_SET, FROM_TIMED_RUNS = "test_set", "timed_runs"
#: `timing` of a DUT whose lap counter is a simulator's time base (caps word `simtime`).
SIMULATED_XYLO_TIMING = "simulated: XyloSim timesteps x dt, not a measured execution time"
SIMULATED_TIMING = "simulated: the DUT simulator's time base, not a measured execution time"
#: `timing` of a DUT firmware run under QEMU (a `[qemu]` bench): its own timer on guest time.
EMULATED_TIMING = "{} (the firmware's own timer counts guest instructions; not a hardware figure)"
#: `results_check`: how the results the DUT sent were verified (caps word `rcrc`) or not.
RESULTS_CRC = ("CRC-32 on every result line (rcrc): a corrupted result is asked again (up to 8 "
               "times), then its sample fails")
RESULTS_UNCHECKED = ("results unchecked: the firmware does not offer rcrc (plain MLPerf Tiny), "
                     "so a result corrupted on the line would be taken as sent")
#: `timing` of a Xylo HDK: its lap counter adds up, per evolve, the host clock from the input
#: write to the shim's first sight of the last time step's readout (its own 1 ms poll, not
#: Rockpool's `inf_duration`, which cannot be under 0.1 s: firmware/xylo/shim.py).
HDK_TIMING = ("measured: the Xylo HDK's accelerated-time run, by the host clock from the input "
              "write to the last time step's readout (USB and samna included), polled by the "
              "shim")


def summarize(
    events: list[Event], *, bench: dict[str, Any] | None = None, scope: str = "all"
) -> dict[str, Any]:
    """The ASC figures and checks from a run's events (complete or not)."""
    asc = (bench or {}).get("asc", {})
    tolerance = float(asc.get("replicability_tolerance", 0.05))
    min_run_s = float(asc.get("min_run_s", 10.0))
    min_iterations = int(asc.get("min_iterations", 10))
    runs = [e for e in events if isinstance(e, LatencyRun)]
    windows = [e for e in events if isinstance(e, WindowMeasured)]
    idles = [e for e in events if isinstance(e, IdleMeasured)]
    samples = [e for e in events if isinstance(e, SampleClassified)]
    failed = [e for e in events if isinstance(e, SampleFailed)]
    traces = [e for e in events if isinstance(e, TraceSaved)]
    out: dict[str, Any] = {}
    checks: list[dict[str, Any]] = []

    if runs:
        ips = np.array([r.inferences_per_s for r in runs])
        per = np.array([r.time_per_inference_s for r in runs])
        mean, stderr = mean_stderr(per)
        ok, dev = replicability(ips, tolerance)
        out |= {
            "latency_runs": len(runs),
            "latency_timer": runs[0].timer,
            "inferences_per_s": float(np.median(ips)),
            # The runs' own time per inference, kept beside the test-set figure below.
            "latency_time_per_inference_mean_s": mean,
            "latency_time_per_inference_stderr_s": stderr,
            "latency_max_deviation": dev,
        }
        checks.append(_check("latency replicable", ok,
                             f"each run within {tolerance:.0%} of the mean (max {dev:.3%})"))
        short = [r.index for r in runs
                 if r.elapsed_s < min_run_s or r.iterations < min_iterations]
        checks.append(_check("run length", not short,
                             f"every run >= {min_run_s:g} s and >= {min_iterations} iterations"
                             + (f"; short runs: {short}" if short else "")))

    if samples:
        correct = sum(s.correct for s in samples)
        out |= {"samples": len(samples), "correct": correct, "accuracy": correct / len(samples)}
        pre = [s.preprocess_s for s in samples if s.preprocess_s is not None]
        if pre:  # reported apart from inference (ASC.md)
            mean, stderr = mean_stderr(np.array(pre))
            out |= {"preprocess_time_mean_s": mean, "preprocess_time_stderr_s": stderr,
                    "preprocess_time_source": FROM_TEST_SET,
                    "preprocess_time_samples": len(pre),
                    "preprocess_note": AFE_POWER_NOTE}
    out |= _execution_time(runs, samples, scope)
    out |= _results_check(events, failed, checks)

    if idles:
        out["idle_power_w"] = float(np.mean([i.power_w for i in idles]))
    if windows:
        epi = np.array([w.energy_per_inference_j for w in windows])
        active = float(np.mean([w.mean_power_w for w in windows]))
        ok, dev = replicability(epi, tolerance)
        out |= {
            "energy_windows": len(windows),
            "active_power_w": active,
            "energy_per_inference_j": float(np.median(epi)),
            "energy_max_deviation": dev,
        }
        checks.append(_check("energy replicable", ok,
                             f"each window within {tolerance:.0%} of the mean (max {dev:.3%})"))
        if idles and "execution_time_mean_s" in out:
            dynamic = active - out["idle_power_w"]
            out["dynamic_power_w"] = dynamic
            out["dynamic_energy_per_inference_j"] = dynamic * out["execution_time_mean_s"]
            out["dynamic_energy_source"] = ("dynamic_power_w x execution_time_mean_s ("
                                            + execution_time_source_text(out) + ")")
    if scope != "all":
        out["scope"] = scope
    if not windows:
        dut = (bench or {}).get("dut", {})
        out["power"] = (
            f"not measured ({'an' if scope == 'accuracy' else 'a'} {scope}-only run)"
            if scope in ("performance", "accuracy")
            else "unavailable (simulator): XyloSim has no power rails"
            if dut.get("kind") == "xylo" and not dut.get("hdk")
            else "unavailable: needs energy-mode firmware and an energy monitor"
        )
    timing = _timing(events, bench or {})
    if timing:
        out["timing"] = timing
    agreement = _timer_check(runs, samples, traces, bench or {})
    if agreement is not None:
        checks.append(agreement)
    if traces:
        dropped = sum(t.dropped for t in traces)
        out["dropped_samples"] = dropped
        checks.append(_check("no lost samples", dropped == 0, f"{dropped} samples dropped"))
        clipped = sum(t.clipped for t in traces)
        if clipped:  # only a fixed current range clips: no check where none was set
            out["clipped_samples"] = clipped
            checks.append(_check("no clipped samples", False,
                                 f"{clipped} samples at the fixed current range's full scale "
                                 "(their energy reads low): use a larger range or auto"))
    budgets = asc_budgets(events, out, bench or {})
    if budgets:  # the GUM budget of each figure (rig.run.asc_uncertainty)
        out["uncertainty"] = budgets_json(budgets)
    bound = asc.get("max_relative_uncertainty")
    if bound:  # 0 or absent: no bound set
        checks.append(_bound_check(list(budgets.values()), float(bound)))
    out["checks"] = checks
    return out


def _bound_check(budgets: list[Any], bound: float) -> dict[str, Any]:
    """`uncertainty within bound`: every figure's U/|value| <= `[procedure.asc]
    max_relative_uncertainty`; a figure whose budget is incomplete (a term not published)
    never passes. Not applicable (ok None) where the run has no figure with a budget."""
    if not budgets:
        return {"name": "uncertainty within bound", "ok": None,
                "detail": f"not applicable: no figure with an uncertainty budget (bound "
                          f"{bound:.3g})"}
    beyond = beyond_bound(budgets, bound)
    if beyond:
        return _check("uncertainty within bound", False,
                      f"{len(beyond)} of {len(budgets)} figures beyond U/|value| <= "
                      f"{bound:.3g} (95 %): " + "; ".join(beyond))
    return _check("uncertainty within bound", True,
                  f"all {len(budgets)} figures within U/|value| <= {bound:.3g} (95 %)")


def _execution_time(
    runs: list[LatencyRun], samples: list[SampleClassified], scope: str
) -> dict[str, Any]:
    """ASC.md's execution time: mean and standard error over every test sample; without test
    samples (a performance- or energy-only run), over the timed runs, and saying so."""
    timed = [s for s in samples if s.execution_time_s is not None]
    if timed:
        mean, stderr = mean_stderr(np.array([s.execution_time_s for s in timed]))
        out: dict[str, Any] = {
            "execution_time_mean_s": mean, "execution_time_stderr_s": stderr,
            "execution_time_source": FROM_TEST_SET, "execution_time_samples": len(timed),
        }
        timers = {s.timer for s in timed}
        if "" not in timers:  # runs recorded before the samples named their clock
            out["execution_time_timer"] = timers.pop() if len(timers) == 1 else "mixed"
        return out
    if not runs:
        return {}
    mean, stderr = mean_stderr(np.array([r.time_per_inference_s for r in runs]))
    why = (f"{'an' if scope == 'energy' else 'a'} {scope}-only run has no test samples"
           if scope in ("performance", "energy") else "no test sample was measured")
    return {
        "execution_time_mean_s": mean, "execution_time_stderr_s": stderr,
        "execution_time_source": FROM_TIMED_RUNS, "execution_time_runs": len(runs),
        "execution_time_timer": runs[0].timer,
        "execution_time_note": f"{why}: mean and standard error over the {len(runs)} timed "
                               "runs of one repeated input (ASC.md asks for the test set)",
    }


def execution_time_source_text(summary: dict[str, Any]) -> str:
    """Where `execution_time_mean_s` came from, in words: "test set, 40 samples"."""
    source = summary.get("execution_time_source")
    if source == FROM_TEST_SET:
        return f"test set, {summary.get('execution_time_samples')} samples"
    if source == FROM_TIMED_RUNS:
        return f"{summary.get('execution_time_runs')} timed runs: the run has no test samples"
    return "timed runs"  # a summary stored before the rig named the source


def _results_check(events: list[Event], failed: list[SampleFailed],
                   checks: list[dict[str, Any]]) -> dict[str, Any]:
    """`results_check` (CRC-32 or unchecked) and, where samples went through the DUT with
    `rcrc`, the `results verified` check naming every sample whose result failed it."""
    info = next((e.info for e in events if isinstance(e, InstrumentInfo) and e.role == "dut"),
                None)
    if info is None:
        return {}
    checked = CAP_RESULT_CRC in (info.get("capabilities") or [])
    out: dict[str, Any] = {"results_check": RESULTS_CRC if checked else RESULTS_UNCHECKED}
    if failed:
        names = ", ".join(f"sample {f.index}" for f in failed)
        out["samples_failed"] = len(failed)
        checks.append(_check("results verified", False,
                             f"{len(failed)} result(s) failed their CRC-32 each time asked, "
                             f"not counted "
                             f"in the accuracy: {names}"))
    elif checked and any(isinstance(e, SampleClassified) for e in events):
        checks.append(_check("results verified", True, "every result's CRC-32 matched"))
    return out


def _timing(events: list[Event], bench: dict[str, Any]) -> str | None:
    """What the DUT's times are when they are not an ordinary timer's: simulated, or samna's."""
    dut = bench.get("dut", {})
    qemu = bench.get("qemu")
    if qemu:
        return EMULATED_TIMING.format(emulated_label(qemu["machine"], qemu["icount_shift"]))
    caps = next((e.info.get("capabilities") or [] for e in events
                 if isinstance(e, InstrumentInfo) and e.role == "dut"), [])
    xylo = dut.get("kind") == "xylo"
    if CAP_SIMTIME in caps or (xylo and not dut.get("hdk")):
        return SIMULATED_XYLO_TIMING if xylo else SIMULATED_TIMING
    if xylo:
        # The test samples' own inferences too: the execution time is their mean.
        resolutions = [e.dut_resolution_s for e in events
                       if isinstance(e, LatencyRun | SampleClassified)
                       and e.dut_resolution_s is not None]
        if not resolutions:
            return HDK_TIMING + "; its resolution was not reported"
        return (HDK_TIMING + f"; each inference's time known to within "
                f"{max(resolutions) * 1e6:.0f} us (the poll's bracket; the shim refuses an "
                "inference no longer than that)")
    return None


def _clocks(timer: str, seconds: float | None, dut_s: float | None,
            emon_s: float | None) -> tuple[float | None, float | None]:
    """(DUT, monitor) durations of a window; events recorded before both were kept say only
    which clock timed them."""
    if dut_s is None and timer == "dut":
        dut_s = seconds
    if emon_s is None and timer == "emon":
        emon_s = seconds
    return dut_s, emon_s


def _timer_check(
    runs: list[LatencyRun], samples: list[SampleClassified], traces: list[TraceSaved],
    bench: dict[str, Any],
) -> dict[str, Any] | None:
    """`timer agreement`: the DUT's lap counter against the monitor's sample count, per window
    both saw; "not applicable" (ok None) where only one clock timed the windows."""
    windows = [(f"run {r.index}", *_clocks(r.timer, r.elapsed_s, r.dut_elapsed_s,
                                          r.emon_elapsed_s)) for r in runs]
    windows += [(f"sample {s.index}", *_clocks(s.timer, s.execution_time_s, s.dut_time_s,
                                              s.emon_time_s)) for s in samples]
    windows = [w for w in windows if w[1] is not None or w[2] is not None]
    if not windows:
        return None
    both = [w for w in windows if w[1] is not None and w[2] is not None]
    if not both:
        if any(w[2] is not None for w in windows):
            why = ("the firmware reports one clock only: in energy mode only the monitor's "
                   f"sample count times the windows (firmware offering '{CAP_ELAP}' in its caps "
                   "also prints its lap counter)")
        else:
            why = ("only the DUT's timer times the windows (no timestamp edges for an energy "
                   "monitor in performance mode)")
        return {"name": "timer agreement", "ok": None, "detail": f"not applicable: {why}"}
    rate = (traces[-1].sample_rate_hz if traces
            else float(bench.get("emon", {}).get("sample_rate_hz") or 0.0))
    result = timer_agreement(np.array([w[1] for w in both]), np.array([w[2] for w in both]),
                             sample_period_s=1.0 / rate if rate > 0 else 0.0)
    name, dut_s, emon_s = both[result.worst]
    allowed = f"{TIMER_TOLERANCE:.1%} + {si(result.resolution_s, 's')} (a tick of each clock)"
    worst = f"{name}: DUT timer {si(dut_s, 's', 7)}, monitor {si(emon_s, 's', 7)}"
    if result.ok:
        detail = (f"{result.windows} windows timed by both the DUT timer and the monitor agree "
                  f"within {allowed}; closest to the limit {worst} "
                  f"({result.worst_usage:.0%} of its allowance)")
    else:
        detail = (f"{result.failed} of {result.windows} windows disagree by more than "
                  f"{allowed}; worst {worst} ({result.worst_relative:+.3%}): a stretched "
                  "trace, a wrong sample rate or a DUT clock that is off")
    check = _check("timer agreement", result.ok, detail)
    check["worst"] = {"window": name, "dut_s": dut_s, "emon_s": emon_s,
                      "relative": result.worst_relative, "usage": result.worst_usage,
                      "resolution_s": result.resolution_s}
    return check


_RAIL = re.compile(r"^power-([a-z_]+)-uw-(\d+)$")


_LAP_RESOLUTION = re.compile(r"^lap-resolution-us-(\d+)$")


def lap_resolution(messages: tuple[str, ...]) -> float | None:
    """How finely the DUT timed each inference [s] (``m-lap-resolution-us-<n>``), or None."""
    found = [int(m.group(1)) for m in map(_LAP_RESOLUTION.match, messages) if m]
    return max(found) * 1e-6 if found else None


def rail_power(messages: tuple[str, ...]) -> float | None:
    """Total power [W] from ``m-power-<rail>-uw-<n>`` lines (a Xylo HDK's rails), or None."""
    rails = [int(m.group(2)) for m in map(_RAIL.match, messages) if m]
    return sum(rails) * 1e-6 if rails else None


def _item(values: np.ndarray | None, index: int) -> float | None:
    return None if values is None else float(values[index])


def checks_passed(summary: dict[str, Any]) -> bool:
    """True when no check in the summary failed; a check that does not apply (ok None) neither
    passes nor fails."""
    return all(c["ok"] is not False for c in summary.get("checks", []))


def _check(name: str, ok: bool, detail: str) -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}
