"""Typed events that procedures emit, and the bus that hands them to subscribers.

A procedure never prints and never touches files: it publishes events. The run store, the
console view, and later the GUI and MQTT each subscribe to the same stream.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

_KINDS: dict[str, type[Event]] = {}


@dataclass(frozen=True)
class Event:
    """Base class: `kind` names the event in events.jsonl."""

    kind: ClassVar[str] = "event"
    #: True for display-only streams (live power) that the run store does not keep.
    transient: ClassVar[bool] = False
    #: Host wall-clock time the event was published (metadata, never a measurement).
    at: float = field(default_factory=time.time, kw_only=True)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _KINDS[cls.kind] = cls

    def to_record(self) -> dict[str, Any]:
        """Plain JSON-able data, tagged with the event kind."""
        return {"event": self.kind, **dataclasses.asdict(self)}

    @staticmethod
    def from_record(record: dict[str, Any]) -> Event:
        """Rebuild an event from `to_record()` output; unknown kinds become `UnknownEvent`."""
        data = dict(record)
        cls = _KINDS.get(data.pop("event", ""))
        if cls is None:
            return UnknownEvent(record=record)
        names, plain = _field_names(cls)
        if plain and data.keys() == names:
            # The usual record, every field and nothing else: what `cls(**data)` makes, without
            # the frozen __init__'s object.__setattr__ per field (~half of reading a run's
            # events). Only for classes whose __init__ does nothing more (`_field_names`).
            event = object.__new__(cls)
            event.__dict__.update(data)
            return event
        if names.issuperset(data):  # every key a field, nothing to drop
            return cls(**data)
        return cls(**{k: v for k, v in data.items() if k in names})


_FIELD_NAMES: dict[type[Event], tuple[frozenset[str], bool]] = {}


def _field_names(cls: type[Event]) -> tuple[frozenset[str], bool]:
    """The names of an event class's fields, and whether its __init__ only stores them (no
    __post_init__, every field an init field, no __slots__); looked up once per class."""
    known = _FIELD_NAMES.get(cls)
    if known is None:
        fields = dataclasses.fields(cls)
        plain = (not hasattr(cls, "__post_init__") and all(f.init for f in fields)
                 and "__slots__" not in vars(cls) and "__dict__" in dir(cls))
        known = _FIELD_NAMES[cls] = (frozenset(f.name for f in fields), plain)
    return known


@dataclass(frozen=True)
class LedgerAppended(Event):
    """The run store appended the run's last entry to its runs folder's ledger: the new head
    (`rig.run.ledger`). Not stored in the run (the ledger holds it)."""

    kind: ClassVar[str] = "ledger_appended"
    transient: ClassVar[bool] = True
    seq: int = 0
    digest: str = ""
    run: str = ""


@dataclass(frozen=True)
class UnknownEvent(Event):
    """A record this version does not know (written by a newer rig)."""

    kind: ClassVar[str] = "unknown"
    record: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RunStarted(Event):
    """A run began; `manifest` is the snapshot the run store writes to manifest.json."""

    kind: ClassVar[str] = "run_started"
    run_id: str = ""
    procedure: str = ""
    device: str = ""
    simulated: bool = False
    manifest: dict[str, Any] = field(default_factory=dict)
    #: An emulated DUT's label ("emulated: QEMU mps2-an386, ..."); "" for hardware or a sim.
    emulated: str = ""


@dataclass(frozen=True)
class PhaseStarted(Event):
    """A phase of the procedure began (`total` steps, if known)."""

    kind: ClassVar[str] = "phase_started"
    phase: str = ""
    description: str = ""
    total: int | None = None


@dataclass(frozen=True)
class PhaseProgress(Event):
    """`done` of `total` steps of a phase are finished."""

    kind: ClassVar[str] = "phase_progress"
    phase: str = ""
    done: int = 0
    total: int | None = None


@dataclass(frozen=True)
class InstrumentInfo(Event):
    """What an instrument said about itself, and its settings."""

    kind: ClassVar[str] = "instrument_info"
    role: str = ""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TestSetLoaded(Event):
    """The test set the procedure sends through the DUT: its identity (`rig.datasets.testsets.
    test_set_digest`: description, samples, SHA-256 of inputs and labels), which the run store
    keeps as the manifest's `test_set`, so accuracy can be recounted against its labels."""

    kind: ClassVar[str] = "test_set"
    __test__: ClassVar[bool] = False  # pytest: not a test class
    test_set: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Note(Event):
    """Something the user should know (`level`: info or warning)."""

    kind: ClassVar[str] = "note"
    level: str = "info"
    text: str = ""


