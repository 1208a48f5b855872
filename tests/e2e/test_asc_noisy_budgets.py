"""The GUM budgets of a virtual-bench ASC run against closed forms (issue 37 part 6): the
reported Type A on a noisy bench, and the Type B terms computed by hand for two instruments at
the bench's known currents.

Type A, drift d (``[sim] drift``): timed run k's active power is P_a (1 + d z_j), z_j the j-th
normal draw of ``numpy.random.default_rng([noise_seed, 1])``. Every compute span draws once, in
the order the DUT starts them: the calibration ``infer`` (1 draw), then, with the C shim, each
``timestamp`` (the idle span's 2; the Python DUT draws for ``infer`` only), then the timed runs.
So run k has j = offset + k, offset 3 (C shim) or 1 (Python DUT).

The budget's Type A of active power is s/sqrt(n) of the windows' mean powers, nu = n - 1
(`rig.run.asc_uncertainty`); that is checked to 1e-9 relative against the events' values. Those
values are P_a (1 + d z_j) only to the LPM01A's resolution, not to 1e-9: the board (and so its
simulator) sends every sample as ascii_dec rounded to 4 significant digits (a constant current
reads up to 5e-4 relative off, in every sample alike), and a window's two edge samples may be
partly outside the activity (each up to (P_k - P_i)/N of the mean, N samples in the window). So
|p_k - m_k| <= e_k = 5e-4 m_k + 2 (m_k - P_i)/N_k, and since s is a seminorm,
|s(p) - s(m)| <= s(p - m) <= max e_k sqrt(n/(n - 1)): the reported Type A is within
max e_k / sqrt(n - 1) of the closed form s(m)/sqrt(n). (The float32 trace is not the limit: the
windows are measured from the driver's float64 samples.)

Type A, current noise sigma only: each window mean carries sigma V/sqrt(N) of white noise, so
(n - 1) s^2 / (sigma V)^2 N is chi-square(n - 1) (up to the same e_k): the Type A is below
sqrt(8.711) sigma V/sqrt(N n) + max e_k/sqrt(n - 1) but with probability 5e-7 (8.711 = the
chi-square(4) 1 - 5e-7 quantile / 4, scipy.stats.chi2.isf(5e-7, 4) / 4).

Type B by hand: (a) the LPM01A, 2 % of reading in its dynamic range (UM2243 §10), rectangular:
0.02 P/sqrt(3) on idle and active power, 0.02 (P_a - P_i)/sqrt(3) on dynamic power (one range,
one gain: correlated), 0.02 E/sqrt(3) on energy per inference; (b) the Otii Arc, low range
±(0.1 % of reading + 50 nA): the Arc auto-ranges, records no range and Qoitech publishes no
switch-over current, so the rig reports that term as not published (asserted, with its
message); the low range's arithmetic is checked on the same run's events with the range named
"low" (what the budget does once the range is known): gain 0.001 I V/sqrt(3) = 0.001 P/sqrt(3)
(correlated between idle and active), offset 50e-9 V/sqrt(3) on each (independent: the
module's documented model counts it twice), so dynamic power has
sqrt((0.001 (P_a - P_i))^2 + 2 (50e-9 V)^2)/sqrt(3) from the current.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.accuracy import NOT_PUBLISHED
from drivers.emon.otii import otii_accuracy
from rig.run.asc_uncertainty import asc_budgets
from rig.run.events import Event, InstrumentInfo

from .runs import bench_variant, events, only_run, run_rig

pytestmark = pytest.mark.slow

P_IDLE, P_ACTIVE, VOLTS = 1.20e-3, 3.60e-3, 1.8  # benches/sim.toml [sim], [emon]
E_INFERENCE = P_ACTIVE * 12.5e-3  # J: active power x inference_ms
SQRT3 = math.sqrt(3)
LPM01A_GAIN = 0.02  # UM2243 §10, dynamic mode
ARC_GAIN, ARC_OFFSET_A = 0.001, 50e-9  # Qoitech: Otii Arc low range
#: The LPM01A's ascii_dec samples: 4 significant digits (relative half-step at most 5e-4).
ROUNDING = 5e-4
#: chi-square(4) 1 - 5e-7 quantile over 4 (scipy.stats.chi2.isf(5e-7, 4) / 4).
CHI2_4_HIGH = 8.711107506265357
#: chi-square(9) 5e-7 and 1 - 5e-7 quantiles over 9 (scipy.stats.chi2.ppf / isf(5e-7, 9) / 9).
CHI2_9_LOW, CHI2_9_HIGH = 0.02168815880995797, 5.159426302448233
RUNS = 5


def sim_run(tmp_path: Path, name: str, sim_keys: str, *, base: str = "sim",
            runs: int = RUNS) -> tuple[dict, Path, list[dict]]:
    """A short `rig measure asc --json` on benches/<base>.toml: `runs` timed runs of 1 s, one
    test sample per class, `sim_keys` added to [sim]."""
    short = {"sim": dict(spc=("samples_per_class = 10", "samples_per_class = 1"),
                         idle=("idle_s = 2.0", "idle_s = 1.0")),
             "sim-otii": dict(spc=("samples_per_class = 2", "samples_per_class = 1"))}[base]
    bench = bench_variant(tmp_path, name, base=base, runs=("runs = 5", f"runs = {runs}"),
                          run_s=("min_run_s = 10.0", "min_run_s = 1.0"),
                          sim=("[sim]\n", "[sim]\n" + sim_keys), **short)
    runs_dir = tmp_path / f"runs-{name}"
    proc = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    run = only_run(runs_dir)
    return out, run, events(run)


def components(budget: dict) -> dict[str, dict]:
    return {c["name"]: c for c in budget["components"]}


def windows(evs: list[dict]) -> list[dict]:
    return [e for e in evs if e["event"] == "window_measured"]


def sd_of_mean(values) -> float:
    v = np.asarray(values, dtype=np.float64)
    return float(np.std(v, ddof=1) / math.sqrt(len(v)))


def resolution_bound(model_w: np.ndarray, samples: np.ndarray) -> np.ndarray:
    """e_k: how far a window's mean power may be from its true level (4-digit samples, two
    edge samples partly idle)."""
    return ROUNDING * model_w + 2 * (model_w - P_IDLE) / samples


# -- Type A ------------------------------------------------------------------------------------
DRIFT, SEED = 0.02, 3


@pytest.fixture(scope="module")
def drift_run(tmp_path_factory):
    return sim_run(tmp_path_factory.mktemp("drift"), "drift",
                   f"drift = {DRIFT}\nnoise_seed = {SEED}\n")


def test_type_a_is_s_over_root_n_of_the_windows_with_n_minus_1_dof(drift_run) -> None:
    out, _, evs = drift_run
    budgets = out["summary"]["uncertainty"]
    ws = windows(evs)
    assert len(ws) == RUNS
    power = components(budgets["active_power_w"])["active power: repeatability"]
    assert power["type"] == "A" and power["dof"] == RUNS - 1
    assert power["value"] == pytest.approx(sd_of_mean([w["mean_power_w"] for w in ws]),
                                           rel=1e-9)
    energy = components(budgets["energy_per_inference_j"])["energy per inference: repeatability"]
    assert energy["type"] == "A" and energy["dof"] == RUNS - 1
    per_inference = [w["energy_per_inference_j"] for w in ws]
    assert energy["value"] == pytest.approx(sd_of_mean(per_inference), rel=1e-9)
    # E_k = p_k T_k / N_k: the energy's Type A is the power's carried by each window's T/N.
    assert per_inference == pytest.approx(
        [w["mean_power_w"] * w["duration_s"] / w["iterations"] for w in ws], rel=1e-9)
    # The drift is what the Type A sees: far above the noiseless bench's (rounding and edges).
    assert power["value"] > 0.2 * DRIFT * P_ACTIVE / math.sqrt(RUNS)


def test_the_windows_are_the_drawn_levels_and_type_a_their_closed_form(drift_run) -> None:
    out, run, evs = drift_run
    manifest = json.loads((run / "manifest.json").read_text())
    c_shim = manifest["instruments"]["virtual_bench"]["dut"].startswith("c-shim")
    offset = 1 + (2 if c_shim else 0)  # calibration infer; the C shim's 2 idle timestamps
    z = np.random.default_rng([SEED, 1]).standard_normal(offset + RUNS)[offset:]
    model = P_ACTIVE * (1 + DRIFT * z)
    ws = windows(evs)
    p = np.array([w["mean_power_w"] for w in ws])
    n_samples = np.array([w["end_sample"] - w["start_sample"] for w in ws], dtype=np.float64)
    bound = resolution_bound(model, n_samples)
    assert np.all(np.abs(p - model) <= bound), (p / model - 1, bound / model)
    # Not the draws one span earlier or later: the runs took exactly these (one draw could
    # fall within the bound by chance, as the draws are dense; five in a row do not).
    draws = np.random.default_rng([SEED, 1]).standard_normal(offset + RUNS + 1)
    for shift in (-1, 1):
        other = P_ACTIVE * (1 + DRIFT * draws[offset + shift:offset + shift + RUNS])
        assert not np.all(np.abs(p - other) <= bound), shift
    closed_form = sd_of_mean(model)
    reported = components(out["summary"]["uncertainty"]["active_power_w"])[
        "active power: repeatability"]["value"]
    assert abs(reported - closed_form) <= bound.max() / math.sqrt(RUNS - 1), (
        reported, closed_form)


SIGMA = 100e-6  # A: 6.7 sigma below the idle current, so no sample goes negative


@pytest.fixture(scope="module")
def noise_run(tmp_path_factory):
    return sim_run(tmp_path_factory.mktemp("noise"), "noise",
                   f"current_noise_a = {SIGMA}\nnoise_seed = 11\n")


def test_current_noise_alone_gives_a_small_type_a_within_its_chi_square_bound(noise_run) -> None:
    out, _, evs = noise_run
    s = out["summary"]
    ws = windows(evs)
    n_samples = np.array([w["end_sample"] - w["start_sample"] for w in ws], dtype=np.float64)
    power = components(s["uncertainty"]["active_power_w"])["active power: repeatability"]
    assert power["dof"] == RUNS - 1
    assert power["value"] == pytest.approx(sd_of_mean([w["mean_power_w"] for w in ws]),
                                           rel=1e-9)
    sigma_mean = SIGMA * VOLTS / math.sqrt(n_samples.min())  # one window mean's noise [W]
    edges = resolution_bound(np.full(RUNS, P_ACTIVE), n_samples).max()
    assert power["value"] <= (math.sqrt(CHI2_4_HIGH) * sigma_mean / math.sqrt(RUNS)
                              + edges / math.sqrt(RUNS - 1)), power["value"]
    assert power["value"] < 3e-3 * P_ACTIVE  # small: under 0.3 % of the active power
    # The mean over every window's samples: within 4.9 sigma V/sqrt(sum N) (two-sided 1e-6)
    # of the active level, up to the same rounding and edges.
    assert abs(s["active_power_w"] - P_ACTIVE) <= (
        4.9 * SIGMA * VOLTS / math.sqrt(n_samples.sum()) + edges), s["active_power_w"]


def test_idle_type_a_is_its_ten_sub_spans_within_their_chi_square_bounds(noise_run) -> None:
    """The one idle span, split into ten near-equal sub-spans of N_j samples: each sub-span's
    mean carries sigma V/sqrt(N_j) of white noise, so the batch means' s/sqrt(10) (nu = 9) lies
    between sqrt(q_lo) and sqrt(q_hi) times sigma V/sqrt(10 N), q the chi-square(9) 5e-7 and
    1 - 5e-7 quantiles over 9, up to the 4-digit samples' rounding (5e-4 of the level, at
    most that over sqrt(9) on s/sqrt(n))."""
    out, _, evs = noise_run
    idle = next(e for e in evs if e["event"] == "idle_measured")
    edges = np.asarray(idle["sub_span_edges"], dtype=np.int64)
    powers = np.asarray(idle["sub_span_powers_w"], dtype=np.float64)
    assert len(edges) == 11 and len(powers) == 10
    assert edges[0] == idle["start_sample"] and edges[-1] == idle["end_sample"]
    counts = np.diff(edges)
    # Near-equal: each within 1/IDLE_CHECKPOINTS (200) of the span from an equal split.
    span = idle["end_sample"] - idle["start_sample"]
    assert np.all(np.abs(counts - span / 10) <= 2 * span / 200 + 1), counts
    term = components(out["summary"]["uncertainty"]["idle_power_w"])["idle power: repeatability"]
    assert term["dof"] == 9 and term["type"] == "A"
    assert term["value"] == pytest.approx(sd_of_mean(powers), rel=1e-9)
    rounding = ROUNDING * P_IDLE / 3.0
    low = math.sqrt(CHI2_9_LOW) * SIGMA * VOLTS / math.sqrt(10 * counts.max()) - rounding
    high = math.sqrt(CHI2_9_HIGH) * SIGMA * VOLTS / math.sqrt(10 * counts.min()) + rounding
    assert low > 0 and low <= term["value"] <= high, (low, term["value"], high)
    # The sub-spans' powers average to the span's (equal lengths, to one checkpoint).
    assert float(np.average(powers, weights=counts)) == pytest.approx(idle["power_w"], rel=1e-9)


# -- Type B by hand: the LPM01A ----------------------------------------------------------------
@pytest.fixture(scope="module")
def lpm01a_run(tmp_path_factory):
    return sim_run(tmp_path_factory.mktemp("lpm01a"), "lpm01a", "", runs=3)


def test_lpm01a_gain_terms_are_two_percent_of_each_power_over_root_3(lpm01a_run) -> None:
    out, _, _ = lpm01a_run
    s = out["summary"]
    budgets = s["uncertainty"]
    p_i, p_a = s["idle_power_w"], s["active_power_w"]
    # The measured powers are the bench's model (to the 4-digit samples and the edges).
    assert p_i == pytest.approx(P_IDLE, rel=2e-3) and p_a == pytest.approx(P_ACTIVE, rel=2e-3)
    group = "lpm01a current gain, dynamic range"
    for key, what, power, model in (("idle_power_w", "idle", p_i, P_IDLE),
                                    ("active_power_w", "active", p_a, P_ACTIVE)):
        gain = components(budgets[key])[f"{what} power: current gain (dynamic range)"]
        assert gain["type"] == "B" and gain["dof"] == "inf" and gain["published"]
        assert gain["correlation_group"] == group and "UM2243" in gain["source"]
        assert gain["value"] == pytest.approx(LPM01A_GAIN * power / SQRT3, rel=1e-9)
        assert gain["value"] == pytest.approx(LPM01A_GAIN * model / SQRT3, rel=2e-3)
        # No offset is published for the dynamic mode: no offset term.
        assert not any("offset" in name for name in components(budgets[key]))
    energy = components(budgets["energy_per_inference_j"])[
        "energy per inference: current gain (dynamic range)"]
    assert energy["value"] == pytest.approx(
        LPM01A_GAIN * s["energy_per_inference_j"] / SQRT3, rel=1e-9)
    assert energy["value"] == pytest.approx(LPM01A_GAIN * E_INFERENCE / SQRT3, rel=2e-3)


def test_lpm01a_gain_on_dynamic_power_is_two_percent_of_the_difference(lpm01a_run) -> None:
    """One range, one gain: +0.02 P_a/sqrt(3) and -0.02 P_i/sqrt(3) add linearly. The supply
    (set; ST publishes no setting accuracy) is unknown, so its group is left out; the single
    idle span's Type A comes from its ten sub-spans (batch means, nu = 9):
    u_c = sqrt(u_A(active)^2 + u_A(idle)^2 + (0.02 (P_a - P_i)/sqrt(3))^2)."""
    s = lpm01a_run[0]["summary"]
    dynamic = s["uncertainty"]["dynamic_power_w"]
    parts = components(dynamic)
    assert parts["active power: current gain (dynamic range)"]["sign"] == 1
    assert parts["idle power: current gain (dynamic range)"]["sign"] == -1
    gain = LPM01A_GAIN * (s["active_power_w"] - s["idle_power_w"]) / SQRT3
    type_a = parts["active power: repeatability"]["value"]
    idle_a = parts["idle power: repeatability"]
    assert idle_a["dof"] == 9 and idle_a["sign"] == -1
    assert dynamic["u_c"] == pytest.approx(math.hypot(type_a, idle_a["value"], gain), rel=1e-9)
    assert gain == pytest.approx(LPM01A_GAIN * (P_ACTIVE - P_IDLE) / SQRT3, rel=3e-3)
    assert not dynamic["complete"]
    assert set(dynamic["unknown"]) == {"active power: supply voltage",
                                       "idle power: supply voltage"}


# -- Type B by hand: the Otii Arc -------------------------------------------------------------
@pytest.fixture(scope="module")
def otii_run(tmp_path_factory):
    return sim_run(tmp_path_factory.mktemp("otii"), "otii", "", base="sim-otii", runs=2)


def test_the_auto_ranged_arc_s_current_term_is_reported_not_published(otii_run) -> None:
    out, _, evs = otii_run
    s = out["summary"]
    (info,) = [e["info"] for e in evs if e["event"] == "instrument_info" and e["role"] == "emon"]
    assert info["model"] == "Arc" and info["current_range"] == "auto"
    for key, what in (("idle_power_w", "idle"), ("active_power_w", "active")):
        budget = s["uncertainty"][key]
        term = components(budget)[f"{what} power: otii current"]
        assert term["value"] is None and term["published"] is False
        message = otii_accuracy("Arc").current_half_width(s[key] / VOLTS)
        assert term["source"] == message.message
        assert term["source"].startswith(f"{NOT_PUBLISHED}: the current range of a ")
        assert "full scale not published" in term["source"]
        assert f"{what} power: otii current" in budget["unknown"] and not budget["complete"]


def test_the_arc_s_low_range_terms_by_hand(otii_run) -> None:
    """The run's events with the range named "low" (the Otii driver accepts only "auto", so no
    run records it): the budget takes the Arc's ±(0.1 % + 50 nA) at I = P/V."""
    out, run, evs = otii_run
    s = out["summary"]
    manifest = json.loads((run / "manifest.json").read_text())
    replayed: list[Event] = []
    for record in evs:
        event = Event.from_record(record)
        if isinstance(event, InstrumentInfo) and event.role == "emon":
            event = InstrumentInfo(role="emon", info={**event.info, "current_range": "low"})
        replayed.append(event)
    # Unchanged, the replay gives what the run reported (same inputs, same budgets).
    as_run = asc_budgets([Event.from_record(r) for r in evs], s, manifest["bench"])
    assert {k: b.to_json() for k, b in as_run.items()} == s["uncertainty"]
    budgets = {k: b.to_json() for k, b in asc_budgets(replayed, s, manifest["bench"]).items()}

    p_i, p_a = s["idle_power_w"], s["active_power_w"]
    # Noiseless float samples at 4 kS/s: the measured powers are the model's but for edges.
    assert p_i == pytest.approx(P_IDLE, rel=1e-5) and p_a == pytest.approx(P_ACTIVE, rel=1e-5)
    offset = ARC_OFFSET_A * VOLTS / SQRT3  # W, the same at any current
    for key, what, power, model in (("idle_power_w", "idle", p_i, P_IDLE),
                                    ("active_power_w", "active", p_a, P_ACTIVE)):
        parts = components(budgets[key])
        current = power / VOLTS  # the known current
        gain = parts[f"{what} power: current gain (low range)"]
        assert gain["value"] == pytest.approx(ARC_GAIN * current * VOLTS / SQRT3, rel=1e-9)
        assert gain["value"] == pytest.approx(ARC_GAIN * model / SQRT3, rel=1e-5)
        assert gain["correlation_group"] == "otii current gain, low range"
        assert "Otii Arc ±(0.1 % + 50 nA)" in gain["source"]
        off = parts[f"{what} power: current offset (low range)"]
        assert off["value"] == pytest.approx(offset, rel=1e-9)
        assert off["correlation_group"] is None and off["type"] == "B"
        # The whole current half-width a = 0.001 I + 50 nA, as a power a V/sqrt(3), splits
        # into those two rectangular terms (gain + offset = a V/sqrt(3), added linearly).
        a = ARC_GAIN * current + ARC_OFFSET_A
        assert gain["value"] + off["value"] == pytest.approx(a * VOLTS / SQRT3, rel=1e-9)

    dynamic = budgets["dynamic_power_w"]
    parts = components(dynamic)
    current_term = math.sqrt((ARC_GAIN * (p_a - p_i) / SQRT3) ** 2 + 2 * offset ** 2)
    type_a = parts["active power: repeatability"]["value"]
    idle_a = parts["idle power: repeatability"]["value"]
    # The voltage (measured; not published) is unknown and its group left out; idle's Type A
    # is its sub-spans' (batch means).
    assert dynamic["u_c"] == pytest.approx(math.hypot(type_a, idle_a, current_term), rel=1e-9)
    assert current_term == pytest.approx(math.sqrt(
        (ARC_GAIN * (P_ACTIVE - P_IDLE) / SQRT3) ** 2 + 2 * offset ** 2), rel=1e-5)
    assert type_a < 1e-6 * current_term  # a noiseless bench: the current term is all of u_c
    assert set(dynamic["unknown"]) == {"active power: supply voltage",
                                       "idle power: supply voltage"}
