"""Sans-IO codec for the MLPerf Tiny / EEMBC DUT protocol (see SPEC.md next to this file).

Commands are ASCII text ending in ``%``; replies are ``\\r\\n`` lines, ``m-`` for messages and
``e-`` for errors, and every command ends with ``m-ready``. `encode_command` and the ``cmd_*``
helpers build commands; `DutDecoder` turns received bytes into typed events and never raises,
whatever arrives on the line. Reply kinds are recognised by the table `_RULES`, so protocol
extensions add rows there instead of branches.

The rig's negotiated extensions (``caps``, the binary ``bload`` download, the QUBO commands) are
here too; `encode_qubo`/`decode_qubo` build and check the binary graph that ``qload`` carries.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, cast, get_args

import numpy as np

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

#: Most bytes one ``m-qstate-`` line carries (64 hex digits).
QSTATE_BYTES_PER_LINE = 32
#: Capability word of the binary bulk download.
CAP_BLOAD = "bload"
#: Capability word of ``db crc``: the CRC-32 (`payload_crc`) and count of the bytes received since
#: ``db load``, so that a hex download is checked in one short reply instead of a ``db print``
#: read-back (about 4 characters per byte: at an IO manager's 9600 baud ~70 s for 16 kB).
CAP_DB_CRC = "dbcrc"
#: Capability word of the QUBO commands.
CAP_QUBO = "qubo"
#: Capability word of energy-mode firmware that also prints its lap counter: ``infer`` latches
#: ``m-lap-us`` at both timestamp pulses and prints the two lines after the window has closed,
#: so the DUT's timer and the energy monitor both time every window.
CAP_ELAP = "elap"
#: Capability word of a DUT whose lap counter is a simulator's time base (XyloSim: timesteps x
#: dt), not a measured execution time: the rig labels such times simulated.
CAP_SIMTIME = "simtime"
#: Capability word of the DUT's own power measurement (``m-qenergy-uj``/``m-qpower-uw`` of a
#: Loihi 2 solve, from its profiler).
CAP_POWER = "power"
#: Capability word of a DUT whose reported power comes from a stand-in, not a measurement (the
#: Loihi 2 shim's stand-in profiler): the rig labels such power SIMULATED.
CAP_SIMPOWER = "simpower"
#: Capability word of CRC-checked result lines: once the host has asked ``caps``, the DUT ends
#: each result line (``m-results-``, ``m-qbest-cost-``, ``m-qbest-time-us-``, ``m-qstate-``,
#: ``m-qimprove-``, and ``qresult``'s ``m-qload-us-``, ``m-qsteps-``, ``m-qenergy-uj-``,
#: ``m-qpower-uw-``) with ``-crc-<8 hex>``, the CRC-32 (`payload_crc`) of the text before it.
CAP_RESULT_CRC = "rcrc"
#: Capability word of CRC-checked lap lines: with ``rcrc`` switched on (``caps`` asked), the DUT
#: ends each ``m-lap-us-`` line (of ``infer`` and ``timestamp``) with ``-crc-<8 hex>`` as it
#: does a result line, and ``laps`` prints the last ``infer``'s two lap lines again. Firmware
#: that lists ``rcrc`` without it sends lap lines unchecked.
CAP_LAP_CRC = "lapcrc"
#: What joins a result line to its CRC-32.
RESULT_CRC_MARK = "-crc-"
#: Every capability word this rig knows. A word outside it in a ``caps`` reply is new firmware,
#: or a word garbled on the line: the client takes it only when the DUT says it twice alike.
CAPABILITY_WORDS: tuple[str, ...] = (CAP_BLOAD, CAP_DB_CRC, CAP_QUBO, CAP_ELAP, CAP_SIMTIME,
                                     CAP_POWER, CAP_SIMPOWER, CAP_RESULT_CRC, CAP_LAP_CRC)
#: Bytes of the ``qload`` header (u32 n_vars, u32 n_terms) and of one term (u32 i, u32 j, i32 w).
QUBO_HEADER_BYTES = 8
QUBO_TERM_BYTES = 12

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
    """``m-ready``: the last line of the boot banner and of every command's reply.

    `garbled`: the line was one byte away from ``m-ready`` (a bit flipped on the line; no other
    protocol line is that close), still the end of the reply: nothing follows a prompt.
    """

    garbled: bool = dataclasses.field(default=False, compare=False)


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
    """``m-lap-us-<n>``: the DUT's 32-bit microsecond counter (performance mode, and ``elap``);
    `checked` when the line carried a CRC-32 that matched (rig extension ``lapcrc``)."""

    us: int
    checked: bool = False


@dataclass(frozen=True)
class Results:
    """``m-results-[a,b,...]``: the class scores of the last inference; `checked` when the
    line carried a CRC-32 that matched (rig extension ``rcrc``)."""

    values: tuple[float, ...]
    checked: bool = False


# -- events of the rig's negotiated extensions ------------------------------------------------
@dataclass(frozen=True)
class Capabilities:
    """``m-caps-[w1,w2,...]``: the extensions the DUT speaks (reply to ``caps``)."""

    words: tuple[str, ...]


@dataclass(frozen=True)
class BloadReady:
    """``m-bload-ready-N``: the DUT now reads exactly N raw bytes."""

    n: int


@dataclass(frozen=True)
class BloadDone:
    """``m-bload-done-<crc>``: all bytes arrived and their CRC-32 matched `crc`."""

    crc: int


@dataclass(frozen=True)
class BufferCrc:
    """``m-db-crc-<n>-<crc>``: the DUT holds `n` bytes since ``db load``, of CRC-32 `crc`."""

    n: int
    crc: int


@dataclass(frozen=True)
class QloadReady:
    """``m-qload-ready-N``: the DUT now reads exactly N raw bytes of a QUBO graph."""

    n: int


@dataclass(frozen=True)
class QloadDone:
    """``m-qload-done-<n_vars>-<n_terms>``: the graph arrived, its CRC matched, it is valid."""

    n_vars: int
    n_terms: int


@dataclass(frozen=True)
class QsolveStart:
    """``m-qsolve-start``: the solver started."""


@dataclass(frozen=True)
class QsolveDone:
    """``m-qsolve-done-<elapsed_us>``: the solver stopped after `elapsed_us` (DUT timer)."""

    elapsed_us: int


@dataclass(frozen=True)
class QbestCost:
    """``m-qbest-cost-<int>``: the cost of the best state found (`checked`: CRC-32 matched)."""

    cost: int
    checked: bool = False


@dataclass(frozen=True)
class QbestTime:
    """``m-qbest-time-us-<t>``: when (µs after the solve started) the best state was found."""

    us: int
    checked: bool = False


@dataclass(frozen=True)
class QstateChunk:
    """``m-qstate-<offset>-[<hex>]``: bytes `offset`.. of the best state's bitmap."""

    offset: int
    data: bytes
    checked: bool = False


