"""Driver for the Joulescope JS110 and JS220 through `pyjoulescope_driver.Driver` topics.

The instrument publishes each signal as its own stream of blocks on the driver's thread:
``{dev}/s/i/!data`` (current, float32), ``s/v/!data`` (voltage, float32), ``s/gpi/0/!data`` and
``s/gpi/1/!data`` (general-purpose inputs, one bit per sample, packed little-endian). Each block
carries an absolute ``sample_id`` counted at the instrument's ``sample_rate`` (2 MHz on both
models: ``SAMPLING_FREQUENCY`` in joulescope_driver 2.2.12 ``src/devices/js110/js110_usb.c`` and
``js220_usb.c``) and its own ``decimate_factor``. Streams need not share a rate: on a JS220 the
GPI streams stay at 2 MS/s (``decimate_factor`` 1, PORT_MAP decimate_min 1 in ``js220_usb.c``)
while current and voltage come at ``h/fs``. The output rate is the analog streams' rate; a GPI
stream at k times that rate is reduced to it, one output bit per k input bits, low when any of
them was low (a pulse shorter than an output period is never lost; pyjoulescope
``joulescope/v1/stream_buffer.py`` keeps every k-th bit instead). The streams arrive as separate
messages in any interleaving, so every stream is buffered on its own and a `Chunk` is cut for
the sample-id range all of them cover. A gap in any stream is skipped in the output ids (visible
to the recorder) and counted in ``stats.dropped``; ids are rebased so the first common sample
is 0.

A Joulescope does not source the DUT's supply, it sits in series with it. "Power" here means
connecting the DUT through the current shunt: the JS220 uses ``s/i/range/mode`` = ``auto`` /
``off`` and the JS110 ``s/i/range/select`` = ``auto`` / ``off`` (its range selection has an
``off`` entry that opens the shunt switch). With a fixed `current_range` (``"18 mA"``, names in
`drivers.emon.ranges`) `power_on` connects the DUT in that range instead: the JS220 gets
``s/i/range/select`` = the range, then ``s/i/range/mode`` = ``manual``; the JS110
``s/i/range/select`` = the range. `power_off` is ``off`` either way. A fixed range clips a
current above its full scale (and its larger shunt drops more of the DUT's supply): samples at
full scale are counted (`over_range_samples`) and noted. Auto-ranging, the driver also streams
each sample's range (``s/i/range/!data``, `_RANGE_STREAM`; `RANGE_STREAM_NAMES` says what its
values mean) and hands it over in `Chunk.current_range`: a fifth stream aligned like the others,
reduced like a GPI stream where it comes faster (a JS220's at 2 MS/s): the minimum value of an
output period, which is its largest range. Where none of it comes while the other streams do
(an instrument or firmware that does not stream it), the acquisition goes on without it, noted
(`range_stream_missing`): no sample is lost for it.

Because it cannot limit the supply, the driver checks the MEASURED voltage: above the bench
limit the DUT is disconnected and `VoltageLimitError` is raised (by `stop()` and any later call;
`fault` holds it at once). Trigger inputs are not used: windows are cut on GPI edges in software
(the recorder does it).
"""

from __future__ import annotations

import json
import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

import numpy as np

from drivers.emon import ranges
from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy
from drivers.emon.base import (
    CallbackErrors,
    Chunk,
    ChunkCallback,
    EnergyMonitor,
    check_voltage,
)
from drivers.errors import DeviceError, DeviceTimeout, InstrumentError, VoltageLimitError

log = logging.getLogger(__name__)

#: Deadline for one driver call (publish, query, subscribe ...).
COMMAND_TIMEOUT_S = 1.0
#: Measured voltage may exceed the bench limit by this much (noise) before the DUT is cut off.
VOLTAGE_TOLERANCE_V = 0.05
#: Seconds of samples one stream may run ahead of a silent one before the run is failed.
UNALIGNED_MAX_S = 5.0
#: Host rates each model accepts on ``h/fs`` if its metadata cannot be read (the ``h/fs``
#: options of joulescope_driver 2.2.12 ``js110_usb.c`` / ``js220_usb.c``).
JS110_RATES = (2_000_000, 1_000_000, 500_000, 200_000, 100_000, 50_000, 20_000, 10_000, 5_000,
               2_000, 1_000, 500, 200, 100, 50, 20, 10, 5, 2, 1)
#: A JS220's current and voltage top out at 1 MHz: its ``h/fs`` metadata offers 2 MHz, but
#: ``js220_usb.c`` notes "limited to 1000000 for i, v, p" (PORT_MAP decimate_min 2), so at 2 MHz
#: the analog streams would not run at ``h/fs``. The rig refuses rates above this on a JS220.
JS220_ANALOG_MAX_HZ = 1_000_000
JS220_RATES = tuple(r for r in JS110_RATES if r <= JS220_ANALOG_MAX_HZ)
#: Topic suffix of a metadata request (``JSDRV_TOPIC_SUFFIX_METADATA_REQ`` in joulescope_driver
#: 2.2.12 ``include/jsdrv.h``; ``$`` is the suffix of the response, not a query: NOT_FOUND).
METADATA_REQ = "%"
#: The open mode: ``restore`` updates the driver from the instrument's state and changes
#: nothing on it (binding.pyx ``Driver.open`` docstring; ``JSDRV_DEVICE_OPEN_MODE_RESUME`` in
#: jsdrv.h). ``defaults`` would reconfigure it: the JS110 host code sends its current range
#: default 128 (auto) at open (``js110_usb.c`` PARAMS, ``stream_settings_send``) and a JS220's
#: range mode defaults to auto (``doc/js220.txt``): the DUT would be connected before the rig's
#: ``off`` and before any voltage check. So: open with restore, then ``off`` first of all.
OPEN_MODE = "restore"
#: GPI blocks held while no current/voltage block has told the output rate yet.
_EARLY_GPI_MAX = 4096
#: Analog block lengths kept to size the GPI blocks that start at the same id.
_BLOCKS_REMEMBERED = 64
_INSTALL_HINT = "install the joulescope extra: pip install 'neurobench-rig[joulescope]'"
_CABLE_HINT = "check the Joulescope's USB cable and that no other program has it open"


