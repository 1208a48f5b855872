"""`check_bench` and `scan_ports` against real ptys: a virtual bench, a DUT in the wrong mode,
a silent port, a missing one and a busy one; and `rig devices --check`."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import serial
from serial.tools.list_ports_common import ListPortInfo

from drivers.emon.lpm01a import Lpm01a
from rig.bench import virtual as sim_bench
from rig.bench.config import load_bench, parse_bench
from rig.bench.ports import scan_ports
from rig.cli import main
from rig.errors import ConfigError, RunInterrupted
from rig.run.bench_check import STATES, check_bench
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description
from virtual_bench.pty import Pty

from .runs import REPO, bench_variant, run_rig

pytestmark = pytest.mark.slow


def attached_bench(tmp_path: Path, dut_port: str, emon_port: str | None,
                   boot_timeout_s: float = 5.0) -> Path:
    """A bench file pointing at explicit ports (an energy-mode DUT, an LPM01A or none)."""
    emon = (f'driver = "lpm01a"\nport = "{emon_port}"\nsupply_voltage_v = 1.8\n'
            if emon_port else 'driver = "none"\n')
    path = tmp_path / "attached.toml"
    path.write_text(
        f'[bench]\nname = "attached"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{dut_port}"\ntimestamp_mode = "energy"\n'
        f"boot_timeout_s = {boot_timeout_s}\n\n[emon]\n{emon}"
    )
    return path


@pytest.fixture
def sim_vb() -> Iterator[VirtualBench]:
    """benches/sim.toml served in this process (its World tells whether the DUT is powered)."""
    with VirtualBench(load_description(REPO / "benches" / "sim.toml")) as vb:
        yield vb


def test_sim_bench_answers_then_is_shut_down(monkeypatch) -> None:
    powered_off: list[Lpm01a] = []
    real_power_off = Lpm01a.power_off

    def power_off(self: Lpm01a) -> None:
        powered_off.append(self)
        real_power_off(self)

    started: list[sim_bench.VirtualBenchProcess] = []
    real_init = sim_bench.VirtualBenchProcess.__init__

    def init(self: sim_bench.VirtualBenchProcess, *args, **kwargs) -> None:
        real_init(self, *args, **kwargs)
        started.append(self)

    monkeypatch.setattr(Lpm01a, "power_off", power_off)
    monkeypatch.setattr(sim_bench.VirtualBenchProcess, "__init__", init)

    result = check_bench(load_bench(REPO / "benches" / "sim.toml"))

    assert result.ok, result.as_dict()
    assert [d.role for d in result.devices] == ["dut", "emon", "virtual_bench"]
    dut, emon, vb = result.devices
    assert dut.state == "answering" and dut.info["name"] == "dut"
    assert dut.info["timestamp_mode"] == "energy" and dut.info["model"] == "asc01"
    assert "bload" in dut.info["capabilities"]
    assert "'dut'" in dut.detail and "energy mode" in dut.detail
    assert emon.state == "answering"
    assert emon.info["driver"] == "lpm01a" and emon.info["version"]
    assert emon.info["voltage_v"] == 1.8 and emon.info["sample_rate_hz"] == 1000
    assert vb.state == "answering" and vb.info["ports"]["dut"] == dut.info["port"]
    assert all(d.state in STATES for d in result.devices)
    # Afterwards: the DUT's supply was switched off and the virtual bench has exited.
    assert powered_off
    assert len(started) == 1 and not started[0].running


def test_dut_in_the_other_mode(tmp_path: Path) -> None:
    perf = bench_variant(tmp_path, "perf",
                         mode=('timestamp_mode = "energy"', 'timestamp_mode = "performance"'))
    with VirtualBench(load_description(perf)) as vb:
        bench = load_bench(attached_bench(tmp_path, vb.ports["dut"], vb.ports["emon"]))
        result = check_bench(bench)
        assert vb.world.powered is False
    assert not result.ok
    assert [d.role for d in result.devices] == ["dut", "emon"]
    dut, emon = result.devices
    assert dut.state == "wrong mode"
    assert "in performance timestamp mode" in dut.detail and "expects energy" in dut.detail
    assert dut.info["timestamp_mode"] == "performance" and dut.info["name"] == "dut"
    assert emon.state == "answering"


def test_silent_dut_port_is_found_but_not_answering(tmp_path: Path, sim_vb) -> None:
    silent = Pty()
    try:
        bench = load_bench(attached_bench(tmp_path, silent.path, sim_vb.ports["emon"],
                                          boot_timeout_s=0.5))
        result = check_bench(bench)
        assert sim_vb.world.powered is False
    finally:
        silent.close()
    dut, emon = result.devices
    assert dut.state == "found" and "no answer" in dut.detail and "m-ready" in dut.detail
    assert dut.info["hint"]
    assert emon.state == "answering"


def test_missing_dut_port(tmp_path: Path) -> None:
    result = check_bench(load_bench(attached_bench(tmp_path, "/dev/ttyRIG_NOPE0", None)))
    dut, emon = result.devices
    assert dut.state == "missing" and "/dev/ttyRIG_NOPE0 does not exist" in dut.detail
    assert emon.state == "not used"
    assert not result.ok


def test_missing_monitor_port_leaves_the_dut_unchecked(tmp_path: Path, sim_vb) -> None:
    bench = load_bench(attached_bench(tmp_path, sim_vb.ports["dut"], "/dev/ttyRIG_NOPE1"))
    dut, emon = check_bench(bench).devices
    assert emon.state == "missing" and "/dev/ttyRIG_NOPE1" in emon.detail
    assert dut.state == "not checked" and "energy monitor failed first" in dut.detail


def test_busy_dut_port(tmp_path: Path) -> None:
    pty = Pty()
    holder = serial.Serial(pty.path, exclusive=True)  # another program has the DUT's port
    try:
        result = check_bench(load_bench(attached_bench(tmp_path, pty.path, None)))
    finally:
        holder.close()
        pty.close()
    assert result.devices[0].state == "busy" and "is busy" in result.devices[0].detail


def test_cli_check_json(capsys) -> None:
    assert main(["devices", "--check", "--device", "sim", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True
    states = {d["role"]: d["state"] for d in out["devices"]}
    assert states == {"dut": "answering", "emon": "answering", "virtual_bench": "answering"}


def test_cli_check_text_and_exit_code(tmp_path: Path, capsys) -> None:
    bench = attached_bench(tmp_path, "/dev/ttyRIG_NOPE0", None)
    assert main(["devices", "--check", "--bench", str(bench)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[:2] == ["dut", "missing"]
    assert lines[2].split()[:3] == ["emon", "not", "used"]


def test_check_options_are_checked(capsys) -> None:
    assert main(["devices", "--device", "sim"]) == 2
    assert "go with --check" in capsys.readouterr().err


def test_scan_ports_with_an_injected_lister(tmp_path: Path) -> None:
    powered = bench_variant(tmp_path, "bench-supply",
                            emon=('driver = "lpm01a"', 'driver = "none"'))
    silent, held = Pty(), Pty()
    holder = serial.Serial(held.path, exclusive=True)
    lpm = ListPortInfo("/dev/ttyRIG_LPM")
    lpm.vid, lpm.pid = 0x0483, 0x5740
    try:
        with VirtualBench(load_description(powered)) as vb:  # a bench supply: the DUT is on
            listed = [ListPortInfo(p) for p in (vb.ports["dut"], silent.path, held.path)]
            ports = scan_ports(probe=True, timeout_s=0.3, lister=lambda: [*listed, lpm])
            plain = scan_ports(probe=False, lister=lambda: listed)
    finally:
        holder.close()
        silent.close()
        held.close()
    by_port = {p["port"]: p for p in ports}
    answering = by_port[vb.ports["dut"]]
    assert answering["state"] == "answering" and answering["handshake"]["name"] == "dut"
    assert by_port[silent.path]["state"] == "found"
    assert by_port[silent.path]["handshake"] == {"answer": "none"}
    assert by_port[held.path]["state"] == "busy"
    assert by_port["/dev/ttyRIG_LPM"]["state"] == "instrument"
    assert by_port["/dev/ttyRIG_LPM"]["looks_like"].startswith("ST X-NUCLEO-LPM01A")
    assert [p["port"] for p in ports] == sorted(by_port)
    assert {p["state"] for p in plain} == {"found"} and "handshake" not in plain[0]


def test_virtual_bench_that_does_not_start(monkeypatch) -> None:
    def refuse(self, bench, **kwargs) -> None:
        raise ConfigError("the virtual bench did not start: no pty left", hint="free some")

    monkeypatch.setattr(sim_bench.VirtualBenchProcess, "__init__", refuse)
    result = check_bench(load_bench(REPO / "benches" / "sim.toml"))
    states = {d.role: (d.state, d.detail) for d in result.devices}
    assert states["virtual_bench"] == ("error", "the virtual bench did not start: no pty left")
    assert states["dut"][0] == states["emon"][0] == "not checked"
    assert "the virtual bench failed first" in states["dut"][1]


def test_a_stopping_checkpoint_propagates_after_power_off(tmp_path: Path, sim_vb) -> None:
    def stop() -> None:
        raise RunInterrupted("stopped by the user")

    bench = load_bench(attached_bench(tmp_path, sim_vb.ports["dut"], sim_vb.ports["emon"]))
    with pytest.raises(RunInterrupted):
        check_bench(bench, checkpoint=stop)
    assert sim_vb.world.powered is False


def test_the_virtual_joulescope_is_a_js110_above_one_megasample() -> None:
    raw = tomllib.loads((REPO / "benches" / "sim-joulescope.toml").read_text())
    for rate, model in ((1_000_000, "js220"), (2_000_000, "js110")):
        raw["emon"]["sample_rate_hz"] = rate
        emon = check_bench(parse_bench(raw, REPO / "benches" / "sim-joulescope.toml")
                           ).device("emon")
        assert emon.state == "answering", emon
        assert (emon.info["model"], emon.info["sample_rate_hz"]) == (model, rate)


def test_cli_check_refuses_an_lpm01a_bench_too_fast_for_energy_windows(tmp_path: Path) -> None:
    """`rig devices --check` on an LPM01A at 10 kHz (bin_hexa) with an energy-mode DUT: the
    same refusal as `rig measure asc` (exit 2, the reason and the fix), not "answering"."""
    bench = bench_variant(tmp_path, "fast-lpm",
                          rate=("sample_rate_hz = 1000\n", "sample_rate_hz = 10000\n"))
    done = run_rig("devices", "--check", "--bench", str(bench))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert "bin_hexa" in done.stderr and "not public" in done.stderr
    assert "set [emon] sample_rate_hz to 5000 or less" in done.stderr
    measured = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir",
                       str(tmp_path / "runs"))
    assert measured.returncode == 2 and not (tmp_path / "runs").exists()
    assert measured.stderr.strip() == done.stderr.strip()
