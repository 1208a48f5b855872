"""`rig measure asc --device arduino --port ... --emon lpm01a --emon-port ...`: the hardware
bench file with its ports given on the command line, pointed here at a virtual bench."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description

from .runs import REPO, TRUTH, run_rig

pytestmark = pytest.mark.slow


def test_arduino_bench_with_ports_from_the_command_line(tmp_path: Path) -> None:
    with VirtualBench(load_description(REPO / "benches" / "sim.toml")) as vb:
        proc = run_rig("measure", "asc", "--device", "arduino",
                       "--port", vb.ports["dut"], "--emon", "lpm01a",
                       "--emon-port", vb.ports["emon"], "--voltage", "1.8", "--simulated",
                       "--runs-dir", str(tmp_path), "--json")
        assert proc.returncode == 0, proc.stderr
        assert vb.world.powered is False  # powered off at the end
    out = json.loads(proc.stdout)
    assert out["simulated"] is True
    for key, truth in TRUTH.items():
        assert out["summary"][key] == pytest.approx(truth, rel=1e-3), key
    manifest = json.loads((Path(out["run"]) / "manifest.json").read_text())
    assert manifest["bench"]["dut"]["port"] == vb.ports["dut"]
    assert manifest["bench"]["emon"]["supply_voltage_v"] == 1.8


def test_overrides_are_validated_like_the_file(tmp_path: Path) -> None:
    proc = run_rig("measure", "asc", "--device", "arduino", "--voltage", "5.0",
                   "--runs-dir", str(tmp_path))
    assert proc.returncode == 2
    assert "5 V is above the bench voltage limit of 3.3 V" in proc.stderr
    bad = run_rig("measure", "asc", "--device", "arduino", "--emon", "fluke",
                  "--runs-dir", str(tmp_path))
    assert bad.returncode == 2 and "driver: expected one of lpm01a" in bad.stderr
