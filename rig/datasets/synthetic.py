"""A small SYNTHETIC acoustic-scene set: clearly not DCASE, made for tests and the virtual bench.

Each sample is one second of mono audio at 8 kHz, int16, so `inputs[k].tobytes()` is the
16,000-byte little-endian input the DUT's ASC model takes. Nothing here was recorded: every
scene is a mix of generated sound sources,

    background  coloured noise whose spectral slope depends on the scene,
    rumble      low-passed noise under a slow swell (passing cars, wind),
    engine      a harmonic series on a 28-55 Hz fundamental (a diesel at idle),
    babble      speech-band noise modulated at a syllable rate (crowds, passengers),
    birds       short frequency sweeps between 1.7 and 3.7 kHz,
    chime       a decaying two-tone announcement chime,
    horn        a gated harmonic tone at 300-480 Hz,
    hiss        high-passed noise (leaves, ventilation),

at levels drawn around a per-scene mean (`LEVEL_DB`) with a wide per-sample spread, plus a random
overall loudness. The spreads make scenes overlap, so a good small classifier gets most, not all,
of the test split right. Every draw comes from one generator seeded by (seed, split), in fixed
chunks, so a split is reproducible from its seed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The ASC input format (scenes, rate, samples per input) is the DUT protocol's: one definition.
from protocols.dut.asc import CLASSES, RATE_HZ, SAMPLES

SOURCES = ("background", "rumble", "engine", "babble", "birds", "chime", "horn", "hiss")
#: Mean level (dB, relative) of each source (columns) in each scene (rows); -40 = rarely audible.
LEVEL_DB = np.array([
    # bg  rumble engine babble birds chime horn  hiss
    [0.0, -14.0, -40.0, 4.0, -40.0, -4.0, -40.0, -8.0],  # airport
    [0.0, 6.0, -4.0, -14.0, -40.0, -40.0, -6.0, -12.0],  # street_traffic
    [0.0, 2.0, 5.0, -2.0, -40.0, -40.0, -40.0, -16.0],  # bus
    [0.0, -8.0, -40.0, -22.0, 0.0, -40.0, -40.0, -4.0],  # park
])
#: Background slope in dB per octave, per scene.
SLOPE_DB_PER_OCTAVE = np.array([-3.0, -5.0, -6.0, -3.5])
#: Mean loudness (dBFS RMS) per scene.
LOUDNESS_DBFS = np.array([-24.0, -20.0, -22.0, -30.0])
#: Per-sample spreads (standard deviations): what makes the task hard, tuned so that the
#: firmware's small linear model is good but not perfect.
_LEVEL_SPREAD_DB = 9.0
_SLOPE_SPREAD_DB = 2.0
_LOUDNESS_SPREAD_DB = 5.0
#: Microphone self-noise (RMS, in LSB): quiet scenes still have a noise floor.
_FLOOR_LSB = 3.0
#: Samples generated per chunk: bounds memory; fixed so a split does not depend on anything else.
_CHUNK = 64
# One random stream per split (Python's str hash is randomised per process, so not that).
_SALT = {"train": 1, "test": 2}

_T = np.arange(SAMPLES) / RATE_HZ
#: rfft bin frequencies of one second: exactly 1 Hz apart, so tones at integer Hz land on bins.
_F = np.fft.rfftfreq(SAMPLES, 1.0 / RATE_HZ)


@dataclass(frozen=True)
class Split:
    """Inputs (n, SAMPLES) int16 (1 s of 8 kHz audio each) and labels (n,) int64."""

    inputs: np.ndarray
    labels: np.ndarray
    name: str

    def __len__(self) -> int:
        return len(self.labels)


def make_split(samples_per_class: int, seed: int, name: str = "test") -> Split:
    """`samples_per_class` scenes of each class, shuffled, reproducible from `seed`."""
    if name not in _SALT:
        raise ValueError(f"split must be one of {sorted(_SALT)}, not {name!r}")
    if samples_per_class < 0:
        raise ValueError(f"samples_per_class must be >= 0, not {samples_per_class}")
    rng = np.random.default_rng([seed, _SALT[name]])
    labels = np.repeat(np.arange(len(CLASSES)), samples_per_class)
    rng.shuffle(labels)
    chunks = [_scenes(rng, labels[i:i + _CHUNK]) for i in range(0, len(labels), _CHUNK)]
    audio = np.concatenate(chunks) if chunks else np.zeros((0, SAMPLES), np.int16)
    return Split(inputs=audio, labels=labels.astype(np.int64), name=name)


def _scenes(rng: np.random.Generator, labels: np.ndarray) -> np.ndarray:
    """Audio (n, SAMPLES) int16 for scenes of the given classes."""
    n = len(labels)
    sources = [
        _background(rng, SLOPE_DB_PER_OCTAVE[labels] + rng.normal(0, _SLOPE_SPREAD_DB, n)),
        _rumble(rng, n), _engine(rng, n), _babble(rng, n), _birds(rng, n),
        _chime(rng, n), _horn(rng, n), _hiss(rng, n),
    ]
    level_db = LEVEL_DB[labels] + rng.normal(0.0, _LEVEL_SPREAD_DB, (n, len(SOURCES)))
    gains = 10.0 ** (level_db / 20.0)
    mix = sum(g[:, None] * s for g, s in zip(gains.T, sources, strict=True))
    loudness = LOUDNESS_DBFS[labels] + rng.normal(0.0, _LOUDNESS_SPREAD_DB, n)
    mix *= (32768.0 * 10.0 ** (loudness / 20.0) / _rms(mix))[:, None]
    mix += rng.normal(0.0, _FLOOR_LSB, mix.shape)
    return np.clip(np.rint(mix), -32768, 32767).astype(np.int16)


def _rms(x: np.ndarray) -> np.ndarray:
    """Per-row RMS, never zero."""
    return np.maximum(np.sqrt(np.mean(x * x, axis=1)), 1e-12)


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to RMS 1, so source levels are set by LEVEL_DB alone."""
    return x / _rms(x)[:, None]


