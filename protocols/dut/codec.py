"""Sans-IO codec for the MLPerf Tiny / EEMBC DUT protocol (see SPEC.md next to this file).

Commands are ASCII text ending in ``%``; replies are ``\\r\\n`` lines, ``m-`` for messages and
``e-`` for errors, and every command ends with ``m-ready``. `encode_command` and the ``cmd_*``
helpers build commands; `DutDecoder` turns received bytes into typed events and never raises,
whatever arrives on the line. Reply kinds are recognised by the table `_RULES`, so protocol
extensions add rows there instead of branches.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from protocols.errors import ProtocolError

#: Size of the DUT's command buffer. Real firmware silently truncates longer input, so a command
#: that does not fit (its `%` included) is never sent.
MAX_COMMAND = 80
#: The reference runner's bytes per ``db`` command (26 when behind an IO manager).
DEFAULT_HEX_PER_COMMAND = 31
#: Most bytes one ``db <hex>%`` command can carry within `MAX_COMMAND`.
MAX_HEX_PER_COMMAND = (MAX_COMMAND - len("db %")) // 2
#: Longest reply line kept; longer lines become one `Unparsed` event (bounded memory on garbage).
MAX_LINE = 16384

TimestampModeName = Literal["energy", "performance"]
TIMESTAMP_MODES: tuple[str, ...] = ("energy", "performance")


# -- events -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TimestampMode:
    """Boot banner, first line: the timestamp mode the firmware was built for."""

    mode: TimestampModeName


@dataclass(frozen=True)
class InitDone:
    """Boot banner, second line: ``m-init-done``."""


@dataclass(frozen=True)
class Ready:
    """``m-ready``: the last line of the boot banner and of every command's reply."""


@dataclass(frozen=True)
class Name:
    """``m-name-<dut>-[<vendor>]``."""

    name: str
    vendor: str


@dataclass(frozen=True)
class Profile:
    """``m-profile-[<firmware version>]``."""

    text: str


@dataclass(frozen=True)
class Model:
    """``m-model-[<model id>]`` (kws01, vww01, ad01, ic01, ...)."""

    model_id: str


@dataclass(frozen=True)
class ExpectingBytes:
    """``m-[Expecting N bytes]``: the reply to ``db load N``."""

    n: int


@dataclass(frozen=True)
class LoadDone:
    """``m-load-done``: the announced number of bytes has arrived."""


@dataclass(frozen=True)
class BufferDump:
    """One ``m-buffer-...`` line of ``db print``: the bytes it lists."""

    data: bytes


@dataclass(frozen=True)
class WarmupStart:
    """``m-warmup-start-W``."""

    n: int


@dataclass(frozen=True)
class WarmupDone:
    """``m-warmup-done``."""


@dataclass(frozen=True)
class InferStart:
    """``m-infer-start-N``."""

    n: int


@dataclass(frozen=True)
class InferDone:
    """``m-infer-done``."""


@dataclass(frozen=True)
class LapUs:
    """``m-lap-us-<n>``: the DUT's 32-bit microsecond counter (performance mode)."""

    us: int


@dataclass(frozen=True)
class Results:
    """``m-results-[a,b,...]``: the class scores of the last inference."""

    values: tuple[float, ...]


@dataclass(frozen=True)
class DutErrorLine:
    """``e-[<text>]``: the DUT refused the command; `text` is what is inside the brackets."""

    text: str


@dataclass(frozen=True)
class Message:
    """Any other ``m-`` line; `text` is what follows ``m-``."""

    text: str


@dataclass(frozen=True)
class Unparsed:
    """A line that is not a protocol line at all (noise, a debug print, garbage)."""

    text: str


DutEvent = (
    TimestampMode
    | InitDone
    | Ready
    | Name
    | Profile
    | Model
    | ExpectingBytes
    | LoadDone
    | BufferDump
    | WarmupStart
    | WarmupDone
    | InferStart
    | InferDone
    | LapUs
    | Results
    | DutErrorLine
    | Message
    | Unparsed
)

#: Every event class, e.g. for ``isinstance(x, EVENT_TYPES)``.
EVENT_TYPES: tuple[type, ...] = get_args(DutEvent)


