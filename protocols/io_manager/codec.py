"""Sans-IO codec for the IO manager: the Arduino UNO proxy between the host and an energy-mode DUT.

Framing is the DUT protocol's: a command is ASCII text ending in ``%``, replies are ``\\r\\n``
lines, and every command the IO manager runs itself ends with ``m-ready``. ``dut <cmd>%`` passes
``<cmd>%`` through to the DUT's UART; the IO manager acknowledges it with
``m-dut-passthrough(<cmd>)`` + ``m-ready`` and relays every line the DUT prints as
``[dut]: <line>``. `IoManagerDecoder` turns that mixed stream into typed events: the IO
manager's own replies, and `DutLine` (prefix stripped) for the DUT's. It never raises.

=======================================  ===============================
line                                     event
=======================================  ===============================
``[dut]: m-ready``                       ``DutLine("m-ready")``
``m-dut-passthrough(name)``              ``Passthrough("name")``
``m-name-[<text>]``                      ``Name(text)``
``m-version-[1.0.0]``                    ``Version("1.0.0")``
``m-help-[<text>]``                      ``Help(text)``
``m-res-1``                              ``Res(1)``
``m-timer-enabled`` / ``-disabled``      ``Timer(True)`` / ``Timer(False)``
``m-tm-0``                               ``Tm(0)``
``m-lap-us-<n>``                         ``LapUs(n)`` (a timer capture)
``m-ready``                              ``Ready()``
``e-[<text>]``                           ``Error(text)``
any other ``m-`` line                    ``Message(text after "m-")``
anything else                            ``Unparsed(line)``
=======================================  ===============================
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

from protocols.errors import ProtocolError

#: Baud rates: host <-> IO manager (USB serial), IO manager <-> DUT (the DUT's UART).
HOST_BAUD = 115200
DUT_BAUD = 9600
#: The IO manager's command buffer, its ``%`` included: a longer command is refused whole.
MAX_COMMAND = 80
#: What the IO manager adds in front of a DUT command in its own buffer.
PASSTHROUGH_PREFIX = "dut "
#: Longest DUT command (its ``%`` included) that fits behind ``dut `` in `MAX_COMMAND`.
MAX_PASSTHROUGH = MAX_COMMAND - len(PASSTHROUGH_PREFIX)
#: Bytes per ``db <hex>`` command behind an IO manager, as the MLPerf Tiny runner sends them:
#: ``dut db <52 hex digits>%`` is 60 bytes, which fits the UNO's 64-byte serial receive ring
#: even while the sketch is busy relaying the DUT, so no byte of it can be dropped.
HEX_PER_COMMAND = 26
#: How the IO manager marks a line it relays from the DUT.
DUT_PREFIX = "[dut]: "
#: Timer edge modes for ``tm``: capture falling edges only, or every change of the pin.
EDGE_FALL = 0
EDGE_CHANGE = 1
#: Longest line kept; a longer one becomes one `Unparsed` event (bounded memory on garbage).
MAX_LINE = 16384


# -- events -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class DutLine:
    """One line the DUT printed, relayed as ``[dut]: <text>``; `text` is without the prefix."""

    text: str


@dataclass(frozen=True)
class Passthrough:
    """``m-dut-passthrough(<command>)``: the IO manager forwarded `command` (without ``%``)."""

    command: str


@dataclass(frozen=True)
class Name:
    """``m-name-[<text>]``: the IO manager's name."""

    text: str


@dataclass(frozen=True)
class Version:
    """``m-version-[<x.y.z>]``: the IO manager's firmware version."""

    text: str


@dataclass(frozen=True)
class Help:
    """One ``m-help-[<text>]`` line of the reply to ``help``."""

    text: str


@dataclass(frozen=True)
class Res:
    """``m-res-<0|1>``: the level of the DUT's reset line that holds the DUT in reset."""

    level: int


@dataclass(frozen=True)
class Timer:
    """``m-timer-enabled`` / ``m-timer-disabled``."""

    enabled: bool


@dataclass(frozen=True)
class Tm:
    """``m-tm-<0|1>``: the timer's edge mode (`EDGE_FALL` or `EDGE_CHANGE`)."""

    mode: int


@dataclass(frozen=True)
class LapUs:
    """``m-lap-us-<n>``: the IO manager's timer captured an edge at its own µs clock `n`."""

    us: int


@dataclass(frozen=True)
class Ready:
    """``m-ready``: the IO manager finished one of its own commands (not a relayed one)."""


