"""Uncertainty budgets after the GUM (JCGM 100:2008): pure functions, no I/O, no numpy.

A figure's budget lists its components, each a standard uncertainty *in the figure's unit*
(the input's standard uncertainty times the magnitude of its sensitivity coefficient,
GUM 5.1.3's u_i(y) = |c_i| u(x_i)):

- Type A (`type_a`): the experimental standard deviation of the mean of n repeated values,
  s/√n, with ν = n − 1 degrees of freedom (GUM 4.2). One value gives no Type A estimate: the
  component is then *unknown* (never 0).
- Type B, rectangular (`rectangular`): a quantity known to lie within ± a gets u = a/√3
  (GUM 4.3.7), ν = ∞ (the limits are taken as exact, GUM G.4.3).
- Unknown (`unknown`): a term the budget needs but has no figure for, e.g. an instrument whose
  vendor publishes no accuracy ("instrument accuracy not published"). It carries no number.

`combine` adds the components in quadrature (GUM 5.1.2), except those that share a
`group`: a group's members are taken as fully correlated (r = +1, GUM 5.2.2 with r(x_i, x_j)
= 1), so their signed contributions add *linearly* before the group enters the quadrature sum.
That is how one instrument's gain error is carried by a difference of two of its readings:
the active reading contributes +g·P_a/√3, the idle one −g·P_i/√3, and the group contributes
g·|P_a − P_i|/√3, not √((g·P_a)² + (g·P_i)²)/√3.

Incomplete budgets: where any component is unknown, ``u_c`` is computed from the known terms
only and is a *lower bound* of the real combined uncertainty (every independent term adds a
non-negative variance), ``complete`` is false and ``unknown`` names the missing terms. Its
``U`` is 2·u_c, not k·u_c with the known terms' k: a missing term changes ν_eff, so the real
k may be smaller than the known terms' (an unknown Type B term, ν = ∞, raises ν_eff), but never
below 2, so only 2·u_c bounds the real U from below.
A correlated group with an unknown member is left out of the sum entirely (its known members
could be cancelled by the unknown one, so they bound nothing). Nothing is ever guessed.

Expanded uncertainty U = k·u_c with k for a 95 % coverage probability: ν_eff from the
Welch–Satterthwaite formula (GUM G.4.1; Type B terms ν = ∞), truncated to an integer as
GUM G.4.1 says, then k = t₀.₉₇₅(ν_eff), the two-sided 95 % point of Student's t, *but
never below 2*: GUM G.6.6 takes k = 2 when ν_eff is large, and t₀.₉₇₅(ν) ≤ 2 from ν = 61 on
(t₀.₉₇₅(60) = 2.0003, t₀.₉₇₅(61) = 1.9996, t₀.₉₇₅(∞) = 1.960). So k = max(2, t₀.₉₇₅(ν_eff)):
the Student factor while it exceeds 2, 2 beyond (K_LARGE_NU_FROM), a slightly wider interval
than 95 % there, stated as "approximately 95 %" (`COVERAGE`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from rig.units import si, si_alongside

#: The coverage probability every expanded uncertainty is stated for.
COVERAGE = 0.95
#: The words beside it in a budget.
COVERAGE_TEXT = ("approximately 95 % (k = t_0.975(nu_eff) for Student's t, at least 2; "
                 "k = 2 once nu_eff >= 61, GUM G.6.6)")
#: k = 2 for ν_eff at or above this (where t₀.₉₇₅(ν) first falls to 2 or below).
K_LARGE_NU_FROM = 61
#: A component's type: from repeated values (A) or from any other knowledge (B).
TYPE_A, TYPE_B = "A", "B"


@dataclass(frozen=True)
class Component:
    """One term of a budget: a standard uncertainty in the figure's unit (None: unknown)."""

    name: str
    #: |c_i|·u(x_i) in the figure's unit; None where there is no figure (`known` false).
    value: float | None
    #: "A" (from repeated values) or "B" (any other knowledge: a spec, a resolution).
    type: str
    #: Degrees of freedom (math.inf for a Type B term).
    dof: float
    #: Where the figure comes from: a document and section, "the 5 windows", ...
    source: str
    #: Whether the term's figure is published (an instrument's accuracy) or otherwise known.
    known: bool = True
    #: Terms with the same group are fully correlated (r = +1): they add linearly.
    group: str | None = None
    #: The sign of the sensitivity coefficient (+1 or −1), used inside a group only.
    sign: int = 1

    def __post_init__(self) -> None:
        if self.type not in (TYPE_A, TYPE_B):
            raise ValueError(f"a component is Type A or B, got {self.type!r}")
        if self.known != (self.value is not None):
            raise ValueError("a known component has a value, an unknown one none")
        if self.value is not None and not (self.value >= 0 and math.isfinite(self.value)):
            raise ValueError(f"a standard uncertainty is finite and >= 0, got {self.value!r}")
        if not self.dof > 0:
            raise ValueError(f"degrees of freedom are > 0, got {self.dof!r}")
        if self.sign not in (1, -1):
            raise ValueError(f"a sign is +1 or -1, got {self.sign!r}")

    def scaled(self, factor: float, name: str | None = None) -> Component:
        """The same term carried into another figure by a sensitivity `factor` (its sign
        flips the term's sign)."""
        return Component(
            name=name or self.name,
            value=None if self.value is None else abs(factor) * self.value,
            type=self.type, dof=self.dof, source=self.source, known=self.known,
            group=self.group, sign=self.sign * (-1 if factor < 0 else 1))

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "type": self.type,
                "dof": _json_dof(self.dof), "source": self.source, "published": self.known,
                "correlation_group": self.group, "sign": self.sign}


