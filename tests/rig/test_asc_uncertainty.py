"""The ASC figures' GUM budgets (rig.run.asc_uncertainty through asc.summarize), by hand."""

from __future__ import annotations

import math

import pytest

from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy, Spec
from drivers.emon.lpm01a import ACCURACY as LPM01A
from rig.run import asc
from rig.run.events import (
    Event,
    IdleMeasured,
    InstrumentInfo,
    LatencyRun,
    SampleClassified,
    WindowMeasured,
)
from rig.traces.analysis.uncertainty import t_quantile_975

R3 = math.sqrt(3)
V = 1.8
FS = 1000.0
#: A monitor with every figure published (made up for the test, not an instrument's).
FULL = MonitorAccuracy(
    current_ranges=(RangeAccuracy("50 mA", 50e-3, Spec(0.01, 1e-6, "test sheet, table 1")),),
    voltage=None,
    voltage_set=Spec(0.005, 0.005, "test sheet, table 2"),
    clock=Spec(50e-6, 0.0, "test sheet, table 3"),
)
IDLE = (1.2e-3, 1.3e-3)
ACTIVE = (3.5e-3, 3.6e-3, 3.7e-3)
N, T = 800, 10.0  # inferences per window, window length [s]


def events(accuracy: MonitorAccuracy, idle: tuple[float, ...] = IDLE,
           timer: str = "emon") -> list[Event]:
    out: list[Event] = [InstrumentInfo(role="emon", info={
        "driver": "lpm01a", "accuracy": accuracy.to_json(), "current_range": "auto",
        "trace_voltage": {"measured": False, "set_v": V, "source": "set"},
        "sample_rate_hz": FS})]
    out += [IdleMeasured(start_sample=0, end_sample=2000, duration_s=2.0, power_w=p)
            for p in idle]
    for i, p in enumerate(ACTIVE):
        start = 10_000 * (i + 1)
        out.append(LatencyRun(index=i, iterations=N, elapsed_s=T, time_per_inference_s=T / N,
                              inferences_per_s=N / T, timer=timer))
        out.append(WindowMeasured(index=i, iterations=N, start_sample=start,
                                  end_sample=start + int(T * FS), duration_s=T, energy_j=p * T,
                                  mean_power_w=p, energy_per_inference_j=p * T / N))
    return out


def sem(values: tuple[float, ...]) -> float:
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1) / len(values))


def parts(budget: dict) -> dict[str, float | None]:
    return {c["name"]: c["value"] for c in budget["components"]}


def test_idle_power_budget_by_hand() -> None:
    s = asc.summarize(events(FULL))
    b = s["uncertainty"]["idle_power_w"]
    p = sum(IDLE) / 2
    i = p / V
    u = {"idle power: repeatability": sem(IDLE),
         "idle power: current gain (50 mA range)": 0.01 * p / R3,
         "idle power: current offset (50 mA range)": 1e-6 * V / R3,
         "idle power: supply voltage": (0.005 * V + 0.005) * i / R3}
    assert parts(b) == pytest.approx(u)
    u_c = math.sqrt(sum(x * x for x in u.values()))
    nu = u_c ** 4 / sem(IDLE) ** 4  # ν = 1 for the Type A term, ∞ for the rest
    assert b["u_c"] == pytest.approx(u_c) and b["dof_eff"] == pytest.approx(nu)
    assert b["k"] == pytest.approx(max(2.0, t_quantile_975(math.floor(nu))))
    assert b["U"] == pytest.approx(b["k"] * u_c) and b["complete"] and b["coverage"] == 0.95


def test_lpm01a_active_power_gain_term_is_2_percent_over_root_3() -> None:
    b = asc.summarize(events(LPM01A))["uncertainty"]["active_power_w"]
    p_a = sum(ACTIVE) / 3
    assert parts(b)["active power: current gain (dynamic range)"] == \
        pytest.approx(0.02 * p_a / R3)
    # ST publishes no setting accuracy for the supply: unknown, so u_c is a lower bound
    assert not b["complete"] and b["lower_bound"]
    assert b["unknown"] == ["active power: supply voltage"]
    assert b["u_c"] == pytest.approx(math.hypot(0.02 * p_a / R3, sem(ACTIVE)))


