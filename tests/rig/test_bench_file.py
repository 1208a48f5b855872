"""Writing a Bench back to TOML: every shipped bench round-trips, awkward strings too, and a
bench the rig would refuse is never written."""

from __future__ import annotations

import tomllib
from dataclasses import fields, replace
from pathlib import Path

import pytest

from drivers.errors import VoltageLimitError
from rig.bench.config import Bench, load_bench, parse_bench
from rig.bench.saving import bench_to_toml, save_bench
from rig.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
BENCHES = sorted((REPO / "benches").glob("*.toml"))


def same_bench(a: Bench, b: Bench) -> bool:
    """Equal in everything but the file they came from."""
    return replace(a, path=b.path) == b


def test_every_shipped_bench_is_tested() -> None:
    names = {p.stem for p in BENCHES}
    assert {"sim", "sim-io-manager", "sim-joulescope", "xylo", "arduino"} <= names


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.stem)
def test_shipped_benches_round_trip(path: Path, tmp_path: Path) -> None:
    bench = load_bench(path)
    text = bench_to_toml(bench)
    assert text.startswith("# Bench file written by neurobench-rig")
    again = parse_bench(tomllib.loads(text), tmp_path / "elsewhere" / "new.toml")
    assert same_bench(again, bench)


@pytest.mark.parametrize("path", BENCHES, ids=lambda p: p.stem)
def test_saved_file_loads_back(path: Path, tmp_path: Path) -> None:
    bench = load_bench(path)
    saved = save_bench(bench, tmp_path / f"{path.stem}.toml")
    assert same_bench(load_bench(saved), bench)
    assert [p.name for p in tmp_path.iterdir()] == [saved.name]  # no temporary file left


@pytest.mark.parametrize("path", sorted((REPO / "benches" / "workers").glob("*.toml")),
                         ids=lambda p: p.stem)
def test_a_worker_table_is_saved_with_its_bench(path: Path, tmp_path: Path) -> None:
    """A worker file, and a bench that also serves as a worker: [worker] survives a save."""
    worker = load_bench(path)
    saved = save_bench(worker, tmp_path / path.name)
    assert same_bench(load_bench(saved), worker) and "[dut]" not in saved.read_text()
    sim = load_bench(REPO / "benches" / "sim.toml")
    both = replace(sim, worker=replace(worker.worker, name="bench-3"))
    assert same_bench(load_bench(save_bench(both, tmp_path / "both.toml")), both)


def test_every_key_is_written() -> None:
    bench = load_bench(REPO / "benches" / "sim.toml")
    raw = tomllib.loads(bench_to_toml(bench))
    assert set(raw) == {"bench", "dut", "emon", "dataset", "procedure", "sim"}
    assert set(raw["bench"]) == {"name", "voltage_limit_v", "simulated"}
    for section, table in [("dut", bench.dut), ("emon", bench.emon),
                           ("dataset", bench.dataset), ("sim", bench.sim)]:
        assert set(raw[section]) == {f.name for f in fields(table)}, section
    assert set(raw["procedure"]["asc"]) == {f.name for f in fields(bench.asc)}


def test_simulated_monitor_is_written_as_driver_and_virtual_port() -> None:
    bench = load_bench(REPO / "benches" / "sim-joulescope.toml")
    raw = tomllib.loads(bench_to_toml(bench))
    assert (raw["emon"]["driver"], raw["emon"]["port"]) == ("joulescope", "virtual")


def test_io_manager_section(tmp_path: Path) -> None:
    bench = load_bench(REPO / "benches" / "sim-io-manager.toml")
    raw = tomllib.loads(bench_to_toml(bench))
    assert raw["io_manager"] == {"port": "virtual", "baud": 115200}


def test_awkward_strings_round_trip(tmp_path: Path) -> None:
    base = load_bench(REPO / "benches" / "sim.toml")
    name = 'quote " backslash \\ tab \t newline \n ctrl \x01\x7f µA 电流 🔋 \'single\' """'
    bench = replace(base, name=name,
                    dataset=replace(base.dataset, path="C:\\data\\TAU \"2020\"\\"))
    text = bench_to_toml(bench)
    assert "\x01" not in text and "\x7f" not in text
    again = load_bench(save_bench(bench, tmp_path / "awkward.toml"))
    assert again.name == name and same_bench(again, bench)


