"""The runner window's input latency while a measurement streams 2 MS/s into it (goal: p99 < 50 ms).

Input latency is the time from an event being queued for the GUI thread to the GUI thread
handling it: what a click on Stop or a scroll of the event log waits behind. It is measured
while the runner window (`gui.runner.RunnerWindow`, Qt's offscreen platform) runs a real ASC
measurement on the virtual bench: its simulated Joulescope streams at full rate in host time
(`[sim] speed = 1`) through the rig's Joulescope driver and `EmonRecorder`, which writes the JLS
trace and hands `PowerPreview`s to the window's live plot (drained every 100 ms), and the
procedure's events reach the window through the session's Qt signals.

A probe thread posts a custom event every 10 ms to a receiver on the GUI thread, and every
50 ms a mouse move over the live plot or a key press in the event log (simulated user input),
each with its post time (`time.perf_counter`); the handled time minus the post time is one
latency. Only events posted between the run's first phase and its RunFinished count.

At 2 MS/s the virtual bench's Joulescope is a JS110 (a JS220 samples at 1 MS/s at most). If
the virtual bench does not sustain 2 MS/s (lost samples, or fewer than 95 % of the samples in
host time), the script says so and measures again at 1 MS/s; the rate printed is the one
delivered.

Prints the monitor's delivered rate, dropped samples, preview bins drawn, probe counts, latency
p50 / p99 / max, the GUI thread's own costs (preview drain + live plot, event handling, a live
plot repaint), run status and wall time, and whether the goal was met. Asserts nothing; takes
about 17 s (35 s when it falls back to 1 MS/s) and deletes its temporary runs folder.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# This file is benchmarks/gui.py: its folder (sys.path[0]) would shadow the `gui` package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402
from PySide6 import QtCore, QtGui, QtWidgets  # noqa: E402

from gui.commands import settle_heap  # noqa: E402
from gui.runner import RunnerWindow  # noqa: E402
from rig.run.events import Event, PhaseStarted, RunFinished, TraceSaved  # noqa: E402

RATES = (2_000_000, 1_000_000)
#: Probe period [s]; every INPUT_EVERY-th probe also posts a simulated user input.
PROBE_S = 0.010
INPUT_EVERY = 5
GOAL_P99_MS = 50.0
#: Host seconds a run may take before Stop is pressed.
RUN_LIMIT_S = 60.0
#: A short ASC run (~15 s at speed 1): calibration, 2 s idle, 3 timed runs of 4 s, 8 samples.
BENCH_TOML = """\
[bench]
name = "gui benchmark ({rate} S/s)"
voltage_limit_v = 3.3

[dut]
kind = "mlperf-tiny"
port = "virtual"
timestamp_mode = "energy"

[emon]
driver = "joulescope-sim"
sample_rate_hz = {rate}
supply_voltage_v = 1.8

[dataset]
name = "synthetic-asc"
samples_per_class = 2

[procedure.asc]
runs = 3
min_run_s = 4.0

[sim]
speed = 1
dut = "auto"
"""

PROBE_TYPE = QtCore.QEvent.Type(QtCore.QEvent.registerEventType())


class ProbeEvent(QtCore.QEvent):
    """An empty event that knows when it was posted."""

    def __init__(self, posted: float) -> None:
        super().__init__(PROBE_TYPE)
        self.posted = posted


class MouseProbe(QtGui.QMouseEvent):
    """A mouse move (no button) that knows when it was posted."""

    def __init__(self, posted: float, x: float, y: float) -> None:
        point = QtCore.QPointF(x, y)
        super().__init__(QtCore.QEvent.Type.MouseMove, point, point,
                         QtCore.Qt.MouseButton.NoButton, QtCore.Qt.MouseButton.NoButton,
                         QtCore.Qt.KeyboardModifier.NoModifier)
        self.posted = posted


class KeyProbe(QtGui.QKeyEvent):
    """A key press (cursor down) that knows when it was posted."""

    def __init__(self, posted: float) -> None:
        super().__init__(QtCore.QEvent.Type.KeyPress, QtCore.Qt.Key.Key_Down,
                         QtCore.Qt.KeyboardModifier.NoModifier)
        self.posted = posted


class Probe(QtCore.QObject):
    """On the GUI thread: records (posted, handled) for probe events and simulated input."""

    def __init__(self) -> None:
        super().__init__()
        self.probes: list[tuple[float, float]] = []
        self.inputs: list[tuple[float, float]] = []

    def event(self, e: QtCore.QEvent) -> bool:  # Qt's name
        if e.type() == PROBE_TYPE:
            self.probes.append((e.posted, time.perf_counter()))
            return True
        return super().event(e)

    def eventFilter(self, obj: QtCore.QObject, e: QtCore.QEvent) -> bool:  # noqa: N802
        posted = getattr(e, "posted", None)
        if posted is not None:
            self.inputs.append((posted, time.perf_counter()))
        return False


class TimedWindow(RunnerWindow):
    """The runner window, with the GUI thread's time in its run handlers recorded."""

    def __init__(self, **kwargs: Any) -> None:
        #: (host time, seconds taken, GUI thread CPU seconds, bins added, stream time of the
        #: last bin)
        self.drains: list[tuple[float, float, float, int, float]] = []
        self.handled: list[tuple[float, str]] = []  # (seconds, event kind)
        self.first_phase_at: float | None = None
        self.finished_at: float | None = None
        self.trace: TraceSaved | None = None
        self.finished: RunFinished | None = None
        super().__init__(**kwargs)

    def _drain_previews(self) -> None:
        before = self.live.bins_seen
        started, cpu = time.perf_counter(), time.thread_time()
        super()._drain_previews()
        now = time.perf_counter()
        if self.live.bins_seen > before and self.live.last_time_s is not None:
            self.drains.append((now, now - started, time.thread_time() - cpu,
                                self.live.bins_seen - before, self.live.last_time_s))

    def on_event(self, event: Event) -> None:
        started = time.perf_counter()
        super().on_event(event)
        self.handled.append((time.perf_counter() - started, type(event).__name__))
        if isinstance(event, PhaseStarted) and self.first_phase_at is None:
            self.first_phase_at = started
        elif isinstance(event, TraceSaved):
            self.trace = event
        elif isinstance(event, RunFinished):
            self.finished_at, self.finished = started, event