def test_dynamic_power_gain_is_correlated_so_it_scales_with_the_difference() -> None:
    """One range for idle and active: the gain term of dynamic power is 0.02·(P_a − P_i)/√3,
    not √((0.02·P_a)² + (0.02·P_i)²)/√3; the supply's error likewise (I_a − I_i)."""
    s = asc.summarize(events(FULL))
    b = s["uncertainty"]["dynamic_power_w"]
    p_a, p_i = sum(ACTIVE) / 3, sum(IDLE) / 2
    a_v = 0.005 * V + 0.005
    u_c = math.sqrt(sem(ACTIVE) ** 2 + sem(IDLE) ** 2           # Type A, independent
                    + (0.01 * (p_a - p_i) / R3) ** 2             # gain, correlated
                    + 2 * (1e-6 * V / R3) ** 2                   # offsets, independent
                    + (a_v * (p_a - p_i) / V / R3) ** 2)         # supply, correlated
    assert b["value"] == pytest.approx(p_a - p_i) and b["u_c"] == pytest.approx(u_c)
    groups = {c["correlation_group"] for c in b["components"]} - {None}
    assert groups == {"lpm01a current gain, 50 mA range", "supply voltage"}


def test_energy_per_inference_budget_by_hand() -> None:
    b = asc.summarize(events(FULL))["uncertainty"]["energy_per_inference_j"]
    e = sorted(p * T / N for p in ACTIVE)[1]
    p_a = sum(ACTIVE) / 3
    per_w = e / p_a  # T/N
    u = {"energy per inference: repeatability": sem(tuple(p * T / N for p in ACTIVE)),
         "energy per inference: current gain (50 mA range)": 0.01 * p_a / R3 * per_w,
         "energy per inference: current offset (50 mA range)": 1e-6 * V / R3 * per_w,
         "energy per inference: supply voltage": (0.005 * V + 0.005) * p_a / V / R3 * per_w,
         "energy per inference: lpm01a sample clock": 50e-6 * T / R3 * e / T,
         "energy per inference: window start edge": (1 / FS) / R3 * e / T,
         "energy per inference: window end edge": (1 / FS) / R3 * e / T}
    assert parts(b) == pytest.approx(u)
    assert b["u_c"] == pytest.approx(math.sqrt(sum(x * x for x in u.values())))
    assert b["complete"]


def test_latency_and_execution_time_on_the_monitor_clock() -> None:
    s = asc.summarize(events(FULL))
    ips = s["uncertainty"]["inferences_per_s"]
    per = T / N
    sens = (N / T) / per  # |d(1/t)/dt| = ips/t
    assert parts(ips) == pytest.approx({
        "inferences per second: repeatability": 0.0,
        "inferences per second: lpm01a sample clock": 50e-6 * per / R3 * sens,
        "inferences per second: window start edge": (1 / FS) / N / R3 * sens,
        "inferences per second: window end edge": (1 / FS) / N / R3 * sens})
    ex = s["uncertainty"]["execution_time_mean_s"]
    assert ex["complete"] and ex["value"] == pytest.approx(per)


def test_the_dut_timer_has_a_resolution_and_an_unknown_oscillator() -> None:
    evs = [*events(FULL, timer="dut"),
           *(SampleClassified(index=i, execution_time_s=0.0125 + 1e-6 * i, timer="dut")
             for i in range(4))]
    b = asc.summarize(evs)["uncertainty"]["execution_time_mean_s"]
    values = parts(b)
    assert values["execution time: DUT timer resolution"] == pytest.approx(1e-6 / R3)
    assert values["execution time: DUT timer clock"] is None
    assert b["unknown"] == ["execution time: DUT timer clock"]


def test_one_idle_span_leaves_idle_repeatability_unknown() -> None:
    b = asc.summarize(events(FULL, idle=(1.2e-3,)))["uncertainty"]["idle_power_w"]
    assert b["unknown"] == ["idle power: repeatability"]


def bound(value: float) -> dict:
    return {"asc": {"max_relative_uncertainty": value}}


def check(summary: dict) -> dict:
    (found,) = [c for c in summary["checks"] if c["name"] == "uncertainty within bound"]
    return found


def test_bound_passes_when_loose_and_names_figures_when_tight() -> None:
    evs = events(FULL)
    loose = asc.summarize(evs, bench=bound(1.0))  # idle: 2 spans, nu = 1, k = 12.7
    assert check(loose)["ok"] is True and asc.checks_passed(loose)
    tight = asc.summarize(evs, bench=bound(1e-4))
    c = check(tight)
    assert c["ok"] is False and not asc.checks_passed(tight)
    for figure in ("idle power", "active power", "dynamic power", "energy per inference"):
        assert f"{figure}: U/|value| = " in c["detail"]


