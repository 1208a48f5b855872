"""The viewer on a real X server (Xvfb, Qt's xcb platform): a run folder shown in a window, its
keys going through the window's shortcuts, and a screenshot whose pixels are checked: the power
trace is drawn inside its plot at the measured level, and each shaded span is where the run's
events put it."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from PySide6 import QtGui

REPO = Path(__file__).resolve().parents[2]
SHOTS = Path("/tmp/viewer-shots")

SCRIPT = r"""
import json, sys
from pathlib import Path
from PySide6 import QtCore, QtWidgets
from PySide6.QtTest import QTest

app = QtWidgets.QApplication(["viewer-xvfb"])
from gui.viewer import ViewerWindow
from rig.run.view import open_view

view = open_view(Path(sys.argv[1]))
win = ViewerWindow(view)
win.resize(1400, 900)
win.show()
assert QTest.qWaitForWindowExposed(win)
win.activateWindow()
QTest.qWaitForWindowActive(win)
win.set_range(10.0, 50.0)
QTest.keyClick(win.plots, QtCore.Qt.Key.Key_Plus)  # the focus is in the plots: a shortcut
keys = win.visible_range()
win.fit_all()
d = view.source.duration_s  # markers clear of the spans whose colour is sampled
win.set_markers(d - 4, d - 2)
win.refresh_now()
QTest.qWait(150)
win.grab().save(sys.argv[2])


def at(channel, x, y):
    p = win.plots.mapFromScene(win.plot_item(channel).getViewBox().mapViewToScene(
        QtCore.QPointF(x, y)))
    q = win.plots.mapTo(win, p)
    return [q.x(), q.y()]


def rect(channel):
    r = win.plot_item(channel).getViewBox().sceneBoundingRect()
    tl = win.plots.mapTo(win, win.plots.mapFromScene(r.topLeft()))
    br = win.plots.mapTo(win, win.plots.mapFromScene(r.bottomRight()))
    return [tl.x(), tl.y(), br.x(), br.y()]


marks = [{"kind": m.kind, "label": m.label,
          "x_start": at("power", m.start_s, 0)[0], "x_end": at("power", m.end_s, 0)[0],
          "x_mid": at("power", (m.start_s + m.end_s) / 2, 0)[0],
          "y_power": at("power", 0, m.mean_power_w)[1],
          "y_gpio_half": at("gpio", 0, 0.5)[1]} for m in view.marks]
# Zoomed into the gap between the first two windows: their edges, a couple of pixels wide
# in the whole view, are now far apart.
w1, w2 = [m for m in view.marks if m.kind == "window"][:2]
win.set_range(w1.end_s - 0.5, w2.start_s + 0.5)
win.refresh_now()
QTest.qWait(150)
win.grab().save(sys.argv[3])
zoom = {"x_end": at("gpio", w1.end_s, 0)[0], "x_start": at("gpio", w2.start_s, 0)[0],
        "y": at("gpio", 0, 0.5)[1]}
print(json.dumps({"platform": app.platformName(), "keys": keys,
                  "size": [win.width(), win.height()], "power": rect("power"),
                  "gpio": rect("gpio"), "marks": marks, "zoom": zoom}))
win.close()
view.close()
"""


def _rgb(image: QtGui.QImage, x: int, y: int) -> tuple[int, int, int]:
    c = image.pixelColor(x, y)
    return c.red(), c.green(), c.blue()


def _near(rgb: tuple[int, int, int], ref: QtGui.QColor, tol: int = 60) -> bool:
    return abs(rgb[0] - ref.red()) + abs(rgb[1] - ref.green()) + abs(rgb[2] - ref.blue()) < tol


@pytest.mark.skipif(shutil.which("xvfb-run") is None,
                    reason="xvfb-run is not on PATH (Debian: apt-get install xvfb)")
def test_viewer_window_under_xvfb(sim_run, tmp_path: Path) -> None:
    run, _ = sim_run
    shot, zoomed = tmp_path / "viewer-xvfb.png", tmp_path / "viewer-xvfb-zoom.png"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["QT_QPA_PLATFORM"] = "xcb"
    env["PYTHONPATH"] = str(REPO)
    proc = subprocess.run(
        ["xvfb-run", "-a", "-s", "-screen 0 1600x1000x24", sys.executable, "-c", SCRIPT,
         str(run), str(shot), str(zoomed)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    geo = json.loads(proc.stdout.strip().splitlines()[-1])
    SHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copy(shot, SHOTS / "viewer-xvfb.png")
    shutil.copy(zoomed, SHOTS / "viewer-xvfb-zoom.png")

    assert geo["platform"] == "xcb"
    assert geo["keys"] == pytest.approx([20.0, 40.0])  # "+" zoomed 2x around the centre
    image = QtGui.QImage(str(shot))
    assert [image.width(), image.height()] == geo["size"] == [1400, 900]

    # The power trace: red pixels inside the power plot, and at each window's middle the
    # trace sits at the window's mean power (within 3 pixels).
    from gui.viewer import COLOURS  # pyqtgraph: imported when this test runs

    x0, y0, x1, y1 = (round(v) for v in geo["power"])
    red = QtGui.QColor(COLOURS["power"])
    trace = sum(_near(_rgb(image, x, y), red)
                for x in range(x0 + 1, x1 - 1, 3) for y in range(y0 + 1, y1 - 1))
    assert trace > 300, trace
    for mark in geo["marks"]:
        x = round(mark["x_mid"])
        ys = [y for y in range(y0 + 1, y1 - 1) if _near(_rgb(image, x, y), red)]
        assert ys and min(abs(y - mark["y_power"]) for y in ys) <= 3, mark

    # The shading: window colour (amber) or idle colour (blue) at each span's middle, on the
    # GPIO plot half-way between its levels; plain background in the gaps between spans.
    def shade(x: float, y: float, half: int = 2) -> str:
        votes = []
        for dx in range(-half, half + 1):
            r, g, b = _rgb(image, round(x) + dx, round(y))
            light = min(r, g, b) > 180  # shading is light; the traces are dark
            votes.append("trace" if not light else "window" if r - b > 30 else
                         "idle" if b - r > 15 else "none" if abs(r - b) < 12 else "?")
        return max(set(votes), key=votes.count)

    y = geo["marks"][0]["y_gpio_half"]
    marks = sorted(geo["marks"], key=lambda m: m["x_start"])
    assert [m["kind"] for m in marks] == ["idle"] + ["window"] * 5
    for mark in marks:
        assert shade(mark["x_mid"], y) == mark["kind"], mark
        assert shade(mark["x_start"] + 4, y) == mark["kind"], mark
        assert shade(mark["x_end"] - 4, y) == mark["kind"], mark
    # Outside: before the first span, and in the gaps between spans (a few pixels wide here).
    assert shade((geo["gpio"][0] + marks[0]["x_start"]) / 2, y) == "none"
    for a, b in itertools.pairwise(marks):
        assert a["x_end"] < b["x_start"]

    # Zoomed into the gap between windows 1 and 2: amber up to the first window's end, plain
    # background between, amber again from the second window's start.
    image = QtGui.QImage(str(zoomed))
    z = geo["zoom"]
    assert z["x_start"] - z["x_end"] > 60
    assert shade(z["x_end"] - 5, z["y"]) == "window"
    assert shade(z["x_end"] + 5, z["y"]) == "none"
    assert shade((z["x_end"] + z["x_start"]) / 2, z["y"]) == "none"
    assert shade(z["x_start"] - 5, z["y"]) == "none"
    assert shade(z["x_start"] + 5, z["y"]) == "window"