class JoulescopeDriverLike(Protocol):
    """The part of `pyjoulescope_driver.Driver` this driver uses (the real one or a fake)."""

    def device_paths(self, timeout: float | None = None) -> list[str]: ...
    def open(self, device_prefix: str, mode: str | None = None,
             timeout: float | None = None) -> Any: ...
    def close(self, device_prefix: str, timeout: float | None = None) -> Any: ...
    def publish(self, topic: str, value: Any, timeout: float | None = None) -> Any: ...
    def query(self, topic: str, timeout: float | None = None) -> Any: ...
    def subscribe(self, topic: str, flags: Any, fn: Callable[[str, Any], None],
                  timeout: float | None = None) -> Any: ...
    def unsubscribe(self, topic: str, fn: Callable[[str, Any], None],
                    timeout: float | None = None) -> Any: ...
    def finalize(self, timeout: float | None = None) -> Any: ...


@dataclass
class _Stream:
    """One signal's buffered blocks, as (first output id, samples) with ids before rebasing.

    GPI blocks are packed bits: a block of n bytes holds 8n-7 .. 8n samples, so the last 7 bits
    stay `tail` (unsure) until the current block with the same first id, the next GPI block's id
    or `stop` tells which were padding.
    """

    name: str
    packed: bool
    #: Input samples per output sample (a JS220's 2 MS/s GPI at a lower ``h/fs``); 1 for the
    #: analog streams. Ids in `add`, `end`, `tail` count input samples; `blocks` output ones.
    ratio: int = 1
    #: A stream whose rate follows the analog streams' (the GPI, the current range: at ``h/fs``
    #: or a whole multiple of it, reduced to it by the minimum of each output period).
    follows: bool = False
    blocks: deque[tuple[int, np.ndarray]] = field(default_factory=deque)
    first_id: int | None = None
    first_out: int | None = None  # output id of the first sample buffered
    end: int | None = None  # one past the last sure sample
    tail: tuple[int, np.ndarray] | None = None
    tail_block: int | None = None  # first id of the block the tail belongs to
    #: Input samples of an output sample whose period the next block completes.
    carry: tuple[int, np.ndarray] | None = None

    def add(self, start: int, data: np.ndarray, stats_note: Callable[[str], None],
            known_len: int | None = None) -> int:
        """Append a block starting at output id `start`; returns samples missing before it.

        `known_len` is the block's sample count when known (packed bits round it up to 8).
        """
        block_start = start
        if self.packed:
            bits = np.unpackbits(np.asarray(data, dtype=np.uint8), bitorder="little")
            if self.tail is not None:
                t0, tbits = self.tail
                self.tail = None
                keep = tbits[: max(0, min(len(tbits), start - t0))]
                if len(keep):  # bits before this block's id were samples, the rest padding
                    self._append(t0, keep)
                    self.end = t0 + len(keep)
        else:
            bits = np.asarray(data)
        gap = 0
        if self.first_id is None:
            self.first_id = start
            self.end = start
        assert self.end is not None
        if start > self.end:
            gap = start - self.end
            stats_note(f"{self.name}: samples {self.end}..{start - 1} missing")
        elif start < self.end:
            overlap = self.end - start
            stats_note(f"{self.name}: {min(overlap, len(bits))} sample(s) repeated, ignored")
            bits = bits[overlap:]
            start = self.end
        if len(bits) == 0:
            return gap
        if self.packed:
            padded = 8 * len(data)
            if known_len is not None and padded - 8 < known_len <= padded:
                bits = bits[: max(0, block_start + known_len - start)]
            else:
                sure = max(0, len(bits) - 7)
                self.tail = (start + sure, bits[sure:])
                self.tail_block = block_start
                bits = bits[:sure]
        if len(bits):
            self._append(start, bits)
        self.end = start + len(bits)
        return gap

    def _append(self, start: int, data: np.ndarray) -> None:
        """Buffer sure input samples from input id `start`, reduced to the output rate."""
        r = self.ratio
        if r > 1:
            if self.carry is not None:
                c0, cbits = self.carry
                self.carry = None
                if c0 + len(cbits) == start:  # else that output sample lost some input: drop it
                    start, data = c0, np.concatenate((cbits, data))
            skip = -start % r  # an output sample only partly covered at the start is not cut
            data, start = data[skip:], start + skip
            n = len(data) // r
            if len(data) > n * r:
                self.carry = (start + n * r, data[n * r :])
            if n == 0:
                return
            # Low (0) if the input was low at any time in the output sample's period.
            data = data[: n * r].reshape(n, r).min(axis=1)
            start //= r
        if self.first_out is None:
            self.first_out = start
        self.blocks.append((start, data))

    def settle_block(self, block_start: int, length: int) -> None:
        """Another stream's block at `block_start` has `length` samples: so has this one's."""
        if self.tail is None or self.tail_block != block_start:
            return
        t0, tbits = self.tail
        if t0 <= block_start + length <= t0 + len(tbits):  # else the blocks differ: wait
            self.settle_tail(block_start + length)

    def settle_tail(self, limit: int) -> None:
        """The unsure tail bits count up to id `limit` (the rest was padding)."""
        if self.tail is None:
            return
        t0, tbits = self.tail
        self.tail = None
        keep = tbits[: max(0, min(len(tbits), limit - t0))]
        if len(keep):
            self._append(t0, keep)
            self.end = t0 + len(keep)

    def discard_before(self, cursor: int) -> None:
        while self.blocks:
            start, data = self.blocks[0]
            if start + len(data) <= cursor:
                self.blocks.popleft()
            elif start < cursor:
                self.blocks[0] = (cursor, data[cursor - start :])
                return
            else:
                return

    def available_from(self) -> int | None:
        """First buffered id (after `discard_before`), or None when nothing is buffered."""
        return self.blocks[0][0] if self.blocks else None

    def take(self, cursor: int, n: int) -> np.ndarray:
        """Remove and return `n` samples from `cursor` (the caller checked they are here)."""
        parts = []
        need = n
        while need:
            start, data = self.blocks[0]
            piece = data[:need]
            parts.append(piece)
            need -= len(piece)
            if len(piece) == len(data):
                self.blocks.popleft()
            else:
                self.blocks[0] = (start + len(piece), data[len(piece) :])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def contiguous_len(self, cursor: int) -> int:
        """How many samples from `cursor` on are buffered without a hole."""
        n, at = 0, cursor
        for start, data in self.blocks:
            if start != at:
                break
            n += len(data)
            at += len(data)
        return n


