"""The DUT client: drives any DUT that speaks the MLPerf Tiny protocol over a byte transport.

Every reply is checked: an ``e-`` line raises `DutError`, counts echoed by the DUT must match
what was asked, every wait has a deadline, and every download is verified (``m-bload-done`` with
the CRC for the binary download; for the hex one ``db crc`` where the DUT offers it, else a
``db print`` read-back) and retried once
before `DownloadError`. The rig's extensions (protocols/dut/SPEC.md) are negotiated with
``caps`` and used only when the DUT offers them. Not thread-safe: one client per port, used from
one thread.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import numpy as np

from drivers.errors import DeviceError, DeviceTimeout, DutError
from protocols.dut.codec import (
    CAP_BLOAD,
    CAP_DB_CRC,
    CAP_ELAP,
    CAP_LAP_CRC,
    CAP_POWER,
    CAP_QUBO,
    CAP_RESULT_CRC,
    CAPABILITY_WORDS,
    DEFAULT_HEX_PER_COMMAND,
    TIMESTAMP_MODES,
    BloadDone,
    BloadReady,
    BufferCrc,
    BufferDump,
    Capabilities,
    DutDecoder,
    DutErrorLine,
    DutEvent,
    ExpectingBytes,
    InferDone,
    InferStart,
    InitDone,
    LapUs,
    LoadDone,
    Message,
    Model,
    Name,
    Profile,
    QbestCost,
    QbestTime,
    Qenergy,
    Qimprove,
    QloadDone,
    QloadReady,
    QloadUs,
    Qpower,
    QsolveDone,
    QsolveStart,
    QstateChunk,
    Qsteps,
    Ready,
    ResultCrcMismatch,
    Results,
    TimestampMode,
    Unparsed,
    WarmupDone,
    WarmupStart,
    cmd_bload,
    cmd_caps,
    cmd_db_crc,
    cmd_db_load,
    cmd_db_print,
    cmd_infer,
    cmd_laps,
    cmd_name,
    cmd_profile,
    cmd_qload,
    cmd_qresult,
    cmd_qsolve,
    cmd_results,
    cmd_timestamp,
    decode_qubo,
    encode_command,
    encode_qubo,
    hex_chunks,
    payload_crc,
    qubo_cost,
)
from protocols.errors import ProtocolError, quoted

#: Deadline for a command that does no real work (name, profile, db, results, timestamp).
COMMAND_TIMEOUT_S = 5.0
#: How many more times an idempotent exchange whose reply came back garbled on the line is
#: asked before the client gives up (``name``, ``profile``, ``caps``, ``db crc``, ``results``,
#: ``laps``, ...): each ask costs one short reply. At 0.4 % of the bytes flipped a 70-byte
#: reply comes garbled one time in four, so 1 + 8 asks all garbled happen about once in 260000:
#: rare even over a run of a thousand samples, each asked for its result and its lap lines.
ASK_AGAIN = 8
#: The DUT's lap counter is 32 bits of microseconds.
_LAP_MASK = 0xFFFFFFFF
#: Bytes per write of a binary payload: pyserial's write timeout covers one write call, so a
#: long payload at a low baud rate goes out in pieces that each fit in it.
BINARY_WRITE_CHUNK = 1024
#: Baud rate assumed for deadlines when the transport does not say.
DEFAULT_BAUD = 115200
#: Reply bytes per downloaded byte of a ``db print`` dump (``-xx`` plus the line overhead).
_DUMP_BYTES_PER_BYTE = 4
#: Before a retry, the line counts as quiet after this long without a byte (host time: this
#: only bounds a wait, it measures nothing) ...
_QUIET_S = 0.05
#: ... and draining stray bytes stops after this long in any case.
_DRAIN_LIMIT_S = 2.0

_E = TypeVar("_E")
#: The lines of an ``infer`` reply in order, to name the first one missing after a timeout.
_INFER_REPLY = ((WarmupStart, "m-warmup-start"), (InferStart, "m-infer-start"),
                (InferDone, "m-infer-done"), (Results, "m-results"), (Ready, "m-ready"))


class ByteTransport(Protocol):
    """What the client needs from a transport (`drivers.transport.SerialTransport` fits).

    Optional attributes the client looks for: ``binary_ok`` (False for a transport that cannot
    carry raw bytes, such as an IO manager's pass-through; default True), ``baudrate`` (for
    deadlines of long transfers), ``hex_per_command`` (bytes per legacy ``db`` command; 26
    behind an IO manager) and ``reset_input()``.
    """

    def write(self, data: bytes) -> None: ...

    def read(self) -> bytes: ...

    def close(self) -> None: ...


class DownloadError(DeviceError):
    """A download the DUT did not receive intact, even after one retry.

    `n_bytes` is the payload size, `method` "binary", "hex" or "qload", `offset` the first byte
    that differed when a read-back could tell (else None), `reason` what went wrong.
    """

    def __init__(
        self,
        message: str,
        *,
        n_bytes: int,
        method: str,
        reason: str,
        offset: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint=hint)
        self.n_bytes = n_bytes
        self.method = method
        self.reason = reason
        self.offset = offset


class ResultError(DeviceError):
    """A result the DUT sent that failed its CRC-32 (or did not arrive whole), even after the
    one re-ask: the values are unknown. `command` is what asked for them, `reason` what went
    wrong the second time.
    """

    def __init__(self, message: str, *, command: str, reason: str,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.command = command
        self.reason = reason


class GarbledReply(DeviceError):
    """A reply garbled on the line that the client must not ask again itself: ``infer`` (the
    DUT may have run it: in energy mode its timestamp pulses are in the monitor's trace).

    `command` is what was sent, `reason` what could not be read, `ran` whether the reply shows
    that the DUT ran it (a line of an inference's reply came through). The caller decides: the
    ASC procedure re-runs a timed run, its window's edges consumed.
    """

    def __init__(self, message: str, *, command: str, reason: str, ran: bool,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.command = command
        self.reason = reason
        self.ran = ran


#: The hint of an error that bytes corrupted on the DUT's line explain.
LINE_HINT = "bytes are corrupted on the DUT's line: check the cable, ground and baud rate"


class _TransferFailed(Exception):
    """One download attempt failed (internal: it triggers a retry). `garbled`: a reply could
    not be read (no failed verification), so the download is done again within `ASK_AGAIN`."""

    def __init__(self, reason: str, *, offset: int | None = None, hint: str = "",
                 garbled: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset
        self.hint = hint
        self.garbled = garbled


@dataclass
class DutStats:
    """Counters of one client: verified downloads, retried attempts, bytes loaded."""

    downloads: int = 0
    retries: int = 0
    bytes_loaded: int = 0
    #: Result replies re-asked after a CRC mismatch (rig extension ``rcrc``).
    result_retries: int = 0
    #: Idempotent exchanges asked again because their reply came back garbled on the line:
    #: command -> how many times (``caps``, ``name``, ``results``, ``laps``, ...).
    asked_again: dict[str, int] = field(default_factory=dict)
    #: Lines of ``infer`` replies that measure nothing (``m-warmup-start``, ``m-infer-done``)
    #: lost on the line and taken without them, every measuring line CRC-checked.
    lines_unread: int = 0


@dataclass(frozen=True)
class DutInfo:
    """Who the DUT says it is: ``name%`` and ``profile%`` replies."""

    name: str
    vendor: str
    profile: str
    model: str


@dataclass(frozen=True)
class LoadResult:
    """A verified download: its size, "binary" or "hex", attempts used (1 or 2), and how it
    was checked: "crc" (``bload``'s CRC-32, or ``db crc``) or "read-back" (``db print``)."""

    n_bytes: int
    method: str
    attempts: int
    check: str


@dataclass(frozen=True, eq=False)
class InferResult:
    """One ``infer N W%``: the lap counter values, the DUT-timed window, the class scores.

    `elapsed_us` is the DUT's own measurement of the N timed inferences: in performance mode,
    and in energy mode from firmware that offers ``elap`` (its lap counter at both pulses,
    printed after the window). None from plain energy-mode firmware, where only the energy
    monitor times the window between the GPIO edges.
    """

    iterations: int
    warmup: int
    lap_us: tuple[int, ...]
    elapsed_us: int | None
    results: np.ndarray
    #: Other ``m-`` lines of the reply (text after ``m-``), e.g. a Xylo HDK's power rails.
    messages: tuple[str, ...] = ()
    #: True when the scores came on a line whose CRC-32 matched (``rcrc``).
    checked: bool = False


@dataclass(frozen=True, eq=False)
class QuboResult:
    """``qresult``: best cost, when it was found (µs into the solve), the best state (bool per
    variable) and the improvements (t_us, cost) in time order."""

    best_cost: int
    best_time_us: int
    state: np.ndarray
    improvements: list[tuple[int, int]] = field(default_factory=list)
    #: Other ``m-`` lines of the reply (text after ``m-``).
    messages: tuple[str, ...] = ()
    #: The optional lines (None when the DUT does not send them): the solve's load before its
    #: clock [µs], the steps it ran, and the DUT's own energy [µJ] and average power [µW] over
    #: the solve (a Loihi 2 profiler; caps ``power``).
    load_us: int | None = None
    steps: int | None = None
    energy_uj: int | None = None
    power_uw: int | None = None


class DutClient:
    """Speaks the DUT protocol over `transport`; `name` labels the DUT in error messages.

    `command_timeout_s` is the deadline of a command that does no real work; long transfers
    and inference runs get deadlines scaled to their size.
    """

    def __init__(
        self,
        transport: ByteTransport,
        *,
        name: str = "DUT",
        command_timeout_s: float = COMMAND_TIMEOUT_S,
    ) -> None:
        self._transport = transport
        self.name = name
        self.command_timeout_s = command_timeout_s
        #: "energy" or "performance" from the boot banner or the ``caps`` reply; None until seen.
        self.timestamp_mode: str | None = None
        #: Extensions the DUT speaks (``caps``); empty for plain MLPerf Tiny firmware; None
        #: until negotiated (`load` and the QUBO methods negotiate when they need to know).
        self.capabilities: frozenset[str] | None = None
        #: Filled by `identify()`.
        self.info: DutInfo | None = None
        self.stats = DutStats()
        self._decoder = DutDecoder()
        self._pending: deque[DutEvent] = deque()
        #: Set after a timeout: late replies to the abandoned command must not be taken as
        #: replies to the next one.
        self._out_of_sync = False
        #: The reply events a timed-out command got before its deadline.
        self._unfinished: list[DutEvent] = []
        #: The QUBO last loaded (n_vars, terms), to check what `qubo_result` reports.
        self._qubo: tuple[int, np.ndarray] | None = None
        #: Called while waiting for a reply; may raise to abandon the wait (a Stop button's
        #: check: the run then ends as after Ctrl-C).
        self.checkpoint: Callable[[], None] | None = None
        #: Called with one sentence each time a garbled reply is asked again (a run's note).
        self.on_retry: Callable[[str], None] | None = None
        #: The timestamp mode of the last boot banner seen (None: no banner seen).
        self._banner_mode: str | None = None

    # -- boot ---------------------------------------------------------------------------------
    def wait_for_boot(self, timeout_s: float = 5.0) -> str:
        """Wait for the boot banner (mode, ``m-init-done``, ``m-ready``); return the mode.

        A banner line garbled on the line is still a boot: the mode line (then ``caps`` tells
        the mode, or `DeviceError` names the garbled banner) or ``m-init-done``, or both when
        ``m-init-done`` is at most two characters off.
        """
        deadline = time.monotonic() + timeout_s
        #: The last lines seen: what a timeout says was wrong with the banner.
        seen: deque[DutEvent] = deque(maxlen=16)
        mode: str | None = None
        init_done = False
        #: A banner line that could not be read, since the last prompt (its text).
        garbled: str | None = None
        while True:
            event = self._next_event(deadline)
            if event is None:
                raise self._no_boot(timeout_s, list(seen))
            seen.append(event)
            if isinstance(event, TimestampMode):
                mode, init_done, garbled = event.mode, False, None
            elif isinstance(event, InitDone) or _like_init_done(event):
                init_done = mode is not None or garbled is not None
            elif _unreadable([event]):
                garbled = _unreadable([event])[0]
            elif isinstance(event, Ready):
                if mode is not None and (init_done or garbled is not None):
                    self.timestamp_mode = self._banner_mode = mode
                    self._booted()
                    return mode
                if init_done:  # the mode line was garbled: `caps` tells the mode
                    return self._mode_of_garbled_banner(garbled or "")
                mode, init_done, garbled = None, False, None

    def _booted(self) -> None:
        self._out_of_sync = False
        # A reboot empties the DUT's memory (and may follow a flash): ask again.
        self._qubo = None
        self.capabilities = None

    def _mode_of_garbled_banner(self, garbled: str) -> str:
        """After a banner whose mode line came garbled: the mode from ``caps``, or an error."""
        self._booted()
        self._banner_mode = self.timestamp_mode = None
        self.negotiate()
        if self.timestamp_mode is None:
            raise DeviceError(
                f"{self.name}'s boot banner came back garbled (its mode line read {garbled!r}) "
                "and its firmware does not tell its mode on caps",
                hint=f"power-cycle the DUT to see its banner again; {LINE_HINT}",
            )
        self._banner_mode = self.timestamp_mode
        return self.timestamp_mode

    def _no_boot(self, timeout_s: float, seen: list[DutEvent]) -> DeviceTimeout:
        """`wait_for_boot`'s timeout, saying what was wrong with the banner: ``m-ready`` came
        but the lines before it lacked the mode line or ``m-init-done`` (missing, or garbled
        on the line), or ``m-ready`` never came; either way the unreadable lines, quoted."""
        came = [_line_text(e) for e in seen if isinstance(e, Message | Unparsed | DutErrorLine)]
        instead = (f"; unreadable instead: {', '.join(quoted(x) for x in came[-3:])}"
                   if came else "")
        readies = [i for i, e in enumerate(seen) if isinstance(e, Ready)]
        if not readies:
            return DeviceTimeout(
                f"{self.name} never said m-ready within {timeout_s:g} s{instead}",
                hint="check the port and baud rate, that the board is powered and flashed "
                "with the benchmark firmware; a board that booted before the port was "
                "opened does not repeat its banner: reset or power-cycle it",
            )
        start = readies[-2] + 1 if len(readies) > 1 else 0
        banner = seen[start : readies[-1]]
        modes = [i for i, e in enumerate(banner) if isinstance(e, TimestampMode)]
        if not modes:
            what = "no m-timestamp-mode line"
        else:
            mode_line = banner[modes[-1]]
            assert isinstance(mode_line, TimestampMode)
            what = f"no m-init-done after m-timestamp-mode-{mode_line.mode}"
        return DeviceTimeout(
            f"{self.name} said m-ready, but its boot banner had {what} (within "
            f"{timeout_s:g} s){instead}",
            hint="banner lines garbled on the DUT's line (check the cable, ground and baud "
            "rate), or firmware that is not the benchmark's: its banner is "
            "m-timestamp-mode-<mode>, m-init-done, m-ready; power-cycle the DUT to see it again",
        )

    def discard_input(self) -> None:
        """Drop whatever the DUT sent that nobody read (a crashed session's replies, half a
        line): call with the DUT unpowered, before powering it, so its banner starts clean."""
        self._drain()

    def require_mode(self, mode: str) -> None:
        """Raise `DeviceError` unless the firmware's timestamp mode is `mode`."""
        if mode not in TIMESTAMP_MODES:
            raise ValueError(f"unknown timestamp mode {mode!r}; expected one of {TIMESTAMP_MODES}")
        if self.timestamp_mode is None:
            raise DeviceError(
                f"{self.name}: timestamp mode unknown (no boot banner seen), {mode} mode needed",
                hint="reset or power-cycle the DUT after opening its port so that its banner "
                "is seen (firmware with the rig's extensions also tells it on `caps`)",
            )
        if self.timestamp_mode != mode:
            raise DeviceError(
                f"{self.name} firmware is built for {self.timestamp_mode} timestamp mode, "
                f"but this measurement needs {mode} mode",
                hint=f"rebuild the firmware for {mode} timestamp mode",
            )

    # -- one command --------------------------------------------------------------------------
    def command(self, text: str, timeout_s: float | None = None) -> list[DutEvent]:
        """Send `text` as one command; return its reply events up to and including `Ready`.

        An ``e-`` line in the reply raises `DutError`; no reply by `timeout_s` (default
        `command_timeout_s`) raises `DeviceTimeout`; a boot banner raises `DeviceError`.
        """
        events = self._exchange(text, timeout_s)
        errors = _refusals(events)
        if errors:
            raise DutError(f"{self.name} refused {text!r}: {'; '.join(errors)}", command=text)
        return events

    # -- negotiation --------------------------------------------------------------------------
    def negotiate(self) -> frozenset[str]:
        """Ask ``caps``: the extensions the DUT speaks (empty for plain MLPerf Tiny firmware).

        The reply also carries the timestamp mode, so the mode is known without a reboot.
        ``caps`` changes nothing but switching ``rcrc`` on, so a reply garbled on the line is
        asked again (at most `ASK_AGAIN` more times): one that does not parse, whose mode
        disagrees with the boot banner's, or that names a word the rig does not know unless
        the DUT says the same words twice. Nothing is guessed: a reply garbled every time
        raises `DeviceError`; only a refusal naming the unknown command is plain firmware,
        and any other refusal is the DUT's word (`DutError`) once it has said it twice alike.
        """
        text = cmd_caps()
        mode_before = self.timestamp_mode
        previous: tuple[str, ...] | None = None
        problems: list[str] = []
        for ask in range(1 + ASK_AGAIN):
            if ask:
                self._asked_again(text, problems[-1], ask)
            events = self._exchange(text)
            refusals = [e for e in events if isinstance(e, DutErrorLine)]
            found = [e for e in events if isinstance(e, Capabilities)]
            modes = [e.mode for e in events if isinstance(e, TimestampMode)]
            odd = _unreadable(events)
            if refusals and not found:
                if any("unknown command" in e.text.lower() for e in refusals):
                    self.capabilities = frozenset()  # plain MLPerf Tiny firmware
                    self.timestamp_mode = mode_before
                    return self.capabilities
                errors = "; ".join(e.text for e in refusals)
                if not odd and previous == (errors,):  # the same refusal twice: its word
                    raise DutError(f"{self.name} refused {text!r}: {errors}", command=text)
                previous = (errors,)
                problems.append(f"an unreadable line {odd[0]!r}" if odd
                                else f"a refusal {errors[:48]!r}")
                continue
            if len(found) != 1 or odd:
                problems.append(f"an unreadable line {odd[0]!r}" if odd
                                else f"{len(found)} m-caps lines")
                continue
            words = found[0].words
            unknown = [w for w in words if w not in CAPABILITY_WORDS]
            mode = modes[-1] if modes else None
            if self._banner_mode is not None and mode not in (None, self._banner_mode):
                problems.append(f"its mode is {mode}, the boot banner said {self._banner_mode}")
                continue
            if unknown and words != previous:
                previous = words
                problems.append(f"words the rig does not know: {', '.join(unknown)}")
                continue
            self.capabilities = frozenset(words)
            return self.capabilities
        self.timestamp_mode = mode_before
        raise DeviceError(
            f"{self.name}: the reply to {text!r} came back garbled {len(problems)} times "
            f"({'; '.join(problems)}); its extensions are unknown",
            hint="bytes are corrupted on the DUT's line: check the cable, ground and baud "
            "rate; firmware whose caps disagrees with its banner needs reflashing",
        )

    def ask(self, text: str, problem: Callable[[list[DutEvent]], str | None],
            timeout_s: float | None = None) -> list[DutEvent]:
        """The reply to `text`, an idempotent command (one that changes nothing in the DUT, or
        the same each time), in which `problem` finds nothing missing.

        A reply garbled on the line (a line the rig cannot read, `_unreadable`) whose content
        `problem` finds missing or wrong is asked again, at most `ASK_AGAIN` more times, each
        counted in `stats.asked_again` and said through `on_retry`; then `DeviceError` naming
        the command and what came back. An intact reply without the content is the firmware's:
        `DeviceError` at once. An intact ``e-[...]`` refusal raises `DutError` as `command`.
        """
        problems: list[str] = []
        for k in range(1 + ASK_AGAIN):
            if k:
                self._asked_again(text, problems[-1], k)
            try:
                events = self._exchange(text, timeout_s)
            except DeviceTimeout as exc:
                if not self._unfinished:
                    raise  # nothing came: the DUT does not answer, no line noise
                # It answered, but no prompt ended its reply: lost on the line beyond what
                # the decoder recognises. The command changes nothing: ask it again.
                problems.append(f"no m-ready within the deadline after "
                                f"{', '.join(_line_names(self._unfinished))}")
                if k == ASK_AGAIN:
                    raise GarbledReply(
                        f"{self.name}: the reply to {text!r} came back garbled {len(problems)} "
                        f"times ({'; '.join(problems)})", command=text, reason=problems[-1],
                        ran=True, hint=exc.hint) from None
                continue
            odd = _unreadable(events)
            errors = _refusals(events)
            if errors and not odd:
                raise DutError(f"{self.name} refused {text!r}: {'; '.join(errors)}",
                               command=text)
            missing = problem(events)
            if missing is None:
                return events
            if not odd:
                raise DeviceError(
                    f"{self.name} did not answer {text!r} with {missing}",
                    hint="is this MLPerf Tiny (EEMBC) benchmark firmware at the right baud rate?",
                )
            problems.append(f"{missing}; read {odd[0]!r}")
        raise GarbledReply(
            f"{self.name}: the reply to {text!r} came back garbled {len(problems)} times "
            f"({'; '.join(problems)})", command=text, reason=problems[-1], ran=True,
            hint=LINE_HINT)

    def _asked_again(self, command: str, problem: str, ask: int, *,
                     what: str | None = None, how: str = "asked again") -> None:
        """Count and say that `command` is asked again (the `ask`-th time) after `problem`;
        `what` names what came garbled when it is not `command`'s reply (a download, an
        infer's lap lines), `how` what is done about it."""
        key = _command_word(command)
        self.stats.asked_again[key] = self.stats.asked_again.get(key, 0) + 1
        if self.on_retry is not None:
            what = what or f"{self.name}'s reply to {command!r}"
            self.on_retry(f"{what} came back garbled ({problem}); {how} ({ask} of at "
                          f"most {ASK_AGAIN})")

    # -- the MLPerf Tiny commands -------------------------------------------------------------
    def identify(self) -> DutInfo:
        """Ask ``name%`` then ``profile%``; store and return who the DUT is (each asked again
        when its reply came back garbled, `ask`)."""
        name = self._one(self.ask(cmd_name(), _lines(Name)), Name, "name")
        replies = self.ask(cmd_profile(), _lines(Profile, Model))
        profile = self._one(replies, Profile, "profile")
        model = self._one(replies, Model, "profile")
        self.info = DutInfo(name.name, name.vendor, profile.text, model.model_id)
        return self.info

    def load(self, data: bytes, *, per_command: int | None = None) -> LoadResult:
        """Download `data` into the DUT's input buffer and verify that it arrived intact.

        Binary (``bload`` with CRC-32) when the DUT offers it and the transport carries raw
        bytes, else ``db`` hex commands (`per_command` bytes each; default the transport's
        ``hex_per_command`` or 31) checked by ``db crc`` where the DUT offers it (one short
        reply), else by a ``db print`` read-back (about 4 characters per byte). A failed
        verification is retried once; then `DownloadError`.
        """
        data = bytes(data)
        if not data:
            raise ProtocolError("nothing to download: the input is empty",
                                hint="load at least one byte")
        attempt: Callable[[bytes], None]
        if self._binary_offered(CAP_BLOAD):
            method, check, attempt = "binary", "crc", self._load_binary
        else:
            if per_command is None:
                per_command = getattr(self._transport, "hex_per_command", DEFAULT_HEX_PER_COMMAND)
            hex_chunks(b"\0", per_command)  # refuses a bad per_command before anything is sent
            method = "hex"
            if self.capabilities is None:
                self.negotiate()
            by_crc = CAP_DB_CRC in (self.capabilities or ())
            check = "crc" if by_crc else "read-back"

            def load_hex(payload: bytes) -> None:
                self._load_hex(payload, per_command, by_crc=by_crc)

            attempt = load_hex

        attempts = self._with_one_retry(attempt, data, method, diagnose=check == "crc")
        self.stats.downloads += 1
        self.stats.bytes_loaded += len(data)
        return LoadResult(len(data), method, attempts, check)

    def read_buffer(self, *, timeout_s: float | None = None) -> bytes:
        """``db print%``: the bytes the DUT has received since the last ``db load`` (read
        again when a line of the dump came back garbled)."""
        events = self.ask(cmd_db_print(), lambda ev: "an intact m-buffer dump"
                          if _unreadable(ev) else None, timeout_s)
        return b"".join(e.data for e in events if isinstance(e, BufferDump))

    def infer(
        self, iterations: int, warmup: int = 0, *, timeout_s: float | None = None
    ) -> InferResult:
        """Run `warmup` untimed and `iterations` timed inferences on the loaded input.

        Never sent twice: a reply that came back garbled on the line (a line missing, a count
        echoed wrong, the lap lines unreadable) raises `GarbledReply`, `ran` saying whether the
        DUT ran it; the caller re-runs (an energy-mode DUT pulsed its timestamp line). A result
        line that failed its CRC is asked again with ``results%`` (idempotent).
        """
        text = cmd_infer(iterations, warmup)  # validates before anything is sent
        if timeout_s is None:
            # A deadline against a hung DUT, not a measurement: generous.
            timeout_s = 30.0 + (iterations + warmup) / 10.0
        try:
            events = self._exchange(text, timeout_s)
        except DeviceTimeout as exc:  # say which reply never came
            got = self._unfinished
            missing = next((line for kind, line in _INFER_REPLY
                            if not any(isinstance(e, kind) for e in got)), "m-ready")
            if any(isinstance(e, InferDone | Results | ResultCrcMismatch) for e in got):
                # The DUT got past its window and said so: the prompt that ends the reply was
                # lost on the line (beyond what the decoder recognises). It ran: re-run it.
                raise GarbledReply(
                    f"{self.name}'s reply to {text!r} came back garbled: no m-ready within "
                    f"{timeout_s:g} s after {', '.join(_line_names(got[-4:]))}",
                    command=text, reason=f"no m-ready after {_line_names(got[-1:])[0]}",
                    ran=True, hint=LINE_HINT) from None
            raise DeviceTimeout(
                f"{self.name} never said {missing} for {text!r} within {timeout_s:g} s "
                f"(got: {', '.join(type(e).__name__ for e in got[-5:]) or 'nothing'})",
                hint=exc.hint) from None
        # The lines only an inference's reply has: the DUT ran it (an energy-mode DUT has
        # pulsed its timestamp line), whatever else came garbled.
        ran = any(isinstance(e, WarmupStart | WarmupDone | InferStart | LapUs | InferDone
                             | Results | ResultCrcMismatch) for e in events)
        errors = _refusals(events)
        if errors:  # an intact e-[...] line: the DUT's word, before or after it started
            raise DutError(f"{self.name} refused {text!r}: {'; '.join(errors)}", command=text)
        # Energy-mode firmware offering `elap` prints the laps of its two pulses after the window.
        elap = self.timestamp_mode == "energy" and CAP_ELAP in (self.capabilities or ())
        laps_due = self.timestamp_mode == "performance" or elap
        # lapcrc: its lap lines carry a CRC and `laps` reads them again (below): not a problem
        # of the reply, and then neither is a lost echo that measures nothing.
        lapcrc = self.laps_checked and self.results_checked
        problems = _infer_problems(events, iterations, warmup, laps_due=laps_due,
                                   check_laps=not lapcrc)
        odd = _unreadable(events)
        if lapcrc and odd and problems and all(p in _UNMEASURED for p in problems):
            self.stats.lines_unread += len(problems)
            if self.on_retry is not None:
                lost = " and ".join(p.removeprefix("no ").removesuffix(" line") for p in problems)
                self.on_retry(f"{self.name}'s reply to {text!r} came without its {lost} line, "
                              f"garbled on the line (read {odd[0]!r}); taken: that line measures "
                              "nothing, and the reply's lap and result lines carry their CRC")
            problems = []
        problem = problems[0] if problems else None
        if problem is not None:
            if odd:
                raise GarbledReply(
                    f"{self.name}'s reply to {text!r} came back garbled: {problem} "
                    f"(read {odd[0]!r})", command=text, reason=problem, ran=ran, hint=LINE_HINT)
            if ran and " says " in problem:  # a count echoed with a digit flipped
                raise GarbledReply(
                    f"{self.name}'s reply to {text!r} does not add up: {problem} (a digit "
                    "flipped on the line, or the firmware parsed the command differently)",
                    command=text, reason=problem, ran=ran,
                    hint=f"{LINE_HINT}; if it repeats, check the firmware's version")
            raise DeviceError(
                f"{self.name} did not answer {text!r} as the protocol says: {problem}",
                hint=f"the firmware offers '{CAP_ELAP}' but did not print its lap counter"
                if elap and "m-lap-us" in problem else
                "the firmware's timestamp mode does not match its banner"
                if "m-lap-us" in problem else
                "is this MLPerf Tiny (EEMBC) benchmark firmware at the right baud rate?",
            )
        laps = self._verified_laps(events, text) if lapcrc and (laps_due or _has_laps(events)) \
            else tuple(e.us for e in events if isinstance(e, LapUs))
        results, checked = self._verified_results(events, text)
        elapsed = None if len(laps) != 2 else (laps[-1] - laps[0]) & _LAP_MASK
        messages = tuple(e.text for e in events if isinstance(e, Message))
        return InferResult(iterations, warmup, laps, elapsed, results, messages, checked)

    def results(self) -> np.ndarray:
        """``results%``: the class scores of the last inference (CRC-checked with ``rcrc``)."""
        text = cmd_results()
        return self._verified_results(self._refused_or(self._exchange(text), text), text)[0]

    def _verified_laps(self, events: list[DutEvent], command: str) -> tuple[int, ...]:
        """The two lap counter values of an ``infer`` reply, both lines CRC-checked (``lapcrc``):
        else they are read again with ``laps%`` (`ask`: never the inferences again). A reply
        intact but without lap lines is the firmware's: `DeviceError`."""
        if _laps_problem(events) is None:
            return tuple(e.us for e in events if isinstance(e, LapUs))
        if not _has_laps(events) and not _unreadable(events):
            raise DeviceError(
                f"{self.name} printed 0 m-lap-us lines for {command!r}, expected 2",
                hint="the firmware offers lapcrc but did not print its lap counter")
        self._asked_again(cmd_laps(), str(_laps_problem(events)), 1,
                          what=f"{self.name}'s lap lines of {command!r}",
                          how=f"read again with {cmd_laps()!r}")
        events = self.ask(cmd_laps(), _laps_problem)
        return tuple(e.us for e in events if isinstance(e, LapUs))

    @property
    def laps_checked(self) -> bool:
        """Whether lap lines must carry a matching CRC-32 (the DUT listed ``lapcrc``): one
        digit of a lap line hit on the line otherwise goes unseen."""
        return CAP_LAP_CRC in (self.capabilities or ())

    @property
    def results_checked(self) -> bool:
        """Whether result lines must carry a matching CRC-32 (the DUT listed ``rcrc``).

        Plain MLPerf Tiny firmware sends results unchecked: a corrupted digit goes unseen.
        """
        return CAP_RESULT_CRC in (self.capabilities or ())

    def timestamp(self) -> int | None:
        """``timestamp%``: the lap counter in performance mode; None in energy mode (a pulse).

        In performance mode a lap line garbled on the line is asked again (a timestamp is the
        counter at the moment of the command: the later one then). In energy mode never: the
        DUT pulsed its timestamp line, which the monitor counts, whatever came back.
        """
        text = cmd_timestamp()
        if self.timestamp_mode != "performance":
            events = self._refused_or(self._exchange(text), text)
            laps = [e.us for e in events if isinstance(e, LapUs)]
            return laps[-1] if laps else None

        checked = self.laps_checked

        def no_lap(events: list[DutEvent]) -> str | None:
            laps = [e for e in events if isinstance(e, LapUs)]
            if not laps:
                return "an m-lap-us line (performance mode)"
            if checked and not laps[-1].checked:
                return "an m-lap-us line with its CRC (lapcrc)"
            return None

        try:
            events = self.ask(text, no_lap)
        except DutError:
            raise
        except DeviceError as exc:
            if "came back garbled" in exc.message:
                raise
            raise DeviceError(
                f"{self.name} printed no m-lap-us line for {text!r} in performance mode",
                hint="the firmware's timestamp mode does not match its banner",
            ) from None
        return [e.us for e in events if isinstance(e, LapUs)][-1]

    # -- QUBO (rig extension) -----------------------------------------------------------------
    def qubo_load(
        self, n_vars: int, terms: Iterable[tuple[int, int, int]] | np.ndarray
    ) -> None:
        """Download a QUBO (terms (i, j, w), i <= j) with ``qload``; verified, retried once."""
        payload = encode_qubo(n_vars, terms)  # validates before anything is sent
        if not self._binary_offered(CAP_QUBO, need="QUBO commands"):
            raise DeviceError(
                f"{self.name}: a QUBO graph is a binary download, which this connection "
                "cannot carry",
                hint="connect the DUT directly, not through an IO manager's pass-through",
            )
        n_vars, arr = decode_qubo(payload)
        self._qubo = None
        self._with_one_retry(lambda p: self._qload_once(p, n_vars, len(arr)), payload, "qload")
        self._qubo = (n_vars, arr)

    def qubo_solve(self, timeout_us: int, seed: int, *, deadline_s: float | None = None) -> int:
        """``qsolve``: solve the loaded QUBO for `timeout_us`; the DUT's elapsed µs.

        `deadline_s` bounds the host's wait (default: the command deadline plus twice the
        solve timeout).
        """
        text = cmd_qsolve(timeout_us, seed)
        self._require_capability(CAP_QUBO, "QUBO commands")
        if deadline_s is None:
            deadline_s = self.command_timeout_s + 2.0 * timeout_us / 1e6
        events = self.command(text, deadline_s)
        self._one(events, QsolveStart, text)
        return self._one(events, QsolveDone, text).elapsed_us

    def qubo_result(self) -> QuboResult:
        """``qresult``: the best cost and state and the improvement timeline, checked.

        When the graph was loaded by this client, the reported best cost must be the cost of
        the reported state.
        """
        text = cmd_qresult()
        self._require_capability(CAP_QUBO, "QUBO commands")
        events = self.command(text)
        if self.results_checked:
            n_bytes = None if self._qubo is None else -(-self._qubo[0] // 8)
            power = CAP_POWER in (self.capabilities or ())
            events = self._ask_again_unless(lambda ev: _qresult_problem(ev, n_bytes, power),
                                            events, text, text)
        best = self._one(events, QbestCost, text).cost
        best_time = self._one(events, QbestTime, text).us
        raw = bytearray()
        for chunk in (e for e in events if isinstance(e, QstateChunk)):
            if chunk.offset != len(raw):
                raise DeviceError(
                    f"{self.name} sent state bytes at offset {chunk.offset} for {text!r}, "
                    f"expected offset {len(raw)}",
                    hint="state lines were lost or reordered: check the line",
                )
            raw += chunk.data
        bits = np.unpackbits(np.frombuffer(bytes(raw), dtype=np.uint8), bitorder="little")
        n_vars = self._qubo[0] if self._qubo is not None else bits.size
        if bits.size < n_vars or bits[n_vars:].any():
            raise DeviceError(
                f"{self.name} sent a state of {len(raw)} bytes for {n_vars} variables",
                hint="the DUT's graph differs from the one loaded: load it again",
            )
        state = bits[:n_vars].astype(bool)
        improvements = [(e.t_us, e.cost) for e in events if isinstance(e, Qimprove)]
        times = np.array([t for t, _ in improvements], dtype=np.int64)
        if np.any(np.diff(times) < 0):
            raise DeviceError(
                f"{self.name} listed improvements out of time order for {text!r}",
                hint="the firmware's qresult does not follow the protocol spec",
            )
        if self._qubo is not None:
            actual = qubo_cost(self._qubo[1], state)
            if actual != best:
                raise DeviceError(
                    f"{self.name} reported best cost {best}, but its best state costs {actual} "
                    "on the loaded graph",
                    hint="the DUT's graph or cost convention differs: load it again, check "
                    "the shim against protocols/dut/SPEC.md",
                )
        messages = tuple(e.text for e in events if isinstance(e, Message))
        said = {type(e): e for e in events if isinstance(e, QloadUs | Qsteps | Qenergy | Qpower)}
        if (Qenergy in said) != (Qpower in said):
            raise DeviceError(
                f"{self.name} reported {'energy' if Qenergy in said else 'power'} without "
                f"{'power' if Qenergy in said else 'energy'} for {text!r}",
                hint="the firmware's qresult does not follow the protocol spec: a solve's "
                "m-qenergy-uj- and m-qpower-uw- lines come together",
            )
        return QuboResult(best, best_time, state, improvements, messages,
                          load_us=_value(said.get(QloadUs), "us"),
                          steps=_value(said.get(Qsteps), "n"),
                          energy_uj=_value(said.get(Qenergy), "uj"),
                          power_uw=_value(said.get(Qpower), "uw"))

    def close(self) -> None:
        """Close the transport."""
        self._transport.close()

    def __enter__(self) -> DutClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- downloads ----------------------------------------------------------------------------
    def _with_one_retry(self, attempt: Callable[[bytes], None], data: bytes, method: str, *,
                        diagnose: bool = False) -> int:
        """Run `attempt(data)`; after a failed verification resynchronise and try once more,
        after a reply that came back garbled (no verification failed) up to `ASK_AGAIN` more
        times. With `diagnose` (a CRC check, which says only that something differs) the last
        failure reads the buffer back to name the first differing byte."""
        failures: list[_TransferFailed] = []
        garbled = 0
        while True:
            try:
                attempt(data)
                return len(failures) + 1
            except _TransferFailed as exc:
                failures.append(exc)
                if exc.garbled and garbled < ASK_AGAIN:
                    garbled += 1
                    self._asked_again("download", exc.reason, garbled, what=(
                        f"{self.name}: a {method} download of {len(data)} bytes"))
                elif not exc.garbled and sum(not f.garbled for f in failures) == 1:
                    self.stats.retries += 1
                else:
                    break
                self._resync_dut()
        last = failures[-1]
        offset = last.offset
        if offset is None and diagnose:
            offset = self._diagnose(data)
        where = f"; first difference at byte {offset}" if offset is not None else ""
        times = "twice" if len(failures) == 2 else f"{len(failures)} times"
        raise DownloadError(
            f"{method} download of {len(data)} bytes to {self.name} failed {times}: "
            + "; then ".join(f.reason for f in failures) + where,
            n_bytes=len(data), method=method, reason=last.reason, offset=offset,
            hint=last.hint or "bytes are lost or corrupted on the line: check the "
            "cable, ground and baud rate",
        )

    def _transfer_ask(self, text: str, problem: Callable[[list[DutEvent]], str | None],
                      timeout_s: float | None = None) -> list[DutEvent]:
        """`ask` inside a download attempt: what ends it is a `_TransferFailed`."""
        try:
            return self.ask(text, problem, timeout_s)
        except DutError as exc:
            raise _TransferFailed(
                f"the DUT refused {text!r}: {exc.message.partition(': ')[2] or exc.message}",
                hint="the data is larger than the DUT's input buffer: check the model's input "
                "size" if "too large" in exc.message or "Cannot load" in exc.message else "",
            ) from None
        except GarbledReply as exc:
            raise _TransferFailed(exc.message, garbled=True) from None
        except DeviceTimeout:
            raise
        except DeviceError as exc:
            raise _TransferFailed(exc.message) from None

    def _load_binary(self, data: bytes) -> None:
        """One ``bload`` attempt; `_TransferFailed` unless the DUT acknowledged our CRC (or,
        when its acknowledgement came garbled, ``db crc`` tells the same, where offered)."""
        crc = payload_crc(data)
        text = cmd_bload(len(data), crc)
        events = self._binary_exchange(text, data, BloadReady)
        _fail_on_ready_echo(events, len(data), text)
        _fail_on_refusal(events, text)
        done = [e for e in events if isinstance(e, BloadDone)]
        if done and done[0].crc == crc:
            return
        if CAP_DB_CRC in (self.capabilities or ()):
            # The acknowledgement (or a digit of it) came garbled: the buffer's own CRC tells.
            why = (f"its m-bload-done line acknowledged {done[0].crc:08x}" if done
                   else "its m-bload-done line came garbled")
            self._asked_again("bload", f"{why}; asked db crc", 1)
            self._check_buffer_crc(data)
            return
        if not done:
            raise _TransferFailed(f"{self.name} never said m-bload-done",
                                  garbled=bool(_unreadable(events)))
        raise _TransferFailed(
            f"{self.name} acknowledged CRC {done[0].crc:08x}, the data's is {crc:08x}"
        )

    def _qload_once(self, payload: bytes, n_vars: int, n_terms: int) -> None:
        """One ``qload`` attempt; `_TransferFailed` unless the DUT echoed the graph's size."""
        text = cmd_qload(len(payload), payload_crc(payload))
        events = self._binary_exchange(text, payload, QloadReady)
        _fail_on_ready_echo(events, len(payload), text)
        _fail_on_refusal(events, text)
        done = [e for e in events if isinstance(e, QloadDone)]
        if not done:
            raise _TransferFailed(f"{self.name} never said m-qload-done",
                                  garbled=bool(_unreadable(events)))
        if (done[0].n_vars, done[0].n_terms) != (n_vars, n_terms):
            raise _TransferFailed(
                f"{self.name} loaded {done[0].n_vars} variables and {done[0].n_terms} terms, "
                f"not {n_vars} and {n_terms}"
            )

    def _load_hex(self, data: bytes, per_command: int, *, by_crc: bool = False) -> None:
        """One hex attempt: ``db load`` (asked again when its reply came garbled), ``db <hex>``
        commands, then ``db crc`` (`by_crc`) or a ``db print`` read-back."""
        chunks = hex_chunks(data, per_command)
        announce = cmd_db_load(len(data))
        events = self._transfer_ask(announce, _lines(ExpectingBytes))
        expecting = [e for e in events if isinstance(e, ExpectingBytes)]
        if expecting[0].n != len(data):
            raise _TransferFailed(
                f"{self.name} answered {announce!r} with {expecting[0].n} bytes",
                hint="its input buffer may be smaller than the data: check the model's "
                "input size",
            )
        for k, chunk in enumerate(chunks, start=1):
            events = self._exchange(chunk)
            errors = _refusals(events)
            if errors:
                raise _TransferFailed(
                    f"{self.name} refused db command {k} of {len(chunks)}: {'; '.join(errors)}",
                    offset=(k - 1) * per_command,
                )
            done = any(isinstance(e, LoadDone) for e in events)
            if done and k < len(chunks):
                raise _TransferFailed(
                    f"{self.name} said m-load-done after {k} of {len(chunks)} db commands"
                )
            # Its m-load-done garbled: the check below says whether the data arrived.
            if not done and k == len(chunks) and not _unreadable(events):
                raise _TransferFailed(
                    f"sent {len(data)} bytes in {len(chunks)} db commands but {self.name} "
                    "never said m-load-done",
                    hint="bytes were lost on the line; lower per_command (26 behind an IO "
                    "manager) or the baud rate",
                )
        if by_crc:
            self._check_buffer_crc(data)
            return
        try:
            back = self.read_buffer(
                timeout_s=self._transfer_timeout(_DUMP_BYTES_PER_BYTE * len(data))
            )
        except DutError as exc:
            raise _TransferFailed(f"the db print read-back was refused: {exc.message}") from exc
        except GarbledReply as exc:
            raise _TransferFailed(exc.message, garbled=True) from None
        offset = _first_difference(data, back)
        if offset is not None:
            raise _TransferFailed(
                f"the db print read-back differs from the data at byte {offset} "
                f"({len(back)} bytes read back)",
                offset=offset,
            )

    def _check_buffer_crc(self, data: bytes) -> None:
        """``db crc``: `_TransferFailed` unless the DUT holds len(data) bytes of data's CRC-32.

        ``db crc`` is idempotent: a garbled reply is asked again (`ask`), and so is a count or
        CRC that differs from the data's (a digit may have been hit) until the DUT says the
        same twice alike, which is then what it holds.
        """
        text = cmd_db_crc()
        crc = payload_crc(data)
        said: list[tuple[int, int]] = []
        for k in range(1 + ASK_AGAIN):
            if k:
                self._asked_again(text, f"it holds {said[-1][0]} bytes of CRC "
                                  f"{said[-1][1]:08x}, not the data's", k)
            held = self._one(self._transfer_ask(text, _lines(BufferCrc)), BufferCrc, text)
            if (held.n, held.crc) == (len(data), crc):
                return
            if (held.n, held.crc) in said:
                break
            said.append((held.n, held.crc))
        n, got = said[-1]
        raise _TransferFailed(
            f"{self.name} holds {n} bytes of CRC {got:08x}; the data is "
            f"{len(data)} bytes of CRC {crc:08x}"
        )

    def _binary_exchange(
        self, text: str, payload: bytes, ready_kind: type[BloadReady | QloadReady]
    ) -> list[DutEvent]:
        """Send `text`; after the DUT's ready line write `payload` raw; events up to ``m-ready``.

        The payload goes out only if the DUT announced exactly its length: otherwise the DUT
        times out on its own and says so.
        """
        self._send(text)
        events = self._collect(text, self.command_timeout_s, stop=(Ready, ready_kind))
        ready = events[-1]
        if isinstance(ready, Ready):
            return events  # refused before the transfer
        assert isinstance(ready, (BloadReady, QloadReady))  # _collect stops at one of `stop`
        if ready.n == len(payload):
            view = memoryview(payload)
            for i in range(0, len(view), BINARY_WRITE_CHUNK):
                self._transport.write(bytes(view[i : i + BINARY_WRITE_CHUNK]))
        return events + self._collect(text, self._transfer_timeout(len(payload)))

    def _diagnose(self, data: bytes) -> int | None:
        """After a failed binary download: the first differing byte per ``db print``, if any."""
        try:
            back = self.read_buffer(
                timeout_s=self._transfer_timeout(_DUMP_BYTES_PER_BYTE * len(data))
            )
        except DeviceError:
            return None  # a diagnosis only: the download error says what matters
        return _first_difference(data, back)

    def _transfer_timeout(self, n_bytes: int) -> float:
        """A deadline for moving `n_bytes` over the line: 3x the time at its baud rate."""
        baud = getattr(self._transport, "baudrate", None) or DEFAULT_BAUD
        return self.command_timeout_s + 3.0 * n_bytes * 10 / baud

    def _binary_offered(self, capability: str, need: str = "") -> bool:
        """Whether this connection can use `capability` (negotiating first if needed).

        With `need`, a DUT without the capability is an error rather than False.
        """
        if not getattr(self._transport, "binary_ok", True):
            return False
        if need:
            self._require_capability(capability, need)
            return True
        if self.capabilities is None:
            self.negotiate()
        return capability in (self.capabilities or frozenset())

    def _require_capability(self, capability: str, what: str) -> None:
        if self.capabilities is None:
            self.negotiate()
        if capability not in (self.capabilities or frozenset()):
            offered = ", ".join(sorted(self.capabilities or ())) or "none"
            raise DeviceError(
                f"{self.name} does not speak the {what} (its capabilities: {offered})",
                hint=f"flash firmware that offers '{capability}' in its caps reply",
            )

    def _resync_dut(self) -> None:
        """Back to a known state before a retry: drain stray replies, then end any partial
        command in the DUT's buffer with a harmless ``name%`` and drain its reply."""
        self._drain()
        self._transport.write(encode_command(cmd_name()))
        self._collect(cmd_name(), self.command_timeout_s, check_restart=False)
        self._drain()

    def _drain(self) -> None:
        """Read and drop bytes until the line has been quiet for `_QUIET_S` (bounded)."""
        now = time.monotonic()
        limit, last = now + _DRAIN_LIMIT_S, now
        while now < limit and now - last < _QUIET_S:
            if self._transport.read():
                last = time.monotonic()
            now = time.monotonic()
        self._pending.clear()
        self._decoder.reset()
        self._out_of_sync = False

    # -- internals ----------------------------------------------------------------------------
    def _send(self, text: str) -> None:
        payload = encode_command(text)  # refuses what does not fit the DUT's 80 characters
        if self._out_of_sync:
            self._resync()
        self._transport.write(payload)

    def _exchange(self, text: str, timeout_s: float | None = None) -> list[DutEvent]:
        """Send `text`; its reply events up to ``m-ready`` (``e-`` lines included)."""
        self._send(text)
        return self._collect(text, self.command_timeout_s if timeout_s is None else timeout_s)

    def _collect(
        self,
        text: str,
        timeout_s: float,
        *,
        stop: tuple[type, ...] = (Ready,),
        check_restart: bool = True,
    ) -> list[DutEvent]:
        """Reply events of `text` up to the first of a `stop` kind, within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        events: list[DutEvent] = []
        while True:
            event = self._next_event(deadline)
            if event is None:
                self._out_of_sync = True
                self._unfinished = events
                got = ", ".join(type(e).__name__ for e in events[-5:]) or "nothing"
                raise DeviceTimeout(
                    f"{self.name} did not finish {text!r} within {timeout_s:g} s (got: {got})",
                    hint="the DUT stopped answering: check its power, reset line and port",
                )
            events.append(event)
            if isinstance(event, TimestampMode):
                self.timestamp_mode = event.mode
            if isinstance(event, stop):
                break
        if check_restart and any(isinstance(e, InitDone) for e in events):
            self._qubo = None
            self.capabilities = None
            raise DeviceError(
                f"{self.name} restarted while running {text!r}",
                hint="check its supply (brown-out) and its reset line",
            )
        return events

    def _next_event(self, deadline: float) -> DutEvent | None:
        """The next event, or None once the monotonic `deadline` has passed."""
        while not self._pending:
            if self.checkpoint is not None:
                self.checkpoint()
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

    def _verified_results(
        self, events: list[DutEvent], command: str
    ) -> tuple[np.ndarray, bool]:
        """The scores in a reply and whether their CRC-32 matched.

        With ``rcrc`` only a line whose CRC matched counts; otherwise, or after a mismatch,
        ``results%`` is asked once more, then `ResultError`. A plain DUT's reply without a
        result line is a `DeviceError` as before.
        """
        events = [e for e in events if not _lap_mismatch(e)]  # the laps' own business
        mismatch = any(isinstance(e, ResultCrcMismatch) for e in events)
        if self.results_checked or mismatch:
            events = self._ask_again_unless(_results_problem, events, command, cmd_results())
        found = self._one(events, Results, command)
        return np.asarray(found.values, dtype=np.float64), found.checked

    def _ask_again_unless(
        self,
        problem: Callable[[list[DutEvent]], str | None],
        events: list[DutEvent],
        command: str,
        again: str,
    ) -> list[DutEvent]:
        """`events` if `problem` finds none in them; else the reply to `again` (which re-prints
        the same result), asked at most `ASK_AGAIN` times, the first that has none; else
        `ResultError` naming `command` and the problems."""
        problems = [problem(events)]
        while problems[-1] is not None:
            if len(problems) > ASK_AGAIN:
                raise ResultError(
                    f"{self.name}: the result of {command!r} failed verification "
                    f"{len(problems)} times: {problems[0]}; then, asked again with {again!r}: "
                    + "; ".join(str(p) for p in problems[1:]),
                    command=command, reason=str(problems[-1]), hint=LINE_HINT,
                )
            self.stats.result_retries += 1
            self._asked_again(again, str(problems[-1]), len(problems))
            events = self._refused_or(self._exchange(again), again)
            problems.append(problem(events))
        return events

    def _refused_or(self, events: list[DutEvent], text: str) -> list[DutEvent]:
        """`events`, unless they hold an intact ``e-[...]`` refusal: then `DutError`. (An
        ``e-`` line without brackets may be an ``m-`` line with one bit flipped: left in.)"""
        errors = _refusals(events)
        if errors:
            raise DutError(f"{self.name} refused {text!r}: {'; '.join(errors)}", command=text)
        return events


#: The result lines that carry a CRC (their `checked` says whether it matched).
_CrcLine = Results | QbestCost | QbestTime | QstateChunk | Qimprove | QloadUs | Qsteps | Qenergy \
    | Qpower


def _crc_problem(events: list[DutEvent], kinds: tuple[type[_CrcLine], ...]) -> str | None:
    """What is wrong with the result lines of `kinds` in a reply that must be CRC-checked."""
    bad = [e for e in events if isinstance(e, ResultCrcMismatch)]
    if bad:
        return (f"CRC mismatch on {bad[0].line[:48]!r} (it carried {bad[0].announced:08x}, "
                f"its text gives {bad[0].computed:08x})")
    unchecked = [e for e in events if isinstance(e, kinds) and not e.checked]
    if unchecked:
        return f"a {type(unchecked[0]).__name__} line without its CRC"
    return None


def _results_problem(events: list[DutEvent]) -> str | None:
    """Why a reply holds no CRC-checked class scores, or None when it does."""
    problem = _crc_problem(events, (Results,))
    if problem is None and not any(isinstance(e, Results) for e in events):
        problem = "no intact result line (CRC-checked m-results-[...])"
    return problem


def _qresult_problem(events: list[DutEvent], n_bytes: int | None,
                     power: bool = False) -> str | None:
    """Why a ``qresult`` reply is not a whole, CRC-checked result (a state of `n_bytes`
    bytes when known; with `power`, the DUT's power and energy lines too), or None when it is."""
    problem = _crc_problem(events, (QbestCost, QbestTime, QstateChunk, Qimprove, QloadUs,
                                    Qsteps, Qenergy, Qpower))
    if problem is not None:
        return problem
    # A power line corrupted in its prefix would be a plain message: lost, not wrong. A DUT
    # that measures its power (caps `power`) sends both lines with every result.
    for kind in (QbestCost, QbestTime, *((Qenergy, Qpower) if power else ())):
        if sum(isinstance(e, kind) for e in events) != 1:
            return f"not exactly one intact {kind.__name__} line"
    offsets = [e.offset for e in events if isinstance(e, QstateChunk)]
    sizes = [len(e.data) for e in events if isinstance(e, QstateChunk)]
    if not offsets or offsets != list(np.cumsum([0, *sizes[:-1]])):
        return "state lines lost (m-qstate offsets not contiguous from 0)"
    if n_bytes is not None and sum(sizes) != n_bytes:
        return f"a state of {sum(sizes)} bytes, not {n_bytes} (state lines lost)"
    return None


def _value(event: DutEvent | None, field_name: str) -> int | None:
    """The number an optional reply line carried, None when the DUT did not send it."""
    return None if event is None else int(getattr(event, field_name))


def _unreadable(events: list[DutEvent]) -> list[str]:
    """The lines of a reply the rig could not read as the protocol's (garbled on the line, or
    not protocol at all): `Unparsed`, any ``m-`` line it does not know, an ``e-`` line without
    brackets, a result line that failed its CRC; their text, shortened."""
    out: list[str] = []
    for e in events:
        if isinstance(e, Unparsed | Message):
            out.append(e.text[:48])
        elif isinstance(e, DutErrorLine) and not e.bracketed:
            out.append(f"e-{e.text[:46]}")
        elif isinstance(e, ResultCrcMismatch):
            out.append(e.line[:48])
    return out


def _line_text(event: DutEvent) -> str:
    """The line an unreadable event came from, as the DUT sent it (``m-`` or ``e-`` again)."""
    if isinstance(event, Message):
        return f"m-{event.text}"
    if isinstance(event, DutErrorLine):
        return f"e-[{event.text}]" if getattr(event, "bracketed", True) else f"e-{event.text}"
    return str(getattr(event, "text", event))


def _refusals(events: list[DutEvent]) -> list[str]:
    """The texts of the ``e-[...]`` lines in a reply (an ``e-`` line without brackets may be an
    ``m-`` line with one bit flipped: `_unreadable` has it)."""
    return [e.text for e in events if isinstance(e, DutErrorLine) and e.bracketed]


def _like_init_done(event: DutEvent) -> bool:
    """Whether `event` is ``m-init-done`` with one or two characters hit on the line (a banner
    line: no other line of the protocol is that close to it)."""
    if not isinstance(event, Message):
        return False
    text, want = event.text, "init-done"
    return len(text) == len(want) and sum(a != b for a, b in zip(text, want, strict=True)) <= 2


def _line_names(events: list[DutEvent]) -> list[str]:
    """What each event is, for a message: its kind (an unreadable line quoted)."""
    return [repr(_unreadable([e])[0]) if _unreadable([e]) else type(e).__name__ for e in events]


def _command_word(text: str) -> str:
    """What `DutStats.asked_again` counts `text` under: its command word, ``db`` with its
    subcommand (``db load``, ``db crc``, ``db print``), without arguments."""
    words = text.split()
    if words[:1] == ["db"] and len(words) > 1 and words[1] in ("load", "crc", "print"):
        return f"db {words[1]}"
    return words[0] if words else text


def _lines(*kinds: type) -> Callable[[list[DutEvent]], str | None]:
    """A `DutClient.ask` check: the first of `kinds` missing from a reply, or None."""
    def missing(events: list[DutEvent]) -> str | None:
        for kind in kinds:
            if not any(isinstance(e, kind) for e in events):
                return f"the expected {kind.__name__} line"
        return None
    return missing


#: The lines of an ``infer`` reply that measure nothing: one of them lost on the line is taken
#: when every line that measures carries its CRC (``rcrc`` and ``lapcrc``). Not
#: ``m-infer-start-N``: N is what the laps time.
_UNMEASURED = ("no m-warmup-start line", "no m-infer-done line")


def _infer_problems(events: list[DutEvent], iterations: int, warmup: int, *,
                    laps_due: bool, check_laps: bool = True) -> list[str]:
    """What an ``infer N W`` reply lacks or says wrong (its result apart, and its lap lines
    unless `check_laps`), in order."""
    out = []
    for kind, line, asked in ((WarmupStart, "m-warmup-start", warmup),
                              (InferStart, "m-infer-start", iterations)):
        said = [e.n for e in events if isinstance(e, kind)]
        if not said:
            out.append(f"no {line} line")
        elif said[0] != asked:
            out.append(f"{line} says {said[0]}, not {asked}")
    if not any(isinstance(e, InferDone) for e in events):
        out.append("no m-infer-done line")
    laps = sum(isinstance(e, LapUs) for e in events)
    if check_laps and (laps_due or laps) and laps != 2:
        out.append(f"{laps} m-lap-us lines, expected 2")
    return out


def _lap_mismatch(event: DutEvent) -> bool:
    """Whether `event` is a lap line whose CRC failed (``lapcrc``)."""
    return isinstance(event, ResultCrcMismatch) and event.line.startswith("m-lap-us-")


def _has_laps(events: list[DutEvent]) -> bool:
    return any(isinstance(e, LapUs) or _lap_mismatch(e) for e in events)


def _laps_problem(events: list[DutEvent]) -> str | None:
    """Why a reply does not hold exactly two CRC-checked lap lines (``lapcrc``), or None."""
    bad = [e for e in events if _lap_mismatch(e)]
    if bad:
        assert isinstance(bad[0], ResultCrcMismatch)
        return (f"CRC mismatch on {bad[0].line[:40]!r} (it carried {bad[0].announced:08x}, its "
                f"text gives {bad[0].computed:08x})")
    laps = [e for e in events if isinstance(e, LapUs)]
    if len(laps) != 2:
        return f"{len(laps)} m-lap-us lines, expected 2"
    if not all(e.checked for e in laps):
        return "an m-lap-us line without its CRC"
    return None


def _fail_on_ready_echo(events: list[DutEvent], n: int, text: str) -> None:
    """`_TransferFailed` (`garbled`) when the ready line echoed another count than the `n`
    bytes announced: a digit flipped on the line (the payload was not sent; the DUT waited for
    it and timed out), or the DUT parsed the command differently (then again next time)."""
    echo = [e.n for e in events if isinstance(e, BloadReady | QloadReady)]
    if echo and echo[0] != n:
        raise _TransferFailed(f"the DUT's ready line echoed {echo[0]} bytes for {text!r}, not "
                              f"{n}: the data was not sent", garbled=True)


def _fail_on_refusal(events: list[DutEvent], text: str) -> None:
    """`_TransferFailed` on an ``e-[...]`` refusal, `garbled` when a line of the reply could not
    be read (a ready line garbled: the DUT then timed out waiting for the data)."""
    errors = _refusals(events)
    if errors:
        too_large = any("too large" in e for e in errors)
        raise _TransferFailed(
            f"the DUT refused {text!r}: {'; '.join(errors)}",
            hint="the data is larger than the DUT's input buffer: check the model's input size"
            if too_large else "", garbled=bool(_unreadable(events)),
        )


def _first_difference(expected: bytes, got: bytes) -> int | None:
    """The first offset where `got` differs from `expected` (None if it starts with all of it)."""
    n = min(len(expected), len(got))
    a = np.frombuffer(expected, dtype=np.uint8, count=n)
    b = np.frombuffer(got, dtype=np.uint8, count=n)
    diff = np.flatnonzero(a != b)
    if diff.size:
        return int(diff[0])
    return None if len(got) >= len(expected) else n
