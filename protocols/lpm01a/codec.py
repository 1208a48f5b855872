"""Sans-IO codec for the ST LPM01A ("PowerShield") ASCII protocol.

Host -> board: one ASCII command per line ending ``\\r\\n`` (`encode`), as every public host
does (mlcommons/tiny ``benchmark/runner/serial_device.py`` ``write_line`` with the ``"\\r\\n"``
delimiter ``power_manager.py`` gives it; Zephyr ``scripts/pm/power_monitor_stm32l562e_dk/
SerialHandler.py`` ``send_cmd``). Numbers carry a unit suffix (``u``, ``m``, ``k``) or a
power-of-ten suffix (``2m`` == ``2-3``), see `parse_number`.

Board -> host: lines ending ``\\r\\n`` (a bare ``\\n`` is accepted too), possibly laced with stray
NUL bytes, which are dropped. `Lpm01aDecoder.feed` turns them into typed events:

=====================================================  ==========================================
line                                                   event
=====================================================  ==========================================
``PowerShield > ack volt 1800m``                       ``Ack(command="volt", rest="1800m")``
``PowerShield > error <text>``                         ``ErrorReply(text)``
``PowerShield > Error detail: <text>``                 ``ErrorDetail(text)``
``PowerShield > Acquisition completed``                ``AcquisitionCompleted()``
``PowerShield > <anything else>``                      ``Text(line=<anything else>)``
``6409-07`` (``DDDD±EE``, ascii_dec data)              ``Samples`` (consecutive lines, in bulk)
``event 3 ris``                                        ``EdgeEvent(sample_index, 3, "ris")``
``TimeStamp:>001s 000ms, buff 00%``                    ``TimeStamp(1.0, 0, sample_index)``
anything else                                          ``Garbled(raw)``
=====================================================  ==========================================

``TimeStamp`` lines: the MLPerf Tiny runner reads them with ``^TimeStamp:[ ><]([0-9]{3})s
([0-9]{3})ms, buff [0-9]{2}%$`` (mlcommons/tiny ``benchmark/runner/script.py``,
``_gather_power_results``): a space, ``>`` or ``<`` after the colon, 3-digit seconds and
milliseconds. All three are accepted, and so are other digit counts and spacing. What ``>`` and
``<`` mean is unconfirmed without hardware; the decoder does not use the mark.

``event`` and ``TimeStamp`` lines are recognised with or without the prompt; data lines only
without it. An ``error`` line that arrives while data flows, with no command sent, is the board
reporting samples it lost (its buffer overflowed): ``error acquisition overrun`` and
``Error detail: N samples lost (buffer overflow)`` right where the samples are missing
(`encode_overrun`, `is_overrun`, `lost_samples`). OUR READING, TO CONFIRM ON HARDWARE: the facts
we have give the error format, not these words.

Queries that return a value answer on their ack line (`Ack.value`):

- ``volt get``: Zephyr's host reads the 6th word of the reply, ``parts[5]`` of
  ``PowerShield > ack volt get 3292-03`` (``PowerShield.py``, ``__get_voltage_level``, which
  expects the ``DDDD-EE`` form; ``3300m`` is accepted too, `parse_number` reads both).
- ``temp degc``: ``PowerShield > ack temp degc 28.0`` (the same file, ``__get_temperature``).
- ``version``, ``status``, ``powershield``: the MLPerf Tiny runner takes them from the ack line
  (``power_manager.py``, ``_send_command`` stops reading at the ack) and its log of a run on a
  real board (``benchmark/runner/sessions/20250612_122741/log.txt``) shows ``Version: 1.0.7``,
  ``Status: ok`` and a board id, with no further line dropped after these acks. The exact words
  of those ack lines are unconfirmed without hardware.

A board that answers with the ack alone and the value on the next prompt line (``PowerShield >
3300m``, decoded as `Text`) is accepted too by the driver.

A data line ``DDDD±EE`` is the 4-digit mantissa times ten to the signed 2-digit exponent:
amperes with ``output current``, joules per sample period with ``output energy``.

bin_hexa (``format bin_hexa``, needed above 5 kHz)
--------------------------------------------------
Between the ``ack start`` line and the end of the acquisition the board streams binary: 16-bit
big-endian data words, ``I = (w & 0x0FFF) * 16**-(w >> 12)`` (``0x52A0`` -> 640.87 µA), one per
sample. A word whose first byte has the high nibble ``F`` is never data: a metadata frame starts
there, ``0xF0 <type> <payload> 0xFF 0xFF``. The types, as Zephyr's PowerShield host reads them
(``scripts/pm/power_monitor_stm32l562e_dk/PowerShield.py``, ``__handle_metadata``):

=========  ==========================================  =====================================
type       payload                                     event
=========  ==========================================  =====================================
``0xF1``   ASCII error message                         ``BoardError(text)``
``0xF2``   ASCII information message                   ``BoardInfo(text)``
``0xF3``   u32 BE elapsed ms, u8 buffer load %         ``TimeStamp(ms / 1000, pct, index)``
``0xF4``   none (``F0 F4 FF FF``); ASCII text follows  ``AcquisitionEnd()``; text mode again
``0xF5``   (Zephyr reads none)                         ``Overcurrent(payload)``
other      anything up to the first ``FF FF``          ``MetaFrame(type, payload)``, skipped
=========  ==========================================  =====================================

Zephyr's host logs the 0xF1/0xF2 texts without reading them, so their length is taken up to the
``FF FF`` end tag (ASCII text never holds 0xFF); an 0xF5 payload, if any, likewise. Both are
unconfirmed without hardware. After 0xF4 Zephyr reads the rest as ASCII (a summary), so the
decoder goes back to text there.

How D7 events (``eventsrc d7 fal``) arrive in bin_hexa is NOT PUBLIC: no reference decodes them.
The decoder gives no `EdgeEvent` in binary mode, and the driver refuses ASC energy windows above
the ascii_dec rate limit (`ASCII_DEC_MAX_HZ_UNLIMITED`).

Replies keep coming as text while binary flows (``PowerShield > ack stop``, errors, then
``PowerShield > Acquisition completed``): in binary mode the decoder looks for the prompt
``PowerShield >`` (NULs tolerated between its characters) at any byte offset, decodes that line
as text and resumes binary after its ``\\n``; ``Acquisition completed`` or an 0xF4 frame ends
binary mode. The decoder follows ``ack format bin_hexa`` / ``ack format ascii_dec`` by itself.
Resynchronisation: a byte with high nibble ``F`` other than ``0xF0`` at a word boundary, or a
frame without its terminator is reported as `Garbled` and skipped (one byte, which realigns the
word boundary after a lost byte; a fixed-size frame with a bad terminator: its whole length);
so is an odd byte before a prompt. Limits: a NUL pair between a reply and the next data word
decodes as a 0 A sample, and data that happens to spell the 13-byte prompt would be taken for a
reply (both unseen in the simulator; confirm on hardware).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from protocols.errors import ProtocolError

#: What the board puts in front of every reply line.
PROMPT = "PowerShield >"
#: The supply range the board can deliver, in millivolts.
VOLT_MIN_MV = 1800
VOLT_MAX_MV = 3300
#: Sample rates the board accepts, with the token it takes for each.
FREQ_TOKENS: dict[int, str] = {
    100_000: "100k",
    50_000: "50k",
    20_000: "20k",
    10_000: "10k",
    5_000: "5k",
    2_000: "2k",
    1_000: "1k",
    500: "500",
    200: "200",
    100: "100",
    50: "50",
    20: "20",
    10: "10",
    5: "5",
    2: "2",
    1: "1",
}
#: ascii_dec cannot keep up beyond this rate in an unlimited acquisition (acqtime 0 / inf).
ASCII_DEC_MAX_HZ_UNLIMITED = 5_000
#: ... and beyond this one at all (and then only for acquisitions of at most 1 s).
ASCII_DEC_MAX_HZ_SHORT = 10_000
#: A line longer than this is not protocol; it is reported (truncated) as `Garbled`.
MAX_LINE = 1024
#: bin_hexa metadata frames: start byte, types and end tag as Zephyr's PowerShield host reads
#: them (zephyr ``scripts/pm/power_monitor_stm32l562e_dk/PowerShield.py``, ``__acq_data`` and
#: ``__handle_metadata``).
FRAME_START = 0xF0
FRAME_ERROR = 0xF1  # ASCII error message
FRAME_INFO = 0xF2  # ASCII information message
FRAME_TIMESTAMP = 0xF3  # u32 BE ms, u8 buffer load %, FF FF
FRAME_ACQ_END = 0xF4  # end of acquisition: FF FF right after the type
FRAME_OVERCURRENT = 0xF5
FRAME_END = b"\xff\xff"
#: An unknown (or 0xF5) frame whose ``FF FF`` does not come within this many bytes is garbage.
MAX_FRAME = 64
#: ... and a text frame (0xF1, 0xF2) whose ``FF FF`` does not come within this many.
MAX_TEXT_FRAME = 256
#: What the board says when its buffer overflowed mid-acquisition (our reading, see above).
OVERRUN_ERROR = "acquisition overrun"
_OVERRUN_RE = re.compile(r"\b(?:overrun|overflow)\b", re.IGNORECASE)
_LOST_RE = re.compile(r"(\d+)\s+samples?\s+lost", re.IGNORECASE)
#: Largest relative error of bin_hexa's 12-bit mantissa as `encode_bin_hexa` uses it
#: (the mantissa is kept >= 256 unless the value is below 256 * 16**-14 A).
BIN_HEXA_RTOL = 0.5 / 255.9375

_SAMPLE_LEN = 7  # DDDD±EE
_UNIT_EXPONENT = {"u": -6, "m": -3, "k": 3}
_NUMBER_RE = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:([umk])|([+-][0-9]{1,3}))?$")


# -- host -> board -------------------------------------------------------------------------------
def encode(command: str) -> bytes:
    """The bytes that send `command` (ASCII, one line, ``\\r\\n`` appended as every public host
    does: see the module docstring)."""
    if "\n" in command or "\r" in command:
        raise ProtocolError(
            f"LPM01A command {command!r} contains a line break",
            hint="send one command per call",
        )
    try:
        return command.encode("ascii") + b"\r\n"
    except UnicodeEncodeError as exc:
        raise ProtocolError(f"LPM01A command {command!r} is not plain ASCII") from exc


def format_millivolts(volts: float) -> str:
    """A supply voltage as the board writes it: 1.8 -> ``"1800m"`` (rounded to 1 mV)."""
    if not math.isfinite(volts * 1000) or volts < 0:  # 1e306 V is finite, its mV are not
        raise ProtocolError(f"LPM01A: {volts!r} is not a supply voltage")
    return f"{round(volts * 1000)}m"


def freq_token(hz: float) -> str:
    """The board's token for a sample rate: 1000 -> ``"1k"``; only the rates the board knows."""
    token = FREQ_TOKENS.get(int(hz)) if math.isfinite(hz) and hz == int(hz) else None
    if token is None:
        allowed = ", ".join(f"{f:g}" for f in sorted(FREQ_TOKENS))
        raise ProtocolError(
            f"LPM01A cannot sample at {hz:g} Hz",
            hint=f"choose one of {allowed} Hz",
        )
    return token


