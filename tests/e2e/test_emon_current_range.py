"""A fixed current range end to end: ASC on the virtual Joulescope bench in the 18 mA range (the
simulated DUT draws at most 3.6 mW / 1.8 V = 2 mA), with the range in the run's manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.cli import main

from .runs import TRUTH, short_bench

pytestmark = pytest.mark.slow


def joulescope_bench(tmp_path: Path, current_range: str) -> Path:
    """benches/sim-joulescope.toml, short (2 runs of 1 s, 4 test samples), in `current_range`."""
    return short_bench(
        tmp_path, "sim-joulescope", "js-fixed",
        rng=("supply_voltage_v = 1.8", f"supply_voltage_v = 1.8\ncurrent_range = {current_range}"))


def test_asc_in_a_fixed_joulescope_range(tmp_path: Path, capsys) -> None:
    bench = joulescope_bench(tmp_path, '"18mA"')
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    s = out["summary"]
    for key, truth in TRUTH.items():
        assert s[key] == pytest.approx(truth, rel=1e-3), key
    assert s["latency_runs"] == 2 and s["samples"] == 4
    manifest = json.loads((Path(out["run"]) / "manifest.json").read_text())
    assert manifest["bench"]["emon"]["current_range"] == "18 mA"  # the bench, normalised
    emon = manifest["instruments"]["emon"]  # what the driver set
    assert emon["driver"] == "joulescope" and emon["model"] == "js220"
    assert emon["current_range"] == "18 mA" and emon["current_range_full_scale_a"] == 0.018
    assert emon["range_topic"] == "s/i/range/mode" and emon["simulated"] is True


def test_a_range_below_the_duts_current_clips_it(tmp_path: Path, capsys) -> None:
    """1.8 mA is below the active 2 mA: the stand-in saturates there, as the instrument does,
    so the run measures 1.8 mA x 1.8 V while the DUT computes (proof the range reached it)."""
    bench = joulescope_bench(tmp_path, '"1.8 mA"')
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    s = out["summary"]
    assert s["active_power_w"] == pytest.approx(1.8e-3 * 1.8, rel=1e-3)
    # The clipping is a failed check, not a quiet low number: exit 1, status failed-checks.
    assert code == 1 and out["status"] == "failed-checks"
    assert s["clipped_samples"] > 0
    failed = [c for c in s["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["no clipped samples"]
    assert "larger range or auto" in failed[0]["detail"]
    assert s["idle_power_w"] == pytest.approx(TRUTH["idle_power_w"], rel=1e-3)  # 0.67 mA fits
    manifest = json.loads((Path(out["run"]) / "manifest.json").read_text())
    assert manifest["instruments"]["emon"]["current_range"] == "1.8 mA"
