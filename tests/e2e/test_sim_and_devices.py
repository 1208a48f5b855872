"""`rig sim` serves a virtual bench a user can talk to; `rig devices` names what it sees."""

from __future__ import annotations

import json
import subprocess

import pytest
from serial.tools.list_ports_common import ListPortInfo

from drivers.dut.client import DutClient
from drivers.emon.lpm01a import Lpm01a
from drivers.transport import SerialTransport
from rig.cli import main

from .runs import REPO, RIG, read_json_object

pytestmark = pytest.mark.slow


def test_rig_sim_serves_a_dut_powered_through_the_lpm01a() -> None:
    proc = subprocess.Popen([*RIG, "sim", "--json", "--speed", "100"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        info = read_json_object(proc)
        assert info["simulated"] is True and info["speed"] == 100
        emon = Lpm01a.open(info["ports"]["emon"], voltage_limit_v=3.3, simulated=True)
        dut = DutClient(SerialTransport(info["ports"]["dut"], 115200, name="DUT"))
        try:
            emon.configure(1.8, 1000)
            emon.power_on()
            assert dut.wait_for_boot(5.0) == "energy"
            assert dut.identify().model == "asc01"
        finally:
            emon.close()
            dut.close()
    finally:
        proc.terminate()  # Ctrl-C or kill: the bench shuts down
        proc.wait(timeout=10)


def test_devices_names_known_usb_ids(monkeypatch, capsys) -> None:
    lpm = ListPortInfo("/dev/ttyACM7")
    lpm.vid, lpm.pid, lpm.description = 0x0483, 0x5740, "STM32 Virtual ComPort"
    other = ListPortInfo("/dev/ttyUSB3")
    other.vid, other.pid, other.description = 0x1234, 0x0001, "some adapter"
    monkeypatch.setattr("serial.tools.list_ports.comports", lambda: [other, lpm])
    assert main(["devices", "--json"]) == 0
    ports = json.loads(capsys.readouterr().out)["ports"]
    assert [p["port"] for p in ports] == ["/dev/ttyACM7", "/dev/ttyUSB3"]
    assert ports[0]["looks_like"].startswith("ST X-NUCLEO-LPM01A")
    assert (ports[0]["vid"], ports[0]["pid"]) == ("0483", "5740")
    assert ports[1]["looks_like"] is None
    assert main(["devices"]) == 0
    assert "/dev/ttyACM7         0483:5740  ST X-NUCLEO-LPM01A" in capsys.readouterr().out


def test_rig_dut_talks_to_the_c_shim_served_by_rig_sim() -> None:
    """The debugging loop a lab engineer uses: `rig sim --power-on`, then `rig dut`."""
    proc = subprocess.Popen([*RIG, "sim", "--json", "--power-on"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        info = read_json_object(proc)
        assert info["powered"] is True
        port = info["ports"]["dut"]
        out = subprocess.run([*RIG, "dut", "--port", port, "info", "--json"], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        dut = json.loads(out.stdout)
        assert dut["model"] == "asc01" and dut["timestamp_mode"] == "energy"
        assert dut["capabilities"] == ["bload", "dbcrc", "elap", "lapcrc", "rcrc"]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