@dataclass(frozen=True)
class Budget:
    """A figure, its components and what they combine to."""

    figure: str
    value: float
    unit: str
    components: tuple[Component, ...]
    #: Combined standard uncertainty from the known terms (a lower bound if not `complete`).
    u_c: float
    #: Effective degrees of freedom (Welch–Satterthwaite); math.inf with Type B terms only.
    dof_eff: float
    #: Coverage factor and expanded uncertainty U = k·u_c (``U`` in JSON).
    k: float
    u_expanded: float
    #: Every term known: u_c and U are the figure's; else they are lower bounds.
    complete: bool
    #: The names of the unknown terms (with their reason in each component's source).
    unknown: tuple[str, ...] = field(default=())
    coverage: float = COVERAGE

    @property
    def relative(self) -> float:
        """U/|value| (math.inf for a zero value with a non-zero U; 0 for 0/0)."""
        if self.value == 0:
            return 0.0 if self.u_expanded == 0 else math.inf
        return self.u_expanded / abs(self.value)

    def to_json(self) -> dict[str, Any]:
        """The budget as JSON values (math.inf degrees of freedom as the string "inf")."""
        return {
            "figure": self.figure, "value": self.value, "unit": self.unit,
            "components": [c.to_json() for c in self.components],
            "u_c": self.u_c, "dof_eff": _json_dof(self.dof_eff), "k": self.k,
            "U": self.u_expanded,
            "relative_U": None if math.isinf(self.relative) else self.relative,
            "coverage": self.coverage, "coverage_text": COVERAGE_TEXT,
            "complete": self.complete, "unknown": list(self.unknown),
            "lower_bound": not self.complete,
        }


# -- components -------------------------------------------------------------------------------
def type_a(name: str, values: Sequence[float], *, source: str, sensitivity: float = 1.0
           ) -> Component:
    """Type A: the standard deviation of the mean of `values` (s/√n, ν = n − 1), times
    |sensitivity|; unknown for fewer than two values (a single value tells no spread)."""
    n = len(values)
    if n < 2:
        return Component(name, None, TYPE_A, math.inf, f"{source}: {n} value(s), so no "
                         "Type A estimate (its repeatability is not evaluated)", known=False)
    mean = math.fsum(values) / n
    s = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return Component(name, abs(sensitivity) * s / math.sqrt(n), TYPE_A, float(n - 1),
                     f"{source}: s/sqrt(n), n = {n}",
                     sign=-1 if sensitivity < 0 else 1)


def type_a_from_stderr(name: str, stderr: float, n: int, *, source: str,
                       sensitivity: float = 1.0) -> Component:
    """Type A from a standard error already computed over `n` values (ν = n − 1)."""
    if n < 2:
        return Component(name, None, TYPE_A, math.inf, f"{source}: {n} value(s), so no "
                         "Type A estimate (its repeatability is not evaluated)", known=False)
    return Component(name, abs(sensitivity) * stderr, TYPE_A, float(n - 1),
                     f"{source}: s/sqrt(n), n = {n}", sign=-1 if sensitivity < 0 else 1)


def rectangular(name: str, half_width: float, *, source: str, sensitivity: float = 1.0,
                group: str | None = None) -> Component:
    """Type B from limits ± `half_width` (rectangular: a/√3, ν = ∞), times the sensitivity."""
    if not (half_width >= 0 and math.isfinite(half_width)):
        raise ValueError(f"a half-width is finite and >= 0, got {half_width!r}")
    return Component(name, abs(sensitivity) * half_width / math.sqrt(3), TYPE_B, math.inf,
                     source, group=group, sign=-1 if sensitivity < 0 else 1)


