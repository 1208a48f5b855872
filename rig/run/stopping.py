"""A Stop button for a run on another thread: the same clean stop as Ctrl-C, asked for politely.

Ctrl-C raises KeyboardInterrupt wherever the main thread happens to be. A GUI (or a remote
command) runs the procedure on a worker thread and cannot do that safely: an exception injected
at a random bytecode could land inside the cleanup that powers the DUT off. Instead it sets a
`StopRequest`, and the places where a run waits (the DUT client's reply loop, the energy
recorder's waits, the procedure's event stream, a sweep between points) check it and raise
`StopRequested`, a KeyboardInterrupt, so the runner finishes exactly as after Ctrl-C: DUT
powered off, run folder marked interrupted, everything measured kept.
"""

from __future__ import annotations

import threading


class StopRequested(KeyboardInterrupt):
    """Raised on the run's thread at a safe point after `StopRequest.set()`."""


class StopRequest:
    """A thread-safe flag; `check()` raises `StopRequested` once it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason = ""

    def set(self, reason: str = "stopped by the user") -> None:
        """Ask the run to stop at its next safe point (any thread)."""
        if not self._event.is_set():
            self.reason = reason
        self._event.set()

    def is_set(self) -> bool:
        """Whether a stop was asked for."""
        return self._event.is_set()

    def check(self) -> None:
        """Raise `StopRequested` if a stop was asked for (call on the run's thread)."""
        if self._event.is_set():
            raise StopRequested(self.reason)

    def wait(self, timeout_s: float) -> bool:
        """Block up to `timeout_s`; True if a stop was asked for."""
        return self._event.wait(timeout_s)
