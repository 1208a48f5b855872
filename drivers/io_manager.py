"""The IO manager (Arduino UNO proxy for energy mode): its client, and a DUT transport through it.

`IoManager` runs the IO manager's own commands with deadlines and typed errors and sorts what
the UNO sends into three streams: replies to its own commands, lines relayed from the DUT
(``[dut]: ...``), and timer captures (``m-lap-us-<n>``). `IoManagerTransport` wraps it in the
interface of `drivers.transport.SerialTransport`, so that `DutClient(IoManagerTransport(io))`
drives a DUT behind the IO manager with exactly the API it uses on a direct connection.

Behind an IO manager, downloads use the hex ``db`` path with `HEX_PER_COMMAND` (26) bytes per
command: the transport says so in ``hex_per_command`` (or pass ``per_command=26`` to
``DutClient.load``). Binary (``bload``) cannot pass through: ``binary_ok`` is False. DUT
commands are at most ``max_command`` (76) characters with their ``%``. Not thread-safe: one
client per port, used from one thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Protocol, TypeVar

from drivers.errors import DeviceError, DeviceTimeout, InstrumentError
from protocols.io_manager.codec import (
    DUT_BAUD,
    HEX_PER_COMMAND,
    MAX_PASSTHROUGH,
    DutLine,
    Error,
    Help,
    IoEvent,
    IoManagerDecoder,
    LapUs,
    Name,
    Passthrough,
    Ready,
    Res,
    Timer,
    Tm,
    Version,
    cmd_disable_timer,
    cmd_dut,
    cmd_enable_timer,
    cmd_help,
    cmd_name,
    cmd_res,
    cmd_tm,
    cmd_version,
    dut_command_from_wire,
    encode_command,
)

#: Deadline for one of the IO manager's own commands, the pass-through acknowledgement
#: included: none of them waits for the DUT.
COMMAND_TIMEOUT_S = 2.0
#: How long one `handshake` attempt waits before asking again. An UNO resets when its port
#: is opened and its bootloader swallows what arrives during the first second or two.
HANDSHAKE_RETRY_S = 0.5
#: Own lines kept that arrived outside any command (for error messages; bounded).
_UNSOLICITED_KEPT = 50

_E = TypeVar("_E")


class IoManagerError(InstrumentError):
    """The IO manager answered one of its commands with ``e-[...]``."""


class ByteTransport(Protocol):
    """What the client needs from a transport (`drivers.transport.SerialTransport` fits)."""

    def write(self, data: bytes) -> None: ...

    def read(self) -> bytes: ...

    def reset_input(self) -> None: ...

    def close(self) -> None: ...


class IoManager:
    """Speaks to an IO manager over `transport`; `label` names it in error messages."""

    def __init__(self, transport: ByteTransport, *, label: str = "IO manager") -> None:
        self._transport = transport
        self.label = label
        #: The port's address, for messages.
        self.url: str = getattr(transport, "url", "")
        self._decoder = IoManagerDecoder()
        #: Own events not yet consumed by the command waiting for them.
        self._pending: deque[IoEvent] = deque()
        #: Lines relayed from the DUT, in order, not yet read by `read_dut`.
        self._dut_lines: deque[str] = deque()
        self._laps: list[int] = []
        #: Own lines that arrived while no command was waiting (late or stray).
        self.unsolicited: deque[IoEvent] = deque(maxlen=_UNSOLICITED_KEPT)
        self._in_command = False
        #: Set after a timeout: late replies must not be taken as replies to the next command.
        self._out_of_sync = False

    # -- connection ---------------------------------------------------------------------------
    def handshake(self, timeout_s: float = 5.0) -> str:
        """Ask ``name%`` until the IO manager answers (it may be rebooting); return its name.

        Drops whatever was received before, DUT lines included: call it before the DUT is
        powered.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            self._resync()
            attempt = min(deadline, time.monotonic() + HANDSHAKE_RETRY_S)
            self._transport.write(encode_command(cmd_name()))
            events = self._reply(attempt)
            if events is not None and not any(isinstance(e, Error) for e in events):
                found = [e for e in events if isinstance(e, Name)]
                if found:
                    return found[0].text
            if time.monotonic() >= deadline:
                raise DeviceTimeout(
                    f"{self.label} did not answer name% within {timeout_s:g} s",
                    hint="check the port and that the UNO runs the IO manager sketch at "
                    "115200 baud (firmware/io_manager)",
                )

    # -- its own commands ---------------------------------------------------------------------
    def command(self, text: str, timeout_s: float = COMMAND_TIMEOUT_S) -> list[IoEvent]:
        """Send one of the IO manager's own commands; its reply events up to its `Ready`."""
        payload = encode_command(text)
        if self._out_of_sync:
            self._resync()
        self._transport.write(payload)
        events = self._reply(time.monotonic() + timeout_s)
        if events is None:
            self._out_of_sync = True
            raise DeviceTimeout(
                f"{self.label} did not finish {text!r} within {timeout_s:g} s",
                hint="check that the UNO is connected and runs the IO manager sketch",
            )
        errors = [e.text for e in events if isinstance(e, Error)]
        if errors:
            raise IoManagerError(
                f"{self.label} refused {text!r}: {'; '.join(errors)}",
                command=text,
                hint="check the command against `help%` of this IO manager",
            )
        return events

    def name(self) -> str:
        """The IO manager's name (``m-name-[...]``)."""
        return self._one(self.command(cmd_name()), Name, "name").text

    def version(self) -> str:
        """The IO manager's firmware version (``m-version-[x.y.z]``)."""
        return self._one(self.command(cmd_version()), Version, "version").text

    def help(self) -> list[str]:
        """The IO manager's ``m-help-[...]`` lines."""
        return [e.text for e in self.command(cmd_help()) if isinstance(e, Help)]

    def set_reset_polarity(self, level: int) -> None:
        """Set the DUT reset line level that holds the DUT in reset (0: active low)."""
        text = cmd_res(level)
        got = self._one(self.command(text), Res, text)
        self._check_echo(text, got.level, level)

    def enable_timer(self) -> None:
        """Capture timestamp edges; each one arrives as a lap (see `take_laps`)."""
        self._set_timer(True)

    def disable_timer(self) -> None:
        """Stop capturing timestamp edges."""
        self._set_timer(False)

    def set_timer_edge(self, mode: int) -> None:
        """Capture falling edges only (`EDGE_FALL`) or every change (`EDGE_CHANGE`)."""
        text = cmd_tm(mode)  # refuses anything but 0 and 1
        got = self._one(self.command(text), Tm, text)
        self._check_echo(text, got.mode, mode)

    def take_laps(self) -> list[int]:
        """Timer captures (the UNO's µs clock, 32 bits, 4 µs steps) since the last call."""
        laps, self._laps = self._laps, []
        return laps

    # -- pass-through -------------------------------------------------------------------------
    def passthrough(self, text: str, timeout_s: float = COMMAND_TIMEOUT_S) -> None:
        """Forward the DUT command `text` (without ``%``); return once the IO manager acked it.

        The DUT's reply arrives later through `read_dut`. A command that does not fit the IO
        manager's buffer raises `ProtocolError` before any byte is sent.
        """
        wrapped = cmd_dut(text)
        events = self.command(wrapped, timeout_s)
        echoed = self._one(events, Passthrough, wrapped).command
        if echoed != text:
            raise DeviceError(
                f"{self.label} passed {echoed!r} through to the DUT instead of {text!r}",
                hint="bytes were garbled between the host and the UNO: check the USB cable",
            )

    def read_dut(self) -> list[str]:
        """DUT lines relayed since the last call; reads the port once if none are waiting."""
        if not self._dut_lines:
            self._pump()
        lines = list(self._dut_lines)
        self._dut_lines.clear()
        return lines

    def reset_input(self) -> None:
        """Drop everything received and not yet consumed, on the port and here."""
        self._resync()

    def close(self) -> None:
        """Close the port."""
        self._transport.close()

    def __enter__(self) -> IoManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------
    def _pump(self) -> None:
        """Read the port once and sort the events into their streams."""
        data = self._transport.read()
        if not data:
            return
        for event in self._decoder.feed(data):
            if isinstance(event, DutLine):
                self._dut_lines.append(event.text)
            elif isinstance(event, LapUs):
                self._laps.append(event.us)
            elif self._in_command:
                self._pending.append(event)
            else:
                self.unsolicited.append(event)

    def _reply(self, deadline: float) -> list[IoEvent] | None:
        """Own events up to and including `Ready`; None if the monotonic deadline passes."""
        events: list[IoEvent] = []
        self._in_command = True
        try:
            while True:
                while not self._pending:
                    if time.monotonic() > deadline:
                        return None
                    self._pump()
                event = self._pending.popleft()
                events.append(event)
                if isinstance(event, Ready):
                    return events
        finally:
            self._in_command = False

    def _resync(self) -> None:
        self._transport.reset_input()
        self._decoder.reset()
        self._pending.clear()
        self._dut_lines.clear()
        self._out_of_sync = False

    def _set_timer(self, enabled: bool) -> None:
        text = cmd_enable_timer() if enabled else cmd_disable_timer()
        got = self._one(self.command(text), Timer, text)
        self._check_echo(text, got.enabled, enabled)

    def _check_echo(self, text: str, got: object, wanted: object) -> None:
        if got != wanted:
            raise DeviceError(
                f"{self.label} answered {text!r} with {got!r}",
                hint="bytes were garbled between the host and the UNO: check the USB cable",
            )

    def _one(self, events: list[IoEvent], kind: type[_E], command: str) -> _E:
        for event in events:
            if isinstance(event, kind):
                return event
        raise DeviceError(
            f"{self.label} did not answer {command!r} with the expected {kind.__name__} line",
            hint="is this the IO manager sketch (firmware/io_manager) at 115200 baud?",
        )