#: (stream name, data topic suffix, ctrl topic suffix, packed bits)
_STREAMS = (
    ("current", "s/i/!data", "s/i/ctrl", False),
    ("voltage", "s/v/!data", "s/v/ctrl", False),
    ("gpi0", "s/gpi/0/!data", "s/gpi/0/ctrl", True),
    ("gpi1", "s/gpi/1/!data", "s/gpi/1/ctrl", True),
)
#: The current range of each sample, streamed while auto-ranging (`Joulescope.record_range`):
#: field RANGE, u4 elements (joulescope_driver 2.2.12 ``js110_usb.c`` FIELDS and ``js220_usb.c``
#: PORT_MAP), which the binding hands over unpacked, one uint8 per sample (``binding.pyx``
#: "uint4 -> uint8"). A JS110's comes at ``h/fs`` (decimated with the analog streams), a
#: JS220's at 2 MS/s (PORT_MAP decimate_min 1, never decimated on the host) like its GPI.
_RANGE_STREAM = ("range", "s/i/range/!data", "s/i/range/ctrl", False)
#: What a range stream's values mean, per model, index = value: the Joulescope UI's labels of
#: its current-range trace (pyjoulescope_ui ``widgets/waveform/waveform_widget.py``
#: ``_JS110_AXIS_R`` and ``_JS220_AXIS_R``; pyjoulescope ``v1/stream_buffer.py``: "0 = 10A,
#: 6 = 18 uA, 7=off" on a JS110). A value past the table is "off" too (the DUT disconnected).
#: The names are `drivers.emon.ranges`' (and the accuracy declaration's) but "off".
RANGE_STREAM_NAMES = {
    "js110": ("10 A", "2 A", "180 mA", "18 mA", "1.8 mA", "180 µA", "18 µA", "off"),
    "js220": ("10 A", "180 mA", "18 mA", "1.8 mA", "180 µA", "18 µA", "off"),
}


#: What every Joulescope search tried (2026-11-28), beside each model's own lead below.
_SEARCHED_BOTH = (
    "pages corpus: the JS220 User's Guide Rev 1.3 copies at manuals.online (joulescope/"
    "measuring-instrument/js220/user-manual/vkim) and easymanua.ls (joulescope/js220/manual) "
    "hold only the guide's opening pages and its page 35 ('GPI & GPO') as stored text; searches "
    "'JS220 current range 18 µA accuracy offset nA', 'Joulescope specifications table shunt "
    "resistance 1111', 'JS220 User's Guide Specifications Voltage measurement', 'Joulescope "
    "User's Guide Current range Shunt resistance Offset Gain accuracy' found no other page; "
    "docs corpus: PyPI and driver pages only; code corpus and find_string 'Current "
    "measurement specifications': no Joulescope text; the jetperch repositories pyjoulescope, "
    "joulescope_driver and pyjoulescope_ui (every revision) hold no accuracy table nor the "
    "guide's source. The vendor's forum posts (forum.joulescope.com/t/388, /t/268) show or "
    "describe the table but are not the guide: not taken")
#: Where each model's accuracy figures were looked for (2026-11-28); none was read first-hand.
_SEARCHED = {
    "js110": "2026-11-28: the Joulescope (JS110) User's Guide, 'Current measurement "
             "specifications' table (its page 12, as the vendor's forum post t/388 names it, "
             "showing it as an image and paraphrasing its 2 A range only): no copy of the JS110 "
             "guide was found; " + _SEARCHED_BOTH,
    "js220": "2026-11-28: the Joulescope JS220 User's Guide (Rev 1.3, 2022-10-25), 'Current "
             "measurement specifications' table and its voltage and time-base figures: not "
             "readable here; " + _SEARCHED_BOTH,
}


