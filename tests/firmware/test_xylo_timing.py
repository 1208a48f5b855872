"""Xylo HDK timing (issue 35 item 15), run through Rockpool 3.1.0's own XyloSamna with only
samna (and the host clock under it) replaced by a fake board: `tests/firmware/fake_samna.py`.

Rockpool's ``blocking_read`` sleeps 0.1 s before each poll, so its ``inf_duration`` is never
below 0.1 s. The shim polls the board's read buffer itself (`ReadoutPoll`) and reports the time
to the poll that saw the last time step's readout, with that poll's resolution; a time not above
the resolution is refused. All times are on a simulated clock, so they are exact numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from firmware.xylo.shim import (
    HdkTimingError,
    ReadoutPoll,
    XyloShim,
)
from firmware.xylo.spec import XyloSpec, load_spec
from protocols.dut.codec import Results, parse_line
from tests.requires import needs

from .fake_samna import FakeClock, Harness, rockpool_hdk
from .xylo_hdk import laps, open_hdk_shim

pytestmark = needs("rockpool", "xylosim")

MODEL = Path(__file__).resolve().parents[2] / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
STEPS = 100  # 100 x 10 ms: one second of audio


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with rockpool_hdk() as h:
        yield h


@pytest.fixture(scope="module")
def spec() -> XyloSpec:
    return load_spec(MODEL)


def raster(spec: XyloSpec) -> np.ndarray:
    r = np.zeros((STEPS, spec.n_input), dtype=np.uint8)
    r[::3, 1] = 2  # channel 1 every third step: the fake's output neuron 1 spikes there
    return r


def open_shim(harness: Harness, spec: XyloSpec, **board: Any) -> tuple[XyloShim, Any]:
    """A shim on Rockpool's HDK path, rails at 20 Hz, one fake board, the raster loaded."""
    return open_hdk_shim(harness, spec, raster(spec), 20.0, **board)



def test_rockpools_own_read_never_reports_less_than_0_1_s(harness: Harness,
                                                          spec: XyloSpec) -> None:
    """The issue's finding, kept as a reference: XyloSamna's inf_duration on a board that
    answered after 12.5 ms is 0.1 s (its blocking_read sleeps 0.1 s before the first poll)."""
    shim, _ = open_shim(harness, spec, latency_s=0.0125)
    _, _, record = shim.backend._xylo(raster(spec), record_power=True)
    assert record["inf_duration"] == 0.1


def test_hdk_laps_are_the_board_time_without_the_polling_floor(harness: Harness,
                                                               spec: XyloSpec) -> None:
    # The readout of the last step appears 12.3 ms after the write; each get_events costs
    # 0.2 ms; we poll every 1 ms. Poll k starts at 1.2k ms and reads at 1.2k + 0.2 ms, so the
    # first to see it is k = 11 (13.4 ms); the previous one started at 12.0 ms: resolution 1.4 ms.
    shim, hdk = open_shim(harness, spec, latency_s=0.0123, poll_cost_s=0.0002)
    original = harness.devkit.blocking_read
    lines = shim.execute("infer 3 1")
    first, last = laps(lines)
    assert first == 13_400 and last - first == 3 * 13_400
    assert lines[lines.index(f"m-lap-us-{last}") + 1] == "m-lap-resolution-us-1400"
    assert len(hdk.runs) == 4 and "m-infer-done" in lines
    assert harness.devkit.blocking_read is original  # Rockpool's own is back after each evolve
    # The board's output went through Rockpool's readout: output neuron 1 only.
    assert lines[-1].startswith("m-results-[0.000,1.000,0.000,0.000]")
    assert shim.execute("caps") == ["m-timestamp-mode-performance",
                                    "m-caps-[bload,power,rcrc,lapcrc]"]
    checked = parse_line(shim.execute("results")[0])
    assert isinstance(checked, Results) and checked.checked and len(checked.values) == 4


def test_a_board_faster_than_the_resolution_is_not_timed(harness: Harness,
                                                         spec: XyloSpec) -> None:
    # The readout is there at the first poll (50 µs, all of it the poll's own cost): the time
    # cannot be told from zero, so no lap figure is reported.
    shim, _ = open_shim(harness, spec, latency_s=0.0, poll_cost_s=50e-6)
    with pytest.raises(HdkTimingError, match="took 50 us, not above the timing resolution of "
                       "50 us"):
        shim.execute("infer 2 0")


def test_a_board_that_never_finishes_refuses_the_infer(harness: Harness,
                                                       spec: XyloSpec) -> None:
    # Rockpool's read timeout: T x dt x Nhidden / 100 = 100 x 0.01 x 1000 / 100 = 10 s.
    shim, _ = open_shim(harness, spec, latency_s=1e6)
    with pytest.raises(HdkTimingError, match="did not finish"):
        shim.execute("infer 1 0")
    assert 10.0 < harness.clock.time() < 10.01


class ScriptedBuffer:
    """A read buffer that holds `batches[i]` at its i-th read (then nothing); each read takes
    `cost_s` on `clock`."""

    def __init__(self, clock: FakeClock, batches: list[list[Any]], cost_s: float) -> None:
        self.clock, self.batches, self.cost_s, self.reads = clock, list(batches), cost_s, 0

    def get_events(self) -> list[Any]:
        self.clock.sleep(self.cost_s)
        self.reads += 1
        return self.batches.pop(0) if self.batches else []


class Stamp:
    def __init__(self, timestamp: int) -> None:
        self.timestamp = timestamp


def test_readout_poll_waits_for_the_target_timestamp_and_brackets_it() -> None:
    clock = FakeClock()
    poll = ReadoutPoll(clock.time, clock.sleep, interval_s=0.002)
    # reads 1-3: nothing, steps before the target, a step before it again; read 4: the target.
    buffer = ScriptedBuffer(clock, [[], [Stamp(5)], [Stamp(8)], [Stamp(9), Stamp(10)]], 0.001)
    events, timeout = poll(buffer, target_timestamp=10, timeout=1.0)
    assert not timeout and [e.timestamp for e in events] == [5, 8, 9, 10]
    assert buffer.reads == 5  # and one last read, as Rockpool's
    # read k (0-based) starts at 3k ms and ends 1 ms later: read 3 ends at 10 ms; read 2
    # started at 6 ms.
    assert poll.last is not None
    assert poll.last.seconds == pytest.approx(0.010, abs=1e-12)
    assert poll.last.resolution_s == pytest.approx(0.004, abs=1e-12)


def test_readout_poll_counts_events_and_times_out() -> None:
    clock = FakeClock()
    poll = ReadoutPoll(clock.time, clock.sleep, interval_s=0.001)
    events, timeout = poll(ScriptedBuffer(clock, [[1], [2, 3]], 0.0), count=3, timeout=1.0)
    assert (events, timeout) == ([1, 2, 3], False)
    poll.last = None
    events, timeout = poll(ScriptedBuffer(clock, [], 0.0), target_timestamp=1, timeout=0.0105)
    assert (events, timeout) == ([], True) and poll.last is None
