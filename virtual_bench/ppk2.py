"""A simulated Nordic PPK2 on a pty, measuring the shared `World`'s DUT.

It takes the PPK2's opcode commands (`protocols.ppk2`) like the real one, silently: the only
replies are the metadata text (its own calibration, deliberately not the defaults, so that a
driver that ignores the calibration reads wrong currents; written as Nordic's app reads it, with
a zero for a value that reads as its default and user gains outside 0.9..1.1 that read as 1, so
that a driver reading the text literally reads wrong currents too) and, while averaging runs,
the 100 kS/s stream of 4-byte words. It streams what the PPK2 measures; the spike filter around
range switches is the reader's (Nordic's app, ppk2-api, the rig), not the device's.
Sample k covers simulated [t0 + k*10 us, t0 + (k+1)*10 us); its
current is the exact mean of the world's power model over that period divided by the DUT's
supply voltage, turned into the (ADC value, range) the calibration maps back to it: the most
sensitive range that holds it, rounded to the nearest ADC count as the real ADC quantises. D0
carries the DUT's timestamp GPIO (its level at the sample's start), D1..D7 read 0; the 6-bit
counter steps by one per sample. Simulated, not measured.

Source mode (``SET_POWER_MODE 2``): ``REGULATOR_SET`` is the DUT's supply and
``DEVICE_RUNNING_SET`` switches it. Ampere mode (1): the bench's supply (`ampere_supply_v`)
feeds the DUT through the PPK2, ``DEVICE_RUNNING_SET`` connects it.

Test hooks: `drop_samples` loses samples in the stream (the counter jumps, as when USB drops
data), `garble_counters` gives a few words a wrong counter in their places (out of sequence,
nothing lost), `unplug` takes the port away and the DUT's power with it; `max_regulator_mv` is the
highest voltage the regulator was ever asked for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading

import numpy as np

from protocols.ppk2 import (
    COUNTER_MOD,
    POWER_MODE_AMPERE,
    POWER_MODE_SOURCE,
    SAMPLE_RATE_HZ,
    VDD_MAX_MV,
    VDD_MIN_MV,
    Calibration,
    Cmd,
    encode_words,
    parse_command,
)
from virtual_bench.instrument import SerialInstrument
from virtual_bench.pty import Pty
from virtual_bench.world import CATCH_UP_S, NS, World

log = logging.getLogger(__name__)

#: The simulated unit's calibration, as read (what its currents follow): offsets and gains a
#: real unit might have.
SIM_CALIBRATION = Calibration(
    r=(1010.2, 100.9, 10.08, 0.951, 0.0442),
    gs=(1.0, 0.012, 0.0021, 0.0008, 0.0003),
    gi=(0.985, 1.012, 0.996, 1.003, 0.998),
    o=(64.5, 71.25, 66.0, 73.5, 67.0),
    s=(2.5e-8, 1.1e-7, 0.0, 0.0, 0.0),
    i=(-1.2e-8, 3.0e-8, 0.0, 0.0, 0.0),
    ug=(1.0, 1.0, 1.0, 1.0, 1.0),
    # "sim": the metadata line that tells the rig this PPK2 is the virtual bench's.
    extra={"calibrated": "1", "hw": "9173", "ia": "56", "sim": "1"},
)
#: How the simulated unit's metadata writes some of those values: GS0 as 0 (read: the default,
#: 1), and user gains of which one is outside 0.9..1.1 (read: all five 1). Nordic's
#: pc-nrfconnect-ppk reads them so: src/device/serialDevice.ts `parseMeta`, src/actions/
#: deviceActions.ts `initGains`. Whether a real unit ever sends such values is unconfirmed
#: without hardware; they are here so that only a reader that reads them as Nordic's app does
#: measures the simulated currents.
SIM_METADATA_TEXT = {"GS0": "0", "UG0": "1.02", "UG2": "0.97", "UG3": "1.25"}
#: The metadata text the simulated unit sends (before its live VDD and mode lines).
SIM_METADATA = SIM_CALIBRATION.to_metadata(SIM_METADATA_TEXT)
#: The counter a garbled word carries instead of its own: half the counter's cycle away.
GARBLE_OFFSET = COUNTER_MOD // 2
#: Host seconds between two bursts of streamed samples.
STREAM_PERIOD_S = 0.005
#: How long one write may wait for a reader before the rest is dropped (as USB would lose it).
WRITE_PATIENCE_S = 1.0
#: A stop writes the samples still unsent up to it, unless they are more than this [s] of them.
STOP_FLUSH_MAX_S = 1.0
#: Most samples encoded in one go.
_MAX_BURST = 200_000
_PERIOD_NS = NS // SAMPLE_RATE_HZ


class SimPpk2(SerialInstrument):
    """The PPK2: opcodes in, metadata and sample words out, on `.path` (a pty)."""

    SIM_NAME = "ppk2"

    def __init__(self, world: World, *, ampere_supply_v: float = 3.3,
                 calibration: Calibration = SIM_CALIBRATION,
                 metadata_text: dict[str, str] | None = None) -> None:
        self.world = world
        self.calibration = calibration
        #: Values the metadata writes otherwise (default: `SIM_METADATA_TEXT` for the default
        #: calibration); each must read back as `calibration`'s value.
        self.metadata_text = (SIM_METADATA_TEXT if calibration is SIM_CALIBRATION else {}) \
            if metadata_text is None else metadata_text
        self.ampere_supply_v = ampere_supply_v
        self._pty = Pty()
        self.path = self._pty.path
        os.set_blocking(self._pty.master, False)
        self.dropped_bytes = 0
        self.mode = POWER_MODE_AMPERE  # what a PPK2 starts in
        self.vdd_mv = 3000
        self.max_regulator_mv = 0
        self.dut_on = False
        #: Every command taken, in order: (opcode, argument bytes).
        self.received: list[tuple[int, tuple[int, ...]]] = []
        self.running = False
        self.acquisition_t0_ns: int | None = None
        self._next_k = 0
        #: A fault to make: (kind, samples, after how many samples past the next edge, since
        #: when); kind "drop" (lost) or "garble" (wrong counters, in place).
        self._drop: tuple[str, int, int | None, int] | None = None
        #: Samples [a, b) whose words carry a wrong counter.
        self._garbled = (0, 0)
        self._last_forget_ns = 0
        self._write_lock = threading.Lock()
        self._acq_lock = threading.Lock()
        #: Set while a stop waits for `_acq_lock`: the stream must not keep it for a backlog.
        self._stopping = threading.Event()
        self._init_threads()

    @property
    def unsent_samples(self) -> int:
        """Samples simulated time has made that the device has not sent (nor lost) yet (read
        without the stream's lock, which a write to a host that does not read holds)."""
        t0, sent = self.acquisition_t0_ns, self._next_k
        if not self.running or t0 is None:
            return 0
        return max(0, (self.world.observable_ns() - t0) // _PERIOD_NS - sent)

    # -- faults (test hooks) ------------------------------------------------------------------
    def unplug(self) -> None:
        """The USB cable comes out: the port goes away and the DUT loses its supply."""
        self.close()
        self.world.power(False)

    def drop_samples(self, count: int, *, after_edge: int | None = None) -> None:
        """Lose `count` samples (their counter values go missing): in the next burst, or
        `after_edge` samples after the next falling edge of the DUT's timestamp line (inside
        its window)."""
        self._fault("drop", count, after_edge)

    def garble_counters(self, count: int, *, after_edge: int | None = None) -> None:
        """Give `count` consecutive words a wrong counter (`GARBLE_OFFSET` away), each sample
        still in its place and the count going on after them (out of sequence, nothing lost):
        in the next burst, or `after_edge` samples after the next falling edge."""
        self._fault("garble", count, after_edge)

    def _fault(self, kind: str, count: int, after_edge: int | None) -> None:
        if count < 1 or (after_edge is not None and after_edge < 0):
            raise ValueError("count must be >= 1 and after_edge >= 0")
        with self._acq_lock:
            self._drop = (kind, count, after_edge, self.world.clock.now_ns())

    # -- commands -----------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        """Write to the host; what it does not take within `WRITE_PATIENCE_S` is lost."""
        with self._write_lock:
            self.dropped_bytes += self._pty.write(data, patience_s=WRITE_PATIENCE_S,
                                                  stop=self._closing,
                                                  waiting=self.world.clock.running)

    def _command_loop(self) -> None:
        pending = b""
        fd = self._pty.master
        while not self._closing.is_set():
            try:
                readable, _, _ = select.select([fd], [], [], 0.05)
                if not readable:
                    continue
                pending += os.read(fd, 4096)
            except BlockingIOError:
                continue
            except (OSError, ValueError):
                if self._closing.wait(0.05):
                    return
                continue
            while True:
                command, used = parse_command(pending)
                if command is None:
                    break
                pending = pending[used:]
                try:
                    self._handle(*command)
                except Exception:  # a simulator bug must not leave the PPK2 mute
                    log.exception("PPK2 simulator: command %r failed", command)

    def _handle(self, op: Cmd | int, args: tuple[int, ...]) -> None:
        self.received.append((int(op), args))
        if op == Cmd.GET_METADATA:
            extra = {**self.calibration.extra, "vdd": str(self.vdd_mv), "mode": str(self.mode)}
            cal = Calibration(**{k: getattr(self.calibration, k) for k in Calibration.KEYS},
                              extra=extra)
            self._write(cal.to_metadata(self.metadata_text))
        elif op == Cmd.SET_POWER_MODE:
            if args[0] in (POWER_MODE_AMPERE, POWER_MODE_SOURCE):
                self.mode = args[0]
                self._apply_supply()
        elif op == Cmd.REGULATOR_SET:
            mv = args[0] << 8 | args[1]
            self.max_regulator_mv = max(self.max_regulator_mv, mv)
            if VDD_MIN_MV <= mv <= VDD_MAX_MV:  # the firmware ignores what it cannot set
                self.vdd_mv = mv
                self._apply_supply()
        elif op == Cmd.DEVICE_RUNNING_SET:
            self.dut_on = args[0] == 1
            self.world.power(self.dut_on)
        elif op == Cmd.AVERAGE_START:
            with self._acq_lock:
                t0 = self.world.clock.now_ns()
                self.acquisition_t0_ns = t0
                self._next_k = 0
                self._last_forget_ns = t0
                self.running = True
        elif op == Cmd.AVERAGE_STOP:
            self._stopping.set()  # the stream ends its burst and lets go of the lock
            with self._acq_lock:
                self._stopping.clear()
                # The samples up to the stop, for a host that reads; what a host that stopped
                # reading left behind was lost on the device, not kept for the next one (a
                # stream that falls behind a reading host holds the clock: a backlog of more
                # than a second is a dead host's).
                if self.running:
                    now = self.world.observable_ns()
                    assert self.acquisition_t0_ns is not None
                    backlog = (now - self.acquisition_t0_ns) // _PERIOD_NS - self._next_k
                    if backlog > STOP_FLUSH_MAX_S * SAMPLE_RATE_HZ:
                        self._next_k += backlog  # lost on the device
                    else:
                        self._emit_until(now)
                self.running = False
        elif op == Cmd.RESET:
            with self._acq_lock:
                self.running = False
            self.dut_on = False
            self.world.power(False)
        # Other opcodes (spike filter, user gains) change nothing the simulation models.

    def _apply_supply(self) -> None:
        volts = self.vdd_mv / 1000 if self.mode == POWER_MODE_SOURCE else self.ampere_supply_v
        self.world.set_supply(volts)

    # -- streaming ----------------------------------------------------------------------------
    def _stream_loop(self) -> None:
        while not self._closing.wait(STREAM_PERIOD_S):
            with self._acq_lock:
                if not self.running:
                    continue
                try:
                    self._emit_until(self.world.observable_ns())
                except Exception:  # a simulator bug must not hang the rig: stop streaming
                    log.exception("PPK2 simulator: streaming failed")
                    self.running = False

    def _emit_until(self, now_ns: int) -> None:
        """Write every sample whose period ended by `now_ns` (caller holds `_acq_lock`)."""
        t0 = self.acquisition_t0_ns
        assert t0 is not None
        end = (now_ns - t0) // _PERIOD_NS
        behind = (end - self._next_k) / SAMPLE_RATE_HZ > CATCH_UP_S
        with self.world.clock.held() if behind else contextlib.nullcontext():
            if self._drop is not None and self._next_k < end:
                self._lose_samples(end)
            while self._next_k < end and not (self._closing.is_set()
                                              or self._stopping.is_set()):
                stop = min(end, self._next_k + _MAX_BURST)
                self._emit_samples(self._next_k, stop)
                self._next_k = stop
        if now_ns - self._last_forget_ns >= NS:
            self.world.forget_before(t0 + self._next_k * _PERIOD_NS)
            self._last_forget_ns = now_ns

    def _lose_samples(self, end: int) -> None:
        """Carry out `drop_samples` or `garble_counters` if its place is in [next sample, end)."""
        assert self._drop is not None and self.acquisition_t0_ns is not None
        kind, count, after_edge, since_ns = self._drop
        at = self._next_k
        if after_edge is not None:
            t0 = self.acquisition_t0_ns
            edges = self.world.falling_edges_between(since_ns, t0 + end * _PERIOD_NS)
            if not edges:
                return
            # The first sample starting at or after the edge, then `after_edge` more.
            at = max(at, -(-(edges[0] - t0) // _PERIOD_NS) + after_edge)
            if at >= end:
                return
            if at > self._next_k:
                self._emit_samples(self._next_k, at)
        self._drop = None
        if kind == "garble":
            self._garbled = (at, at + count)
            self._next_k = at  # those before it were just sent
        else:
            self._next_k = at + count

    def _emit_samples(self, k: int, end: int) -> None:
        t0 = self.acquisition_t0_ns
        assert t0 is not None
        idx = np.arange(k, end + 1, dtype=np.int64)
        bounds = t0 + idx * _PERIOD_NS
        amps = self.world.mean_current(bounds[:-1], _PERIOD_NS)
        adc, rng = self.calibration.adc_for(amps, self.vdd_mv / 1000)
        logic = self.world.gpio_levels(bounds[:-1])  # D0; D1..D7 unconnected
        a, b = self._garbled
        counter = np.where((idx[:-1] >= a) & (idx[:-1] < b), idx[:-1] + GARBLE_OFFSET, idx[:-1])
        self._write(encode_words(adc, rng, counter % COUNTER_MOD, logic))
