"""The virtual bench can be noisy: `[sim] current_noise_a` (white Gaussian noise on every current
sample a simulated monitor reports) and `drift` (each timed run's active power drawn anew),
seeded by `noise_seed`; both off by default, and then every sample is the noiseless value.

The bounds are closed-form. Current noise sigma on N samples of a constant current I: the sample
mean is within 5.5 sigma/sqrt(N) of I and the sample standard deviation s has |s/sigma - 1| <
5.5/sqrt(2N) (s/sigma is about normal with standard deviation 1/sqrt(2N)); each fails with
probability 3.8e-8 for a noise drawn at random. Drift d over n = 400 runs: (n-1) s^2 / d^2 is
chi-square with n-1 degrees of freedom (s: the relative standard deviation of the per-run active
power), inside [0.6911, 1.3854] x (n-1) but with probability 1e-6 (the 5e-7 and 1 - 5e-7
quantiles, scipy.stats.chi2.ppf / isf(5e-7, 399) / 399); the mean within 4.9 d/sqrt(n) (two-sided
1e-6). The seeds are fixed, so these tests are deterministic: the bounds say that a seed picked
at random fails them with probability below 1e-6, not that they flake.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from drivers.dut.client import DutClient
from drivers.transport import SerialTransport
from virtual_bench.bus import SimBusServer
from virtual_bench.description import load_description
from virtual_bench.dut import SimDut
from virtual_bench.errors import EXIT_CODE, BenchFileError
from virtual_bench.joulescope import WorldSource
from virtual_bench.world import NS, Noise, PowerParams, World

from ..e2e.runs import REPO, run_rig
from .test_sim_bus import server
from .test_sim_dut import DATA, ByteScoresModel

PARAMS = PowerParams(idle_w=1.2e-3, active_w=3.6e-3)
VOLTS = 1.8
I_IDLE = PARAMS.idle_w / VOLTS  # 0.667 mA
SIGMA = 20e-6  # 20 uA
N = 200_000
PERIOD_NS = 10_000  # 100 kHz
K = 5.5  # the normal bound (two-sided 3.8e-8 each)
#: chi-square(399) quantiles at 5e-7 and 1 - 5e-7, over 399 (scipy.stats.chi2).
CHI2_LOW, CHI2_HIGH = 0.6911083861193165, 1.3853942999555666
RUNS = 400


def constant_world(noise: Noise) -> World:
    """A world at idle power from t = 0 (steps placed by hand: no host clock involved)."""
    world = World(PARAMS, noise=noise)
    world.set_supply(VOLTS)
    with world.lock:
        world.powered = True
        world._step_t[:] = [0]
        world._step_w[:] = [PARAMS.idle_w]
    return world


def by_mean_current(world: World) -> np.ndarray:
    """N samples as the N6705, 34465A, Otii and PPK2 simulators take them."""
    return world.mean_current(np.arange(N, dtype=np.int64) * PERIOD_NS, PERIOD_NS)


def by_measured_energy(world: World) -> np.ndarray:
    """N samples as the LPM01A and Joulescope simulators take them (energy / (V dt))."""
    bounds = np.arange(N + 1, dtype=np.int64) * PERIOD_NS
    return world.measured_energy(bounds) / (VOLTS * PERIOD_NS / NS)


def assert_noise_is(samples: np.ndarray, truth: float, sigma: float) -> None:
    n = len(samples)
    mean, s = float(np.mean(samples)), float(np.std(samples, ddof=1))
    assert abs(mean - truth) < K * sigma / math.sqrt(n), (mean, truth)
    assert abs(s / sigma - 1) < K / math.sqrt(2 * n), s / sigma
    # White: neighbouring samples are uncorrelated (lag-1 correlation ~ N(0, 1/n)).
    x = samples - mean
    assert abs(float(np.dot(x[:-1], x[1:]) / np.dot(x, x))) < K / math.sqrt(n)


# -- current noise ------------------------------------------------------------------------------
@pytest.mark.parametrize("sample", [by_mean_current, by_measured_energy])
def test_current_noise_has_the_configured_standard_deviation(sample) -> None:
    samples = sample(constant_world(Noise(current_a=SIGMA, seed=7)))
    assert_noise_is(samples, I_IDLE, SIGMA)


def test_both_sampling_paths_add_the_same_noise_to_the_same_sample() -> None:
    """Every monitor family sees one noise: a sample over [s, e) reads alike through either
    path, and alike when read again (a repeated FETCH), in any blocks."""
    world = constant_world(Noise(current_a=SIGMA, seed=3))
    a, b = by_mean_current(world), by_measured_energy(world)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    again = np.concatenate([world.mean_current(np.arange(k, k + 1000, dtype=np.int64)
                                               * PERIOD_NS, PERIOD_NS)
                            for k in range(0, 5000, 1000)])
    np.testing.assert_array_equal(again, a[:5000])
    other_seed = by_mean_current(constant_world(Noise(current_a=SIGMA, seed=4)))
    assert not np.allclose(other_seed, a)


def test_a_joulescope_capture_carries_the_noise() -> None:
    """The simulated Joulescope's own stream (what the rig's driver reads over loopback)."""
    world = World(PARAMS, speed=2000.0, noise=Noise(current_a=SIGMA, seed=11))
    world.set_supply(VOLTS)
    world.power(True)
    source = WorldSource(world, 100_000)
    source.start()
    blocks = []
    deadline = time.monotonic() + 30.0
    while sum(len(b.current) for b in blocks) < 50_000 and time.monotonic() < deadline:
        block = source.read(0.05)
        if block is not None:
            blocks.append(block)
    current = np.concatenate([b.current for b in blocks]).astype(np.float64)
    assert len(current) >= 50_000
    assert_noise_is(current, I_IDLE, SIGMA)


def test_with_both_off_the_samples_are_exactly_the_noiseless_values(monkeypatch) -> None:
    quiet = constant_world(Noise(current_a=0.0, drift=0.0, seed=123))
    plain = constant_world(Noise())
    np.testing.assert_array_equal(by_mean_current(quiet), by_mean_current(plain))
    np.testing.assert_array_equal(by_measured_energy(quiet), by_measured_energy(plain))
    np.testing.assert_allclose(by_mean_current(quiet), I_IDLE, rtol=1e-9)  # float rounding
    bounds = np.arange(11, dtype=np.int64) * PERIOD_NS
    np.testing.assert_array_equal(quiet.measured_energy(bounds), quiet.energy_between(bounds))
    # Off costs nothing: no noise is computed, no drift drawn.
    monkeypatch.setattr(World, "_sample_noise", lambda *a: pytest.fail("noise computed"))
    by_mean_current(quiet), by_measured_energy(quiet)
    assert [quiet.begin_run() for _ in range(3)] == [PARAMS.active_w] * 3


# -- drift ----------------------------------------------------------------------------------------
def per_run_active_power(world: World, runs: int, run_ns: int = NS) -> np.ndarray:
    """Each run's active power [W] as a monitor measures it over the run."""
    powers = []
    for k in range(runs):
        world.begin_run()
        t0 = (2 * k + 1) * run_ns
        world.add_activity(t0, t0 + run_ns)
        powers.append(float(world.mean_current(np.array([t0]), run_ns)[0]) * VOLTS)
    return np.asarray(powers)


