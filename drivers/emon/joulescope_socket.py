"""A stand-in for the `pyjoulescope_driver` library on the virtual bench (simulated, not measured).

The virtual bench has no USB Joulescope, and there is no official Joulescope emulator, so the
seam is the vendor library's Driver object: `FakeJoulescopeDriver` has the real Driver's public
methods and publishes the same stream payloads (dicts with ``sample_id``, ``utc``, ``field_id``,
``index``, ``sample_rate``, ``decimate_factor``, ``time_map``, ``data``; current and voltage
float32, GPI packed bits, little-endian bit order) on its own thread, in blocks. The rig loads
it in its own process in place of the library (`drivers.emon.joulescope.Joulescope.open(...,
driver_factory=...)`); everything above it is the real driver code.

Its samples come from a `SampleSource`: on the virtual bench a `SocketSource(address)`, which
reads the simulated Joulescope's samples from the virtual bench's process (which owns the
simulated world) over a socket, in the wire format of `protocols.joulescope_bridge`.

Range topics: the JS220's ``s/i/range/mode`` and the JS110's ``s/i/range/select``: anything
but ``off`` connects the DUT (`SampleSource.set_power`). A fixed range (JS220: ``s/i/range/mode``
= ``manual`` with the range on ``s/i/range/select``; JS110: a range name on
``s/i/range/select``) clips the current at its full scale, as a saturated range does on the
instrument; the larger shunt's drop of the DUT's supply (burden voltage) is not modelled.

The range stream (``s/i/range/!data``, field RANGE): one uint8 per sample, as the binding
hands over the instrument's u4 values unpacked; value k names the model's k-th range, largest
first (JS110: 10 A, 2 A, 180 mA, 18 mA, 1.8 mA, 180 µA, 18 µA; JS220 without 2 A), `RANGE_OFF`
while the DUT is disconnected (`range_values`). Auto-ranging picks the smallest range whose full
scale holds the sample's current: the instrument's choice without its switching hysteresis and
settling (simplified). At 2 MS/s on a JS220 (each value repeated over the output period, as the
GPI), at ``h/fs`` on a JS110.

What it does as the real driver (joulescope_driver 2.2.12) does:

- `unsubscribe` matches the very callback object given to `subscribe` (the binding passes the
  object's address to the C side) and fails with NOT_FOUND for any other, even an equal bound
  method.
- Metadata is asked with the topic suffix ``%`` (``include/jsdrv.h``); ``$`` is NOT_FOUND.
- Sample ids count at 2 MHz on both models (``SAMPLING_FREQUENCY`` in ``js110_usb.c`` and
  ``js220_usb.c``). Current and voltage come at ``h/fs`` (a JS220's at 1 MHz at most); a
  JS220's GPI at 2 MS/s whatever ``h/fs`` is (decimate_factor 1), a JS110's at ``h/fs``.
  Its full-rate GPI blocks hold whole bytes (js220_usb.c ``stream_in_port``: 8 samples a
  byte); bits that do not fill a byte wait for the next block. Simplified: the bench's samples
  come at the output rate, so the stand-in repeats each GPI level over the output sample's
  2 MS/s period (a pulse is as long as whole output periods).
- `open` with ``defaults`` (or None) connects the DUT: the JS110 host code sends its range
  default 128 (auto) at open; a JS220's range mode defaults to auto (``doc/js220.txt``).
  Unconfirmed without hardware: whether a JS220 opened with defaults also leaves an ``off`` it
  held before; the stand-in takes the documented default (the worse case). ``restore`` changes
  nothing on the instrument.
- Unconfirmed without hardware: a Joulescope's range when it was just plugged in (before any
  host opened it). The stand-in boots with the DUT disconnected unless `range_at_boot` says
  otherwise.
"""

from __future__ import annotations