def joulescope_accuracy(model: str) -> MonitorAccuracy:
    """What a JS110 or JS220 declares: its ranges (names and full scales from
    `drivers.emon.ranges`, the pyjoulescope_driver range options), each `NotPublished` until
    the user guide's table is read (the JS110 has a 2 A range the JS220 lacks)."""
    names = ranges.JS220_RANGES if model == "js220" else tuple(ranges.JOULESCOPE_RANGES)
    label = model.upper()
    return MonitorAccuracy(
        current_ranges=tuple(
            RangeAccuracy(name, ranges.full_scale_a(name), NotPublished(
                what=f"{label} current accuracy in the {name} range",
                searched=_SEARCHED[model]))
            for name in names),
        voltage=NotPublished(what=f"{label} voltage measurement accuracy",
                             searched=f"the same user guide's specifications, not reachable "
                                      f"here ({_SEARCHED[model]})"),
        voltage_set=None,  # in series with the bench's supply: it sources nothing
        clock=NotPublished(what=f"{label} sample clock tolerance",
                           searched=_SEARCHED[model]),
        notes="A fixed range is the settings' current_range (the reading's range). Auto "
              "(the default) ranges per sample: the driver streams each sample's range "
              "(s/i/range/!data; a JS220's at 2 MS/s, an output sample taking the largest "
              "range of its period), the rig records it (the trace's current_range signal) and "
              "counts each window's samples per range, so that a budget takes each range's "
              "figure for its share of the readings. Without that record (record_range off, "
              "or older runs) a reading is taken to be in the smallest range whose full scale "
              "holds it (what the instrument's autoranging picks).",
    )


