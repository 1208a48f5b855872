"""Xylo timing: XyloSim's lap counter is the input's real-time length (labelled simulated); on an
HDK it adds up samna's measured `inf_duration`. The HDK path runs against a stand-in for the
XyloSamna module (the samna edge), so it is tested without a board."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from firmware.xylo.shim import (
    POWER_RAILS,
    HdkBackend,
    HdkTimingError,
    Rejected,
    XyloShim,
    encode_raster,
    hdk_duration,
)
from protocols.dut.codec import Results, parse_line

#: What the shim needs of a spec: sizes, dt, the model id.
SPEC = SimpleNamespace(n_input=16, n_output=4, dt=0.01, model_id="xylo-fake01")
STEPS = 100  # 100 x 10 ms: one second of audio


class FakeXyloSamna:
    """Stands in for rockpool's XyloSamna: `durations` are the inf_duration of each evolve."""

    def __init__(self, durations: list[float | None]) -> None:
        self.durations = list(durations)
        self.resets = 0

    def reset_state(self) -> None:
        self.resets += 1

    def __call__(self, raster: np.ndarray, record_power: bool = False):
        assert record_power
        output = np.zeros((raster.shape[0], SPEC.n_output), dtype=int)
        output[:, 1] = 1
        record = {rail: np.full(3, 1e-4) for rail in POWER_RAILS}
        duration = self.durations.pop(0)
        if duration is not None:
            record["inf_duration"] = duration
        return output, {}, record


def shim_with(durations: list[float | None]) -> tuple[XyloShim, FakeXyloSamna]:
    fake = FakeXyloSamna(durations)
    shim = XyloShim(SPEC, HdkBackend(fake), port=None)
    raster = encode_raster(np.ones((STEPS, SPEC.n_input), dtype=np.uint8))
    shim._buffer[: len(raster)] = raster
    shim._expected = shim._loaded = len(raster)
    return shim, fake


def laps(lines: list[str]) -> list[int]:
    return [int(line.rsplit("-", 1)[1]) for line in lines if line.startswith("m-lap-us-")]


def test_hdk_laps_add_up_the_measured_inf_durations() -> None:
    # One warm-up of 0.2 s, then 3 timed evolves: the window is their sum, not 3 x T x dt.
    shim, fake = shim_with([0.2, 0.0125, 0.0130, 0.0120])
    lines = shim.execute("infer 3 1")
    first, last = laps(lines)
    assert first == 200_000 and last - first == 37_500
    assert fake.resets == 4 and "m-infer-done" in lines
    assert shim.execute("caps") == ["m-timestamp-mode-performance", "m-caps-[bload,power,rcrc]"]
    # rcrc: after caps the result line carries its CRC-32
    checked = parse_line(shim.execute("results")[0])
    assert isinstance(checked, Results) and checked.checked and len(checked.values) > 0


def test_an_evolve_without_inf_duration_refuses_the_infer() -> None:
    shim, _ = shim_with([0.01, None])
    with pytest.raises(Rejected, match="no inf_duration"):
        shim.execute("infer 1 1")


@pytest.mark.parametrize("value", [None, "0.1", True, 0.0, -1.0, float("nan"), float("inf")])
def test_bad_inf_durations_are_refused(value: object) -> None:
    with pytest.raises(HdkTimingError):
        hdk_duration({} if value is None else {"inf_duration": value})


def test_a_good_inf_duration_is_returned_in_seconds() -> None:
    assert hdk_duration({"inf_duration": np.float64(0.0125)}) == 0.0125