def parse_number(text: str) -> float:
    """A board number: ``"2m"`` -> 0.002, ``"2-3"`` -> 0.002, ``"5k"`` -> 5000, ``"inf"``."""
    s = text.strip()
    if s.lower() == "inf":
        return math.inf
    m = _NUMBER_RE.match(s)
    if m is None:
        raise ProtocolError(
            f"LPM01A: {text!r} is not a number",
            hint="write digits with an optional u/m/k or power-of-ten suffix, e.g. 2m or 2-3",
        )
    mantissa, unit, power = m.groups()
    exponent = _UNIT_EXPONENT[unit] if unit else int(power) if power else 0
    # Going through float's own parser keeps the result correctly rounded (2m == 0.002 exactly).
    return float(f"{mantissa}e{exponent}")


def parse_sample(text: str) -> float:
    """One ascii_dec data value: ``"6409-07"`` -> 6.409e-4 (same arithmetic as the decoder)."""
    raw = text.strip().encode("ascii", "replace")
    if len(raw) == _SAMPLE_LEN:
        rows = np.frombuffer(raw, dtype=np.uint8).reshape(1, _SAMPLE_LEN)
        ok, values = _decode_sample_rows(rows)
        if ok[0]:
            return float(values[0])
    raise ProtocolError(f"LPM01A: {text!r} is not a DDDD±EE data value")