def unknown(name: str, *, source: str, type: str = TYPE_B, group: str | None = None
            ) -> Component:
    """A term with no figure (e.g. "instrument accuracy not published: ..." in `source`)."""
    return Component(name, None, type, math.inf, source, known=False, group=group)


# -- combination ------------------------------------------------------------------------------
def combine(figure: str, value: float, unit: str, components: Iterable[Component]) -> Budget:
    """The budget: groups summed linearly (r = +1), then everything in quadrature; ν_eff by
    Welch–Satterthwaite over the resulting independent terms; k and U (module docstring)."""
    parts = tuple(components)
    terms: list[tuple[float, float]] = []  # (u_i, ν_i) of each independent term
    groups: dict[str, list[Component]] = {}
    for c in parts:
        if c.group is None:
            if c.value is not None:
                terms.append((c.value, c.dof))
        else:
            groups.setdefault(c.group, []).append(c)
    for members in groups.values():
        if all(m.value is not None for m in members):
            total = abs(math.fsum(m.sign * (m.value or 0.0) for m in members))
            terms.append((total, min(m.dof for m in members)))
    u_c = math.sqrt(math.fsum(u * u for u, _ in terms))
    dof = welch_satterthwaite(terms)
    missing = tuple(c.name for c in parts if not c.known)
    # Incomplete: the real k is unknown but >= 2, so 2·u_c is what bounds U (module docstring).
    k = 2.0 if missing else coverage_factor(dof)
    return Budget(figure=figure, value=value, unit=unit, components=parts, u_c=u_c,
                  dof_eff=dof, k=k, u_expanded=k * u_c, complete=not missing, unknown=missing)


def welch_satterthwaite(terms: Iterable[tuple[float, float]]) -> float:
    """ν_eff = u_c⁴ / Σ(u_i⁴/ν_i) over (u_i, ν_i) (GUM G.2b); math.inf when every term with
    a non-zero u has ν = ∞ (or there is none)."""
    pairs = list(terms)
    u_c2 = math.fsum(u * u for u, _ in pairs)
    denominator = math.fsum(u ** 4 / nu for u, nu in pairs if not math.isinf(nu) and u > 0)
    if denominator == 0:
        return math.inf
    return u_c2 * u_c2 / denominator


def coverage_factor(dof_eff: float) -> float:
    """k for ~95 %: t₀.₉₇₅ at ν_eff truncated to an integer (GUM G.4.1), never below 2."""
    if math.isinf(dof_eff) or dof_eff >= K_LARGE_NU_FROM:
        return 2.0
    return max(2.0, t_quantile_975(max(1, math.floor(dof_eff))))


def t_quantile_975(nu: int) -> float:
    """The two-sided 95 % point of Student's t with `nu` (integer >= 1) degrees of freedom:
    the t with P(|T| <= t) = 0.95, found by bisection on the closed form of that probability
    for integer ν (`t_two_sided_probability`). 12.706 for ν = 1, 2.776 for 4, 1.960 → ∞."""
    if nu < 1 or int(nu) != nu:
        raise ValueError(f"degrees of freedom are an integer >= 1, got {nu!r}")
    low, high = 0.0, 64.0  # t_0.975(1) = 12.71
    for _ in range(200):
        mid = (low + high) / 2
        if t_two_sided_probability(mid, int(nu)) < COVERAGE:
            low = mid
        else:
            high = mid
        if high - low < 1e-12:
            break
    return (low + high) / 2


def t_two_sided_probability(t: float, nu: int) -> float:
    """P(|T| <= t) for Student's t with integer ν >= 1, from the finite series in
    θ = atan(t/√ν) (Abramowitz & Stegun 26.7.3 and 26.7.4):

    - ν odd:  (2/π)·(θ + sinθ·(cosθ + (2/3)cos³θ + … + (2·4…(ν−3))/(1·3…(ν−2))·cos^(ν−2)θ)),
      just 2θ/π for ν = 1;
    - ν even: sinθ·(1 + (1/2)cos²θ + (1·3)/(2·4)cos⁴θ + … + (1·3…(ν−3))/(2·4…(ν−2))·cos^(ν−2)θ).
    """
    theta = math.atan(t / math.sqrt(nu))
    s, c = math.sin(theta), math.cos(theta)
    if nu % 2 == 1:
        if nu == 1:
            return 2 * theta / math.pi
        term, total = c, c
        for j in range(3, nu - 1, 2):  # term_j = term_{j-2} · (j−1)/j · cos²θ
            term *= (j - 1) / j * c * c
            total += term
        return 2 / math.pi * (theta + s * total)
    term, total = 1.0, 1.0
    for j in range(2, nu - 1, 2):  # term_j = term_{j-2} · (j−1)/j · cos²θ
        term *= (j - 1) / j * c * c
        total += term
    return s * total


