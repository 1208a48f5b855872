"""Raw pseudo-terminals for simulated devices (the rig opens the slave path with pyserial)."""

from __future__ import annotations

import contextlib
import os
import tty


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

    def close(self) -> None:
        """Close both ends; safe to call twice."""
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.master = self.slave = -1