def format_samples(values: np.ndarray) -> bytes:
    """ascii_dec data lines (``DDDD±EE\\r\\n`` each) for `values`, built without a Python loop.

    Values are rounded to a 4-digit mantissa; zero, negative and non-finite values give
    ``0000+00``. Used by the simulator (it is the board's side of the protocol).
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = np.where(np.isfinite(v) & (v > 0), v, 0.0)
    positive = v > 0
    safe = np.where(positive, v, 1.0)
    exp = np.floor(np.log10(safe)).astype(np.int64) - 3
    mant = np.rint(_times_pow10(safe, -exp)).astype(np.int64)
    # log10 can land one decade off near powers of ten, and rounding can carry to 10000:
    # renormalise the mantissa into 1000..9999.
    exp = exp + (mant >= 10_000) - (mant < 1000)
    mant = np.rint(_times_pow10(safe, -exp)).astype(np.int64)
    exp = np.clip(exp, -99, 99)
    mant = np.clip(mant, 0, 9999)
    mant[~positive] = 0
    exp[~positive] = 0
    out = np.empty((v.size, _SAMPLE_LEN + 2), dtype=np.uint8)
    out[:, 0] = mant // 1000 + 48
    out[:, 1] = mant // 100 % 10 + 48
    out[:, 2] = mant // 10 % 10 + 48
    out[:, 3] = mant % 10 + 48
    out[:, 4] = np.where(exp < 0, ord("-"), ord("+"))
    aexp = np.abs(exp)
    out[:, 5] = aexp // 10 + 48
    out[:, 6] = aexp % 10 + 48
    out[:, 7] = 13
    out[:, 8] = 10
    return out.tobytes()


def decode_bin_hexa(words: bytes) -> np.ndarray:
    """bin_hexa data words (16-bit big-endian) to amperes: ``I = (w & 0xFFF) * 16**-(w >> 12)``.

    Only the data words: metadata frames (``0xF0`` ... ``0xFF 0xFF``) must be cut out first.
    """
    if len(words) % 2:
        raise ProtocolError(f"LPM01A bin_hexa data has an odd length ({len(words)} bytes)")
    w = np.frombuffer(words, dtype=">u2").astype(np.int64)
    return (w & 0x0FFF) * np.float64(16.0) ** -(w >> 12).astype(np.float64)


def encode_bin_hexa(values: np.ndarray) -> bytes:
    """bin_hexa data words for `values` [A] (board side, used by the simulator), vectorised.

    Picks the largest exponent 0..14 that keeps the mantissa <= 4095, so the mantissa is
    >= 256 and the relative error at most `BIN_HEXA_RTOL`. Zero, negative and non-finite
    values give ``0x0000``; values above 4095 A saturate at ``0x0FFF``.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = np.where(np.isfinite(v) & (v > 0), v, 0.0)
    safe = np.where(v > 0, v, 1.0)
    exp = np.clip(np.floor(np.log(4095.0 / safe) / np.log(16.0)), 0, 14).astype(np.int64)
    # log can land one step off at the boundaries: renormalise (powers of 16 are exact).
    exp += (safe * np.float64(16.0) ** (exp + 1) <= 4095.0) & (exp < 14)
    exp -= (safe * np.float64(16.0) ** exp > 4095.0) & (exp > 0)
    mant = np.clip(np.rint(safe * np.float64(16.0) ** exp), 0, 4095).astype(np.int64)
    words = np.where(v > 0, (exp << 12) | mant, 0)
    return words.astype(">u2").tobytes()