@dataclass(frozen=True)
class Error:
    """``e-[<text>]``: the IO manager refused a command; `text` is inside the brackets."""

    text: str


@dataclass(frozen=True)
class Message:
    """Any other ``m-`` line of the IO manager's own; `text` follows ``m-``."""

    text: str


@dataclass(frozen=True)
class Unparsed:
    """A line that is not a protocol line (noise, bootloader garbage, a debug print)."""

    text: str


IoEvent = (
    DutLine
    | Passthrough
    | Name
    | Version
    | Help
    | Res
    | Timer
    | Tm
    | LapUs
    | Ready
    | Error
    | Message
    | Unparsed
)

#: Every event class, e.g. for ``isinstance(x, EVENT_TYPES)``.
EVENT_TYPES: tuple[type, ...] = get_args(IoEvent)


# -- commands ---------------------------------------------------------------------------------
def _check_text(text: str, what: str) -> bytes:
    """`text` as ASCII bytes, refusing what cannot be one command on this framing."""
    if not isinstance(text, str) or not text:
        raise ProtocolError(f"empty {what}", hint="send a command such as 'name'")
    if any(c in text for c in "%\r\n"):
        raise ProtocolError(
            f"{what} {text!r} contains '%', CR or LF",
            hint="'%' ends a command on the wire; send one command at a time without line breaks",
        )
    try:
        return text.encode("ascii")
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"{what} {text!r} is not ASCII", hint="the protocol is ASCII") from exc


def encode_command(text: str) -> bytes:
    """The bytes that send `text` to the IO manager: ASCII text and ``%``, at most 80 bytes."""
    data = _check_text(text, "IO manager command") + b"%"
    if len(data) > MAX_COMMAND:
        raise ProtocolError(
            f"IO manager command of {len(data)} characters (with '%') exceeds its "
            f"{MAX_COMMAND}-character buffer: {text[:24]!r}...",
            hint="the IO manager refuses it whole; send shorter commands",
        )
    return data


def cmd_name() -> str:
    """``name``: the IO manager answers ``m-name-[<text>]``."""
    return "name"


def cmd_version() -> str:
    """``version``: the IO manager answers ``m-version-[<x.y.z>]``."""
    return "version"


def cmd_help() -> str:
    """``help``: one ``m-help-[...]`` line per command."""
    return "help"


def _bit(value: int, what: str) -> int:
    if isinstance(value, bool) or value not in (0, 1):
        raise ProtocolError(f"{what} must be 0 or 1, got {value!r}")
    return int(value)


def cmd_res(level: int) -> str:
    """``res <0|1>``: the level of the DUT reset line that holds the DUT in reset."""
    return f"res {_bit(level, 'reset polarity')}"


def cmd_enable_timer() -> str:
    """``enable-timer``: print ``m-lap-us-<n>`` for each captured timestamp edge."""
    return "enable-timer"


def cmd_disable_timer() -> str:
    """``disable-timer``: stop capturing timestamp edges."""
    return "disable-timer"


def cmd_tm(mode: int) -> str:
    """``tm <0|1>``: capture falling edges (`EDGE_FALL`) or every change (`EDGE_CHANGE`)."""
    return f"tm {_bit(mode, 'timer edge mode')}"


def cmd_dut(text: str) -> str:
    """``dut <text>``: pass the DUT command `text` (without ``%``) through to the DUT.

    Refused unless ``dut <text>%`` fits the IO manager's 80-character buffer, i.e. the DUT
    command with its ``%`` is at most `MAX_PASSTHROUGH` (76) characters.
    """
    data = _check_text(text, "DUT command")
    if len(data) + 1 > MAX_PASSTHROUGH:
        raise ProtocolError(
            f"DUT command of {len(data) + 1} characters (with '%') does not fit through the "
            f"IO manager: at most {MAX_PASSTHROUGH} fit behind {PASSTHROUGH_PREFIX!r} in its "
            f"{MAX_COMMAND}-character buffer: {text[:24]!r}...",
            hint=f"split it into shorter commands (db downloads: {HEX_PER_COMMAND} bytes per "
            "command behind an IO manager)",
        )
    return PASSTHROUGH_PREFIX + text