@dataclass(frozen=True)
class Qimprove:
    """``m-qimprove-<t_us>-<cost>``: the solver found a better state of `cost` at `t_us`."""

    t_us: int
    cost: int
    checked: bool = False


@dataclass(frozen=True)
class ResultCrcMismatch:
    """A result line whose ``-crc-`` suffix does not match its text: corrupted on the line.

    `line` is the text before the suffix as received, `announced` the CRC-32 it carried,
    `computed` the CRC-32 of `line`. Never taken as a result.
    """

    line: str
    announced: int
    computed: int


@dataclass(frozen=True)
class QloadUs:
    """``m-qload-us-<n>``: the solve's load before its clock started (build, compile, start),
    in µs by the DUT's timer."""

    us: int
    checked: bool = False


@dataclass(frozen=True)
class Qsteps:
    """``m-qsteps-<n>``: algorithm steps the solve ran (the load's steps included)."""

    n: int
    checked: bool = False


@dataclass(frozen=True)
class Qenergy:
    """``m-qenergy-uj-<n>``: energy of the solve in µJ (its average power x elapsed time)."""

    uj: int
    checked: bool = False


@dataclass(frozen=True)
class Qpower:
    """``m-qpower-uw-<n>``: the DUT's own average power over the solve in µW (its profiler)."""

    uw: int
    checked: bool = False


