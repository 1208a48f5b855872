"""Short jobs off the GUI thread (port scans, handshakes, reports), results back on it."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from PySide6 import QtCore

from rig.errors import BENCH_ERRORS


@dataclass
class Done:
    """What a background call gave: its value, or the error as one line (+ hint)."""

    value: Any = None
    error: str = ""
    hint: str = ""
    traceback: str = ""

    @property
    def ok(self) -> bool:
        """Whether the call returned."""
        return not self.error


class Background(QtCore.QObject):
    """Runs `work()` on a daemon thread and calls `on_done(Done)` on the GUI thread."""

    _finished = QtCore.Signal(object)

    def __init__(self, work: Callable[[], Any], on_done: Callable[[Done], None],
                 parent: QtCore.QObject | None = None, *, name: str = "rig-background") -> None:
        super().__init__(parent)
        self._work = work
        self._finished.connect(on_done)
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)

    def start(self) -> Background:
        """Start the thread; returns self."""
        self._thread.start()
        return self

    @property
    def busy(self) -> bool:
        """Whether the work is still going."""
        return self._thread.is_alive()

    def _main(self) -> None:
        try:
            done = Done(value=self._work())
        except BENCH_ERRORS as exc:
            done = Done(error=exc.message, hint=exc.hint or "")
        except Exception as exc:  # a bug: one line in the window, the details in the log
            done = Done(error=f"internal error: {type(exc).__name__}: {exc}",
                        traceback=traceback.format_exc())
        self._finished.emit(done)