def dut_command_from_wire(data: bytes) -> str:
    """The DUT command in `data`, the bytes a DUT client writes for one command (``<cmd>%``).

    Raises `ProtocolError` for anything that cannot pass through the IO manager: raw binary
    (a ``bload`` payload), several commands at once, or a command that does not fit.
    """
    data = bytes(data)
    if not data:
        raise ProtocolError("empty write to the DUT", hint="write one command ending in '%'")
    printable = all(0x20 <= b < 0x7F for b in data[:-1])
    if not data.endswith(b"%") or not printable:
        raise ProtocolError(
            f"{len(data)} bytes of binary data cannot pass through the IO manager: it relays "
            "only '%'-terminated ASCII commands",
            hint="behind an IO manager download with the hex 'db' commands (a client checks "
            "transport.binary_ok); connect the DUT directly for binary downloads",
        )
    text = data[:-1].decode("ascii")
    if "%" in text:
        raise ProtocolError(
            f"{text.count('%') + 1} DUT commands in one write: the IO manager passes one "
            "through at a time",
            hint="write one command and wait for its m-ready before the next",
        )
    cmd_dut(text)  # the length check
    return text


# -- replies ----------------------------------------------------------------------------------
#: (pattern on the whole line, event builder). First match wins; the generic ``m-`` and ``e-``
#: fallbacks come last.
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], IoEvent]]] = [
    (re.compile(r"m-ready"), lambda m: Ready()),
    (re.compile(r"m-dut-passthrough\((.*)\)"), lambda m: Passthrough(m.group(1))),
    (re.compile(r"m-name-\[(.*)\]"), lambda m: Name(m.group(1))),
    (re.compile(r"m-version-\[(.*)\]"), lambda m: Version(m.group(1))),
    (re.compile(r"m-help-\[(.*)\]"), lambda m: Help(m.group(1))),
    (re.compile(r"m-res-([01])"), lambda m: Res(int(m.group(1)))),
    (re.compile(r"m-timer-(enabled|disabled)"), lambda m: Timer(m.group(1) == "enabled")),
    (re.compile(r"m-tm-([01])"), lambda m: Tm(int(m.group(1)))),
    (re.compile(r"m-lap-us-(\d{1,10})"), lambda m: LapUs(int(m.group(1)))),
    (re.compile(r"e-\[(.*)\]"), lambda m: Error(m.group(1))),
    (re.compile(r"e-(.*)"), lambda m: Error(m.group(1))),
    (re.compile(r"m-(.*)"), lambda m: Message(m.group(1))),
]
_DUT_MARK = DUT_PREFIX.rstrip()


def parse_line(line: str) -> IoEvent | None:
    """The event for one line (without its line ending); None for a blank relayed line."""
    if line.startswith(_DUT_MARK):
        text = line[len(_DUT_MARK) :].strip()
        return DutLine(text) if text else None
    for pattern, build in _RULES:
        m = pattern.fullmatch(line)
        if m is not None:
            return build(m)
    return Unparsed(line)


class IoManagerDecoder:
    """Turns the bytes an IO manager sends into events, one per line; keeps partial lines.

    Lines end in ``\\r\\n`` (a bare ``\\n`` is accepted). NUL bytes are dropped, invalid UTF-8
    is replaced, blank lines give no event, and a line longer than `MAX_LINE` bytes gives one
    `Unparsed` event while the rest of it is skipped.
    """

    def __init__(self) -> None:
        self._partial = bytearray()
        #: True while skipping the rest of an overlong line up to its newline.
        self._skipping = False

    def feed(self, data: bytes) -> list[IoEvent]:
        """Events for every line completed by `data`."""
        events: list[IoEvent] = []
        data = bytes(data).replace(b"\x00", b"")
        start = 0
        while start < len(data):
            nl = data.find(b"\n", start)
            if nl < 0:
                if not self._skipping:
                    self._partial += data[start:]
                    if len(self._partial) > MAX_LINE:
                        events.append(_overlong(self._partial))
                        self._partial.clear()
                        self._skipping = True
                break
            piece, start = data[start:nl], nl + 1
            if self._skipping:
                self._skipping = False
                continue
            self._partial += piece
            raw = bytes(self._partial)
            self._partial.clear()
            if len(raw) > MAX_LINE:
                events.append(_overlong(raw))
                continue
            line = raw.decode("utf-8", errors="replace").strip()
            event = parse_line(line) if line else None
            if event is not None:
                events.append(event)
        return events

    def reset(self) -> None:
        """Forget any partial line (after a resynchronisation)."""
        self._partial.clear()
        self._skipping = False


def _overlong(raw: bytes | bytearray) -> Unparsed:
    head = bytes(raw[:80]).decode("utf-8", errors="replace")
    return Unparsed(f"{head}... (line longer than {MAX_LINE} bytes, rest dropped)")
