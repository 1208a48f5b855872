"""Keysight N6705 (DC power analyzer: sources the DUT rail and digitizes its current) and 34465A
(DMM: digitizes DC current) through pyvisa, with SCPI binary blocks (`protocols.scpi`).

Timestamp GPIO and windowing. Neither instrument samples a logic line next to the current: the
DUT's timestamp line reaches them only as a trigger input. What the rig can do with each:

- N6705 digitizer (implemented): one capture of ``points`` samples at ``1/SENS:SWE:TINT``, armed by
  ``INIT:ACQ`` and triggered by the first falling edge on a digital-port pin (``PIN<n>``, the pin
  set to trigger input, negative polarity), or by ``EXT``/``BUS``. ``pretrigger`` points before
  the trigger are kept (``SENS:SWE:OFFS:POIN -pretrigger``), so the trigger sample is capture index
  ``pretrigger`` exactly; the driver marks it as a falling edge in ``gpio``. The capture is
  fetched (``FETC:ARR:CURR?``/``VOLT?``) when it is complete and delivered then: the digitizer
  cannot stream, so `stop()` waits for a triggered capture to fill (an untriggered one is aborted).
- 34465A (implemented): ``TRIG:SOUR EXT``, ``TRIG:SLOP NEG``; the first falling edge starts a timed
  sample train (``SAMP:SOUR TIM``) of up to ``max_samples`` readings, read back while acquiring
  with ``DATA:POIN?`` + ``R? <n>`` and delivered live. The trigger sample is sample 0 (no
  pre-trigger), marked as a falling edge.
- Later edges (the end of a run, the next run) are invisible to both. A window therefore needs
  either a second arm (a new capture whose trigger is the end edge: one capture per edge, the run
  measured as the time between two triggers by the instrument clock) or the N6705 datalogger
  (``SENS:DLOG:*``, ``INIT:DLOG``, ``MMEM:EXP:DLOG``) with the end taken from the DUT's timer.
  Neither is implemented here: the rig's ASC energy procedure needs every edge of a run in one
  stream, so with these instruments it can measure the window that starts at the trigger.

Current range. ``current_range_a`` (amps, from the bench's ``[emon] current_range``) is sent
as ``SENS:CURR:RANG <a>,(@ch)`` (N6705) or ``CONF:CURR:DC <a>`` (34465A); the instrument takes
its smallest range that holds the value, and the range it reports back (``SENS:CURR:RANG?
(@ch)``, ``CURR:DC:RANG?``) is the one in `settings()`. "auto" (``current_range_a=None``) keeps
the fixed `ranges.KEYSIGHT_DEFAULT_RANGE_A` (0.1 A) rather than autoranging: on the 34465A a
range change inside a timed sample train delays that sample and, when it takes longer than the
interval, offsets every later one (the Truevolt guide asks for a fixed range in triggered and
timed measurements), and the rig's times are sample counts; on the N6705 measurement
autoranging (``SENS:CURR:RANG:AUTO``, "seamless ranging") exists only on the N678xA SMU
modules, so sending it would be refused by the other modules.

The 34465A does not source the DUT: `power_on`/`power_off` only record the request (the bench's
supply switches the DUT) and ``voltage`` is the configured supply as a constant array.
After every configuration command the error queue is read (``SYST:ERR?``), so an error names the
command that caused it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any, Protocol

import numpy as np

from drivers.emon import ranges
from drivers.emon.base import Chunk, ChunkCallback, EnergyMonitor, check_voltage
from drivers.errors import DeviceError, DeviceTimeout, InstrumentError, PortError
from protocols.errors import ProtocolError
from protocols.scpi import (
    BlockDecoder,
    channel_list,
    decode_reals,
    format_number,
    parse_error,
    real_dtype,
)

log = logging.getLogger(__name__)

#: VISA status code of a timeout (VI_ERROR_TMO), so pyvisa need not be imported to test it.
_VI_ERROR_TMO = -1073807339
#: Most entries read from an error queue in one drain (real queues hold ~20-30).
_MAX_ERRORS = 32
#: A value this large is the DMM's overload marker (+9.9E+37).
_OVERLOAD = 9.0e37
#: Host seconds between two polls of an acquiring instrument.
POLL_S = 0.02
#: Samples per delivered chunk when a capture arrives whole.
CHUNK_SAMPLES = 65536
_VISA_HINT = "check the instrument's network/USB connection and the VISA resource string"


class VisaResource(Protocol):
    """What the drivers need from a pyvisa message-based resource (or a scripted fake)."""

    timeout: float

    def write(self, message: str) -> Any: ...
    def read(self) -> str: ...
    def read_bytes(self, count: int) -> bytes: ...
    def close(self) -> None: ...


def open_visa_resource(address: str, *, backend: str = "@py", timeout_ms: int = 5000) -> Any:
    """Open `address` with pyvisa (imported here: it is an optional extra)."""
    try:
        import pyvisa
    except ImportError as exc:
        raise DeviceError(
            "pyvisa is not installed",
            hint="install the visa extra: pip install 'neurobench-rig[visa]'",
        ) from exc
    try:
        manager = pyvisa.ResourceManager(backend)
        return manager.open_resource(address, read_termination="\n", write_termination="\n",
                                     timeout=timeout_ms)
    except Exception as exc:  # pyvisa raises several unrelated types for a bad address
        raise PortError(f"cannot open VISA resource {address!r}: {exc}", hint=_VISA_HINT) from exc


class _ScpiMonitor(EnergyMonitor):
    #: They see the DUT's timestamp line only as a trigger input: the first edge of a capture.
    sees_every_edge = False
    """What both Keysight drivers share: SCPI I/O, error queue, acquisition thread."""

    #: Substring the ``*IDN?`` model field must contain.
    model_hint = ""
    #: The current range asked for [A]; None = "auto" (the fixed `KEYSIGHT_DEFAULT_RANGE_A`).
    current_range_a: float | None = None

    def __init__(self, resource: VisaResource, *, voltage_limit_v: float,
                 simulated: bool = False, address: str | None = None) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v)
        self.resource = resource
        self.address = address
        self.simulated = simulated
        self.identity: str | None = None
        self._voltage_v: float | None = None
        self._sample_rate_hz: float | None = None
        self._settings: dict[str, Any] = {}
        self._io_lock = threading.RLock()  # one exchange at a time (worker vs. caller)
        self._worker: threading.Thread | None = None
        self._stop_wanted = threading.Event()
        self._worker_error: BaseException | None = None
        self._on_chunk: ChunkCallback | None = None
        self._next_id = 0
        self._running = False
        self._closed = False

    @classmethod
    def open(cls, address: str, *, voltage_limit_v: float, simulated: bool = False,
             backend: str = "@py", current_range: str = ranges.AUTO,
             **options: Any) -> _ScpiMonitor:
        """Open the instrument at VISA `address`, clear its status and identify it.

        `current_range` is the bench's text ("auto", "0.1", "1e-3"); it becomes
        ``current_range_a`` (None for auto). A range the driver does not take is refused before
        the instrument is opened.
        """
        try:
            current_range = ranges.normalize(cls.driver, current_range)
        except ranges.RangeError as exc:
            raise DeviceError(f"{cls.driver}: current range: {exc.message}",
                              hint=exc.hint) from None
        if current_range != ranges.AUTO:
            if options.get("current_range_a") is not None:
                raise DeviceError(f"{cls.driver}: current_range and current_range_a both given",
                                  hint="give the range once")
            options["current_range_a"] = float(current_range)
        resource = open_visa_resource(address, backend=backend)
        monitor = cls(resource, voltage_limit_v=voltage_limit_v, simulated=simulated,
                      address=address, **options)
        try:
            monitor.connect()
        except BaseException:
            monitor.close()
            raise
        return monitor

    def connect(self) -> None:
        """``*CLS`` then ``*IDN?``; refuses an instrument of another model."""
        self._write("*CLS")
        self.identity = self._query("*IDN?")
        fields = [f.strip() for f in self.identity.split(",")]
        model = fields[1] if len(fields) > 1 else self.identity
        if self.model_hint and self.model_hint not in model.upper():
            raise DeviceError(
                f"{self.driver}: instrument at {self.address} is {self.identity!r}, "
                f"not a {self.model_hint}",
                hint="check the VISA resource string in the bench file",
            )

    # -- SCPI I/O -----------------------------------------------------------------------------
    def _io(self, what: str, action: Any) -> Any:
        try:
            return action()
        except ProtocolError:
            raise
        except Exception as exc:  # pyvisa's VisaIOError, socket errors, a fake's TimeoutError
            if isinstance(exc, TimeoutError) or getattr(exc, "error_code", None) == _VI_ERROR_TMO:
                raise DeviceTimeout(f"{self.driver}: no reply to {what!r} in time",
                                    hint=_VISA_HINT) from exc
            raise DeviceError(f"{self.driver}: I/O failed on {what!r}: {exc}",
                              hint=_VISA_HINT) from exc

    def _write(self, cmd: str) -> None:
        with self._io_lock:
            self._io(cmd, lambda: self.resource.write(cmd))

    def _query(self, cmd: str) -> str:
        with self._io_lock:
            self._io(cmd, lambda: self.resource.write(cmd))
            return str(self._io(cmd, self.resource.read)).strip()

    def _query_reals(self, cmd: str, dtype: np.dtype) -> np.ndarray:
        """Send `cmd`, read its definite-length block (asking for exactly the missing bytes)."""
        with self._io_lock:
            self._io(cmd, lambda: self.resource.write(cmd))
            decoder = BlockDecoder()
            while not decoder.done:
                count = decoder.needed
                decoder.feed(self._io(cmd, lambda n=count: self.resource.read_bytes(n)))
            rest = decoder.rest
            if not rest.endswith(b"\n"):  # the message terminator is still in the pipe
                rest += self._io(cmd, lambda: self.resource.read_bytes(1))
            if rest.strip():
                raise ProtocolError(f"{self.driver}: {rest[:20]!r} after the block of {cmd!r}")
            return decode_reals(decoder.payload, dtype)

    def _errors(self) -> list[str]:
        """Drain the error queue; the entries that are errors."""
        found: list[str] = []
        for _ in range(_MAX_ERRORS):
            entry = parse_error(self._query("SYST:ERR?"))
            if not entry.is_error:
                return found
            found.append(str(entry))
        return found

    def _checked(self, cmd: str) -> None:
        """Send a setting and make sure the instrument took it (error queue empty)."""
        with self._io_lock:
            self._write(cmd)
            errors = self._errors()
        if errors:
            raise InstrumentError(
                f"{self.driver} refused {cmd!r}: {'; '.join(errors)}", command=cmd,
                hint="check the value against the instrument's ranges and installed options",
            )

    # -- EnergyMonitor --------------------------------------------------------------------------
    @property
    def sample_rate(self) -> float:
        """Sample rate [Hz] as the instrument reported it back."""
        if self._sample_rate_hz is None:
            raise DeviceError(f"{self.driver}: sample rate asked before configure()",
                              hint="call configure(voltage, sample_rate) first")
        return self._sample_rate_hz

    def _check_configurable(self, voltage: float, sample_rate: float, max_rate: float) -> None:
        check_voltage(voltage, self.voltage_limit_v, who=self.driver)
        if not 0 < sample_rate <= max_rate:
            raise DeviceError(f"{self.driver}: sample rate {sample_rate:g} Hz is out of range",
                              hint=f"use up to {max_rate:g} Hz")
        if self._running:
            raise DeviceError(f"{self.driver}: configure() during an acquisition",
                              hint="stop() first")

    def start(self, on_chunk: ChunkCallback) -> None:
        """Arm the acquisition; chunks go to `on_chunk` on the driver's thread."""
        if self._sample_rate_hz is None:
            raise DeviceError(f"{self.driver}: start() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        if self._running:
            raise DeviceError(f"{self.driver}: start() while acquiring", hint="stop() first")
        self._on_chunk = on_chunk
        self._next_id = 0
        self._worker_error = None
        self._stop_wanted.clear()
        self._arm()
        self._running = True
        self._worker = threading.Thread(target=self._run_worker, name=f"{self.driver}-acq",
                                        daemon=True)
        self._worker.start()

    def stop(self) -> None:
        """End the acquisition; every acquired sample has been delivered when this returns."""
        if not self._running:
            return
        self._stop_wanted.set()
        worker = self._worker
        if worker is not None:
            worker.join(self._stop_timeout_s())
            if worker.is_alive():
                self._worker_error = self._worker_error or DeviceTimeout(
                    f"{self.driver}: the acquisition did not end in time",
                    hint="check the trigger wiring and the capture length")
        self._running = False
        self._worker = None
        if self._worker_error is not None:
            error, self._worker_error = self._worker_error, None
            raise error

    def close(self) -> None:
        """Stop, switch the DUT off, release the resource. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            self._stop_while_closing()
        if self.identity is not None:
            self.power_off()
        try:
            self.resource.close()
        except Exception as exc:
            log.warning("%s: closing the resource failed: %s", self.driver, exc)


    def self_test(self) -> dict[str, Any]:
        """``*IDN?`` again and an empty error queue."""
        identity = self._query("*IDN?")
        return {"driver": self.driver, "identity": identity, "errors": self._errors(),
                "address": self.address, "simulated": self.simulated}

    def _range_settings(self, requested_a: float | None, in_effect_a: float) -> dict[str, Any]:
        """The range entries of `settings()`: what was asked, what the instrument reports."""
        out: dict[str, Any] = {
            "current_range": f"{format_number(in_effect_a)} A",
            "current_range_a": in_effect_a,
            "current_range_requested": (ranges.AUTO if requested_a is None
                                        else format_number(requested_a)),
            "autorange": False,
        }
        if requested_a is None:
            out["autorange_note"] = (
                f"auto keeps the driver's fixed {format_number(ranges.KEYSIGHT_DEFAULT_RANGE_A)} "
                "A range: instrument autoranging is not used during a timed capture")
        return out

    def _range_to_send(self) -> float:
        """The range [A] the configuration sends: the one asked for, or the fixed default."""
        if self.current_range_a is None:
            return ranges.KEYSIGHT_DEFAULT_RANGE_A
        return self.current_range_a

    def _base_settings(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "address": self.address,
            "simulated": self.simulated,
            "identity": self.identity,
            "voltage_v": self._voltage_v,
            "sample_rate_hz": self._sample_rate_hz,
            "voltage_limit_v": self.voltage_limit_v,
            **dict(self._settings),
        }

    # -- acquisition ----------------------------------------------------------------------------
    def _run_worker(self) -> None:
        try:
            self._acquire()
        except BaseException as exc:  # surfaced by stop()
            log.warning("%s: acquisition failed: %s", self.driver, exc)
            self._worker_error = exc

    def _deliver(self, current: np.ndarray, voltage: np.ndarray, trigger_index: int | None) -> None:
        """Deliver samples in chunks; `trigger_index` (id) is marked as a falling edge."""
        overload = np.abs(current) > _OVERLOAD
        if overload.any():
            self.stats.note(f"{int(overload.sum())} overload reading(s) from sample "
                            f"{self._next_id + int(np.argmax(overload))} on (kept as NaN)")
            current = np.where(overload, np.nan, current)
        for lo in range(0, len(current), CHUNK_SAMPLES):
            cur = current[lo : lo + CHUNK_SAMPLES]
            gpio = np.ones(len(cur), dtype=np.uint8)
            first = self._next_id
            if trigger_index is not None and first <= trigger_index < first + len(cur):
                gpio[trigger_index - first] = 0
            chunk = Chunk(first, cur, voltage[lo : lo + CHUNK_SAMPLES], gpio)
            self._next_id += len(cur)
            self.stats.samples += len(cur)
            if self._on_chunk is not None:
                self._on_chunk(chunk)

    def _arm(self) -> None:
        raise NotImplementedError

    def _acquire(self) -> None:
        raise NotImplementedError

    def _stop_timeout_s(self) -> float:
        return 10.0


class N6705(_ScpiMonitor):
    """N6705 DC power analyzer: output `channel` supplies the DUT; its digitizer measures it."""

    driver = "n6705"
    model_hint = "N67"
    #: Fastest digitizer interval of the N678x SMU modules (others: 20.48 µs).
    MIN_INTERVAL_S = 5.12e-6
    MAX_POINTS = 524288
    #: STAT:OPER bits (N6700 programming guide): waiting for a measurement trigger, measuring.
    WTG_MEAS = 8
    MEAS_ACTIVE = 16

    def __init__(self, resource: VisaResource, *, voltage_limit_v: float,
                 simulated: bool = False, address: str | None = None, channel: int = 1,
                 current_limit_a: float = 0.1, current_range_a: float | None = None,
                 points: int = 262144, pretrigger: int = 1024, trigger: str = "PIN1",
                 measure_voltage: bool = True) -> None:
        super().__init__(resource, voltage_limit_v=voltage_limit_v, simulated=simulated,
                         address=address)
        trigger = trigger.upper()
        if not (trigger in ("EXT", "BUS") or (trigger.startswith("PIN") and trigger[3:].isdigit()
                                              and 1 <= int(trigger[3:]) <= 7)):
            raise DeviceError(f"n6705: trigger {trigger!r} is not PIN1..PIN7, EXT or BUS",
                              hint="set the emon trigger in the bench file")
        if not (1 <= points <= self.MAX_POINTS and 0 <= pretrigger < points):
            raise DeviceError(f"n6705: {points} points with {pretrigger} pre-trigger points "
                              "do not fit the digitizer",
                              hint=f"use 1..{self.MAX_POINTS} points and fewer pre-trigger points")
        self.channel = channel
        self.chan = channel_list(channel)
        self.current_limit_a = current_limit_a
        #: The measurement range asked for [A]; None = "auto" (the driver's fixed default).
        self.current_range_a = current_range_a
        self.points = points
        self.pretrigger = pretrigger
        self.trigger = trigger
        self.measure_voltage = measure_voltage
        self._dtype = real_dtype(32, big_endian=True)
        self._output_on = False

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Set the rail and the digitizer; every command is checked against the error queue."""
        self._check_configurable(voltage, sample_rate, 1 / self.MIN_INTERVAL_S)
        ch = self.chan
        commands = [
            f"VOLT {format_number(voltage)},{ch}",
            f"CURR {format_number(self.current_limit_a)},{ch}",
            f"SENS:FUNC:CURR ON,{ch}",
            f"SENS:FUNC:VOLT {'ON' if self.measure_voltage else 'OFF'},{ch}",
            f"SENS:CURR:RANG {format_number(self._range_to_send())},{ch}",
            f"SENS:SWE:TINT {format_number(1 / sample_rate)},{ch}",
            f"SENS:SWE:POIN {self.points},{ch}",
            f"SENS:SWE:OFFS:POIN {-self.pretrigger},{ch}",
        ]
        if self.trigger.startswith("PIN"):
            pin = self.trigger[3:]
            commands += [f"DIG:PIN{pin}:FUNC TINP", f"DIG:PIN{pin}:POL NEG"]
        commands += [f"TRIG:ACQ:SOUR {self.trigger},{ch}", "FORM REAL", "FORM:BORD NORM"]
        for cmd in commands:
            self._checked(cmd)
        interval = float(self._query(f"SENS:SWE:TINT? {ch}"))
        in_range = float(self._query(f"SENS:CURR:RANG? {ch}"))
        self._voltage_v = float(voltage)
        self._sample_rate_hz = 1.0 / interval
        self._settings.update({
            "channel": self.channel, "current_limit_a": self.current_limit_a,
            **self._range_settings(self.current_range_a, in_range), "interval_s": interval,
            "points": self.points, "pretrigger_points": self.pretrigger,
            "trigger": self.trigger, "trigger_slope": "negative",
            "mode": "digitizer: one triggered capture",
        })

    def power_on(self) -> None:
        """``OUTP ON,(@ch)``."""
        self._checked(f"OUTP ON,{self.chan}")
        self._output_on = True
        self._settings["output"] = "on"

    def power_off(self) -> None:
        """``OUTP OFF,(@ch)``; only logs if the instrument is gone."""
        try:
            self._checked(f"OUTP OFF,{self.chan}")
            self._output_on = False
            self._settings["output"] = "off"
        except Exception as exc:  # called on error paths: never mask the original error
            log.warning("n6705: OUTP OFF failed: %s", exc)

    def settings(self) -> dict[str, Any]:
        """Every setting sent, plus identity."""
        return self._base_settings()

    def _arm(self) -> None:
        self._checked(f"INIT:ACQ {self.chan}")
        if self.trigger == "BUS":
            self._checked(f"TRIG:ACQ {self.chan}")

    def _capture_s(self) -> float:
        return self.points / self.sample_rate

    def _stop_timeout_s(self) -> float:
        return self._capture_s() + 10.0

    def _status(self) -> int:
        return int(float(self._query(f"STAT:OPER:COND? {self.chan}")))

    def _acquire(self) -> None:
        triggered_at: float | None = None
        while True:
            status = self._status()
            if not status & (self.WTG_MEAS | self.MEAS_ACTIVE):
                break
            if not status & self.WTG_MEAS and triggered_at is None:
                triggered_at = time.monotonic()
            if self._stop_wanted.is_set() and triggered_at is None:
                self._checked(f"ABOR:ACQ {self.chan}")
                self.stats.note("stopped before the trigger: no capture")
                return
            late = triggered_at is not None and (
                time.monotonic() > triggered_at + self._stop_timeout_s())
            if late:
                raise DeviceTimeout(f"n6705: the capture of {self.points} points did not end",
                                    hint="check STAT:OPER and the digitizer settings")
            self._stop_wanted.wait(POLL_S)
        current = self._query_reals(f"FETC:ARR:CURR? {self.chan}", self._dtype)
        if self.measure_voltage:
            voltage = self._query_reals(f"FETC:ARR:VOLT? {self.chan}", self._dtype)
        else:
            voltage = np.full(len(current), self._voltage_v or math.nan)
        if len(current) != self.points or len(voltage) != len(current):
            raise DeviceError(
                f"n6705: capture returned {len(current)} current and {len(voltage)} voltage "
                f"points, {self.points} expected", hint="check SENS:SWE:POIN")
        self._deliver(current, voltage, self.pretrigger)


class Keysight34465A(_ScpiMonitor):
    """34465A DMM digitizing DC current, started by a falling edge on its external trigger."""

    driver = "34465a"
    powers_dut = False  # a DMM measures; the bench's supply powers the DUT
    model_hint = "34465A"
    #: Fastest sample timer with the DIG option (50 kS/s).
    MAX_RATE_HZ = 50_000.0

    def __init__(self, resource: VisaResource, *, voltage_limit_v: float,
                 simulated: bool = False, address: str | None = None,
                 current_range_a: float | None = None, max_samples: int = 1_000_000_000,
                 real_bits: int = 64) -> None:
        super().__init__(resource, voltage_limit_v=voltage_limit_v, simulated=simulated,
                         address=address)
        #: The DC current range asked for [A]; None = "auto" (the driver's fixed default).
        self.current_range_a = current_range_a
        self.max_samples = max_samples
        self.real_bits = real_bits
        self._dtype = real_dtype(real_bits, big_endian=True)
        self._power_requested: str | None = None
        self._trigger_seen = False

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Current range, aperture = sample period, external falling-edge trigger, timed samples.

        `voltage` is the bench supply's voltage (checked against the limit, reported per sample).
        """
        self._check_configurable(voltage, sample_rate, self.MAX_RATE_HZ)
        period = format_number(1 / sample_rate)
        commands = [
            f"CONF:CURR:DC {format_number(self._range_to_send())}",
            f"CURR:DC:APER {period}",
            "TRIG:SOUR EXT",
            "TRIG:SLOP NEG",
            "TRIG:DEL 0",
            "TRIG:COUN 1",
            "SAMP:SOUR TIM",
            f"SAMP:TIM {period}",
            f"SAMP:COUN {self.max_samples}",
            f"FORM:DATA REAL,{self.real_bits}",
            "FORM:BORD NORM",
        ]
        for cmd in commands:
            self._checked(cmd)
        interval = float(self._query("SAMP:TIM?"))
        in_range = float(self._query("CURR:DC:RANG?"))
        self._voltage_v = float(voltage)
        self._sample_rate_hz = 1.0 / interval
        self._settings.update({
            **self._range_settings(self.current_range_a, in_range), "interval_s": interval,
            "aperture_s": interval, "max_samples": self.max_samples,
            "trigger": "EXT", "trigger_slope": "negative", "format": f"REAL,{self.real_bits}",
            "mode": "timed samples from one external trigger, read while acquiring",
            "supply": "not sourced by the 34465A: the bench supply powers the DUT; voltage is "
                      "the configured supply, not measured",
        })

    def power_on(self) -> None:
        """No-op: the DMM does not source the DUT (recorded in settings)."""
        self._power_requested = "on"
        self._settings["power_requested"] = "on (no-op: the bench supply switches the DUT)"

    def power_off(self) -> None:
        """No-op: the DMM does not source the DUT (recorded in settings)."""
        self._power_requested = "off"
        self._settings["power_requested"] = "off (no-op: the bench supply switches the DUT)"

    def settings(self) -> dict[str, Any]:
        """Every setting sent, plus identity."""
        return self._base_settings()

    def _arm(self) -> None:
        self._trigger_seen = False
        self._checked("INIT")

    def _read_available(self) -> int:
        """Read and deliver every reading in memory; how many there were."""
        count = int(float(self._query("DATA:POIN?")))
        if count <= 0:
            return 0
        current = self._query_reals(f"R? {count}", self._dtype)
        if len(current) != count:
            raise DeviceError(f"34465a: R? {count} returned {len(current)} readings",
                              hint="check FORM:DATA and the VISA connection")
        voltage = np.full(count, self._voltage_v if self._voltage_v is not None else math.nan)
        self._trigger_seen = True
        self._deliver(current, voltage, 0)
        return count

    def _acquire(self) -> None:
        while not self._stop_wanted.is_set() and self._next_id < self.max_samples:
            if not self._read_available():
                self._stop_wanted.wait(POLL_S)
        if self._next_id < self.max_samples:
            self._checked("ABOR")
        # Readings taken before ABOR are still in memory.
        while self._read_available():
            pass
        if not self._trigger_seen:
            self.stats.note("stopped before the trigger: no samples")
