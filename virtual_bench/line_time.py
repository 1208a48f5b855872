"""A download's time on real UART lines, which the virtual bench's ptys do not have.

A pty moves bytes as fast as the host does; a UART takes ten bit times per character (start, 8
data bits, stop). While a download crosses such a line (the IO manager's 9600-baud link to the
DUT and its USB serial to the rig, or a DUT's own UART at `[sim] uart_baud`) the bench's clock
is held firm, the characters on each line are counted, and at the end the clock jumps by their
time on their lines. The recording then holds the lines' time, not the host's (which `speed`
would multiply and a loaded host would stretch).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

from virtual_bench.world import NS, SimClock

#: Host seconds a held download may wait for its next character: a rig that stopped in the
#: middle must not leave the bench's time standing still.
IDLE_END_S = 2.0


class HeldLines:
    """One download in progress over lines of `chars_per_s` characters per second each: the
    clock stands still until `end()`, which charges the counted characters' time."""

    def __init__(self, clock: SimClock, chars_per_s: Sequence[float]) -> None:
        if not chars_per_s or min(chars_per_s) <= 0:
            raise ValueError("every line needs a positive rate")
        self._clock = clock
        self._rates = tuple(float(r) for r in chars_per_s)
        #: Characters counted on each line so far.
        self.chars = [0] * len(self._rates)
        #: Set by the owner once the download's check is sent: its reply ends it.
        self.ending = False
        self._last = time.monotonic()
        self._hold = contextlib.ExitStack()
        self._hold.enter_context(clock.held(firm=True))

    def count(self, *chars: int) -> None:
        """Add characters per line (in line order), e.g. ``count(n)`` on a single line."""
        for line, n in enumerate(chars):
            self.chars[line] += n
        self._last = time.monotonic()

    def stalled(self) -> bool:
        """Whether nothing has crossed for `IDLE_END_S` of host time (end it then)."""
        return time.monotonic() - self._last > IDLE_END_S

    def seconds(self) -> float:
        """The counted characters' time on their lines [s]."""
        return sum(n / rate for n, rate in zip(self.chars, self._rates, strict=True))

    def end(self) -> float:
        """Let the clock run again, ahead by the lines' time; return that time [s]."""
        seconds = self.seconds()
        self._clock.advance(round(seconds * NS))
        self._hold.close()
        return seconds
