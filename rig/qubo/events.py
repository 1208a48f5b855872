"""QUBO events, in rig.run.events style: defining them registers their kinds for events.jsonl."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from rig.run.events import Event


@dataclass(frozen=True)
class QuboPointMeasured(Event):
    """One fixed-timeout point: a workload solved for `timeout_s` by a SUT.

    `power_w` is None when power was not measured; `power_status` then says why (never 0.0).
    `improvements` are [t_s, cost] pairs by the SUT's clock; `tts` maps each gap threshold
    (as text) to {"latency_s", "energy_j", "cost"} or None when it was not reached. `load_s` is
    the SUT's load before the solve's clock started (None if not measured), never in `elapsed_s`.
    `energy_j` is the solve's energy (average power x `elapsed_s`, or the SUT's own figure), None
    without power; `power_source` names what measured the power ("rapl", "loihi-profiler", ...;
    "loihi-profiler (SIMULATED)" for the Loihi 2 shim's stand-in).
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
