"""Whether two results of the same figure really differ: the difference of two GUM budgets
(`rig.traces.analysis.uncertainty`), pure functions, no I/O.

Δ = x_B − x_A. Its components are B's terms as they are and A's terms with their sign flipped
(sensitivity −1), combined by `uncertainty.combine`:

- *Correlated between the runs* (r = +1): a term that carries a correlation group in its own
  run's budget (an instrument's current gain in one range, the supply it set) when both runs
  name the same group *and* that group stands for the same physical instrument in both: the same
  driver, the same serial (or identity string), the same range and the same supply setting
  (`Instrument`). The same instrument in the same range scales every reading by the same gain
  error, so in Δ the group's terms add linearly and a common gain g contributes
  g·|x_B − x_A|/√3, not g·√(x_A² + x_B²)/√3.
- *Independent* (quadrature): everything else: every Type A term, terms without a group (each
  reading's offset, the sample clock, the window edges: taken independent, which errs on the
  large side where they are in fact shared), and grouped terms whose instrument is not known to
  be the same one, including any instrument that records no serial (two runs of one model of
  monitor are not one monitor unless the serial says so).

ν_eff by Welch–Satterthwaite over the resulting independent terms; k = max(2, t₀.₉₇₅(ν_eff)).

The verdict, and why it never overclaims (`verdict`):

- ``differs``: only with a *complete* budget of Δ (every term of both budgets known) and
  |Δ| > U = k·u_c.
- ``not distinguishable``: |Δ| ≤ U. With an incomplete budget (any unknown term in either run)
  the U used is the *least* the real one can be, 2·u_c(known terms): the unknown terms can only
  add variance (u_c never falls as terms are added; a group with an unknown member is left out
  whole), and k is never below 2. Not the known terms' own k·u_c: adding a Type B term raises
  ν_eff and can lower k, so k·u_c of the known terms is not a bound of the real U.
- ``undecided``: an incomplete budget with |Δ| > 2·u_c(known): the difference exceeds what is
  known of the uncertainty, but the unknown terms could still cover it. It is never reported as
  "differs". `rig compare --expect-same` fails on it all the same (sameness is not shown).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rig.traces.analysis.uncertainty import TYPE_A, Budget, Component, combine

#: The three verdicts (`Comparison.verdict`).
DIFFERS, NOT_DISTINGUISHABLE, UNDECIDED = "differs", "not distinguishable", "undecided"
#: The least coverage factor any budget has (`uncertainty.coverage_factor`): what bounds an
#: incomplete budget's expanded uncertainty from below.
K_FLOOR = 2.0


@dataclass(frozen=True)
class Instrument:
    """What makes two runs' readings share one instrument's errors."""

    driver: str | None
    #: The serial number or identity string (``*IDN?``); None: not recorded (never the same).
    serial: str | None
    #: The current range recorded (None: auto or not recorded).
    current_range: str | None = None
    #: The supply it set [V] (None: not recorded).
    voltage_v: float | None = None

    def same_as(self, other: Instrument | None) -> bool:
        """One physical instrument in one setting: only when both name the same serial."""
        return (other is not None and bool(self.serial) and self == other)


@dataclass(frozen=True)
class Comparison:
    """One figure of two runs: A, B, the budget of Δ = B − A and the verdict."""

    key: str
    figure: str
    unit: str
    a: float
    b: float
    #: The budget of Δ (its u_c from the known terms; see `expanded` for the U used).
    delta: Budget
    #: The group names taken as correlated between the runs.
    shared_groups: tuple[str, ...]

    @property
    def difference(self) -> float:
        return self.delta.value

    @property
    def k(self) -> float:
        """The coverage factor used: Δ's own, or the floor 2 for an incomplete budget."""
        return self.delta.k if self.delta.complete else K_FLOOR

    @property
    def expanded(self) -> float:
        """U(Δ) the verdict is taken against (module docstring): k·u_c, or with unknown terms
        2·u_c of the known ones, the least the real U can be."""
        return self.k * self.delta.u_c

    @property
    def verdict(self) -> str:
        if abs(self.difference) <= self.expanded:
            return NOT_DISTINGUISHABLE
        return DIFFERS if self.delta.complete else UNDECIDED

    @property
    def verdict_text(self) -> str:
        """The verdict in words, as tables show it."""
        if self.verdict == DIFFERS:
            return DIFFERS
        if self.verdict == NOT_DISTINGUISHABLE:
            bound = "" if self.delta.complete else " (U a lower bound)"
            return f"not distinguishable at k = {self.k:.3g}{bound}"
        return "undecided: |Δ| > U of the known terms only (a term not published)"

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key, "figure": self.figure, "unit": self.unit, "a": self.a,
            "b": self.b, "difference": self.difference, "u_c": self.delta.u_c,
            "dof_eff": "inf" if math.isinf(self.delta.dof_eff) else self.delta.dof_eff,
            "k": self.k, "U": self.expanded, "complete": self.delta.complete,
            "lower_bound": not self.delta.complete, "unknown": list(self.delta.unknown),
            "correlated_between_runs": list(self.shared_groups),
            "verdict": self.verdict, "verdict_text": self.verdict_text,
            "components": [c.to_json() for c in self.delta.components],
        }


