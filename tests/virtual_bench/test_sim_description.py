"""The virtual bench reads its own description of a bench from the same bench files the rig
reads, and says what is wrong with its own typed errors (message + hint)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rig.bench.config import load_bench
from virtual_bench.description import BenchDescription, load_description
from virtual_bench.errors import EXIT_CODE, BenchFileError, VirtualBenchError

REPO = Path(__file__).resolve().parents[2]
SIM_BENCHES = sorted(p for p in (REPO / "benches").glob("*.toml") if "[sim]" in p.read_text())


@pytest.mark.parametrize("path", SIM_BENCHES, ids=lambda p: p.stem)
def test_every_shipped_virtual_bench_reads_as_the_rig_reads_it(path: Path) -> None:
    held, own = load_bench(path), load_description(path)
    assert held.sim is not None
    assert (own.idle_power_mw, own.active_power_mw, own.inference_ms, own.speed) == (
        held.sim.idle_power_mw, held.sim.active_power_mw, held.sim.inference_ms, held.sim.speed)
    assert (own.dut, own.io_manager, own.has_io_manager) == (
        held.sim.dut, held.sim.io_manager, held.io_manager is not None)
    assert own.timestamp_mode == held.dut.timestamp_mode
    assert (own.emon_driver, own.sample_rate_hz, own.supply_voltage_v) == (
        held.emon.driver, held.emon.sample_rate_hz, held.emon.supply_voltage_v)
    assert (own.uart_baud or 0.0) == held.sim.uart_baud
    assert (own.current_noise_a, own.drift, own.noise_seed) == (
        held.sim.current_noise_a, held.sim.drift, held.sim.noise_seed)


def test_the_shipped_virtual_bench_has_the_documented_numbers() -> None:
    own = load_description(REPO / "benches" / "sim.toml")
    assert own == BenchDescription(path=REPO / "benches" / "sim.toml", idle_power_mw=1.2,
                                   active_power_mw=3.6, inference_ms=12.5, speed=50.0)


def _bench(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "b.toml"
    path.write_text(text + '\n[bench]\nvoltage_limit_v = 3.3\n')
    return path


@pytest.mark.parametrize(("text", "message", "hint"), [
    ("", "no [sim] table", "needs [sim]"),
    ("[sim]\nspeed = 0\n", "[sim] speed: expected a positive number, found 0", "speed = 50"),
    ("[sim]\ninference_ms = \"fast\"\n", "[sim] inference_ms: expected a number", "12.5"),
    ("[sim]\ndut = \"rust\"\n", "[sim] dut: expected one of auto, c-shim, python", "use one"),
    ("[sim]\nidle_power_mw = 5\nactive_power_mw = 4\n", "active_power_mw (4.0) is below",
     "idle power"),
    ("[dut]\ntimestamp_mode = \"both\"\n[sim]\n", "[dut] timestamp_mode", "energy"),
    ("sim = 3\n", "sim: expected a table, found int", "[sim]"),
    ("[sim\n", "not valid TOML", "syntax"),
    ("[sim]\nuart_baud = 115200\n", "uart_baud paces the Python DUT's own line; this bench "
     "has dut = 'auto'", 'dut = "python"'),
    ("[sim]\ndut = \"python\"\nuart_baud = 9600\n[io_manager]\n", "an IO manager, whose line",
     "drop uart_baud"),
    ("[sim]\ndut = \"python\"\nuart_baud = -5\n", "[sim] uart_baud: expected a positive",
     "115200"),
])
def test_a_bad_bench_file_is_named_with_a_hint(tmp_path: Path, text: str, message: str,
                                               hint: str) -> None:
    path = _bench(tmp_path, text)
    with pytest.raises(BenchFileError) as info:
        load_description(path)
    assert str(path) in info.value.message and message in info.value.message
    assert hint in (info.value.hint or "")
    assert isinstance(info.value, VirtualBenchError)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(BenchFileError, match="does not exist"):
        load_description(tmp_path / "nope.toml")


def test_the_process_reports_its_error_as_one_json_line_and_exit_code_2(tmp_path: Path) -> None:
    path = _bench(tmp_path, "[sim]\nspeed = -1\n")
    proc = subprocess.run([sys.executable, "-m", "virtual_bench", str(path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == EXIT_CODE == 2
    said = json.loads(proc.stdout)
    assert said["error"] == f"{path}: [sim] speed: expected a positive number, found -1"
    assert said["hint"] == "e.g. speed = 50"
    assert "Traceback" not in proc.stderr
