"""The DUT client: drives any DUT that speaks the MLPerf Tiny protocol over a byte transport.

Every reply is checked: an ``e-`` line raises `DutError`, a download must end in ``m-load-done``,
counts echoed by the DUT must match what was asked, and every wait has a deadline. Not
thread-safe: one client per port, used from one thread.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol, TypeVar

import numpy as np

from drivers.errors import DeviceError, DeviceTimeout, DutError
from protocols.dut.codec import (
    DEFAULT_HEX_PER_COMMAND,
    TIMESTAMP_MODES,
    BufferDump,
    DutDecoder,
    DutErrorLine,
    DutEvent,
    ExpectingBytes,
    InferDone,
    InferStart,
    InitDone,
    LapUs,
    LoadDone,
    Model,
    Name,
    Profile,
    Ready,
    Results,
    TimestampMode,
    WarmupStart,
    cmd_db_load,
    cmd_db_print,
    cmd_infer,
    cmd_name,
    cmd_profile,
    cmd_results,
    cmd_timestamp,
    encode_command,
    hex_chunks,
)

#: Deadline for a command that does no real work (name, profile, db, results, timestamp).
COMMAND_TIMEOUT_S = 5.0
#: The DUT's lap counter is 32 bits of microseconds.
_LAP_MASK = 0xFFFFFFFF

_E = TypeVar("_E")


class ByteTransport(Protocol):
    """What the client needs from a transport (`drivers.transport.SerialTransport` fits)."""

    def write(self, data: bytes) -> None: ...

    def read(self) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class DutInfo:
    """Who the DUT says it is: ``name%`` and ``profile%`` replies."""

    name: str
    vendor: str
    profile: str
    model: str


@dataclass(frozen=True, eq=False)
class InferResult:
    """One ``infer N W%``: the lap counter values, the DUT-timed window, the class scores.

    `elapsed_us` is the DUT's own measurement of the N timed inferences in performance mode;
    None in energy mode, where the energy monitor times the window between the GPIO edges.
    """

    iterations: int
    warmup: int
    lap_us: tuple[int, ...]
    elapsed_us: int | None
    results: np.ndarray


class DutClient:
    """Speaks the DUT protocol over `transport`; `name` labels the DUT in error messages."""

    def __init__(self, transport: ByteTransport, *, name: str = "DUT") -> None:
        self._transport = transport
        self.name = name
        #: "energy" or "performance" from the boot banner; None until the banner is seen.
        self.timestamp_mode: str | None = None
        #: Filled by `identify()`.
        self.info: DutInfo | None = None
        self._decoder = DutDecoder()
        self._pending: deque[DutEvent] = deque()
        #: Set after a timeout: late replies to the abandoned command must not be taken as
        #: replies to the next one.
        self._out_of_sync = False

    # -- boot ---------------------------------------------------------------------------------
    def wait_for_boot(self, timeout_s: float = 5.0) -> str:
        """Wait for the boot banner (mode, ``m-init-done``, ``m-ready``); return the mode."""
        deadline = time.monotonic() + timeout_s
        mode: str | None = None
        init_done = False
        while True:
            event = self._next_event(deadline)
            if event is None:
                raise DeviceTimeout(
                    f"{self.name} never said m-ready within {timeout_s:g} s",
                    hint="check the port and baud rate, that the board is powered and flashed "
                    "with the benchmark firmware; a board that booted before the port was "
                    "opened does not repeat its banner: reset or power-cycle it",
                )
            if isinstance(event, TimestampMode):
                mode, init_done = event.mode, False
            elif isinstance(event, InitDone):
                init_done = mode is not None
            elif isinstance(event, Ready) and init_done and mode is not None:
                self.timestamp_mode = mode
                self._out_of_sync = False
                return mode

    def require_mode(self, mode: str) -> None:
        """Raise `DeviceError` unless the firmware's timestamp mode is `mode`."""
        if mode not in TIMESTAMP_MODES:
            raise ValueError(f"unknown timestamp mode {mode!r}; expected one of {TIMESTAMP_MODES}")
        if self.timestamp_mode is None:
            raise DeviceError(
                f"{self.name}: timestamp mode unknown (no boot banner seen), {mode} mode needed",
                hint="reset or power-cycle the DUT after opening its port so that its banner "
                "is seen",
            )
        if self.timestamp_mode != mode:
            raise DeviceError(
                f"{self.name} firmware is built for {self.timestamp_mode} timestamp mode, "
                f"but this measurement needs {mode} mode",
                hint=f"rebuild the firmware for {mode} timestamp mode",
            )

    # -- one command --------------------------------------------------------------------------
    def command(self, text: str, timeout_s: float = COMMAND_TIMEOUT_S) -> list[DutEvent]:
        """Send `text` as one command; return its reply events up to and including `Ready`."""
        payload = encode_command(text)
        if self._out_of_sync:
            self._resync()
        self._transport.write(payload)
        deadline = time.monotonic() + timeout_s
        events: list[DutEvent] = []
        while True:
            event = self._next_event(deadline)
            if event is None:
                self._out_of_sync = True
                got = ", ".join(type(e).__name__ for e in events[-5:]) or "nothing"
                raise DeviceTimeout(
                    f"{self.name} did not finish {text!r} within {timeout_s:g} s (got: {got})",
                    hint="the DUT stopped answering: check its power, reset line and port",
                )
            events.append(event)
            if isinstance(event, TimestampMode):
                self.timestamp_mode = event.mode
            if isinstance(event, Ready):
                break
        if any(isinstance(e, InitDone) for e in events):
            raise DeviceError(
                f"{self.name} restarted while running {text!r}",
                hint="check its supply (brown-out) and its reset line",
            )
        errors = [e.text for e in events if isinstance(e, DutErrorLine)]
        if errors:
            raise DutError(f"{self.name} refused {text!r}: {'; '.join(errors)}", command=text)
        return events

    # -- the MLPerf Tiny commands -------------------------------------------------------------
    def identify(self) -> DutInfo:
        """Ask ``name%`` then ``profile%``; store and return who the DUT is."""
        name = self._one(self.command(cmd_name()), Name, "name")
        replies = self.command(cmd_profile())
        profile = self._one(replies, Profile, "profile")
        model = self._one(replies, Model, "profile")
        self.info = DutInfo(name.name, name.vendor, profile.text, model.model_id)
        return self.info

    def load(self, data: bytes, *, per_command: int = DEFAULT_HEX_PER_COMMAND) -> None:
        """Download `data` into the DUT's input buffer and check that all of it arrived."""
        data = bytes(data)
        chunks = hex_chunks(data, per_command)
        announce = cmd_db_load(len(data))
        expecting = self._one(self.command(announce), ExpectingBytes, announce)
        if expecting.n != len(data):
            raise DeviceError(
                f"{self.name} expects {expecting.n} bytes after {announce!r}",
                hint="its input buffer may be smaller than the data: check the model's input size",
            )
        for k, chunk in enumerate(chunks, start=1):
            done = any(isinstance(e, LoadDone) for e in self.command(chunk))
            if done and k < len(chunks):
                raise DeviceError(
                    f"{self.name} said m-load-done after {k} of {len(chunks)} db commands",
                    hint="the DUT counted more bytes than were sent: check the line for noise",
                )
            if not done and k == len(chunks):
                raise DeviceError(
                    f"download incomplete: sent {len(data)} bytes in {len(chunks)} db commands "
                    f"but {self.name} never said m-load-done",
                    hint="bytes were lost on the line; lower per_command (26 behind an IO "
                    "manager) or the baud rate",
                )

    def read_buffer(self) -> bytes:
        """``db print%``: the bytes the DUT has received since the last ``db load``."""
        events = self.command(cmd_db_print())
        return b"".join(e.data for e in events if isinstance(e, BufferDump))

    def infer(
        self, iterations: int, warmup: int = 0, *, timeout_s: float | None = None
    ) -> InferResult:
        """Run `warmup` untimed and `iterations` timed inferences on the loaded input."""
        text = cmd_infer(iterations, warmup)  # validates before anything is sent
        if timeout_s is None:
            # A deadline against a hung DUT, not a measurement: generous.
            timeout_s = 30.0 + (iterations + warmup) / 10.0
        events = self.command(text, timeout_s)

        def check_count(kind: type[WarmupStart | InferStart], asked: int, what: str) -> None:
            got = self._one(events, kind, text)
            if got.n != asked:
                raise DeviceError(
                    f"{self.name} started {got.n} {what} after {text!r}, not {asked}",
                    hint="the firmware parsed the command differently: check its version",
                )

        check_count(WarmupStart, warmup, "warmup inferences")
        check_count(InferStart, iterations, "inferences")
        self._one(events, InferDone, text)
        laps = tuple(e.us for e in events if isinstance(e, LapUs))
        results = self._results(events, text)
        elapsed: int | None = None
        if self.timestamp_mode == "performance" or (self.timestamp_mode is None and laps):
            if len(laps) != 2:
                raise DeviceError(
                    f"{self.name} printed {len(laps)} m-lap-us lines for {text!r}, expected 2",
                    hint="the firmware's timestamp mode does not match its banner",
                )
            elapsed = (laps[-1] - laps[0]) & _LAP_MASK
        return InferResult(iterations, warmup, laps, elapsed, results)

    def results(self) -> np.ndarray:
        """``results%``: the class scores of the last inference."""
        text = cmd_results()
        return self._results(self.command(text), text)

    def timestamp(self) -> int | None:
        """``timestamp%``: the lap counter in performance mode; None in energy mode (a pulse)."""
        text = cmd_timestamp()
        laps = [e.us for e in self.command(text) if isinstance(e, LapUs)]
        if self.timestamp_mode == "performance" and not laps:
            raise DeviceError(
                f"{self.name} printed no m-lap-us line for {text!r} in performance mode",
                hint="the firmware's timestamp mode does not match its banner",
            )
        return laps[-1] if laps else None

    def close(self) -> None:
        """Close the transport."""
        self._transport.close()

    def __enter__(self) -> DutClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------
    def _next_event(self, deadline: float) -> DutEvent | None:
        """The next event, or None once the monotonic `deadline` has passed."""
        while not self._pending:
            if time.monotonic() > deadline:
                return None
            data = self._transport.read()
            if data:
                self._pending.extend(self._decoder.feed(data))
        return self._pending.popleft()

    def _resync(self) -> None:
        """Drop replies that belong to an abandoned command."""
        reset = getattr(self._transport, "reset_input", None)
        if reset is not None:
            reset()
        self._pending.clear()
        self._decoder.reset()
        self._out_of_sync = False

    def _one(self, events: list[DutEvent], kind: type[_E], command: str) -> _E:
        """The first event of `kind` in a reply; DeviceError naming the command if absent."""
        for event in events:
            if isinstance(event, kind):
                return event
        raise DeviceError(
            f"{self.name} did not answer {command!r} with the expected {kind.__name__} line",
            hint="is this MLPerf Tiny (EEMBC) benchmark firmware at the right baud rate?",
        )

    def _results(self, events: list[DutEvent], command: str) -> np.ndarray:
        found = self._one(events, Results, command)
        return np.asarray(found.values, dtype=np.float64)
