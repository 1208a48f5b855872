"""A bad value is quoted in at most ~80 characters (issue 39): a 1,000,000-character value was
echoed whole in a 1 MB refusal line. Every message that quotes a value of a bench file (and of
the virtual bench's reading of it, and of the number reader every TOML file of the rig uses)
shows its start, an ellipsis and its length (`protocols.errors.quoted`)."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import pytest

from protocols.errors import ActionableError, quoted
from rig.bench.config import _SECTIONS, BENCH_KEYS, parse_bench
from rig.bench.numbers import number
from virtual_bench.description import parse_description
from virtual_bench.errors import BenchFileError

REPO = Path(__file__).resolve().parents[2]
BIG = "x" * 1_000_000
#: The longest refusal line a 1 MB value may give: the file, table, key, what was expected (a
#: list of choices), the quoted start of the value and its length, the hint.
LONGEST = 600


def test_quoted_keeps_short_values_and_shortens_long_ones() -> None:
    assert quoted("abc") == "'abc'"
    assert quoted(12) == "12"
    short = quoted(BIG)
    assert short.startswith("'xxxx") and short.endswith("…' (1000000 characters)")
    assert len(short) <= 110
    assert quoted("y" * 80) == repr("y" * 80)  # up to the limit: whole
    assert quoted(["a" * 200]).endswith("… (a list of 1 item)")
    assert quoted("é\n" * 100).startswith("'é\\né\\n")  # the repr's escapes, cut whole


def base() -> dict:
    return tomllib.loads((REPO / "benches" / "sim.toml").read_text())


def cases() -> list[tuple[str, dict]]:
    out = []
    for section, cls in _SECTIONS.items():
        for key in cls.__dataclass_fields__:
            raw = base()
            raw.setdefault(section, {})[key] = BIG
            if section == "qemu":
                raw["dut"]["port"] = "qemu"
            out.append((f"{section}.{key}", raw))
        raw = base()
        raw.setdefault(section, {})[BIG] = 1
        out.append((f"{section}.<long key>", raw))
    for key in BENCH_KEYS:
        raw = base()
        raw["bench"][key] = BIG
        out.append((f"bench.{key}", raw))
    for key in ("runs", "min_run_s", BIG):
        raw = base()
        raw["procedure"]["asc"][key] = BIG
        out.append((f"procedure.asc.{key[:8]}", raw))
    raw = base()
    raw[BIG] = {}
    out.append(("<long table>", raw))
    return out


@pytest.mark.parametrize(("where", "raw"), cases(), ids=[w for w, _ in cases()])
def test_a_million_character_value_is_quoted_short(where: str, raw: dict) -> None:
    try:
        parse_bench(copy.deepcopy(raw), Path("b.toml"))
    except ActionableError as exc:
        assert len(str(exc)) <= LONGEST, (where, str(exc)[:200])
        assert "xxxxxxxxxx" not in str(exc) or "1000000 characters" in str(exc)
    # accepted: a text key that takes any text (a name, a port) says nothing here


@pytest.mark.parametrize("key", ["speed", "inference_ms", "dut", "uart_baud", "drift",
                                 "noise_seed"])
def test_the_virtual_bench_quotes_a_long_value_short(key: str) -> None:
    raw = base()
    raw["sim"][key] = BIG
    with pytest.raises(BenchFileError) as err:
        parse_description(raw, Path("b.toml"))
    assert len(str(err.value)) <= LONGEST and "(1000000 characters)" in str(err.value)


def test_the_number_reader_quotes_a_long_value_short() -> None:
    with pytest.raises(ActionableError) as err:
        number(BIG, path="s.toml", table="sweep", key="timeout_s")
    assert len(str(err.value)) <= LONGEST and "(1000000 characters)" in str(err.value)


def test_a_long_port_is_quoted_short(tmp_path: Path) -> None:
    from rig.run.measure import check_bench_setup

    raw = base()
    raw["dut"]["port"] = "/dev/" + BIG
    with pytest.raises(ActionableError) as err:
        check_bench_setup(parse_bench(raw, tmp_path / "b.toml"))
    assert len(str(err.value)) <= LONGEST and "does not exist" in str(err.value)


@pytest.mark.parametrize("bench", ["qemu-m4", "xylo"])
def test_a_path_too_long_to_look_up_is_refused_naming_the_key(bench: str) -> None:
    """A million-character path: the system cannot even look it up (it raised OSError, a
    traceback quoting it whole)."""
    if bench == "qemu-m4":
        raw = tomllib.loads((REPO / "benches" / "qemu-m4.toml").read_text())
        raw["qemu"]["firmware"], key = "/tmp/" + BIG, "[qemu] firmware"
    else:
        raw = base()
        raw["dut"].update(kind="xylo", spec=BIG)
        key = "[dut] spec"
    with pytest.raises(ActionableError) as err:
        parse_bench(raw, Path("b.toml"))
    assert f"b.toml: {key} '" in str(err.value) and len(str(err.value)) <= LONGEST


@pytest.mark.parametrize("change", ["targets", "suts", "unknown", "seeds", "sut_options"])
def test_a_sweep_file_quotes_a_long_value_short(change: str) -> None:
    from rig.qubo.sweep import parse_sweep

    raw = tomllib.loads((REPO / "sweeps" / "example.toml").read_text())
    sweep = raw["sweep"]
    if change == "unknown":
        sweep[BIG] = 1
    elif change == "suts":
        sweep["suts"] = [BIG]
    elif change == "seeds":
        sweep["seeds"] = [BIG]
    elif change == "sut_options":
        sweep["sut_options"] = {BIG: {}}
    else:
        sweep[change] = BIG
    with pytest.raises(ActionableError) as err:
        parse_sweep(raw, Path("s.toml"))
    assert len(str(err.value)) <= LONGEST, str(err.value)[:300]