# -- generic lines ----------------------------------------------------------------------------
@dataclass(frozen=True)
class DutErrorLine:
    """``e-[<text>]``: the DUT refused the command; `text` is what is inside the brackets.

    `bracketed` is False for an ``e-`` line without them (its whole text): some firmware
    prints such lines, and one flipped bit makes one of any ``m-`` line ('m' -> 'e').
    """

    text: str
    bracketed: bool = dataclasses.field(default=True, compare=False)


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
    | Capabilities
    | BloadReady
    | BloadDone
    | BufferCrc
    | QloadReady
    | QloadDone
    | QsolveStart
    | QsolveDone
    | QbestCost
    | QbestTime
    | QstateChunk
    | Qimprove
    | QloadUs
    | Qsteps
    | Qenergy
    | Qpower
    | ResultCrcMismatch
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


def cmd_db_crc() -> str:
    """``db crc`` (rig extension ``dbcrc``): the count and CRC-32 of the bytes received since
    ``db load``."""
    return "db crc"


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


def cmd_laps() -> str:
    """``laps`` (rig extension ``lapcrc``): the last ``infer``'s two lap lines again."""
    return "laps"


# -- commands of the rig's negotiated extensions ----------------------------------------------
def _check_uint(value: object, what: str, *, low: int = 0, high: int = 0xFFFFFFFF) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not (low <= value <= high):
        raise ProtocolError(f"{what} must be an integer in {low}..{high}, got {value!r}")
    return value


def payload_crc(data: bytes | bytearray) -> int:
    """CRC-32/IEEE of `data` (zlib's), the checksum ``bload`` and ``qload`` carry."""
    return zlib.crc32(bytes(data)) & 0xFFFFFFFF


def result_line_with_crc(line: str) -> str:
    """`line` (a result line, ASCII) ended with ``-crc-<8 hex>``, its CRC-32 (``rcrc``)."""
    return f"{line}{RESULT_CRC_MARK}{payload_crc(line.encode('ascii')):08x}"


def cmd_caps() -> str:
    """``caps`` (rig extension): the DUT answers its timestamp mode and capability words."""
    return "caps"


def cmd_bload(n: int, crc: int) -> str:
    """``bload N CRC`` (rig extension): N raw bytes with CRC-32 `crc` follow the ready line."""
    _check_uint(n, "bload byte count", low=1)
    _check_uint(crc, "bload CRC-32")
    return f"bload {n} {crc:08x}"


def cmd_qload(n: int, crc: int) -> str:
    """``qload N CRC`` (rig extension): an `encode_qubo` payload of N bytes follows."""
    _check_uint(n, "qload byte count", low=QUBO_HEADER_BYTES)
    _check_uint(crc, "qload CRC-32")
    return f"qload {n} {crc:08x}"


def cmd_qsolve(timeout_us: int, seed: int) -> str:
    """``qsolve T SEED`` (rig extension): solve the loaded QUBO for `timeout_us` wall time."""
    _check_uint(timeout_us, "qsolve timeout_us", low=1)
    _check_uint(seed, "qsolve seed")
    return f"qsolve {timeout_us} {seed}"


def cmd_qresult() -> str:
    """``qresult`` (rig extension): best cost, its time, best state and improvement timeline."""
    return "qresult"


#: One QUBO term on the wire: u32 i, u32 j, i32 w, little-endian.
_TERM = np.dtype([("i", "<u4"), ("j", "<u4"), ("w", "<i4")])
_HEADER = np.dtype([("n_vars", "<u4"), ("n_terms", "<u4")])


def encode_qubo(n_vars: int, terms: Iterable[tuple[int, int, int]] | np.ndarray) -> bytes:
    """The ``qload`` payload for a QUBO of `n_vars` variables and `terms` (i, j, w), i <= j.

    cost(x) = sum over terms of w * x_i * x_j; an off-diagonal term carries Q_ij + Q_ji.
    """
    _check_uint(n_vars, "QUBO variable count", low=1)
    try:
        raw = np.asarray(terms if isinstance(terms, np.ndarray) else list(terms))
    except (TypeError, ValueError) as exc:
        raise ProtocolError(f"QUBO terms must be integer triples (i, j, w): {exc}") from exc
    if raw.size == 0:
        raw = np.empty((0, 3), dtype=np.int64)
    # Refuse floats and huge ints rather than truncate them silently.
    if not np.issubdtype(raw.dtype, np.integer) or raw.ndim != 2 or raw.shape[1] != 3:
        raise ProtocolError(
            f"QUBO terms must be integer triples (i, j, w), got an array of {raw.dtype} "
            f"with shape {raw.shape}"
        )
    arr = raw.astype(np.int64)
    i, j, w = arr[:, 0], arr[:, 1], arr[:, 2]
    bad = (i < 0) | (j < i) | (j >= n_vars) | (w < -(2**31)) | (w >= 2**31)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise ProtocolError(
            f"QUBO term {k} (i={i[k]}, j={j[k]}, w={w[k]}) is invalid for {n_vars} variables",
            hint="each term needs 0 <= i <= j < n_vars and a weight that fits in 32 bits",
        )
    if len(arr) > 0xFFFFFFFF:
        raise ProtocolError(f"{len(arr)} QUBO terms do not fit a 32-bit count")
    body = np.empty(len(arr), dtype=_TERM)
    body["i"], body["j"], body["w"] = i, j, w
    header = np.array([(n_vars, len(arr))], dtype=_HEADER)
    return header.tobytes() + body.tobytes()