def encode_timestamp_frame(elapsed_ms: int, buffer_pct: int) -> bytes:
    """The bin_hexa status frame: elapsed acquisition time [ms] and buffer fill [%]."""
    return (
        bytes([FRAME_START, FRAME_TIMESTAMP])
        + (elapsed_ms & 0xFFFFFFFF).to_bytes(4, "big")
        + bytes([max(0, min(255, buffer_pct))])
        + FRAME_END
    )


def encode_text_frame(kind: int, text: str) -> bytes:
    """An 0xF1 (error) or 0xF2 (info) frame carrying `text` (board side, used by the simulator)."""
    if kind not in (FRAME_ERROR, FRAME_INFO):
        raise ProtocolError(f"LPM01A: 0x{kind:02X} is not a text frame type",
                            hint="use FRAME_ERROR (0xF1) or FRAME_INFO (0xF2)")
    body = text.encode("ascii", "replace")[: MAX_TEXT_FRAME - 4]
    return bytes([FRAME_START, kind]) + body + FRAME_END


def encode_acquisition_end_frame() -> bytes:
    """The 0xF4 end-of-acquisition frame, ``F0 F4 FF FF`` (board side)."""
    return bytes([FRAME_START, FRAME_ACQ_END]) + FRAME_END


def encode_overcurrent_frame(payload: bytes = b"") -> bytes:
    """An 0xF5 overcurrent frame (board side); its payload is unconfirmed without hardware."""
    return bytes([FRAME_START, FRAME_OVERCURRENT]) + payload.replace(b"\xff", b"") + FRAME_END


def encode_overrun(lost: int) -> bytes:
    """The lines a board writes where it lost `lost` samples mid-acquisition (board side)."""
    return (f"{PROMPT} error {OVERRUN_ERROR}\r\n"
            f"{PROMPT} Error detail: {lost} samples lost (buffer overflow)\r\n").encode("ascii")


def is_overrun(text: str) -> bool:
    """Whether an `ErrorReply`'s text reports an acquisition overrun (lost samples)."""
    return _OVERRUN_RE.search(text) is not None


def lost_samples(text: str) -> int | None:
    """How many samples an overrun's `ErrorDetail` says were lost; None when it does not say."""
    m = _LOST_RE.search(text)
    return int(m.group(1)) if m else None