def _shaped_noise(rng: np.random.Generator, gain: np.ndarray) -> np.ndarray:
    """White noise filtered by an amplitude response `gain` (n, len(_F)) in the rfft domain."""
    white = rng.standard_normal((gain.shape[0], SAMPLES))
    return _unit(np.fft.irfft(np.fft.rfft(white, axis=1) * gain, n=SAMPLES, axis=1))


def _swell(rng: np.random.Generator, n: int, rate_hz: tuple[float, float], depth: float
           ) -> np.ndarray:
    """A slow positive envelope (n, SAMPLES): 1 + depth * sin, at a random rate and phase."""
    rate = rng.uniform(*rate_hz, (n, 1))
    phase = rng.uniform(0.0, 2 * np.pi, (n, 1))
    return 1.0 + depth * np.sin(2 * np.pi * rate * _T + phase)


def _background(rng: np.random.Generator, slope_db: np.ndarray) -> np.ndarray:
    """Coloured noise: amplitude ~ f ** (slope / 6.02), i.e. `slope_db` dB per octave."""
    f = np.maximum(_F, 20.0) / 1000.0
    return _shaped_noise(rng, f[None, :] ** (slope_db[:, None] / 6.02))


def _rumble(rng: np.random.Generator, n: int) -> np.ndarray:
    """Low-passed noise (corner 80-250 Hz) under a slow swell."""
    corner = rng.uniform(80.0, 250.0, (n, 1))
    noise = _shaped_noise(rng, 1.0 / (1.0 + (_F[None, :] / corner) ** 4))
    return _unit(noise * _swell(rng, n, (0.3, 1.5), 0.6))


def _tones(n: int, freqs: np.ndarray, amps: np.ndarray, phases: np.ndarray) -> np.ndarray:
    """Sum of sines at integer-Hz `freqs` (n, k), built as one spectrum per row (no loop)."""
    spectrum = np.zeros((n, len(_F)), np.complex128)
    bins = np.clip(np.rint(freqs).astype(np.int64), 1, len(_F) - 2)
    rows = np.repeat(np.arange(n), bins.shape[1])
    # A bin hit twice (rounding) simply adds: += with repeated indices needs np.add.at.
    np.add.at(spectrum, (rows, bins.ravel()), (amps * np.exp(1j * phases)).ravel())
    return np.fft.irfft(spectrum, n=SAMPLES, axis=1)


def _harmonics(rng: np.random.Generator, f0: np.ndarray, count: int, rolloff: float
               ) -> np.ndarray:
    """A harmonic series on fundamentals `f0` (n,): amplitudes ~ h ** -rolloff, jittered."""
    n = len(f0)
    h = np.arange(1, count + 1)
    amps = h[None, :] ** -rolloff * rng.uniform(0.5, 1.0, (n, count))
    return _unit(_tones(n, f0[:, None] * h, amps, rng.uniform(0, 2 * np.pi, (n, count))))


