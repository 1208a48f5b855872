"""The ASC procedure's reply deadlines before calibration (issue 22.2): from the bench's declared
`[dut] inference_time_s`, else the virtual bench's `[sim] inference_ms`, else a first-call
bound; max(30 s, 3x the expected time) either way. (After calibration: tests/e2e/
test_reply_deadline.py, on a DUT that stops answering.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.dut.client import DutClient
from rig.bench.config import load_bench
from rig.errors import ConfigError
from rig.run.asc import AscProcedure
from tests.drivers.scripted import ScriptedTransport

REPO = Path(__file__).resolve().parents[2]


def hardware_bench(tmp_path: Path, dut_extra: str = "") -> Path:
    """benches/sim.toml's settings on explicit ports, without [sim] (as a real board)."""
    path = tmp_path / "board.toml"
    path.write_text(
        '[bench]\nname = "board"\nvoltage_limit_v = 3.3\n\n'
        f'[dut]\nport = "/dev/ttyACM0"\ntimestamp_mode = "performance"\n{dut_extra}\n'
        '[emon]\ndriver = "none"\n'
    )
    return path


def procedure(path: Path) -> AscProcedure:
    dut = DutClient(ScriptedTransport([]))  # nothing is sent: only the deadlines are asked
    dut.timestamp_mode = "performance"
    return AscProcedure(load_bench(path), dut, None, lambda event: None)


def test_the_declared_inference_time_sets_the_first_deadlines(tmp_path: Path) -> None:
    declared = procedure(hardware_bench(tmp_path, "inference_time_s = 2.0"))
    assert declared._deadline_s(10) == 60.0  # the calibration run: 3 x 10 x 2 s
    assert declared._deadline_s(1) == 30.0   # the floor
    # Without a declaration: 1 s per inference for the 10 calibration inferences, the floor.
    assert procedure(hardware_bench(tmp_path))._deadline_s(10) == 30.0
    # The virtual bench: its [sim] inference_ms (12.5 ms): 816 + 1 inferences take 10.2 s.
    sim = procedure(REPO / "benches" / "sim.toml")
    assert sim._deadline_s(817) == pytest.approx(3 * 817 * 0.0125)


@pytest.mark.parametrize("value", ["-1.0", "-0.5", "nan", "inf", '"fast"'])
def test_a_bad_inference_time_is_refused(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_bench(hardware_bench(tmp_path, f"inference_time_s = {value}"))
    message = err.value.message
    # the one reader of the rig's numbers (rig.bench.numbers): file, table, key and the span
    assert "[dut] inference_time_s: " in message and "expected a number" in message
    assert "unknown key" not in message


def test_the_inference_time_is_optional(tmp_path: Path) -> None:
    assert load_bench(hardware_bench(tmp_path)).dut.inference_time_s == 0.0  # not declared
    # 0 means "not declared", as a bench's snapshot (the virtual bench's copy) writes it.
    assert load_bench(hardware_bench(tmp_path, "inference_time_s = 0")
                      ).dut.inference_time_s == 0.0
    assert load_bench(hardware_bench(tmp_path, "inference_time_s = 0.0125")
                      ).dut.inference_time_s == 0.0125
