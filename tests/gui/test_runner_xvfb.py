"""The runner on a real X server (Xvfb, Qt's xcb platform), over a virtual bench: screenshots of
its three main states — devices found and checked, a run going with the live power trace, the
results — with their pixels checked, saved under /tmp/runner-shots for the README (docs/images).

The window runs in a lab folder of its own, with the paths a user sees who starts `rig gui` there
(`benches/nano33-powershield.toml`, `runs/<run folder>`), so no temporary path shows in the
screenshots."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from PySide6 import QtGui

REPO = Path(__file__).resolve().parents[2]
SHOTS = Path("/tmp/runner-shots")

SCRIPT = r"""
import json, re, sys, time
from pathlib import Path
from PySide6 import QtCore, QtWidgets
from PySide6.QtTest import QTest
from serial.tools.list_ports_common import ListPortInfo

app = QtWidgets.QApplication(["runner-xvfb"])
from gui.runner import RunnerWindow
from rig.bench.config import load_bench
from rig.bench.virtual import VirtualBenchProcess

out = Path(sys.argv[1])
runs = Path("runs")  # relative to the lab folder this runs in, as `rig gui` shows them
repo = Path(sys.argv[2])


def wait(cond, seconds=90):
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        QTest.qWait(20)


def within(widget):
    tl = widget.mapTo(win, QtCore.QPoint(0, 0))
    return [tl.x(), tl.y(), tl.x() + widget.width(), tl.y() + widget.height()]


# The virtual bench in a process of its own, as `rig sim` serves it: sharing this process's
# interpreter lock with the window, it could fall behind on a busy machine.
# Simulated time at 20x (not the bench file's 50x): a busy CI machine keeps up with it.
sim_bench = out / "sim20.toml"
sim_bench.write_text((repo / "benches/sim.toml").read_text().replace("speed = 50", "speed = 20"))
vb = VirtualBenchProcess(load_bench(sim_bench))
try:
    # What a lab bench shows: a Nano 33 BLE and a PowerShield on USB.
    dut, lpm = ListPortInfo(vb.ports["dut"]), ListPortInfo(vb.ports["emon"])
    dut.vid, dut.pid, dut.description = 0x2341, 0x805A, "Nano 33 BLE"
    lpm.vid, lpm.pid, lpm.description = 0x0483, 0x5740, "STM32 Virtual ComPort"
    win = RunnerWindow(runs_root=runs, hotplug=False, port_lister=lambda: [dut, lpm])
    win.resize(1500, 980)
    win.show()
    assert QTest.qWaitForWindowExposed(win)
    bench = Path("benches") / "nano33-powershield.toml"
    bench.write_text(
        '[bench]\nname = "Nano 33 BLE + PowerShield (virtual)"\nvoltage_limit_v = 3.3\n'
        f'simulated = true\n\n[dut]\nport = "{vb.ports["dut"]}"\ntimestamp_mode = "energy"\n\n'
        f'[emon]\ndriver = "lpm01a"\nport = "{vb.ports["emon"]}"\nsample_rate_hz = 1000\n'
        'supply_voltage_v = 1.8\n\n[procedure.asc]\nruns = 5\nmin_run_s = 10.0\n')
    assert win.bench_panel.load(bench)
    win.devices.scan(force=True)
    wait(lambda: win.devices.port_table.rowCount() == 2 and not win.devices.busy)
    win._check_bench()
    wait(lambda: win.devices.state_of("emon") is not None)
    QTest.qWait(200)
    win.grab().save(str(out / "runner-devices.png"))
    states = {s.role: s.state for s in win.devices.states}

    win.start()
    wait(lambda: win.phase_values().get("runs", (0, 0))[0] >= 3)
    QTest.qWait(250)  # one more drain of the live trace
    win.grab().save(str(out / "runner-running.png"))
    plot = win.live.plot
    vbox = plot.getPlotItem().getViewBox()
    r = vbox.sceneBoundingRect()
    tl = plot.mapTo(win, plot.mapFromScene(r.topLeft()))
    br = plot.mapTo(win, plot.mapFromScene(r.bottomRight()))
    running = {"plot": [tl.x(), tl.y(), br.x(), br.y()], "bins": win.live.bins_seen,
               "y_active": plot.mapTo(win, plot.mapFromScene(vbox.mapViewToScene(
                   QtCore.QPointF(win.live.last_time_s, 3.6e-3)))).y()}

    wait(lambda: win.last_end is not None and not win.running)
    QTest.qWait(200)
    win.grab().save(str(out / "runner-results.png"))
    # What the window shows (a label's markup without its tags: a link's target is not shown).
    shown = [win.windowTitle(),
             *(re.sub("<[^>]+>", "", w.text()) for w in win.findChildren(QtWidgets.QLabel)),
             *(w.text() for w in win.findChildren(QtWidgets.QLineEdit)),
             *(w.currentText() for w in win.findChildren(QtWidgets.QComboBox))]
    print(json.dumps({"platform": app.platformName(), "size": [win.width(), win.height()],
                      "states": states, "running": running, "status": win.last_end.status,
                      "verdict": within(win.results.verdict), "shown": shown}))
    win.close()