def compare_budgets(key: str, a: Budget, b: Budget, instruments_a: Mapping[str, Instrument],
                    instruments_b: Mapping[str, Instrument]) -> Comparison:
    """Δ = b − a with its budget; `instruments_x` gives, for a correlation group of run x's
    budget, the instrument it stands for (a group not in it is that run's alone)."""
    if a.unit != b.unit:
        raise ValueError(f"{key}: units differ ({a.unit!r} and {b.unit!r})")
    groups_a = {c.group for c in a.components if c.group is not None}
    groups_b = {c.group for c in b.components if c.group is not None}
    shared = tuple(sorted(
        g for g in groups_a & groups_b
        if g in instruments_a and instruments_a[g].same_as(instruments_b.get(g))))

    def regroup(c: Component, run: str) -> str | None:
        if c.group is None:
            return None
        return f"both runs: {c.group}" if c.group in shared else f"run {run}: {c.group}"

    parts = [_with(c, f"B: {c.name}", regroup(c, "B")) for c in b.components]
    parts += [_with(c.scaled(-1.0), f"A: {c.name}", regroup(c, "A")) for c in a.components]
    delta = combine(f"difference of {b.figure}", b.value - a.value, b.unit, parts)
    return Comparison(key=key, figure=b.figure, unit=b.unit, a=a.value, b=b.value, delta=delta,
                      shared_groups=shared)


def _with(c: Component, name: str, group: str | None) -> Component:
    return Component(name=name, value=c.value, type=c.type, dof=c.dof, source=c.source,
                     known=c.known, group=group, sign=c.sign)


# -- budgets read back ------------------------------------------------------------------------
def budget_from_json(data: Mapping[str, Any]) -> Budget:
    """A budget from its `Budget.to_json` (a manifest's, `rig show --json`'s), combined again
    from its components (so u_c, ν_eff and k are this module's, whatever wrote it)."""
    components = [component_from_json(c) for c in data["components"]]
    return combine(str(data["figure"]), float(data["value"]), str(data["unit"]), components)


def component_from_json(data: Mapping[str, Any]) -> Component:
    value = data.get("value")
    dof = data.get("dof", "inf")
    known = bool(data.get("published", value is not None)) and value is not None
    return Component(
        name=str(data["name"]), value=float(value) if known and value is not None else None,
        type=str(data.get("type", TYPE_A)),
        dof=math.inf if dof in ("inf", None) else float(dof), source=str(data.get("source", "")),
        known=known, group=data.get("correlation_group"), sign=int(data.get("sign", 1)))