# -- commands ---------------------------------------------------------------------------------
def encode_command(text: str) -> bytes:
    """The bytes that send `text` as one command: ASCII text followed by ``%``."""
    if not text:
        raise ProtocolError("empty DUT command", hint="send a command such as 'name'")
    if any(c in text for c in "%\r\n"):
        raise ProtocolError(
            f"DUT command {text!r} contains '%', CR or LF",
            hint="'%' ends a command on the wire; send one command at a time without line breaks",
        )
    try:
        data = text.encode("ascii") + b"%"
    except UnicodeEncodeError as exc:
        raise ProtocolError(
            f"DUT command {text!r} is not ASCII", hint="the DUT protocol is plain ASCII"
        ) from exc
    if len(data) > MAX_COMMAND:
        raise ProtocolError(
            f"DUT command of {len(data)} characters (with '%') exceeds the DUT's "
            f"{MAX_COMMAND}-character buffer: {text[:24]!r}...",
            hint="the firmware would silently truncate it; split the data into smaller commands",
        )
    return data


def cmd_name() -> str:
    """``name``: the DUT answers with its name and vendor."""
    return "name"


def cmd_profile() -> str:
    """``profile``: the DUT answers with its firmware version and model id."""
    return "profile"


def cmd_db_load(n: int) -> str:
    """``db load N``: get ready to receive `n` bytes into the input buffer."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ProtocolError(
            f"cannot announce a download of {n!r} bytes", hint="load at least one byte"
        )
    return f"db load {n}"


def cmd_db_hex(data: bytes) -> str:
    """``db <hex>``: append `data` (lowercase hex pairs) to the input buffer."""
    if not data:
        raise ProtocolError("a db command needs at least one byte", hint="skip empty chunks")
    if len(data) > MAX_HEX_PER_COMMAND:
        raise ProtocolError(
            f"{len(data)} bytes do not fit in one db command (at most {MAX_HEX_PER_COMMAND})",
            hint=f"split the data with hex_chunks(data, per_command<={MAX_HEX_PER_COMMAND})",
        )
    return "db " + bytes(data).hex()


def cmd_db_print() -> str:
    """``db print``: the DUT dumps the bytes it has received since ``db load``."""
    return "db print"


def cmd_infer(n: int, warmup: int) -> str:
    """``infer N W``: `warmup` untimed inferences, then `n` timed ones."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ProtocolError(f"inference iterations must be > 0, got {n!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ProtocolError(f"inference warmup must be >= 0, got {warmup!r}")
    return f"infer {n} {warmup}"


def cmd_results() -> str:
    """``results``: re-print the result vector of the last inference."""
    return "results"


def cmd_timestamp() -> str:
    """``timestamp``: emit one timestamp (a lap line or a GPIO pulse)."""
    return "timestamp"


def hex_chunks(data: bytes, per_command: int = DEFAULT_HEX_PER_COMMAND) -> list[str]:
    """The ``db <hex>`` commands that download `data`, `per_command` bytes each."""
    if (
        isinstance(per_command, bool)
        or not isinstance(per_command, int)
        or not (1 <= per_command <= MAX_HEX_PER_COMMAND)
    ):
        raise ProtocolError(
            f"per_command={per_command!r} bytes per db command is out of range",
            hint=f"use 1..{MAX_HEX_PER_COMMAND} (31 is the reference, 26 behind an IO manager)",
        )
    data = bytes(data)
    return [cmd_db_hex(data[i : i + per_command]) for i in range(0, len(data), per_command)]


# -- replies ----------------------------------------------------------------------------------
_HEX_RUN = re.compile(r"(?:0x)?((?:[0-9a-fA-F]{2})+)")


def _buffer_dump(m: re.Match[str]) -> DutEvent:
    # Accept bytes separated by '-', ',' or spaces, or run together, with or without 0x:
    # ports print the buffer differently.
    data = bytearray()
    for token in re.split(r"[-,\s]+", m.group(1)):
        if not token:
            continue
        hit = _HEX_RUN.fullmatch(token)
        if hit is None:
            return Message(m.group(0)[2:])
        data += bytes.fromhex(hit.group(1))
    return BufferDump(bytes(data))


def _results(m: re.Match[str]) -> DutEvent:
    body = m.group(1).strip()
    if not body:
        return Results(())
    try:
        return Results(tuple(float(v) for v in body.split(",")))
    except ValueError:
        return Message(m.group(0)[2:])


#: (pattern on the whole line, event builder). First match wins; order matters where patterns
#: overlap (``m-[Expecting ...]`` before the generic ``m-`` fallback).
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], DutEvent]]] = [
    (re.compile(r"m-ready"), lambda m: Ready()),
    (re.compile(r"m-timestamp-mode-(energy|performance)"), lambda m: TimestampMode(m.group(1))),
    (re.compile(r"m-init-done"), lambda m: InitDone()),
    (re.compile(r"m-name-(.*?)-\[(.*)\]"), lambda m: Name(m.group(1), m.group(2))),
    (re.compile(r"m-profile-\[(.*)\]"), lambda m: Profile(m.group(1))),
    (re.compile(r"m-model-\[(.*)\]"), lambda m: Model(m.group(1))),
    (re.compile(r"m-\[Expecting (\d+) bytes\]"), lambda m: ExpectingBytes(int(m.group(1)))),
    (re.compile(r"m-load-done"), lambda m: LoadDone()),
    (re.compile(r"m-buffer-(.*)"), _buffer_dump),
    (re.compile(r"m-warmup-start-(\d+)"), lambda m: WarmupStart(int(m.group(1)))),
    (re.compile(r"m-warmup-done"), lambda m: WarmupDone()),
    (re.compile(r"m-infer-start-(\d+)"), lambda m: InferStart(int(m.group(1)))),
    (re.compile(r"m-infer-done"), lambda m: InferDone()),
    (re.compile(r"m-lap-us-(\d+)"), lambda m: LapUs(int(m.group(1)))),
    (re.compile(r"m-results-\[(.*)\]"), _results),
    (re.compile(r"e-\[(.*)\]"), lambda m: DutErrorLine(m.group(1))),
    (re.compile(r"e-(.*)"), lambda m: DutErrorLine(m.group(1))),
    (re.compile(r"m-(.*)"), lambda m: Message(m.group(1))),
]


