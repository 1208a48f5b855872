"""Xylo HDK power at the samna edge (issue 22.1): a stand-in XyloSamna whose
``evolve(record_power=True)`` record holds each rail's power in watts at known idle and active
levels and a known ``inf_duration``. The shim must turn it into exactly the per-rail lines and
lap counts from which the rig takes idle, active and dynamic power and energy per inference
(tests/e2e/test_xylo_asc.py checks that arithmetic end to end with the same levels)."""

from __future__ import annotations

import numpy as np
import pytest

from firmware.xylo.shim import POWER_RAILS, HdkBackend, XyloShim, encode_raster
from rig.run.asc import rail_power

from .test_xylo_timing import SPEC, STEPS, laps

#: Per-rail power [W] while the input is silent / not, as Rockpool's record names the rails.
IDLE_W = {"io_power": 100e-6, "snn_core_power": 200e-6, "afe_core_power": 300e-6,
          "afe_ldo_power": 400e-6}                                                 # 1.000 mW
ACTIVE_W = {"io_power": 150e-6, "snn_core_power": 600e-6, "afe_core_power": 300e-6,
            "afe_ldo_power": 400e-6}                                               # 1.450 mW
INF_S = 0.5      # the board's inf_duration of every evolve
POWER_HZ = 20.0  # rail sampling: 10 samples per evolve


class RailsXyloSamna:
    """Stands in for rockpool's XyloSamna on a board: the rails read `IDLE_W` while the raster
    is silent and `ACTIVE_W` otherwise, sampled at `POWER_HZ` over the evolve's `INF_S`."""

    def reset_state(self) -> None:
        pass

    def __call__(self, raster: np.ndarray, record_power: bool = False):
        assert record_power
        level = ACTIVE_W if np.any(raster) else IDLE_W
        count = round(INF_S * POWER_HZ)
        record: dict = {rail: np.full(count, watts) for rail, watts in level.items()}
        record["inf_duration"] = INF_S
        return np.zeros((raster.shape[0], SPEC.n_output), dtype=int), {}, record


def messages(lines: list[str]) -> tuple[str, ...]:
    """The text after ``m-`` of each message line, as DutClient hands it to the rig."""
    return tuple(line[2:] for line in lines if line.startswith("m-"))


@pytest.fixture
def shim() -> XyloShim:
    shim = XyloShim(SPEC, HdkBackend(RailsXyloSamna()), port=None)
    raster = encode_raster(np.ones((STEPS, SPEC.n_input), dtype=np.uint8))
    shim._buffer[: len(raster)] = raster
    shim._expected = shim._loaded = len(raster)
    return shim


def test_idle_rails_give_the_idle_power(shim: XyloShim) -> None:
    lines = shim.execute("idle 1000")
    assert lines == ["m-power-samples-10", "m-power-io-uw-100", "m-power-snn_core-uw-200",
                     "m-power-afe_core-uw-300", "m-power-afe_ldo-uw-400"]
    assert rail_power(messages(lines)) == pytest.approx(1.000e-3, rel=1e-12)


def test_active_rails_and_inf_durations_give_power_and_energy_per_inference(
        shim: XyloShim) -> None:
    lines = shim.execute("infer 4 1")
    assert [line for line in lines if line.startswith("m-power-")] == [
        "m-power-samples-40", "m-power-io-uw-150", "m-power-snn_core-uw-600",
        "m-power-afe_core-uw-300", "m-power-afe_ldo-uw-400"]
    first, last = laps(lines)
    elapsed_s = (last - first) / 1e6
    assert elapsed_s == 4 * INF_S  # the window is the board's measured time
    assert rail_power(messages(lines)) == pytest.approx(1.450e-3, rel=1e-12)
    assert set(POWER_RAILS) == set(IDLE_W) == set(ACTIVE_W)  # every rail samna records
