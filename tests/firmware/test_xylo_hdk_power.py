"""Xylo HDK power rails and opening the board (issue 35 items 16, 17), run through Rockpool
3.1.0's own code (find_xylo_hdks, config_from_specification, XyloSamna) with only samna (and the
host clock under it) replaced by a fake board: `tests/firmware/fake_samna.py`.

SynSense's power tutorial (synsense/rockpool docs/devices/quick-xylo/xylo-audio-power.ipynb)
samples the rails at 20 Hz and reads idle power without evolving: empty the power buffer, wait,
read it. A window that collected no sample is refused by name. The per-rail lines are what the
rig's rail arithmetic (`rig.run.asc.rail_power`) takes; tests/e2e/test_xylo_asc.py checks that
arithmetic end to end with the same levels.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from firmware.xylo.shim import (
    DEFAULT_POWER_HZ,
    PowerUnavailable,
    XyloShim,
    build_parser,
    main,
)
from firmware.xylo.spec import XyloSpec, load_spec
from rig.bench.config import DutConfig
from rig.run.asc import rail_power
from tests.requires import needs

from .fake_samna import DeviceInfo, Firmware, Harness, MeasurementChannels, rockpool_hdk
from .xylo_hdk import laps, open_hdk_shim

pytestmark = needs("rockpool", "xylosim")

MODEL = Path(__file__).resolve().parents[2] / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
STEPS = 100
#: Rail power [W] outside / inside a run, per samna measurement channel.
IDLE_W = {MeasurementChannels.Io: 100e-6, MeasurementChannels.Logic: 200e-6,
          MeasurementChannels.LogicAfe: 300e-6, MeasurementChannels.IoAfe: 400e-6}  # 1.000 mW
ACTIVE_W = {MeasurementChannels.Io: 150e-6, MeasurementChannels.Logic: 600e-6,
            MeasurementChannels.LogicAfe: 300e-6, MeasurementChannels.IoAfe: 400e-6}  # 1.450 mW


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    with rockpool_hdk() as h:
        yield h


@pytest.fixture(scope="module")
def spec() -> XyloSpec:
    return load_spec(MODEL)


def open_shim(harness: Harness, spec: XyloSpec, **board: Any) -> tuple[XyloShim, Any]:
    """A shim on HdkBackend.open at the default rail rate, one fake board, a raster loaded."""
    return open_hdk_shim(harness, spec, np.ones((STEPS, spec.n_input), dtype=np.uint8),
                         DEFAULT_POWER_HZ, idle_w=IDLE_W, active_w=ACTIVE_W, **board)


def messages(lines: list[str]) -> tuple[str, ...]:
    """The text after ``m-`` of each message line, as DutClient hands it to the rig."""
    return tuple(line[2:] for line in lines if line.startswith("m-"))


def test_rails_are_sampled_at_the_tutorials_20_hz() -> None:
    assert DEFAULT_POWER_HZ == 20.0
    assert build_parser().parse_args(["--spec", "x.npz", "--hdk"]).power_frequency == 20.0
    assert DutConfig().power_frequency_hz == 20.0  # what the rig passes as --power-frequency


def test_idle_is_read_without_evolving(harness: Harness, spec: XyloSpec) -> None:
    shim, hdk = open_shim(harness, spec)
    assert hdk.power.frequencies == [20.0]
    runs, written = len(hdk.runs), len(hdk.inputs)
    lines = shim.execute("idle 2000")
    # 2 s at 20 Hz: 40 samples of every rail, whatever the phase of the monitor's clock.
    assert lines == ["m-power-samples-40", "m-power-io-uw-100", "m-power-snn_core-uw-200",
                     "m-power-afe_core-uw-300", "m-power-afe_ldo-uw-400"]
    assert (len(hdk.runs), len(hdk.inputs)) == (runs, written)  # nothing evolved
    assert harness.clock.time() == 2.0
    assert rail_power(messages(lines)) == pytest.approx(1.000e-3, rel=1e-12)


def test_active_rails_and_board_time_give_power_and_energy_per_inference(
        harness: Harness, spec: XyloSpec) -> None:
    # Each evolve takes 0.2 s on the board (seen at the 1 ms poll that reads at 200 ms): its
    # window holds the samples at 50, 100, 150 and 200 ms of it, all at the active level.
    shim, _ = open_shim(harness, spec, latency_s=0.2)
    lines = shim.execute("infer 4 1")
    assert [line for line in lines if line.startswith("m-power-")] == [
        "m-power-samples-16", "m-power-io-uw-150", "m-power-snn_core-uw-600",
        "m-power-afe_core-uw-300", "m-power-afe_ldo-uw-400"]
    first, last = laps(lines)
    assert (first, last - first) == (200_000, 800_000)  # the board's time, DUT-timed window
    assert "m-lap-resolution-us-1000" in lines
    power = rail_power(messages(lines))
    assert power == pytest.approx(1.450e-3, rel=1e-12)
    assert power * (last - first) / 1e6 / 4 == pytest.approx(1.450e-3 * 0.2, rel=1e-12)


def test_an_inference_window_without_a_power_sample_fails_loudly(harness: Harness,
                                                                  spec: XyloSpec) -> None:
    # One 12.5 ms evolve (13 ms at the 1 ms poll) from t = 0: the first sample is at 50 ms.
    shim, _ = open_shim(harness, spec, latency_s=0.0125)
    with pytest.raises(PowerUnavailable, match=r"no power sample on rail\(s\) io, snn_core, "
                       r"afe_core, afe_ldo over the 1 timed inference\(s\), 0.013 s at 20 Hz"):
        shim.execute("infer 1 0")


def test_an_idle_span_shorter_than_a_sample_fails_loudly(harness: Harness,
                                                         spec: XyloSpec) -> None:
    shim, _ = open_shim(harness, spec)
    with pytest.raises(PowerUnavailable, match="over the idle span of 40 ms at 20 Hz"):
        shim.execute("idle 40")


def test_hidden_biases_reach_the_board(harness: Harness, spec: XyloSpec) -> None:
    # The shipped model's biases are all 0: give it known ones.
    bias = (np.arange(spec.n_hidden) % 7 - 3).astype(np.int16)
    _, hdk = open_shim(harness, replace(spec, arrays={**spec.arrays, "bias": bias}))
    neurons = hdk.config.reservoir.neurons
    assert [getattr(n, "v_mem_bias", None) for n in neurons] == bias.astype(int).tolist()
    assert hdk.config.bias_enable


def test_a_board_with_old_firmware_exits_3_with_the_reason(
        harness: Harness, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.reset()
    harness.samna.attach(DeviceInfo(firmware=Firmware(fxtree="0.11.4", unifirm="1.1.3")))
    monkeypatch.delenv("RIG_XYLO_STAND_IN_RAILS", raising=False)
    assert main(["--spec", str(MODEL), "--hdk"]) == 3
    err = capsys.readouterr().err
    assert "firmware of the connected Xylo HDK is unsupported" in err  # Rockpool's reason
    assert "hint: upgrade the HDK's firmware" in err and "Traceback" not in err