def parse_line(line: str) -> DutEvent:
    """The event for one reply line (without its line ending)."""
    for pattern, build in _RULES:
        m = pattern.fullmatch(line)
        if m is not None:
            return build(m)
    return Unparsed(line)


class DutDecoder:
    """Turns the bytes a DUT sends into events, one per line; keeps partial lines between feeds.

    Lines end in ``\\r\\n`` (a bare ``\\n`` is accepted). NUL bytes, which some UARTs produce
    around a reset, are dropped; invalid UTF-8 is replaced; blank lines give no event. A line
    longer than `MAX_LINE` bytes gives one `Unparsed` event and the rest of it is skipped.
    """

    def __init__(self) -> None:
        self._partial = bytearray()
        #: True while skipping the rest of an overlong line up to its newline.
        self._skipping = False

    def feed(self, data: bytes) -> list[DutEvent]:
        """Events for every line completed by `data`."""
        events: list[DutEvent] = []
        data = bytes(data).replace(b"\x00", b"")
        while data:
            nl = data.find(b"\n")
            if nl < 0:
                if not self._skipping:
                    self._partial += data
                    if len(self._partial) > MAX_LINE:
                        events.append(_overlong(self._partial))
                        self._partial.clear()
                        self._skipping = True
                break
            piece, data = data[:nl], data[nl + 1 :]
            if self._skipping:
                self._skipping = False
                continue
            self._partial += piece
            raw = bytes(self._partial)
            self._partial.clear()
            if len(raw) > MAX_LINE:
                events.append(_overlong(raw))
                continue
            # Stray spaces and CRs around a line carry no meaning on this protocol.
            line = raw.decode("utf-8", errors="replace").strip()
            if line:
                events.append(parse_line(line))
        return events

    def reset(self) -> None:
        """Forget any partial line (after a resynchronisation)."""
        self._partial.clear()
        self._skipping = False


def _overlong(raw: bytes | bytearray) -> Unparsed:
    head = bytes(raw[:80]).decode("utf-8", errors="replace")
    return Unparsed(f"{head}... (line longer than {MAX_LINE} bytes, rest dropped)")
