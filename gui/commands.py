"""`rig view PATH` (the energy-trace viewer: a window, or a PNG) and `rig gui` (the runner).

Registered through the entry points `view = "gui.commands:add_view_parser"` and
`gui = "gui.commands:add_gui_parser"` (group `neurobench_rig.commands`), so `rig` never imports
this layer. Qt is imported only once the
trace has opened: a bad path says so in one line even where Qt is not installed.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path
from types import ModuleType

from rig.commands.analyze import parse_idle
from rig.errors import ConfigError
from rig.run.view import open_view
from rig.traces.view import TraceView

_SIZE_HINT = "give WIDTHxHEIGHT in pixels, e.g. --size 1400x900"


def add_view_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `rig view`."""
    p = subparsers.add_parser(
        "view",
        help="look at a stored trace or run folder (window, or --png to a file)",
        description=(
            "Open a trace (.jls, or .csv with --sample-rate) or a run folder in the energy "
            "viewer: current, voltage, power and GPIO on one time axis, the run's idle span and "
            "energy windows shaded, and two markers that measure the span between them "
            "(the numbers of `rig analyze --span`). With --png, draw the view into an image "
            "instead of opening a window (no display needed)."
        ),
    )
    p.add_argument("path", metavar="PATH", help="a .jls or .csv trace, or a run folder")
    p.add_argument("--sample-rate", type=float, metavar="HZ",
                   help="samples per second (CSV traces only)")
    p.add_argument("--png", type=Path, metavar="OUT.png",
                   help="write the view to this PNG and exit (no window)")
    p.add_argument("--range", metavar="A:B", help="show this time range in seconds")
    p.add_argument("--size", metavar="WxH", help="window or image size in pixels "
                   "(default 1400x900)")
    p.set_defaults(run=run)
    return p


def parse_range(text: str) -> tuple[float, float]:
    """`A:B` in seconds, A before B (the parser `rig analyze --span` uses)."""
    return parse_idle(text, "--range")


def parse_size(text: str) -> tuple[int, int]:
    """`WxH` in pixels."""
    parts = text.lower().split("x")
    try:
        if len(parts) != 2:
            raise ValueError
        width, height = int(parts[0]), int(parts[1])
    except ValueError:
        raise ConfigError(f"bad --size {text!r}", hint=_SIZE_HINT) from None
    if not (200 <= width <= 10_000 and 150 <= height <= 10_000):
        raise ConfigError(f"bad --size {text!r}: from 200x150 to 10000x10000 pixels",
                          hint=_SIZE_HINT)
    return width, height


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def run(args: argparse.Namespace) -> int:
    """Open the view, then draw it into a PNG (--png) or show it in a window."""
    range_s = parse_range(args.range) if args.range is not None else None
    size = parse_size(args.size) if args.size is not None else (1400, 900)
    if args.png is not None and args.png.suffix.lower() != ".png":
        raise ConfigError(f"--png {args.png}: the file name must end in .png",
                          hint="e.g. --png view.png")
    view = open_view(args.path, sample_rate=args.sample_rate)  # RigErrors: one line, exit 2
    try:
        if args.png is not None:
            if sys.platform.startswith("linux") and not _has_display():
                os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
            render_png = _load_qt().render_png
            try:
                out = render_png(view, args.png, range_s=range_s, size=size)
            except OSError as exc:
                raise ConfigError(str(exc),
                                  hint="check that its folder exists and is writable") from None
            print(out)
            return 0
        if (sys.platform.startswith("linux") and not _has_display()
                and not os.environ.get("QT_QPA_PLATFORM")):
            # Qt would abort the process (no traceback, no message we control) instead.
            raise ConfigError("no display to open the viewer window on",
                              hint="use --png OUT.png to draw the view into a file, or run it "
                                   "on a desktop or over ssh -X")
        return _show(_load_qt(), view, range_s, size)
    finally:
        view.close()


def add_gui_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register `rig gui`."""
    p = subparsers.add_parser(
        "gui",
        help="the runner window: bench, devices, Start/Stop, live power, results",
        description=(
            "Open the runner window: pick or build a bench, check its devices, run ASC or a "
            "QUBO point or sweep with Start and Stop (Stop is the same clean stop as Ctrl-C), "
            "watch progress and live power, and read the results, open the trace in the viewer "
            "or make the report."
        ),
    )
    p.add_argument("--runs-dir", type=Path, default=Path("runs"),
                   help="where run folders go and earlier runs are listed (default: ./runs)")
    p.add_argument("--device", metavar="NAME", help="start with this bench from benches/")
    p.add_argument("--size", metavar="WxH", help="window size in pixels (default 1500x980)")
    p.set_defaults(run=run_gui)
    return p


def run_gui(args: argparse.Namespace) -> int:
    """The runner window until the user closes it."""
    size = parse_size(args.size) if args.size is not None else (1500, 980)
    if (sys.platform.startswith("linux") and not _has_display()
            and not os.environ.get("QT_QPA_PLATFORM")):
        raise ConfigError("no display to open the runner window on",
                          hint="run it on a desktop or over ssh -X; the CLI (rig measure, "
                               "rig sweep, rig show) needs no display")
    if args.device is not None:
        from rig.bench.config import resolve_device

        resolve_device(args.device)  # an unknown name is one line before any window opens
    try:
        from PySide6 import QtWidgets

        from gui.runner import RunnerWindow
    except ImportError as exc:
        raise ConfigError(f"the runner needs Qt (PySide6) and pyqtgraph: cannot import "
                          f"{exc.name or exc}",
                          hint="install the gui extra: pip install -e '.[gui]'") from None
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["rig gui"])
    window = RunnerWindow(runs_root=args.runs_dir, bench=args.device)
    window.resize(*size)
    window.show()
    settle_heap()
    app.exec()
    return 0


def settle_heap() -> None:
    """Move what exists once the window is built out of the garbage collector's full passes.

    A full collection walks every tracked object (Qt wrappers, numpy, the rig's modules) on the
    GUI thread: 40-60 ms each, a few times a minute, and the window's worst input latency
    (`benchmarks/gui.py`). Frozen objects are never collected; only what comes later is.
    """
    gc.collect()
    gc.freeze()


def _load_qt() -> ModuleType:
    """The module gui.viewer, or a one-line error that says how to install Qt."""
    try:
        from gui import viewer
    except ImportError as exc:
        what = exc.name or str(exc)
        raise ConfigError(f"the viewer needs Qt (PySide6) and pyqtgraph: cannot import {what}",
                          hint="install the gui extra: pip install -e '.[gui]'") from None
    return viewer


def _show(viewer: ModuleType, view: TraceView, range_s: tuple[float, float] | None,
          size: tuple[int, int]) -> int:
    """The viewer window until the user closes it."""
    from PySide6 import QtWidgets

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["rig view"])
    window = viewer.ViewerWindow(view, range_s=range_s)
    window.resize(*size)
    window.show()
    app.exec()
    return 0
