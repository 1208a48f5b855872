"""QUBO procedures (NeuroBench QUBO.md): fixed-timeout, time-to-solution, maximum workload size.

- Fixed-timeout (FT): after the graph is loaded, the SUT solves for a fixed timeout; the result
  is the BKS-gap of its best solution and the average power over the solve (averaged over the
  workload seeds by `average_over_seeds`).
- Time-to-solution (TTS): from the SUT's improvement timeline, the latency to reach gaps 0.1,
  0.05, 0.01 and the energy = average power since the start x latency; nothing where a
  threshold was not reached.
- Maximum workload size: the largest n along the workload pattern that loads and beats the
  trivial cost 0, at one density, stopping at the first failure.

Power comes from a `PowerMeter` (host counters), or from the SUT itself with each solve (the
Loihi 2 profiler: `SolvePower`); where there is none the results carry None and the reason
("power unavailable: ..."), never 0. Each point records its power source; the energy of a solve
is its average power x its elapsed time. Procedures publish events and return dicts; they print
nothing and write no files.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from drivers.emon.base import EnergyMonitor
from drivers.emon.host_power import NvmlMonitor, PowerUnavailable, RaplMonitor
from rig.errors import BENCH_ERRORS
from rig.qubo.suts import LOIHI_PROFILER, LOIHI_PROFILER_SIMULATED, QuboSut, SolveResult
from rig.qubo.workloads import WORKLOAD_SIZES, Workload, generate
from rig.qubo.workloads import gap as bks_gap
from rig.run.events import (
    Event,
    PhaseProgress,
    PhaseStarted,
    QuboMaxSizeMeasured,
    QuboPointMeasured,
)
from rig.run.recording import EmonRecorder

#: The BKS-gap thresholds of the TTS scenario.
TTS_THRESHOLDS = (0.1, 0.05, 0.01)
#: The FT scenario's timeouts [s].
FT_TIMEOUTS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
#: Host counter sample rate for a solve of `timeout_s`: about 20 samples, within the monitor's
#: limits.
_POWER_SAMPLES = 20.0


class TargetLike(Protocol):
    """What a procedure needs of a target (rig.qubo.targets.Target fits): read-only."""

    @property
    def cost(self) -> int: ...

    @property
    def method(self) -> str: ...


@dataclass(frozen=True)
class PowerReading:
    """Average power over a window, or None with the reason; `energy_j` where the instrument
    reports the window's energy itself (the Loihi 2 profiler)."""

    power_w: float | None
    status: str
    energy_j: float | None = None


class PowerMeter(Protocol):
    """Measures the average power of the SUT over one solve."""

    source: str

    def start(self, duration_s: float) -> None:
        """Start measuring a window expected to last `duration_s`."""

    def stop(self) -> PowerReading:
        """Stop; the average power over the window, or None and why."""

    def close(self) -> None:
        """Release the instrument."""


class NoPower:
    """A meter for a SUT whose power this host cannot measure: always None and `reason`."""

    def __init__(self, reason: str, source: str = "unavailable") -> None:
        self.reason = reason if reason.startswith("power unavailable") else (
            f"power unavailable: {reason}")
        self.source = source

    def start(self, duration_s: float) -> None:
        """Nothing to start."""

    def stop(self) -> PowerReading:
        """None, with the reason."""
        return PowerReading(None, self.reason)

    def close(self) -> None:
        """Nothing to release."""


class MonitorPower:
    """Average power from an energy monitor whose chunks carry power (host RAPL / NVML).

    Each solve gets a fresh `EmonRecorder`; the average is its overall mean power.
    """

    def __init__(self, monitor: EnergyMonitor, source: str) -> None:
        self.monitor = monitor
        self.source = source
        self._recorder: EmonRecorder | None = None

    def start(self, duration_s: float) -> None:
        """Configure a rate that gives about 20 samples in the window; start sampling."""
        rate = min(max(_POWER_SAMPLES / max(duration_s, 1e-9), 1.0), 1000.0)
        self.monitor.configure(1.0, rate)
        self._recorder = EmonRecorder(rate)
        self.monitor.start(self._recorder.on_chunk)

    def stop(self) -> PowerReading:
        """Stop sampling; the mean power, or None when no sample covered the window."""
        recorder, self._recorder = self._recorder, None
        try:
            self.monitor.stop()
        except PowerUnavailable as exc:
            return PowerReading(None, str(exc))  # why, and (in brackets) what to enable
        if recorder is None:
            return PowerReading(None, "power unavailable: the meter was not started")
        power = recorder.overall_mean_power()
        if not math.isfinite(power):
            return PowerReading(None, f"power unavailable: no {self.source} sample covered the "
                                      "solve (shorter than one sample period)")
        return PowerReading(power, f"measured ({self.source})")

    def close(self) -> None:
        """Close the monitor."""
        self.monitor.close()


