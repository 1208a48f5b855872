"""The loaders' key tables (rig.bench.config CHOICES, BENCH_KEYS, WORKER_KEYS; rig.qubo.sweep
SWEEP_KEYS, CHOICES) are what the loaders check, so the reference pages generated from them
(docs/generate.py) say what a file may hold."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest

from rig.bench import config
from rig.bench.config import parse_bench
from rig.errors import ConfigError
from rig.qubo import sweep
from rig.qubo.sweep import parse_sweep

REPO = Path(__file__).resolve().parents[2]


def raw(name: str) -> dict[str, Any]:
    return tomllib.loads((REPO / name).read_text())


#: A shipped bench on which each choice is checked (the QEMU machine needs the QEMU bench).
BENCH_FOR = {"qemu.machine": "benches/qemu-m4.toml"}


@pytest.mark.parametrize("dotted", sorted(config.CHOICES))
def test_every_choice_of_a_bench_file_is_taken_and_anything_else_refused(dotted: str) -> None:
    base = raw(BENCH_FOR.get(dotted, "benches/sim.toml"))
    table, key = dotted.split(".")
    bad = copy.deepcopy(base)
    bad.setdefault(table, {})[key] = "no-such-word"
    with pytest.raises(ConfigError) as err:
        parse_bench(bad, Path("b.toml"))
    assert f"b.toml: [{table}] {key}: expected one of {', '.join(config.CHOICES[dotted])}" \
        in str(err.value)


@pytest.mark.parametrize(("section", "keys"), [("bench", config.BENCH_KEYS),
                                               ("worker", config.WORKER_KEYS)])
def test_the_bench_and_worker_key_lists_are_the_known_keys(section: str, keys: tuple) -> None:
    base = raw("benches/workers/cpu-baseline.toml")
    base.setdefault(section, {})["no_such_key"] = 1
    with pytest.raises(ConfigError) as err:
        parse_bench(base, Path("w.toml"))
    assert err.value.hint == f"known keys here: {', '.join(sorted(keys))}"


def test_the_sweep_key_list_is_the_known_keys_and_its_choices_are_checked() -> None:
    base = raw("sweeps/example.toml")
    unknown = copy.deepcopy(base)
    unknown["sweep"]["no_such_key"] = 1
    with pytest.raises(ConfigError) as err:
        parse_sweep(unknown, Path("s.toml"))
    assert set(sweep.SWEEP_KEYS) <= set(err.value.hint.removeprefix("known keys here: ")
                                       .split(", "))
    for key, words in sweep.CHOICES.items():
        bad = copy.deepcopy(base)
        bad["sweep"][key] = ["no-such-sut"] if key == "suts" else "no-such-mode"
        with pytest.raises(ConfigError) as err:
            parse_sweep(bad, Path("s.toml"))
        assert ", ".join(words) in str(err.value)
        for word in words:
            good = copy.deepcopy(base)
            good["sweep"][key] = [word] if key == "suts" else word
            parse_sweep(good, Path("s.toml"))