#: Total size of each fixed-size frame (start, type, payload, terminator).
_FRAME_SIZES = {FRAME_TIMESTAMP: 9, FRAME_ACQ_END: 4}
#: How far to look for the end tag of a variable-size frame, by type.
_FRAME_LIMITS = {FRAME_ERROR: MAX_TEXT_FRAME, FRAME_INFO: MAX_TEXT_FRAME}


# -- board -> host events ------------------------------------------------------------------------
@dataclass(frozen=True)
class Ack:
    """``ack <command> <rest>``: the board accepted `command` (first word of the echo)."""

    command: str
    rest: str = ""

    @property
    def echoed(self) -> str:
        """The whole echoed command line."""
        return f"{self.command} {self.rest}".strip()

    def value(self, cmd: str) -> str | None:
        """What the ack line holds after the echo of `cmd` (``ack volt get 3292-03`` ->
        ``"3292-03"``); None when this is not its ack or nothing follows the echo."""
        want = cmd.split()
        got = self.echoed.split()
        if [w.lower() for w in got[: len(want)]] != [w.lower() for w in want]:
            return None
        rest = " ".join(got[len(want) :])
        return rest or None


@dataclass(frozen=True)
class ErrorReply:
    """``error <text>``: the board refused the last command; an `ErrorDetail` follows."""

    text: str


@dataclass(frozen=True)
class ErrorDetail:
    """``Error detail: <text>``: why the board refused the last command."""

    text: str


@dataclass(frozen=True, eq=False)
class Samples:
    """Consecutive data values; `first_index` counts the samples decoded before this block."""

    values: np.ndarray
    first_index: int

    __hash__: ClassVar[None] = None  # type: ignore[assignment]  # unhashable, as eq dataclasses are

    def __len__(self) -> int:
        return len(self.values)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Samples):
            return NotImplemented
        return self.first_index == other.first_index and np.array_equal(self.values, other.values)


@dataclass(frozen=True)
class EdgeEvent:
    """``event N ris``: an edge on the D7 input before sample `sample_index`; `text` is its kind."""

    sample_index: int
    number: int
    text: str


@dataclass(frozen=True)
class TimeStamp:
    """``TimeStamp: 12s 345ms, buff 03%``: acquisition time so far, seen after `sample_index`
    samples; `buffer_pct` is how full the board's buffer is."""

    seconds: float
    buffer_pct: int
    sample_index: int


@dataclass(frozen=True)
class AcquisitionCompleted:
    """``Acquisition completed``: the acquisition ended (after ``stop`` or a finite acqtime)."""


@dataclass(frozen=True)
class Text:
    """Any other prompt line, e.g. the value a query returns."""

    line: str


@dataclass(frozen=True)
class Garbled:
    """A line that fits nothing (cut to `MAX_LINE` bytes)."""

    raw: bytes


@dataclass(frozen=True)
class BoardError:
    """An 0xF1 bin_hexa frame: an ASCII error message from the board."""

    text: str


@dataclass(frozen=True)
class BoardInfo:
    """An 0xF2 bin_hexa frame: an ASCII information message from the board."""

    text: str


@dataclass(frozen=True)
class AcquisitionEnd:
    """An 0xF4 bin_hexa frame: the end of the acquisition (ASCII text follows)."""


@dataclass(frozen=True)
class Overcurrent:
    """An 0xF5 bin_hexa frame: the board detected an overcurrent."""

    payload: bytes = b""


@dataclass(frozen=True)
class MetaFrame:
    """A well-formed bin_hexa metadata frame of a type the rig does not use (skipped)."""

    kind: int
    payload: bytes


Event = (
    Ack
    | ErrorReply
    | ErrorDetail
    | Samples
    | EdgeEvent
    | TimeStamp
    | AcquisitionCompleted
    | Text
    | Garbled
    | MetaFrame
    | BoardError
    | BoardInfo
    | AcquisitionEnd
    | Overcurrent
)

_ACK_RE = re.compile(r"^ack\b\s*(\S*)\s*(.*)$", re.IGNORECASE)
_DETAIL_RE = re.compile(r"^error\s+detail\s*:?\s*(.*)$", re.IGNORECASE)
_ERROR_RE = re.compile(r"^error\b\s*:?\s*(.*)$", re.IGNORECASE)
_COMPLETED_RE = re.compile(r"^acquisition\s+completed\b", re.IGNORECASE)
_EVENT_RE = re.compile(r"^event\s+(\d+)\s*(\S*)", re.IGNORECASE)
# ``TimeStamp:`` then a space, ``>`` or ``<`` (mlcommons/tiny script.py), seconds, ms, buffer %.
_TIMESTAMP_RE = re.compile(
    r"^timestamp\s*:\s*[<>]?\s*(\d+)\s*s\s*(\d+)\s*ms\s*,?\s*buff\s*(\d+)\s*%", re.IGNORECASE
)


