"""`[sim] speed` in a range the rig's waits can serve (issue 39): 1e-300 was accepted, the
virtual bench then stood still and the run blamed the DUT after 30.9 s ("DUT never said
m-infer-done ..."). Below 0.1 the rig's host-time waits on the monitor (30 s + 10 x idle_s)
run out before simulated time gets there (0.01 failed so; 0.1 completes); above 10000 the
monitor cannot stream in time. Refused when the file is loaded, naming the key and the range:
by the rig, by the virtual bench's own reading of the file, and on `rig sim --speed`."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest

from rig.bench.config import NUMBER_SPANS, parse_bench
from rig.cli import main
from rig.errors import ConfigError
from virtual_bench.description import SPEED_RANGE, parse_description
from virtual_bench.errors import BenchFileError

REPO = Path(__file__).resolve().parents[2]


def sim(speed: float) -> dict:
    raw = tomllib.loads((REPO / "benches" / "sim.toml").read_text())
    raw["sim"]["speed"] = speed
    return raw


@pytest.mark.parametrize("speed", [1e-300, 0.0999, 0.01, 10_000.5, 1e300])
def test_a_speed_outside_the_range_is_refused_naming_key_and_range(speed: float) -> None:
    with pytest.raises(ConfigError) as err:
        parse_bench(sim(speed), Path("b.toml"))
    assert f"b.toml: [sim] speed: expected a number in [0.1, 10000], found {speed!r}" \
        in err.value.message
    assert "simulated seconds per host second" in err.value.hint
    with pytest.raises(BenchFileError) as err2:
        parse_description(sim(speed), Path("b.toml"))
    assert "[sim] speed: expected a number in [0.1, 10000]" in err2.value.message


@pytest.mark.parametrize("speed", [0.1, 1, 50, 10_000])
def test_a_speed_inside_the_range_is_taken(speed: float) -> None:
    assert parse_bench(sim(speed), Path("b.toml")).sim.speed == speed
    assert parse_description(sim(speed), Path("b.toml")).speed == speed


def test_the_rig_and_the_virtual_bench_take_the_same_range() -> None:
    span = NUMBER_SPANS["sim.speed"]
    assert (span.low, span.high, span.low_open, span.high_open) == (*SPEED_RANGE, False, False)


def test_rig_sim_refuses_such_a_speed_at_once(capsys) -> None:
    started = time.monotonic()
    assert main(["sim", "--device", "sim", "--speed", "1e-300"]) == 2
    err = capsys.readouterr().err
    assert "--speed: expected a number in [0.1, 10000], found 1e-300" in err
    assert time.monotonic() - started < 5.0  # no virtual bench was started
