"""The difference of two runs' figures (rig/traces/analysis/difference.py): closed forms."""

from __future__ import annotations

import math

import pytest

from rig.errors import ConfigError
from rig.run.compare import RunFigures, compare_runs, instrument_of
from rig.traces.analysis.difference import (
    DIFFERS,
    NOT_DISTINGUISHABLE,
    UNDECIDED,
    Instrument,
    budget_from_json,
    compare_budgets,
)
from rig.traces.analysis.uncertainty import (
    combine,
    coverage_factor,
    rectangular,
    t_quantile_975,
    type_a,
    unknown,
)

GAIN = "lpm01a current gain, dynamic range"
LPM = Instrument("lpm01a", "SN1", "dynamic", 1.8)


def _power(value: float, values: list[float], gain: float | None = None, *, extra=()):
    terms = [type_a("power: repeatability", values, source="windows")]
    if gain is not None:
        terms.append(rectangular("power: gain", gain * value, source="spec", group=GAIN))
    return combine("power", value, "W", [*terms, *extra])


def test_type_a_only_adds_in_quadrature_with_welch_satterthwaite() -> None:
    a = _power(1.0, [0.9, 1.0, 1.1])           # s = 0.1, n = 3: u = 0.1/sqrt(3), nu = 2
    b = _power(1.5, [1.3, 1.5, 1.7, 1.5, 1.5])  # s = sqrt(0.02), n = 5: nu = 4
    c = compare_budgets("p", a, b, {}, {})
    ua, ub = 0.1 / math.sqrt(3), math.sqrt(0.02) / math.sqrt(5)
    assert c.difference == pytest.approx(0.5)
    assert c.delta.u_c == pytest.approx(math.hypot(ua, ub))
    nu = (ua ** 2 + ub ** 2) ** 2 / (ua ** 4 / 2 + ub ** 4 / 4)
    assert c.delta.dof_eff == pytest.approx(nu)
    assert c.k == pytest.approx(t_quantile_975(math.floor(nu))) and c.k > 2
    assert c.expanded == pytest.approx(c.k * math.hypot(ua, ub))
    assert c.delta.complete and c.verdict == DIFFERS and c.verdict_text == "differs"
    same = compare_budgets("p", a, _power(1.01, [0.91, 1.01, 1.11]), {}, {})
    assert same.verdict == NOT_DISTINGUISHABLE
    assert same.verdict_text == f"not distinguishable at k = {same.k:.3g}"


def test_a_shared_gain_on_the_same_serial_and_range_cancels() -> None:
    """g·|x_B − x_A|/√3, not √(x_A² + x_B²)·g/√3."""
    a, b = _power(1.0, [1.0, 1.0], 0.02), _power(1.1, [1.1, 1.1], 0.02)  # Type A: 0
    c = compare_budgets("p", a, b, {GAIN: LPM}, {GAIN: LPM})
    assert c.shared_groups == (GAIN,)
    assert c.delta.u_c == pytest.approx(0.02 * 0.1 / math.sqrt(3))
    assert c.k == 2.0 and c.verdict == DIFFERS  # 0.1 > 2·0.00115
    other = Instrument("lpm01a", "SN2", "dynamic", 1.8)
    for b_instrument in (other, Instrument("lpm01a", "SN1", "low", 1.8),
                         Instrument("lpm01a", "SN1", "dynamic", 3.3)):
        d = compare_budgets("p", a, b, {GAIN: LPM}, {GAIN: b_instrument})
        assert d.shared_groups == ()
        assert d.delta.u_c == pytest.approx(0.02 * math.hypot(1.0, 1.1) / math.sqrt(3))


def test_an_instrument_without_a_serial_is_never_the_same_one() -> None:
    nameless = Instrument("lpm01a", None, "dynamic", 1.8)
    a, b = _power(1.0, [1.0, 1.0], 0.02), _power(1.0, [1.0, 1.0], 0.02)
    c = compare_budgets("p", a, b, {GAIN: nameless}, {GAIN: nameless})
    assert c.shared_groups == ()
    assert c.delta.u_c == pytest.approx(0.02 * math.sqrt(2) / math.sqrt(3))