def decode_qubo(payload: bytes) -> tuple[int, np.ndarray]:
    """`n_vars` and the (n_terms, 3) int64 array (i, j, w) of a ``qload`` payload; checked."""
    payload = bytes(payload)
    if len(payload) < QUBO_HEADER_BYTES:
        raise ProtocolError(f"a QUBO payload of {len(payload)} bytes has no 8-byte header")
    n_vars, n_terms = (int(v) for v in np.frombuffer(payload, _HEADER, count=1)[0])
    expected = QUBO_HEADER_BYTES + QUBO_TERM_BYTES * n_terms
    if len(payload) != expected:
        raise ProtocolError(
            f"a QUBO payload announcing {n_terms} terms must be {expected} bytes, "
            f"not {len(payload)}"
        )
    body = np.frombuffer(payload, _TERM, offset=QUBO_HEADER_BYTES)
    arr = np.stack([body["i"].astype(np.int64), body["j"].astype(np.int64),
                    body["w"].astype(np.int64)], axis=1)
    bad = (arr[:, 1] < arr[:, 0]) | (arr[:, 1] >= n_vars)
    if n_vars < 1 or bad.any():
        raise ProtocolError(f"QUBO payload has terms outside 0 <= i <= j < n_vars={n_vars}")
    return n_vars, arr


def qubo_cost(terms: np.ndarray, state: np.ndarray) -> int:
    """cost(x) = sum of w * x_i * x_j over the (i, j, w) rows of `terms`, x a 0/1 vector."""
    t = np.asarray(terms, dtype=np.int64).reshape(-1, 3)
    x = np.asarray(state, dtype=np.int64)
    return int(np.sum(t[:, 2] * x[t[:, 0]] * x[t[:, 1]]))


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


def _capabilities(m: re.Match[str]) -> DutEvent:
    words = tuple(w.strip() for w in m.group(1).split(","))
    return Capabilities(tuple(w for w in words if w))


def _qstate(m: re.Match[str]) -> DutEvent:
    digits = m.group(2)
    if len(digits) % 2:
        return Message(m.group(0)[2:])
    return QstateChunk(int(m.group(1)), bytes.fromhex(digits))


#: An unsigned decimal of at most 20 digits (any 64-bit count). Bounded because Python refuses
#: to convert integers of more than 4300 digits, and a garbled line must not crash the decoder.
_U = r"(\d{1,20})"
#: The same, signed (QUBO costs are negative).
_S = r"(-?\d{1,20})"

