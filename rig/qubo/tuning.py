"""`rig qubo tune`: a SUT's hyperparameters searched on the tuning seeds, as a function of
(nodes, density) only.

QUBO.md and rules.md: hyperparameters may depend on the workload's size and density, never on
its seed; tuning uses seeds 0-4 only. So the search scores every candidate of a small grid by its
mean BKS gap over the tuning seeds, per (nodes, density), and the chooser sees only those means:
the tuning file has no seed anywhere in its entries.

Lookup: a sweep point gets the parameters of the *nearest* entry: the smallest
|log(nodes / n)| + |log(density / d)|, ties to the smaller nodes, then the smaller density. An
exact (nodes, density) entry is always the nearest (distance 0).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from protocols.errors import quoted
from rig.bench.config import read_toml
from rig.bench.numbers import Span, at_least, number, positive, refuse_non_finite
from rig.errors import ConfigError

#: rules.md: the seeds hyperparameters may be tuned on.
TUNING_SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
FORMAT = 1

#: The grid searched per SUT: what its shim/solver takes (lava-optimization's NEBM solver).
GRIDS: dict[str, dict[str, list[Any]]] = {
    "loihi2": {"temperature": [1, 2, 4], "refract": [1, 2]},
}

#: measure(parameters, nodes, density, seed) -> BKS gap of one fixed-timeout solve.
Measure = Callable[[dict[str, Any], int, float, int], float]


def check_seeds(seeds: Sequence[int]) -> tuple[int, ...]:
    """The seeds, or a one-line ConfigError naming any outside the tuning seeds 0-4."""
    bad = [s for s in seeds if s not in TUNING_SEEDS]
    if bad:
        raise ConfigError(f"tuning seeds must be in 0-4 (rules.md); refused: "
                          f"{', '.join(str(s) for s in bad)}")
    if not seeds:
        raise ConfigError("tuning needs at least one seed in 0-4")
    return tuple(dict.fromkeys(int(s) for s in seeds))


def candidates(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid, in a fixed order (keys sorted, values as given)."""
    keys = sorted(grid)
    combos = itertools.product(*(grid[k] for k in keys))
    return [dict(zip(keys, values, strict=True)) for values in combos]


def choose(mean_gaps: Sequence[float]) -> int:
    """Index of the candidate with the smallest mean gap (the first on a tie).

    Its input is one number per candidate (the mean over seeds): nothing seed-specific."""
    if not mean_gaps:
        raise ValueError("no candidates")
    return min(range(len(mean_gaps)), key=lambda i: (mean_gaps[i], i))


def search(sut: str, nodes: Sequence[int], densities: Sequence[float], measure: Measure, *,
           seeds: Sequence[int] = TUNING_SEEDS, grid: dict[str, list[Any]] | None = None,
           timeout_s: float = 1.0, progress: Callable[[str], None] | None = None
           ) -> dict[str, Any]:
    """Run the search; returns the tuning file's content (see `write_tuning`)."""
    seeds = check_seeds(seeds)
    grid = dict(grid if grid is not None else GRIDS.get(sut, {}))
    cands = candidates(grid)
    entries, record = [], []
    for n, d in itertools.product(nodes, densities):
        means = []
        for params in cands:
            gaps = [float(measure(dict(params), int(n), float(d), s)) for s in seeds]
            means.append(sum(gaps) / len(gaps))
            if progress:
                progress(f"n={n} d={d:g} {params}: mean gap {means[-1]:+.4f}")
        best = choose(means)
        entries.append({"nodes": int(n), "density": float(d), "parameters": dict(cands[best])})
        record.append({"nodes": int(n), "density": float(d), "choice": best,
                       "candidates": [{"parameters": dict(p), "mean_gap": m}
                                      for p, m in zip(cands, means, strict=True)]})
    return {"format": FORMAT, "sut": sut, "timeout_s": float(timeout_s),
            "tuning_seeds": list(seeds), "grid": grid, "entry": entries, "search": record}