class SolvePower:
    """Power the SUT measures itself and reports with each solve (Loihi 2's profiler, or the
    shim's stand-in for it: source "loihi-profiler (SIMULATED)").

    There is nothing to start or stop: `from_solve` reads the solve's result.
    """

    def __init__(self, source: str) -> None:
        self.source = source

    def start(self, duration_s: float) -> None:
        """Nothing to start: the SUT measures its own solve."""

    def stop(self) -> PowerReading:
        """No reading without a solve (see `from_solve`)."""
        return PowerReading(None, f"power unavailable: {self.source} reported nothing")

    def from_solve(self, result: SolveResult) -> PowerReading:
        """The average power and energy the SUT reported for `result`, or None and why."""
        if result.power_w is None:
            return PowerReading(None, f"power unavailable: the SUT sent no {self.source} "
                                      "reading with this solve (m-qpower-uw- missing)")
        return PowerReading(result.power_w, f"measured ({self.source})", result.energy_j)

    def close(self) -> None:
        """Nothing to release."""


def open_power_meter(source: str) -> PowerMeter:
    """The meter for a SUT's `power_source`; `NoPower` with the reason where there is none
    (the monitor's why and, in brackets, what to enable: "no /sys/class/powercap/intel-rapl
    (...) (enable RAPL passthrough ...)")."""
    try:
        if source == "rapl":
            return MonitorPower(RaplMonitor.open(voltage_limit_v=1.0), "rapl")
        if source == "nvml":
            return MonitorPower(NvmlMonitor.open(voltage_limit_v=1.0), "nvml")
    except PowerUnavailable as exc:
        return NoPower(str(exc), source)
    if source in (LOIHI_PROFILER, LOIHI_PROFILER_SIMULATED):
        return SolvePower(source)
    return NoPower(f"no power instrument for this SUT (power source {source!r})", source)


# -- fixed timeout -------------------------------------------------------------------------------
def fixed_timeout_point(
    sut: QuboSut,
    workload: Workload,
    timeout_s: float,
    solver_seed: int,
    target: TargetLike,
    power: PowerMeter | None,
) -> dict[str, Any]:
    """One FT point: load `workload` (unless the SUT holds it), solve, gap and power.

    The returned dict has the event fields of `QuboPointMeasured` (without `sut`'s events) plus
    `result` (the `SolveResult`).
    """
    if getattr(sut, "workload", None) is not workload:
        sut.load(workload)  # the clock of the point starts after this
    meter = power if power is not None else NoPower("no power meter was given")
    meter.start(timeout_s)
    try:
        result = sut.solve(timeout_s, solver_seed)
    finally:
        reading = meter.stop()
    if isinstance(meter, SolvePower):
        reading = meter.from_solve(result)
    energy = reading.energy_j
    if energy is None and reading.power_w is not None:
        energy = reading.power_w * float(result.elapsed_s)  # average power x solve time
    target_cost = int(target.cost)
    return {
        "sut": sut.name,
        "nodes": workload.nodes,
        "density": workload.density,
        "seed": workload.seed,
        "timeout_s": float(timeout_s),
        "solver_seed": int(solver_seed),
        "cost": int(result.best_cost),
        "target": target_cost,
        "target_method": str(target.method),
        "gap": bks_gap(result.best_cost, target_cost),
        "elapsed_s": float(result.elapsed_s),
        "timer": result.timer,
        "steps": result.steps,
        "power_w": reading.power_w,
        "power_status": reading.status,
        "energy_j": energy,
        "power_source": getattr(meter, "source", "unavailable"),
        "improvements": [[float(t), int(c)] for t, c in result.improvements],
        "tts": time_to_solution(result, target_cost, power_w=reading.power_w),
        "load_s": None if result.load_s is None else float(result.load_s),
        "solver_cpu_s": None if result.cpu_s is None else float(result.cpu_s),
        "result": result,
    }


def time_to_solution(
    result: SolveResult,
    target: int,
    thresholds: Sequence[float] = TTS_THRESHOLDS,
    power_w: float | None = None,
) -> dict[str, dict[str, Any] | None]:
    """Latency (and energy, if `power_w`) to reach each gap threshold; None if not reached.

    Keys are the thresholds as text ("0.1"); latency is the time of the first improvement whose
    gap is at or below the threshold; energy = `power_w` x latency (the spec's average power
    since the start times the latency), None without power.
    """
    out: dict[str, dict[str, Any] | None] = {}
    for threshold in thresholds:
        hit = next(((t, c) for t, c in result.improvements
                    if bks_gap(c, target) <= threshold + 1e-12), None)
        if hit is None:
            out[f"{threshold:g}"] = None
            continue
        t, c = hit
        energy = None if power_w is None else power_w * t
        out[f"{threshold:g}"] = {"latency_s": float(t), "energy_j": energy, "cost": int(c)}
    return out