#: (pattern on the whole line, event builder). First match wins; order matters where patterns
#: overlap (``m-[Expecting ...]`` before the generic ``m-`` fallback).
_RULES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], DutEvent]]] = [
    (re.compile(r"m-ready"), lambda m: Ready()),
    (re.compile(r"m-timestamp-mode-(energy|performance)"),
     lambda m: TimestampMode(cast(TimestampModeName, m.group(1)))),
    (re.compile(r"m-init-done"), lambda m: InitDone()),
    (re.compile(r"m-name-(.*?)-\[(.*)\]"), lambda m: Name(m.group(1), m.group(2))),
    (re.compile(r"m-profile-\[(.*)\]"), lambda m: Profile(m.group(1))),
    (re.compile(r"m-model-\[(.*)\]"), lambda m: Model(m.group(1))),
    (re.compile(rf"m-\[Expecting {_U} bytes\]"), lambda m: ExpectingBytes(int(m.group(1)))),
    (re.compile(r"m-load-done"), lambda m: LoadDone()),
    (re.compile(r"m-buffer-(.*)"), _buffer_dump),
    (re.compile(rf"m-warmup-start-{_U}"), lambda m: WarmupStart(int(m.group(1)))),
    (re.compile(r"m-warmup-done"), lambda m: WarmupDone()),
    (re.compile(rf"m-infer-start-{_U}"), lambda m: InferStart(int(m.group(1)))),
    (re.compile(r"m-infer-done"), lambda m: InferDone()),
    (re.compile(rf"m-lap-us-{_U}"), lambda m: LapUs(int(m.group(1)))),
    (re.compile(r"m-results-\[(.*)\]"), _results),
    # Rig extensions (negotiated).
    (re.compile(r"m-caps-\[(.*)\]"), _capabilities),
    (re.compile(rf"m-bload-ready-{_U}"), lambda m: BloadReady(int(m.group(1)))),
    (re.compile(r"m-bload-done-([0-9a-fA-F]{8})"), lambda m: BloadDone(int(m.group(1), 16))),
    (re.compile(rf"m-db-crc-{_U}-([0-9a-fA-F]{{8}})"),
     lambda m: BufferCrc(int(m.group(1)), int(m.group(2), 16))),
    (re.compile(rf"m-qload-ready-{_U}"), lambda m: QloadReady(int(m.group(1)))),
    (re.compile(rf"m-qload-done-{_U}-{_U}"),
     lambda m: QloadDone(int(m.group(1)), int(m.group(2)))),
    (re.compile(r"m-qsolve-start"), lambda m: QsolveStart()),
    (re.compile(rf"m-qsolve-done-{_U}"), lambda m: QsolveDone(int(m.group(1)))),
    (re.compile(rf"m-qbest-cost-{_S}"), lambda m: QbestCost(int(m.group(1)))),
    (re.compile(rf"m-qbest-time-us-{_U}"), lambda m: QbestTime(int(m.group(1)))),
    (re.compile(rf"m-qstate-{_U}-\[([0-9a-fA-F]{{0,{2 * QSTATE_BYTES_PER_LINE}}})\]"), _qstate),
    (re.compile(rf"m-qimprove-{_U}-{_S}"), lambda m: Qimprove(int(m.group(1)), int(m.group(2)))),
    (re.compile(rf"m-qload-us-{_U}"), lambda m: QloadUs(int(m.group(1)))),
    (re.compile(rf"m-qsteps-{_U}"), lambda m: Qsteps(int(m.group(1)))),
    (re.compile(rf"m-qenergy-uj-{_U}"), lambda m: Qenergy(int(m.group(1)))),
    (re.compile(rf"m-qpower-uw-{_U}"), lambda m: Qpower(int(m.group(1)))),
    # Generic lines.
    (re.compile(r"e-\[(.*)\]"), lambda m: DutErrorLine(m.group(1))),
    (re.compile(r"e-(.*)"), lambda m: DutErrorLine(m.group(1), bracketed=False)),
    (re.compile(r"m-(.*)"), lambda m: Message(m.group(1))),
]


#: A result line with its CRC-32 (rig extension ``rcrc``): the kinds it may carry, the suffix.
_CHECKED_LINE = re.compile(
    r"(m-(?:results|lap-us|qbest-cost|qbest-time-us|qstate|qimprove|qload-us|qsteps|qenergy-uj"
    r"|qpower-uw)-.*)"
    + re.escape(RESULT_CRC_MARK) + r"([0-9a-f]{8})"
)
_CHECKED_KINDS = (Results, LapUs, QbestCost, QbestTime, QstateChunk, Qimprove, QloadUs, Qsteps,
                  Qenergy, Qpower)


def _checked_line(m: re.Match[str]) -> DutEvent:
    """A result line whose CRC matched, marked `checked`; else `ResultCrcMismatch`."""
    line, announced = m.group(1), int(m.group(2), 16)
    # Invalid UTF-8 was replaced by U+FFFD: its encoding differs from any byte sent, so a
    # corrupted line never matches by accident of decoding.
    computed = payload_crc(line.encode("utf-8"))
    if computed != announced:
        return ResultCrcMismatch(line, announced, computed)
    event = _parse_plain(line)
    if isinstance(event, _CHECKED_KINDS):
        return dataclasses.replace(event, checked=True)
    return event  # intact, but not a result (a Message): nothing to mark


