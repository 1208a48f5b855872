"""Every number in a bench, sweep, system or tuning file is checked when the file is loaded:
its type, finite, in its span (rig/bench/numbers.py). A refusal is one ConfigError line naming
the file, the table and the key; `rig measure` exits 2 with no run folder and no instrument
touched. The loaders are fuzzed: any TOML value anywhere gives a result or a ConfigError."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import math
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from drivers.errors import VoltageLimitError
from rig.bench import config
from rig.bench.config import NUMBER_SPANS, load_bench, parse_bench
from rig.errors import ConfigError
from rig.qubo import tuning
from rig.qubo.sweep import load_sweep, parse_sweep
from rig.report.system import load_system
from tests.e2e.runs import RIG

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "benches" / "sim.toml"
SWEEP = REPO / "sweeps" / "example.toml"
TUNING = REPO / "sweeps" / "loihi2-tuning.toml"
MQTT = {"url": "mqtt://rig-a@broker.lab:1883", "power_rate_hz": 2.0, "queue": 1000}
#: Non-finite values and a wrong type: refused for every number of every file.
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
WRONG_TYPE = {"text": "1", "bool": True, "array": [1]}


# -- TOML text of any value (inline tables: a document is `key = value` lines) -------------------
def toml_value(value: Any) -> str:
    """`value` as TOML text that tomllib reads back as `value`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else repr(value)  # repr: 'inf', '-inf', '1e+16'
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # control characters as \\uXXXX
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(type(value))


def toml_document(data: dict[str, Any]) -> str:
    return "".join(f"{json.dumps(k, ensure_ascii=False)} = {toml_value(v)}\n"
                   for k, v in data.items())


def test_the_toml_writer_round_trips() -> None:
    for path in (SIM, SWEEP, TUNING):
        raw = tomllib.loads(path.read_text())
        assert tomllib.loads(toml_document(raw)) == raw


# -- table tests, per file kind ------------------------------------------------------------------
def bench_raw() -> dict[str, Any]:
    """benches/sim.toml with an [mqtt] and an [io_manager] table: every section's numbers."""
    raw = tomllib.loads(SIM.read_text())
    raw["mqtt"] = dict(MQTT)
    raw["io_manager"] = {"port": "virtual", "baud": 115200}
    raw["dut"]["power_frequency_hz"] = 5.0
    return raw


def put(raw: dict[str, Any], dotted: str, value: Any) -> None:
    *tables, key = dotted.split(".")
    for t in tables:
        raw = raw.setdefault(t, {})
    raw[key] = value


def out_of_span(span: config.Span) -> list[float]:
    """A value just past each end of `span`."""
    out = []
    if span.high is not None:
        out.append(span.high * 2 + 1)
    if span.low is not None:
        out.append(span.low if span.low_open else span.low - 1)
    return out


def assert_one_line(exc: BaseException, path: Path | str, table: str, key: str) -> None:
    text = str(exc)
    assert "\n" not in text, text
    assert text.startswith(f"{path}: [{table}] {key}:"), text


def test_the_valid_bench_loads() -> None:
    parse_bench(bench_raw(), SIM)


def test_every_number_of_a_bench_has_a_span() -> None:
    """A numeric field added to a bench table without a span would be checked for type and
    finiteness only: every int/float field has its entry in `config.NUMBER_SPANS`."""
    tables = {"dut": config.DutConfig, "emon": config.EmonConfig,
              "io_manager": config.IoManagerConfig, "dataset": config.DatasetConfig,
              "procedure.asc": config.AscOptions, "sim": config.SimConfig,
              "mqtt": config.MqttConfig}
    numeric = {f"{t}.{f.name}" for t, cls in tables.items() for f in dataclasses.fields(cls)
               if type(f.default) in (int, float)} | {"bench.voltage_limit_v"}
    assert numeric == set(NUMBER_SPANS), ("add a span to rig/bench/config.py NUMBER_SPANS for: "
                                          f"{sorted(numeric - set(NUMBER_SPANS))}")