class Joulescope(EnergyMonitor):
    """A JS110 or JS220: current, voltage and GPI0/1 streams, aligned by sample id."""

    driver = "joulescope"

    def __init__(self, jsdrv: JoulescopeDriverLike, device_path: str, *, voltage_limit_v: float,
                 simulated: bool = False, own_driver: bool = True,
                 current_range: str = ranges.AUTO, record_range: bool = True) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v)
        self.jsdrv = jsdrv
        self.device_path = device_path
        self.model = _model_of(device_path)
        #: "auto" or the fixed range (a name of `ranges.JOULESCOPE_RANGES`) `power_on` selects.
        self.current_range = _check_range(current_range, self.model)
        #: Whether auto-ranging streams each sample's range too (`_RANGE_STREAM`; a fixed range
        #: is the settings' `current_range` and needs no stream).
        self.record_range = record_range
        self._stream_defs = _STREAMS + ((_RANGE_STREAM,) if self._records_range else ())
        #: Samples at or above a fixed range's full scale (clipped by the instrument).
        self.over_range_samples = 0
        #: True once an acquisition went on without the range stream (none of it came).
        self.range_stream_missing = False
        self.simulated = simulated
        self._own_driver = own_driver
        self._opened = False
        self._closed = False
        self._running = False
        self._voltage_v: float | None = None
        self._sample_rate_hz: float | None = None
        self._range_value = "off"
        self._lock = threading.RLock()
        self._on_chunk: ChunkCallback | None = None
        self._streams: list[_Stream] = []
        self._base: int | None = None
        self._cursor = 0
        self._rate_seen: tuple[int, int] | None = None
        #: first id -> sample count of recent analog blocks (insertion ordered, bounded)
        self._block_lengths: dict[int, int] = {}
        self._callback_errors = CallbackErrors("Joulescope")
        #: GPI blocks that came before the first current/voltage block (which sets the rate).
        self._early_gpi: list[tuple[int, dict[str, Any]]] = []
        # The one callback object given to subscribe AND unsubscribe: the binding matches the
        # exact object ("provide the exact same bound method instance", binding.pyx
        # Driver.subscribe); a fresh `self._on_data` is NOT_FOUND, and the binding then drops
        # its reference to the subscribed one while the C side still calls it (a crash).
        self._on_data_cbk = self._on_data
        #: Set when the measured voltage went over the limit (the DUT was disconnected).
        self.fault: VoltageLimitError | None = None

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        address: str,
        *,
        voltage_limit_v: float,
        simulated: bool = False,
        driver_factory: Callable[[], JoulescopeDriverLike] | None = None,
        current_range: str = ranges.AUTO,
        record_range: bool = True,
    ) -> Joulescope:
        """Open the Joulescope at device path `address` ("" for the only one attached).

        `driver_factory` makes the Driver-like object (default `pyjoulescope_driver.Driver`);
        the monitor owns it and finalizes it on `close()`. `current_range` is "auto" or a fixed
        range ("18 mA"); one the model lacks is refused before anything is published.
        """
        if driver_factory is None:
            if simulated:
                raise DeviceError(
                    "Joulescope: a simulated Joulescope needs a driver_factory",
                    hint="the virtual bench passes "
                         "drivers.emon.joulescope_socket.FakeJoulescopeDriver",
                )
            driver_factory = _real_driver
        try:
            jsdrv = driver_factory()
        except DeviceError:
            raise
        except Exception as exc:
            raise DeviceError(f"Joulescope: the driver failed to start: {exc}",
                              hint=_CABLE_HINT) from exc
        try:
            device_path = _pick_device(_call(lambda: jsdrv.device_paths(COMMAND_TIMEOUT_S),
                                             "device_paths"), address)
            monitor = cls(jsdrv, device_path, voltage_limit_v=voltage_limit_v,
                          simulated=simulated, current_range=current_range,
                          record_range=record_range)
        except BaseException:
            _finalize(jsdrv)
            raise
        return cls._connect_or_close(monitor)

    def connect(self) -> None:
        """Open the device without changing its state, then disconnect the DUT until
        `power_on` (see `OPEN_MODE`: ``defaults`` would connect it)."""
        self._call("open", lambda: self.jsdrv.open(self.device_path, OPEN_MODE,
                                                   COMMAND_TIMEOUT_S))
        self._opened = True
        # The first publish of all. Unconfirmed without hardware: what a JS220 holds when it
        # was just plugged in (its documented default range mode is auto, doc/js220.txt); no
        # open mode changes that, this publish is the earliest point the host can.
        self._publish(self._range_topic, "off")

    def close(self) -> None:
        """Stop, disconnect the DUT, close the device, finalize an owned driver. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            self._stop_while_closing()
        if self._opened:
            self.power_off()
            try:
                self._call("close", lambda: self.jsdrv.close(self.device_path,
                                                             COMMAND_TIMEOUT_S))
            except Exception as exc:
                log.warning("Joulescope: close failed: %s", exc)
            self._opened = False
        if self._own_driver:
            _finalize(self.jsdrv)


    # -- EnergyMonitor ------------------------------------------------------------------------
    @property
    def sample_rate(self) -> float:
        """The configured host sample rate [Hz]."""
        if self._sample_rate_hz is None:
            raise DeviceError("Joulescope: sample rate asked before configure()",
                              hint="call configure(voltage, sample_rate) first")
        return self._sample_rate_hz

    @classmethod
    def records_range_with(cls, *, current_range: str = ranges.AUTO, record_range: bool = True,
                           **options: Any) -> bool:
        """Auto-ranging streams each sample's range (unless `record_range` is off)."""
        try:
            auto = ranges.normalize("joulescope", current_range) == ranges.AUTO
        except ranges.RangeError:
            return False  # refused when opened
        return auto and record_range

    @property
    def _records_range(self) -> bool:
        """Whether this acquisition streams each sample's current range."""
        return self.record_range and self.current_range == ranges.AUTO

    @property
    def _range_topic(self) -> str:
        """The topic that connects (a range, ``auto``) and disconnects (``off``) the DUT."""
        suffix = "s/i/range/mode" if self.model == "js220" else "s/i/range/select"
        return f"{self.device_path}/{suffix}"

    @property
    def _full_scale_a(self) -> float | None:
        """Full scale [A] of the fixed range, None when auto-ranging."""
        if self.current_range == ranges.AUTO:
            return None
        return ranges.full_scale_a(self.current_range)

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Check `voltage` against the bench limit (nothing is sent before), set ``h/fs``.

        The Joulescope does not set the voltage: the bench's supply does; `voltage` is what the
        DUT is expected to see and what the measured voltage is checked against.
        """
        check_voltage(voltage, self.voltage_limit_v, who="Joulescope")
        if self._running:
            raise DeviceError("Joulescope: configure() during an acquisition", hint="stop() first")
        rates = self._allowed_rates()
        fs = round(sample_rate)
        if fs not in rates or abs(fs - sample_rate) > 1e-9:
            raise DeviceError(
                f"Joulescope {self.model}: sample rate {sample_rate:g} Hz is not available",
                hint="choose one of " + ", ".join(f"{r:g}" for r in sorted(rates)) + " Hz",
            )
        self._publish(f"{self.device_path}/h/fs", fs)
        self._voltage_v = float(voltage)
        self._sample_rate_hz = float(fs)

    def _allowed_rates(self) -> set[int]:
        """The ``h/fs`` options from the device's metadata, else the model's known list.

        Rates a JS220 offers above `JS220_ANALOG_MAX_HZ` are left out (its current and voltage
        do not reach them)."""
        rates: set[int] | None = None
        topic = f"{self.device_path}/h/fs{METADATA_REQ}"
        try:
            meta = self.jsdrv.query(topic, COMMAND_TIMEOUT_S)
            if isinstance(meta, str | bytes):  # JSON text, as pubsub holds it
                meta = json.loads(meta)
            options = meta.get("options") if isinstance(meta, dict) else None
            if options:
                rates = {int(opt[0]) for opt in options}
            else:
                log.info("Joulescope: %s holds no options (%r): using the model's table",
                         topic, meta)
        except Exception as exc:  # metadata is a convenience; the table is the fallback
            log.info("Joulescope: %s unavailable (%s): using the model's table", topic, exc)
        if rates is None:
            rates = set(JS220_RATES if self.model == "js220" else JS110_RATES)
        if self.model == "js220":
            rates = {r for r in rates if r <= JS220_ANALOG_MAX_HZ}
        return rates

    def power_on(self) -> None:
        """Connect the DUT through the shunt: current range auto, or the fixed range."""
        self._raise_fault()
        if self.current_range == ranges.AUTO:
            value = ranges.AUTO
        elif self.model == "js220":  # the range first, then manual ranging connects the DUT
            self._publish(f"{self.device_path}/s/i/range/select", self.current_range)
            value = "manual"
        else:  # the JS110's one topic: its range selection connects the DUT
            value = self.current_range
        self._publish(self._range_topic, value)
        self._range_value = value

    def power_off(self) -> None:
        """Disconnect the DUT (current range off); only logs if the device is gone."""
        try:
            self._publish(self._range_topic, "off")
            self._range_value = "off"
        except Exception as exc:  # called on error paths: never mask the original error
            log.warning("Joulescope: disconnecting the DUT failed: %s", exc)

    def start(self, on_chunk: ChunkCallback) -> None:
        """Subscribe to the streams and enable them; chunks go to `on_chunk` on the driver's
        thread."""
        if self._sample_rate_hz is None:
            raise DeviceError("Joulescope: start() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        if self._running:
            raise DeviceError("Joulescope: start() while already acquiring", hint="stop() first")
        self._raise_fault()
        with self._lock:
            self._streams = [_Stream(name, packed, follows=packed or name == "range")
                             for name, _, _, packed in self._stream_defs]
            self._base = None
            self.range_stream_missing = False
            self._cursor = 0
            self._rate_seen = None
            self._early_gpi.clear()
            self._block_lengths.clear()
            self._callback_errors.clear()
            self._on_chunk = on_chunk
        self._running = True
        try:
            for _, data, _, _ in self._stream_defs:
                topic = f"{self.device_path}/{data}"
                self._call(f"subscribe {topic}", partial(
                    self.jsdrv.subscribe, topic, ["pub"], self._on_data_cbk, COMMAND_TIMEOUT_S))
            for _, _, ctrl, _ in self._stream_defs:
                self._publish(f"{self.device_path}/{ctrl}", 1)
        except BaseException:
            self._running = False
            self._teardown_streams()
            with self._lock:
                self._on_chunk = None
            raise

    def stop(self) -> None:
        """Disable and unsubscribe the streams, then deliver what is still buffered."""
        if not self._running:
            self._raise_fault()
            return
        self._running = False
        try:
            self._teardown_streams()
        finally:
            with self._lock:
                # Unsubscribed: no more driver callbacks, the tails can be settled.
                analog_end = min((s.end for s in self._streams[:2] if s.end is not None),
                                 default=None)
                if analog_end is not None:
                    for stream in self._streams[2:]:
                        stream.settle_tail(analog_end * stream.ratio)
                    if self._streams[-1].name == "range" and self._streams[-1].first_id is None:
                        self._drop_range_stream()  # never came: the rest must not be lost
                self._emit()
                leftover = sum(sum(len(d) for _, d in s.blocks) for s in self._streams)
                if leftover and self._base is not None:
                    self.stats.note(f"{leftover} sample(s) of single streams left unaligned "
                                    "at stop")
                self._on_chunk = None
        self._raise_fault()
        self._callback_errors.raise_kept()

    def _teardown_streams(self) -> None:
        """Disable every stream, then unsubscribe (each step tried, first failure raised)."""
        first: BaseException | None = None
        for _, _, ctrl, _ in self._stream_defs:
            try:
                self._publish(f"{self.device_path}/{ctrl}", 0)
            except Exception as exc:
                first = first or exc
        for _, data, _, _ in self._stream_defs:
            topic = f"{self.device_path}/{data}"
            try:
                self._call(f"unsubscribe {topic}", partial(
                    self.jsdrv.unsubscribe, topic, self._on_data_cbk, COMMAND_TIMEOUT_S))
            except Exception as exc:
                first = first or exc
        if first is not None:
            raise first

    def settings(self) -> dict[str, Any]:
        """Every setting sent to the instrument, plus identity."""
        return {
            "driver": self.driver,
            "device_path": self.device_path,
            "model": self.model,
            "simulated": self.simulated,
            "voltage_v": self._voltage_v,
            "voltage_limit_v": self.voltage_limit_v,
            "sample_rate_hz": self._sample_rate_hz,
            "range_topic": self._range_topic[len(self.device_path) + 1 :],
            "range": self._range_value,
            "current_range": self.current_range,
            "current_range_full_scale_a": self._full_scale_a,
            "over_range_samples": self.over_range_samples,
            "streams": [data for _, data, _, _ in self._stream_defs],
            # Per sample while auto-ranging (the range stream), else the fixed current_range.
            "current_range_recorded": (
                "no: the instrument sent no range stream" if self.range_stream_missing
                else "per sample (s/i/range/!data)" if self._records_range
                else "no: the fixed current_range" if self.current_range != ranges.AUTO
                else "no"),
            "open_mode": OPEN_MODE,
            "accuracy": self.accuracy().to_json(),
        }

    def accuracy(self) -> MonitorAccuracy:
        """This model's declaration (`joulescope_accuracy`)."""
        return joulescope_accuracy(self.model)

    def self_test(self) -> dict[str, Any]:
        """Check the device is listed and answers a query of its host rate."""
        paths = _call(lambda: self.jsdrv.device_paths(COMMAND_TIMEOUT_S), "device_paths")
        if self.device_path not in paths:
            raise DeviceError(f"Joulescope {self.device_path} is no longer attached",
                              hint=_CABLE_HINT)
        fs = self._call("query h/fs", lambda: self.jsdrv.query(f"{self.device_path}/h/fs",
                                                               COMMAND_TIMEOUT_S))
        return {
            "driver": self.driver,
            "device_path": self.device_path,
            "model": self.model,
            "serial": self.device_path.rsplit("/", 1)[-1],
            "h/fs": fs,
            "simulated": self.simulated,
        }

    # -- calls --------------------------------------------------------------------------------
    def _publish(self, topic: str, value: Any, timeout: float = COMMAND_TIMEOUT_S) -> None:
        self._call(f"{topic} = {value!r}",
                   lambda: self.jsdrv.publish(topic, value, timeout))

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        return _call(fn, what, who=f"Joulescope {self.device_path}")

    def _raise_fault(self) -> None:
        if self.fault is not None:
            raise self.fault

    # -- driver thread ------------------------------------------------------------------------
    def _on_data(self, topic: str, value: dict[str, Any]) -> None:
        """One block of one stream (driver thread): buffer it, emit what all streams cover."""
        try:
            with self._lock:
                if self._on_chunk is None or self.fault is not None:
                    return
                index = self._stream_index(topic)
                if index is None or index >= len(self._streams):  # a dropped range stream
                    return
                self._take_block(index, value)
                self._emit()
                self._check_silent_streams()
        except Exception as exc:  # surfaced by stop(); the driver thread must live on
            log.exception("Joulescope: handling %s failed", topic)
            self._callback_errors.keep(exc)

    def _take_block(self, index: int, value: dict[str, Any]) -> None:
        """Buffer one block of stream `index` at its own rate (under the lock)."""
        stream = self._streams[index]
        base_rate = int(value["sample_rate"])
        decimate = int(value["decimate_factor"]) or 1
        if stream.follows:
            if self._rate_seen is None:  # the output rate is not known yet
                if len(self._early_gpi) >= _EARLY_GPI_MAX:
                    self._early_gpi.clear()
                    raise DeviceError(
                        f"Joulescope: {_EARLY_GPI_MAX} GPI blocks and no current or voltage",
                        hint="check the USB connection; the instrument may be overloaded")
                self._early_gpi.append((index, value))
                return
            ratio = self._gpi_ratio(stream, base_rate, decimate)
            if stream.ratio != ratio:
                if stream.first_id is not None:
                    raise DeviceError(f"Joulescope: {stream.name} changed its rate while "
                                      "streaming", hint="restart the acquisition")
                stream.ratio = ratio
            start = int(value["sample_id"]) // decimate
            if not stream.packed:  # the range: one uint8 per sample, as the binding unpacks it
                known = None
            elif ratio == 1:
                known = self._block_lengths.get(start)
            elif decimate == 1:
                # Full-rate GPI blocks (a JS220's) hold whole bytes: 8 samples per byte received
                # (js220_usb.c stream_in_port: sample_count = (size << 3) / element_size_bits).
                known = 8 * len(value["data"])
            else:
                known = None
            stream.add(start, value["data"], self.stats.note, known)
            return
        rate = (base_rate, decimate)
        first_analog = self._rate_seen is None
        if self._rate_seen is None:
            self._rate_seen = rate
            fs = base_rate / decimate
            if self._sample_rate_hz and abs(fs - self._sample_rate_hz) > 1e-6:
                self.stats.note(f"streaming at {fs:g} Hz, configured "
                                f"{self._sample_rate_hz:g} Hz")
        elif rate != self._rate_seen:
            raise DeviceError(
                f"Joulescope: {stream.name} at {base_rate / decimate:g} Hz, the other analog "
                f"stream at {self._rate_seen[0] / self._rate_seen[1]:g} Hz",
                hint="current and voltage must share one rate; restart the acquisition")
        start = int(value["sample_id"]) // decimate
        n = len(value["data"])
        stream.add(start, value["data"], self.stats.note)
        # Blocks of same-rate streams cover the same ids: this fixes the GPI bit count.
        self._block_lengths[start] = n
        while len(self._block_lengths) > _BLOCKS_REMEMBERED:
            del self._block_lengths[next(iter(self._block_lengths))]
        for other in self._streams:
            if other.packed and other.ratio == 1:
                other.settle_block(start, n)
        if first_analog:
            early, self._early_gpi = self._early_gpi, []
            for gpi_index, gpi_value in early:
                self._take_block(gpi_index, gpi_value)

    def _gpi_ratio(self, stream: _Stream, base_rate: int, decimate: int) -> int:
        """GPI input samples per output sample: the analog decimation over the GPI's."""
        assert self._rate_seen is not None
        analog_base, analog_decimate = self._rate_seen
        if base_rate != analog_base or analog_decimate % decimate:
            raise DeviceError(
                f"Joulescope: {stream.name} at {base_rate / decimate:g} Hz is not a whole "
                f"multiple of the current's {analog_base / analog_decimate:g} Hz",
                hint="report this with the instrument's model and firmware version")
        return analog_decimate // decimate

    def _stream_index(self, topic: str) -> int | None:
        for i, (_, data, _, _) in enumerate(self._stream_defs):
            if topic.endswith(data):
                return i
        return None

    def _emit(self) -> None:
        """Cut chunks for the id range every stream covers (called under the lock)."""
        streams = self._streams
        if self._base is None:
            firsts = [s.first_out for s in streams if s.first_out is not None]
            if len(firsts) < len(streams):
                return
            # Streams are enabled one after the other: start where all of them have data.
            self._base = max(firsts)
            self._cursor = self._base
        pieces: list[list[np.ndarray]] = [[] for _ in streams]
        first_out = None
        while True:
            for s in streams:
                s.discard_before(self._cursor)
            starts = [st for s in streams if (st := s.available_from()) is not None]
            if len(starts) < len(streams):
                break
            ahead = max(starts)
            if ahead > self._cursor:  # some stream lost these ids: skip them in every stream
                if first_out is not None:
                    self._deliver(first_out, pieces)
                    pieces = [[] for _ in streams]
                    first_out = None
                self.stats.dropped += ahead - self._cursor
                self.stats.note(f"samples {self._cursor - self._base}.."
                                f"{ahead - self._base - 1} lost")
                self._cursor = ahead
                continue
            n = min(s.contiguous_len(self._cursor) for s in streams)
            if first_out is None:
                first_out = self._cursor - self._base
            for piece, s in zip(pieces, streams, strict=True):
                piece.append(s.take(self._cursor, n))
            self._cursor += n
        if first_out is not None:
            self._deliver(first_out, pieces)

    def _check_silent_streams(self) -> None:
        """Bound memory: a stream that stopped arriving must not let the others pile up."""
        fs = self._sample_rate_hz or 0.0
        limit = max(int(fs * UNALIGNED_MAX_S), 100_000)
        buffered = [sum(len(d) for _, d in s.blocks) for s in self._streams]
        if max(buffered) <= limit:
            return
        silent = [s.name for s, n in zip(self._streams, buffered, strict=True) if n == 0]
        if silent == ["range"] and self._streams[-1].first_id is None:
            self._drop_range_stream()  # an instrument that never streams its range
            return
        self.stats.dropped += max(buffered)
        self._callback_errors.keep(DeviceError(
            f"Joulescope: stream(s) {', '.join(silent) or '?'} stopped arriving while others "
            f"buffered {max(buffered)} samples",
            hint="check the USB connection; the instrument may be overloaded (lower the rate)"))
        for stream in self._streams:
            stream.blocks.clear()

    def _drop_range_stream(self) -> None:
        """Go on without the range stream when none of it ever came while the others did (an
        instrument or firmware that does not stream it): the chunks then tell no range, and the
        budget takes the range from the current, as without a record (under the lock)."""
        if not self._streams or self._streams[-1].name != "range":
            return
        self._streams.pop()
        self.range_stream_missing = True
        self.stats.note("the instrument sent no current range (s/i/range/!data) while the "
                        "other streams came: each sample's range is not recorded")
        log.warning("Joulescope: no range stream; going on without each sample's range")
        self._emit()

    def _deliver(self, first: int, pieces: list[list[np.ndarray]]) -> None:
        if self.fault is not None:  # the DUT was cut off: the rest of the run is void
            return
        cur, volt, g0, g1, *rng = (p[0] if len(p) == 1 else np.concatenate(p) for p in pieces)
        gpio = (g0.astype(np.uint8) & 1) | ((g1.astype(np.uint8) & 1) << 1)
        names = RANGE_STREAM_NAMES[self.model]
        chunk = Chunk(first, cur.astype(np.float64), volt.astype(np.float64), gpio,
                      # A value past the model's table is off (the last name).
                      current_range=(np.minimum(rng[0], len(names) - 1).astype(np.uint8)
                                     if rng else None),
                      range_names=names if rng else ())
        self.stats.samples += len(chunk)
        self._count_over_range(chunk)
        if self._check_measured_voltage(chunk):
            return
        on_chunk = self._on_chunk
        if on_chunk is None:
            return
        self._callback_errors.call(on_chunk, chunk)  # surfaced by stop()

    def _count_over_range(self, chunk: Chunk) -> None:
        """Count samples a fixed range clipped (at its full scale); note the first."""
        full_scale = self._full_scale_a
        if full_scale is None or not len(chunk):
            return
        over = np.abs(chunk.current) >= full_scale * (1 - 1e-6)  # float32 full scale
        count = int(over.sum())
        if not count:
            return
        if not self.over_range_samples:
            at = chunk.first_sample_id + int(np.argmax(over))
            self.stats.note(f"current at the {self.current_range} range's full scale from "
                            f"sample {at} on: clipped; use a larger range or auto")
            log.warning("Joulescope: current clipped by the fixed %s range (sample %d)",
                        self.current_range, at)
        self.over_range_samples += count

    def _check_measured_voltage(self, chunk: Chunk) -> bool:
        """True (and the DUT disconnected) if any voltage in the chunk is over the limit."""
        if not len(chunk):
            return False
        over = chunk.voltage > self.voltage_limit_v + VOLTAGE_TOLERANCE_V
        if not over.any():
            return False
        at = int(np.argmax(over))
        measured = float(chunk.voltage[at])
        self.fault = VoltageLimitError(
            f"Joulescope: measured {measured:.3f} V at sample {chunk.first_sample_id + at}, "
            f"above the bench voltage limit of {self.voltage_limit_v:g} V; DUT disconnected",
            hint="a Joulescope cannot limit the supply: check the bench supply's setting",
        )
        try:  # never wait inside the driver's own thread
            self.jsdrv.publish(self._range_topic, "off", 0)
            self._range_value = "off"
        except Exception as exc:
            log.error("Joulescope: could not disconnect the DUT after over-voltage: %s", exc)
        log.error("%s", self.fault)
        return True