def test_floats_round_trip_exactly() -> None:
    base = load_bench(REPO / "benches" / "sim.toml")
    bench = replace(
        base, voltage_limit_v=3.3000000000000003,
        emon=replace(base.emon, supply_voltage_v=0.1 + 0.2, sample_rate_hz=9.999999e6),
        asc=replace(base.asc, replicability_tolerance=1.5e-07, min_run_s=86399.99999999999),
    )
    again = parse_bench(tomllib.loads(bench_to_toml(bench)), base.path)
    assert same_bench(again, bench)
    assert again.emon.supply_voltage_v == 0.1 + 0.2


def test_a_non_finite_number_is_never_saved() -> None:
    """A bench the rig would refuse is never written: an infinite run length names its key."""
    base = load_bench(REPO / "benches" / "sim.toml")
    bench = replace(base, asc=replace(base.asc, min_run_s=float("inf")))
    with pytest.raises(ConfigError, match=r"\[procedure.asc\] min_run_s: inf is not a finite"):
        bench_to_toml(bench)


def test_lone_surrogate_is_refused() -> None:
    bench = replace(load_bench(REPO / "benches" / "sim.toml"), name="bad \udc80")
    with pytest.raises(ConfigError, match="surrogate"):
        bench_to_toml(bench)


def test_xylo_spec_is_written_relative_to_the_new_file(tmp_path: Path) -> None:
    spec = tmp_path / "models" / "net.npz"
    spec.parent.mkdir()
    spec.write_bytes(b"spec")
    xylo = load_bench(REPO / "benches" / "xylo.toml")
    bench = replace(xylo, dut=replace(xylo.dut, spec=str(spec)))
    (tmp_path / "benches").mkdir()
    saved = save_bench(bench, tmp_path / "benches" / "xylo.toml")
    assert tomllib.loads(saved.read_text())["dut"]["spec"] == "../models/net.npz"
    assert same_bench(load_bench(saved), bench)
    # Without a destination the spec stays absolute, so the text loads from anywhere.
    assert tomllib.loads(bench_to_toml(bench))["dut"]["spec"] == str(spec)


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    bench = load_bench(REPO / "benches" / "sim.toml")
    target = tmp_path / "mine.toml"
    target.write_text("# hand-written\n")
    with pytest.raises(ConfigError, match=r"mine\.toml already exists"):
        save_bench(bench, target)
    assert target.read_text() == "# hand-written\n"
    save_bench(bench, target, overwrite=True)
    assert same_bench(load_bench(target), bench)


def test_missing_folder_is_a_config_error(tmp_path: Path) -> None:
    bench = load_bench(REPO / "benches" / "sim.toml")
    with pytest.raises(ConfigError, match="does not exist"):
        save_bench(bench, tmp_path / "no" / "such.toml")


def test_voltage_above_the_limit_is_never_built_nor_written(tmp_path: Path) -> None:
    raw = tomllib.loads((REPO / "benches" / "sim.toml").read_text())
    raw["emon"]["supply_voltage_v"] = 3.6
    with pytest.raises(VoltageLimitError):
        parse_bench(raw, tmp_path / "hot.toml")
    # A Bench made by hand past the checks is refused by the writer too.
    base = load_bench(REPO / "benches" / "sim.toml")
    hot = replace(base, emon=replace(base.emon, supply_voltage_v=3.6))
    with pytest.raises(VoltageLimitError):
        save_bench(hot, tmp_path / "hot.toml")
    assert list(tmp_path.iterdir()) == []


def test_a_value_toml_cannot_hold_is_refused() -> None:
    base = load_bench(REPO / "benches" / "sim.toml")
    bench = replace(base, emon=replace(base.emon, port=None, resource="USB0::1::INSTR"))
    with pytest.raises(ConfigError, match="emon"):
        bench_to_toml(bench)
