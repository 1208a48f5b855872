"""`[emon] timestamp_input`: "gpio" by default, "aux" only on an N6705 (its N6781A/N6785A's
auxiliary input), checked when a bench loads, written back by the bench file writer."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from rig.bench.config import load_bench, parse_bench
from rig.bench.saving import bench_to_toml
from rig.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def bench_with(tmp_path: Path, driver: str, extra: str) -> Path:
    text = (REPO / "benches" / "sim.toml").read_text()
    old = 'driver = "lpm01a"\nport = "virtual"'
    assert old in text
    path = tmp_path / "bench.toml"
    path.write_text(text.replace(old, f'driver = "{driver}"\n{extra}'))
    return path


def test_default_is_the_monitors_own_input() -> None:
    assert load_bench(REPO / "benches" / "sim.toml").emon.timestamp_input == "gpio"
    assert load_bench(REPO / "benches" / "sim-n6705.toml").emon.timestamp_input == "aux"


@pytest.mark.parametrize("driver,why,hint", [
    ("34465a-sim", "the 34465A has no input sampled alongside the current",
     "use an N6705 with an N6781A/N6785A and its auxiliary input, an LPM01A or a Joulescope"),
    ("lpm01a-sim", "the LPM01A has no auxiliary voltage input", 'timestamp_input = "gpio"'),
    ("joulescope-sim", "it samples the line on GPI0", 'timestamp_input = "gpio"'),
    ("rapl", "the rapl monitor has no auxiliary voltage input", 'timestamp_input = "gpio"'),
])
def test_aux_is_refused_where_there_is_no_aux_input(tmp_path: Path, driver: str, why: str,
                                                    hint: str) -> None:
    path = bench_with(tmp_path, driver, 'timestamp_input = "aux"')
    with pytest.raises(ConfigError) as info:
        load_bench(path)
    message = str(info.value)
    assert message.startswith(f'{path}: [emon] timestamp_input = "aux" needs an N6705 with an '
                              "N6781A/N6785A SMU (its auxiliary voltage input): ")
    assert why in message and hint in info.value.hint


def test_an_unknown_input_lists_the_choices(tmp_path: Path) -> None:
    path = bench_with(tmp_path, "n6705-sim", 'timestamp_input = "trigger"')
    with pytest.raises(ConfigError, match=r"timestamp_input: expected one of gpio, aux; "
                                          r"found 'trigger'"):
        load_bench(path)


def test_aux_round_trips_through_the_bench_file_writer(tmp_path: Path) -> None:
    bench = load_bench(bench_with(tmp_path, "n6705-sim", 'timestamp_input = "aux"'))
    assert bench.emon.timestamp_input == "aux"
    assert bench.snapshot()["emon"]["timestamp_input"] == "aux"
    raw = tomllib.loads(bench_to_toml(bench))
    assert raw["emon"]["timestamp_input"] == "aux"
    assert parse_bench(raw, tmp_path / "again.toml").emon == bench.emon