def test_unpublished_accuracy_never_passes_a_bound() -> None:
    none = MonitorAccuracy(
        current_ranges=NotPublished("current accuracy", "the test"), voltage=None,
        voltage_set=NotPublished("set accuracy", "the test"),
        clock=NotPublished("clock", "the test"))
    s = asc.summarize(events(none), bench=bound(1.0))
    c = check(s)
    assert c["ok"] is False
    assert "active power: uncertainty incomplete (unknown: lpm01a current" in \
        c["detail"]


def test_no_bound_no_check() -> None:
    s = asc.summarize(events(FULL))
    assert not [c for c in s["checks"] if c["name"] == "uncertainty within bound"]


# -- the range each reading was recorded in (a PPK2, an auto-ranging Joulescope) -------------------
#: Three ranges with made-up figures (not an instrument's).
RANGED = MonitorAccuracy(
    current_ranges=(RangeAccuracy("1.8 mA", 1.8e-3, Spec(0.002, 0.2e-6, "sheet, 1.8 mA")),
                    RangeAccuracy("18 mA", 18e-3, Spec(0.003, 2e-6, "sheet, 18 mA")),
                    RangeAccuracy("180 mA", 0.18, Spec(0.005, 20e-6, "sheet, 180 mA"))),
    voltage=None,
    voltage_set=Spec(0.005, 0.005, "sheet, supply"),
    clock=Spec(50e-6, 0.0, "sheet, clock"),
)
I_LOW, I_MID, I_HIGH = 1.2e-3, 5e-3, 50e-3  # the mean current of the readings in each range
#: Each window's part of its 10 000 samples in 18 mA (the rest in 180 mA); each idle span's
#: part in 1.8 mA (the rest in 18 mA).
ACTIVE_MID = (0.97, 0.95, 0.96)
IDLE_LOW = (0.8, 0.7)


def ranged_events() -> list[Event]:
    out: list[Event] = [InstrumentInfo(role="emon", info={
        "driver": "ppk2", "accuracy": RANGED.to_json(), "current_range": "auto",
        "trace_voltage": {"measured": False, "set_v": V, "source": "set"},
        "sample_rate_hz": FS})]
    for k, f in enumerate(IDLE_LOW):
        n_low = round(10_000 * f)
        out.append(IdleMeasured(
            start_sample=100_000 * k, end_sample=100_000 * k + 10_000, duration_s=10.0,
            power_w=V * (f * I_LOW + (1 - f) * I_MID),
            current_ranges={"1.8 mA": {"samples": n_low, "mean_current_a": I_LOW},
                            "18 mA": {"samples": 10_000 - n_low, "mean_current_a": I_MID}}))
    for i, f in enumerate(ACTIVE_MID):
        start = 10_000 * (i + 1)
        n_mid = round(10_000 * f)
        p = V * (f * I_MID + (1 - f) * I_HIGH)
        out.append(LatencyRun(index=i, iterations=N, elapsed_s=T, time_per_inference_s=T / N,
                              inferences_per_s=N / T, timer="emon"))
        out.append(WindowMeasured(
            index=i, iterations=N, start_sample=start, end_sample=start + int(T * FS),
            duration_s=T, energy_j=p * T, mean_power_w=p, energy_per_inference_j=p * T / N,
            current_ranges={"18 mA": {"samples": n_mid, "mean_current_a": I_MID},
                            "180 mA": {"samples": 10_000 - n_mid, "mean_current_a": I_HIGH}}))
    return out


def test_active_power_takes_each_recorded_range_for_its_share_by_hand() -> None:
    b = asc.summarize(ranged_events())["uncertainty"]["active_power_w"]
    f_mid = sum(ACTIVE_MID) / 3  # 0.96: the windows weigh the same (a mean of their powers)
    f_high = 1 - f_mid
    p_a = V * (f_mid * I_MID + f_high * I_HIGH)
    assert b["value"] == pytest.approx(p_a)
    u = {"active power: repeatability": sem(tuple(V * (f * I_MID + (1 - f) * I_HIGH)
                                                  for f in ACTIVE_MID)),
         "active power: current gain (18 mA range)": 0.003 * f_mid * I_MID * V / R3,
         "active power: current offset (18 mA range)": 2e-6 * f_mid * V / R3,
         "active power: current gain (180 mA range)": 0.005 * f_high * I_HIGH * V / R3,
         "active power: current offset (180 mA range)": 20e-6 * f_high * V / R3,
         "active power: supply voltage": (0.005 * V + 0.005) * p_a / V / R3}
    assert parts(b) == pytest.approx(u)
    assert b["u_c"] == pytest.approx(math.sqrt(sum(x * x for x in u.values())))
    (gain,) = [c for c in b["components"] if c["name"].endswith("gain (18 mA range)")]
    assert ("at 0.005 A mean in the 18 mA range, 96 % of the readings (recorded per sample by "
            "the instrument: 96 % of samples in 18 mA, 4 % in 180 mA)") in gain["source"]
    assert gain["correlation_group"] == "ppk2 current gain, 18 mA range"