def stream_probes(probe: Probe, mouse_target: QtWidgets.QWidget, key_target: QtWidgets.QWidget,
                  stop: threading.Event) -> None:
    """Probe thread: a probe event every PROBE_S, simulated input every INPUT_EVERY-th."""
    post = QtCore.QCoreApplication.postEvent
    size = mouse_target.size()
    k = 0
    next_at = time.perf_counter()
    while not stop.is_set():
        post(probe, ProbeEvent(time.perf_counter()))
        if k % INPUT_EVERY == 0:
            if (k // INPUT_EVERY) % 2 == 0:
                x = size.width() * (0.2 + 0.6 * ((k * 7) % 100) / 100)
                post(mouse_target, MouseProbe(time.perf_counter(), x, size.height() / 2))
            else:
                post(key_target, KeyProbe(time.perf_counter()))
        k += 1
        next_at += PROBE_S
        time.sleep(max(0.0, next_at - time.perf_counter()))


def percentile_ms(samples: list[float], q: float) -> float:
    return float(np.percentile(samples, q)) * 1e3 if samples else float("nan")


def measure(app: QtWidgets.QApplication, root: Path, rate: int) -> dict[str, Any]:
    """One run at `rate` in the runner window; the figures."""
    bench_path = root / f"gui-{rate}.toml"
    bench_path.write_text(BENCH_TOML.format(rate=rate), encoding="utf-8")
    window = TimedWindow(runs_root=root / "runs", hotplug=False)
    window.show()
    settle_heap()  # what `rig gui` does once its window is up
    if not window.bench_panel.load(bench_path):
        raise SystemExit(f"the bench form refused {bench_path}: {window.banner_text()}")
    app.processEvents()

    probe = Probe()
    viewport = window.live.plot.viewport()
    viewport.installEventFilter(probe)
    window.log.installEventFilter(probe)
    # The input devices are QObjects: made here, not lazily by the probe thread's events.
    QtGui.QPointingDevice.primaryPointingDevice()
    QtGui.QInputDevice.primaryKeyboard()

    loop = QtCore.QEventLoop()
    started = time.perf_counter()
    if not window.start():
        raise SystemExit(f"the window did not start the run: {window.banner_text()}")
    # Queued after the window's own handler of the run's end (connected in start()).
    window.session.ended.connect(loop.quit)
    stop_probes = threading.Event()
    thread = threading.Thread(target=stream_probes, name="latency-probe", daemon=True,
                              args=(probe, viewport, window.log, stop_probes))
    thread.start()
    pressed_stop = False

    def limit() -> None:
        nonlocal pressed_stop
        if window.running:
            pressed_stop = True
            window.stop()

    timer = QtCore.QTimer(window)
    timer.setSingleShot(True)
    timer.timeout.connect(limit)
    timer.start(int(RUN_LIMIT_S * 1000))
    give_up = QtCore.QTimer(window)
    give_up.setSingleShot(True)
    give_up.timeout.connect(loop.quit)
    give_up.start(int((RUN_LIMIT_S + 30) * 1000))
    loop.exec()
    wall_s = time.perf_counter() - started
    stop_probes.set()
    thread.join()
    if window.session is not None and not window.session.join(30.0):
        print("warning: the run's thread did not end within 30 s")
    app.processEvents()

    lo = window.first_phase_at or started
    hi = window.finished_at or time.perf_counter()

    def latencies(pairs: list[tuple[float, float]]) -> list[float]:
        return [h - p for p, h in pairs if lo <= p <= hi]

    probes, inputs = latencies(probe.probes), latencies(probe.inputs)
    # Delivered rate: stream samples that reached the live plot per host second (first to last
    # drain), so a bench that falls behind real time shows here even with nothing dropped.
    drains = [d for d in window.drains if lo <= d[0] <= hi]
    if len(drains) >= 2:
        delivered = rate * (drains[-1][4] - drains[0][4]) / (drains[-1][0] - drains[0][0])
    else:
        delivered = float("nan")
    # One repaint of the live plot as it is at the end (a full 10 s window of bins).
    repaints = []
    for _ in range(5):
        t0 = time.perf_counter()
        viewport.repaint()
        repaints.append(time.perf_counter() - t0)
    end = window.last_end
    result = {
        "rate": rate,
        "delivered": delivered,
        "trace": window.trace,
        "status": end.status if end is not None else "no end",
        "message": end.message if end is not None else "",
        "pressed_stop": pressed_stop,
        "wall_s": wall_s,
        "streaming_s": hi - lo,
        "bins": window.live.bins_seen,
        "drain_ms": [d[1] * 1e3 for d in window.drains],
        "drain_cpu_ms": [d[2] * 1e3 for d in window.drains],
        "drain_bins": [d[3] for d in window.drains],
        "events": window.handled,
        "log_lines": window.log.blockCount(),
        "repaint_ms": float(np.median(repaints)) * 1e3,
        "probes": probes,
        "inputs": inputs,
    }
    window.close()
    window.deleteLater()
    app.processEvents()
    return result


def sustained(r: dict[str, Any]) -> bool:
    """Whether the run streamed its rate: complete, nothing lost, >= 95 % in host time."""
    trace = r["trace"]
    return (r["status"] in ("complete", "failed-checks") and trace is not None
            and trace.dropped == 0 and r["delivered"] >= 0.95 * r["rate"])


def report(r: dict[str, Any]) -> None:
    trace = r["trace"]
    print("monitor: virtual-bench Joulescope (a JS110 above 1 MS/s)")
    print(f"monitor nominal rate: {r['rate'] / 1e6:g} MS/s")
    print(f"monitor delivered rate: {r['delivered'] / 1e6:.3f} MS/s (stream samples reaching the "
          "live plot per host second)")
    if trace is not None:
        print(f"trace samples: {trace.samples} at {trace.sample_rate_hz / 1e6:g} MS/s "
              f"({trace.samples / trace.sample_rate_hz:.1f} s of stream)")
        print(f"dropped samples: {trace.dropped}")
    else:
        print("dropped samples: n/a (no trace saved)")
    print(f"run status: {r['status']}" + (f" ({r['message']})" if r["message"] else "")
          + (" (stopped at the time limit)" if r["pressed_stop"] else ""))
    print(f"run wall time: {r['wall_s']:.1f} s (streaming phases {r['streaming_s']:.1f} s)")
    print(f"preview bins drawn: {r['bins']} in {len(r['drain_ms'])} drains")
    drain = r["drain_ms"]
    if drain:
        cpu = r["drain_cpu_ms"]
        print(f"preview drain + live plot update [ms]: median {np.median(drain):.2f}, "
              f"max {max(drain):.2f}; GUI thread CPU median {np.median(cpu):.2f}, "
              f"max {max(cpu):.2f} (median {np.median(r['drain_bins']):.0f} bins per drain)")
    print(f"live plot repaint [ms]: {r['repaint_ms']:.2f}")
    handled = [s * 1e3 for s, _ in r["events"]]
    if handled:
        worst = max(r["events"])
        print(f"run events handled: {len(handled)}, on_event [ms]: median "
              f"{np.median(handled):.3f}, max {max(handled):.2f} ({worst[1]})")
    print(f"event log lines: {r['log_lines']}")
    for name, samples in (("probe", r["probes"]), ("simulated input", r["inputs"])):
        print(f"{name} events: {len(samples)}; latency p50 {percentile_ms(samples, 50):.2f} ms, "
              f"p99 {percentile_ms(samples, 99):.2f} ms, "
              f"max {max(samples, default=float('nan')) * 1e3:.2f} ms")
    both = r["probes"] + r["inputs"]
    p99 = percentile_ms(both, 99)
    print(f"input latency (all {len(both)}): p50 {percentile_ms(both, 50):.2f} ms, "
          f"p99 {p99:.2f} ms, max {max(both, default=float('nan')) * 1e3:.2f} ms")
    met = "met" if p99 < GOAL_P99_MS else "NOT met"
    print(f"goal p99 < {GOAL_P99_MS:.0f} ms: {met} (at {r['delivered'] / 1e6:.3f} MS/s)")


def quiet_offscreen(kind: QtCore.QtMsgType, context: QtCore.QMessageLogContext,
                    message: str) -> None:
    """Qt's messages on stderr, less the offscreen platform's "not supported" notes."""
    if "does not support" not in message:
        print(message, file=sys.stderr)


def main() -> None:
    QtCore.qInstallMessageHandler(quiet_offscreen)
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(sys.argv[:1])
    root = Path(tempfile.mkdtemp(prefix="rig-bench-gui-", dir=os.environ.get("RIG_BENCH_TMP")))
    try:
        for rate in RATES:
            r = measure(app, root, rate)
            report(r)
            if sustained(r):
                break
            if rate != RATES[-1]:
                print(f"the virtual bench did not sustain {rate / 1e6:g} MS/s in real time: "
                      "measuring again at the next rate")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
