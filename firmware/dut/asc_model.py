"""The DUT's ASC model in Python: the bit-exact reference of firmware/dut/core/asc_model.c.

Integer-only feature extraction, so numpy and C agree bit for bit:

1. 8000 int16 samples -> 31 frames of 256 (no overlap), Hann window (Q15), kept with 8 extra
   fraction bits (`>> WINDOW_SHIFT`);
2. radix-2 FFT with Q15 twiddles and a halving per stage (so it never overflows int32);
3. power |X|^2 of bins 0..128, triangular mel filterbank (20 bands, Q8 weights) in int64;
4. log2 in Q6 (leading-bit position + a 64-entry fraction table), averaged over the frames
   (rounded) -> 20 integer features;
5. int32 logits = W f + b (int16 W, int32 b); scores = softmax(logits * logit_scale).

The tables and weights come from `asc_model_weights.npz`, written together with the C header by
`rig model train c-shim` (rig/model/c_shim.py), and trained on the synthetic train split only,
so the accuracy the rig measures through the DUT is a real property of a real (tiny) model on
held-out data. Right shifts are numpy's `>>`, which floors, like the C
code's `asr` helpers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from protocols.dut.asc import CLASSES, RATE_HZ, SAMPLES

WEIGHTS_PATH = Path(__file__).with_name("asc_model_weights.npz")
NFFT = 256
NFRAMES = SAMPLES // NFFT
NBINS = NFFT // 2 + 1
NBANDS = 20
MEL_LOW_HZ = 62.5
MEL_HIGH_HZ = RATE_HZ / 2
#: Windowed samples keep 15 - WINDOW_SHIFT = 8 fraction bits: |x| < 2^23, room for the FFT.
WINDOW_SHIFT = 7
MEL_WEIGHT_ONE = 256
LOG2_FRAC_BITS = 6
#: Largest feature possible: log2 Q6 of a 64-bit energy (bounds the int32 logits).
FEATURE_MAX = (63 << LOG2_FRAC_BITS) + (1 << LOG2_FRAC_BITS) - 1
#: Largest |W| after quantisation (int16 with a bit of headroom).
WEIGHT_MAX = 16383
LOGIT_LIMIT = 2**31 - 1
#: Samples per batch in `features_batch`: bounds memory (~ 10 MB per array).
_BATCH = 64
#: Array names in the .npz, in the order the header lists them.
TABLES = ("window", "twiddle_cos", "twiddle_sin", "bitrev", "mel_start", "mel_count",
          "mel_offset", "mel_weight", "log2_frac")


def make_tables() -> dict[str, np.ndarray]:
    """The fixed-point tables of the feature pipeline (no training involved)."""
    n = np.arange(NFFT)
    window = np.rint(32767 * (0.5 - 0.5 * np.cos(2 * np.pi * n / NFFT))).astype(np.int16)
    k = np.arange(NFFT // 2)
    cos = np.rint(32767 * np.cos(2 * np.pi * k / NFFT)).astype(np.int16)
    sin = np.rint(32767 * np.sin(2 * np.pi * k / NFFT)).astype(np.int16)
    bits = int(np.log2(NFFT))
    bitrev = np.array([int(f"{i:0{bits}b}"[::-1], 2) for i in n], dtype=np.uint8)
    start, count, weights = _mel_filterbank()
    offset = np.concatenate([[0], np.cumsum(count)[:-1]]).astype(np.uint16)
    frac = np.arange(1 << LOG2_FRAC_BITS)
    log2_frac = np.rint((1 << LOG2_FRAC_BITS) * np.log2(1 + frac / (1 << LOG2_FRAC_BITS)))
    return {
        "window": window, "twiddle_cos": cos, "twiddle_sin": sin, "bitrev": bitrev,
        "mel_start": start, "mel_count": count, "mel_offset": offset, "mel_weight": weights,
        "log2_frac": log2_frac.astype(np.uint8),
    }


def _mel_filterbank() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Triangles equally spaced in mel: per band its first bin, bin count, and Q8 weights."""
    def mel(f: float) -> float:
        return 2595.0 * np.log10(1.0 + f / 700.0)

    edges_mel = np.linspace(mel(np.float64(MEL_LOW_HZ)), mel(np.float64(MEL_HIGH_HZ)), NBANDS + 2)
    edges = 700.0 * (10.0 ** (edges_mel / 2595.0) - 1.0)
    f = np.arange(NBINS) * (RATE_HZ / NFFT)
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    tri = np.maximum(0.0, np.minimum((f - lo) / (mid - lo), (hi - f) / (hi - mid)))
    q = np.rint(tri * MEL_WEIGHT_ONE).astype(np.int64)
    starts, counts, weights = [], [], []
    for band in q:  # a loop over the 20 bands: each keeps its contiguous non-zero run
        nz = np.flatnonzero(band)
        if len(nz) == 0:
            raise ValueError("a mel band has no FFT bin: too many bands for this FFT size")
        starts.append(nz[0])
        counts.append(nz[-1] - nz[0] + 1)
        weights.append(band[nz[0]:nz[-1] + 1])
    return (np.array(starts, np.uint8), np.array(counts, np.uint8),
            np.concatenate(weights).astype(np.uint16))