def _nul_tolerant(text: bytes) -> bytes:
    """A regex for `text` with stray NULs allowed between its characters."""
    return b"\x00*".join(re.escape(bytes([c])) for c in text)


_PROMPT_B = PROMPT.encode("ascii")
_PROMPT_RE = re.compile(_nul_tolerant(_PROMPT_B))
# A reply that may switch the decoder's mode: ``ack format ...`` or ``ack start``.
_SWITCH_RE = re.compile(
    _PROMPT_RE.pattern + rb"[\x00 \t]*" + _nul_tolerant(b"ack") + rb"[\x00 \t]+(?:"
    + _nul_tolerant(b"format") + b"|" + _nul_tolerant(b"start") + rb")[^\n]*\n",
    re.IGNORECASE,
)


class Lpm01aDecoder:
    """Turns the board's byte stream into events. Keeps partial lines; never raises on input.

    `bin_hexa` says which format the board streams in; the decoder also follows the board's
    ``ack format ...`` replies by itself. With bin_hexa, data between ``ack start`` and
    ``Acquisition completed`` is decoded as binary (see the module docstring).
    """

    def __init__(self, *, bin_hexa: bool = False) -> None:
        self._partial = b""
        # After an over-long partial line was reported, drop bytes up to its end.
        self._skipping = False
        self._count = 0
        self._bin_format = bin_hexa
        self._binary = False  # inside a bin_hexa acquisition now

    @property
    def bin_hexa(self) -> bool:
        """True when acquisitions are decoded as bin_hexa."""
        return self._bin_format

    @property
    def in_binary(self) -> bool:
        """True between a bin_hexa ``ack start`` and ``Acquisition completed``."""
        return self._binary

    def set_format(self, name: str) -> None:
        """``"bin_hexa"`` or ``"ascii_dec"`` (as sent with the ``format`` command)."""
        if name not in ("bin_hexa", "ascii_dec"):
            raise ProtocolError(f"LPM01A: unknown data format {name!r}",
                                hint="use ascii_dec or bin_hexa")
        self._bin_format = name == "bin_hexa"

    @property
    def sample_count(self) -> int:
        """Samples decoded since the start or the last `reset_count`."""
        return self._count

    def reset_count(self) -> None:
        """Restart sample indices at 0 (a new acquisition)."""
        self._count = 0

    def reset(self) -> None:
        """Forget the stream: partial line, sample count, binary mode (the format is kept)."""
        self._partial = b""
        self._skipping = False
        self._count = 0
        self._binary = False

    def feed(self, data: bytes) -> list[Event]:
        """Decode `data`; returns the events of every line (and binary word) it completes."""
        events: list[Event] = []
        buf = self._partial + bytes(data)
        self._partial = b""
        while buf:
            buf = self._feed_binary(buf, events) if self._binary else self._feed_text(buf, events)
        return events

    # -- text mode ----------------------------------------------------------------------------
    def _feed_text(self, buf: bytes, events: list[Event]) -> bytes:
        """Decode text up to a reply that may switch to binary; returns what follows it."""
        m = _SWITCH_RE.search(buf)
        if m is None:
            self._text_block(buf, events)
            return b""
        first = len(events)
        self._text_block(buf[: m.end()], events)
        self._follow(events[first:])
        return buf[m.end() :]

    def _text_block(self, data: bytes, events: list[Event]) -> None:
        """Decode text lines (NULs dropped); an unfinished line is kept for the next feed."""
        data = data.replace(b"\x00", b"")
        if self._skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return
            data = data[nl + 1 :]
            self._skipping = False
        last_nl = data.rfind(b"\n")
        if last_nl < 0:
            self._partial = data
        else:
            self._partial = data[last_nl + 1 :]
            self._decode_lines(data[: last_nl + 1], events)
        if len(self._partial) > MAX_LINE + 1:
            # Cannot be protocol whatever follows: report it now, bounded memory.
            events.append(Garbled(self._partial[:MAX_LINE]))
            self._partial = b""
            self._skipping = True

    def _follow(self, events: list[Event]) -> None:
        """Track the board's mode from its replies."""
        for event in events:
            if isinstance(event, Ack):
                command = event.command.lower()
                word = event.rest.split()[0].lower() if event.rest.split() else ""
                if command == "format" and word in ("bin_hexa", "ascii_dec"):
                    self._bin_format = word == "bin_hexa"
                elif command == "start" and self._bin_format:
                    self._binary = True
            elif isinstance(event, AcquisitionCompleted):
                self._binary = False

    # -- binary mode --------------------------------------------------------------------------
    def _feed_binary(self, buf: bytes, events: list[Event]) -> bytes:
        """Decode words and frames, and the reply lines among them; returns the bytes after the
        end of the acquisition (text again), or b"" with the undecided tail kept."""
        while True:
            m = _PROMPT_RE.search(buf)
            if m is None:
                end = len(buf) - _prompt_prefix_len(buf)
                used = self._decode_words(buf, end, events, final=False)
                if not self._binary:  # an 0xF4 frame: text follows
                    return buf[used:]
                self._partial = buf[used:]
                return b""
            start = m.start()
            used = self._decode_words(buf, start, events, final=True)
            if not self._binary:
                return buf[used:]
            nl = buf.find(b"\n", start, start + MAX_LINE + 2)
            if nl < 0:
                if len(buf) - start <= MAX_LINE + 1:
                    self._partial = buf[start:]  # the rest of the reply is still to come
                    return b""
                # A prompt without a line end is not a reply: skip it, back to binary.
                events.append(Garbled(buf[start : start + MAX_LINE]))
                buf = buf[m.end() :]
                continue
            first = len(events)
            self._decode_lines(buf[start : nl + 1].replace(b"\x00", b""), events)
            self._follow(events[first:])
            buf = buf[nl + 1 :]
            if not self._binary:
                return buf

    def _decode_words(self, buf: bytes, end: int, events: list[Event], *, final: bool) -> int:
        """Decode data words and frames in buf[:end]; returns how many bytes were used.

        With `final`, bytes that cannot complete (a reply follows) are reported as garbage.
        Stops right after an 0xF4 frame (binary mode is over).
        """
        arr = np.frombuffer(buf, dtype=np.uint8, count=end)
        # Frames start at word boundaries whose first byte has the high nibble F. Word
        # boundaries shift after a frame of odd length, so candidates are kept per parity.
        marks = np.flatnonzero(arr >= 0xF0)
        by_parity = (marks[marks % 2 == 0], marks[marks % 2 == 1])
        p = 0
        while True:
            cands = by_parity[p % 2]
            k = int(np.searchsorted(cands, p))
            c = int(cands[k]) if k < cands.size else None
            stop = c if c is not None else end - (end - p) % 2
            if stop > p:
                self._emit_samples(decode_bin_hexa(buf[p:stop]), events)
                p = stop
            if c is None:
                break
            parsed = self._frame(buf, arr, c, end, final)
            if parsed is None:
                break  # an unfinished frame: wait for more bytes
            event, p = parsed
            events.append(event)
            if isinstance(event, AcquisitionEnd):
                self._binary = False
                return p
        if final and p < end:
            rest = buf[p:end]
            if rest.strip(b"\x00"):  # stray NULs before a reply are not worth a report
                events.append(Garbled(rest[:MAX_LINE]))
            p = end
        return p

    def _frame(
        self, buf: bytes, arr: np.ndarray, c: int, end: int, final: bool
    ) -> tuple[Event, int] | None:
        """The frame at `c` and the offset after it; None if it is not complete yet."""
        if arr[c] != FRAME_START:
            return Garbled(buf[c : c + 1]), c + 1  # skip one byte: realigns after a lost byte
        if c + 2 > end:
            return None
        kind = int(arr[c + 1])
        size = _FRAME_SIZES.get(kind)
        if size is not None:
            if c + size > end:
                return None
            if buf[c + size - 2 : c + size] == FRAME_END:
                return self._fixed_frame(kind, buf[c + 2 : c + size - 2]), c + size
            # Its length is known: skip just that, so the data after it is not swallowed.
            return Garbled(buf[c : c + size]), c + size
        limit = _FRAME_LIMITS.get(kind, MAX_FRAME)
        j = buf.find(FRAME_END, c + 2, min(end, c + limit))
        if j < 0:
            if end - c < limit and not final:
                return None
            return Garbled(buf[c : c + 2]), c + 1
        return self._variable_frame(kind, buf[c + 2 : j]), j + 2

    def _fixed_frame(self, kind: int, payload: bytes) -> Event:
        if kind == FRAME_ACQ_END:
            return AcquisitionEnd()
        ms = int.from_bytes(payload[:4], "big")
        return TimeStamp(ms / 1000, payload[4], self._count)

    @staticmethod
    def _variable_frame(kind: int, payload: bytes) -> Event:
        if kind in (FRAME_ERROR, FRAME_INFO):
            text = payload.replace(b"\x00", b"").decode("ascii", "replace").strip()
            return BoardError(text) if kind == FRAME_ERROR else BoardInfo(text)
        if kind == FRAME_OVERCURRENT:
            return Overcurrent(payload)
        return MetaFrame(kind, payload)

    def _decode_lines(self, block: bytes, events: list[Event]) -> None:
        """Decode `block`, a run of complete lines each ending in ``\\n``."""
        arr = np.frombuffer(block, dtype=np.uint8)
        ends = np.flatnonzero(arr == 10)
        starts = np.empty_like(ends)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        # A trailing CR belongs to the line ending, not to the line.
        has_cr = (ends > starts) & (arr[np.maximum(ends - 1, 0)] == 13)
        ends = ends - has_cr
        lengths = ends - starts

        is_sample = lengths == _SAMPLE_LEN
        cand = np.flatnonzero(is_sample)
        rows = arr[starts[cand, None] + np.arange(_SAMPLE_LEN)]
        ok, values = _decode_sample_rows(rows)
        is_sample[cand[~ok]] = False
        values = values[ok]

        others = np.flatnonzero(~is_sample & (lengths > 0))
        if others.size == 0:
            self._emit_samples(values, events)
            return
        # Samples before each non-sample line, within this block.
        before = np.cumsum(is_sample) - is_sample
        done = 0
        for i in others.tolist():
            n = int(before[i])
            if n > done:
                self._emit_samples(values[done:n], events)
                done = n
            events.append(self._classify(block[starts[i] : ends[i]]))
        if done < values.size:
            self._emit_samples(values[done:], events)

    def _emit_samples(self, values: np.ndarray, events: list[Event]) -> None:
        if values.size:
            events.append(Samples(values, self._count))
            self._count += int(values.size)

    def _classify(self, raw: bytes) -> Event:
        """One line that is not a data value."""
        if len(raw) > MAX_LINE:
            return Garbled(raw[:MAX_LINE])
        text = raw.decode("ascii", "replace").strip()
        # Junk in front of a prompt (e.g. the tail of binary data) is dropped: resynchronise.
        at = text.find(PROMPT)
        if at > 0:
            text = text[at:]
        prompted = text.startswith(PROMPT)
        if prompted:
            text = text[len(PROMPT) :].strip()
            if m := _ACK_RE.match(text):
                return Ack(m.group(1), m.group(2).strip())
            if m := _DETAIL_RE.match(text):
                return ErrorDetail(m.group(1).strip())
            if m := _ERROR_RE.match(text):
                return ErrorReply(m.group(1).strip())
        if _COMPLETED_RE.match(text):
            return AcquisitionCompleted()
        if m := _EVENT_RE.match(text):
            return EdgeEvent(self._count, int(m.group(1)), m.group(2))
        if m := _TIMESTAMP_RE.match(text):
            seconds = int(m.group(1)) + int(m.group(2)) / 1000
            return TimeStamp(seconds, int(m.group(3)), self._count)
        return Text(text) if prompted else Garbled(raw)


