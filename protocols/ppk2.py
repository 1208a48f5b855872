"""Sans-IO codec for the Nordic Power Profiler Kit II (PPK2) serial protocol.

Facts from Nordic's nRF Connect Power Profiler (its device code) and the `ppk2-api` Python
package, read, not copied. The PPK2 is a USB CDC serial device (the baud rate is ignored).

Host -> PPK2: one opcode byte, then the command's argument bytes (`encode`). Nothing is acked:
the only replies are the metadata text and, while averaging runs, the sample stream.

===========================  ======  ===================================================
command                      opcode  arguments
===========================  ======  ===================================================
``AVERAGE_START``            0x06    none: stream samples at 100 kS/s until stopped
``AVERAGE_STOP``             0x07    none
``DEVICE_RUNNING_SET``       0x0C    1 byte: 1 = DUT supply (VOUT) on, 0 = off
``REGULATOR_SET``            0x0D    2 bytes: millivolts, high byte first (800..5000)
``SET_POWER_MODE``           0x11    1 byte: 1 = ampere meter, 2 = source meter
``GET_METADATA``             0x19    none: calibration as text lines, then ``END``
``RESET``                    0x20    none
===========================  ======  ===================================================

Metadata: ``key: value`` lines ending ``\\n``, the last one ``END``. Per range k (0..4, most
sensitive first): ``Rk`` shunt [Ω], ``GSk``/``GIk`` gain (square, linear), ``Ok`` ADC offset,
``Sk``/``Ik`` supply-dependent and fixed current offset [A], ``UGk`` user gain; plus
``Calibrated``, ``VDD`` (mV), ``HW``, ``mode``, ``IA``. A value the PPK2 could not compute reads
``-nan``; that one (and a zero shunt) keeps the default.

Samples: 4-byte little-endian words, 100 000 per second. Bits 0-13 the ADC value, 14-16 the range,
18-23 a counter that steps by one per sample (mod 64: a jump means lost samples), 24-31 the
eight digital inputs D0..D7. The current of a word, with ``a = 4 * adc``:

    r = (a - O) * (1.8 / 163840) / R
    I = UG * (r * (GS * r + GI) + S * VDD[V] + I0)

Nordic's app also smooths the samples around a range switch (its "spike filter"); that is a
display filter of the app, not of the PPK2, and is not applied here (energy windows are
integrated from the samples as the PPK2 reports them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum

import numpy as np

from protocols.errors import ProtocolError

SAMPLE_RATE_HZ = 100_000
VDD_MIN_MV = 800
VDD_MAX_MV = 5000
#: Volts per ADC count (of `4 * adc`), before the shunt.
ADC_MULT = 1.8 / 163840
ADC_MAX = (1 << 14) - 1
RANGES = 5
COUNTER_MOD = 64
WORD_BYTES = 4
METADATA_END = b"END"
POWER_MODE_AMPERE = 1
POWER_MODE_SOURCE = 2


class Cmd(IntEnum):
    """Opcodes the rig sends (and the simulator understands)."""

    AVERAGE_START = 0x06
    AVERAGE_STOP = 0x07
    DEVICE_RUNNING_SET = 0x0C
    REGULATOR_SET = 0x0D
    SET_POWER_MODE = 0x11
    SPIKE_FILTERING_ON = 0x15
    SPIKE_FILTERING_OFF = 0x16
    GET_METADATA = 0x19
    RESET = 0x20
    SET_USER_GAINS = 0x25


#: Argument bytes after each opcode (SET_USER_GAINS: range byte + float32 gain).
ARG_BYTES: dict[int, int] = {
    Cmd.AVERAGE_START: 0, Cmd.AVERAGE_STOP: 0, Cmd.DEVICE_RUNNING_SET: 1,
    Cmd.REGULATOR_SET: 2, Cmd.SET_POWER_MODE: 1, Cmd.SPIKE_FILTERING_ON: 0,
    Cmd.SPIKE_FILTERING_OFF: 0, Cmd.GET_METADATA: 0, Cmd.RESET: 0, Cmd.SET_USER_GAINS: 5,
}


def encode(cmd: Cmd, *args: int) -> bytes:
    """One command: opcode and argument bytes (each 0..255), checked against `ARG_BYTES`."""
    if len(args) != ARG_BYTES[cmd]:
        raise ProtocolError(f"PPK2 {cmd.name} takes {ARG_BYTES[cmd]} argument bytes, "
                            f"got {len(args)}")
    if not all(0 <= a <= 0xFF for a in args):
        raise ProtocolError(f"PPK2 {cmd.name}: argument bytes must be 0..255, got {args}")
    return bytes((int(cmd), *args))


def regulator_set(millivolts: int) -> bytes:
    """``REGULATOR_SET`` to `millivolts`; `ProtocolError` outside 800..5000 mV."""
    if not VDD_MIN_MV <= millivolts <= VDD_MAX_MV:
        raise ProtocolError(f"the PPK2 regulator takes {VDD_MIN_MV}..{VDD_MAX_MV} mV, "
                            f"not {millivolts} mV")
    return encode(Cmd.REGULATOR_SET, millivolts >> 8, millivolts & 0xFF)


def device_running(on: bool) -> bytes:
    """``DEVICE_RUNNING_SET``: the DUT supply output on or off."""
    return encode(Cmd.DEVICE_RUNNING_SET, 1 if on else 0)


def set_power_mode(source: bool) -> bytes:
    """``SET_POWER_MODE``: source meter (the PPK2 supplies the DUT) or ampere meter."""
    return encode(Cmd.SET_POWER_MODE, POWER_MODE_SOURCE if source else POWER_MODE_AMPERE)


def parse_command(data: bytes) -> tuple[tuple[Cmd | int, tuple[int, ...]] | None, int]:
    """The first whole command in `data` and how many bytes it took; (None, 0) when more bytes
    are needed. An unknown opcode comes back as a plain int with no arguments (1 byte)."""
    if not data:
        return None, 0
    op = data[0]
    try:
        cmd: Cmd | int = Cmd(op)
    except ValueError:
        return (op, ()), 1
    n = ARG_BYTES[cmd]
    if len(data) < 1 + n:
        return None, 0
    return (cmd, tuple(data[1 : 1 + n])), 1 + n


# -- calibration ----------------------------------------------------------------------------------
def _five(*values: float) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class Calibration:
    """Per-range calibration from the metadata (defaults: the uncalibrated values)."""

    r: tuple[float, ...] = _five(1031.64, 101.65, 10.15, 0.94, 0.043)
    gs: tuple[float, ...] = _five(1, 1, 1, 1, 1)
    gi: tuple[float, ...] = _five(1, 1, 1, 1, 1)
    o: tuple[float, ...] = _five(0, 0, 0, 0, 0)
    s: tuple[float, ...] = _five(0, 0, 0, 0, 0)
    i: tuple[float, ...] = _five(0, 0, 0, 0, 0)
    ug: tuple[float, ...] = _five(1, 1, 1, 1, 1)
    #: Everything else the metadata said (``calibrated``, ``vdd``, ``hw``, ``mode``, ``ia``).
    extra: dict[str, str] = field(default_factory=dict, compare=False)

    KEYS = ("r", "gs", "gi", "o", "s", "i", "ug")

    def __post_init__(self) -> None:
        for key in self.KEYS:
            if len(getattr(self, key)) != RANGES:
                raise ProtocolError(f"PPK2 calibration {key.upper()} needs {RANGES} values")

    def arrays(self) -> dict[str, np.ndarray]:
        """Each coefficient as a float64 array indexed by range."""
        return {key: np.asarray(getattr(self, key), dtype=np.float64) for key in self.KEYS}

    def current(self, adc: np.ndarray, rng: np.ndarray, vdd_v: float) -> np.ndarray:
        """Amperes of each sample from its 14-bit ADC value and range (vectorised)."""
        c = self.arrays()
        k = np.minimum(rng, RANGES - 1)
        r = (adc.astype(np.float64) * 4.0 - c["o"][k]) * (ADC_MULT / c["r"][k])
        return c["ug"][k] * (r * (c["gs"][k] * r + c["gi"][k]) + (c["s"][k] * vdd_v + c["i"][k]))

    def adc_for(self, amps: np.ndarray, vdd_v: float) -> tuple[np.ndarray, np.ndarray]:
        """(adc, range) that a PPK2 reports for `amps`: the most sensitive range whose ADC
        holds it, the ADC value rounded to the nearest count (clipped at the top of range 4).
        The inverse of `current` up to that rounding; what the simulator streams."""
        c = self.arrays()
        amps = np.asarray(amps, dtype=np.float64)
        adc = np.zeros(amps.shape, dtype=np.int64)
        rng = np.full(amps.shape, RANGES - 1, dtype=np.int64)
        todo = np.ones(amps.shape, dtype=bool)
        for k in range(RANGES):
            # Solve UG*(GS r^2 + GI r + S V + I0) = I for r (the stable root of the quadratic).
            q = amps / c["ug"][k] - c["s"][k] * vdd_v - c["i"][k]
            disc = np.sqrt(np.maximum(c["gi"][k] ** 2 + 4.0 * c["gs"][k] * q, 0.0))
            r = 2.0 * q / (c["gi"][k] + disc)
            counts = np.rint((r * c["r"][k] / ADC_MULT + c["o"][k]) / 4.0)
            fits = todo & (counts <= ADC_MAX) if k < RANGES - 1 else todo
            adc[fits] = np.clip(counts[fits], 0, ADC_MAX)
            rng[fits] = k
            todo &= ~fits
        return adc, rng

    def full_scale_a(self, k: int, vdd_v: float) -> float:
        """The largest current range `k` reports [A]."""
        return float(self.current(np.array([ADC_MAX]), np.array([k]), vdd_v)[0])

    def to_metadata(self) -> bytes:
        """The metadata text a PPK2 sends for this calibration (the simulator's reply)."""
        lines = [f"Calibrated: {self.extra.get('calibrated', '0')}"]
        for key in self.KEYS:
            lines += [f"{key.upper()}{k}: {v:.9g}" for k, v in enumerate(getattr(self, key))]
        lines += [f"{name.upper() if name in ('vdd', 'hw', 'ia') else name}: {value}"
                  for name, value in self.extra.items() if name != "calibrated"]
        return ("\n".join(lines) + "\nEND\n").encode("ascii")


def parse_metadata(text: str) -> Calibration:
    """The calibration in a metadata reply (up to ``END``); `ProtocolError` if it is not one."""
    body, found, _ = text.partition(METADATA_END.decode())
    if not found:
        raise ProtocolError("PPK2 metadata without its END line",
                            hint="the port may not be a PPK2, or the reply was cut short")
    values: dict[str, list[float]] = {key: list(getattr(Calibration, key)) for key in
                                      Calibration.KEYS}
    extra: dict[str, str] = {}
    seen = 0
    for raw in body.splitlines():
        name, sep, value = raw.strip().partition(":")
        if not sep:
            continue
        name, value = name.strip().lower(), value.strip()
        key, index = name.rstrip("01234"), name[len(name.rstrip("01234")):]
        if key in values and len(index) == 1:
            seen += 1
            try:
                number = float(value)
            except ValueError:
                raise ProtocolError(f"PPK2 metadata: {raw.strip()!r} is not a number") from None
            # "-nan" (not computed) and a zero shunt keep the default, as Nordic's app does.
            if math.isfinite(number) and not (key == "r" and number == 0):
                values[key][int(index)] = number
        else:
            extra[name] = value
    if not seen and "calibrated" not in extra:
        raise ProtocolError("PPK2 metadata has no calibration values",
                            hint="the port may not be a PPK2")
    return Calibration(**{k: tuple(v) for k, v in values.items()}, extra=extra)


# -- samples --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Words:
    """Decoded sample words, split into their fields (all numpy arrays of one length)."""

    adc: np.ndarray
    rng: np.ndarray
    counter: np.ndarray
    logic: np.ndarray

    def __len__(self) -> int:
        return len(self.adc)


def split_words(raw: bytes | np.ndarray) -> Words:
    """Fields of whole 4-byte little-endian words (`raw` a multiple of 4 bytes)."""
    if isinstance(raw, bytes | bytearray | memoryview) and len(raw) % WORD_BYTES:
        raise ProtocolError(f"PPK2 sample data of {len(raw)} bytes is not whole "
                            f"{WORD_BYTES}-byte words", hint="cut the stream with WordAssembler")
    w = np.frombuffer(raw, dtype="<u4") if isinstance(raw, bytes | bytearray | memoryview) \
        else np.asarray(raw, dtype=np.uint32)
    return Words(
        adc=(w & 0x3FFF).astype(np.int64),
        rng=((w >> 14) & 0x7).astype(np.int64),
        counter=((w >> 18) & 0x3F).astype(np.int64),
        logic=(w >> 24).astype(np.uint8),
    )


def encode_words(adc: np.ndarray, rng: np.ndarray, counter: np.ndarray,
                 logic: np.ndarray) -> bytes:
    """Sample words as the PPK2 streams them (the simulator's side of `split_words`)."""
    w = (np.asarray(adc, dtype=np.uint32) & 0x3FFF) \
        | ((np.asarray(rng, dtype=np.uint32) & 0x7) << 14) \
        | ((np.asarray(counter, dtype=np.uint32) & 0x3F) << 18) \
        | (np.asarray(logic, dtype=np.uint32) & 0xFF) << 24
    return w.astype("<u4").tobytes()


class WordAssembler:
    """Cuts a byte stream into whole words, keeping a split word for the next `feed`."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes) -> bytes:
        """The whole words of what came so far (a multiple of 4 bytes)."""
        data = self._rest + data if self._rest else data
        n = len(data) - len(data) % WORD_BYTES
        self._rest = data[n:]
        return data[:n]

    def reset(self) -> None:
        """Forget a partial word (the stream restarts)."""
        self._rest = b""

    @property
    def pending(self) -> int:
        """Bytes of a partial word held back."""
        return len(self._rest)


def counter_gaps(counter: np.ndarray, previous: int | None) -> np.ndarray:
    """Samples lost before each word: 0 where the counter stepped by one from the word before
    (from `previous` for the first word; None: the stream's first word, nothing lost). Counts
    a loss modulo 64 (64 lost samples look like none)."""
    prev = np.empty(len(counter), dtype=np.int64)
    if len(counter):
        prev[0] = counter[0] - 1 if previous is None else previous
        prev[1:] = counter[:-1]
    return (counter - prev - 1) % COUNTER_MOD