import contextlib
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from drivers.errors import DeviceError, DeviceTimeout
from protocols.errors import ProtocolError
from protocols.joulescope_bridge import (
    BASE_RATES,
    CONTROL,
    HELLO,
    SAMPLES,
    FrameReader,
    SampleBlock,
    decode_samples,
    encode_frame,
)

log = logging.getLogger(__name__)

_RATE_LABELS = ((1_000_000, "MHz"), (1_000, "kHz"), (1, "Hz"))
#: jsdrv field ids of the streams (``jsdrv_field_e`` in ``include/jsdrv.h``: RANGE is 4)
FIELD_CURRENT, FIELD_VOLTAGE, FIELD_RANGE, FIELD_GPI = 1, 2, 4, 5
#: Rate the sample ids count at, both models (``SAMPLING_FREQUENCY``, js110_usb.c, js220_usb.c).
SAMPLE_ID_RATE_HZ = 2_000_000
#: ``Driver.open`` modes (binding.pyx ``_DEVICE_OPEN_MODES``): defaults 0, restore 1, raw 0xff.
_OPEN_MODES = {0: 0, "defaults": 0, None: 0, 1: 1, "restore": 1, 0xFF: 0xFF, "raw": 0xFF}
#: Host seconds the stand-in's thread waits for a block before looking at its state again.
POLL_S = 0.005
_TIME64_PER_S = 1 << 30  # jsdrv time64: seconds since 2018-01-01 in 34.30 fixed point
_EPOCH_2018 = 1514764800


class SampleSource(Protocol):
    """Where a `FakeJoulescopeDriver` gets its samples."""

    def set_sample_rate(self, hz: int) -> None: ...
    def set_power(self, on: bool) -> None: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...
    def read(self, timeout_s: float) -> SampleBlock | None: ...
    def close(self) -> None: ...


class SourceEnded(DeviceError):
    """The sample source is gone (the virtual bench closed its end)."""


# -- the stand-in Driver-------------------------------------------------------------------------
def _rate_label(hz: int) -> str:
    for scale, unit in _RATE_LABELS:
        if hz >= scale and hz % scale == 0:
            return f"{hz // scale} {unit}"
    return f"{hz} Hz"


def _rates(model: str) -> list[int]:
    """The ``h/fs`` options: the same list on both models (js110_usb.c, js220_usb.c), 2 MHz
    included on a JS220 although its current and voltage stop at 1 MHz."""
    return [2_000_000, 1_000_000, 500_000, 200_000, 100_000, 50_000, 20_000, 10_000, 5_000,
            2_000, 1_000, 500, 200, 100, 50, 20, 10, 5, 2, 1]


#: The instrument's current ranges: name -> full scale [A] (the JS220 has no 2 A range).
_FULL_SCALE_A = {"10 A": 10.0, "2 A": 2.0, "180 mA": 0.18, "18 mA": 0.018, "1.8 mA": 1.8e-3,
                 "180 µA": 180e-6, "18 µA": 18e-6}
_JS220_RANGES = {name for name in _FULL_SCALE_A if name != "2 A"}
#: What the range stream's values name, per model, value = index (the Joulescope UI's labels
#: of its current-range trace, pyjoulescope_ui ``waveform_widget.py`` ``_JS110_AXIS_R`` and
#: ``_JS220_AXIS_R``): largest range first.
_RANGE_VALUES = {"js110": ("10 A", "2 A", "180 mA", "18 mA", "1.8 mA", "180 µA", "18 µA"),
                 "js220": ("10 A", "180 mA", "18 mA", "1.8 mA", "180 µA", "18 µA")}
