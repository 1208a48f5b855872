"""The timer cross-check: the DUT's lap counter against the monitor's samples, per window.

Closed forms: durations built from known periods, a monitor sampling 1% fast, and the virtual
bench's own clocks (SimDut lap lines against the World's edges and the LPM01A's samples).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from drivers.dut.client import DutClient
from drivers.transport import SerialTransport
from protocols.lpm01a.codec import AcquisitionCompleted, EdgeEvent, encode
from rig.errors import AnalysisError
from rig.run.asc import HDK_TIMING, checks_passed, lap_resolution, summarize
from rig.run.events import InstrumentInfo, LatencyRun, SampleClassified, TraceSaved
from rig.traces.analysis.timers import DUT_TICK_S, TIMER_TOLERANCE, timer_agreement
from tests.virtual_bench.test_sim_dut import ByteScoresModel
from tests.virtual_bench.test_sim_lpm01a import Client, samples_of
from virtual_bench.dut import SimDut
from virtual_bench.lpm01a import SimLpm01a
from virtual_bench.world import NS, PowerParams, World


# -- the comparison -------------------------------------------------------------------------------
def test_equal_clocks_agree_and_use_none_of_their_allowance() -> None:
    r = timer_agreement(np.array([10.0, 10.5]), np.array([10.0, 10.5]), sample_period_s=1e-3)
    assert r.ok and r.windows == 2 and r.failed == 0
    assert r.worst_usage == 0.0 and r.worst_relative == 0.0
    assert r.resolution_s == pytest.approx(1e-3 + DUT_TICK_S, abs=1e-15)


def test_a_one_percent_stretch_fails_and_names_the_worst_window() -> None:
    dut = np.array([10.0, 10.0, 20.0])
    emon = dut * np.array([1.0, 1.004, 1.01])
    r = timer_agreement(dut, emon, sample_period_s=1e-3)
    assert not r.ok and r.failed == 1 and r.worst == 2
    assert r.worst_relative == pytest.approx(0.01, rel=1e-12)
    # |0.2 s| against 0.5% x 20 s + 1 ms + 1 µs.
    assert r.worst_usage == pytest.approx(0.2 / (0.1 + 1e-3 + 1e-6), rel=1e-12)


def test_the_limit_is_tolerance_plus_one_tick_of_each_clock() -> None:
    period = 1e-3
    limit = TIMER_TOLERANCE * 2.0 + period + DUT_TICK_S
    on = timer_agreement(np.array([2.0]), np.array([2.0 + limit * (1 - 1e-9)]),
                         sample_period_s=period)
    over = timer_agreement(np.array([2.0]), np.array([2.0 + limit * (1 + 1e-9)]),
                           sample_period_s=period)
    assert on.ok and not over.ok


def test_quantisation_of_a_short_window_is_allowed_only_at_the_monitors_resolution() -> None:
    # A 12.5 ms inference counted as 13 samples at 1 kHz is within one sample; at 100 kHz the
    # same 0.5 ms would be 50 samples off.
    assert timer_agreement(np.array([12.5e-3]), np.array([13e-3]), sample_period_s=1e-3).ok
    assert not timer_agreement(np.array([12.5e-3]), np.array([13e-3]),
                               sample_period_s=1e-5).ok


@pytest.mark.parametrize(("dut", "emon"), [([], []), ([1.0], [1.0, 2.0]), ([0.0], [0.0]),
                                           ([1.0], [float("nan")])])
def test_bad_inputs_are_refused(dut: list[float], emon: list[float]) -> None:
    with pytest.raises(AnalysisError):
        timer_agreement(np.array(dut), np.array(emon), sample_period_s=1e-3)


# -- the check in the summary ---------------------------------------------------------------------
BENCH = {"asc": {"min_run_s": 10.0, "min_iterations": 10}, "emon": {"sample_rate_hz": 1000},
         "dut": {"kind": "mlperf-tiny"}}


def run(index: int, emon_s: float | None, dut_s: float | None, n: int = 800) -> LatencyRun:
    timer, seconds = ("emon", emon_s) if emon_s is not None else ("dut", dut_s)
    return LatencyRun(index=index, iterations=n, elapsed_s=seconds,
                      time_per_inference_s=seconds / n, inferences_per_s=n / seconds,
                      timer=timer, dut_elapsed_s=dut_s, emon_elapsed_s=emon_s)


def check(summary: dict, name: str = "timer agreement") -> dict:
    (found,) = [c for c in summary["checks"] if c["name"] == name]
    return found


def test_healthy_windows_pass_with_both_durations_of_the_worst() -> None:
    events = [run(k, 10.0 + k * 1e-3, 10.0) for k in range(5)]
    events.append(TraceSaved(sample_rate_hz=1000.0))
    s = summarize(events, bench=BENCH)
    c = check(s)
    assert c["ok"] is True and checks_passed(s)
    assert c["worst"]["window"] == "run 4"
    assert (c["worst"]["dut_s"], c["worst"]["emon_s"]) == (10.0, 10.004)
    assert "5 windows timed by both" in c["detail"] and "run 4" in c["detail"]


def test_a_stretched_trace_fails_the_check_and_the_run() -> None:
    events = [run(k, 10.0 * 1.01, 10.0) for k in range(5)]
    s = summarize(events, bench=BENCH)
    c = check(s)
    assert c["ok"] is False and not checks_passed(s)
    assert c["worst"]["relative"] == pytest.approx(0.01, rel=1e-9)
    assert "5 of 5 windows disagree" in c["detail"]
    assert "DUT timer 10.00000 s, monitor 10.10000 s" in c["detail"]
    assert "stretched trace" in c["detail"]


def test_test_samples_are_compared_too() -> None:
    samples = [SampleClassified(index=i, execution_time_s=12.5e-3, timer="dut",
                                dut_time_s=12.5e-3, emon_time_s=14.0e-3) for i in range(3)]
    s = summarize(samples, bench=BENCH)  # 1.5 ms off with 1 ms resolution: beyond the limit
    c = check(s)
    assert c["ok"] is False and c["worst"]["window"] == "sample 0"


def test_energy_firmware_without_a_lap_counter_is_not_applicable() -> None:
    s = summarize([run(k, 10.0, None) for k in range(5)], bench=BENCH)
    c = check(s)
    assert c["ok"] is None
    assert c["detail"].startswith("not applicable: the firmware reports one clock only")
    assert checks_passed(s)  # neither passes nor fails


def test_performance_firmware_has_the_dut_timer_only() -> None:
    s = summarize([run(k, None, 10.0) for k in range(5)], bench=BENCH)
    c = check(s)
    assert c["ok"] is None and "only the DUT's timer" in c["detail"]
    assert checks_passed(s)


def test_events_recorded_before_both_clocks_were_kept_read_as_one_clock() -> None:
    old = LatencyRun(index=0, iterations=800, elapsed_s=10.0, time_per_inference_s=0.0125,
                     inferences_per_s=80.0, timer="emon")
    assert check(summarize([old], bench=BENCH))["ok"] is None


def test_no_windows_no_check() -> None:
    assert all(c["name"] != "timer agreement" for c in summarize([], bench=BENCH)["checks"])


def test_checks_passed_counts_only_real_failures() -> None:
    assert checks_passed({"checks": [{"ok": True}, {"ok": None}]})
    assert not checks_passed({"checks": [{"ok": None}, {"ok": False}]})


def test_simtime_capability_labels_the_timing_simulated() -> None:
    info = InstrumentInfo(role="dut", info={"capabilities": ["bload", "simtime"]})
    xylo = {**BENCH, "dut": {"kind": "xylo", "hdk": True}}
    assert summarize([info, run(0, None, 10.0)], bench=xylo)["timing"].startswith(
        "simulated: XyloSim timesteps x dt")
    hdk = InstrumentInfo(role="dut", info={"capabilities": ["bload", "power"]})
    assert summarize([hdk, run(0, None, 10.0)], bench=xylo)["timing"] == (
        HDK_TIMING + "; its resolution was not reported")
    assert "timing" not in summarize([run(0, None, 10.0)], bench=BENCH)


def test_an_hdk_run_says_how_finely_the_shim_timed_each_inference() -> None:
    """The Xylo shim's m-lap-resolution-us (its poll of the board's readout; issue 35.15) goes
    into each run and the summary gives the coarsest, in whole microseconds."""
    hdk = InstrumentInfo(role="dut", info={"capabilities": ["bload", "power"]})
    xylo = {**BENCH, "dut": {"kind": "xylo", "hdk": True}}
    runs = [replace(run(i, None, 10.0), dut_resolution_s=r)
            for i, r in enumerate((1.4e-3, 1.05e-3))]
    timing = summarize([hdk, *runs], bench=xylo)["timing"]
    assert timing.startswith(HDK_TIMING) and "known to within 1400 us" in timing
    assert lap_resolution(("power-io-uw-12", "lap-resolution-us-1400")) == pytest.approx(1.4e-3)
    assert lap_resolution(("power-io-uw-12",)) is None


# -- the virtual bench's clocks -------------------------------------------------------------------
@pytest.fixture
def sim_dut():
    world = World(speed=1000.0)
    dut = SimDut(world, ByteScoresModel(), timestamp_mode="energy")
    dut.start()
    client = DutClient(SerialTransport(dut.path, 115200, name="DUT"))
    world.power(True)
    assert client.wait_for_boot(timeout_s=5.0) == "energy"
    yield world, dut, client
    client.close()
    dut.close()


@pytest.mark.slow
def test_sim_dut_laps_sit_on_its_edges_and_power_rises_one_warmup_before(sim_dut) -> None:
    """The rise seen before each window's start edge is the warm-up inference, exactly."""
    world, _, client = sim_dut
    client.load(bytes(range(100)))
    before = len(world.falling_edges_between(0, 2**62))
    result = client.infer(40, 1)
    t1, t2 = world.falling_edges_between(0, 2**62)[before:]
    per_ns = round(world.params.inference_s * NS)
    assert result.lap_us == ((t1 - world.power_on_ns) // 1000, (t2 - world.power_on_ns) // 1000)
    assert result.elapsed_us * 1000 == t2 - t1 == 40 * per_ns
    p = world.params
    # Over the 50 ms before the start edge: one warm-up inference at active power, else idle.
    (before_edge,) = world.energy_between(np.array([t1 - 50_000_000, t1]))
    assert before_edge == pytest.approx(p.inference_s * p.active_w
                                        + (0.050 - p.inference_s) * p.idle_w, rel=1e-9)


@pytest.mark.slow
def test_plain_sim_dut_prints_no_laps_in_energy_mode() -> None:
    world = World(speed=1000.0)
    with SimDut(world, ByteScoresModel(), timestamp_mode="energy", extensions=False) as dut:
        client = DutClient(SerialTransport(dut.path, 115200, name="DUT"))
        try:
            world.power(True)
            client.wait_for_boot(timeout_s=5.0)
            client.capabilities = frozenset()
            client.load(bytes(range(100)))
            result = client.infer(5, 0)
            assert result.lap_us == () and result.elapsed_us is None
        finally:
            client.close()


@pytest.mark.slow
@pytest.mark.parametrize("error", [0.0, 0.01])
def test_lpm01a_clock_error_stretches_every_counted_duration(error: float) -> None:
    """Edges 1 s of world time apart are 1000 x (1 + error) nominal samples apart."""
    world = World(PowerParams(idle_w=1.2e-3, active_w=3.6e-3), speed=100)
    sim = SimLpm01a(world, clock_error=error)
    sim.start()
    client = Client(sim.path)
    try:
        for cmd in ("htc", "volt 1800m", "freq 1k", "acqtime 0", "eventsrc d7 fal", "pwr on"):
            client.ok(cmd)
        client.ok("start")
        with world.lock:
            now = world.clock.now_ns()
            pulses = [now + 100_000_000, now + 1_100_000_000]
            for t in pulses:
                world.add_pulse(t)
        world.sleep_until(pulses[-1] + 5_000_000)
        client.port.write(encode("stop"))
        events = client.collect(lambda e: isinstance(e, AcquisitionCompleted))
        values, _ = samples_of(events)
        edges = [e.sample_index for e in events if isinstance(e, EdgeEvent)]
        assert edges[1] - edges[0] == pytest.approx(1000 * (1 + error), abs=1)
        # Every sample is still the world's idle current: only the time base is off.
        np.testing.assert_allclose(values, 1.2e-3 / 1.8, rtol=5.0001e-4)
    finally:
        client.close()
        sim.close()


def test_lpm01a_refuses_an_impossible_clock_error() -> None:
    with pytest.raises(ValueError, match="clock_error"):
        SimLpm01a(World(), clock_error=-1.0)