def test_drift_gives_the_configured_relative_spread_across_runs() -> None:
    d = 0.05
    p = per_run_active_power(constant_world(Noise(drift=d, seed=5)), RUNS)
    rel = p / PARAMS.active_w
    s = float(np.std(rel, ddof=1))
    assert CHI2_LOW < (s / d) ** 2 < CHI2_HIGH, s / d
    assert abs(float(np.mean(rel)) - 1.0) < 4.9 * d / math.sqrt(RUNS)
    # Exactly the closed form: active_w (1 + d z_k), z_k the seed's k-th normal draw.
    z = np.random.default_rng([5, 1]).standard_normal(RUNS)
    np.testing.assert_allclose(p, PARAMS.active_w * (1 + d * z), rtol=1e-9)


def test_drift_holds_within_a_run_and_leaves_idle_alone() -> None:
    world = constant_world(Noise(drift=0.1, seed=2))
    level = world.begin_run()
    world.add_activity(NS, 2 * NS)
    world.add_activity(2 * NS, 3 * NS)  # the warm-up and the timed window: one run, one level
    e = world.energy_between(np.array([0, NS, 2 * NS, 3 * NS, 4 * NS]))
    np.testing.assert_allclose(e, [PARAMS.idle_w, level, level, PARAMS.idle_w], rtol=1e-12)
    assert level != PARAMS.active_w


def test_the_sim_bus_draws_a_level_per_compute_span() -> None:
    world = World(PARAMS, speed=1000.0, noise=Noise(drift=0.1, seed=9))
    world.power(True)
    z = np.random.default_rng([9, 1]).standard_normal(2)
    for k in range(2):
        bus: SimBusServer = server(world)
        t0 = int(bus.handle("begin"))
        bus.handle(f"act {t0} {t0 + NS}")
        bus.handle(f"end {t0 + NS}")
        assert bus.handle(f"wait {t0 + NS}") == "ok"  # the next span starts after this one
        (energy,) = world.energy_between(np.array([t0, t0 + NS]))
        assert energy == pytest.approx(PARAMS.active_w * (1 + 0.1 * z[k]), rel=1e-12)


def test_the_python_dut_draws_a_level_per_infer_command() -> None:
    world = World(PARAMS, speed=1000.0, noise=Noise(drift=0.1, seed=9))
    dut = SimDut(world, ByteScoresModel(), timestamp_mode="energy")
    dut.start()
    client = DutClient(SerialTransport(dut.path, 115200, name="DUT"))
    try:
        world.power(True)
        client.wait_for_boot(timeout_s=5.0)
        client.load(DATA)
        z = np.random.default_rng([9, 1]).standard_normal(3)
        per_ns = round(PARAMS.inference_s * NS)
        for k in range(3):
            before = len(world.falling_edges_between(0, 2**62))
            client.infer(8, 1)
            t1, t2 = world.falling_edges_between(0, 2**62)[before:]
            (energy,) = world.energy_between(np.array([t1, t2]))
            assert energy == pytest.approx(8 * per_ns / NS * PARAMS.active_w
                                           * (1 + 0.1 * z[k]), rel=1e-9)
    finally:
        client.close()
        dut.close()


