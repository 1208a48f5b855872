"""A Xylo HDK run's execution time is the mean over its test samples, each one `infer 1 0` with
its own ``m-lap-resolution-us``: the samples record theirs (`SampleClassified.dut_resolution_s`)
and the summary's "known to within" covers them, not only the timed runs' (which it did alone
before, so a sample timed more coarsely than every run was claimed to be known more finely)."""

from __future__ import annotations

from rig.run.asc import HDK_TIMING, summarize
from rig.run.events import Event, InstrumentInfo, LatencyRun, SampleClassified

HDK = InstrumentInfo(role="dut", info={"capabilities": ["bload", "power", "rcrc"]})
XYLO = {"asc": {"min_run_s": 0.5}, "dut": {"kind": "xylo", "hdk": True}}


def runs(*resolutions: float) -> list[Event]:
    return [LatencyRun(index=i, iterations=10, elapsed_s=0.63, time_per_inference_s=0.063,
                       inferences_per_s=1 / 0.063, timer="dut", dut_elapsed_s=0.63,
                       dut_resolution_s=r) for i, r in enumerate(resolutions)]


def samples(*resolutions: float | None) -> list[Event]:
    return [SampleClassified(index=i, execution_time_s=0.063, timer="dut", dut_time_s=0.063,
                             dut_resolution_s=r) for i, r in enumerate(resolutions)]


def test_a_sample_timed_more_coarsely_than_every_run_sets_the_stated_resolution() -> None:
    timing = summarize([HDK, *runs(1.05e-3, 1.4e-3), *samples(1.1e-3, 4.2e-3)],
                       bench=XYLO)["timing"]
    assert timing.startswith(HDK_TIMING) and "known to within 4200 us" in timing


def test_samples_alone_state_it_and_runs_recorded_before_the_field_still_read() -> None:
    # An accuracy-only run has no timed runs: its samples say how finely they were timed.
    assert "within 1300 us" in summarize([HDK, *samples(1.3e-3)], bench=XYLO)["timing"]
    # Samples of runs recorded before the field (None): the runs' figure, as before.
    old = [SampleClassified.from_record({k: v for k, v in s.to_record().items()
                                         if k != "dut_resolution_s"}) for s in samples(5e-3)]
    assert old[0].dut_resolution_s is None
    assert "within 1400 us" in summarize([HDK, *runs(1.4e-3), *old], bench=XYLO)["timing"]
