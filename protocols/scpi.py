"""SCPI pieces that need no I/O: IEEE 488.2 binary blocks, error-queue replies, headers.

- Definite-length arbitrary block: ``#<n><len><payload>`` where ``<n>`` is one digit (1-9) giving
  how many digits ``<len>`` has, and ``<len>`` is the payload length in bytes. ``#0`` starts an
  indefinite-length block that runs to the message terminator (``\\n``). `BlockDecoder` takes a
  block split across any number of reads and says how many bytes it still needs, so a driver can
  ask its transport for exactly that many.
- Error queue: ``SYST:ERR?`` answers ``<code>,"<text>"``; code 0 means the queue is empty.
- Headers: a command header such as ``SENS:SWE:TINT`` matches a pattern written the way manuals
  write it, ``[SENSe]:SWEep:TINTerval`` (upper case = short form, ``[...]`` = optional node).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from protocols.errors import ProtocolError

#: Longest block a decoder accepts by default (a 2 M reading 34465A memory as float64 is 16 MB).
MAX_BLOCK_BYTES = 64 * 1024 * 1024


# -- binary blocks ---------------------------------------------------------------------------
def encode_block(payload: bytes) -> bytes:
    """``payload`` as a definite-length block (no terminator)."""
    size = str(len(payload)).encode("ascii")
    if len(size) > 9:
        raise ProtocolError(f"SCPI block of {len(payload)} bytes is too long to encode")
    return b"#" + str(len(size)).encode("ascii") + size + payload


class BlockDecoder:
    """Incremental decoder of one definite-length block (or ``#0`` block up to ``\\n``).

    Feed bytes as they come; `needed` says how many more bytes the block needs at least (exactly,
    once the header is known), `done` says when `payload` is complete, `rest` holds bytes fed past
    the end of the block (normally the ``\\n`` terminator).
    """

    def __init__(self, *, max_bytes: int = MAX_BLOCK_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._digits: int | None = None  # digits of the length field; 0 = indefinite
        self._length: int | None = None
        self._payload = bytearray()
        self.rest = b""
        self.done = False

    @property
    def needed(self) -> int:
        """Bytes still needed (a lower bound before the header is complete; 1 for ``#0``)."""
        if self.done:
            return 0
        if self._digits is None:
            return 2 - len(self._buf)
        if self._length is None:
            return self._digits - len(self._buf) if self._digits else 1
        return self._length - len(self._payload)

    @property
    def payload(self) -> bytes:
        """The payload; only valid once `done`."""
        if not self.done:
            raise ProtocolError("SCPI block is not complete yet")
        return bytes(self._payload)

    def feed(self, data: bytes) -> bool:
        """Take more bytes; True once the block is complete."""
        if self.done:
            self.rest += data
            return True
        self._buf += data
        if self._digits is None:
            if len(self._buf) < 2:
                return False
            if self._buf[0:1] != b"#":
                raise ProtocolError(
                    f"SCPI block must start with '#', got {bytes(self._buf[:16])!r}"
                )
            # bytes.isdigit is ASCII-only; str.isdigit would pass '²' (0xb2) on to int().
            digit = bytes(self._buf[1:2])
            if not digit.isdigit():
                raise ProtocolError(
                    f"SCPI block header: {bytes(self._buf[:2])!r} is not '#' and a digit count"
                )
            self._digits = int(digit)
            del self._buf[:2]
        if self._digits == 0:
            return self._feed_indefinite()
        if self._length is None:
            if len(self._buf) < self._digits:
                return False
            field = bytes(self._buf[: self._digits])
            if not field.isdigit():
                raise ProtocolError(f"SCPI block length field {field!r} is not a number")
            self._length = int(field)
            if self._length > self.max_bytes:
                raise ProtocolError(
                    f"SCPI block of {self._length} bytes is above the {self.max_bytes} byte limit"
                )
            del self._buf[: self._digits]
        take = self._length - len(self._payload)
        self._payload += self._buf[:take]
        if len(self._payload) == self._length:
            self.rest = bytes(self._buf[take:])
            self._buf.clear()
            self.done = True
        else:
            self._buf.clear()
        return self.done

    def _feed_indefinite(self) -> bool:
        end = self._buf.find(b"\n")
        if end < 0:
            if len(self._buf) > self.max_bytes:
                raise ProtocolError("SCPI '#0' block has no terminator within the size limit")
            return False
        self._payload = self._buf[:end]
        self.rest = bytes(self._buf[end:])
        self._buf = bytearray()
        self.done = True
        return True


def decode_block(data: bytes) -> tuple[bytes, bytes]:
    """One complete block at the start of ``data`` -> (payload, bytes after the block)."""
    decoder = BlockDecoder()
    if not decoder.feed(data):
        raise ProtocolError(
            f"SCPI block truncated: {decoder.needed} more byte(s) expected after {len(data)}"
        )
    return decoder.payload, decoder.rest


#: Instrument REAL formats: (bits) -> numpy dtype (byte order is added by the caller).
_REAL_DTYPES = {32: "f4", 64: "f8"}


def real_dtype(bits: int, *, big_endian: bool = True) -> np.dtype:
    """The numpy dtype of ``FORM REAL,<bits>`` data in the given byte order."""
    if bits not in _REAL_DTYPES:
        raise ProtocolError(f"SCPI REAL format must be 32 or 64 bits, not {bits}")
    return np.dtype((">" if big_endian else "<") + _REAL_DTYPES[bits])


def decode_reals(payload: bytes, dtype: np.dtype) -> np.ndarray:
    """Block payload -> float64 array (vectorised; refuses a payload of partial values)."""
    if len(payload) % dtype.itemsize:
        raise ProtocolError(
            f"SCPI block of {len(payload)} bytes is not a whole number of "
            f"{dtype.itemsize}-byte values"
        )
    return np.frombuffer(payload, dtype=dtype).astype(np.float64)


def encode_reals(values: np.ndarray, dtype: np.dtype) -> bytes:
    """Float values as a definite-length block in the given dtype (for simulators and tests)."""
    return encode_block(np.asarray(values, dtype=dtype).tobytes())


# -- error queue -----------------------------------------------------------------------------
@dataclass(frozen=True)
class ScpiError:
    """One entry of the instrument's error queue."""

    code: int
    text: str

    @property
    def is_error(self) -> bool:
        """False for ``0,"No error"`` (the queue is empty)."""
        return self.code != 0

    def __str__(self) -> str:
        return f'{self.code},"{self.text}"'


#: The code is bounded: int() refuses more than 4300 digits (SCPI codes have at most 5).
_ERROR_RE = re.compile(r'^\s*([+-]?\d{1,10})\s*,\s*"(.*)"\s*$', re.DOTALL)


def parse_error(reply: str) -> ScpiError:
    """Parse a ``SYST:ERR?`` reply such as ``-113,"Undefined header"``."""
    match = _ERROR_RE.match(reply)
    if match is None:
        raise ProtocolError(f"not a SCPI error-queue reply: {reply[:80]!r}")
    # A quote inside the text is doubled in SCPI strings.
    return ScpiError(int(match.group(1)), match.group(2).replace('""', '"'))


def format_error(code: int, text: str) -> str:
    """An error-queue reply line (without terminator)."""
    return f'{code:+d},"{text}"' if code else '+0,"No error"'


# -- headers and arguments -------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """One program message unit: header (without ``?``), whether it is a query, its arguments."""

    header: str
    query: bool
    args: tuple[str, ...]


def parse_command(text: str) -> Command:
    """Split ``SENS:CURR:RANG 0.1,(@1)`` into header, query flag and arguments.

    Arguments are split on commas outside parentheses and quotes, so a channel list ``(@1,2)``
    stays one argument.
    """
    text = text.strip()
    if not text:
        raise ProtocolError("empty SCPI command")
    head, _, rest = text.partition(" ")
    query = head.endswith("?")
    header = head[:-1] if query else head
    args: list[str] = []
    depth = 0
    quoted = False
    current = ""
    for char in rest.strip():  # per character of a command line, not per sample
        if char == '"':
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
        if char == "," and depth == 0 and not quoted:
            args.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip() or args:
        args.append(current.strip())
    return Command(header.lstrip(":"), query, tuple(args))


def _node_forms(node: str) -> tuple[str, str]:
    """(short form, long form) of a pattern node like ``SWEep`` (both upper case)."""
    short = "".join(c for c in node if not c.islower())
    return short, node.upper()


_NODE_RE = re.compile(r"\[:?([^\[\]:]+)\]|([^\[\]:]+)")


def header_matches(header: str, pattern: str) -> bool:
    """Does ``header`` (as sent) name the command ``pattern`` (as manuals write it)?

    ``pattern`` nodes are separated by ``:``; a node in ``[...]`` may be left out; each node
    may be given in its short (the upper-case letters) or long form, in any case.
    """
    sent = [n.upper() for n in header.strip().lstrip(":").split(":")]
    nodes: list[tuple[str, str, bool]] = []
    # A node is ``NAME`` or ``[:NAME]`` / ``[NAME]`` (optional), separated by ``:``.
    for node in _NODE_RE.finditer(pattern):
        optional = node.group(1) is not None
        nodes.append((*_node_forms(node.group(1) or node.group(2)), optional))

    def match(i: int, j: int) -> bool:
        if j == len(nodes):
            return i == len(sent)
        short, long, optional = nodes[j]
        if i < len(sent) and sent[i] in (short, long) and match(i + 1, j + 1):
            return True
        return optional and match(i, j + 1)

    return match(0, 0)


_CHANNELS_RE = re.compile(r"^\(@\s*([0-9,:\s]+)\)$")
_CHANNEL_PART_RE = re.compile(r"([0-9]{1,9})(?::([0-9]{1,9}))?")
#: Most channels one ``lo:hi`` range of a channel list may name (instruments have at most a few
#: hundred); a garbled reply must not expand into a huge list.
MAX_CHANNEL_SPAN = 10_000


def channel_list(channels: list[int] | tuple[int, ...] | int) -> str:
    """``(@1)`` or ``(@1,3)`` for a channel or channels."""
    chans = [channels] if isinstance(channels, int) else list(channels)
    return "(@" + ",".join(str(c) for c in chans) + ")"


def parse_channel_list(text: str) -> list[int]:
    """``(@1,3:4)`` -> [1, 3, 4]."""
    match = _CHANNELS_RE.match(text.strip())
    if match is None:
        raise ProtocolError(f"not a SCPI channel list: {text!r}")
    out: list[int] = []
    for part in match.group(1).replace(" ", "").split(","):
        if not part:
            continue
        # Bounded: int() refuses > 4300 digits, and a range must not expand without limit.
        chans = _CHANNEL_PART_RE.fullmatch("".join(part.split()))
        if chans is None:
            raise ProtocolError(f"SCPI channel list {text[:40]!r}: {part[:20]!r} is not a "
                                "channel or a range lo:hi of channels")
        lo, hi = int(chans.group(1)), int(chans.group(2) or chans.group(1))
        if hi - lo >= MAX_CHANNEL_SPAN:
            raise ProtocolError(f"SCPI channel list {text[:40]!r}: the range {lo}:{hi} spans "
                                f"more than {MAX_CHANNEL_SPAN} channels")
        out.extend(range(lo, hi + 1))
    return out


def parse_number(text: str) -> float:
    """A SCPI numeric argument (``1E-3``, ``+3.3``; ``MIN``/``MAX``/``DEF`` are not numbers)."""
    try:
        return float(text)
    except ValueError:
        raise ProtocolError(f"not a SCPI number: {text!r}") from None


def format_number(value: float) -> str:
    """A number the way the drivers send it: shortest exact repr (``0.001``, ``5.12e-06``)."""
    if not math.isfinite(value):
        raise ProtocolError(f"SCPI: {value!r} is not a number an instrument can be sent")
    return repr(float(value)) if value != int(value) else str(int(value))