def _prompt_prefix_len(buf: bytes) -> int:
    """Length of the longest tail of `buf` that could be the start of a prompt (NULs allowed)."""
    tail = buf[-(2 * len(_PROMPT_B) + 8) :]
    at = tail.find(b"P")
    while at >= 0:
        text = tail[at:].replace(b"\x00", b"")
        if len(text) < len(_PROMPT_B) and _PROMPT_B.startswith(text):
            return len(tail) - at
        at = tail.find(b"P", at + 1)
    return 0


# -- vectorised helpers --------------------------------------------------------------------------
_DIGIT_COLS = np.array([0, 1, 2, 3, 5, 6])
_MANT_WEIGHTS = np.array([1000, 100, 10, 1], dtype=np.int64)


def _pow10(exp: np.ndarray) -> np.ndarray:
    return np.float64(10.0) ** exp.astype(np.float64)


def _times_pow10(values: np.ndarray, exp: np.ndarray) -> np.ndarray:
    """values * 10**exp, dividing by an exact power of ten for negative `exp` (exact to 1e22),
    so results round like Python's float("6409e-7")."""
    scale = _pow10(np.abs(exp))
    return np.where(exp < 0, values / scale, values * scale)


def _decode_sample_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of 7 ASCII bytes ``DDDD±EE`` -> (which rows are valid, their values)."""
    digits = rows[:, _DIGIT_COLS] - np.uint8(48)  # wraps below '0', so one compare suffices
    sign = rows[:, 4]
    ok = np.all(digits < 10, axis=1) & ((sign == ord("+")) | (sign == ord("-")))
    # Invalid rows are zeroed so their (discarded) values cannot overflow.
    d = np.where(ok[:, None], digits, 0).astype(np.int64)
    mant = (d[:, :4] @ _MANT_WEIGHTS).astype(np.float64)
    exp = d[:, 4] * 10 + d[:, 5]
    values = _times_pow10(mant, np.where(sign == ord("-"), -exp, exp))
    return ok, values
