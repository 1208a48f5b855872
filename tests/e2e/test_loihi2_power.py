"""Loihi 2 power reaching the run (issue 22.1): the Lava shim with its stand-in profiler (the
edge of the hardware we do not have, a constant 1.25 W) through `rig measure qubo --sut loihi2`.
Closed form: the point's average power is 1.25 W and its energy 1.25 W x the solve's elapsed
time by the DUT's timer; the power source says SIMULATED in the point, the manifest, `rig show`
and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rig.cli import main
from rig.qubo.suts import LAVA_PYTHON
from rig.report.content import _power, _qubo_results
from rig.report.document import Para, Table
from rig.report.runs import group_systems, read_run
from rig.report.system import SystemInfo

pytestmark = pytest.mark.skipif(not LAVA_PYTHON.exists(),
                                reason=f"no Lava environment at {LAVA_PYTHON}: run `make lava-env`")

WATTS = 1.25
SOURCE = "loihi-profiler (SIMULATED)"
POINT = ["--sut", "loihi2", "--nodes", "25", "--density", "0.05", "--seed", "0",
         "--timeout", "0.05"]


def rig_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_stand_in_profiler_power_reaches_point_show_and_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RIG_LOIHI2_BACKEND", "CPU")
    monkeypatch.setenv("RIG_LOIHI2_STAND_IN_PROFILER_W", str(WATTS))
    data = rig_json(capsys, "measure", "qubo", *POINT, "--runs-dir", str(tmp_path), "--json")
    assert data["point_status"] == "ok", data
    # The point: the profiler's power and energy, with their source.
    assert data["power_w"] == WATTS
    # On the wire in whole µJ and µs: |energy - 1.25 W x elapsed| within the µJ's rounding.
    energy_uj, elapsed_us = round(data["energy_j"] * 1e6), round(data["elapsed_s"] * 1e6)
    assert abs(energy_uj - WATTS * elapsed_us) <= 0.5
    assert data["power_source"] == SOURCE
    assert data["power_status"] == f"measured ({SOURCE})"
    run = Path(data["run"])
    (point,) = [e for e in map(json.loads, (run / "events.jsonl").read_text().splitlines())
                if e.get("event") == "sweep_point"]
    assert point["result"]["power_source"] == SOURCE
    assert point["result"]["power_w"] == WATTS
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["power_sources"] == [SOURCE]

    # rig show: JSON and the table.
    shown = rig_json(capsys, "show", str(run), "--json")
    (row,) = shown["summary"]
    assert row["power_w_mean"] == WATTS and row["power_source"] == SOURCE
    assert row["energy_j_mean"] == data["energy_j"]
    assert shown["power"]["sources"] == {SOURCE: 1}
    assert main(["show", str(run)]) == 0
    text = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "1.250 W" in text and f"{data['energy_j']:#.4g} J" in text
    assert "SIMULATED" in text and f"measured for 1 of 1 points by {SOURCE}" in text

    # The report: SIMULATED on the system, the power and energy tables, the source.
    (system,) = group_systems([read_run(run)])
    assert system.label == "SIMULATED (Lava CPU backend, stand-in Loihi profiler)"
    blocks = _qubo_results(system)
    power = next(b for b in blocks if isinstance(b, Table) and "average power" in b.caption)
    # One seed and a stand-in that publishes no accuracy: the report says U is unknown.
    assert power.rows[0][2] == "1.250 W ± U unknown (incomplete)"
    assert "SIMULATED" in power.caption
    energy = next(b for b in blocks if isinstance(b, Table) and "energy of a solve" in b.caption)
    assert energy.rows[0][2].endswith("J ± U unknown (incomplete)")
    assert "SIMULATED" in energy.caption
    assert any(isinstance(b, Para) and b.text == f"Power source: {SOURCE}." for b in blocks)
    # The power measurement description names this sweep's source, not every possible one.
    (described,) = [b.text for b in _power(system, SystemInfo()) if isinstance(b, Para)]
    assert "stand-in for the Loihi 2 profiler (SIMULATED" in described
    assert "RAPL" not in described
