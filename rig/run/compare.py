"""Two runs' figures compared (`rig compare`, and the report's paragraph on several systems):
each figure both have, its difference and whether it is distinguishable
(`rig.traces.analysis.difference`). Reads what `rig show RUN --json` gives for a run folder
(`asc_summary`, `sweep_summary`) and its manifest; no I/O here.

Figures: an ASC run's ``summary["uncertainty"]`` by key; a QUBO sweep's rows matched by
(sut, nodes, density, timeout_s), each row's ``uncertainty`` by key. Instruments: every
correlation group an ASC budget has is the energy monitor's (its current gain in one range, the
supply it set or measured), so each group maps to the monitor as the manifest records it
(driver, serial or identity, current range, voltage); a sweep's budgets have no group.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rig.errors import ConfigError
from rig.traces.analysis.difference import (
    DIFFERS,
    NOT_DISTINGUISHABLE,
    UNDECIDED,
    Comparison,
    Instrument,
    budget_from_json,
    compare_budgets,
)
from rig.traces.analysis.uncertainty import Budget
from rig.units import si, si_prefix

#: What matches a sweep's row in the other sweep.
SWEEP_KEYS = ("sut", "nodes", "density", "timeout_s")


@dataclass(frozen=True)
class RunFigures:
    """What a run offers to a comparison."""

    name: str
    procedure: str | None
    #: label -> budget (ASC: the summary key; sweep: "key (sut ..., nodes ..., ...)").
    budgets: dict[str, Budget]
    #: correlation group -> the instrument it stands for.
    instruments: dict[str, Instrument]


def instrument_of(manifest: Mapping[str, Any]) -> Instrument | None:
    """The energy monitor as the manifest's ``instruments.emon`` records it."""
    emon = (manifest.get("instruments") or {}).get("emon")
    if not isinstance(emon, dict):
        return None
    serial = emon.get("serial") or emon.get("identity") or emon.get("serial_number")
    rng = emon.get("current_range")
    volts = emon.get("voltage_v")
    return Instrument(
        driver=None if emon.get("driver") is None else str(emon["driver"]),
        serial=str(serial) if serial else None,
        current_range=None if rng in (None, "", "auto") else str(rng),
        voltage_v=float(volts) if isinstance(volts, (int, float)) else None)


def run_figures(name: str, manifest: Mapping[str, Any], shown: Mapping[str, Any]
                ) -> RunFigures:
    """A run's budgets from its manifest and `rig show --json` data (`shown`)."""
    procedure = shown.get("procedure") or manifest.get("procedure")
    budgets: dict[str, Budget] = {}
    summary = shown.get("summary")
    if isinstance(summary, dict):  # an ASC run
        for key, data in (summary.get("uncertainty") or {}).items():
            budgets[key] = budget_from_json(data)
    elif isinstance(summary, list):  # a sweep's rows
        for row in summary:
            where = ", ".join(f"{k} {row.get(k)}" for k in SWEEP_KEYS)
            for key, data in (row.get("uncertainty") or {}).items():
                budgets[f"{key} ({where})"] = budget_from_json(data)
    instrument = instrument_of(manifest)
    groups = {c.group for b in budgets.values() for c in b.components if c.group is not None}
    instruments = {g: instrument for g in groups if instrument is not None}
    return RunFigures(name, None if procedure is None else str(procedure), budgets, instruments)


def compare_runs(a: RunFigures, b: RunFigures) -> list[Comparison]:
    """Each figure both runs have, in A's order; refused (ConfigError, exit 2) for two
    different procedures or a run without figures."""
    if a.procedure != b.procedure:
        raise ConfigError(
            f"{a.name} and {b.name} are runs of different procedures ({a.procedure} and "
            f"{b.procedure}): their figures are not the same quantities",
            hint="compare two runs of one procedure")
    for run in (a, b):
        if not run.budgets:
            raise ConfigError(
                f"{run.name} has no figures with an uncertainty budget to compare",
                hint="compare finished runs measured by this rig (their summary carries "
                     "'uncertainty')")
    common = [key for key in a.budgets if key in b.budgets]
    if not common:
        raise ConfigError(f"{a.name} and {b.name} have no figure in common",
                          hint="compare two runs of one procedure and scope")
    return [compare_budgets(key, a.budgets[key], b.budgets[key], a.instruments, b.instruments)
            for key in common]


def only_in(run: RunFigures, other: RunFigures) -> list[str]:
    """The figures `run` has and `other` has not (a sweep row only one sweep measured), in
    `run`'s order: listed by `rig compare`, never compared."""
    return [key for key in run.budgets if key not in other.budgets]


def counts(comparisons: list[Comparison]) -> dict[str, int]:
    """How many figures got each verdict."""
    out = {DIFFERS: 0, NOT_DISTINGUISHABLE: 0, UNDECIDED: 0}
    for c in comparisons:
        out[c.verdict] += 1
    return out


def delta_and_u(c: Comparison) -> tuple[str, str]:
    """Δ (signed) and U(Δ) as a person reads them, in one prefix: U's, to 2 significant
    digits, Δ to one more decimal (so +0.0 µW beside 39 µW, not a float's residue in fW)."""
    u, d = c.expanded, c.difference
    if not (u > 0 and math.isfinite(u)):
        return ("+" if d > 0 else "") + si(d, c.unit), si(u, c.unit)
    scale, prefix = si_prefix(u)
    decimals = min(15, max(0, 1 - math.floor(math.log10(u / scale))))
    return (f"{d / scale:+.{decimals + 1}f} {prefix}{c.unit}",
            f"{u / scale:.{decimals}f} {prefix}{c.unit}")
