"""Draw docs/images/architecture.svg from the code: the packages, rig's rooms, and who imports whom.

Every arrow is an import found in the source (imports inside functions count too), so the
picture cannot drift from the tree: `python docs/architecture.py` rewrites the SVG, and
`python docs/architecture.py --check` (run by the tests) fails when the committed one is stale.
Layers are placed bottom-up by the longest chain of imports beneath them; an arrow that points
up would be a loop, and is drawn red.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from html import escape
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "docs" / "images" / "architecture.svg"
#: The top-level packages of the product (tests and benchmarks are not part of the picture).
PACKAGES = ("protocols", "drivers", "firmware", "virtual_bench", "rig", "gui")
#: rig's loose modules are drawn as one box: the CLI entry point stays its own.
RIG_BASE = {"errors", "units", "__init__"}
#: One line under each box's name: what it holds.
ROLES = {
    "protocols": "pure codecs: bytes in, typed events out",
    "drivers": "transports, DUT clients, energy monitors",
    "firmware": "the DUT side: shims, reference model",
    "virtual_bench": "simulated DUTs and instruments",
    "gui": "the Qt runner and the trace viewer",
    "rig": "errors, units",
    "rig/bench": "bench files, numbers, ports",
    "rig/traces": "trace files, analysis, viewer data",
    "rig/datasets": "ASC test sets",
    "rig/run": "a measurement: wiring, events, store",
    "rig/qubo": "workloads, SUTs, the procedure, sweeps",
    "rig/report": "the submission report",
    "rig/mqtt": "telemetry and remote control",
    "rig/dashboard": "the web page of every rig",
    "rig/cluster": "sweeps over Dask",
    "rig/submission": "sealed bundles and their verification",
    "rig/model": "training and export for the DUTs",
    "rig/commands": "one module per `rig` command",
    "rig/cli": "`rig`: commands, exit codes",
}


def node_of(path: Path) -> str | None:
    """The box a source file belongs to: a package, or one of rig's rooms."""
    parts = path.relative_to(REPO).with_suffix("").parts
    if parts[0] not in PACKAGES:
        return None
    if parts[0] != "rig" or len(parts) == 1:
        return parts[0]
    if len(parts) == 2:  # a loose module at the top of rig/
        return "rig" if parts[1] in RIG_BASE else f"rig/{parts[1]}"
    return f"rig/{parts[1]}"


def node_of_module(name: str, rooms: set[str]) -> str | None:
    """The box an imported dotted name belongs to (None: not ours)."""
    parts = name.split(".")
    if parts[0] not in PACKAGES:
        return None
    if parts[0] != "rig" or len(parts) == 1:
        return parts[0]
    room = f"rig/{parts[1]}"
    return room if room in rooms else "rig"


def _called(call: ast.Call) -> str:
    """The name a call calls: `f` for f(...) and for x.f(...)."""
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def imported_names(path: Path) -> set[str]:
    """Every module name a file imports, at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Call) and node.args and _called(node) == "import_module":
            # importlib.import_module("rig.commands." + name), or an f-string: its fixed prefix
            arg = node.args[0]
            first = arg.values[0] if isinstance(arg, ast.JoinedStr) and arg.values else arg
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                names.add(first.value.rstrip("."))
    return names


def import_graph() -> tuple[set[str], dict[tuple[str, str], int]]:
    """The boxes and, per (importer, imported) pair of boxes, how many files import across."""
    files = [p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))
             if ".venv" not in p.parts]
    nodes = {n for p in files if (n := node_of(p))}
    rooms = {n for n in nodes if n.startswith("rig/")}
    edges: dict[tuple[str, str], int] = defaultdict(int)
    for path in files:
        src = node_of(path)
        targets = {node_of_module(n, rooms) for n in imported_names(path)}
        for dst in targets - {None, src}:
            edges[(src, dst)] += 1
    return nodes, dict(edges)


def reduced(edges: dict[tuple[str, str], int]) -> dict[tuple[str, str], int]:
    """The arrows not implied by a chain of others (a -> c goes when a -> b -> c is drawn)."""
    below: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        below[a].add(b)

    def reaches(start: str, goal: str, skip: tuple[str, str]) -> bool:
        seen, todo = {start}, [start]
        while todo:
            n = todo.pop()
            for m in below[n]:
                if (n, m) == skip or m in seen:
                    continue
                if m == goal:
                    return True
                seen.add(m)
                todo.append(m)
        return False

    return {e: c for e, c in edges.items() if not reaches(e[0], e[1], e)}


def layers(nodes: set[str], edges: dict[tuple[str, str], int]) -> dict[str, int]:
    """Each box's layer: one above the highest box it imports (0: imports nothing of ours)."""
    below: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        below[a].add(b)
    level: dict[str, int] = {}

    def depth(n: str, seen: frozenset[str]) -> int:
        if n in level:
            return level[n]
        deps = [d for d in below[n] if d not in seen]  # a loop is cut here, and drawn red
        level[n] = 1 + max((depth(d, seen | {n}) for d in deps), default=-1)
        return level[n]

    for n in sorted(nodes):
        depth(n, frozenset())
    return level


