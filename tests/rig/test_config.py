"""Bench files: valid ones load, every mistake names the file, the key and what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from drivers.errors import VoltageLimitError
from rig.bench.config import known_devices, load_bench, resolve_device
from rig.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bench.toml"
    path.write_text(text)
    return path


def test_shipped_benches_load() -> None:
    sim = load_bench(REPO / "benches" / "sim.toml")
    assert sim.simulated and sim.sim is not None
    assert sim.emon.supply_voltage_v == 1.8
    assert (sim.sim.idle_power_mw, sim.sim.active_power_mw, sim.sim.inference_ms) == (
        1.20, 3.60, 12.5)
    hw = load_bench(REPO / "benches" / "arduino.toml")
    assert not hw.simulated and hw.sim is None and hw.dut.port == "/dev/ttyACM0"
    # The energy setup through a UNO: the DUT has no port of its own, and says so in manifests.
    io = load_bench(REPO / "benches" / "arduino-io-manager.toml")
    assert not io.simulated and io.io_manager.port == "/dev/ttyACM0"
    assert io.dut.port == "through-io-manager" and io.dut.download == "hex-crc"


def test_device_names_resolve_and_unknown_lists_known(monkeypatch) -> None:
    monkeypatch.chdir(REPO)
    assert resolve_device("sim") == REPO / "benches" / "sim.toml"
    assert "sim" in known_devices()
    with pytest.raises(ConfigError) as err:
        resolve_device("xylo-typo")
    assert "xylo-typo" in err.value.message and "sim" in err.value.hint


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_bench(tmp_path / "nope.toml")


def test_malformed_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_bench(write(tmp_path, "[bench\nname = 1"))


def test_wrong_type_names_file_key_expected_and_found(tmp_path: Path, sim_bench_text) -> None:
    path = write(tmp_path, sim_bench_text.replace("baud = 115200", 'baud = "fast"'))
    with pytest.raises(ConfigError) as err:
        load_bench(path)
    msg = err.value.message
    assert str(path) in msg and "[dut]" in msg and "baud" in msg
    assert "an integer" in msg and "'fast'" in msg


def test_bad_choice_lists_allowed(tmp_path: Path, sim_bench_text) -> None:
    path = write(tmp_path, sim_bench_text.replace('timestamp_mode = "energy"',
                                                  'timestamp_mode = "turbo"'))
    with pytest.raises(ConfigError) as err:
        load_bench(path)
    assert "energy, performance" in err.value.message and "'turbo'" in err.value.message


def test_unknown_key_is_a_typo_not_ignored(tmp_path: Path, sim_bench_text) -> None:
    path = write(tmp_path, sim_bench_text.replace("sample_rate_hz", "sample_rate"))
    with pytest.raises(ConfigError) as err:
        load_bench(path)
    assert "'sample_rate'" in err.value.message and "sample_rate_hz" in err.value.hint


def test_supply_above_limit_refused_at_load(tmp_path: Path, sim_bench_text) -> None:
    path = write(tmp_path, sim_bench_text.replace("supply_voltage_v = 1.8",
                                                  "supply_voltage_v = 3.6"))
    with pytest.raises(VoltageLimitError) as err:
        load_bench(path)
    assert "3.6 V" in err.value.message and "3.3 V" in err.value.message


def test_missing_voltage_limit(tmp_path: Path, sim_bench_text) -> None:
    path = write(tmp_path, sim_bench_text.replace("voltage_limit_v = 3.3\n", ""))
    with pytest.raises(ConfigError, match="voltage_limit_v is missing"):
        load_bench(path)


def test_virtual_port_needs_sim_table(tmp_path: Path, sim_bench_text) -> None:
    text = sim_bench_text[: sim_bench_text.index("[sim]")]
    with pytest.raises(ConfigError, match=r"needs a \[sim\] table"):
        load_bench(write(tmp_path, text))


def test_active_below_idle_refused(tmp_path: Path, sim_bench_text) -> None:
    path = write(tmp_path, sim_bench_text.replace("active_power_mw = 3.60",
                                                  "active_power_mw = 0.5"))
    with pytest.raises(ConfigError, match="below idle_power_mw"):
        load_bench(path)


def test_snapshot_has_every_setting() -> None:
    snap = load_bench(REPO / "benches" / "sim.toml").snapshot()
    assert snap["emon"]["sample_rate_hz"] == 1000.0
    assert snap["asc"]["runs"] == 5 and snap["sim"]["speed"] == 50.0
    assert snap["voltage_limit_v"] == 3.3


def test_io_manager_section(tmp_path: Path, sim_bench_text) -> None:
    bench = load_bench(REPO / "benches" / "sim-io-manager.toml")
    assert bench.io_manager is not None and bench.io_manager.baud == 115200
    assert load_bench(REPO / "benches" / "sim.toml").io_manager is None
    bad = write(tmp_path, sim_bench_text + "\n[io_manager]\nport = 3\n")
    with pytest.raises(ConfigError, match=r"\[io_manager\] port: expected a string"):
        load_bench(bad)


def test_sim_io_manager_is_the_python_one_or_the_sketch_on_simavr(tmp_path: Path) -> None:
    assert load_bench(REPO / "benches" / "sim-io-manager.toml").sim.io_manager == "python"
    text = (REPO / "benches" / "simavr-io-manager.toml").read_text()
    assert load_bench(REPO / "benches" / "simavr-io-manager.toml").sim.io_manager == "simavr"
    bad = write(tmp_path, text.replace('io_manager = "simavr"', 'io_manager = "qemu"'))
    with pytest.raises(ConfigError, match=r"io_manager: expected one of python, simavr; "
                                          r"found 'qemu'"):
        load_bench(bad)


def test_sim_driver_alias_means_the_virtual_bench(tmp_path: Path, sim_bench_text) -> None:
    text = sim_bench_text.replace('driver = "lpm01a"\nport = "virtual"', 'driver = "n6705-sim"')
    bench = load_bench(write(tmp_path, text))
    assert (bench.emon.driver, bench.emon.port) == ("n6705", "virtual")
    clash = sim_bench_text.replace('driver = "lpm01a"\nport = "virtual"',
                                   'driver = "n6705-sim"\nport = "/dev/ttyACM0"')
    with pytest.raises(ConfigError, match="is simulated but port/resource is set"):
        load_bench(write(tmp_path, clash))


def test_resource_is_an_address(tmp_path: Path, sim_bench_text) -> None:
    text = sim_bench_text.replace('driver = "lpm01a"\nport = "virtual"',
                                  'driver = "34465a"\nresource = "TCPIP0::10.0.0.5::5025::SOCKET"')
    bench = load_bench(write(tmp_path, text))
    assert bench.emon.address == "TCPIP0::10.0.0.5::5025::SOCKET"


@pytest.mark.parametrize("path", sorted((REPO / "benches" / "workers").glob("*.toml")),
                         ids=lambda p: p.name)
def test_shipped_worker_files_load(path: Path) -> None:
    """benches/workers/*.toml: a `[worker]` table and no DUT; nothing may be powered."""
    bench = load_bench(path)
    assert bench.worker is not None and bench.worker_only
    assert bench.worker.resources and set(bench.worker.resources.values()) == {1}
    assert bench.voltage_limit_v == 0.0 and bench.emon.driver == "none"
    with pytest.raises(ConfigError, match="is a worker file"):
        bench.require_dut()


WORKER_FILE = '[bench]\nname = "w"\n'


@pytest.mark.parametrize(("line", "says"), [
    ("port = 5", r"bench\.toml: \[worker\] unknown key 'port'"),
    ('name = ""', r"bench\.toml: \[worker\] name: expected a non-empty string"),
    ("resources = { cpu_tabu = 1 }", r"\[worker\] resources: unknown resource 'cpu_tabu'"),
    ("resources = { cpu-tabu = 2 }",
     r"bench\.toml: \[worker\.resources\] cpu-tabu: expected an integer in \[1, 1\], found 2"),
    ("resources = { cpu-tabu = 1.0 }",
     r"\[worker\.resources\] cpu-tabu: expected an integer, found 1\.0"),
    ("resources = { cpu-tabu = true }",
     r"\[worker\.resources\] cpu-tabu: expected an integer, found True"),
    ("resources = { cpu-tabu = nan }",
     r"\[worker\.resources\] cpu-tabu: nan is not a finite number"),
])
def test_a_bad_worker_key_or_number_is_refused(tmp_path: Path, sim_bench_text: str, line: str,
                                               says: str) -> None:
    """In a worker file and in a full bench alike (a bench may also serve as a worker)."""
    resources = "" if line.startswith("resources") else "resources = { cpu-tabu = 1 }\n"
    for text in (WORKER_FILE, sim_bench_text):
        path = write(tmp_path, f"{text}\n[worker]\n{resources}{line}\n")
        with pytest.raises(ConfigError, match=says) as err:
            load_bench(path)
        assert "\n" not in str(err.value)


def test_a_full_bench_keeps_its_worker_table(tmp_path: Path, sim_bench_text: str) -> None:
    bench = load_bench(write(tmp_path, sim_bench_text + '\n[worker]\nresources = { xylo = 1 }\n'
                                                        'name = "bench-3"\n'))
    assert bench.worker is not None and not bench.worker_only
    assert (bench.worker.resources, bench.worker.name) == ({"xylo": 1}, "bench-3")
    bench.require_dut()  # a bench with a DUT drives it


def test_dut_download_is_a_known_method_the_line_can_carry(tmp_path: Path) -> None:
    """`[dut] download` prices the disk preflight: one of the methods, and never "binary"
    through an IO manager's pass-through (it carries commands, not raw bytes)."""
    board = (REPO / "benches" / "arduino.toml").read_text()
    assert load_bench(REPO / "benches" / "arduino.toml").dut.download == "binary"
    for method in ("hex-crc", "hex-read-back"):
        text = board.replace('download = "binary"', f'download = "{method}"')
        assert load_bench(write(tmp_path, text)).dut.download == method
    unset = board.replace('download = "binary"\n', "")
    assert load_bench(write(tmp_path, unset)).dut.download == ""
    with pytest.raises(ConfigError, match=r"download: expected one of binary, hex-crc, "
                                          r"hex-read-back; found 'hex'"):
        load_bench(write(tmp_path, board.replace('download = "binary"', 'download = "hex"')))
    io = (REPO / "benches" / "sim-io-manager.toml").read_text()
    behind = io.replace("[dut]\n", '[dut]\ndownload = "binary"\n', 1)
    with pytest.raises(ConfigError, match="behind an IO manager") as err:
        load_bench(write(tmp_path, behind))
    assert "hex-crc" in err.value.hint
    assert load_bench(write(tmp_path, behind.replace('"binary"', '"hex-crc"'))).dut.download \
        == "hex-crc"


def test_sim_uart_baud_paces_only_the_python_dut_on_its_own_line(tmp_path: Path,
                                                                  sim_bench_text) -> None:
    assert 'dut = "auto"' in sim_bench_text
    paced = sim_bench_text.replace('dut = "auto"', 'dut = "python"\nuart_baud = 115200')
    assert load_bench(write(tmp_path, paced)).sim.uart_baud == 115200
    assert load_bench(REPO / "benches" / "sim.toml").sim.uart_baud == 0  # unset: a pty's pace
    c_shim = paced.replace('dut = "python"', 'dut = "c-shim"')
    with pytest.raises(ConfigError, match=r"uart_baud paces the Python DUT's own line; this "
                                          r"bench has dut = 'c-shim'"):
        load_bench(write(tmp_path, c_shim))
    with pytest.raises(ConfigError, match="uart_baud"):
        load_bench(write(tmp_path, paced.replace("uart_baud = 115200", "uart_baud = -1")))
