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

from rig.config import read_toml
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


def validate(content: Any, where: str) -> dict[str, Any]:
    """A tuning table checked: sut, entries of (nodes, density, parameters) and nothing else."""
    if not isinstance(content, dict):
        raise ConfigError(f"{where}: tuning: expected a table")
    if content.get("format") != FORMAT:
        raise ConfigError(f"{where}: tuning format {content.get('format')!r}, expected {FORMAT}",
                          hint="write it with `rig qubo tune`")
    if not isinstance(content.get("sut"), str):
        raise ConfigError(f"{where}: tuning: sut missing")
    entries = content.get("entry")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"{where}: tuning: no [[entry]]", hint="write it with `rig qubo tune`")
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or set(e) != {"nodes", "density", "parameters"}:
            raise ConfigError(f"{where}: tuning entry {i}: expected exactly nodes, density, "
                              f"parameters; found {sorted(e) if isinstance(e, dict) else e!r}",
                              hint="parameters depend on (nodes, density) only, never the seed")
        if not (isinstance(e["nodes"], int) and e["nodes"] >= 1
                and isinstance(e["density"], (int, float)) and 0 < e["density"] <= 1
                and isinstance(e["parameters"], dict)):
            raise ConfigError(f"{where}: tuning entry {i}: bad nodes/density/parameters")
    check_seeds(content.get("tuning_seeds", list(TUNING_SEEDS)))
    return content


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

    from protocols.errors import RigError
    from rig.procedures.qubo import fixed_timeout_point, open_power_meter
    from rig.qubo import suts
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
