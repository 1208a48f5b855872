"""The workflow diagram of the report: the six stages of a system's workflow as swim lanes.

Two lanes, Host and DUT; each stage is a box in the lane where it runs (a host -> DUT transfer
straddles both, a stage that does not apply is dashed and grey). Left to right is time, so the
power measurement and the timed window are outlines around the columns of the stages inside them.
Drawn with matplotlib's Agg canvas on a `Figure` of its own, like the other report figures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle
from matplotlib.path import Path as MplPath

from rig.report.figures import DPI, WIDTH_IN, stamp_label

#: Height of the diagram [in]; its width is the report's column width.
HEIGHT_IN = 2.8
WHERE = ("host", "dut", "link", "none")

# Layout [in]: rows from the top, then the two lanes, then the rows below them.
_TITLE_ROW, _LABEL_ROW, _NOTE_ROW = 0.30, 0.17, 0.26
_LANE_GAP = 0.02
_LANE_NAME_W = 0.34  # strip left of the boxes that carries the lane names
_BOX_GAP = 0.17  # between columns: room for an arrow and two outlines
_BOX_PAD = 0.045  # text inside a box
_MEASURED_PAD, _TIMED_PAD = 0.075, 0.04  # outlines around the columns, outer and inner
_LINK_SPAN = 1.3  # a transfer box is this many times a lane box high, across the boundary
_NAME_GAP = 0.04  # between a box's name and its detail
#: Type sizes tried for the box names [pt] (details are 0.8 pt smaller); below the last one
#: print gets hard to read, so an overlong detail is cut short instead (the report's table
#: of stages carries it in full).
_SIZES = (7.5, 7.0, 6.5, 6.0)

_STYLE = {  # where -> (fill, edge)
    "host": ("#e6eef7", "#4f74a0"),
    "dut": ("#e4f1e4", "#3f8a3f"),
    "link": ("#efe7f5", "#7f5aa2"),
    "none": ("#ffffff", "#9a9a9a"),
}
_LANES = (("Host", "#f4f7fb"), ("DUT", "#f3f8f1"))
_MEASURED_C, _TIMED_C = "#e07b00", "#1452b8"


@dataclass(frozen=True)
class Stage:
    """One stage of the workflow: where it runs, what it does, and whether it is measured."""

    name: str
    where: str  # "host", "dut", "link" (host -> DUT transfer) or "none" (not applicable)
    detail: str
    measured: bool  # inside the power measurement
    timed: bool = False  # inside the timed window (latency)


@dataclass
class _Box:
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def cy(self) -> float:
        return self.y + self.h / 2

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def top(self) -> float:
        return self.y + self.h


def draw_workflow(stages: list[Stage], path: Path, *, title: str, label: str | None = None,
                  measurement_note: str = "") -> Path:
    """Draw the stages as a swim-lane diagram and save it as a PNG at `path`; returns `path`."""
    path = Path(path)
    fig = Figure(figsize=(WIDTH_IN, HEIGHT_IN), dpi=DPI, facecolor="white")
    renderer = FigureCanvasAgg(fig).get_renderer()
    # One axes over the whole figure, in inches: the layout below is plain arithmetic.
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, WIDTH_IN)
    ax.set_ylim(0, HEIGHT_IN)
    ax.set_axis_off()

    note_row = _NOTE_ROW if measurement_note else 0.12
    lane_h = (HEIGHT_IN - _TITLE_ROW - 2 * _LABEL_ROW - note_row - _LANE_GAP) / 2
    dut_y = note_row + _LABEL_ROW
    host_y = dut_y + lane_h + _LANE_GAP
    boundary = dut_y + lane_h + _LANE_GAP / 2
    left, right = _LANE_NAME_W, WIDTH_IN - 0.06

    for (name, fill), y in zip(_LANES, (host_y, dut_y), strict=True):
        ax.add_patch(Rectangle((0.06, y), right - 0.06, lane_h, facecolor=fill,
                               edgecolor="#d5dbe3", linewidth=0.6, zorder=0))
        ax.text(0.06 + (left - 0.06) / 2, y + lane_h / 2, name, rotation=90, ha="center",
                va="center", fontsize=8.5, fontweight="bold", color="#444444")

    n = max(1, len(stages))
    col = (right - left) / n
    box_w = col - _BOX_GAP
    box_h = lane_h - 0.12
    boxes: list[_Box] = []
    wheres: list[str] = []
    for i, stage in enumerate(stages):
        x = left + i * col + _BOX_GAP / 2
        where = stage.where if stage.where in WHERE else "none"
        if where == "host":
            box = _Box(x, host_y + (lane_h - box_h) / 2, box_w, box_h)
        elif where == "dut":
            box = _Box(x, dut_y + (lane_h - box_h) / 2, box_w, box_h)
        else:  # a transfer, or a stage that does not happen: across both lanes
            h = box_h * _LINK_SPAN
            box = _Box(x, boundary - h / 2, box_w, h)
        boxes.append(box)
        wheres.append(where)
    # One type size for every box (the largest at which all fit): a diagram whose boxes speak
    # in different sizes looks broken.
    size = next((sz for sz in _SIZES
                 if all(_fit(renderer, b, st, w, sz) for b, st, w in zip(boxes, stages, wheres,
                                                                         strict=True))),
                _SIZES[-1])
    for box, stage, where in zip(boxes, stages, wheres, strict=True):
        _draw_box(ax, renderer, box, stage, where, size)

    for i in range(len(boxes) - 1):
        _arrow(ax, boxes[i], boxes[i + 1], dashed="none" in (wheres[i], wheres[i + 1]))

    lane_lo, lane_hi = dut_y, host_y + lane_h
    for flag, pad, color, text, above in (
        ("measured", _MEASURED_PAD, _MEASURED_C, "power measurement", True),
        ("timed", _TIMED_PAD, _TIMED_C, "timed window", False),
    ):
        for first, last in _groups([bool(getattr(s, flag)) for s in stages]):
            x0, x1 = boxes[first].x - pad, boxes[last].right + pad
            y0, y1 = lane_lo - pad * 0.6, lane_hi + pad * 0.6
            ax.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor="none",
                                   edgecolor=color, linewidth=1.3,
                                   linestyle=(0, (5, 3)) if above else (0, (2, 2)), zorder=4))
            ax.text(x0, y1 + 0.02 if above else y0 - 0.02, text, ha="left",
                    va="bottom" if above else "top", fontsize=7, fontweight="bold",
                    color=color, zorder=5)

    title_fs = 9.5
    stamp_w = _width(renderer, label, 8, bold=True) / DPI + 0.15 if label else 0.0
    while title_fs > 7 and _width(renderer, title, title_fs, bold=True) / DPI > (
            WIDTH_IN - 0.2 - stamp_w):
        title_fs -= 0.5  # a long title shrinks rather than run under the stamp
    ax.text(0.06, HEIGHT_IN - 0.06, title, ha="left", va="top", fontsize=title_fs,
            fontweight="bold")
    stamp_label(fig, label)
    if measurement_note:
        lines = _wrap(renderer, measurement_note, 6.5, (right - 0.06) * DPI)
        ax.text(0.06, 0.04, "\n".join(lines[:2]), ha="left", va="bottom", fontsize=6.5,
                color="#444444", linespacing=1.25)

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, facecolor="white")
    fig.clear()
    return path


def _groups(flags: list[bool]) -> list[tuple[int, int]]:
    """(first, last) index of each run of consecutive True values."""
    out: list[tuple[int, int]] = []
    start = None
    for i, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = i
        elif not flag and start is not None:
            out.append((start, i - 1))
            start = None
    return out


def _texts(stage: Stage, where: str) -> tuple[str, str]:
    detail = stage.detail.strip()
    if where == "none":
        detail = "n/a" if detail.lower() in ("", "none", "n/a") else f"n/a: {detail}"
    elif where == "link":
        detail = f"host → DUT: {detail}" if detail else "host → DUT"
    return stage.name, detail


def _layout(renderer: Any, box: _Box, stage: Stage, where: str,
            size: float) -> tuple[list[str], list[str], float]:
    """Name and detail lines at `size` points, and the block's height [in]."""
    name, detail = _texts(stage, where)
    width_px = (box.w - 2 * _BOX_PAD) * DPI
    name_lines = _wrap(renderer, name, size, width_px, bold=True)
    lines = _wrap(renderer, detail, size - 0.8, width_px)
    return name_lines, lines, _block_h(len(name_lines), len(lines), size)