def test_dynamic_power_cancels_the_gain_of_the_range_idle_and_active_share() -> None:
    """18 mA holds part of the idle and of the active readings: its gain error scales with
    their difference (one group); 1.8 mA (idle only) and 180 mA (active only) add alone."""
    b = asc.summarize(ranged_events())["uncertainty"]["dynamic_power_w"]
    f_mid, f_low = sum(ACTIVE_MID) / 3, sum(IDLE_LOW) / 2
    p_a = V * (f_mid * I_MID + (1 - f_mid) * I_HIGH)
    p_i = V * (f_low * I_LOW + (1 - f_low) * I_MID)
    a_v = 0.005 * V + 0.005
    u_c = math.sqrt(
        sem(tuple(V * (f * I_MID + (1 - f) * I_HIGH) for f in ACTIVE_MID)) ** 2
        + sem(tuple(V * (f * I_LOW + (1 - f) * I_MID) for f in IDLE_LOW)) ** 2
        + (0.003 * V * (f_mid - (1 - f_low)) * I_MID / R3) ** 2  # 18 mA gain, correlated
        + (0.005 * V * (1 - f_mid) * I_HIGH / R3) ** 2  # 180 mA gain (active only)
        + (0.002 * V * f_low * I_LOW / R3) ** 2  # 1.8 mA gain (idle only)
        + (2e-6 * V * f_mid / R3) ** 2 + (20e-6 * V * (1 - f_mid) / R3) ** 2  # offsets
        + (0.2e-6 * V * f_low / R3) ** 2 + (2e-6 * V * (1 - f_low) / R3) ** 2
        + (a_v * (p_a - p_i) / V / R3) ** 2)  # supply, correlated
    assert b["value"] == pytest.approx(p_a - p_i) and b["u_c"] == pytest.approx(u_c)


def test_a_recorded_range_the_declaration_lacks_is_unknown() -> None:
    evs = ranged_events()
    evs = [e if not isinstance(e, IdleMeasured) else IdleMeasured(
        start_sample=e.start_sample, end_sample=e.end_sample, duration_s=e.duration_s,
        power_w=e.power_w, current_ranges={"1.8 mA": {"samples": 9_000, "mean_current_a": I_LOW},
                                           "off": {"samples": 1_000, "mean_current_a": 0.0}})
           for e in evs]
    b = asc.summarize(evs)["uncertainty"]["idle_power_w"]
    assert b["unknown"] == ["idle power: ppk2 current (off range)"]
    assert parts(b)["idle power: current gain (1.8 mA range)"] == \
        pytest.approx(0.002 * 0.9 * I_LOW * V / R3)


def test_without_a_record_the_configured_reported_or_inferred_range_says_so() -> None:
    inferred = asc.summarize(events(RANGED))["uncertainty"]["active_power_w"]
    (gain,) = [c for c in inferred["components"] if "current gain" in c["name"]]
    # 3.6 mA mean: the smallest declared range holding it is 18 mA.
    assert gain["name"] == "active power: current gain (18 mA range)"
    assert "range: inferred from the mean current" in gain["source"]
    for info, said in (({"current_range": "180 mA"}, "range: the configured range"),
                       ({"current_range": "180 mA", "current_range_source": "reported by the "
                         "instrument (its range query, once per capture)"},
                        "range: reported by the instrument")):
        evs = events(RANGED)
        first = evs[0]
        assert isinstance(first, InstrumentInfo)
        evs[0] = InstrumentInfo(role="emon", info={**first.info, **info})
        b = asc.summarize(evs)["uncertainty"]["active_power_w"]
        (gain,) = [c for c in b["components"] if "current gain" in c["name"]]
        assert gain["name"] == "active power: current gain (180 mA range)"
        assert said in gain["source"]


def test_events_without_the_range_record_still_load_and_with_it_round_trip() -> None:
    old = {"event": "window_measured", "index": 0, "iterations": 5, "start_sample": 1,
           "end_sample": 9, "mean_power_w": 1e-3, "at": 1.0}
    loaded = Event.from_record(old)
    assert isinstance(loaded, WindowMeasured) and loaded.current_ranges == {}
    idle = Event.from_record({"event": "idle_measured", "power_w": 1e-3, "at": 1.0})
    assert isinstance(idle, IdleMeasured) and idle.current_ranges == {}
    new = ranged_events()[1]
    assert Event.from_record(new.to_record()) == new
