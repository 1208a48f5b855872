"""ASC energy on a virtual N6705 whose N6781A logs the DUT's timestamp line on its auxiliary
input (benches/sim-n6705.toml, shortened): the rig finds every edge in the Elog stream and
measures the simulated truth; a 34465A, which cannot, is refused naming the setups that can.

The runs are made in this process; one refusal still runs as a user runs it (the console
script: exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drivers.emon.accuracy import MonitorAccuracy
from drivers.emon.keysight import n6705_accuracy
from rig.cli import main

from .runs import TRUTH, bench_variant, rig_in_process, run_rig, short_bench

pytestmark = pytest.mark.slow


def test_asc_energy_with_the_timestamp_on_the_aux_input(tmp_path: Path, capsys) -> None:
    bench = short_bench(tmp_path, "sim-n6705", "n6705-aux")
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"),
                 "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    s = out["summary"]
    for key, truth in TRUTH.items():
        assert s[key] == pytest.approx(truth, rel=1e-3), key
    assert s["latency_runs"] == 2 and s["energy_windows"] == 2 and s["samples"] == 4
    assert s["latency_timer"] == "emon"
    assert all(c["ok"] for c in s["checks"]), s["checks"]
    manifest = json.loads((Path(out["run"]) / "manifest.json").read_text())
    assert manifest["bench"]["emon"]["timestamp_input"] == "aux"
    emon = manifest["instruments"]["emon"]
    assert emon["driver"] == "n6705" and emon["simulated"] is True
    assert emon["module"] == "N6781A" and emon["timestamp_input"] == "aux"
    assert emon["interval_s"] == pytest.approx(491.52e-6)  # 2000 Hz asked, 24 x 20.48 us
    assert emon["voltage_source"].startswith("programmed output voltage")
    # The voltage converter reads the aux input: no voltage figure, the set supply's instead.
    assert MonitorAccuracy.from_json(emon["accuracy"]) == n6705_accuracy(measures_voltage=False)


def test_a_34465a_is_refused_naming_the_setups_that_can(tmp_path: Path) -> None:
    dmm = ('driver = "lpm01a"\nport = "virtual"', 'driver = "34465a-sim"')
    bench = bench_variant(tmp_path, emon=dmm)
    proc = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert "the 34465a sees the DUT's timestamp line only as a trigger" in error
    assert ("use an N6705 with an N6781A/N6785A SMU and its auxiliary input "
            '([emon] timestamp_input = "aux"), an LPM01A or a Joulescope') in error
    assert "Traceback" not in proc.stderr


def test_aux_on_a_34465a_bench_is_refused_when_the_bench_loads(tmp_path: Path) -> None:
    dmm = ('driver = "lpm01a"\nport = "virtual"',
           'driver = "34465a-sim"\ntimestamp_input = "aux"')
    bench = bench_variant(tmp_path, emon=dmm)
    proc = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir",
                          str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert '[emon] timestamp_input = "aux" needs an N6705 with an N6781A/N6785A SMU' in error
    assert "the 34465A has no input sampled alongside the current" in error
    assert "an LPM01A or a Joulescope" in error
    assert not (tmp_path / "r").exists()  # refused before any run folder or instrument