def test_within_a_run_the_dynamic_power_keeps_its_own_correlation() -> None:
    """Dynamic = active − idle in each run: with a shared serial the four gain terms add
    linearly: g·|(Pa_B − Pi_B) − (Pa_A − Pi_A)|/√3."""
    def dynamic(pa: float, pi: float):
        return combine("dynamic power", pa - pi, "W", [
            rectangular("active: gain", 0.02 * pa, source="spec", group=GAIN),
            rectangular("idle: gain", 0.02 * pi, source="spec", group=GAIN, sensitivity=-1)])
    a, b = dynamic(3.6, 1.2), dynamic(3.9, 1.2)
    c = compare_budgets("d", a, b, {GAIN: LPM}, {GAIN: LPM})
    assert c.delta.u_c == pytest.approx(0.02 * 0.3 / math.sqrt(3))
    d = compare_budgets("d", a, b, {}, {})
    assert d.delta.u_c == pytest.approx(0.02 * math.hypot(2.4, 2.7) / math.sqrt(3))


def test_an_incomplete_budget_is_never_said_to_differ() -> None:
    """U = 2·u_c of the known terms (the least the real U can be); beyond it: undecided."""
    missing = (unknown("power: supply voltage", source="not published"),)
    a = _power(1.0, [0.9, 1.0, 1.1], extra=missing)  # known: nu = 2, its own k = 4.3
    b = _power(1.5, [1.4, 1.5, 1.6], extra=missing)
    c = compare_budgets("p", a, b, {}, {})
    u = math.hypot(0.1 / math.sqrt(3), 0.1 / math.sqrt(3))
    # incomplete: its U is 2·u_c, though the known terms alone (nu_eff = 4) would give 2.78
    assert not c.delta.complete and c.delta.k == 2.0 and coverage_factor(c.delta.dof_eff) > 2.7
    assert c.k == 2.0 and c.expanded == pytest.approx(2 * u)
    assert c.verdict == UNDECIDED and "not published" in c.verdict_text
    assert "B: power: supply voltage" in c.to_json()["unknown"]
    near = compare_budgets("p", a, _power(1.05, [0.95, 1.05, 1.15], extra=missing), {}, {})
    assert 2 * u >= 0.05 and near.verdict == NOT_DISTINGUISHABLE
    assert near.verdict_text == "not distinguishable at k = 2 (U a lower bound)"
    # between 2·u_c and the known terms' own k·u_c: still undecided, not "not distinguishable"
    mid = compare_budgets("p", a, _power(1.0 + 3 * u, [0.9 + 3 * u, 1.0 + 3 * u, 1.1 + 3 * u],
                                         extra=missing), {}, {})
    assert coverage_factor(mid.delta.dof_eff) * mid.delta.u_c > 3 * u
    assert mid.verdict == UNDECIDED


def test_a_budget_read_back_from_json_is_the_same() -> None:
    b = _power(1.0, [0.9, 1.0, 1.1], 0.02, extra=(unknown("v", source="x", group="supply"),))
    again = budget_from_json(b.to_json())
    assert again == b
    assert not again.complete and again.k == 2.0  # incomplete: U = 2·u_c, a lower bound
    complete = _power(1.0, [0.9, 1.0, 1.1], 0.02)
    assert budget_from_json(complete.to_json()).k == coverage_factor(complete.dof_eff) > 2


def test_runs_of_different_procedures_or_without_figures_are_refused() -> None:
    budget = _power(1.0, [1.0, 1.1])
    asc = RunFigures("a", "asc", {"p": budget}, {})
    with pytest.raises(ConfigError, match="different procedures"):
        compare_runs(asc, RunFigures("b", "qubo-sweep", {"p": budget}, {}))
    with pytest.raises(ConfigError, match="no figures"):
        compare_runs(asc, RunFigures("b", "asc", {}, {}))
    (c,) = compare_runs(asc, RunFigures("b", "asc", {"p": budget, "q": budget}, {}))
    assert c.verdict == NOT_DISTINGUISHABLE and c.difference == 0


def test_the_manifest_s_monitor_identity() -> None:
    m = {"instruments": {"emon": {"driver": "otii", "serial": "A1", "current_range": "auto",
                                  "voltage_v": 1.8}}}
    assert instrument_of(m) == Instrument("otii", "A1", None, 1.8)
    m["instruments"]["emon"] = {"driver": "n6705", "identity": "Keysight,N6705C,MY1,A",
                                "current_range": "10mA"}
    assert instrument_of(m) == Instrument("n6705", "Keysight,N6705C,MY1,A", "10mA", None)
    assert instrument_of({}) is None
