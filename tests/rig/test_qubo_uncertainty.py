"""A QUBO sweep row's GUM budget (rig.qubo.uncertainty) and the sweep's bound, by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy, Spec
from rig.errors import ConfigError
from rig.qubo import uncertainty
from rig.qubo.sweep import SweepPoint, SweepPointDone, SweepSpec, parse_sweep, summarize

POWERS = (10.0, 11.0, 12.0)
T = 0.5


def done(source: str) -> dict[str, SweepPointDone]:
    out = {}
    for seed, p in enumerate(POWERS):
        key = SweepPoint(0, "cpu-tabu", 10, 0.25, T, seed).key
        out[key] = SweepPointDone(key=key, sut="cpu-tabu", nodes=10, density=0.25, timeout_s=T,
                                  seed=seed, result={"gap": 0.0, "power_w": p,
                                                     "energy_j": p * T, "power_source": source})
    return out


def spec(bound: float | None = None) -> SweepSpec:
    return SweepSpec(suts=("cpu-tabu",), nodes=(10,), densities=(0.25,), timeouts=(T,),
                     seeds=(0, 1, 2), max_relative_uncertainty=bound)


def test_type_a_over_seeds_and_rapl_not_published() -> None:
    (row,) = summarize(spec(), done("rapl"))["rows"]
    power = row["uncertainty"]["power_w_mean"]
    a, b = power["components"]
    assert a["value"] == pytest.approx(1.0 / math.sqrt(3)) and a["dof"] == 2  # s = 1, n = 3
    assert b["value"] is None and "RAPL package energy counter accuracy" in b["source"]
    assert not power["complete"] and power["u_c"] == pytest.approx(1 / math.sqrt(3))
    # ν_eff = 2 from the known term alone (k = 4.303 there), but the budget is incomplete: the
    # unknown term could raise ν_eff, so only k = 2 bounds U from below.
    assert power["dof_eff"] == pytest.approx(2.0) and power["k"] == 2.0
    assert power["U"] == pytest.approx(2 / math.sqrt(3))
    energy = row["uncertainty"]["energy_j_mean"]
    assert energy["value"] == pytest.approx(11.0 * T)
    assert "mean energy: solve time clock" in energy["unknown"]


def test_a_published_source_gives_a_gain_term(monkeypatch) -> None:
    declared = MonitorAccuracy(
        current_ranges=(RangeAccuracy("power", None, Spec(0.05, 0.0, "test sheet")),),
        voltage=None, voltage_set=None, clock=NotPublished("clock", "the test"))
    monkeypatch.setattr(uncertainty, "source_accuracy", lambda source: declared)
    (row,) = summarize(spec(), done("meter"))["rows"]
    power = row["uncertainty"]["power_w_mean"]
    assert power["complete"]
    assert power["u_c"] == pytest.approx(math.hypot(1 / math.sqrt(3), 0.05 * 11.0 / math.sqrt(3)))


def test_the_bound_check(monkeypatch) -> None:
    assert summarize(spec(), done("rapl"))["checks"] == []
    (check,) = summarize(spec(1.0), done("rapl"))["checks"]
    assert check["ok"] is False and "mean power: uncertainty incomplete" in check["detail"]
    declared = MonitorAccuracy(
        current_ranges=(RangeAccuracy("power", None, Spec(0.05, 0.0, "test sheet")),),
        voltage=None, voltage_set=None, clock=NotPublished("clock", "the test"))
    monkeypatch.setattr(uncertainty, "source_accuracy", lambda source: declared)
    summary = summarize(spec(1.0), done("meter"))
    (check,) = summary["checks"]  # energy still has the host clock: incomplete
    assert check["ok"] is False and "mean power" not in check["detail"]
    assert ("mean energy: uncertainty incomplete (unknown: mean energy: solve time clock)"
            in check["detail"])


@pytest.mark.parametrize("bound", [0, 1.5, -0.1])
def test_a_bound_outside_0_1_is_refused(bound: float) -> None:
    raw = {"sweep": {"suts": ["cpu-tabu"], "nodes": [10], "densities": [0.25],
                     "timeouts": [0.1], "max_relative_uncertainty": bound}}
    with pytest.raises(ConfigError) as info:
        parse_sweep(raw, Path("s.toml"))
    assert str(info.value) == (f"s.toml: [sweep] max_relative_uncertainty: expected a number in "
                               f"(0, 1], found {bound!r}")


def test_the_bound_survives_the_snapshot() -> None:
    s = parse_sweep({"sweep": {"suts": ["cpu-tabu"], "nodes": [10], "densities": [0.25],
                               "timeouts": [0.1], "max_relative_uncertainty": 0.1}},
                    Path("s.toml"))
    assert SweepSpec.from_snapshot(s.snapshot(), "x").max_relative_uncertainty == 0.1
    assert SweepSpec.from_snapshot(spec().snapshot(), "x").max_relative_uncertainty is None