BENCH_CASES = [(key, label, value) for key in NUMBER_SPANS
               for label, value in [*NON_FINITE.items(), *WRONG_TYPE.items(),
                                    *((f"out of span {v:g}", v)
                                      for v in out_of_span(NUMBER_SPANS[key]))]]


@pytest.mark.parametrize(("key", "label", "value"), BENCH_CASES,
                         ids=[f"{k}-{label}" for k, label, _ in BENCH_CASES])
def test_a_bad_bench_number_names_file_table_and_key(key: str, label: str, value: Any) -> None:
    raw = bench_raw()
    put(raw, key, value)
    with pytest.raises(ConfigError) as info:
        parse_bench(raw, SIM)
    table, _, name = key.rpartition(".")
    assert_one_line(info.value, SIM, table, name)
    if label in NON_FINITE:
        assert f"{label} is not a finite number" in str(info.value)


def test_a_non_finite_message_says_what_is_expected() -> None:
    raw = bench_raw()
    raw["bench"]["voltage_limit_v"] = math.nan
    with pytest.raises(ConfigError) as info:
        parse_bench(raw, SIM)
    assert info.value.message == (f"{SIM}: [bench] voltage_limit_v: nan is not a finite "
                                  "number; expected a number in (0, 60] V")
    assert "voltage_limit_v = 3.3" in info.value.hint


def test_a_non_finite_number_under_an_unknown_or_free_form_key_is_refused() -> None:
    spec = tomllib.loads(SWEEP.read_text())
    spec["sweep"]["sut_options"] = {"cpu-sa": {"num_reads": math.inf}}
    with pytest.raises(ConfigError) as info:
        parse_sweep(spec, SWEEP)
    assert_one_line(info.value, SWEEP, "sweep.sut_options.cpu-sa", "num_reads")


SWEEP_SPANS = {"nodes": True, "densities": True, "timeouts": True, "seeds": True,
               "solver_seed": False}
SWEEP_CASES = [(key, label, value) for key, listed in SWEEP_SPANS.items()
               for label, value in [*NON_FINITE.items(), *WRONG_TYPE.items(),
                                    ("out of span", 1e9 if key != "nodes" else 10**7),
                                    ("below", -1)]]


@pytest.mark.parametrize(("key", "label", "value"), SWEEP_CASES,
                         ids=[f"{k}-{label}" for k, label, _ in SWEEP_CASES])
def test_a_bad_sweep_number_names_file_table_and_key(key: str, label: str, value: Any) -> None:
    raw = tomllib.loads(SWEEP.read_text())
    listed = SWEEP_SPANS[key]
    if listed and label == "array":
        return  # [[1]]: one wrong-typed element, as "text" and "bool" are
    raw["sweep"][key] = [value] if listed else value
    with pytest.raises(ConfigError) as info:
        parse_sweep(raw, SWEEP)
    assert_one_line(info.value, SWEEP, "sweep", f"{key}[0]" if listed else key)


TUNING_KEYS = {  # where in the file -> (table, key) in the message; numbers with a span
    ("timeout_s",): ("", "timeout_s"),
    ("entry", 0, "nodes"): ("entry[0]", "nodes"),
    ("entry", 0, "density"): ("entry[0]", "density"),
    ("search", 1, "choice"): ("search[1]", "choice"),
    ("tuning_seeds", 2): ("", "tuning_seeds[2]"),
}
TUNING_CASES = [(where, label, value) for where in TUNING_KEYS
                for label, value in [*NON_FINITE.items(), *WRONG_TYPE.items(),
                                     ("out of span", 10**7), ("below", -1)]]


@pytest.mark.parametrize(("where", "label", "value"), TUNING_CASES,
                         ids=[f"{'.'.join(map(str, w))}-{label}" for w, label, _ in TUNING_CASES])
