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

How the two public readers of this stream read it, and the rig with them:

- Calibration values: a ``-nan`` (not computed) or a zero value keeps the default (Nordic's
  ``parseMeta`` takes ``meta[key] || default``, so 0 and null both fall back); user gains
  outside 0.9..1.1 reset all five to 1 (Nordic's ``initGains``). See `parse_metadata`.
- The spike filter: every sample around a range switch is replaced by a running average
  (`SpikeFilter`); both references do it to every sample they decode, so the rig does too.
- The counter: up to `OOS_TOLERANCE` words with a wrong counter, after which the count goes on
  as if they had been in sequence, are kept in place (out of sequence, not lost); a jump that
  does not resume is a loss (`CounterSequencer`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
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
#: User gains further than this from 1 reset all five to 1: Nordic's pc-nrfconnect-ppk,
#: src/actions/deviceActions.ts `initGains` (``Math.abs(c - 1) > 0.1``; its gain slider,
#: src/components/SidePanel/Gains.tsx, spans 0.9..1.1). Computed in float64 like Nordic's
#: doubles, so exactly 1.1 resets (|1.1 - 1| is 0.10000000000000009) and 0.9 does not.
USER_GAIN_BAND = 0.1


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
    #: What the reading changed from the metadata's text (zeros kept at the default, user gains
    #: reset), in words, for the run's notes.
    notes: tuple[str, ...] = field(default=(), compare=False)

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
        amps: np.ndarray = c["ug"][k] * (r * (c["gs"][k] * r + c["gi"][k])
                                         + (c["s"][k] * vdd_v + c["i"][k]))
        return amps

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

    def to_metadata(self, text: Mapping[str, str] | None = None) -> bytes:
        """The metadata text a PPK2 sends for this calibration (the simulator's reply); `text`
        writes some values otherwise (``{"GS0": "0"}``: a text that reads back as this
        calibration all the same, such as a zero for a default)."""
        text = text or {}
        lines = [f"Calibrated: {self.extra.get('calibrated', '0')}"]
        for key in self.KEYS:
            lines += [f"{key.upper()}{k}: {text.get(f'{key.upper()}{k}', f'{v:.9g}')}"
                      for k, v in enumerate(getattr(self, key))]
        lines += [f"{name.upper() if name in ('vdd', 'hw', 'ia') else name}: {value}"
                  for name, value in self.extra.items() if name != "calibrated"]
        return ("\n".join(lines) + "\nEND\n").encode("ascii")


def parse_metadata(text: str) -> Calibration:
    """The calibration in a metadata reply (up to ``END``), read as Nordic's app reads it;
    `ProtocolError` if it is not one.

    A ``-nan`` or a zero keeps the default: Nordic's pc-nrfconnect-ppk, src/device/
    serialDevice.ts `parseMeta` (``meta[key] || default``, after ``-nan`` became null), so a
    zero GS/GI/UG/R reads 1 (R: the uncalibrated shunt); ppk2-api (src/ppk2_api/ppk2_api.py
    `_parse_metadata`) does this for R only, the rig follows Nordic's app. User gains further
    than `USER_GAIN_BAND` from 1 (any of the five) reset all five to 1 (deviceActions.ts
    `initGains`). Nordic's app then also writes those gains into the PPK2 (``SET_USER_GAINS``);
    the rig does not change an instrument's stored values unasked, and reads the same either
    way, since it applies the rule at every connect."""
    body, found, _ = text.partition(METADATA_END.decode())
    if not found:
        raise ProtocolError("PPK2 metadata without its END line",
                            hint="the port may not be a PPK2, or the reply was cut short")
    values: dict[str, list[float]] = {key: list(getattr(Calibration, key)) for key in
                                      Calibration.KEYS}
    extra: dict[str, str] = {}
    notes: list[str] = []
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
            # "-nan" (not computed) and a zero keep the default, as Nordic's app does.
            if math.isfinite(number) and number != 0:
                values[key][int(index)] = number
            elif number == 0 and getattr(Calibration, key)[int(index)] != 0:
                notes.append(f"{key.upper()}{index} reads 0: the default "
                             f"{getattr(Calibration, key)[int(index)]:g} is used, as Nordic's "
                             "app does")
        else:
            extra[name] = value
    if not seen and "calibrated" not in extra:
        raise ProtocolError("PPK2 metadata has no calibration values",
                            hint="the port may not be a PPK2")
    if any(abs(g - 1) > USER_GAIN_BAND for g in values["ug"]):
        notes.append(f"user gains {', '.join(f'{g:g}' for g in values['ug'])} are not all "
                     f"within 1 +- {USER_GAIN_BAND:g}: all five read as 1, as Nordic's app "
                     "resets them")
        values["ug"] = [1.0] * RANGES
    return Calibration(**{k: tuple(v) for k, v in values.items()}, extra=extra,
                       notes=tuple(notes))


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


# -- the counter: lost samples and out-of-sequence words ------------------------------------------
#: Consecutive words with a wrong counter that are still taken as in place when the word after
#: them carries the counter the sequence expects there. Nordic's pc-nrfconnect-ppk, src/device/
#: serialDevice.ts `handleRawDataSet`: it holds such words in `corruptedSamples` and tests
#: ``corruptedSamples.length > 4`` before holding the next, so the 6th wrong word in a row is a
#: loss and up to 5 are tolerated. (ppk2-api does not read the counter at all.)
OOS_TOLERANCE = 5


@dataclass(frozen=True)
class Sequenced:
    """Words the sequencer released, in order, with what it found before and in each."""

    words: np.ndarray  #: uint32 sample words
    lost_before: np.ndarray  #: samples lost just before each word (int64)
    out_of_sequence: np.ndarray  #: True for a word kept in place despite a wrong counter

    def __len__(self) -> int:
        return len(self.words)


class CounterSequencer:
    """Tells lost samples from out-of-sequence words in a stream of sample words.

    A counter jump at word s is out of sequence when one of the next `OOS_TOLERANCE` words
    resumes the count as if nothing had been lost (word s+k carries the counter of the word
    before s plus k+1): the k words are samples in their own places whose counter was wrong.
    Otherwise the jump is a loss of exactly (jump - 1) mod 64 samples (Nordic's app counts one
    fewer: it compares with its expected counter after the held words). Words within
    `OOS_TOLERANCE` of the end of what came, after an unresolved jump, are held for the next
    `feed` (at most that many: 50 µs of stream)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new stream: no previous counter, nothing held."""
        self._last: int | None = None
        self._held = np.zeros(0, dtype=np.uint32)

    @property
    def held(self) -> int:
        """Words held back until the words after them tell what their jump was."""
        return len(self._held)

    def feed(self, words: np.ndarray, *, final: bool = False) -> Sequenced:
        """Release what can be decided of the held words and `words` (all when `final`: an
        unresolved jump at the end of the stream then counts as a loss)."""
        w = np.concatenate((self._held, np.asarray(words, dtype=np.uint32)))
        n = len(w)
        lost = np.zeros(n, dtype=np.int64)
        oos = np.zeros(n, dtype=bool)
        if n == 0:
            return Sequenced(w, lost, oos)
        c = ((w >> 18) & 0x3F).astype(np.int64)
        last = int(c[0]) - 1 if self._last is None else self._last
        before = np.concatenate(([last], c[:-1]))
        step = (c - before - 1) % COUNTER_MOD
        release = n
        skip_until = 0
        # One pass per jump (a handful in a bad stream, none in a good one), not per sample.
        for s in np.flatnonzero(step).tolist():
            if s < skip_until:
                continue
            base = int(before[s])
            k = np.arange(1, OOS_TOLERANCE + 1)
            ahead = s + k < n
            resumes = ahead & (c[np.minimum(s + k, n - 1)] == (base + k + 1) % COUNTER_MOD)
            if resumes.any():
                run = int(k[np.argmax(resumes)])
                oos[s : s + run] = True
                skip_until = s + run + 1
            elif ahead.all() or final:
                lost[s] = step[s]
            else:
                release = s  # too few words after it yet
                break
        self._held = w[release:]
        if release:
            self._last = int(c[release - 1])
        return Sequenced(w[:release], lost[:release], oos[:release])


# -- the spike filter ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpikeFilterParams:
    """The spike filter's settings. Defaults: Nordic's pc-nrfconnect-ppk, src/slices/
    spikeFilterSlice.ts `defaultState` and src/device/serialDevice.ts (alpha 0.18, alpha5 0.06,
    samples 3); the same in ppk2-api, src/ppk2_api/ppk2_api.py `PPK2_API.__init__`."""

    #: Weight of a new sample in the running average used outside range 4.
    alpha: float = 0.18
    #: Weight of a new sample in the running average used in range 4 (the 1 A range).
    alpha5: float = 0.06
    #: Samples replaced from a range switch on (the switch's sample included).
    samples: int = 3

    def __post_init__(self) -> None:
        if not (0 < self.alpha <= 1 and 0 < self.alpha5 <= 1):
            raise ProtocolError(f"PPK2 spike filter: alpha {self.alpha} and alpha5 "
                                f"{self.alpha5} must be in (0, 1]")
        if not (isinstance(self.samples, int) and self.samples >= 1):
            raise ProtocolError(f"PPK2 spike filter: samples must be a whole number >= 1, "
                                f"not {self.samples!r}")

    def as_dict(self) -> dict[str, float | int]:
        """The settings, for a run's metadata."""
        return {"alpha": self.alpha, "alpha5": self.alpha5, "samples": self.samples}


#: Most samples per block of the running average's closed form (bounded so that
#: (1 - alpha) ** -block stays far inside float64: 1e200).
_EMA_BLOCK_DECADES = 200.0


def _ema_blocks(x: np.ndarray, alpha: float, start: float) -> tuple[np.ndarray, np.ndarray,
                                                                     np.ndarray, int]:
    """`x` in blocks (rows, zero-padded), the state before each block, and the block length:
    each block's end state from a zero start is one dot product; the states carry on by one
    scalar step per block."""
    d = 1.0 - alpha
    block = int(max(1, min(4096, _EMA_BLOCK_DECADES / -math.log10(d))))
    blocks = -(-len(x) // block)
    padded = np.zeros(blocks * block)
    padded[: len(x)] = x
    rows = padded.reshape(blocks, block)
    ends = alpha * (rows @ d ** np.arange(block - 1, -1, -1, dtype=np.float64))
    starts = np.empty(blocks)
    state, keep = float(start), d**block
    for i in range(blocks):
        starts[i] = state
        state = keep * state + ends[i]
    return rows, starts, d ** np.arange(1, block + 1, dtype=np.float64), block


def running_average_at(x: np.ndarray, alpha: float, start: float,
                       at: np.ndarray) -> tuple[np.ndarray, float]:
    """y[at] and y[-1] of y[n] = alpha x[n] + (1 - alpha) y[n-1], y[-1] = `start` before `x`
    (`at` may hold -1: the start). Vectorised: the closed form within blocks short enough for
    float64, computed only in the blocks that hold an index of `at`."""
    x = np.asarray(x, dtype=np.float64)
    at = np.asarray(at, dtype=np.int64)
    n = len(x)
    if n == 0:
        return np.full(len(at), float(start)), float(start)
    if alpha == 1.0:
        return np.where(at >= 0, x[np.maximum(at, 0)], start), float(x[-1])
    rows, starts, decay, block = _ema_blocks(x, alpha, start)
    d = 1.0 - alpha
    # The last sample: its block's start decayed, plus the block's samples up to it.
    last = (n - 1) // block
    r = n - last * block
    final = d**r * starts[last] + alpha * float(rows[last, :r] @ d ** np.arange(r - 1, -1, -1.0))
    out = np.full(len(at), float(start))
    inside = at >= 0
    if inside.any():
        where = at[inside]
        need, row_of = np.unique(where // block, return_inverse=True)
        grow = 1.0 / decay
        z = alpha * decay * np.cumsum(rows[need] * grow, axis=1) + decay * starts[need, None]
        out[inside] = z[row_of, where % block]
    return out, float(final)


def running_average(x: np.ndarray, alpha: float, start: float) -> np.ndarray:
    """y[n] = alpha x[n] + (1 - alpha) y[n-1] for every n, y[-1] = `start` (vectorised)."""
    return running_average_at(x, alpha, start, np.arange(len(x)))[0]


class SpikeFilter:
    """Nordic's spike filter over the decoded currents, in order, state kept between calls.

    From Nordic's pc-nrfconnect-ppk, src/device/serialDevice.ts `getAdcResult` (the same in
    ppk2-api, src/ppk2_api/ppk2_api.py `get_adc_result`), re-derived here in array form: two
    running averages of every sample (weights `alpha` and `alpha5`) run all the time; at a
    range switch and the `samples` - 1 samples after it the sample's current is replaced by
    the running average (the `alpha5` one in range 4). In range 4 the first two samples after
    the switch do not enter either average, and read the average before them. Everything
    else passes unchanged. Both references restart it when averaging starts (`reset`)."""

    def __init__(self, params: SpikeFilterParams | None = None) -> None:
        self.params = params or SpikeFilterParams()
        self.replaced = 0
        self.reset()

    def reset(self) -> None:
        """A new acquisition: no averages, no previous range."""
        self._avg: float | None = None
        self._avg4: float | None = None
        self._range: int | None = None
        self._since: int | None = None  # samples from the last switch to the last sample

    def apply(self, current: np.ndarray, rng: np.ndarray) -> np.ndarray:
        """`current` [A] of the next samples with their ranges, filtered. Per sample only the
        range comparison and the averages' block sums; the rest is per switch."""
        x = np.asarray(current, dtype=np.float64)
        n = len(x)
        if n == 0:
            return x.copy()
        p = self.params
        k = np.minimum(np.asarray(rng, dtype=np.int64), RANGES - 1)
        first = k[0] if self._range is None else self._range
        switches = np.flatnonzero(k != np.concatenate(([first], k[:-1])))
        # Candidates: the `samples` from each switch on, and those after the previous call's.
        reach = np.arange(p.samples, dtype=np.int64)
        near = (switches[:, None] + reach).ravel()
        carried = -1 - (self._since if self._since is not None else p.samples)
        near = np.unique(np.concatenate((near, carried + reach[reach + carried >= 0])))
        near = near[(near >= 0) & (near < n)]
        # Samples since the latest switch at or before each candidate (or the carried one).
        which = np.searchsorted(switches, near, side="right") - 1
        latest = switches[np.maximum(which, 0)] if len(switches) else np.zeros_like(which)
        since = near - np.where(which >= 0, latest, carried)
        keep = since < p.samples
        filtered, since = near[keep], since[keep]
        top = k[filtered] == RANGES - 1
        held_out = filtered[top & (since < 2)]  # in neither average (range 4 only)
        x_used = np.delete(x, held_out) if len(held_out) else x
        # Index in x_used of the latest sample in the averages at or before each filtered one.
        last_used = filtered - np.searchsorted(held_out, filtered, side="right")
        out = x.copy()
        for is_top in (False, True):
            alpha = p.alpha5 if is_top else p.alpha
            state = self._avg4 if is_top else self._avg
            if state is None:  # the stream's first sample starts the average
                state = float(x_used[0]) if len(x_used) else None
            if state is None:
                continue
            pick = top == is_top
            values, final = running_average_at(x_used, alpha, state, last_used[pick])
            out[filtered[pick]] = values
            if is_top:
                self._avg4 = final
            else:
                self._avg = final
        self._range = int(k[-1])
        far = p.samples + 1  # as far as any sample the filter leaves alone
        if len(switches):
            self._since = int(min(n - 1 - switches[-1], far))
        elif self._since is not None:
            self._since = int(min(self._since + n, far))
        self.replaced += len(filtered)
        return out
