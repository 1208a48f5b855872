"""The GUM budget of a QUBO sweep row's mean power and mean energy over its seeds.

Type A: the standard deviation of the mean over the seeds with power (ν = n − 1; one seed: no
estimate, unknown). Type B: the power source's accuracy, as its driver declares it
(`drivers.emon.accuracy`): RAPL and NVML declare none (`rapl_accuracy`, `nvml_accuracy`), the
Loihi 2 profiler and the stand-in have no declaration at all, so today every row's budget is
incomplete and its u_c, U the Type A lower bound. A source whose power reading were published
(a `Spec` on its "current", power over a conventional 1 V) would enter as a rectangular gain
and offset term on the mean power, fully correlated between the seeds (one instrument: the
mean keeps the whole gain error). Energy is power × the solve's elapsed time on the host
clock, whose tolerance is not published either (`HOST_CLOCK`), or the profiler's own energy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drivers.emon.accuracy import MonitorAccuracy, NotPublished
from drivers.emon.host_power import HOST_CLOCK, nvml_accuracy, rapl_accuracy
from rig.traces.analysis.uncertainty import Budget, Component, combine, rectangular, type_a, unknown


def source_accuracy(source: str) -> MonitorAccuracy | NotPublished:
    """The declaration of a power source by its name in a point's ``power_source``."""
    if source == "rapl":
        return rapl_accuracy()
    if source == "nvml":
        return nvml_accuracy("energy")
    return NotPublished(what=f"the accuracy of the {source!r} power source",
                        searched=f"nothing: the {source!r} power source declares no accuracy "
                                 "(a SUT's own report or a stand-in, not an energy monitor)")


def _source_terms(sources: Sequence[str], power: float, what: str) -> list[Component]:
    """Type B terms of a mean power read by `sources` (one term per source)."""
    terms: list[Component] = []
    for source in sources:
        declared = source_accuracy(source)
        name = f"{what}: {source} accuracy"
        if isinstance(declared, NotPublished):
            terms.append(unknown(name, source=declared.message))
            continue
        ranges = declared.current_ranges
        if isinstance(ranges, NotPublished) or len(ranges) != 1 \
                or isinstance(ranges[0].current, NotPublished):
            why = ranges.message if isinstance(ranges, NotPublished) else (
                ranges[0].current.message if len(ranges) == 1
                and isinstance(ranges[0].current, NotPublished)
                else f"{source}: not one power range")
            terms.append(unknown(name, source=why))
            continue
        spec = ranges[0].current
        terms.append(rectangular(f"{name} (gain)", spec.gain * abs(power),
                                 source=f"{spec.source}: ±{spec.gain:.3g} of reading, "
                                        "rectangular, the same for every seed"))
        if spec.offset:
            terms.append(rectangular(f"{name} (offset)", spec.offset,
                                     source=f"{spec.source}: ±{spec.offset:.3g} W, rectangular"))
    return terms


def row_budgets(powers: Sequence[float], energies: Sequence[float], sources: Sequence[str]
                ) -> dict[str, Budget]:
    """{"power_w_mean": ..., "energy_j_mean": ...} for the figures the row has."""
    out: dict[str, Budget] = {}
    if powers:
        p = sum(powers) / len(powers)
        out["power_w_mean"] = combine(
            "mean power", p, "W",
            [type_a("mean power: repeatability", powers,
                    source=f"the {len(powers)} seeds with power"),
             *_source_terms(sources, p, "mean power")])
    if energies and powers:
        e = sum(energies) / len(energies)
        p = sum(powers) / len(powers)
        power_terms = [c.scaled(e / p if p else 0.0, c.name.replace("mean power", "mean energy"))
                       for c in _source_terms(sources, p, "mean power")]
        out["energy_j_mean"] = combine(
            "mean energy", e, "J",
            [type_a("mean energy: repeatability", energies,
                    source=f"the {len(energies)} seeds with energy"),
             *power_terms,
             unknown("mean energy: solve time clock",
                     source=f"{HOST_CLOCK.message} (energy = power x the solve's elapsed time, "
                            "or the SUT's own energy report)")])
    return out


def budgets_json(budgets: dict[str, Budget]) -> dict[str, Any]:
    return {key: b.to_json() for key, b in budgets.items()}