def features_batch(audio: np.ndarray, tables: dict[str, np.ndarray]) -> np.ndarray:
    """Integer features (n, NBANDS) of int16 audio (n, SAMPLES), exactly as the C code computes."""
    audio = np.asarray(audio)
    if audio.ndim != 2 or audio.shape[1] != SAMPLES:
        raise ValueError(f"audio must be (n, {SAMPLES}), not {audio.shape}")
    out = [_features(audio[i:i + _BATCH], tables) for i in range(0, len(audio), _BATCH)]
    return np.concatenate(out) if out else np.zeros((0, NBANDS), np.int64)


def _features(audio: np.ndarray, t: dict[str, np.ndarray]) -> np.ndarray:
    n = len(audio)
    frames = audio[:, :NFRAMES * NFFT].astype(np.int64).reshape(n * NFRAMES, NFFT)
    x = (frames * t["window"].astype(np.int64)) >> WINDOW_SHIFT
    re, im = _fft(x[:, t["bitrev"]], t["twiddle_cos"], t["twiddle_sin"])
    power = re[:, :NBINS] ** 2 + im[:, :NBINS] ** 2
    count = t["mel_count"].astype(np.int64)
    bins = np.repeat(t["mel_start"].astype(np.int64), count) + _ranges(count)
    energy = np.add.reduceat(power[:, bins] * t["mel_weight"].astype(np.int64),
                             t["mel_offset"].astype(np.int64), axis=1)
    logs = _log2_q(energy, t["log2_frac"]).reshape(n, NFRAMES, NBANDS).sum(axis=1)
    return (logs + NFRAMES // 2) // NFRAMES


def _ranges(count: np.ndarray) -> np.ndarray:
    """0..c-1 for each c in `count`, concatenated."""
    ends = np.cumsum(count)
    return np.arange(ends[-1]) - np.repeat(ends - count, count)


def _fft(re: npt.NDArray[np.int64], cos: np.ndarray,
         sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In-order output of a DIT radix-2 FFT of bit-reversed rows, / NFFT (one halving per stage)."""
    m = re.shape[0]
    im = np.zeros_like(re)
    half = 1
    while half < NFFT:  # a loop over the 8 stages, each vectorised over frames and butterflies
        step = NFFT // (2 * half)
        c = cos[::step][:half].astype(np.int64)
        s = sin[::step][:half].astype(np.int64)
        r4 = re.reshape(m, step, 2, half)
        i4 = im.reshape(m, step, 2, half)
        ar, br, ai, bi = r4[:, :, 0], r4[:, :, 1], i4[:, :, 0], i4[:, :, 1]
        # b * exp(-j theta), rounded to nearest in Q15.
        tr = (br * c + bi * s + (1 << 14)) >> 15
        ti = (bi * c - br * s + (1 << 14)) >> 15
        re, im = np.empty_like(re), np.empty_like(im)
        out_r = re.reshape(m, step, 2, half)
        out_i = im.reshape(m, step, 2, half)
        np.right_shift(ar + tr, 1, out=out_r[:, :, 0])
        np.right_shift(ar - tr, 1, out=out_r[:, :, 1])
        np.right_shift(ai + ti, 1, out=out_i[:, :, 0])
        np.right_shift(ai - ti, 1, out=out_i[:, :, 1])
        half *= 2
    return re, im


def _log2_q(v: np.ndarray, frac_table: np.ndarray) -> np.ndarray:
    """log2(v) in Q(LOG2_FRAC_BITS) for non-negative int64 v; 0 for v = 0 (and v = 1)."""
    msb = np.zeros_like(v)
    for s in (32, 16, 8, 4, 2, 1):  # binary search for the leading bit: exact, unlike float log2
        msb += s * ((v >> (msb + s)) > 0)
    fb = LOG2_FRAC_BITS
    down = v >> np.maximum(msb - fb, 0)
    up = v << np.maximum(fb - msb, 0)
    frac = np.where(msb >= fb, down, up) & ((1 << fb) - 1)
    return np.where(v > 0, (msb << fb) + frac_table.astype(np.int64)[frac], 0)


def softmax(logits: np.ndarray, scale: float) -> np.ndarray:
    """softmax(logits * scale) in float64, over the last axis (the C code's formula)."""
    z = (logits - logits.max(axis=-1, keepdims=True)).astype(np.float64) * scale
    p = np.exp(z)
    return p / p.sum(axis=-1, keepdims=True)


class LinearAscModel:
    """Fixed-point log-mel features + an integer linear classifier over the 4 ASC scenes."""

    model_id = "asc01"
    input_size = 2 * SAMPLES

    def __init__(self, tables: dict[str, np.ndarray], weights: np.ndarray, bias: np.ndarray,
                 logit_scale: float) -> None:
        self.tables = {k: np.asarray(tables[k]) for k in TABLES}
        self.weights = np.asarray(weights, dtype=np.int16)
        self.bias = np.asarray(bias, dtype=np.int32)
        self.logit_scale = float(logit_scale)
        if self.weights.shape != (len(CLASSES), NBANDS) or self.bias.shape != (len(CLASSES),):
            raise ValueError(f"weights must be ({len(CLASSES)}, {NBANDS}) and bias "
                             f"({len(CLASSES)},), not {self.weights.shape} and {self.bias.shape}")
        worst = np.abs(self.weights.astype(np.int64)).sum(axis=1) * FEATURE_MAX
        if np.any(worst + np.abs(self.bias.astype(np.int64)) > LOGIT_LIMIT):
            raise ValueError("weights and bias could overflow the int32 logits")

    # -- persistence ----------------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path = WEIGHTS_PATH) -> LinearAscModel:
        """The committed model (written by `rig model train c-shim`)."""
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        return cls(arrays, arrays["weights"], arrays["bias"], float(arrays["logit_scale"]))

    def arrays(self) -> dict[str, np.ndarray]:
        """Everything the model is, as named arrays (what the .npz and the C header carry)."""
        return {**self.tables, "weights": self.weights, "bias": self.bias,
                "logit_scale": np.array(self.logit_scale)}

    # -- inference ------------------------------------------------------------------------------
    def _audio(self, data: bytes) -> np.ndarray:
        if len(data) != self.input_size:
            raise ValueError(f"the ASC model takes {self.input_size} bytes, got {len(data)}")
        return np.frombuffer(data, dtype="<i2").reshape(1, SAMPLES)

    def features(self, data: bytes) -> np.ndarray:
        """The NBANDS integer features of one input (mean Q6 log2 mel energies)."""
        return features_batch(self._audio(data), self.tables)[0]

    def logits_of(self, features: np.ndarray) -> np.ndarray:
        """int logits W f + b of features (..., NBANDS), clamped to int32 like the C code's."""
        z = np.asarray(features, np.int64) @ self.weights.T.astype(np.int64) + self.bias
        return np.clip(z, -LOGIT_LIMIT - 1, LOGIT_LIMIT)

    def logits(self, data: bytes) -> np.ndarray:
        """The integer logits of one input (the C code's, exactly)."""
        return self.logits_of(self.features(data))

    def __call__(self, data: bytes) -> np.ndarray:
        """The 4 scores (float64): softmax of the integer logits times `logit_scale`."""
        return softmax(self.logits(data), self.logit_scale)

    def predict(self, data: bytes) -> int:
        """Top-1 class as the rig will see it: argmax of the scores printed with 3 decimals."""
        return int(np.argmax(np.round(self(data), 3)))

    def predict_batch(self, audio: np.ndarray) -> np.ndarray:
        """`predict` for many int16 inputs (n, SAMPLES) at once."""
        scores = softmax(self.logits_of(features_batch(audio, self.tables)), self.logit_scale)
        return np.argmax(np.round(scores, 3), axis=1)