def _block_h(names: int, details: int, size: float) -> float:
    return _lines_h(names, size) + _NAME_GAP + _lines_h(details, size - 0.8)


def _fit(renderer: Any, box: _Box, stage: Stage, where: str, size: float) -> bool:
    return _layout(renderer, box, stage, where, size)[2] <= box.h - 2 * _BOX_PAD


def _draw_box(ax: Any, renderer: Any, box: _Box, stage: Stage, where: str, size: float
              ) -> None:
    fill, edge = _STYLE[where]
    ax.add_patch(FancyBboxPatch(
        (box.x, box.y), box.w, box.h, boxstyle="round,pad=0,rounding_size=0.06",
        facecolor=fill, edgecolor=edge, linewidth=0.9 if where != "none" else 0.8,
        linestyle=(0, (3, 2)) if where == "none" else "-", zorder=2))
    name, lines, height = _layout(renderer, box, stage, where, size)
    room = box.h - 2 * _BOX_PAD
    if height > room:  # even the smallest type is too big: cut the detail short
        keep = max(1, int((room - _lines_h(len(name), size) - _NAME_GAP)
                          / _lines_h(1, size - 0.8)))
        lines = lines[:keep]
        lines[-1] = lines[-1].rstrip(" ,;:") + "…"
        height = _block_h(len(name), len(lines), size)
    text_c = "#888888" if where == "none" else "#222222"
    top = box.cy + height / 2
    ax.text(box.cx, top, "\n".join(name), ha="center", va="top", fontsize=size,
            fontweight="bold", color=text_c, linespacing=1.15, zorder=3)
    ax.text(box.cx, top - _lines_h(len(name), size) - _NAME_GAP, "\n".join(lines),
            ha="center", va="top", fontsize=size - 0.8, color=text_c, linespacing=1.15,
            zorder=3)