def svg(nodes: set[str], edges: dict[tuple[str, str], int]) -> str:
    """The diagram: layers bottom-up, boxes ordered to keep arrows short, arrows from importer."""
    level = layers(nodes, edges)
    edges = reduced(edges)
    rows: dict[int, list[str]] = defaultdict(list)
    for n in sorted(nodes):
        rows[level[n]].append(n)
    # Order each row by the mean position of what it imports (a few sweeps are plenty here).
    pos = {n: float(i) for r in rows.values() for i, n in enumerate(r)}
    for _ in range(4):
        for lv in sorted(rows):
            def key(n: str, lv: int = lv) -> tuple[float, str]:
                deps = [pos[b] for (a, b) in edges if a == n and level[b] < lv]
                return (sum(deps) / len(deps) if deps else pos[n], n)
            rows[lv].sort(key=key)
            pos.update({n: float(i) for i, n in enumerate(rows[lv])})
    box_w, box_h, gap_x, gap_y, margin = 230, 50, 26, 64, 24
    widest = max(len(r) for r in rows.values())
    width = margin * 2 + widest * box_w + (widest - 1) * gap_x
    top = max(rows)
    height = margin * 2 + (top + 1) * box_h + top * gap_y + 30
    xy: dict[str, tuple[float, float]] = {}
    for lv, row in rows.items():
        row_w = len(row) * box_w + (len(row) - 1) * gap_x
        x0 = (width - row_w) / 2
        y = margin + 30 + (top - lv) * (box_h + gap_y)
        for i, n in enumerate(row):
            xy[n] = (x0 + i * (box_w + gap_x), y)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans, sans-serif">',
        '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker><marker id="r" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path '
        'd="M0,0 L10,5 L0,10 z" fill="#c00"/></marker></defs>',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="{margin}" y="{margin - 6}" font-size="12" fill="#333">An arrow goes from the '
        "importer to what it imports;</text>",
        f'<text x="{margin}" y="{margin + 10}" font-size="12" fill="#333">one implied by a chain '
        "of others is left out.</text>",
    ]
    for a, b in sorted(edges):
        (xa, ya), (xb, yb) = xy[a], xy[b]
        upward = level[b] >= level[a]
        sx, sy = xa + box_w / 2, ya + (0 if upward else box_h)
        ex, ey = xb + box_w / 2, yb + (box_h if upward else 0)
        color, marker = ("#c00", "r") if upward else ("#555", "a")
        out.append(f'<path d="M{sx:.1f},{sy:.1f} C{sx:.1f},{(sy + ey) / 2:.1f} {ex:.1f},'
                   f'{(sy + ey) / 2:.1f} {ex:.1f},{ey:.1f}" fill="none" stroke="{color}" '
                   f'stroke-opacity="0.7" stroke-width="1.4" marker-end="url(#{marker})">'
                   f"<title>{escape(a)} imports {escape(b)}</title></path>")
    for n, (x, y) in sorted(xy.items()):
        fill = "#eef4fb" if n.startswith("rig") else "#f4f4f4"
        name = f"{n}/" if n != "rig/cli" else "rig/cli.py"
        out.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{box_w}" height="{box_h}" rx="6" '
                   f'fill="{fill}" stroke="#345" stroke-width="1.2"/>')
        out.append(f'<text x="{x + box_w / 2:.1f}" y="{y + 21:.1f}" font-size="14" '
                   f'font-weight="bold" text-anchor="middle" fill="#123">{escape(name)}</text>')
        out.append(f'<text x="{x + box_w / 2:.1f}" y="{y + 38:.1f}" font-size="10.5" '
                   f'text-anchor="middle" fill="#444">{escape(ROLES.get(n, ""))}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the SVG, or with --check exit 1 when the committed SVG differs from the code's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, don't write")
    args = parser.parse_args(argv)
    text = svg(*import_graph())
    if args.check:
        if not OUT.is_file() or OUT.read_text() != text:
            print(f"{OUT.relative_to(REPO)} is stale: run `python docs/architecture.py`",
                  file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