# -- helpers ----------------------------------------------------------------------------------
def _real_driver() -> JoulescopeDriverLike:
    try:
        from pyjoulescope_driver import Driver  # heavy SDK: only when a Joulescope is used
    except ImportError as exc:
        raise DeviceError(f"Joulescope: pyjoulescope_driver is not installed ({exc})",
                          hint=_INSTALL_HINT) from exc
    driver: JoulescopeDriverLike = Driver()
    return driver


def _finalize(jsdrv: JoulescopeDriverLike) -> None:
    try:
        jsdrv.finalize(COMMAND_TIMEOUT_S)
    except Exception as exc:
        log.warning("Joulescope: finalizing the driver failed: %s", exc)


def _call(fn: Callable[[], Any], what: str, *, who: str = "Joulescope") -> Any:
    """Run one driver call; a timeout -> `DeviceTimeout`, a refusal -> `InstrumentError`."""
    try:
        return fn()
    except TimeoutError as exc:
        raise DeviceTimeout(f"{who}: no answer to {what} in time", hint=_CABLE_HINT) from exc
    except DeviceError:
        raise
    except Exception as exc:
        raise InstrumentError(f"{who} refused {what}: {exc}", command=what,
                              hint="check the topic and value against the Joulescope's "
                              "metadata (python -m pyjoulescope_driver info)") from exc