# -- the file ----------------------------------------------------------------------------------
def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps(content: dict[str, Any]) -> str:
    """The tuning file's TOML text."""
    lines = ["# written by `rig qubo tune`: parameters per (nodes, density), never per seed",
             f"format = {content['format']}", f"sut = {_toml_value(content['sut'])}",
             f"timeout_s = {_toml_value(content['timeout_s'])}",
             f"tuning_seeds = {_toml_value(content['tuning_seeds'])}", "", "[grid]"]
    lines += [f"{k} = {_toml_value(v)}" for k, v in content["grid"].items()]
    for e in content["entry"]:
        lines += ["", "[[entry]]", f"nodes = {e['nodes']}", f"density = {e['density']!r}",
                  f"parameters = {_toml_value(e['parameters'])}"]
    for r in content["search"]:
        lines += ["", "[[search]]", f"nodes = {r['nodes']}", f"density = {r['density']!r}",
                  f"choice = {r['choice']}", "candidates = ["]
        lines += [f"  {_toml_value(c)}," for c in r["candidates"]]
        lines += ["]"]
    return "\n".join(lines) + "\n"


def write_tuning(content: dict[str, Any], path: Path) -> None:
    path.write_text(dumps(content))


#: Where each number of a tuning file may lie (`rig.bench.numbers.number`); the rest are the
#: SUT's own parameters and the search record's gaps, which need only be finite numbers.
NUMBER_SPANS: dict[str, Span] = {
    "nodes": at_least(1, 1_000_000),
    "density": Span(0.0, 1.0, low_open=True),
    "timeout_s": positive(86_400.0, "s"),
}


def validate(content: Any, where: str) -> dict[str, Any]:
    """A tuning table checked: sut, entries of (nodes, density, parameters) and nothing else;
    every number its type, finite and in its span (`NUMBER_SPANS`)."""
    if not isinstance(content, dict):
        raise ConfigError(f"{where}: tuning: expected a table")
    if content.get("format") != FORMAT or isinstance(content.get("format"), bool):
        raise ConfigError(f"{where}: tuning format {quoted(content.get('format'))}, "
                          f"expected {FORMAT}",
                          hint="write it with `rig qubo tune`")
    if not isinstance(content.get("sut"), str):
        raise ConfigError(f"{where}: tuning: sut missing")
    if "timeout_s" in content:
        _number(content["timeout_s"], where, "", "timeout_s", float)
    entries = content.get("entry")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}: tuning: no [[entry]]", hint="write it with `rig qubo tune`")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) != {"nodes", "density", "parameters"}:
            raise ConfigError(f"{where}: tuning entry {i}: expected exactly nodes, density, "
                              f"parameters; found "
                              f"{quoted(sorted(e) if isinstance(e, dict) else e)}",
                              hint="parameters depend on (nodes, density) only, never the seed")
        _number(e["nodes"], where, f"entry[{i}]", "nodes", int)
        _number(e["density"], where, f"entry[{i}]", "density", float)
        _parameters(e["parameters"], where, f"entry[{i}]")
    grid = content.get("grid", {})
    if not isinstance(grid, dict) or not all(isinstance(v, list) for v in grid.values()):
        raise ConfigError(f"{where}: [grid]: expected a table of lists of parameter values",
                          hint="write it with `rig qubo tune`")
    _search_record(content.get("search", []), where)
    seeds = content.get("tuning_seeds", list(TUNING_SEEDS))
    if not isinstance(seeds, list):
        raise ConfigError(f"{where}: tuning_seeds: expected a list of integers in 0-4, "
                          f"found {quoted(seeds)}")
    for i, seed in enumerate(seeds):
        number(seed, path=where, table="", key=f"tuning_seeds[{i}]", kind=int,
               span=at_least(min(TUNING_SEEDS), max(TUNING_SEEDS)),
               hint="rules.md: hyperparameters are tuned on seeds 0-4 only")
    check_seeds(seeds)
    refuse_non_finite(content, where)  # the backstop: the SUT's parameters and the record
    return content


def _number(value: Any, where: str, table: str, key: str, kind: type) -> Any:
    return number(value, path=where, table=table, key=key, kind=kind, span=NUMBER_SPANS[key])