# -- the bench file -------------------------------------------------------------------------------
def _bench(tmp_path: Path, sim: str) -> Path:
    path = tmp_path / "b.toml"
    path.write_text(f"[bench]\nvoltage_limit_v = 3.3\n[sim]\n{sim}\n")
    return path


def test_the_keys_reach_the_description_and_default_to_off(tmp_path: Path) -> None:
    own = load_description(_bench(tmp_path, "current_noise_a = 1e-6\ndrift = 0.02\n"
                                            "noise_seed = 42"))
    assert (own.current_noise_a, own.drift, own.noise_seed) == (1e-6, 0.02, 42)
    off = load_description(_bench(tmp_path, ""))
    assert (off.current_noise_a, off.drift, off.noise_seed) == (0.0, 0.0, 0)


def test_the_rig_hands_the_keys_to_its_virtual_bench(tmp_path: Path) -> None:
    """The rig serves the bench as it holds it (`bench_to_toml` into the child's file)."""
    import tomllib

    from rig.bench.config import load_bench
    from rig.bench.saving import bench_to_toml
    from virtual_bench.description import parse_description

    text = (REPO / "benches" / "sim.toml").read_text()
    path = tmp_path / "noisy.toml"
    path.write_text(text.replace("[sim]\n", "[sim]\ncurrent_noise_a = 2e-6\ndrift = 0.03\n"
                                 "noise_seed = 17\n", 1))
    own = parse_description(tomllib.loads(bench_to_toml(load_bench(path))), path)
    assert (own.current_noise_a, own.drift, own.noise_seed) == (2e-6, 0.03, 17)


@pytest.mark.parametrize(("line", "message"), [
    ("current_noise_a = -1e-6", "[sim] current_noise_a: expected a finite number >= 0, found "
     "-1e-06"),
    ("current_noise_a = nan", "[sim] current_noise_a: expected a finite number >= 0, found nan"),
    ("drift = -0.1", "[sim] drift: expected a finite number >= 0, found -0.1"),
    ("drift = inf", "[sim] drift: expected a finite number >= 0, found inf"),
    ("drift = \"big\"", "[sim] drift: expected a number, found 'big'"),
    ("noise_seed = -1", "[sim] noise_seed: expected an integer in [0, 4294967295], found -1"),
    ("noise_seed = 1.5", "[sim] noise_seed: expected an integer in [0, 4294967295], found 1.5"),
])
def test_a_bad_noise_key_is_refused_naming_it(tmp_path: Path, line: str, message: str) -> None:
    path = _bench(tmp_path, line)
    with pytest.raises(BenchFileError) as info:
        load_description(path)
    assert info.value.message == f"{path}: {message}"
    assert "\n" not in info.value.message



@pytest.mark.parametrize("value", ["nan", "-1e-6", "inf"])
def test_rig_and_virtual_bench_refuse_a_bad_noise_with_one_line_and_exit_2(
        tmp_path: Path, value: str) -> None:
    """The rig refuses it as it loads the file (nothing written, no virtual bench started);
    the virtual bench, given the file itself, refuses it too."""
    text = (REPO / "benches" / "sim.toml").read_text()
    bench = tmp_path / "noisy.toml"
    bench.write_text(text.replace("[sim]\n", f"[sim]\ncurrent_noise_a = {value}\n", 1))
    runs = tmp_path / "runs"
    done = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{bench}: [sim] current_noise_a:" in lines[0], done.stderr
    assert not runs.exists()
    proc = subprocess.run([sys.executable, "-m", "virtual_bench", str(bench)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == EXIT_CODE == 2
    said = json.loads(proc.stdout)
    assert said["error"].startswith(f"{bench}: [sim] current_noise_a: expected a finite number")

# -- the budget's Type A on a noisy run set (rig.traces.analysis.uncertainty) ------------------
def test_type_a_of_a_drifting_run_set_is_the_closed_form() -> None:
    """The budget's `type_a` over the per-run active powers is s/sqrt(n), and s/(d P) lies in
    the same chi-square bound: u_A = d P / sqrt(n) within it, nu = n - 1. (The Type A a run
    reports in its summary is to be compared with the closed form once the run reports one.)"""
    from rig.traces.analysis.uncertainty import type_a

    d = 0.05
    p = per_run_active_power(constant_world(Noise(drift=d, seed=5)), RUNS)
    u = type_a("active power", p.tolist(), source="the runs")
    closed_form = d * PARAMS.active_w / math.sqrt(RUNS)
    assert u.value is not None and u.dof == RUNS - 1
    assert CHI2_LOW < (u.value / closed_form) ** 2 < CHI2_HIGH, u.value / closed_form
