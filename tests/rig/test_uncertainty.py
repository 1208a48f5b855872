"""The GUM budget's pure functions (rig.traces.analysis.uncertainty), checked in closed form."""

from __future__ import annotations

import math

import pytest

from rig.traces.analysis.uncertainty import (
    K_LARGE_NU_FROM,
    Component,
    beyond_bound,
    combine,
    coverage_factor,
    rectangular,
    t_quantile_975,
    type_a,
    unknown,
    welch_satterthwaite,
)

#: t_0.975(ν) as printed in every table of Student's t (and by scipy.stats.t.ppf(0.975, ν)).
T_TABLE = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 8: 2.306, 10: 2.228,
           20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}


@pytest.mark.parametrize(("nu", "t"), sorted(T_TABLE.items()))
def test_t_quantile_matches_the_table(nu: int, t: float) -> None:
    assert t_quantile_975(nu) == pytest.approx(t, abs=5e-4)


def test_t_quantile_matches_scipy_to_1e_9() -> None:
    stats = pytest.importorskip("scipy.stats")
    for nu in [*range(1, 80), 100, 250]:
        assert t_quantile_975(nu) == pytest.approx(stats.t.ppf(0.975, nu), rel=1e-9), nu


def test_k_is_student_t_below_61_dof_and_2_from_there() -> None:
    assert coverage_factor(4) == pytest.approx(2.776, abs=5e-4)
    assert coverage_factor(4.9) == coverage_factor(4)  # ν_eff truncated (GUM G.4.1)
    assert coverage_factor(60) == pytest.approx(2.0003, abs=1e-4)
    assert t_quantile_975(K_LARGE_NU_FROM) < 2.0 < t_quantile_975(K_LARGE_NU_FROM - 1)
    assert coverage_factor(K_LARGE_NU_FROM) == 2.0 == coverage_factor(math.inf)


def test_type_a_is_the_standard_deviation_of_the_mean() -> None:
    # 1, 2, 3, 4, 5: mean 3, s = sqrt(10/4) = 1.5811, s/sqrt(5) = 0.70711, ν = 4
    c = type_a("repeatability", [1.0, 2.0, 3.0, 4.0, 5.0], source="5 runs")
    assert c.value == pytest.approx(math.sqrt(2.5) / math.sqrt(5))
    assert c.dof == 4 and c.type == "A" and c.known


def test_one_value_gives_no_type_a_estimate_not_zero() -> None:
    c = type_a("repeatability", [3.0], source="1 span")
    assert c.value is None and not c.known and "no Type A estimate" in c.source


def test_rectangular_is_half_width_over_root_3() -> None:
    c = rectangular("gain", 0.02 * 3.6e-3, source="UM2243 §10")
    assert c.value == pytest.approx(0.02 * 3.6e-3 / math.sqrt(3))
    assert c.type == "B" and math.isinf(c.dof)


def test_independent_terms_add_in_quadrature_and_type_b_only_gives_k_2() -> None:
    b = combine("x", 10.0, "W", [rectangular("a", 3 * math.sqrt(3), source="s"),
                                 rectangular("b", 4 * math.sqrt(3), source="s")])
    assert b.u_c == pytest.approx(5.0) and math.isinf(b.dof_eff)
    assert b.k == 2.0 and b.u_expanded == pytest.approx(10.0) and b.relative == pytest.approx(1.0)
    assert b.complete and b.coverage == 0.95


def test_a_correlated_gain_scales_with_the_difference_not_in_quadrature() -> None:
    """Dynamic power = active − idle, one instrument and range, 2 % gain: the gain term is
    0.02·(P_a − P_i)/√3, not √((0.02·P_a)² + (0.02·P_i)²)/√3."""
    p_a, p_i = 3.6e-3, 1.2e-3
    active = rectangular("gain, active", 0.02 * p_a, source="s", group="gain")
    idle = rectangular("gain, idle", 0.02 * p_i, source="s", group="gain", sensitivity=-1.0)
    b = combine("dynamic", p_a - p_i, "W", [active, idle])
    assert b.u_c == pytest.approx(0.02 * (p_a - p_i) / math.sqrt(3))
    independent = combine("dynamic", p_a - p_i, "W",
                          [rectangular("a", 0.02 * p_a, source="s"),
                           rectangular("i", 0.02 * p_i, source="s")])
    assert independent.u_c == pytest.approx(0.02 * math.hypot(p_a, p_i) / math.sqrt(3))


def test_welch_satterthwaite_for_known_inputs() -> None:
    # u_A = 1 with ν = 4, u_B = 1 with ν = ∞: ν_eff = (1 + 1)² / (1/4) = 16
    assert welch_satterthwaite([(1.0, 4.0), (1.0, math.inf)]) == pytest.approx(16.0)
    b = combine("x", 1.0, "s", [Component("A", 1.0, "A", 4.0, "runs"),
                                rectangular("B", math.sqrt(3), source="spec")])
    assert b.dof_eff == pytest.approx(16.0)
    assert b.k == pytest.approx(2.120, abs=5e-4)  # t_0.975(16)
    assert b.u_expanded == pytest.approx(b.k * math.sqrt(2))
    # Type A alone with ν = 4: k = t_0.975(4)
    assert combine("x", 1.0, "s", [Component("A", 1.0, "A", 4.0, "runs")]).k == \
        pytest.approx(2.776, abs=5e-4)


def test_an_unknown_term_makes_a_lower_bound_and_never_meets_a_bound() -> None:
    b = combine("x", 1.0, "W", [rectangular("gain", 0.0001, source="s"),
                                unknown("voltage", source="instrument accuracy not published")])
    assert not b.complete and b.unknown == ("voltage",)
    assert b.u_c == pytest.approx(0.0001 / math.sqrt(3))  # the known part only
    assert b.to_json()["lower_bound"] is True
    (line,) = beyond_bound([b], 1.0)
    assert line == "x: uncertainty incomplete (unknown: voltage)"


def test_a_group_with_an_unknown_member_is_left_out() -> None:
    b = combine("x", 1.0, "W", [rectangular("g1", 1.0, source="s", group="g"),
                                unknown("g2", source="not published", group="g"),
                                rectangular("other", math.sqrt(3), source="s")])
    assert b.u_c == pytest.approx(1.0) and not b.complete


def test_beyond_bound_names_each_figure_over_it() -> None:
    small = combine("a", 100.0, "W", [rectangular("g", 0.5 * math.sqrt(3), source="s")])
    large = combine("b", 1.0, "W", [rectangular("g", 0.5 * math.sqrt(3), source="s")])
    assert small.relative == pytest.approx(0.01) and large.relative == pytest.approx(1.0)
    assert beyond_bound([small, large], 0.02) == ["b: U/|value| = 100 % > 2 %"]
    assert beyond_bound([small, large], 1.0) == []


def test_budget_json_carries_every_component() -> None:
    b = combine("x", 2.0, "J", [type_a("runs", [1.0, 3.0], source="2 runs"),
                                rectangular("gain", 0.1, source="doc §1", group="g")])
    data = b.to_json()
    assert set(data) >= {"figure", "value", "unit", "components", "u_c", "dof_eff", "k", "U",
                         "coverage", "complete", "unknown"}
    assert [c["type"] for c in data["components"]] == ["A", "B"]
    assert data["components"][1] == {
        "name": "gain", "value": pytest.approx(0.1 / math.sqrt(3)), "type": "B", "dof": "inf",
        "source": "doc §1", "published": True, "correlation_group": "g", "sign": 1}
    assert data["components"][0]["dof"] == 1.0