def test_a_bad_tuning_number_names_file_table_and_key(where: tuple, label: str,
                                                      value: Any) -> None:
    content = tomllib.loads(TUNING.read_text())
    node = content
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = value
    with pytest.raises(ConfigError) as info:
        tuning.validate(content, str(TUNING))
    table, key = TUNING_KEYS[where]
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(f"{TUNING}: [{table}] {key}:" if table else f"{TUNING}: {key}:"), text


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_a_non_finite_tuning_parameter_or_gap_is_refused(value: float) -> None:
    content = tomllib.loads(TUNING.read_text())
    content["entry"][1]["parameters"]["temperature"] = value
    with pytest.raises(ConfigError) as info:
        tuning.validate(content, str(TUNING))
    assert_one_line(info.value, TUNING, "entry[1].parameters", "temperature")
    content = tomllib.loads(TUNING.read_text())
    content["search"][0]["candidates"][2]["mean_gap"] = value
    with pytest.raises(ConfigError) as info:
        tuning.validate(content, str(TUNING))
    assert_one_line(info.value, TUNING, "search[0].candidates[2]", "mean_gap")


@pytest.mark.parametrize("value", [*NON_FINITE.values(), 3, True, 1e300])
@pytest.mark.parametrize("table", ["submission", "systems.dut-a"])
def test_a_number_in_a_system_file_is_refused(tmp_path: Path, table: str, value: Any) -> None:
    """Every value of a system file is text: a number, finite or not, names file, table, key."""
    path = tmp_path / "system.toml"
    key = "title" if table == "submission" else "tuning"
    path.write_text(f"[{table}]\n{key} = {toml_value(value)}\n")
    with pytest.raises(ConfigError) as info:
        load_system(path, ["dut-a"])
    assert_one_line(info.value, path, table, key)


# -- the command line: exit 2, one line, no run folder, no instrument touched ----------------------
@pytest.mark.parametrize(("key", "value"), [("voltage_limit_v", "nan"),
                                            ("voltage_limit_v", "inf"),
                                            ("supply_voltage_v", "-inf"),
                                            ("sample_rate_hz", "1e12")])
def test_measure_refuses_at_load_before_any_folder_or_port(tmp_path: Path, key: str,
                                                           value: str) -> None:
    """The bench's ports are a running virtual bench's ptys (not "virtual": the rig would start
    its own): the simulated LPM01A never got host control and the DUT was never powered."""
    from virtual_bench.bench import VirtualBench
    from virtual_bench.description import load_description

    raw = tomllib.loads(SIM.read_text())
    with VirtualBench(load_description(SIM)) as vb:
        raw["dut"]["port"], raw["emon"]["port"] = vb.ports["dut"], vb.ports["emon"]
        del raw["sim"]
        raw["bench"]["simulated"] = True
        table = "bench" if key == "voltage_limit_v" else "emon"
        raw[table][key] = float(value)
        bench = tmp_path / "bench.toml"
        bench.write_text(toml_document(raw))
        runs = tmp_path / "runs"
        done = subprocess.run([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                               str(runs)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{bench}: [{table}] {key}:" in lines[0], done.stderr
        assert not runs.exists()
        assert vb.emon.host_control is False and vb.world.generation == 0


# -- fuzz: any TOML value anywhere ----------------------------------------------------------------
SCALARS = st.one_of(
    st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**32, 1e308, 5e-324, -0.0, 3.3, 60.0]),
    st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    st.sampled_from(["virtual", "lpm01a", "n6705", "aux", "synthetic-dcase", "cpu-sa", "", "\x00"]),
    st.dates(), st.times(), st.datetimes(),
)
TOML_VALUES = st.recursive(
    SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                     st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)
NUMBERS = st.one_of(st.sampled_from([math.nan, math.inf, -math.inf]),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.integers(min_value=-(2**63), max_value=2**63 - 1),
                    st.sampled_from([1e308, -1.0, 0.0, 0, -1, 2**63 - 1]))


def values_for(original: Any) -> st.SearchStrategy:
    """Mostly a value of the original's kind (a number for a number: the loader's checks
    past the type), else any TOML value."""
    if isinstance(original, bool):
        same = st.booleans()
    elif isinstance(original, int | float):
        same = NUMBERS
    elif isinstance(original, str):  # paths and ports: a NUL byte too
        same = st.one_of(st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
                         st.sampled_from(["", "\x00", "a\x00b", "virtual", "/"]))
    elif isinstance(original, list):
        same = st.lists(NUMBERS | SCALARS, min_size=1, max_size=4)
    else:
        same = TOML_VALUES
    return st.one_of(same, same, TOML_VALUES)


