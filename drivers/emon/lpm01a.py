"""Driver for the ST LPM01A (X-NUCLEO-LPM01A "PowerShield") energy monitor.

One reader thread owns every read from the port: it decodes the stream, hands command replies
to the calling thread through a queue, and assembles data into `Chunk`s for the `on_chunk`
callback. Up to 5 kHz the board streams ``ascii_dec`` text, above it ``bin_hexa`` binary words
(up to 100 kHz); the codec switches between binary data and text replies by itself.

D7 events (the DUT's timestamp GPIO): in ascii_dec each ``event N ris`` line becomes a 0 in the
chunk's GPIO bits at exactly the sample the board placed it before. Their numbers must run on by
one, as the MLPerf Tiny runner requires (mlcommons/tiny ``benchmark/runner/main.py``,
``print_energy_results``: "Timestamps are not consecutive"): a gap means an edge was lost, and
the acquisition fails with `fault` (and `stop` raises it), never a silently shifted window. How
D7 events arrive in bin_hexa is not public, so above the ascii_dec limit the driver does not ask
for them and refuses ASC energy windows (`sees_every_edge_with`).

Configuration follows the public hosts: ``trigdelay 0`` sent explicitly (its default is 1 ms,
per the command table in mlcommons/tiny ``power_manager.py``, which sends it), ``funcmode`` only
after ``output current`` (the same table: funcmode applies only with output current). Queries
take their value from the ack line (``ack volt get 3292-03``, Zephyr's host) or, failing that,
from the next prompt line.

Lost samples: an overrun the board reports in its stream (``error acquisition overrun`` with
``Error detail: N samples lost``) becomes a gap of N sample ids right there, so the recorder
fails the window over it; a shortfall only a ``TimeStamp`` shows (place unknown) is counted in
`stats.dropped`. A port that fails mid-run (USB unplugged) stops the reader; `fault` then says
so, and the recorder's waits end with it at once.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy, Spec
from drivers.emon.base import (
    CallbackErrors,
    Chunk,
    ChunkCallback,
    EnergyMonitor,
    identifies_as_simulator,
    whole_millivolts,
)
from drivers.errors import DeviceError, DeviceTimeout, InstrumentError
from drivers.transport import SerialTransport
from protocols.errors import ActionableError, ProtocolError
from protocols.lpm01a.codec import (
    ASCII_DEC_MAX_HZ_UNLIMITED,
    VOLT_MAX_MV,
    VOLT_MIN_MV,
    Ack,
    AcquisitionCompleted,
    AcquisitionEnd,
    BoardError,
    BoardInfo,
    EdgeEvent,
    ErrorDetail,
    ErrorReply,
    Event,
    Garbled,
    Lpm01aDecoder,
    MetaFrame,
    Overcurrent,
    Samples,
    Text,
    TimeStamp,
    encode,
    format_millivolts,
    freq_token,
    is_overrun,
    lost_samples,
    parse_number,
)

log = logging.getLogger(__name__)

BAUDRATE = 3_686_400
#: At connect, leftover output of a previous session counts as over after this long of silence.
QUIET_S = 0.1
#: ... but a board that never goes quiet is not waited for longer than this.
FLUSH_MAX_S = 1.5
#: How long an `error` line may wait for its `Error detail` line.
DETAIL_WAIT_S = 0.5
#: How long `stop` may take to report `Acquisition completed` (the board drains its buffer).
STOP_TIMEOUT_S = 5.0
_CABLE_HINT = "check the USB cable and that the PowerShield firmware is running"
#: Data formats `configure` can ask for.
FORMATS = ("ascii_dec", "bin_hexa")


class ByteTransport(Protocol):
    """What the driver needs from a transport (`SerialTransport` or a test double)."""

    def write(self, data: bytes) -> None: ...
    def read(self) -> bytes: ...
    def reset_input(self) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class _ReaderFailed:
    """Put on the reply queue when the reader thread died, so waiters fail at once."""

    error: BaseException


#: ST's user manual of the board, read first-hand (docs/reference facts, 2026-11-28).
UM2243 = "ST UM2243 Rev 2, X-NUCLEO-LPM01A user manual"
#: What the LPM01A's accuracy is, as ST publishes it (see `drivers.emon.accuracy`).
ACCURACY = MonitorAccuracy(
    current_ranges=(
        # Dynamic mode (acqmode dyn, the only one the driver uses): 100 nA to 50 mA, "accuracy
        # in the range of 2 %" (UM2243 §10). ST gives no offset term: ±2 % of reading, offset 0.
        RangeAccuracy("dynamic", 50e-3, Spec(
            gain=0.02, offset=0.0,
            source=f"{UM2243}, §10 (dynamic measurement): 100 nA to 50 mA, accuracy in the "
                   "range of 2 %")),
    ),
    voltage=None,  # it sets the supply (`set_voltage`); the trace holds the value it was sent
    voltage_set=NotPublished(
        what="LPM01A supply voltage setting accuracy",
        searched=f"{UM2243} (§9 gives only a dropout of at most 60 mV in static mode, no "
                 "setting accuracy); docs/pages search 'X-NUCLEO-LPM01A UM2243 accuracy'"),
    clock=NotPublished(
        what="LPM01A sample clock tolerance",
        searched=f"{UM2243} (§9, §10: sampling rates only); docs/pages search "
                 "'X-NUCLEO-LPM01A UM2243 accuracy'"),
    notes="Dynamic mode ranges by itself and reports no range: every reading up to 50 mA is "
          "in the one declared range; UM2243 states no figure below 100 nA nor above 50 mA "
          "(static mode, ±2 % from 1 nA to 200 mA with the current varying < 10 % during an "
          "acquisition, §9, is not used by the driver). No temperature class is given; the "
          "board's firmware help asks for a recalibration after a change of more than 5 °C.",
)


class Lpm01a(EnergyMonitor):
    """The PowerShield over its USB virtual COM port, streaming current in ascii_dec format."""

    driver = "lpm01a"
    measures_voltage = False  # it sets the supply and measures current
    #: Why ASC energy windows are refused above the ascii_dec limit (see the module docstring).
    every_edge_reason = (
        f"above {ASCII_DEC_MAX_HZ_UNLIMITED} Hz the LPM01A streams bin_hexa, and how it sends "
        "D7 events (the DUT's timestamp edges) in bin_hexa is not public (unconfirmed without "
        "hardware), so the rig cannot take the DUT's timestamp edges from it"
    )
    every_edge_hint = (
        f"set [emon] sample_rate_hz to {ASCII_DEC_MAX_HZ_UNLIMITED} or less (the ascii_dec "
        "limit), where D7 events come as `event N ris` lines; record faster traces without "
        "windows with `rig emon record`"
    )
    #: How long a command may wait for its ack.
    command_timeout_s = 2.0

    def __init__(
        self, transport: ByteTransport, *, voltage_limit_v: float, simulated: bool = False
    ) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v)
        self.transport = transport
        self.simulated = simulated
        self.version: str | None = None
        self._voltage_v: float | None = None
        self._sample_rate_hz: float | None = None
        self._settings: dict[str, str] = {}
        self._decoder = Lpm01aDecoder()
        self._replies: queue.Queue[Event | _ReaderFailed] = queue.Queue()
        # Guards the decoder and the chunk assembly (the reader vs. the caller).
        self._lock = threading.Lock()
        # One command at a time, so that a reply is never taken by the wrong waiter.
        self._command_lock = threading.Lock()
        self._flush_wanted = False
        self._flush_done = threading.Event()
        self._last_rx = time.monotonic()
        self._reader: threading.Thread | None = None
        self._reader_stop = threading.Event()
        self._reader_error: BaseException | None = None
        self._on_chunk: ChunkCallback | None = None
        self._callback_errors = CallbackErrors("LPM01A")
        self._pending_edges: list[int] = []
        self._acq_shortfall = 0
        # Sample ids = decoded index + samples the board said it lost (overruns) so far.
        self._id_offset = 0
        self._next_id = 0  # one past the last sample id handed to `on_chunk`
        self._decoded = 0  # samples decoded up to the event `_digest` is at
        self._overrun = False  # an overrun error came; its detail (the count) is next
        self._last_event: int | None = None  # number of the last D7 event this acquisition
        self._ended = False  # the board ended the acquisition (completed / 0xF4 frame)
        # What the stream itself showed wrong (a lost D7 event, a board error frame).
        self._stream_fault: DeviceError | None = None
        self._fault: DeviceError | None = None
        self._running = False
        self._connected = False  # host control taken: close() must give it back
        self._closed = False

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        port: str,
        *,
        voltage_limit_v: float,
        baudrate: int = BAUDRATE,
        simulated: bool = False,
    ) -> Lpm01a:
        """Open `port`, take host control and read the firmware version."""
        transport = SerialTransport(port, baudrate, name="LPM01A")
        monitor = cls(transport, voltage_limit_v=voltage_limit_v, simulated=simulated)
        return cls._connect_or_close(monitor)

    def connect(self) -> None:
        """Start the reader, stop and flush a previous session's acquisition, ``htc``, the DUT
        off (``pwr off``), ``version``."""
        if self._reader is None:
            self._reader = threading.Thread(target=self._read_loop, name="lpm01a-reader")
            self._reader.daemon = True
            self._reader.start()
        # A previous session may have left an acquisition streaming: stop it, let it drain.
        # Host control first, so that `stop` is acked, not refused with an error line that
        # could come after the flush and be taken for a refusal of the next command.
        self.transport.write(encode("htc"))
        self.transport.write(encode("stop"))
        self._last_rx = time.monotonic()
        give_up = time.monotonic() + FLUSH_MAX_S
        while time.monotonic() - self._last_rx < QUIET_S and time.monotonic() < give_up:
            time.sleep(0.01)
        # The reader flushes between two reads, so no read in flight can straddle the flush.
        self._flush_done.clear()
        self._flush_wanted = True
        if not self._flush_done.wait(1.0) and self._reader_error is None:
            raise DeviceError("LPM01A: the reader thread did not flush the port", hint=_CABLE_HINT)
        self._command("htc")
        self._connected = True
        # A crashed session leaves the supply on: `pwr on` would then not reboot the DUT, and
        # its boot banner would never come. Off here, so the runner's power-on is a power cycle.
        self._command("pwr off")
        self._settings["pwr"] = "off"
        self.version = self._query("version")
        # The virtual bench's board answers e.g. "1.0.5-sim": simulated, whatever the caller said.
        self.simulated = self.simulated or identifies_as_simulator(self.version)

    def close(self) -> None:
        """Stop, switch the DUT off, give control back (``hrc``), close the port. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            self._stop_while_closing()
        if self._connected and self._reader_error is None:
            self.power_off()
            try:
                self._command("hrc")
            except Exception as exc:
                log.warning("LPM01A: hrc while closing failed: %s", exc)
        self._reader_stop.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=2.0)
        try:
            self.transport.close()
        except Exception as exc:
            log.warning("LPM01A: closing the port failed: %s", exc)


    # -- EnergyMonitor ------------------------------------------------------------------------
    @property
    def sample_rate(self) -> float:
        """The configured sample rate [Hz]."""
        if self._sample_rate_hz is None:
            raise DeviceError("LPM01A: sample rate asked before configure()",
                              hint="call configure(voltage, sample_rate) first")
        return self._sample_rate_hz

    @classmethod
    def sees_every_edge_with(cls, *, sample_rate_hz: float | None = None,
                             **options: Any) -> bool:
        """Every D7 edge is seen only at ascii_dec rates (`every_edge_reason`)."""
        return sample_rate_hz is None or sample_rate_hz <= ASCII_DEC_MAX_HZ_UNLIMITED

    @property
    def sees_every_edge(self) -> bool:  # type: ignore[override]  # a class attribute on the base
        """False once configured above the ascii_dec limit (bin_hexa: D7 framing not public)."""
        return self.sees_every_edge_with(sample_rate_hz=self._sample_rate_hz)

    @classmethod
    def check_setup(cls, voltage: float, sample_rate: float, *, voltage_limit_v: float,
                    **options: Any) -> None:
        """The supply the board can give (1.8..3.3 V) within the limit, and a rate it knows."""
        cls._millivolts(voltage, voltage_limit_v)
        freq_token(sample_rate)

    @staticmethod
    def _millivolts(voltage: float, voltage_limit_v: float) -> int:
        """The whole millivolts sent for `voltage`; refused above the limit or the board's
        range."""
        return whole_millivolts(
            voltage, voltage_limit_v, (VOLT_MIN_MV, VOLT_MAX_MV), who="LPM01A",
            hint="set a supply voltage the PowerShield can deliver in the bench file")

    def configure(
        self, voltage: float, sample_rate: float, *, data_format: str | None = None
    ) -> None:
        """Supply `voltage` [V], stream current at `sample_rate` [Hz], D7 falling edges as events.

        `data_format` is ``ascii_dec`` or ``bin_hexa``; by default ascii_dec up to 5 kHz (where
        it can stream without end) and bin_hexa above. Everything is checked before the first
        byte goes out.
        """
        millivolts = self._millivolts(voltage, self.voltage_limit_v)
        volt = format_millivolts(millivolts / 1000)
        freq = freq_token(sample_rate)
        if data_format is None:
            data_format = "bin_hexa" if sample_rate > ASCII_DEC_MAX_HZ_UNLIMITED else "ascii_dec"
        if data_format not in FORMATS:
            raise DeviceError(f"LPM01A: unknown data format {data_format!r}",
                              hint="use ascii_dec or bin_hexa (or leave it to the driver)")
        if data_format == "ascii_dec" and sample_rate > ASCII_DEC_MAX_HZ_UNLIMITED:
            raise DeviceError(
                f"LPM01A: {sample_rate:g} Hz is too fast for ascii_dec streaming",
                hint=f"use at most {ASCII_DEC_MAX_HZ_UNLIMITED:g} Hz with ascii_dec, or bin_hexa",
            )
        if self._running:
            raise DeviceError("LPM01A: configure() during an acquisition",
                              hint="stop() first")
        # The order of the public hosts: mlcommons/tiny power_manager.py sends acqtime, trigdelay
        # 0, trigsrc, eventsrc, output, format, freq, volt; funcmode applies only with output
        # current (its command table), so it goes after it. The format/rate order is the
        # board's own constraint: it refuses a rate ascii_dec cannot stream while ascii_dec is
        # set, so bin_hexa goes before a high rate and a low rate before ascii_dec.
        settings = {
            "volt": volt,
            "acqtime": "0",
            # Its default is 1m (the command table); sent explicitly, as the MLPerf runner does.
            "trigdelay": "0",
            "trigsrc": "sw",
        }
        if data_format == "ascii_dec":
            settings["eventsrc"] = "d7 fal"
        # bin_hexa: not asked for. How the board frames D7 events in bin_hexa is not public;
        # whether it keeps an eventsrc set by an earlier session is unconfirmed without hardware.
        settings |= {"output": "current", "acqmode": "dyn", "funcmode": "optim"}
        if data_format == "bin_hexa":
            settings |= {"format": data_format, "freq": freq}
        else:
            settings |= {"freq": freq, "format": data_format}
        self._settings.pop("eventsrc", None)
        for name, value in settings.items():
            self._command(f"{name} {value}")
            self._settings[name] = value
        self._voltage_v = millivolts / 1000
        self._sample_rate_hz = float(sample_rate)

    def power_on(self) -> None:
        """Switch the DUT supply on (``pwr on``)."""
        self._command("pwr on")
        self._settings["pwr"] = "on"

    def power_off(self) -> None:
        """Switch the DUT supply off (``pwr off``); only logs if the board is already gone."""
        if self._reader_error is not None:  # nothing can be sent: `fault` said so already
            log.info("LPM01A: pwr off not sent: the port failed earlier")
            return
        try:
            self._command("pwr off")
            self._settings["pwr"] = "off"
        except Exception as exc:  # called on error paths: never mask the original error
            log.warning("LPM01A: pwr off failed: %s", exc)

    def start(self, on_chunk: ChunkCallback) -> None:
        """Start an unlimited acquisition; chunks go to `on_chunk` on the reader thread."""
        if self._sample_rate_hz is None:
            raise DeviceError("LPM01A: start() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        if self._running:
            raise DeviceError("LPM01A: start() while already acquiring", hint="stop() first")
        with self._lock:
            self._decoder.reset_count()
            self._pending_edges.clear()
            self._acq_shortfall = 0
            self._id_offset = self._next_id = self._decoded = 0
            self._overrun = False
            self._last_event = None
            self._ended = False
            self._stream_fault = None
            self._callback_errors.clear()
            self._on_chunk = on_chunk
        try:
            self._command("start")
        except BaseException:
            with self._lock:
                self._on_chunk = None
            raise
        self._running = True

    def stop(self) -> None:
        """Stop; returns once the acquisition ended and every sample was delivered.

        ``Acquisition completed`` (or a bin_hexa 0xF4 frame) may come before or after the ack of
        ``stop`` (the MLPerf runner waits for the completion alone): either order is taken.
        After the port failed (`fault`) there is nothing left to stop or deliver: it only ends.
        A lost D7 event or an error the board reported in the stream is raised here too.
        """
        if not self._running:
            return
        try:
            if self._reader_error is None and not self._ended:
                self._stop_and_wait()
        finally:
            self._running = False
            with self._lock:
                self._on_chunk = None
                if self._pending_edges:
                    self.stats.note(
                        f"{len(self._pending_edges)} D7 edge(s) after the last sample were dropped"
                    )
                    self._pending_edges.clear()
        self._callback_errors.raise_kept()
        if self._stream_fault is not None:
            raise self._stream_fault

    def _stop_and_wait(self) -> None:
        """Send ``stop``; wait for the end of the acquisition whatever the order of the ack."""
        what = "stop (waiting for 'Acquisition completed')"
        with self._command_lock:
            self._drain_replies()
            if self._ended:  # it ended by itself while the replies were drained
                return
            self.transport.write(encode("stop"))
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while True:
                event = self._next_reply(deadline, what)
                if isinstance(event, AcquisitionCompleted | AcquisitionEnd):
                    return
                if isinstance(event, ErrorReply):
                    detail = self._error_detail(event)
                    raise InstrumentError(f"LPM01A refused 'stop': {detail}", command="stop",
                                          hint=_CABLE_HINT)

    @property
    def fault(self) -> DeviceError | None:
        """Why the stream ended mid-acquisition (the port failed: USB unplugged), else None.

        The recorder asks while it waits, so the run ends at once with this, not at a deadline.
        """
        error = self._reader_error
        if not self._running:
            return None
        if error is None:
            return self._stream_fault
        if self._fault is None:
            what = error.message if isinstance(error, ActionableError) else str(error)
            self._fault = DeviceError(
                f"{what}; its stream stopped after {self.stats.samples:,} samples",
                hint="reconnect the PowerShield and run again; it supplies the DUT, so the rig "
                "could not switch the DUT off: a board on USB power cut the supply as it went, "
                "one on an external supply still powers the DUT",
            )
        return self._fault

    def set_voltage(self) -> tuple[float, str] | None:
        """The PowerShield sets the supply and measures current only: the value it was sent."""
        if self._voltage_v is None:
            return None
        return self._voltage_v, f"set: LPM01A volt {self._settings.get('volt', '?')}"

    def settings(self) -> dict[str, Any]:
        """Every setting sent to the board, plus identity."""
        return {
            "driver": self.driver,
            "port": getattr(self.transport, "url", None),
            "baudrate": getattr(self.transport, "baudrate", None),
            "simulated": self.simulated,
            "version": self.version,
            "voltage_v": self._voltage_v,
            "sample_rate_hz": self._sample_rate_hz,
            "voltage_limit_v": self.voltage_limit_v,
            # The dynamic acquisition mode (acqmode dyn) ranges by itself: no range to choose.
            "current_range": "auto",
            **dict(self._settings),
            "accuracy": self.accuracy().to_json(),
        }

    def accuracy(self) -> MonitorAccuracy:
        """ST's published accuracy of the dynamic mode (`ACCURACY`)."""
        return ACCURACY

    def read_voltage(self) -> float:
        """The supply voltage the board reports (``volt get``) [V].

        Zephyr's host reads it as ``DDDD-EE`` from the ack line (``ack volt get 3292-03``, a
        value that need not equal the one set); ``3300m`` is taken too.
        """
        text = self._query("volt get")
        try:
            return parse_number(text.split()[0] if text.split() else text)
        except ProtocolError as exc:
            raise InstrumentError(f"LPM01A: 'volt get' answered {text!r}, not a voltage",
                                  command="volt get", hint=_CABLE_HINT) from exc

    def self_test(self) -> dict[str, Any]:
        """Ask the board for its version again (proves it answers)."""
        return {
            "driver": self.driver,
            "version": self._query("version"),
            "port": getattr(self.transport, "url", None),
            "simulated": self.simulated,
        }

    # -- commands -----------------------------------------------------------------------------
    def _command(self, cmd: str, timeout_s: float | None = None) -> Ack:
        """Send `cmd`, wait for its ack; an error reply raises `InstrumentError`."""
        data = encode(cmd)
        # Match the whole echo (as the reference runner does), so a late ack of an abandoned
        # `pwr on` can never be taken for the ack of `pwr off`.
        echo = " ".join(cmd.split()).lower()
        with self._command_lock:
            if self._reader_error is not None:
                raise DeviceError(f"LPM01A: cannot send {cmd!r}: the port failed earlier: "
                                  f"{self._reader_error}", hint=_CABLE_HINT)
            self._drain_replies()
            self.transport.write(data)
            deadline = time.monotonic() + (timeout_s or self.command_timeout_s)
            while True:
                event = self._next_reply(deadline, cmd)
                if isinstance(event, Ack) and echo in event.echoed.lower():
                    return event
                if isinstance(event, ErrorReply):
                    detail = self._error_detail(event)
                    raise InstrumentError(
                        f"LPM01A refused {cmd!r}: {detail}", command=cmd,
                        hint="check the value against the PowerShield's ranges (UM2269)",
                    )

    def _query(self, cmd: str) -> str:
        """A command that returns a value: on its ack line (``ack volt get 3292-03``, as
        Zephyr's host reads it), else on the next prompt line."""
        value = self._command(cmd).value(cmd)
        if value is not None:
            return value
        event = self._wait_for(lambda ev: isinstance(ev, Text), self.command_timeout_s, cmd)
        assert isinstance(event, Text)
        return event.line

    def _error_detail(self, error: ErrorReply) -> str:
        deadline = time.monotonic() + DETAIL_WAIT_S
        while True:
            try:
                event = self._next_reply(deadline, "error detail")
            except DeviceTimeout:
                return error.text or "no detail given"
            if isinstance(event, ErrorDetail):
                return event.text or error.text or "no detail given"

    def _wait_for(self, wanted: Callable[[Event], bool], timeout_s: float, what: str) -> Event:
        deadline = time.monotonic() + timeout_s
        while True:
            event = self._next_reply(deadline, what)
            if wanted(event):
                return event

    def _next_reply(self, deadline: float, what: str) -> Event:
        remaining = deadline - time.monotonic()
        try:
            item = self._replies.get(timeout=max(remaining, 0.0))
        except queue.Empty:
            raise DeviceTimeout(f"LPM01A: no reply to {what!r} in time", hint=_CABLE_HINT) from None
        if isinstance(item, _ReaderFailed):
            self._replies.put(item)  # keep failing every later waiter too
            raise DeviceError(f"LPM01A: the port failed while waiting for {what!r}: "
                              f"{item.error}", hint=_CABLE_HINT) from item.error
        return item

    def _drain_replies(self) -> None:
        while True:
            try:
                item = self._replies.get_nowait()
            except queue.Empty:
                return
            if isinstance(item, _ReaderFailed):
                self._replies.put(item)
                return

    # -- reader thread ------------------------------------------------------------------------
    def _read_loop(self) -> None:
        while not self._reader_stop.is_set():
            try:
                if self._flush_wanted:
                    with self._lock:
                        self.transport.reset_input()
                        self._decoder.reset()
                        self._drain_replies()
                    self._flush_wanted = False
                    self._flush_done.set()
                data = self.transport.read()
            except (ActionableError, OSError) as exc:
                if not self._reader_stop.is_set():
                    # Not a warning: every later command and `fault` report it.
                    log.info("LPM01A: reader stopped: %s", exc)
                    self._reader_error = exc
                    self._replies.put(_ReaderFailed(exc))
                self._flush_done.set()  # connect() need not wait for a flush that cannot come
                return
            if not data:
                continue
            self._last_rx = time.monotonic()
            with self._lock:
                chunks, replies = self._digest(self._decoder.feed(data))
                on_chunk = self._on_chunk
            # Deliver data before replies: when `stop` sees `Acquisition completed`, every
            # sample decoded before it has reached the callback.
            if on_chunk is not None:
                for chunk in chunks:
                    self._callback_errors.call(on_chunk, chunk)  # surfaced by stop()
            for reply in replies:
                self._replies.put(reply)

    def _digest(self, events: list[Event]) -> tuple[list[Chunk], list[Event]]:
        """Split decoded events into chunks of data and the replies (called under the lock).

        A chunk ends where the board reported lost samples; the next starts that many ids later.
        """
        runs: list[tuple[int, list[np.ndarray]]] = []  # (first sample id, blocks)
        end = -1  # one past the last id in runs[-1]
        replies: list[Event] = []
        acquiring = self._on_chunk is not None  # else events are left over from before `start`
        for event in events:
            if isinstance(event, Samples):
                first = event.first_index + self._id_offset
                if first != end:
                    runs.append((first, []))
                runs[-1][1].append(event.values)
                end = first + len(event.values)
                self._decoded = event.first_index + len(event.values)
            elif isinstance(event, EdgeEvent):
                if acquiring:
                    self._check_event_number(event.number)
                    self._pending_edges.append(event.sample_index + self._id_offset)
            elif isinstance(event, TimeStamp):
                if acquiring:
                    self._check_loss(event)
            elif isinstance(event, ErrorReply) and acquiring and is_overrun(event.text):
                self._overrun = True  # not a reply: the board lost samples here
            elif isinstance(event, ErrorDetail) and self._overrun:
                self._overrun = False
                self._lost(lost_samples(event.text), event.text)
            elif isinstance(event, Garbled):
                log.debug("LPM01A: garbled line %r", event.raw)
                if self._running and not self._ended:  # after 0xF4 a summary text follows
                    self.stats.note(f"garbled bytes in the data stream: {event.raw[:40]!r}")
            elif isinstance(event, MetaFrame):
                log.debug("LPM01A: skipped metadata frame 0x%02X %r", event.kind, event.payload)
            elif isinstance(event, BoardInfo):
                self.stats.note(f"board information (0xF2 frame): {event.text}")
            elif isinstance(event, BoardError | Overcurrent):
                self._board_fault(event)
            else:
                if isinstance(event, AcquisitionCompleted | AcquisitionEnd) and acquiring:
                    self._ended = True
                replies.append(event)
        if not acquiring:
            return [], replies
        return [self._chunk(first, blocks) for first, blocks in runs], replies

    def _chunk(self, first: int, blocks: list[np.ndarray]) -> Chunk:
        """One chunk from consecutive blocks, with the pending D7 edges that fall in it."""
        current = np.concatenate(blocks) if len(blocks) > 1 else blocks[0]
        n = len(current)
        gpio = np.ones(n, dtype=np.uint8)
        keep: list[int] = []
        for index in self._pending_edges:
            if first <= index < first + n:
                gpio[index - first] = 0
            elif index >= first + n:
                keep.append(index)  # the edge is before a sample that has not arrived yet
            elif index >= self._next_id:
                # Before a sample the board lost: on the first one after the gap (never drop an
                # edge, later windows would pair the wrong ones); the recorder fails it.
                gpio[0] = 0
            else:
                self.stats.note(f"D7 edge at sample {index} arrived too late to mark")
        self._pending_edges = keep
        self._next_id = first + n
        self.stats.samples += n
        voltage = np.full(n, self._voltage_v if self._voltage_v is not None else math.nan)
        return Chunk(first, current, voltage, gpio)

    def _check_event_number(self, number: int) -> None:
        """D7 event numbers run on by one; a gap is an edge lost: the acquisition fails."""
        last, self._last_event = self._last_event, number
        if last is None or number == last + 1 or self._stream_fault is not None:
            return
        if number <= last:
            what = f"the numbering went back from {last} to {number}"
        else:
            lost = (f"event {last + 1}" if number == last + 2
                    else f"events {last + 1}..{number - 1}")
            what = f"{lost} never arrived"
        self.stats.note(f"D7 event {number} followed event {last}: {what}")
        self._stream_fault = DeviceError(
            f"LPM01A: D7 event {number} came after event {last}: {what}, so the timestamp "
            "edges of this acquisition cannot be paired into windows",
            hint="check the wiring of the DUT's timestamp GPIO to D7 and the USB link, and "
            "run again",
        )

    def _board_fault(self, event: BoardError | Overcurrent) -> None:
        """An error or overcurrent frame from the board: the acquisition fails with it."""
        if isinstance(event, BoardError):
            what = f"the board reported an error during the acquisition: {event.text!r}"
        else:
            what = "the board detected an overcurrent during the acquisition"
        self.stats.note(what)
        if self._stream_fault is None:
            self._stream_fault = DeviceError(
                f"LPM01A: {what}", hint="check the DUT's supply current against the "
                "PowerShield's range and run again")

    def _lost(self, count: int | None, text: str) -> None:
        """The board lost `count` samples before the next one it sends (an overrun)."""
        at = self._decoded + self._id_offset
        if count is None:  # the next TimeStamp counts them (their place is lost)
            self.stats.note(f"the board reported an overrun at sample {at}: {text}")
            return
        self._id_offset += count
        self.stats.note(f"the board lost {count} samples at sample {at} (overrun: {text})")

    def _check_loss(self, stamp: TimeStamp) -> None:
        """Compare samples received with the board's elapsed acquisition time."""
        fs = self._sample_rate_hz
        if fs is None:
            return
        expected = round(stamp.seconds * fs)
        shortfall = expected - (stamp.sample_index + self._id_offset)  # overruns are gaps
        # One sample of phase, plus the stamp's 1 ms resolution.
        tolerance = 1 + math.ceil(fs * 1e-3)
        if shortfall > tolerance and shortfall > self._acq_shortfall:
            lost = shortfall - self._acq_shortfall
            self._acq_shortfall = shortfall
            self.stats.dropped += lost
            self.stats.note(
                f"{lost} sample(s) lost by {stamp.seconds:.3f} s of acquisition "
                f"({stamp.sample_index} received, {expected} expected; board buffer "
                f"{stamp.buffer_pct}%)"
            )
