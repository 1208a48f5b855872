"""Raw pseudo-terminals for simulated devices (the rig opens the slave path with pyserial)."""

from __future__ import annotations

import contextlib
import os
import select
import threading
import time
import tty
from collections.abc import Callable
from contextlib import AbstractContextManager


class Pty:
    """A raw pty pair. The device side reads and writes `master`; the rig opens `path`.

    The slave fd stays open for the pty's lifetime: if it closed, the master would see EOF/EIO
    every time the rig closes and reopens the port.
    """

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.master)
        tty.setraw(self.slave)
        self.path = os.ttyname(self.slave)

    def write(self, data: bytes, *, patience_s: float, stop: threading.Event | None = None,
              waiting: Callable[[], AbstractContextManager[object]] | None = None) -> int:
        """Write `data` from the device side; returns how many bytes were dropped.

        A UART does not wait for a reader: once the rig has read nothing for `patience_s`
        (or once `stop` is set, or after the pty is closed) the rest is lost, and the count
        says so. A reader that keeps reading, however slowly (a loaded host), loses nothing.
        `waiting` is entered while it waits for a reader that has stalled (`SimClock.running`).
        """
        view = memoryview(data)
        give_up = time.monotonic() + patience_s
        stalled = False
        while view:
            try:
                view = view[os.write(self.master, view) :]
                give_up = time.monotonic() + patience_s
                continue
            except BlockingIOError:
                pass
            except OSError:
                break  # the pty is closed
            left = give_up - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                break
            # `waiting` only once the reader has stalled (20 ms without room): a reader that
            # reads, however slowly, is keeping up with the time it is given.
            ready = True
            with contextlib.suppress(OSError, ValueError), \
                    waiting() if waiting is not None and stalled else contextlib.nullcontext():
                ready = bool(select.select([], [self.master], [], min(left, 0.02))[1])
            stalled = not ready
        return len(view)

    def close(self) -> None:
        """Close both ends; safe to call twice."""
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.master = self.slave = -1