class IoManagerTransport:
    """A DUT transport through an IO manager's pass-through, with `SerialTransport`'s interface.

    `write(b"name%")` sends ``dut name%`` and waits for its acknowledgement; `read()` returns
    only what the DUT printed, each line re-terminated ``\\r\\n``.
    """

    #: Binary downloads (``bload``) cannot pass through: clients use the hex path.
    binary_ok = False
    #: Longest DUT command, its ``%`` included, that fits behind ``dut `` (76).
    max_command = MAX_PASSTHROUGH
    #: Bytes per ``db`` command to download with behind an IO manager (26).
    hex_per_command = HEX_PER_COMMAND
    #: The slowest link, the DUT's UART: what deadlines of long transfers must assume.
    baudrate = DUT_BAUD

    def __init__(self, io_manager: IoManager, *, name: str = "DUT via IO manager") -> None:
        self.io_manager = io_manager
        self.name = name
        self.url = io_manager.url

    def write(self, data: bytes) -> None:
        """Pass the one command in `data` (``<cmd>%``) through to the DUT.

        Binary data, several commands in one write and over-long commands raise
        `ProtocolError` before any byte is sent.
        """
        self.io_manager.passthrough(dut_command_from_wire(data))

    def read(self) -> bytes:
        """The DUT's lines relayed since the last read (waits at most one port poll)."""
        return "".join(line + "\r\n" for line in self.io_manager.read_dut()).encode()

    def read_until(self, deadline: float, done: Callable[[bytearray], bool]) -> bytes:
        """Read until `done(buffer)` is true or the monotonic `deadline` passes (then raise)."""
        buf = bytearray()
        while not done(buf):
            if time.monotonic() > deadline:
                raise DeviceTimeout(
                    f"{self.name}: no complete reply from {self.url} in time",
                    hint="check that the DUT is powered and wired to the IO manager at 9600 baud",
                )
            buf += self.read()
        return bytes(buf)

    def reset_input(self) -> None:
        """Drop whatever is waiting, from the DUT and from the IO manager."""
        self.io_manager.reset_input()

    def close(self) -> None:
        """Close the IO manager's port."""
        self.io_manager.close()

    def __enter__(self) -> IoManagerTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
