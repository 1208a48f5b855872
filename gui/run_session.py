"""One measurement on a worker thread, seen from the GUI thread through Qt signals.

The procedure is the rig's (`rig.run.measure.measure_asc`, `rig.qubo.sweep.start_sweep`); this
module only runs it off the GUI thread and hands its events over:

- every event the procedure publishes goes through the `run_event` signal (queued into the GUI
  thread, so slots never run on the procedure's thread);
- the live power previews go into a bounded deque that the window drains on a timer: the
  monitor's thread only appends, it never waits for the GUI;
- Stop sets the run's `StopRequest`: the run ends at its next safe point exactly as after
  Ctrl-C (DUT powered off, folder marked interrupted, data kept).
"""

from __future__ import annotations

import threading
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from PySide6 import QtCore

from rig.bench.config import Bench
from rig.errors import BENCH_ERRORS, RunInterrupted
from rig.mqtt.session import bench_telemetry
from rig.qubo.sweep import SweepSpec, start_sweep
from rig.run.events import Event, RunStarted
from rig.run.live_power import PowerPreview
from rig.run.measure import measure_asc
from rig.run.stopping import StopRequest

#: Previews kept for the live plot between two drains (a few seconds of stream at most).
PREVIEW_BACKLOG = 256


class Job(Protocol):
    """Something the runner can start: a measurement with the rig's subscriber hooks."""

    runs_root: Path

    def title(self) -> str: ...

    def run(self, subscribers: list[Callable[[Event], None]], stop: StopRequest,
            live: list[Callable[[PowerPreview], None]]) -> Any: ...


@dataclass
class AscJob:
    """`rig measure asc` on a bench."""

    bench: Bench
    device: str
    runs_root: Path
    scope: str = "all"

    def title(self) -> str:
        """What the window says is running."""
        what = "" if self.scope == "all" else f" ({self.scope})"
        return f"ASC{what} on {self.bench.name}"

    def run(self, subscribers: list[Callable[[Event], None]], stop: StopRequest,
            live: list[Callable[[PowerPreview], None]]) -> Any:
        """Measure; returns the runner's Outcome. A bench with [mqtt] also reports to its
        broker, as `rig measure asc` does (a refused login ends the job before it measures)."""
        with bench_telemetry(self.bench) as telemetry:
            if telemetry is not None:
                subscribers, live = [*subscribers, telemetry], [*live, telemetry.power]
            return measure_asc(self.bench, device=self.device, runs_root=self.runs_root,
                               subscribers=subscribers, scope=self.scope, stop=stop, live=live)


@dataclass
class SweepJob:
    """`rig sweep qubo` of a sweep spec (one point is a sweep of one)."""

    spec: SweepSpec
    runs_root: Path
    stand_in: bool = False

    def title(self) -> str:
        """What the window says is running."""
        points = len(self.spec.points())
        return f"QUBO sweep {self.spec.name} ({points} point{'s' if points != 1 else ''})"

    def run(self, subscribers: list[Callable[[Event], None]], stop: StopRequest,
            live: list[Callable[[PowerPreview], None]]) -> Any:
        """Measure; returns the sweep's SweepOutcome."""
        return start_sweep(self.spec, runs_root=self.runs_root, stand_in=self.stand_in,
                           subscribers=subscribers, stop=stop)


@dataclass
class SessionEnd:
    """How a session ended, for the window to show."""

    status: str
    run_path: Path | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    #: One line for people (the error's message), or "".
    message: str = ""
    hint: str = ""
    #: Only for a bug in the rig (not a device or input fault): the traceback, for the log.
    traceback: str = ""


class RunSession(QtCore.QObject):
    """Runs one job on a worker thread; emits its events and its end on the GUI thread."""

    #: Not `event`: that name is QObject.event(), the method Qt delivers QEvents through.
    run_event = QtCore.Signal(object)
    ended = QtCore.Signal(object)

    def __init__(self, job: Job, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self.job = job
        self.stop_request = StopRequest()
        self.previews: deque[PowerPreview] = deque(maxlen=PREVIEW_BACKLOG)
        self.run_path: Path | None = None
        self._thread = threading.Thread(target=self._main, name="rig-run", daemon=True)

    def start(self) -> None:
        """Start the job on its thread."""
        self._thread.start()

    def stop(self) -> None:
        """Ask the run to stop at its next safe point (returns at once)."""
        self.stop_request.set()

    @property
    def running(self) -> bool:
        """Whether the worker thread is still going."""
        return self._thread.is_alive()

    def join(self, timeout_s: float) -> bool:
        """Wait for the worker thread; True if it ended."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    # -- worker thread ------------------------------------------------------------------------
    def _on_event(self, event: Event) -> None:
        if isinstance(event, RunStarted) and event.manifest.get("run_folder"):
            self.run_path = self.job.runs_root / event.manifest["run_folder"]
        self.run_event.emit(event)

    def _main(self) -> None:
        end = SessionEnd(status="failed")
        try:
            outcome = self.job.run([self._on_event], self.stop_request, [self.previews.append])
            end = SessionEnd(status=outcome.status, run_path=outcome.run_path,
                             summary=outcome.summary)
            if outcome.error is not None:
                end.message, end.hint = outcome.error.message, outcome.error.hint or ""
        except RunInterrupted as exc:  # Stop (or SIGTERM): the folder is complete
            end = SessionEnd(status="interrupted", run_path=self.run_path, message=exc.message)
        except BENCH_ERRORS as exc:  # refused before the run folder was made (bench, disk)
            end = SessionEnd(status="refused", run_path=self.run_path, message=exc.message,
                             hint=exc.hint or "")
        except Exception as exc:  # a bug in the rig: say so in one line, keep the details
            end = SessionEnd(status="failed", run_path=self.run_path,
                             message=f"internal error: {type(exc).__name__}: {exc}",
                             hint="the run folder keeps what was measured; please report this "
                                  "with the event log", traceback=traceback.format_exc())
        finally:
            self.ended.emit(end)
