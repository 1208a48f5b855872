"""docs/architecture.md's diagram is drawn from the code: it must match the tree as it is."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


def drawing() -> ModuleType:
    spec = importlib.util.spec_from_file_location("architecture", REPO / "docs" / "architecture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_diagram_is_the_code_s() -> None:
    assert drawing().main(["--check"]) == 0, "run `python docs/architecture.py` and commit the SVG"


def test_every_package_and_room_is_a_box_with_a_role_and_no_arrow_points_up() -> None:
    arch = drawing()
    nodes, edges = arch.import_graph()
    rooms = {f"rig/{p.name}" for p in (REPO / "rig").iterdir() if (p / "__init__.py").is_file()}
    assert rooms <= nodes and {"protocols", "drivers", "rig", "gui", "firmware"} <= nodes
    assert sorted(n for n in nodes if not arch.ROLES.get(n)) == []
    level = arch.layers(nodes, edges)
    assert [(a, b) for a, b in edges if level[b] >= level[a]] == []  # an upward arrow is a loop
    assert ("rig/cli", "rig/commands") in edges  # seen through importlib.import_module too


def test_a_loop_is_drawn_red() -> None:
    arch = drawing()
    svg = arch.svg({"a", "b", "c"}, {("a", "b"): 1, ("b", "a"): 1, ("c", "a"): 1})
    assert svg.count('stroke="#c00"') == 1 and svg.count('stroke="#555"') == 2