#: The range stream's value while the DUT is disconnected: "off" on both models (7 on a
#: JS110, pyjoulescope ``v1/stream_buffer.py``; 6..8 read "off" in the UI's JS220 labels).
RANGE_OFF = 7
#: model -> (the topic that connects/disconnects the DUT, {range topic: values it takes}, the
#: values those topics take when the device is opened with "defaults")
_RANGE_TOPICS = {
    # doc/js220.txt: s/i/range/mode [auto], manual, off; s/i/range/select 0..5 [0] (10 A)
    "js220": ("s/i/range/mode",
              {"s/i/range/mode": {"off", "auto", "manual"},
               "s/i/range/select": _JS220_RANGES},
              {"s/i/range/mode": "auto", "s/i/range/select": "10 A"}),
    # js110_usb.c PARAMS: s/i/range/select default 128 (auto), sent to the instrument at open
    "js110": ("s/i/range/select",
              {"s/i/range/select": {"auto", "off", *_FULL_SCALE_A}},
              {"s/i/range/select": "auto"}),
}
#: data topic suffix -> (ctrl topic suffix, field id, index, packed bits)
_DATA_TOPICS = {
    "s/i/!data": ("s/i/ctrl", FIELD_CURRENT, 0, False),
    "s/v/!data": ("s/v/ctrl", FIELD_VOLTAGE, 0, False),
    "s/gpi/0/!data": ("s/gpi/0/ctrl", FIELD_GPI, 0, True),
    "s/gpi/1/!data": ("s/gpi/1/ctrl", FIELD_GPI, 1, True),
    # One value per sample, unpacked (the binding's "uint4 -> uint8"): see `range_values`.
    "s/i/range/!data": ("s/i/range/ctrl", FIELD_RANGE, 0, False),
}