finally:
    vb.close()
"""


def _near(image: QtGui.QImage, x: int, y: int, ref: str, tol: int = 60) -> bool:
    c, r = image.pixelColor(x, y), QtGui.QColor(ref)
    return abs(c.red() - r.red()) + abs(c.green() - r.green()) + abs(c.blue() - r.blue()) < tol


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("xvfb-run") is None,
                    reason="xvfb-run is not on PATH (Debian: apt-get install xvfb)")
def test_runner_window_under_xvfb(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env["QT_QPA_PLATFORM"] = "xcb"
    env["PYTHONPATH"] = str(REPO)
    lab = tmp_path / "lab"
    (lab / "runs").mkdir(parents=True)
    (lab / "benches").mkdir()
    proc = subprocess.run(
        ["xvfb-run", "-a", "-s", "-screen 0 1600x1050x24", sys.executable, "-c", SCRIPT,
         str(tmp_path), str(REPO)],
        cwd=lab, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    geo = json.loads(proc.stdout.strip().splitlines()[-1])
    SHOTS.mkdir(parents=True, exist_ok=True)
    for name in ("runner-devices", "runner-running", "runner-results"):
        shutil.copy(tmp_path / f"{name}.png", SHOTS / f"{name}.png")

    assert geo["platform"] == "xcb" and geo["size"] == [1500, 980]
    assert geo["states"]["dut"] == geo["states"]["emon"] == "answering"
    assert geo["status"] == "complete"
    # The screenshots show the lab folder's paths, never the test's temporary one.
    shown = "\n".join(geo["shown"])
    assert str(tmp_path) not in shown and "pytest-" not in shown
    assert "benches/nano33-powershield.toml" in shown and "runs/" in shown

    # Running: the power trace is drawn in red inside the live plot, reaching the active
    # level (3.6 mW) within a few pixels.
    from gui.live_plot import POWER_COLOUR  # pyqtgraph: imported when this test runs
    from gui.results_panel import VERDICT_STYLE

    image = QtGui.QImage(str(tmp_path / "runner-running.png"))
    assert [image.width(), image.height()] == [1500, 980]
    x0, y0, x1, y1 = (round(v) for v in geo["running"]["plot"])
    red = [(x, y) for x in range(x0 + 2, x1 - 2, 2) for y in range(y0 + 2, y1 - 2)
           if _near(image, x, y, POWER_COLOUR)]
    assert len(red) > 200, len(red)
    assert min(abs(y - geo["running"]["y_active"]) for _, y in red) <= 4
    assert geo["running"]["bins"] > 100

    # Results: the replicability verdict is shown in its "replicable" colour.
    image = QtGui.QImage(str(tmp_path / "runner-results.png"))
    x0, y0, x1, y1 = geo["verdict"]
    green = VERDICT_STYLE[True].split(":")[1].rstrip(";")
    assert _near(image, x0 + 3, (y0 + y1) // 2, green, tol=20)