def _gate(rng: np.random.Generator, n: int, length_s: tuple[float, float]) -> np.ndarray:
    """A rectangular on-window (n, SAMPLES) of random start and length, 10 ms ramps."""
    length = rng.uniform(*length_s, (n, 1))
    start = rng.uniform(0.0, 1.0 - length)
    ramp = 0.01
    return np.clip(np.minimum(_T - start, start + length - _T) / ramp, 0.0, 1.0)


def _engine(rng: np.random.Generator, n: int) -> np.ndarray:
    """A diesel at idle: 12 harmonics of a 28-55 Hz fundamental."""
    return _harmonics(rng, rng.uniform(28.0, 55.0, n), 12, 0.7)


def _babble(rng: np.random.Generator, n: int) -> np.ndarray:
    """Speech-band noise (peak near 500 Hz, 300-3400 Hz) at a 3-6 Hz syllable rate."""
    f = _F[None, :]
    band = (f / 500.0) ** 2 / (1.0 + (f / 500.0) ** 4) / (1.0 + (f / 3400.0) ** 8)
    noise = _shaped_noise(rng, np.broadcast_to(band, (n, len(_F))))
    return _unit(noise * _swell(rng, n, (3.0, 6.0), 0.7))


def _birds(rng: np.random.Generator, n: int, slots: int = 4) -> np.ndarray:
    """Up to `slots` chirps: 40-150 ms sweeps between 1.7 and 3.7 kHz, Hann-shaped."""
    span = int(0.15 * RATE_HZ)  # the longest chirp, in samples
    out = np.zeros((n, SAMPLES + span))
    rows = np.arange(n)[:, None]
    tau = np.arange(span) / RATE_HZ
    for _ in range(slots):  # a loop over chirp slots, each vectorised over samples
        present = rng.random((n, 1)) < 0.8
        length = rng.uniform(0.04, 0.15, (n, 1))
        first = np.floor(rng.uniform(0.0, 1.0 - length) * RATE_HZ).astype(np.int64)
        f_start = rng.uniform(2400.0, 3400.0, (n, 1))
        sweep = rng.uniform(-700.0, 300.0, (n, 1)) / length  # Hz per second
        u = tau / length
        phase = 2 * np.pi * (f_start * tau + 0.5 * sweep * tau * tau)
        chirp = np.where((u < 1.0) & present, np.sin(np.pi * u) ** 2 * np.sin(phase), 0.0)
        # Only the chirp's own span is computed; within one slot no (row, column) repeats.
        out[rows, first + np.arange(span)] += chirp
    return _unit(out[:, :SAMPLES] + 1e-9 * rng.standard_normal((n, SAMPLES)))


def _chime(rng: np.random.Generator, n: int) -> np.ndarray:
    """An announcement chime: two tones a major third apart, decaying from a random onset."""
    f1 = rng.uniform(450.0, 900.0, n)
    freqs = np.stack([f1, f1 * 1.25, f1 * 2.0, f1 * 2.5], axis=1)
    amps = np.array([1.0, 0.8, 0.3, 0.2])[None, :] * np.ones((n, 1))
    tone = _tones(n, freqs, amps, rng.uniform(0, 2 * np.pi, (n, 4)))
    onset = rng.uniform(0.0, 0.6, (n, 1))
    decay = np.where(onset <= _T, np.exp(-(_T - onset) / rng.uniform(0.15, 0.4, (n, 1))), 0.0)
    return _unit(tone * decay)


def _horn(rng: np.random.Generator, n: int) -> np.ndarray:
    """A car horn: five harmonics of 300-480 Hz, on for 0.2-0.6 s."""
    return _unit(_harmonics(rng, rng.uniform(300.0, 480.0, n), 5, 0.5) * _gate(rng, n, (0.2, 0.6)))


def _hiss(rng: np.random.Generator, n: int) -> np.ndarray:
    """High-passed noise (corner 1.8-3 kHz)."""
    corner = rng.uniform(1800.0, 3000.0, (n, 1))
    r = (_F[None, :] / corner) ** 4
    return _shaped_noise(rng, r / (1.0 + r))