def parse_line(line: str) -> DutEvent:
    """The event for one reply line (without its line ending)."""
    m = _CHECKED_LINE.fullmatch(line)
    if m is not None:
        return _checked_line(m)
    event = _parse_plain(line)
    if isinstance(event, Message | Unparsed | DutErrorLine) and _near_prompt(line):
        return Ready(garbled=True)
    return event


_PROMPT = "m-ready"


def _near_prompt(line: str) -> bool:
    """Whether `line` is ``m-ready`` with one or two bytes corrupted: up to two characters
    changed (a flipped bit each; invalid UTF-8 decodes as one U+FFFD), or one more character
    after it (its CR flipped into a printable byte) and at most one changed. No other protocol
    line is within two characters of it."""
    if len(line) == len(_PROMPT):
        return 1 <= _differ(line, _PROMPT) <= 2
    return len(line) == len(_PROMPT) + 1 and _differ(line[:-1], _PROMPT) <= 1


def _differ(a: str, b: str) -> int:
    return sum(x != y for x, y in zip(a, b, strict=True))


def _parse_plain(line: str) -> DutEvent:
    for pattern, build in _RULES:
        m = pattern.fullmatch(line)
        if m is not None:
            return build(m)
    return Unparsed(line)


#: The bytes one flipped bit makes of a line feed, and of a CR.
_LF_FLIPS = bytes(0x0A ^ (1 << k) for k in range(8))
_CR_FLIPS = bytes(0x0D ^ (1 << k) for k in range(8))
#: Where a line ends: a line feed, or a CR followed by a line feed that one bit flip made into
#: another byte (that byte is dropped).
_LINE_END = re.compile(rb"\n|\r[" + re.escape(_LF_FLIPS) + rb"]")


class DutDecoder:
    """Turns the bytes a DUT sends into events, one per line; keeps partial lines between feeds.

    Lines end in ``\\r\\n`` (a bare ``\\n`` is accepted). NUL bytes, which some UARTs produce
    around a reset, are dropped; invalid UTF-8 is replaced; blank lines give no event. A line
    longer than `MAX_LINE` bytes gives one `Unparsed` event and the rest of it is skipped.

    A line feed corrupted on the line (one flipped bit) after its CR still ends the line: the
    protocol's lines hold no CR inside, so a CR followed by a byte one bit away from a line
    feed is a line end whose feed was hit. Without this a lost feed joined two lines, and a
    lost feed after ``m-ready`` held the reply until its deadline.
    """

    def __init__(self) -> None:
        self._partial = bytearray()
        #: True while skipping the rest of an overlong line up to its newline.
        self._skipping = False

    def feed(self, data: bytes) -> list[DutEvent]:
        """Events for every line completed by `data`."""
        events: list[DutEvent] = []
        data = bytes(data).replace(b"\x00", b"")
        if data and data[0] in _LF_FLIPS and self._partial.endswith(b"\r"):
            # The CR ended the last feed; this byte is its line feed, corrupted.
            data = b"\n" + data[1:]
        while data:
            end = _LINE_END.search(data)
            if end is None:
                if not self._skipping:
                    self._partial += data
                    if len(self._partial) > MAX_LINE:
                        events.append(_overlong(self._partial))
                        self._partial.clear()
                        self._skipping = True
                break
            piece, data = data[: end.start()], data[end.end() :]
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
        if (len(self._partial) == len(_PROMPT) + 2 and self._partial.startswith(b"m-ready")
                and self._partial[-2] in _CR_FLIPS and self._partial[-1] in _LF_FLIPS):
            # The prompt with both bytes of its line end hit: nothing follows a prompt until
            # the next command, so this line would end only with the next reply's first one.
            self._partial.clear()
            events.append(Ready(garbled=True))
        return events

    def reset(self) -> None:
        """Forget any partial line (after a resynchronisation)."""
        self._partial.clear()
        self._skipping = False


def _overlong(raw: bytes | bytearray) -> Unparsed:
    head = bytes(raw[:80]).decode("utf-8", errors="replace")
    return Unparsed(f"{head}... (line longer than {MAX_LINE} bytes, rest dropped)")
