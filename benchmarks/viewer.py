"""The energy-trace viewer on long traces: open to first paint, one zoom step, one pan step and
resident memory, for 1, 10 and 60 minutes at 1 MS/s (goals: first paint < 1 s, zoom/pan < 50 ms,
memory < 300 MB, all flat in the trace's length).

Each trace is written with the rig's own `TraceWriter` (current, voltage, gpi0; a 1 s pattern
of idle and active steps with noise and a timestamp pulse per step, repeated), measured in a
fresh process (`--measure FILE`) so that one file's memory never counts for the next, and deleted
afterwards. The viewer runs on Qt's offscreen platform; a "paint" is the window rendered with
`grab()`. Prints the figures; asserts nothing. Needs ~32 GB of free disk for the 60 min file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RATE = 1_000_000
MINUTES = (1, 10, 60)
#: Bytes per sample on disk, generous (f32 current + f32 voltage + u8 gpio + summaries).
BYTES_PER_SAMPLE = 10


def pattern(rate: int = RATE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One second: 0.4 s idle at 1.2 mW, 0.6 s active at 3.6 mW (1.8 V), a pulse per edge."""
    rng = np.random.default_rng(0)
    current = np.full(rate, 1.2e-3 / 1.8)
    current[int(0.4 * rate):] = 3.6e-3 / 1.8
    current += rng.normal(0, 2e-6, rate)
    voltage = 1.8 + rng.normal(0, 1e-4, rate)
    gpio = np.ones(rate, dtype=np.uint8)
    gpio[int(0.4 * rate): int(0.4 * rate) + 10] = 0
    return current.astype(np.float32), voltage.astype(np.float32), gpio


def write_trace(path: Path, minutes: int) -> float:
    """Write `minutes` of 1 MS/s; returns the seconds it took."""
    from rig.traces.files import TraceWriter

    current, voltage, gpio = pattern()
    started = time.perf_counter()
    with TraceWriter(path, RATE) as w:
        for second in range(minutes * 60):
            w.append(second * RATE, current, voltage, gpio)
    return time.perf_counter() - started


def rss_mb() -> float:
    """Resident memory of this process [MB] (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(path: Path) -> dict[str, float]:
    """In this process: Qt up, then open -> first paint, a zoom step, a pan step, memory."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    # This file's folder (sys.path[0]) holds benchmarks/gui.py, which would shadow `gui`.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    started = time.perf_counter()
    from PySide6.QtWidgets import QApplication

    from gui.viewer import ViewerWindow
    from rig.run.view import open_view

    app = QApplication.instance() or QApplication([])
    qt_s = time.perf_counter() - started
    before = rss_mb()

    started = time.perf_counter()
    view = open_view(path)
    window = ViewerWindow(view)
    window.resize(1400, 900)
    window.show()
    window.refresh_now()
    window.grab()
    first_paint = time.perf_counter() - started

    def step(action) -> float:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            action()
            window.refresh_now()
            window.grab()
            app.processEvents()
            times.append(time.perf_counter() - t0)
        return float(np.median(times))

    zoom = step(lambda: window.zoom(2.0))
    pan = step(lambda: window.pan(0.1))
    stats_started = time.perf_counter()
    lo, hi = window.visible_range()
    window.set_markers(lo + 0.25 * (hi - lo), lo + 0.75 * (hi - lo))
    window.marker_stats()
    markers = time.perf_counter() - stats_started
    window.close()
    view.close()
    return {"qt_startup_s": qt_s, "first_paint_s": first_paint, "zoom_s": zoom, "pan_s": pan,
            "marker_stats_s": markers, "rss_mb": rss_mb(), "rss_before_open_mb": before}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        print(json.dumps(measure(Path(sys.argv[2]))))
        return
    with tempfile.TemporaryDirectory(dir=os.environ.get("RIG_BENCH_TMP")) as tmp:
        for minutes in MINUTES:
            need = minutes * 60 * RATE * BYTES_PER_SAMPLE
            free = shutil.disk_usage(tmp).free
            if need > free:
                print(f"{minutes:>2} min: skipped, needs {need / 1e9:.0f} GB, "
                      f"{free / 1e9:.0f} GB free in {tmp} (set RIG_BENCH_TMP)")
                continue
            path = Path(tmp) / f"trace-{minutes}min.jls"
            wrote = write_trace(path, minutes)
            size = path.stat().st_size
            proc = subprocess.run([sys.executable, __file__, "--measure", str(path)],
                                  capture_output=True, text=True, timeout=600)
            path.unlink()
            if proc.returncode != 0:
                print(f"{minutes:>2} min: measuring failed: {proc.stderr.strip()[-500:]}")
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"{minutes:>2} min at 1 MS/s ({size / 1e9:.1f} GB, written in {wrote:.0f} s): "
                  f"first paint {r['first_paint_s'] * 1e3:.0f} ms (goal < 1000), "
                  f"zoom {r['zoom_s'] * 1e3:.1f} ms, pan {r['pan_s'] * 1e3:.1f} ms (goal < 50), "
                  f"markers over half the view {r['marker_stats_s'] * 1e3:.0f} ms, "
                  f"RSS {r['rss_mb']:.0f} MB (goal < 300; {r['rss_before_open_mb']:.0f} MB "
                  f"with Qt up before opening; Qt startup {r['qt_startup_s']:.2f} s)")


if __name__ == "__main__":
    main()