@dataclass(frozen=True)
class LatencyRun(Event):
    """One timed run of `iterations` inferences on one loaded input."""

    kind: ClassVar[str] = "latency_run"
    index: int = 0
    iterations: int = 0
    elapsed_s: float = 0.0
    time_per_inference_s: float = 0.0
    inferences_per_s: float = 0.0
    #: Which instrument timed it: "dut" (the DUT's µs timer) or "emon" (sample counts).
    timer: str = ""
    #: The same window by each clock [s], None where that clock did not see it: the DUT's lap
    #: counter (performance mode, or energy-mode firmware offering `elap`) and the energy
    #: monitor's sample count between the timestamp edges (energy mode).
    dut_elapsed_s: float | None = None
    emon_elapsed_s: float | None = None
    #: How finely the DUT's clock tells one inference's time [s], where the DUT says so (a Xylo
    #: HDK: the shim's poll of the board's readout, ``m-lap-resolution-us``); None otherwise.
    dut_resolution_s: float | None = None
    #: The numbers come from a simulation (virtual bench, simulated monitor or DUT).
    simulated: bool = False


@dataclass(frozen=True)
class IdleMeasured(Event):
    """Idle power over a span framed by two timestamp edges."""

    kind: ClassVar[str] = "idle_measured"
    start_sample: int = 0
    end_sample: int = 0
    duration_s: float = 0.0
    power_w: float = 0.0
    #: The span split into near-equal sub-spans (sample ids, `start_sample` to `end_sample`)
    #: and each one's mean power [W]: the batch means its repeatability (Type A) comes from.
    #: Empty for a span from the DUT's rails and for runs recorded before they were kept.
    sub_span_edges: tuple[int, ...] = ()
    sub_span_powers_w: tuple[float, ...] = ()
    #: How the span's samples spread over the current ranges, where the monitor told each
    #: sample's range: {range name: {"samples": n, "mean_current_a": I}} (the recorder's
    #: `range_occupancy`).
    #: Empty for a monitor that does not tell, and for runs recorded before it was kept.
    current_ranges: dict[str, dict[str, float]] = field(default_factory=dict)
    #: The numbers come from a simulation (virtual bench, simulated monitor or DUT).
    simulated: bool = False


@dataclass(frozen=True)
class WindowMeasured(Event):
    """Energy inside one GPIO window (a timed run seen by the energy monitor)."""

    kind: ClassVar[str] = "window_measured"
    index: int = 0
    iterations: int = 0
    start_sample: int = 0
    end_sample: int = 0
    start_s: float = 0.0
    end_s: float = 0.0
    duration_s: float = 0.0
    energy_j: float = 0.0
    mean_power_w: float = 0.0
    energy_per_inference_j: float = 0.0
    #: How the window's samples spread over the current ranges (as `IdleMeasured`'s).
    current_ranges: dict[str, dict[str, float]] = field(default_factory=dict)
    #: The numbers come from a simulation (virtual bench, simulated monitor or DUT).
    simulated: bool = False


@dataclass(frozen=True)
class SampleClassified(Event):
    """One test sample went through the DUT."""

    kind: ClassVar[str] = "sample_classified"
    index: int = 0
    label: int = 0
    predicted: int = 0
    correct: bool = False
    scores: list[float] = field(default_factory=list)
    #: The sample's execution time [s]: the DUT's timer when it reported one (µs resolution),
    #: else the energy monitor's window (energy mode without a lap counter).
    execution_time_s: float | None = None
    #: Which clock `execution_time_s` came from: "dut" or "emon" ("" in runs recorded before
    #: the rig said).
    timer: str = ""
    #: The same inference by each clock [s], None where that clock did not see it.
    dut_time_s: float | None = None
    emon_time_s: float | None = None
    #: How finely the DUT's clock told this inference's time [s], where the DUT says so (a Xylo
    #: HDK's ``m-lap-resolution-us``, as `LatencyRun.dut_resolution_s`); None otherwise.
    dut_resolution_s: float | None = None
    #: Pre-processing time on the hardware [s] when done outside the DUT's inference (Xylo's
    #: analog front end), reported apart from inference as the spec asks; else None.
    preprocess_s: float | None = None
    #: Host seconds the pre-processing simulation took (information only).
    preprocess_host_s: float | None = None
    #: The numbers come from a simulation (virtual bench, simulated monitor or DUT).
    simulated: bool = False


@dataclass(frozen=True)
class SampleFailed(Event):
    """A test sample went through the DUT but its result could not be verified (a CRC-32
    mismatch, twice): it is neither right nor wrong, and the run's `results verified` check
    names it."""

    kind: ClassVar[str] = "sample_failed"
    index: int = 0
    label: int = 0
    reason: str = ""


@dataclass(frozen=True)
class TraceSaved(Event):
    """The energy monitor's raw trace was written into the run folder."""

    kind: ClassVar[str] = "trace_saved"
    path: str = ""
    samples: int = 0
    sample_rate_hz: float = 0.0
    dropped: int = 0
    #: Samples a fixed current range clipped at its full scale (their energy reads low).
    clipped: int = 0


