"""A lab's own accuracy figures (issue 37): `[emon.accuracy]` and `[dut] clock_ppm` in the bench
file, refused without their source or out of span; merged over the driver's declaration term by
term, citing the lab; the DUT clock's term in the DUT-timed budgets."""

from __future__ import annotations

import math
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from drivers.emon.accuracy import ANY_RANGE, MonitorAccuracy, NotPublished, Spec, not_declared
from drivers.emon.lpm01a import ACCURACY as LPM01A
from rig.bench.config import EmonAccuracyConfig, load_bench, parse_bench
from rig.bench.saving import bench_to_toml
from rig.errors import ConfigError
from rig.run.asc_uncertainty import DUT_CLOCK_UNKNOWN, monitor_of
from rig.run.measure import with_lab_accuracy

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "benches" / "sim.toml"
CERT = "calibration certificate 1234, 2026-03-01"


def raw(**accuracy: Any) -> dict[str, Any]:
    data = tomllib.loads(SIM.read_text())
    if accuracy:
        data["emon"]["accuracy"] = accuracy
    return data


def test_the_figures_and_the_dut_clock_load_with_their_sources() -> None:
    data = raw(current_gain=0.001, clock_ppm=20, source=CERT)
    data["dut"].update(clock_ppm=50, clock_source="crystal datasheet")
    bench = parse_bench(data, SIM)
    assert bench.emon_accuracy == EmonAccuracyConfig(source=CERT, current_gain=0.001,
                                                     clock_ppm=20.0)
    assert bench.emon_accuracy.given() == ["current_gain", "clock_ppm"]
    assert (bench.dut.clock_ppm, bench.dut.clock_source) == (50.0, "crystal datasheet")
    assert load_bench(SIM).emon_accuracy is None  # the shipped bench declares nothing


def test_a_bench_with_lab_figures_saves_and_loads_back(tmp_path: Path) -> None:
    bench = parse_bench(raw(voltage_offset_v=0.005, source=CERT), SIM)
    text = bench_to_toml(bench)
    assert "[emon.accuracy]" in text and "current_gain" not in text
    assert replace(parse_bench(tomllib.loads(text), tmp_path / "b.toml"), path=SIM) == bench


@pytest.mark.parametrize(("accuracy", "message"), [
    ({"clock_ppm": 100}, "[emon.accuracy] source is missing"),
    ({"clock_ppm": 100, "source": "  "}, "[emon.accuracy] source is missing"),
    ({"current_gain": -0.01, "source": CERT},
     "[emon.accuracy] current_gain: expected a number in [0, 1], found -0.01"),
    ({"voltage_offset_v": math.inf, "source": CERT},
     "[emon.accuracy] voltage_offset_v: inf is not a finite number"),
    ({"clock_ppm": math.nan, "source": CERT}, "[emon.accuracy] clock_ppm: nan is not a finite"),
    ({"clock": 100, "source": CERT}, "[emon.accuracy] unknown key 'clock'"),
    ({"clock_ppm": "100", "source": CERT}, "[emon.accuracy] clock_ppm: expected a number"),
])
def test_a_figure_without_source_or_out_of_span_is_refused(accuracy: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_bench(raw(**accuracy), SIM)
    assert message in err.value.message


def test_a_source_alone_declares_nothing() -> None:
    assert parse_bench(raw(source=CERT), SIM).emon_accuracy is None


def test_a_dut_clock_without_its_source_is_refused() -> None:
    data = raw()
    data["dut"]["clock_ppm"] = 50
    with pytest.raises(ConfigError, match=r"\[dut\] clock_ppm is given without clock_source"):
        parse_bench(data, SIM)
    data["dut"]["clock_ppm"] = -1
    with pytest.raises(ConfigError, match=r"clock_ppm: expected a number in \[0, 1000000\]"):
        parse_bench(data, SIM)


def test_the_lab_replaces_the_driver_s_figures_for_its_terms_only() -> None:
    bench = parse_bench(raw(voltage_gain=0.01, voltage_offset_v=0.005, clock_ppm=100,
                            source=CERT), SIM)
    settings = with_lab_accuracy({"driver": "lpm01a", "accuracy": LPM01A.to_json()}, bench,
                                 measured=False)
    merged = MonitorAccuracy.from_json(settings["accuracy"])
    assert merged.current_ranges == LPM01A.current_ranges  # ST's 2 % stays
    assert merged.voltage is None  # the LPM01A measures no voltage: the set supply's figure
    assert merged.voltage_set == Spec(0.01, 0.005, f"lab: {CERT}")
    assert merged.clock == Spec(100e-6, 0.0, f"lab: {CERT}")
    assert "voltage set, clock" in merged.notes and merged.notes.startswith(LPM01A.notes)
    assert with_lab_accuracy(settings, load_bench(SIM), measured=False) is settings


def test_a_measured_voltage_and_an_undeclared_driver_take_the_lab_s_figures() -> None:
    bench = parse_bench(raw(current_offset_a=1e-6, voltage_gain=0.002, source=CERT), SIM)
    merged = MonitorAccuracy.from_json(with_lab_accuracy({"driver": "x"}, bench,
                                                         measured=True)["accuracy"])
    assert merged.voltage == Spec(0.002, 0.0, f"lab: {CERT}")
    assert isinstance(merged.voltage_set, NotPublished)  # the not_declared driver's
    assert isinstance(merged.clock, NotPublished)
    # no ranges declared: the lab's figure holds every reading, found by current or by name
    assert merged.current_half_width(0.5) == pytest.approx(1e-6)
    assert merged.range_for(1e-3, "18 mA").name == ANY_RANGE  # type: ignore[union-attr]
    assert not_declared("x").with_lab_figures(CERT) == not_declared("x")


def test_the_dut_clock_reaches_the_dut_timed_terms() -> None:
    from rig.run import asc_uncertainty as au

    declared = monitor_of([], {"dut": {"clock_ppm": 50.0, "clock_source": "crystal"}})
    assert declared.dut_clock == Spec(50e-6, 0.0, "lab: crystal")
    _, clock = au._dut_timer_terms(declared, 1.0, 1, "execution time", None, 0.0125)
    assert clock.value == pytest.approx(50e-6 * 0.0125 / math.sqrt(3))
    assert clock.source.startswith("lab: crystal: ±50 ppm")
    _, unknown = au._dut_timer_terms(monitor_of([], {"dut": {"clock_ppm": 0.0}}), 1.0, 1,
                                     "execution time", None, 0.0125)
    assert unknown.value is None and unknown.source == DUT_CLOCK_UNKNOWN
