"""The dependency arrows point one way only: gui -> rig -> drivers -> protocols; firmware/ (the
DUT side) imports nothing of ours but protocols/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
#: What each layer may import of ours.
ALLOWED = {
    "protocols": {"protocols"},
    "drivers": {"drivers", "protocols"},
    "rig": {"rig", "drivers", "protocols"},
    "gui": {"gui", "rig"},
    "firmware": {"firmware", "protocols"},
    "virtual_bench": {"virtual_bench", "protocols", "firmware"},
}
#: Folders that may import more than their layer, and why.
EXTRA = {
    # The tools that write a DUT's model files (`rig model`) use the firmware's own format code.
    "rig/model/": {"firmware"},
}
GUI_TOOLKITS = {"PySide6", "PyQt6", "PyQt5", "pyqtgraph", "qasync"}


def imports(path: Path) -> set[str]:
    """Top-level names a module imports."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_what_is_below_it(layer: str) -> None:
    ours = set(ALLOWED)
    bad = []
    for path in sorted((REPO / layer).rglob("*.py")):
        names = imports(path)
        rel = path.relative_to(REPO).as_posix()
        allowed = ALLOWED[layer].union(*(v for k, v in EXTRA.items() if rel.startswith(k)))
        bad += [f"{rel} imports {n}" for n in (names & ours) - allowed]
        if layer != "gui":
            bad += [f"{rel} imports {n}" for n in names & GUI_TOOLKITS]
    assert bad == []


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from rig.bench.config import Bench\nimport drivers.transport\n")
    assert imports(module) == {"rig", "drivers"}