class FakeJoulescopeDriver:
    """Same public methods as `pyjoulescope_driver.Driver`; one simulated device on `source`.

    Refusals raise `RuntimeError` (as the real binding does for an error code); `TimeoutError`
    is never raised because every call completes at once. `published` records every publish.
    """

    def __init__(self, source: SampleSource, *, device_path: str = "u/js220/000415",
                 first_sample_id: int = 1_234_567, timeout: float | None = None,
                 range_at_boot: str = "off") -> None:
        self.source = source
        self.device_path = device_path
        self.model = "js220" if "js220" in device_path else "js110"
        #: Top rate of current and voltage (a JS220's GPI go on at 2 MS/s above it).
        self.analog_max = BASE_RATES[self.model]
        self.log_level = "off"
        #: Every (topic, value) published, in order (for tests).
        self.published: list[tuple[str, Any]] = []
        self._retained: dict[str, Any] = {}
        self._subscribers: list[tuple[str, Callable[[str, Any], None]]] = []
        # Held while callbacks run: unsubscribe() returns only after an in-flight one ended.
        self._dispatch = threading.RLock()
        self._state = threading.Lock()
        # Serialises the source between the streaming thread and control calls.
        self._source_lock = threading.Lock()
        self._open = False
        self._streaming = False
        power_topic, _, defaults = _RANGE_TOPICS[self.model]
        # The instrument's own state before any host opened it (see the module docstring).
        self._retained = {"h/fs": SAMPLE_ID_RATE_HZ, **defaults, power_topic: range_at_boot,
                          **{ctrl: 0 for ctrl, *_ in _DATA_TOPICS.values()}}
        if range_at_boot != "off":
            source.set_power(True)
        self._next_id = first_sample_id  # output-rate ids, absolute like the instrument's
        self._id_offset = first_sample_id
        #: data topic -> (first 2 MS/s id, bits) a JS220's GPI hold back until a byte is full
        self._gpi_carry: dict[str, tuple[int, np.ndarray]] = {}
        self._lost: BaseException | None = None
        self._finalized = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fake-jsdrv", daemon=True)
        self._thread.start()

    # -- Driver API ---------------------------------------------------------------------------
    def __enter__(self) -> FakeJoulescopeDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finalize()

    def finalize(self, timeout: float | None = None) -> None:
        """Stop the thread and the source."""
        self._finalized.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)
        try:
            self.source.close()
        except Exception as exc:
            log.warning("fake Joulescope: closing the source failed: %s", exc)

    def device_paths(self, timeout: float | None = None) -> list[str]:
        """The one simulated device (none once the source is gone)."""
        return [] if self._lost is not None else [self.device_path]

    def open(self, device_prefix: str, mode: str | None = None,
             timeout: float | None = None) -> None:
        """Open the device: ``defaults`` (or None) resets every setting, which connects the
        DUT (range auto); ``restore`` keeps the instrument's state."""
        self._check_device(device_prefix)
        code = _OPEN_MODES[mode.lower() if isinstance(mode, str) else mode]
        if code == 0xFF:
            raise RuntimeError(f"open {device_prefix}: raw mode is not simulated")
        power_topic, _, range_defaults = _RANGE_TOPICS[self.model]
        with self._state:
            if code == 0:
                self._retained.update({"h/fs": SAMPLE_ID_RATE_HZ, **range_defaults})
            for ctrl, *_ in _DATA_TOPICS.values():
                self._retained[ctrl] = 0
            connected = self._retained[power_topic] != "off"
            self._open = True
        if code == 0:
            with self._source_lock:
                self.source.set_power(connected)

    def close(self, device_prefix: str, timeout: float | None = None) -> None:
        """Close the device: streams stop."""
        self._check_device(device_prefix)
        with self._state:
            self._open = False
            for ctrl, *_ in _DATA_TOPICS.values():
                self._retained[ctrl] = 0
        self._update_stream()

    def publish(self, topic: str, value: Any, timeout: float | None = None) -> None:
        """Set a device topic (validated like the instrument validates it)."""
        self.published.append((topic, value))
        sub = self._device_topic(topic)
        power_topic, range_topics, _ = _RANGE_TOPICS[self.model]
        with self._state:
            if not self._open:
                raise RuntimeError(f"publish {topic}: device not open")
            if sub == "h/fs":
                if self._streaming:
                    raise RuntimeError(f"publish {topic}: cannot change while streaming")
                if int(value) not in _rates(self.model):
                    raise RuntimeError(f"publish {topic}: invalid value {value!r}")
                value = int(value)
            elif sub in range_topics:
                if value not in range_topics[sub]:
                    raise RuntimeError(f"publish {topic}: invalid value {value!r}")
            elif sub in {ctrl for ctrl, *_ in _DATA_TOPICS.values()}:
                if value not in (0, 1, True, False):
                    raise RuntimeError(f"publish {topic}: invalid value {value!r}")
                value = int(value)
            elif sub not in self._retained:
                raise RuntimeError(f"publish {topic}: topic not found")
            self._retained[sub] = value
        if sub == power_topic:
            with self._source_lock:
                self.source.set_power(value != "off")
        self._update_stream()

    def publish_and_wait(self, publish_topic: str, publish_value: Any, response_topic: str,
                         timeout: float | None = None) -> Any:
        """Publish, then return the value of `response_topic`."""
        self.publish(publish_topic, publish_value, timeout)
        return self.query(response_topic, timeout)

    def query(self, topic: str, timeout: float | None = None) -> Any:
        """A retained value, or the metadata of a topic asked with the suffix ``%`` (only
        ``h/fs`` has any here; others answer None, as topics without metadata do)."""
        sub = self._device_topic(topic)
        with self._state:
            if sub == "h/fs%":
                rates = _rates(self.model)
                return {"dtype": "u32", "brief": "The sampling frequency.", "default": rates[0],
                        "options": [[r, _rate_label(r)] for r in rates]}
            if sub.endswith("%") and sub[:-1] in self._retained:
                return None
            if sub not in self._retained:
                raise RuntimeError(f"jsdrv_query failed 16 NOT_FOUND | {topic}")
            return self._retained[sub]

    def subscribe(self, topic: str, flags: Any, fn: Callable[[str, Any], None],
                  timeout: float | None = None) -> None:
        """Call `fn(topic, value)` for every publication under `topic`."""
        with self._dispatch:
            self._subscribers.append((topic, fn))
            if flags and "retain" in flags:
                with self._state:
                    retained = [(f"{self.device_path}/{k}", v) for k, v in self._retained.items()]
                for full, value in retained:
                    if full.startswith(topic):
                        fn(full, value)

    def unsubscribe(self, topic: str, fn: Callable[[str, Any], None],
                    timeout: float | None = None) -> None:
        """Stop calling the very object `fn` for `topic` (an equal but other bound method is
        NOT_FOUND, as in the binding); returns after any call in progress ended."""
        with self._dispatch:
            kept = [(t, f) for t, f in self._subscribers if not (t == topic and f is fn)]
            found = len(kept) < len(self._subscribers)
            self._subscribers = kept
        if not found:
            raise RuntimeError(f"jsdrv_unsubscribe failed 16 NOT_FOUND | {topic}")

    def unsubscribe_all(self, fn: Callable[[str, Any], None],
                        timeout: float | None = None) -> None:
        """Stop calling the very object `fn` for any topic."""
        with self._dispatch:
            self._subscribers = [(t, f) for t, f in self._subscribers if f is not fn]

    # -- internals ----------------------------------------------------------------------------
    def _check_device(self, device_prefix: str) -> None:
        if device_prefix != self.device_path or self._lost is not None:
            raise RuntimeError(f"device {device_prefix} not found")

    def _device_topic(self, topic: str) -> str:
        prefix = self.device_path + "/"
        if not topic.startswith(prefix):
            raise RuntimeError(f"{topic}: no such device")
        return topic[len(prefix) :]

    def _update_stream(self) -> None:
        """Run the source while any stream is enabled on an open device."""
        with self._state:
            want = self._open and any(self._retained.get(c) for c, *_ in _DATA_TOPICS.values())
            if want == self._streaming:
                return
            self._streaming = want
            with self._source_lock:
                if want:
                    self.source.set_sample_rate(self._analog_rate())
                    self._id_offset = self._next_id
                    self._gpi_carry.clear()
                    self.source.start()
                else:
                    self.source.stop()

    def _run(self) -> None:
        while not self._finalized.is_set():
            if not self._streaming:
                time.sleep(POLL_S)
                continue
            try:
                with self._source_lock:
                    block = self.source.read(POLL_S) if self._streaming else None
            except Exception as exc:
                log.warning("fake Joulescope: the sample source failed: %s", exc)
                self._lost = exc
                with self._state:
                    self._streaming = False
                return
            if block is not None and len(block):
                self._publish_block(block)

    def full_scale_a(self) -> float | None:
        """Full scale [A] of the fixed current range selected, None when auto-ranging or off."""
        with self._state:
            if self.model == "js220":
                if self._retained.get("s/i/range/mode") != "manual":
                    return None
                return _FULL_SCALE_A[self._retained["s/i/range/select"]]
            return _FULL_SCALE_A.get(self._retained.get("s/i/range/select", "off"))

    def range_values(self, current: np.ndarray) -> np.ndarray:
        """The range stream's value for each sample (uint8): `RANGE_OFF` while the DUT is
        disconnected, the selected range when fixed, else the smallest range whose full scale
        holds the sample's current (the instrument's autoranging, without its hysteresis)."""
        table = _RANGE_VALUES[self.model]
        with self._state:
            power_topic, _, _ = _RANGE_TOPICS[self.model]
            power = self._retained.get(power_topic, "off")
            select = self._retained.get("s/i/range/select")
        if power == "off":
            return np.full(len(current), RANGE_OFF, dtype=np.uint8)
        fixed = select if self.model == "js220" and power == "manual" else (
            power if self.model == "js110" and power != "auto" else None)
        if fixed is not None:
            return np.full(len(current), table.index(fixed), dtype=np.uint8)
        # Full scales smallest first: the number of them below |I| counts back from the end.
        scales = np.array([_FULL_SCALE_A[name] for name in reversed(table)])
        above = np.searchsorted(scales, np.abs(current.astype(np.float64)), side="left")
        return (len(table) - 1 - np.minimum(above, len(table) - 1)).astype(np.uint8)

    def _gpi_block(self, suffix: str, sample_id: int, levels: np.ndarray,
                   repeat: int) -> tuple[int, np.ndarray]:
        """(first id, packed little-endian bits) of one GPI block: each level repeated
        `repeat` times; at full rate (repeat > 1) whole bytes only, the rest carried over."""
        bits = levels.astype(np.uint8)
        if repeat == 1:
            return sample_id, np.packbits(bits, bitorder="little")
        bits = np.repeat(bits, repeat)
        carry = self._gpi_carry.pop(suffix, None)
        if carry is not None and carry[0] + len(carry[1]) == sample_id:
            sample_id, bits = carry[0], np.concatenate((carry[1], bits))
        whole = len(bits) // 8 * 8
        if whole < len(bits):
            self._gpi_carry[suffix] = (sample_id + whole, bits[whole:])
        return sample_id, np.packbits(bits[:whole], bitorder="little")

    def _analog_rate(self) -> int:
        """The rate current and voltage stream at: ``h/fs``, at most `analog_max`."""
        return min(int(self._retained["h/fs"]), self.analog_max)

    def _publish_block(self, block: SampleBlock) -> None:
        full_scale = self.full_scale_a()
        with self._state:
            fs = self._analog_rate()
            enabled = {d: bool(self._retained.get(c)) for d, (c, *_) in _DATA_TOPICS.items()}
            first = self._id_offset + block.first
            self._next_id = first + len(block)
        decimate = SAMPLE_ID_RATE_HZ // fs
        # A JS220's GPI stay at 2 MS/s (js220_usb.c PORT_MAP decimate_min 1); a JS110's follow.
        gpi_decimate = 1 if self.model == "js220" else decimate
        gpi_repeat = decimate // gpi_decimate
        utc = int((time.time() - _EPOCH_2018) * _TIME64_PER_S)
        current = block.current.astype(np.float32)
        if full_scale is not None:  # a fixed range saturates at its full scale
            current = np.clip(current, -full_scale, full_scale).astype(np.float32)
        signals = {
            "s/i/!data": current,
            "s/v/!data": block.voltage.astype(np.float32),
            "s/gpi/0/!data": block.gpi0,
            "s/gpi/1/!data": block.gpi1,
        }
        if enabled["s/i/range/!data"]:
            signals["s/i/range/!data"] = self.range_values(block.current)
        with self._dispatch:
            for suffix, data in signals.items():
                if not enabled[suffix]:
                    continue
                _, field_id, index, packed = _DATA_TOPICS[suffix]
                topic = f"{self.device_path}/{suffix}"
                sample_id = first * decimate
                # The range, like the GPI, at 2 MS/s on a JS220 (js220_usb.c PORT_MAP).
                follows = packed or field_id == FIELD_RANGE
                if packed:
                    sample_id, data = self._gpi_block(suffix, sample_id, data, gpi_repeat)
                    if not len(data):
                        continue
                elif follows:
                    data = np.repeat(data, gpi_repeat)
                value = {
                    "sample_id": sample_id,
                    "utc": utc,
                    "field_id": field_id,
                    "index": index,
                    "sample_rate": SAMPLE_ID_RATE_HZ,
                    "decimate_factor": gpi_decimate if follows else decimate,
                    "time_map": {"offset_time": utc, "offset_counter": first * decimate,
                                 "counter_rate": float(SAMPLE_ID_RATE_HZ)},
                    "data": data,
                }
                for sub_topic, fn in list(self._subscribers):
                    if topic.startswith(sub_topic):
                        try:
                            fn(topic, value)
                        except Exception:
                            log.exception("fake Joulescope: subscriber to %s failed", topic)


