"""A DUT's reply deadline counted in the energy monitor's samples too, so that a hung DUT stops
the trace (issue 39).

The procedure waits `max(30 s, 3 x the expected time)` of host time for an `infer` to come back
(`AscProcedure._deadline_s`). The trace grows with the monitor's clock meanwhile: on hardware
the two agree, but a virtual bench's simulated time runs `speed` times faster, and a DUT hung at
speed 50 had the monitor record 50 x the deadline (47 MB where the projection said 3.7 MB).

`TraceDeadline` counts the same deadline in the DUT's own time, which is the trace's: from the
run's start pulse (energy mode), where the DUT's time alone decides where its end pulse falls,
or, before that pulse (or in performance mode), from the command, and then never sooner than
`COMMAND_TIMEOUT_S` of host time (the host's patience for any reply, which covers a loaded
host that delivers the command late). Once it has passed with the run's window still open, no
energy window can use what is recorded: the recorder takes no more samples (`stop_after`) and
the wait ends with `ReplyDeadlinePassed` naming the deadline (not a `DeviceTimeout`, which the
DUT client would take for its own and reword). The trace's overrun is so bounded by
one deadline of the DUT's time (or that patience), whatever the speed: the projection
(`rig.run.measure.asc_trace_seconds`) need not count 50 x the deadline for every run to cover a
DUT that hangs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from drivers.dut.client import COMMAND_TIMEOUT_S
from rig.errors import RigError
from rig.run.recording import EmonRecorder


class ReplyDeadlinePassed(RigError):
    """A command's reply deadline passed in the DUT's own time (the monitor's samples) with its
    window still open: the trace was stopped there."""


class TraceDeadline:
    """The reply deadline of one command (`command`, e.g. "infer 816 1") in the monitor's
    samples. `start_edges`: the timestamp edges seen before this run (its window is the next
    two), or None where the run makes no window (performance mode)."""

    def __init__(self, recorder: EmonRecorder, deadline_s: float, command: str, who: str, *,
                 start_edges: int | None, host_floor_s: float = COMMAND_TIMEOUT_S) -> None:
        self.recorder = recorder
        self.deadline_s = deadline_s
        self.command = command
        self.who = who
        self._start_edges = start_edges
        self._span = math.ceil(deadline_s * recorder.sample_rate)
        self._host_floor_s = host_floor_s
        self._sent_at = recorder.samples
        self._host_sent = time.monotonic()

    def wrap(self, checkpoint: Callable[[], None] | None) -> Callable[[], None]:
        """A DUT checkpoint that runs `checkpoint` (the recorder's own check, a stop request)
        and then this deadline's."""
        def check() -> None:
            if checkpoint is not None:
                checkpoint()
            self.check()
        return check

    def check(self) -> None:
        """Raise `ReplyDeadlinePassed`, the trace stopped, once the deadline has passed in the
        DUT's time with the run's window still open."""
        rec = self.recorder
        samples = rec.samples
        anchor, from_pulse = self._sent_at, False
        if self._start_edges is not None:
            edges = rec.edges(self._start_edges)
            if len(edges) >= 2:
                return  # the window closed: only the reply is late, the host's deadline waits
            if edges:
                anchor, from_pulse = edges[0], True
        if samples < anchor + self._span:
            return
        if not from_pulse and time.monotonic() - self._host_sent < self._host_floor_s:
            return
        rec.stop_after = samples  # the trace ends here: no window can use what follows
        since = "its start pulse" if from_pulse else "the command"
        raise ReplyDeadlinePassed(
            f"{self.who} never said m-infer-done for {self.command!r} within "
            f"{self.deadline_s:.4g} s of its own time (the energy monitor's samples since "
            f"{since}); the trace stops there: no energy window can use more",
            hint="the DUT stopped answering: check its power, reset line and port")