# -- shown to a person ------------------------------------------------------------------------
#: What the marks of `with_uncertainty` mean, for a note under a table of figures.
SHOWN_NOTE = ("figure ± U (k): the expanded uncertainty, coverage approximately 95 %, "
              "coverage factor k (GUM); ± ≥U (incomplete): some terms of the budget have no "
              "published or evaluated figure, so U, from the known terms only, is a lower bound")


def with_uncertainty(value: float | None, unit: str, budget: Budget | dict[str, Any] | None,
                     digits: int = 4) -> str:
    """A figure as every view of the rig shows it: the value (`rig.units.si`), then its
    expanded uncertainty U in the value's prefix (2 significant digits) and the coverage
    factor; an incomplete budget says so, with U as the lower bound it is:

    - "45.00 µJ ± 1.0 µJ (k=2)"                    complete budget
    - "45.00 µJ ± ≥1.0 µJ (k=2, incomplete)"       U from the known terms only: a lower bound
    - "45.00 µJ ± U unknown (incomplete)"          no term has a figure
    - "45.00 µJ"                                   no budget (a run from before budgets)

    `budget` is a `Budget` or its `to_json()` (as run summaries hold it); `unknown_terms`
    names what an incomplete one misses, `SHOWN_NOTE` explains the marks."""
    shown = si(value, unit, digits)
    if budget is None or value is None:
        return shown
    b = budget.to_json() if isinstance(budget, Budget) else budget
    try:
        u, k = float(b["U"]), float(b["k"])
    except (KeyError, TypeError, ValueError):
        return shown
    if b.get("complete", False) is True:
        return f"{shown} ± {si_alongside(u, value, unit)} (k={k:.3g})"
    if u > 0:
        return f"{shown} ± ≥{si_alongside(u, value, unit)} (k={k:.3g}, incomplete)"
    return f"{shown} ± U unknown (incomplete)"


def unknown_terms(budget: Budget | dict[str, Any]) -> list[str]:
    """The budget's unknown terms, each without the figure's name in front ("supply
    voltage" for "energy per inference: supply voltage")."""
    b = budget.to_json() if isinstance(budget, Budget) else budget
    figure = str(b.get("figure", ""))
    return [str(n).removeprefix(f"{figure}: ") for n in b.get("unknown") or []]


def incomplete_terms(budgets: Iterable[Budget | dict[str, Any] | None]) -> list[str]:
    """The unknown terms of the incomplete budgets among `budgets`, each named once and without
    the figure it was carried into ("supply voltage", not "active power: supply voltage (x
    execution time)")."""
    terms: list[str] = []
    for budget in budgets:
        if budget is None:
            continue
        b = budget.to_json() if isinstance(budget, Budget) else budget
        if b.get("complete", True) is True:
            continue
        for name in b.get("unknown") or []:
            term = str(name).rsplit(": ", 1)[-1].split(" (x ", 1)[0]
            if term not in terms:
                terms.append(term)
    return terms


def incomplete_note(budgets: Iterable[Budget | dict[str, Any] | None]) -> str | None:
    """One line under a table of figures some of whose budgets are incomplete: what "≥U"
    means and which terms are unknown (`incomplete_terms`); None when every budget is
    complete (or there is none)."""
    terms = incomplete_terms(budgets)
    if not terms:
        return None
    return ("± ≥U (incomplete): U from the known terms only, a lower bound; unknown: "
            + ", ".join(terms))


# -- a bound ----------------------------------------------------------------------------------
def beyond_bound(budgets: Iterable[Budget], bound: float) -> list[str]:
    """Each budget that does not meet a relative bound on U/|value|, in words: "name: U/|x| =
    3.1 % > 1 %", or "name: uncertainty incomplete (unknown: ...)" for a budget with unknown
    terms, which never meets a bound."""
    out = []
    for b in budgets:
        if not b.complete:
            names = [n.removeprefix(f"{b.figure}: ") for n in b.unknown]
            out.append(f"{b.figure}: uncertainty incomplete (unknown: {', '.join(names)})")
        elif not b.relative <= bound:
            out.append(f"{b.figure}: U/|value| = {_pct(b.relative)} > {_pct(bound)}")
    return out


def _pct(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x * 100:.3g} %"


def _json_dof(dof: float) -> float | str:
    return "inf" if math.isinf(dof) else dof