@dataclass(frozen=True)
class RunFinished(Event):
    """The run ended: `status` is complete, failed-checks, failed or interrupted."""

    kind: ClassVar[str] = "run_finished"
    status: str = "complete"
    summary: dict[str, Any] = field(default_factory=dict)
    error: str | None = None


@dataclass(frozen=True)
class TelemetryReport(Event):
    """What a telemetry subscriber (MQTT) delivered of this run, published just before
    RunFinished so the manifest records it: `dropped` messages never reached the broker,
    `pending` were still queued for it."""

    kind: ClassVar[str] = "telemetry"
    sink: str = ""
    #: Where it went (no password), e.g. the broker URL and rig name.
    target: dict[str, Any] = field(default_factory=dict)
    offered: int = 0
    published: int = 0
    dropped: int = 0
    pending: int = 0


Subscriber = Callable[[Event], None]


# -- QUBO ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuboPointMeasured(Event):
    """One fixed-timeout point: a workload solved for `timeout_s` by a SUT.

    `power_w` is None when power was not measured; `power_status` then says why (never 0.0).
    `improvements` are [t_s, cost] pairs by the SUT's clock; `tts` maps each gap threshold
    (as text) to {"latency_s", "energy_j", "cost"} or None when it was not reached. `load_s` is
    the SUT's load before the solve's clock started (None if not measured), never in `elapsed_s`.
    `energy_j` is the solve's energy (average power x `elapsed_s`, or the SUT's own figure), None
    without power; `power_source` names what measured the power ("rapl", "loihi-profiler", ...;
    "loihi-profiler (SIMULATED)" for the Loihi 2 shim's stand-in). `solver_cpu_s` is the CPU
    time a CPU SUT's solver got over `elapsed_s` (None for other SUTs): well under it, the host
    was loaded and the point understates the SUT.
    """

    kind: ClassVar[str] = "qubo_point"
    sut: str = ""
    nodes: int = 0
    density: float = 0.0
    seed: int = 0
    timeout_s: float = 0.0
    solver_seed: int = 0
    cost: int = 0
    target: int = 0
    target_method: str = ""
    gap: float = 0.0
    elapsed_s: float = 0.0
    timer: str = ""
    steps: int | None = None
    power_w: float | None = None
    power_status: str = ""
    improvements: list[list[float]] = field(default_factory=list)
    tts: dict[str, Any] = field(default_factory=dict)
    load_s: float | None = None
    energy_j: float | None = None
    power_source: str = ""
    solver_cpu_s: float | None = None


@dataclass(frozen=True)
class QuboMaxSizeMeasured(Event):
    """Maximum workload size at one density: the largest n that loaded and beat cost 0."""

    kind: ClassVar[str] = "qubo_max_size"
    sut: str = ""
    density: float = 0.0
    timeout_s: float = 0.0
    max_nodes: int | None = None
    stopped_by: str = ""
    tried: list[dict[str, Any]] = field(default_factory=list)


class EventBus:
    """Delivers each published event to every subscriber, in subscription order."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []

    def subscribe(self, subscriber: Subscriber) -> None:
        """Add a subscriber; it sees every event published from now on."""
        self._subscribers.append(subscriber)

    def publish(self, event: Event) -> None:
        """Hand `event` to every subscriber (the run store is subscribed first).

        Before a RunFinished, subscribers with a `closing_events()` method (telemetry) get
        to publish their own last events, so the run folder records them. One of those that
        a subscriber fails to take (the run store on a full disk: the telemetry report's
        manifest rewrite) keeps neither the RunFinished from the others nor the run from
        ending: its error is raised once the RunFinished has been handed on (a short soak's
        `rig serve` run read back incomplete, its run_finished never written)."""
        failure: Exception | None = None
        if isinstance(event, RunFinished):
            for subscriber in list(self._subscribers):
                closing = getattr(subscriber, "closing_events", None)
                if closing is not None:
                    for extra in closing():
                        try:
                            self._deliver(extra)
                        except Exception as exc:
                            failure = failure or exc
        self._deliver(event)
        if isinstance(event, RunFinished):
            # After it: what the run store did once the run was closed (its ledger entry), for
            # the other subscribers (telemetry publishes the ledger head).
            for subscriber in list(self._subscribers):
                finished = getattr(subscriber, "finished_events", None)
                if finished is not None:
                    for extra in finished():
                        self._deliver(extra)
        if failure is not None:
            raise failure

    def _deliver(self, event: Event) -> None:
        for subscriber in self._subscribers:
            subscriber(event)

    __call__ = publish


def instruments_simulated(events: list[Event]) -> bool:
    """Whether an instrument of the run said it is a simulator (its `InstrumentInfo`)."""
    return any(isinstance(e, InstrumentInfo) and e.info.get("simulated") for e in events)
