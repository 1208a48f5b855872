"""Imports point one way only.

- Top-level layers (`ALLOWED`): `protocols` imports nothing of ours; `drivers -> protocols`;
  `virtual_bench -> protocols, firmware`; `rig -> drivers, protocols` (and `firmware` from
  rig/model/ only, `EXTRA`); `gui -> rig`; `firmware -> protocols`. No GUI toolkit outside gui/.
- No import cycle between modules anywhere in our packages; an import inside a function (a lazy
  import) is still an import and counts.
- Inside rig/, the rooms (`ROOMS`) import their own room and the rooms below them, never one above;
  rooms of the same rank may use one another one way only.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: What each layer may import of ours (a layer whose folder does not exist is simply not found).
ALLOWED = {
    "protocols": {"protocols"},
    "drivers": {"drivers", "protocols"},
    "virtual_bench": {"virtual_bench", "protocols", "firmware"},
    "rig": {"rig", "drivers", "protocols"},
    "gui": {"gui", "rig"},
    "firmware": {"firmware", "protocols"},
}
#: Folders that may import more than their layer, and why.
EXTRA = {
    # The tools that write a DUT's model files (`rig model`) use the firmware's own format code.
    "rig/model/": {"firmware"},
}
GUI_TOOLKITS = {"PySide6", "PyQt6", "PyQt5", "pyqtgraph", "qasync"}

#: The rooms of rig/, low to high: a room imports rooms of a lower rank (and its own), never a
#: higher one; two rooms of one rank may not import each other both ways.
ROOMS = {
    "errors": 0,    # rig/errors.py: the typed errors and BENCH_ERRORS; imports no room
    "units": 0,     # rig/units.py: SI formatting; imports no room
    "bench": 1,     # what a bench is, read from its file (and its [mqtt] broker settings)
    "traces": 2,    # trace files, disk space, the viewer's data layer, the analysis of a trace
    "datasets": 3,  # the test sets a DUT is measured on
    "run": 4,       # a measurement run: events, stop, recording, store, summary, ASC procedure
    "qubo": 5,      # QUBO workloads, SUTs, targets, tuning, procedure and sweep, on top of run
    "report": 6,    # documents made from run folders
    "mqtt": 6,      # telemetry and remote control of runs
    "cluster": 6,   # sweep points spread over rig hosts
    "model": 6,     # the tools that write a DUT's model files
    "dashboard": 6, # the web page of every rig: one more reader of mqtt (which never imports it)
    "submission": 6,  # sealed bundles and their verification: reads run folders and the report
    "commands": 7,  # the CLI's subcommands, using any room below
    "cli": 8,       # rig/cli.py: the entry point that registers the commands
}


def imports(path: Path) -> set[str]:
    """Top-level names a module imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def our_modules(root: Path) -> dict[str, Path]:
    """Every module of our packages under `root` by dotted name (a package by its __init__)."""
    found = {}
    for layer in ALLOWED:
        for path in sorted((root / layer).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def module_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """Our modules that module `name` imports, anywhere in it (inside functions too)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    wanted = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            wanted |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod.
            wanted |= {f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                       for a in node.names}
    found = set()
    for target in wanted:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    return found


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of ours it imports."""
    modules = our_modules(root)
    return {name: module_imports(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Each group of modules that import one another in a loop, with the edges of the loop."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while not group or group[-1] != v:
                group.append(stack.pop())
            if len(group) > 1:
                edges = [f"{a} -> {b}" for a in sorted(group) for b in sorted(graph[a] & {*group})]
                out.append(f"cycle {' / '.join(sorted(group))}: {'; '.join(edges)}")

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def room(module: str) -> str | None:
    """The rig/ room of a module (rig.run.store: run; rig.cli: cli), None outside rig/."""
    parts = module.split(".")
    return parts[1] if parts[0] == "rig" and len(parts) > 1 else None


def room_violations(graph: dict[str, set[str]]) -> list[str]:
    """Imports against the room order of rig/ (`ROOMS`)."""
    bad = []
    sideways = defaultdict(set)
    for a in sorted(graph):
        ra = room(a)
        if ra is None:
            continue
        if ra not in ROOMS:
            bad.append(f"{a}: room {ra!r} has no place in ROOMS")
            continue
        for b in sorted(graph[a]):
            rb = room(b)
            if rb is None or rb == ra:
                continue
            if rb not in ROOMS:
                bad.append(f"{a} imports {b}: room {rb!r} has no place in ROOMS")
            elif ROOMS[rb] > ROOMS[ra]:
                bad.append(f"{a} ({ra}) imports {b} ({rb}), a room above it")
            elif ROOMS[rb] == ROOMS[ra]:
                sideways[ra, rb].add(f"{a} -> {b}")
    for (ra, rb), edges in sorted(sideways.items()):
        if ra < rb and (rb, ra) in sideways:
            both = sorted(edges | sideways[rb, ra])
            bad.append(f"rooms {ra} and {rb} import each other: {'; '.join(both)}")
    return bad


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_is_below_it(layer: str) -> None:
    assert layer_violations(REPO, layer) == []


def layer_violations(root: Path, layer: str) -> list[str]:
    """Imports of `layer`'s files (under `root`) that its row of `ALLOWED` does not allow."""
    ours = set(ALLOWED)
    bad = []
    for path in sorted((root / layer).rglob("*.py")):
        names = imports(path)
        rel = path.relative_to(root).as_posix()
        allowed = ALLOWED[layer].union(*(v for k, v in EXTRA.items() if rel.startswith(k)))
        bad += [f"{rel} imports {n}" for n in sorted((names & ours) - allowed)]
        if layer != "gui":
            bad += [f"{rel} imports {n}" for n in sorted(names & GUI_TOOLKITS)]
    return bad


def test_no_import_cycle() -> None:
    graph = import_graph(REPO)
    assert len(graph) > 100 and graph["rig.run.view"] >= {"rig.run.store", "rig.traces.view"}, \
        "the walk found our modules and their imports"
    assert cycles(graph) == []


def test_rig_rooms_import_one_way() -> None:
    assert room_violations(import_graph(REPO)) == []


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from rig.bench.config import Bench\nimport drivers.transport\n")
    assert imports(module) == {"rig", "drivers"}


def test_the_checker_sees_a_cycle_and_a_back_edge(tmp_path: Path) -> None:
    files = {
        "rig/__init__.py": "",
        "rig/errors.py": "",
        "rig/bench/__init__.py": "",
        # a back edge: bench (1) imports run (4), lazily
        "rig/bench/config.py": "def f():\n    from rig.run.store import x\n",
        "rig/run/__init__.py": "",
        "rig/run/store.py": "from rig.errors import E\nx = 1\n",
        # a cycle through a lazy relative import: summary -> events -> summary
        "rig/run/summary.py": "from rig.run import events\n",
        "rig/run/events.py": "def g():\n    from .summary import s\n",
        # same-rank rooms both ways (no module cycle)
        "rig/report/__init__.py": "",
        "rig/report/runs.py": "from rig.mqtt import topics\n",
        "rig/mqtt/__init__.py": "",
        "rig/mqtt/topics.py": "",
        "rig/mqtt/board.py": "import rig.report.runs\n",
        # a new room nobody placed
        "rig/attic/__init__.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    graph = import_graph(tmp_path)
    assert graph["rig.run.summary"] == {"rig.run.events"}
    assert graph["rig.run.events"] == {"rig.run.summary"}
    assert cycles(graph) == ["cycle rig.run.events / rig.run.summary: "
                             "rig.run.events -> rig.run.summary; rig.run.summary -> rig.run.events"]
    assert room_violations(graph) == [
        "rig.attic: room 'attic' has no place in ROOMS",
        "rig.bench.config (bench) imports rig.run.store (run), a room above it",
        "rooms mqtt and report import each other: rig.mqtt.board -> rig.report.runs; "
        "rig.report.runs -> rig.mqtt.topics",
    ]
    # the rig reaching into the virtual bench, which it may only start as a process
    (tmp_path / "rig/run/measure.py").write_text("def f():\n    from virtual_bench import world\n")
    assert layer_violations(tmp_path, "rig") == ["rig/run/measure.py imports virtual_bench"]


@pytest.mark.parametrize("layer", ["protocols", "drivers", "rig", "gui"])
def test_every_package_says_what_it_holds(layer: str) -> None:
    """design.md: each sub-package's `__init__` docstring says what it holds."""
    packages = sorted((REPO / layer).rglob("__init__.py"))
    bare = [path.relative_to(REPO).as_posix() for path in packages
            if not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()]
    assert bare == []
