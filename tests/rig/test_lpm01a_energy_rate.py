"""ASC energy windows on an LPM01A above the ascii_dec rate limit are refused before any run
folder or port exists: the D7 event framing in bin_hexa is not public, so no window may be
placed from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rig.bench.config import load_bench
from rig.errors import ConfigError
from rig.run.measure import check_bench_setup

SIM_BENCH = Path(__file__).resolve().parents[2] / "benches" / "sim.toml"


@pytest.mark.parametrize("rate", [10_000, 100_000])
def test_energy_mode_above_the_ascii_limit_is_refused_with_the_reason_and_what_to_do(rate):
    bench = load_bench(SIM_BENCH, {"emon": {"sample_rate_hz": rate}})
    assert bench.dut.timestamp_mode == "energy" and bench.emon.driver == "lpm01a"
    with pytest.raises(ConfigError) as info:
        check_bench_setup(bench)
    assert "bin_hexa" in info.value.message and "not public" in info.value.message
    assert "only as a trigger" not in info.value.message
    assert "sample_rate_hz to 5000 or less" in info.value.hint


@pytest.mark.parametrize("rate", [1000, 5000])
def test_energy_mode_at_ascii_rates_is_accepted(rate):
    check_bench_setup(load_bench(SIM_BENCH, {"emon": {"sample_rate_hz": rate}}))


def test_performance_mode_above_the_ascii_limit_needs_no_edges_and_is_accepted():
    bench = load_bench(SIM_BENCH, {"emon": {"sample_rate_hz": 100_000},
                                   "dut": {"timestamp_mode": "performance"}})
    check_bench_setup(bench)