def _parameters(params: Any, where: str, table: str) -> None:
    """A SUT's parameters: a table of numbers, text or true/false (finite: checked above)."""
    if not isinstance(params, dict) or not all(
            isinstance(v, int | float | str) for v in params.values()):
        raise ConfigError(f"{where}: [{table}] parameters: expected a table of numbers, text "
                          f"or true/false, found {quoted(params)}")


def _search_record(search: Any, where: str) -> None:
    """[[search]]: what was measured per (nodes, density): each candidate's mean gap."""
    if not isinstance(search, list):
        raise ConfigError(f"{where}: search: expected [[search]] tables, found {quoted(search)}")
    for i, r in enumerate(search):
        table = f"search[{i}]"
        cands = r.get("candidates") if isinstance(r, dict) else None
        if not isinstance(cands, list) or not all(
                isinstance(c, dict) and set(c) == {"parameters", "mean_gap"} for c in cands):
            raise ConfigError(f"{where}: [{table}] candidates: expected a list of "
                              "{ parameters, mean_gap } tables",
                              hint="write it with `rig qubo tune`")
        _number(r.get("nodes"), where, table, "nodes", int)
        _number(r.get("density"), where, table, "density", float)
        number(r.get("choice"), path=where, table=table, key="choice", kind=int,
               span=at_least(0, max(0, len(cands) - 1)))
        for j, c in enumerate(cands):
            _parameters(c["parameters"], where, f"{table}.candidates[{j}]")
            number(c["mean_gap"], path=where, table=f"{table}.candidates[{j}]", key="mean_gap")


def load_tuning(path: Path) -> dict[str, Any]:
    raw = read_toml(path, "tuning file not found", "write one with `rig qubo tune ... --out FILE`")
    return validate(raw, str(path))


def digest(content: dict[str, Any]) -> str:
    """sha256 of the content's canonical JSON (what the manifest records)."""
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def parameters_for(content: dict[str, Any], nodes: int, density: float) -> dict[str, Any]:
    """The nearest entry's parameters (module docstring)."""
    def distance(e: dict[str, Any]) -> tuple[float, int, float]:
        return (abs(math.log(nodes / e["nodes"])) + abs(math.log(density / e["density"])),
                e["nodes"], e["density"])
    return dict(min(content["entry"], key=distance)["parameters"])


# -- the real measurement ----------------------------------------------------------------------
def sut_measure(sut_name: str, timeout_s: float, solver_seed: int = 0) -> tuple[Measure, Any]:
    """measure() on the real SUT (opened per parameter set with `hyperparameters=`), and close()."""
    import inspect

    from rig.errors import RigError
    from rig.qubo import suts
    from rig.qubo.procedure import fixed_timeout_point, open_power_meter
    from rig.qubo.targets import bks
    from rig.qubo.workloads import generate

    cls = suts.Loihi2Sut if sut_name == "loihi2" else suts.CpuSut
    if "hyperparameters" not in inspect.signature(cls.__init__).parameters:
        raise RigError(f"{sut_name}: the SUT takes no hyperparameters yet, so there is nothing "
                       "to tune",
                       hint="the shim must accept hyperparameters (e.g. "
                            "open_sut('loihi2', hyperparameters={...}) passed on to qload)")
    state: dict[str, Any] = {"key": None, "sut": None}

    def close() -> None:
        if state["sut"] is not None:
            state["sut"].close()
        state["sut"] = state["key"] = None

    def measure(params: dict[str, Any], nodes: int, density: float, seed: int) -> float:
        key = json.dumps(params, sort_keys=True)
        if state["key"] != key:
            close()
            state["sut"] = suts.open_sut(sut_name, hyperparameters=params)
            state["key"] = key
        workload = generate(nodes, density, seed)
        point = fixed_timeout_point(state["sut"], workload, timeout_s, solver_seed,
                                    bks(nodes, density, seed), open_power_meter("unavailable"))
        return float(point["gap"])

    return measure, close