# -- the socket source -------------------------------------------------------------------------
class SocketSource:
    """Rig side of the bridge: a `SampleSource` whose samples come from `serve_source`.

    `address` is ``host:port`` (TCP) or a Unix socket path.
    """

    def __init__(self, address: str | None = None, *, sock: socket.socket | None = None,
                 connect_timeout_s: float = 5.0) -> None:
        if sock is None:
            if address is None:
                raise ValueError("SocketSource needs an address or a socket")
            sock = _connect(address, connect_timeout_s)
        self.address = address
        self._sock = sock
        self._sock.setblocking(False)
        self._reader = FrameReader()
        self._send_lock = threading.Lock()
        self._eof = False
        hello = self._next_frame(time.monotonic() + connect_timeout_s)
        if hello is None or hello[0] != HELLO:
            raise DeviceTimeout(f"Joulescope bridge {address}: no HELLO from the bench in time",
                                hint="check that the virtual bench is running")
        self.info = json.loads(hello[1])
        self.sample_rate = int(self.info.get("sample_rate", 0))

    @classmethod
    def from_socket(cls, sock: socket.socket, connect_timeout_s: float = 5.0) -> SocketSource:
        """Wrap an already connected socket."""
        return cls(sock=sock, connect_timeout_s=connect_timeout_s)

    def _control(self, **msg: Any) -> None:
        frame = encode_frame(CONTROL, json.dumps(msg).encode())
        with self._send_lock:
            self._sock.setblocking(True)
            try:
                self._sock.sendall(frame)
            except OSError as exc:
                raise SourceEnded(f"Joulescope bridge: the bench is gone ({exc})") from exc
            finally:
                self._sock.setblocking(False)

    def set_sample_rate(self, hz: int) -> None:
        """Ask the bench for this rate."""
        self.sample_rate = int(hz)
        self._control(op="rate", hz=int(hz))

    def set_power(self, on: bool) -> None:
        """Connect or disconnect the DUT in the bench's World."""
        self._control(op="power", on=bool(on))

    def start(self) -> None:
        """Start streaming from the bench."""
        self._control(op="start")

    def stop(self) -> None:
        """Stop streaming (blocks already in flight still arrive)."""
        self._control(op="stop")

    def read(self, timeout_s: float) -> SampleBlock | None:
        """The next SAMPLES block, or None if none came within `timeout_s`."""
        frame = self._next_frame(time.monotonic() + timeout_s)
        if frame is None:
            return None
        kind, payload = frame
        if kind != SAMPLES:
            raise ProtocolError(f"Joulescope bridge: unexpected frame type {kind}")
        return decode_samples(payload)

    def _next_frame(self, deadline: float) -> tuple[int, bytes] | None:
        while True:
            frame = self._reader.next_frame()
            if frame is not None:
                return frame
            if self._eof:
                raise SourceEnded(
                    "Joulescope bridge: the bench closed the connection"
                    + (f" inside a frame ({self._reader.pending} bytes)"
                       if self._reader.pending else ""),
                    hint="the virtual bench stopped; see its log")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([self._sock], [], [], left)
            if not readable:
                return None
            try:
                data = self._sock.recv(1 << 20)
            except BlockingIOError:
                continue
            except OSError as exc:
                raise SourceEnded(f"Joulescope bridge: reading failed: {exc}") from exc
            if not data:
                self._eof = True
            self._reader.feed(data)

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        with contextlib.suppress(OSError):
            self._sock.close()


def _connect(address: str, timeout_s: float) -> socket.socket:
    try:
        if ":" in address and "/" not in address:
            host, _, port = address.rpartition(":")
            return socket.create_connection((host, int(port)), timeout=timeout_s)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        sock.connect(address)
        return sock
    except OSError as exc:
        raise DeviceError(f"Joulescope bridge: cannot connect to {address}: {exc}",
                          hint="check that the virtual bench is running") from exc
