"""Keysight simulators on the virtual bench: served by `rig sim`, recorded by `rig emon record`,
and refused up front for ASC energy windows (they see only their trigger edge)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .runs import REPO, RIG, bench_variant, read_json_object, run_rig

pytestmark = pytest.mark.slow

N6705_SIM = ('driver = "lpm01a"\nport = "virtual"', 'driver = "n6705-sim"')


def test_asc_energy_on_a_trigger_only_monitor_is_refused_clearly(tmp_path: Path) -> None:
    bench = bench_variant(tmp_path, emon=N6705_SIM)
    proc = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"))
    assert proc.returncode == 2, proc.stderr
    error = proc.stderr.strip().splitlines()[-1]
    assert "n6705 sees the DUT's timestamp line only as a trigger" in error
    assert "LPM01A or a Joulescope" in error and "Traceback" not in proc.stderr


def test_rig_sim_serves_an_n6705_the_driver_identifies_and_powers(tmp_path: Path) -> None:
    """The N6705 on the virtual bench is reached by pyvisa-py over loopback TCP, as a real one
    is on port 5025; its output switches the simulated DUT's supply."""
    from drivers.emon.keysight import N6705

    bench = bench_variant(tmp_path, emon=N6705_SIM)
    sim = subprocess.Popen([*RIG, "sim", "--bench", str(bench), "--json"], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        resource = read_json_object(sim)["ports"]["emon"]
        assert resource.startswith("TCPIP0::127.0.0.1::") and resource.endswith("::SOCKET")
        monitor = N6705.open(resource, voltage_limit_v=3.3)
        try:
            # Its *IDN? serial "MY00000001-SIM" says it is the virtual bench's: no flag given.
            assert monitor.simulated is True and monitor.settings()["simulated"] is True
            assert "N6705" in json.dumps(monitor.self_test())
            monitor.configure(1.8, 10000)
            assert monitor.sample_rate == pytest.approx(10000, rel=0.03)  # 1/(k x 20.48 us)
            monitor.power_on()
            monitor.power_off()
        finally:
            monitor.close()
    finally:
        sim.terminate()
        sim.wait(timeout=10)


def test_rig_sim_serves_a_34465a_while_a_bench_supply_powers_the_dut(tmp_path: Path) -> None:
    from drivers.emon.keysight import Keysight34465A

    dmm = ('driver = "lpm01a"\nport = "virtual"', 'driver = "34465a-sim"')
    bench = bench_variant(tmp_path, emon=dmm)
    sim = subprocess.Popen([*RIG, "sim", "--bench", str(bench), "--json"], cwd=REPO,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        info = read_json_object(sim)
        assert info["powered"] is True  # no monitor switches this bench's supply
        monitor = Keysight34465A.open(info["ports"]["emon"], voltage_limit_v=3.3)
        try:
            assert monitor.simulated is True  # its *IDN? serial ends in -SIM
            assert "34465A" in json.dumps(monitor.self_test())
            assert monitor.powers_dut is False and monitor.sees_every_edge is False
        finally:
            monitor.close()
        out = run_rig("dut", "--port", info["ports"]["dut"], "info", "--json")
        assert out.returncode == 0 and json.loads(out.stdout)["model"] == "asc01"
    finally:
        sim.terminate()
        sim.wait(timeout=10)