def average_over_seeds(points: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """FT results per (sut, nodes, density, timeout): mean gap and mean power over the seeds.

    Mean power is None (with the first reason) if any seed had no power.
    """
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for p in points:
        groups.setdefault((p["sut"], p["nodes"], p["density"], p["timeout_s"]), []).append(p)
    rows = []
    for (sut, nodes, density, timeout_s), group in groups.items():
        powers = [p["power_w"] for p in group]
        missing = [p["power_status"] for p in group if p["power_w"] is None]
        rows.append({
            "sut": sut, "nodes": nodes, "density": density, "timeout_s": timeout_s,
            "seeds": len(group),
            "mean_gap": sum(p["gap"] for p in group) / len(group),
            "mean_power_w": None if missing else sum(powers) / len(powers),
            "power_status": missing[0] if missing else "measured",
        })
    return rows


# -- maximum workload size -----------------------------------------------------------------------
def max_workload_size(
    sut: QuboSut,
    density: float,
    timeout_s: float,
    sizes: Sequence[int] = WORKLOAD_SIZES,
    *,
    max_nodes: int | None = None,
    seed: int = 0,
    solver_seed: int = 0,
    make_workload: Callable[[int, float, int], Workload] = generate,
) -> dict[str, Any]:
    """The largest n in `sizes` whose (n, density, seed) loads and beats cost 0.

    Sizes are tried in increasing order up to `max_nodes`; the first failure (an error while
    generating, loading or solving, or a best cost >= 0) stops the search.
    """
    tried: list[dict[str, Any]] = []
    best: int | None = None
    stopped_by = "sizes exhausted"
    for n in sorted(sizes):
        if max_nodes is not None and n > max_nodes:
            stopped_by = f"max_nodes {max_nodes}"
            break
        try:
            workload = make_workload(n, density, seed)
            sut.load(workload)
            result = sut.solve(timeout_s, solver_seed)
        except (*BENCH_ERRORS, MemoryError) as exc:
            why = exc.message if isinstance(exc, BENCH_ERRORS) else f"MemoryError: {exc}"
            tried.append({"nodes": n, "ok": False, "cost": None, "reason": why})
            stopped_by = f"failed at {n} nodes"
            break
        ok = result.best_cost < 0
        tried.append({"nodes": n, "ok": ok, "cost": int(result.best_cost),
                      "reason": "" if ok else "did not beat the trivial cost 0"})
        if not ok:
            stopped_by = f"failed at {n} nodes"
            break
        best = n
    return {"sut": sut.name, "density": density, "timeout_s": timeout_s, "max_nodes": best,
            "stopped_by": stopped_by, "tried": tried}


# -- the procedure ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FtPoint:
    """One FT point to measure."""

    nodes: int
    density: float
    seed: int
    timeout_s: float
    solver_seed: int = 0


class QuboFixedTimeout:
    """Runs FT points on one SUT and publishes a `QuboPointMeasured` per point.

    Points of the same workload are run back to back with the graph loaded once. `target_for`
    gives a workload's target (default: rig.qubo.targets.bks, cached per workload).
    """

    def __init__(
        self,
        sut: QuboSut,
        points: Sequence[FtPoint],
        publish: Callable[[Event], None],
        *,
        power: PowerMeter | None = None,
        target_for: Callable[[int, float, int], TargetLike] | None = None,
    ) -> None:
        self.sut = sut
        self.points = list(points)
        self.publish = publish
        self.power = power if power is not None else open_power_meter(sut.power_source)
        if target_for is None:
            from rig.qubo.targets import bks  # Q1's module; imported only when needed

            target_for = bks
        self._target_for = target_for
        self._targets: dict[tuple[int, float, int], TargetLike] = {}

    def run(self) -> list[dict[str, Any]]:
        """Measure every point; returns the point dicts (without the SolveResult)."""
        order = sorted(range(len(self.points)),
                       key=lambda k: (self.points[k].nodes, self.points[k].density,
                                      self.points[k].seed))
        total = len(order)
        self.publish(PhaseStarted(phase="qubo-ft", total=total,
                                  description=f"{total} fixed-timeout points on {self.sut.name}"))
        out: list[dict[str, Any]] = []
        workload: Workload | None = None
        for done, k in enumerate(order, start=1):
            p = self.points[k]
            key = (p.nodes, p.density, p.seed)
            if workload is None or workload.key != key:
                workload = generate(*key)
            if key not in self._targets:
                self._targets[key] = self._target_for(*key)
            row = fixed_timeout_point(self.sut, workload, p.timeout_s, p.solver_seed,
                                      self._targets[key], self.power)
            row.pop("result")
            self.publish(QuboPointMeasured(**row))
            out.append(row)
            self.publish(PhaseProgress(phase="qubo-ft", done=done, total=total))
        return out


def publish_max_size(result: dict[str, Any], publish: Callable[[Event], None]) -> None:
    """Publish a `max_workload_size` result as a `QuboMaxSizeMeasured` event."""
    publish(QuboMaxSizeMeasured(**result))
