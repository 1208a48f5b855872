"""Driver for the Nordic Power Profiler Kit II (PPK2), speaking its serial protocol itself.

The PPK2 is a USB CDC serial device (`protocols.ppk2` has the bytes). In source-meter mode it
supplies the DUT from its regulator (800..5000 mV, never above the bench's voltage limit: checked
before any byte goes out); in ampere-meter mode the bench's supply feeds the DUT through the
PPK2's shunt and the regulator setting is the supply voltage the rig reports power with (and
the calibration's supply term uses). In both modes ``DEVICE_RUNNING_SET`` switches the DUT's
output on and off (OUR READING of the modes, from Nordic's app and ppk2-api: confirm the ampere
mode's output switch on hardware).

It streams 100 000 samples per second, each with its five-range auto-ranged current and the
eight digital inputs D0..D7: the DUT's timestamp GPIO goes to D0 (bit 0 of `Chunk.gpio`, the
other inputs in bits 1..7), sampled with the current, so every edge is seen. A lower
`sample_rate` (100 kHz / N) averages N samples on the host (energy is kept; a low pulse on an
input anywhere in a block marks the block low).

Nothing is acked by the PPK2, so commands are written and not waited for; the metadata reply
(calibration) at connect proves the port is a PPK2, and is read as Nordic's app reads it
(`protocols.ppk2.parse_metadata`: zeros keep the default, user gains outside 0.9..1.1 read 1;
each such change is noted). Every sample goes through Nordic's spike filter around range
switches (`protocols.ppk2.SpikeFilter`), as Nordic's app and ppk2-api do, before any averaging;
`settings()` records that and its parameters in the run's manifest.

The words' 6-bit counter (`protocols.ppk2.CounterSequencer`): a few words with a wrong counter
after which the count resumes are out of sequence, kept in their places and counted
(`out_of_sequence`), as Nordic's app keeps them; a jump that does not resume is a loss: the
sample ids jump with it (the recorder fails a window across them) and the loss is noted. Here
the rig stays stricter than Nordic's app, which only reports a loss once 500 samples (5 ms)
are lost in an acquisition (serialDevice.ts ``DATALOSS_THRESHOLD``) and fills them in its trace
as empty samples: a window's energy needs every one of its samples, so one lost sample fails the
windows it falls in, never silently. It also counts a loss exactly where Nordic's app counts one
fewer, and keeps an out-of-sequence sample once where Nordic's app passes it on twice (when it
comes and again when the count resumes). A port that fails mid-run (USB unplugged) ends the
reader, and `fault` says so.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import Any, Protocol

import numpy as np

from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy
from drivers.emon.base import (
    CallbackErrors,
    Chunk,
    ChunkCallback,
    EnergyMonitor,
    identifies_as_simulator,
    whole_millivolts,
)
from drivers.errors import DeviceError, DeviceTimeout
from drivers.transport import SerialTransport
from protocols.errors import ActionableError, ProtocolError
from protocols.ppk2 import (
    METADATA_END,
    OOS_TOLERANCE,
    RANGES,
    SAMPLE_RATE_HZ,
    VDD_MAX_MV,
    VDD_MIN_MV,
    Calibration,
    Cmd,
    CounterSequencer,
    SpikeFilter,
    SpikeFilterParams,
    WordAssembler,
    device_running,
    encode,
    parse_metadata,
    regulator_set,
    set_power_mode,
    split_words,
)

log = logging.getLogger(__name__)

#: Ignored by a USB CDC port; what Nordic's app opens it with.
BAUDRATE = 115_200
MODES = ("source", "ampere")
#: At connect and stop: the stream counts as over after this long without a byte.
QUIET_S = 0.1
#: ... but a PPK2 that never goes quiet is not waited for longer than this.
QUIET_MAX_S = 2.0
#: How long the metadata reply may take.
METADATA_TIMEOUT_S = 3.0
#: Bytes asked for per read while streaming (100 kS/s is 400 kB/s).
READ_BYTES = 1 << 20
_CABLE_HINT = "check the USB cable (the PPK2's USB DATA/POWER port) and that it is switched on"
#: The names of the five ranges as `Chunk.current_range` and the accuracy declaration give them:
#: the range bits' value k (bits 14-16 of a sample word) is "Rk", R0 the most sensitive.
RANGE_NAMES = tuple(f"R{k}" for k in range(RANGES))


class ByteTransport(Protocol):
    """What the driver needs from a transport (`SerialTransport` or a test double)."""

    def write(self, data: bytes) -> None: ...
    def read(self, max_bytes: int = ...) -> bytes: ...
    def reset_input(self) -> None: ...
    def close(self) -> None: ...


#: Where the PPK2's figures were looked for (2026-11-28).
PPK2_SEARCHED = (
    "2026-11-28: Nordic's 'Measurement accuracy' page of the PPK2 user guide (docs.nordicsemi."
    "com, ug_ppk2) is in neither the docs nor the pages corpus (searches 'Power Profiler Kit II "
    "measurement accuracy', 'PPK2 user guide measurement accuracy resolution range current', "
    "'infocenter nordicsemi ug_ppk2 PPK_user_guide Measurement accuracy', 'PPK2 current "
    "measurement ranges accuracy table'); Nordic's pc-nrfconnect-ppk repository (doc/ and "
    "the rest, newest commit) states no accuracy; figures seen only second-hand (±10 % at 5-50 mA, "
    "±15 % at 50-1000 mA, plus offsets) are not taken; no sample clock or source-voltage "
    "figure was found either")


def ppk2_accuracy(mode: str) -> MonitorAccuracy:
    """The PPK2's declaration: its five ranges (by the index every sample carries), no figure
    read first-hand; the set supply only in source mode (in ampere mode the bench's supply
    feeds the DUT)."""
    return MonitorAccuracy(
        current_ranges=tuple(
            # Full scales differ per unit (its calibration's shunt values): none published.
            RangeAccuracy(f"R{k}", None, NotPublished(
                what=f"PPK2 current accuracy in range R{k}", searched=PPK2_SEARCHED))
            for k in range(RANGES)),
        voltage=None,  # the rail is set (source) or given (ampere), never measured
        voltage_set=(NotPublished(what="PPK2 source-meter voltage accuracy",
                                  searched=PPK2_SEARCHED) if mode == "source" else None),
        clock=NotPublished(what="PPK2 sample clock tolerance", searched=PPK2_SEARCHED),
        notes="Every sample carries its range (R0-R4, bits 14-16 of its word, "
              "protocols/ppk2.py): the rig records it per sample (the trace's current_range "
              "signal) and counts each window's samples per range, so that a budget takes "
              "each range's figure for its share of the readings; a host-side average takes "
              "the largest range of its samples. "
              "Readings are the spike-filtered currents (settings' spike_filter).",
    )


class Ppk2(EnergyMonitor):
    """A PPK2 over its USB serial port, in source-meter or ampere-meter mode."""

    driver = "ppk2"
    measures_voltage = False  # current only: the rail is set (source) or given (ampere)
    records_range = True  # every sample word carries its range (R0-R4)

    def __init__(self, transport: ByteTransport, *, voltage_limit_v: float,
                 simulated: bool = False, mode: str = "source",
                 spike_filter: SpikeFilterParams | None = None) -> None:
        if mode not in MODES:
            raise DeviceError(f"PPK2: unknown mode {mode!r}",
                              hint="use \"source\" (the PPK2 supplies the DUT) or \"ampere\"")
        super().__init__(voltage_limit_v=voltage_limit_v)
        self.transport = transport
        self.simulated = simulated
        self.mode = mode
        self.calibration: Calibration | None = None
        self._vdd_mv: int | None = None
        self._decimation = 1
        self._dut_on = False
        self._connected = False
        self._closed = False
        self._running = False
        self._on_chunk: ChunkCallback | None = None
        self._callback_errors = CallbackErrors("PPK2")
        self._reader: threading.Thread | None = None
        self._reader_stop = threading.Event()
        self._reader_error: BaseException | None = None
        self._fault: DeviceError | None = None
        self._last_rx = time.monotonic()
        self._words = WordAssembler()
        self._sequencer = CounterSequencer()
        self._spike = SpikeFilter(spike_filter)
        #: Samples kept in place although their counter was out of sequence (this acquisition).
        self.out_of_sequence = 0
        self._raw_next = 0  # raw sample id of the next word
        #: A partial block: (first id, current, logic, range) of its samples.
        self._carry: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def open(cls, port: str, *, voltage_limit_v: float, simulated: bool = False,
             mode: str = "source", baudrate: int = BAUDRATE) -> Ppk2:
        """Open `port` and read the PPK2's calibration."""
        if mode not in MODES:  # before the port is opened
            raise DeviceError(f"PPK2: unknown mode {mode!r}",
                              hint="use \"source\" (the PPK2 supplies the DUT) or \"ampere\"")
        transport = SerialTransport(port, baudrate, name="PPK2")
        monitor = cls(transport, voltage_limit_v=voltage_limit_v, simulated=simulated, mode=mode)
        return cls._connect_or_close(monitor)

    def connect(self) -> None:
        """Switch the DUT's output off and stop the stream a previous session may have left
        (a crashed one leaves both on, the regulator at whatever it had), read the metadata."""
        self.transport.write(device_running(False))
        self._connected = True
        self.transport.write(encode(Cmd.AVERAGE_STOP))
        self._wait_quiet(lambda: self.transport.read(READ_BYTES))
        self.transport.reset_input()
        self.transport.write(encode(Cmd.GET_METADATA))
        deadline = time.monotonic() + METADATA_TIMEOUT_S
        reply = b""
        while METADATA_END not in reply:
            if time.monotonic() > deadline:
                raise DeviceTimeout(
                    "PPK2: no metadata reply (calibration) in time"
                    + (f"; got {reply[:40]!r}" if reply else ""),
                    hint=_CABLE_HINT + "; is this port a PPK2? (`rig devices` lists ports)")
            reply += self.transport.read(4096)
        try:
            self.calibration = parse_metadata(reply.decode("ascii", "replace"))
        except ProtocolError as exc:
            raise DeviceError(f"PPK2: {exc.message}", hint=exc.hint or _CABLE_HINT) from None
        # The virtual bench's PPK2 adds a "sim: 1" metadata line: simulated, whatever was said.
        self.simulated = self.simulated or identifies_as_simulator(*self.calibration.extra)
        for note in self.calibration.notes:
            log.info("PPK2 calibration: %s", note)
            self.stats.note(f"calibration: {note}")

    def close(self) -> None:
        """Stop, switch the DUT off, release the port. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            self._stop_while_closing()
        if self._connected:
            self.power_off()
        self._stop_reader()
        try:
            self.transport.close()
        except Exception as exc:
            log.warning("PPK2: closing the port failed: %s", exc)

    # -- EnergyMonitor ------------------------------------------------------------------------
    @property
    def sample_rate(self) -> float:
        """Samples per second delivered: 100 kHz / the host-side averaging."""
        return SAMPLE_RATE_HZ / self._decimation

    @classmethod
    def check_setup(cls, voltage: float, sample_rate: float, *, voltage_limit_v: float,
                    **options: Any) -> None:
        """A supply the regulator sets within the limit, and 100 kHz / a whole number."""
        cls._setup(voltage, sample_rate, voltage_limit_v)

    @staticmethod
    def _setup(voltage: float, sample_rate: float, voltage_limit_v: float) -> tuple[int, float]:
        """(regulator millivolts, decimation ratio), or the refusal of either."""
        mv = whole_millivolts(voltage, voltage_limit_v, (VDD_MIN_MV, VDD_MAX_MV), who="PPK2",
                              hint="set a supply voltage the PPK2 can deliver in the bench file")
        ratio = SAMPLE_RATE_HZ / sample_rate if sample_rate > 0 else 0.0
        if not (ratio >= 1 and abs(ratio - round(ratio)) < 1e-9):
            raise DeviceError(
                f"PPK2: {sample_rate:g} Hz is not 100 kHz divided by a whole number",
                hint="use 100000 (the PPK2's rate) or e.g. 50000, 10000, 1000 (averaged)")
        return mv, ratio

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Supply (source mode) or report (ampere mode) `voltage` [V]; deliver `sample_rate` [Hz]
        (100 kHz, or 100 kHz / N averaged on the host). Checked before any byte goes out."""
        mv, ratio = self._setup(voltage, sample_rate, self.voltage_limit_v)
        if self._running:
            raise DeviceError("PPK2: configure() during an acquisition", hint="stop() first")
        self.transport.write(set_power_mode(source=self.mode == "source"))
        self.transport.write(regulator_set(mv))
        self._vdd_mv = mv
        self._decimation = round(ratio)

    def power_on(self) -> None:
        """Switch the DUT's output on."""
        if self._vdd_mv is None:
            raise DeviceError("PPK2: power_on() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        self._send(device_running(True))
        self._dut_on = True

    def power_off(self) -> None:
        """Switch the DUT's output off; only logs when the port is already gone."""
        if self._reader_error is not None:
            log.info("PPK2: DUT off not sent: the port failed earlier")
            return
        try:
            self.transport.write(device_running(False))
            self._dut_on = False
        except Exception as exc:  # on error paths: never mask the original error
            log.warning("PPK2: switching the DUT off failed: %s", exc)

    def start(self, on_chunk: ChunkCallback) -> None:
        """Start streaming; chunks go to `on_chunk` on the reader thread."""
        if self._vdd_mv is None:
            raise DeviceError("PPK2: start() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        if self._running:
            raise DeviceError("PPK2: start() while already streaming", hint="stop() first")
        self.transport.reset_input()
        self._words.reset()
        self._sequencer.reset()
        self._spike.reset()  # both references restart it with each acquisition
        self.out_of_sequence = 0
        self._raw_next = 0
        self._carry = None
        self._callback_errors.clear()
        self._on_chunk = on_chunk
        self._reader_stop.clear()
        self._reader = threading.Thread(target=self._read_loop, name="ppk2-reader", daemon=True)
        self._reader.start()
        try:
            self._send(encode(Cmd.AVERAGE_START))
        except BaseException:
            self._stop_reader()
            self._on_chunk = None
            raise
        self._running = True

    def stop(self) -> None:
        """Stop streaming; returns once the PPK2 went quiet and every sample was delivered."""
        if not self._running:
            return
        try:
            if self._reader_error is None:
                self._send(encode(Cmd.AVERAGE_STOP))
                self._wait_quiet(None)
        finally:
            self._running = False
            self._stop_reader()
            self._deliver_held()
            self._on_chunk = None
            if self._carry is not None:
                self.stats.note(f"{len(self._carry[1])} sample(s) after the last whole "
                                f"{self._decimation}-sample average were left out")
                self._carry = None
        self._callback_errors.raise_kept()

    @property
    def fault(self) -> DeviceError | None:
        """Why the stream ended mid-acquisition (the port failed: USB unplugged), else None."""
        error = self._reader_error
        if error is None or not self._running:
            return None
        if self._fault is None:
            what = error.message if isinstance(error, ActionableError) else f"PPK2: {error}"
            self._fault = DeviceError(
                f"{what}; its stream stopped after {self.stats.samples:,} samples",
                hint="reconnect the PPK2 and run again; the rig could not switch the DUT off: "
                "a PPK2 in source mode took the DUT's supply down with it, in ampere mode "
                "check the bench supply")
        return self._fault

    def set_voltage(self) -> tuple[float, str] | None:
        """A PPK2 measures current only: in source mode the regulator's set value, in ampere
        mode the bench supply's value as given (the rail is not measured)."""
        if not self._vdd_mv:
            return None
        if self.mode == "source":
            return self._vdd_mv / 1000, f"set: PPK2 source mode regulator {self._vdd_mv} mV"
        return self._vdd_mv / 1000, (f"given: PPK2 ampere mode, bench supply {self._vdd_mv} mV "
                                     "(not measured)")

    def settings(self) -> dict[str, Any]:
        """Every setting sent, plus the calibration's identity, for the manifest."""
        extra = self.calibration.extra if self.calibration else {}
        return {
            "driver": self.driver,
            "port": getattr(self.transport, "url", None),
            "simulated": self.simulated,
            "mode": self.mode,
            "voltage_v": None if self._vdd_mv is None else self._vdd_mv / 1000,
            "sample_rate_hz": self.sample_rate,
            "device_sample_rate_hz": SAMPLE_RATE_HZ,
            "averaged_samples": self._decimation,
            "voltage_limit_v": self.voltage_limit_v,
            "current_range": "auto",
            "timestamp_input": "D0",
            "hw": extra.get("hw"),
            "calibrated": extra.get("calibrated"),
            "calibration_notes": list(self.calibration.notes) if self.calibration else [],
            # Applied to every sample the rig records (before any averaging), as Nordic's app
            # and ppk2-api apply it: the trace holds filtered currents around range switches.
            "spike_filter": {"applied": True, **self._spike.params.as_dict(),
                             "source": "Nordic pc-nrfconnect-ppk src/device/serialDevice.ts "
                                       "getAdcResult; ppk2-api ppk2_api.py get_adc_result"},
            "out_of_sequence_tolerance": OOS_TOLERANCE,
            "accuracy": self.accuracy().to_json(),
        }

    def accuracy(self) -> MonitorAccuracy:
        """`ppk2_accuracy` in this mode."""
        return ppk2_accuracy(self.mode)

    def self_test(self) -> dict[str, Any]:
        """What the metadata said at connect (the PPK2 answers nothing else)."""
        extra = self.calibration.extra if self.calibration else {}
        return {"driver": self.driver, "hw": extra.get("hw"),
                "port": getattr(self.transport, "url", None), "simulated": self.simulated}

    # -- internals ----------------------------------------------------------------------------
    def _send(self, data: bytes) -> None:
        if self._reader_error is not None:
            raise DeviceError(f"PPK2: cannot send {data.hex()}: the port failed earlier: "
                              f"{self._reader_error}", hint=_CABLE_HINT)
        self.transport.write(data)

    def _wait_quiet(self, read: Any) -> None:
        """Until no byte came for `QUIET_S` (read here with `read`, else by the reader)."""
        self._last_rx = time.monotonic()
        give_up = self._last_rx + QUIET_MAX_S
        while time.monotonic() - self._last_rx < QUIET_S and time.monotonic() < give_up:
            if read is not None:
                if read():
                    self._last_rx = time.monotonic()
            elif self._reader_error is not None:
                return
            else:
                time.sleep(0.01)

    def _stop_reader(self) -> None:
        self._reader_stop.set()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout=2.0)
        self._reader = None

    def _read_loop(self) -> None:
        while not self._reader_stop.is_set():
            try:
                data = self.transport.read(READ_BYTES)
            except (ActionableError, OSError) as exc:
                if not self._reader_stop.is_set():
                    log.info("PPK2: reader stopped: %s", exc)  # `fault` reports it
                    self._reader_error = exc
                return
            if not data:
                continue
            self._last_rx = time.monotonic()
            whole = self._words.feed(data)
            if not whole:
                continue
            on_chunk = self._on_chunk
            for chunk in self._chunks(whole):
                if on_chunk is None:
                    break
                self._callback_errors.call(on_chunk, chunk)  # surfaced by stop()

    def _deliver_held(self) -> None:
        """The words the sequencer still held at the end of the stream (their jump unresolved:
        a loss), to the chunk callback; called once the reader has stopped."""
        on_chunk = self._on_chunk
        if not self._sequencer.held or on_chunk is None or self.calibration is None:
            return
        for chunk in self._chunks(b"", final=True):
            self._callback_errors.call(on_chunk, chunk)

    def _chunks(self, raw: bytes, *, final: bool = False) -> list[Chunk]:
        """Decode whole words into chunks: one per run of consecutive samples."""
        assert self.calibration is not None and self._vdd_mv is not None
        seq = self._sequencer.feed(np.frombuffer(raw, dtype="<u4"), final=final)
        n = len(seq)
        if n == 0:
            return []
        words = split_words(seq.words)
        gaps = seq.lost_before
        rng = words.rng
        current = self.calibration.current(words.adc, rng, self._vdd_mv / 1000)
        current = self._spike.apply(current, rng)
        ids = self._raw_next + np.arange(n, dtype=np.int64) + np.cumsum(gaps)
        self._raw_next = int(ids[-1]) + 1
        lost_at = np.flatnonzero(gaps)
        for k in lost_at.tolist():
            self.stats.note(f"{int(gaps[k])} sample(s) lost before sample {int(ids[k])} "
                            "(the PPK2's sample counter jumped)")
        oos = seq.out_of_sequence
        if oos.any():
            self.out_of_sequence += int(oos.sum())
            starts = np.flatnonzero(oos & ~np.concatenate(([False], oos[:-1])))
            ends = np.flatnonzero(oos & ~np.concatenate((oos[1:], [False]))) + 1
            for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
                self.stats.note(f"{b - a} sample(s) out of sequence at sample {int(ids[a])} "
                                "(a wrong counter, then the count resumed): kept in place")
        cuts = [0, *(k for k in lost_at.tolist() if k > 0), n]
        chunks = []
        for a, b in itertools.pairwise(cuts):
            chunk = self._block(int(ids[a]), current[a:b], words.logic[a:b], rng[a:b])
            if chunk is not None:
                chunks.append(chunk)
        return chunks

    def _block(self, first: int, current: np.ndarray, logic: np.ndarray,
               rng: np.ndarray) -> Chunk | None:
        """A chunk of consecutive raw samples, averaged `_decimation` at a time; each sample
        with the range it was taken in (an average: the largest range of its raw samples, so
        that its accuracy is never taken as better than its worst part's)."""
        n_avg = self._decimation
        if n_avg > 1:
            carry = self._carry
            if carry is not None and carry[0] + len(carry[1]) == first:
                first = carry[0]
                current = np.concatenate((carry[1], current))
                logic = np.concatenate((carry[2], logic))
                rng = np.concatenate((carry[3], rng))
            else:  # start on a whole block of the delivered rate (after a loss, too)
                if carry is not None:
                    self.stats.note(f"a partial {n_avg}-sample average before sample "
                                    f"{first} was left out (samples lost after it)")
                skip = (-first) % n_avg
                first, current, logic = first + skip, current[skip:], logic[skip:]
                rng = rng[skip:]
            m = len(current) // n_avg * n_avg
            self._carry = ((first + m, current[m:], logic[m:], rng[m:]) if m < len(current)
                           else None)
            if m == 0:
                return None
            current = current[:m].reshape(-1, n_avg).mean(axis=1)
            logic = np.bitwise_and.reduce(logic[:m].reshape(-1, n_avg), axis=1)
            rng = rng[:m].reshape(-1, n_avg).max(axis=1)
            first //= n_avg
        self.stats.samples += len(current)
        voltage = np.full(len(current), self._vdd_mv / 1000 if self._vdd_mv else np.nan)
        # Range bits above R4 (not sent by a PPK2) read as R4, as `Calibration.current` reads them.
        ranges = np.minimum(rng, RANGES - 1).astype(np.uint8)
        return Chunk(first, current, voltage, logic.astype(np.uint8, copy=False),
                     current_range=ranges, range_names=RANGE_NAMES)