def _check_range(current_range: str, model: str) -> str:
    """`current_range` as this model takes it, or `DeviceError` before anything is sent."""
    try:
        name = ranges.normalize("joulescope", current_range)
    except ranges.RangeError as exc:
        raise DeviceError(f"Joulescope: {exc.message}", hint=exc.hint) from None
    if model == "js220" and name not in (ranges.AUTO, *ranges.JS220_RANGES):
        raise DeviceError(f"Joulescope js220: there is no {name} range",
                          hint="a JS220 takes auto or " + ", ".join(ranges.JS220_RANGES))
    return name


def _model_of(device_path: str) -> str:
    lower = device_path.lower()
    for model in ("js220", "js110"):
        if model in lower:
            return model
    raise DeviceError(f"Joulescope: {device_path!r} is not a JS110 or JS220",
                      hint="this driver supports the JS110 and JS220")


def _pick_device(paths: Sequence[str], address: str) -> str:
    """The device path `address`, or the only device when `address` is empty."""
    paths = list(paths)
    if address:
        if address in paths:
            return address
        raise DeviceError(f"Joulescope {address!r} is not attached",
                          hint="attached: " + (", ".join(paths) or "none"))
    if len(paths) == 1:
        return paths[0]
    if not paths:
        raise DeviceError("no Joulescope is attached", hint=_CABLE_HINT)
    raise DeviceError(f"{len(paths)} Joulescopes are attached and no device path was given",
                      hint="set the address to one of: " + ", ".join(paths))