def _lines_h(count: int, size: float) -> float:
    """Height [in] of `count` lines of `size`-point text at line spacing 1.15."""
    return count * size * 1.15 * 1.2 / 72 if count else 0.0


def _width(renderer: Any, text: str | None, size: float, bold: bool = False) -> float:
    """Width of one line of text in pixels, as the Agg renderer will draw it."""
    if not text:
        return 0.0
    prop = FontProperties(size=size, weight="bold" if bold else "normal")
    return float(renderer.get_text_width_height_descent(text, prop, ismath=False)[0])


def _wrap(renderer: Any, text: str, size: float, width_px: float, bold: bool = False
          ) -> list[str]:
    """Greedy word wrap by measured width; a word wider than a line is split."""
    lines: list[str] = []
    current = ""
    # Break opportunities: spaces, and after the hyphen of "pre-processing".
    pieces = [(part, i > 0) for word in text.split()
              for i, part in enumerate(re.findall(r"[^-]+-?|-", word))]
    for word, glued in pieces:
        trial = (f"{current}{word}" if glued else f"{current} {word}") if current else word
        if _width(renderer, trial, size, bold) <= width_px:
            current = trial
            continue
        if current:
            lines.append(current)
        while _width(renderer, word, size, bold) > width_px and len(word) > 1:
            cut = len(word) - 1
            while cut > 1 and _width(renderer, word[:cut] + "-", size, bold) > width_px:
                cut -= 1
            lines.append(word[:cut] + "-")
            word = word[cut:]
        current = word
    if current:
        lines.append(current)
    return lines or [""]


def _arrow(ax: Any, a: _Box, b: _Box, dashed: bool) -> None:
    """a -> b: straight across when their sides face each other, else over, then down or up."""
    lo, hi = max(a.y, b.y) + 0.05, min(a.top, b.top) - 0.05
    if lo <= hi:
        # Level with the lane box of the pair (a transfer box spans both lanes).
        y = a.cy if lo <= a.cy <= hi else b.cy if lo <= b.cy <= hi else (lo + hi) / 2
        verts = [(a.right, y), (b.x, y)]
        codes = [MplPath.MOVETO, MplPath.LINETO]
    else:  # different lanes, next column: along a's lane, then into b's top or bottom
        end_y = b.top if b.cy < a.cy else b.y
        x = b.x + min(0.18, b.w / 3)
        verts = [(a.right, a.cy), (x, a.cy), (x, end_y)]
        codes = [MplPath.MOVETO, MplPath.LINETO, MplPath.LINETO]
    ax.add_patch(FancyArrowPatch(
        path=MplPath(verts, codes), arrowstyle="-|>", mutation_scale=8, linewidth=0.9,
        color="#555555", linestyle="--" if dashed else "-", shrinkA=0, shrinkB=1, zorder=3))