def leaves(data: Any, at: tuple = ()) -> list[tuple]:
    """Every place a value sits, as a key path (tables, arrays and the tables themselves)."""
    out = [at] if at else []
    if isinstance(data, dict):
        for k, v in data.items():
            out += leaves(v, (*at, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out += leaves(v, (*at, i))
    return out


def at(data: Any, where: tuple) -> Any:
    for step in where:
        data = data[step]
    return data


def substituted(base: dict[str, Any], where: tuple, value: Any, new_key: str | None) -> dict:
    data = copy.deepcopy(base)
    node = data
    for step in where[:-1]:
        node = node[step]
    if new_key is not None and isinstance(node, dict):
        node[new_key] = value
    else:
        node[where[-1]] = value
    return data


def fuzz(base_file: Path, load: Any):
    base = tomllib.loads(base_file.read_text())
    # Every place, the numbers' three times over: most of what the loaders check is there.
    places = leaves(base)
    places += 2 * [w for w in places if type(at(base, w)) in (int, float)]

    @settings(max_examples=120, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(where=st.sampled_from(places), data=st.data(),
           new_key=st.none() | st.none() | st.sampled_from(["x", "seed", "port"]))
    def check(tmp_path: Path, where: tuple, data: st.DataObject, new_key: str | None) -> None:
        value = data.draw(values_for(at(base, where)), label="value")
        path = tmp_path / base_file.name
        path.write_text(toml_document(substituted(base, where, value, new_key)),
                        encoding="utf-8")
        try:
            loaded = load(path)
        except (ConfigError, VoltageLimitError):  # a one-line refusal: the only ones allowed
            return
        assert not non_finite(loaded), f"loaded with {non_finite(loaded)}"

    return check


def non_finite(data: Any) -> list[float]:
    """Every nan or inf in what a loader returned (dataclasses, tables, arrays)."""
    if dataclasses.is_dataclass(data):
        data = dataclasses.asdict(data)
    if isinstance(data, dict):
        return [x for v in data.values() for x in non_finite(v)]
    if isinstance(data, list | tuple):
        return [x for v in data for x in non_finite(v)]
    return [data] if isinstance(data, float) and not math.isfinite(data) else []


def test_fuzz_bench_loader(tmp_path: Path) -> None:
    fuzz(REPO / "benches" / "sim-n6705.toml", load_bench)(tmp_path)


def test_fuzz_bench_loader_with_every_table(tmp_path: Path) -> None:
    full = tmp_path / "full" / "bench.toml"
    full.parent.mkdir()
    full.write_text(toml_document(bench_raw()))
    load_bench(full)
    fuzz(full, load_bench)(tmp_path)


def test_fuzz_bench_loader_on_a_xylo_bench(tmp_path: Path) -> None:
    """A Xylo bench: its spec file is resolved and checked at load."""
    raw = tomllib.loads((REPO / "benches" / "xylo.toml").read_text())
    raw["dut"]["spec"] = str((REPO / "benches" / raw["dut"]["spec"]).resolve())
    xylo = tmp_path / "base" / "xylo.toml"
    xylo.parent.mkdir()
    xylo.write_text(toml_document(raw))
    load_bench(xylo)
    fuzz(xylo, load_bench)(tmp_path)


def test_fuzz_sweep_loader(tmp_path: Path) -> None:
    fuzz(SWEEP, load_sweep)(tmp_path)


def test_fuzz_tuning_loader(tmp_path: Path) -> None:
    fuzz(TUNING, tuning.load_tuning)(tmp_path)


def test_fuzz_system_loader(tmp_path: Path) -> None:
    system = tmp_path / "base" / "system.toml"
    system.parent.mkdir()
    system.write_text('[submission]\ntitle = "t"\nsubmitter = "s"\n'
                      '[systems.dut-a]\ntuning = "x"\ncomponents_omitted = "none"\n')
    load_system(system, ["dut-a"])
    fuzz(system, lambda p: load_system(p, ["dut-a"]))(tmp_path)
