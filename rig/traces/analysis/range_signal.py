"""A trace's current range per sample, kept as a JLS file stores it.

The rig records the range an instrument told for each sample as a u4 signal: two values to a
byte, low nibble first (`rig.traces.files`). Ranges change seldom (when the current moves
across a range's edge), so the analysis needs only where they change and the range at a few
samples; both come from the packed bytes, half the size of one value a byte and never
unpacked for them: reading a 100 kHz trace's ranges and finding their changes took ~2x less
this way. The per-sample array is unpacked when something asks for it (`np.asarray`, an index,
a slice), once.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rig.traces.analysis.edges import flatnonzero_sparse

#: The value of a sample whose range is not known (the recording had not told it yet, or the
#: instrument does not tell it); at most this many range names fit in a u4 value.
RANGE_NOT_TOLD = 15
#: Bytes unpacked at a time (their words stay in the CPU cache).
_UNPACK_BYTES = 1 << 19
#: Bytes searched for changes at a time (`RangeSignal.changes`).
_SEARCH_BYTES = 1 << 17
_SIXTEEN = np.uint8(16)


class RangeSignal:
    """The range index of each of a trace's `n` samples: u4 values, two a byte, low nibble
    first, in `packed`, the signal's first value at trace sample `shift` (it may start later
    than the current, with the first chunk that told ranges); `length` values;
    `RANGE_NOT_TOLD` outside them. Reads like a uint8 array (`np.asarray`, `len`, indexing);
    `changes` and `at` work on the packed bytes."""

    def __init__(self, packed: np.ndarray, shift: int, length: int, n: int) -> None:
        packed = np.ascontiguousarray(packed, dtype=np.uint8)
        if 2 * len(packed) < length:
            raise ValueError(f"{len(packed)} bytes of the range signal for {length} samples")
        self.packed = packed
        self.shift = int(shift)
        self.n = int(n)
        #: Trace samples [begin, end) hold told values (possibly RANGE_NOT_TOLD too).
        self.begin = max(0, self.shift)
        self.end = max(self.begin, min(self.n, self.shift + int(length)))
        self._unpacked: np.ndarray | None = None
        self._changes: np.ndarray | None = None  # `changes(0, n)`, kept once found

    def __len__(self) -> int:
        return self.n

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.uint8)

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.unpacked()
        if dtype is not None and np.dtype(dtype) != out.dtype:
            return out.astype(dtype)
        return out.copy() if copy else out

    def __getitem__(self, key: Any) -> Any:
        return self.unpacked()[key]

    def tolist(self) -> list[int]:
        return self.unpacked().tolist()

    def unpacked(self) -> np.ndarray:
        """One uint8 value a sample (unpacked on first use, then kept; read-only)."""
        if self._unpacked is None:
            out = np.empty(self.n + 1, dtype=np.uint8)  # +1: a last word's pad nibble
            out[: self.begin] = RANGE_NOT_TOLD
            first = self.begin - self.shift  # the signal's value at trace sample `begin`
            if first % 2 and self.end > self.begin:  # an odd start: its first value alone
                out[self.begin] = self.packed[first // 2] >> 4
            lo = self.begin + first % 2  # trace sample of a byte's low nibble
            byte = (first + first % 2) // 2
            while lo < self.end:
                count = min(_UNPACK_BYTES, (self.end - lo + 1) // 2, len(self.packed) - byte)
                if count <= 0:
                    break
                # Both nibbles of a byte at once, as one little-endian 16-bit word per byte:
                # low nibble in its first byte, high nibble in its second.
                words = out[lo : lo + 2 * count].view("<u2")
                words[:] = self.packed[byte : byte + count]
                words |= words * np.uint16(16)  # << 4 (a multiply: numpy's shift is slower)
                words &= 0x0F0F
                lo, byte = lo + 2 * count, byte + count
            out[self.end :] = RANGE_NOT_TOLD  # past the signal (and over a pad nibble)
            out = out[: self.n]
            out.flags.writeable = False
            self._unpacked = out
        return self._unpacked

    def at(self, samples: np.ndarray) -> np.ndarray:
        """The range index (uint8) at each of `samples` (trace sample indices)."""
        k = np.asarray(samples, dtype=np.int64)
        if self._unpacked is not None:
            return self._unpacked[k]
        if k.size and (k.min() < 0 or k.max() >= self.n):
            raise IndexError(f"sample index outside the trace's {self.n} samples")
        out = np.full(k.shape, RANGE_NOT_TOLD, dtype=np.uint8)
        inside = (k >= self.begin) & (k < self.end)
        m = k[inside] - self.shift
        out[inside] = (self.packed[m >> 1] >> ((m & 1) << 2).astype(np.uint8)) & 15
        return out

    def changes(self, lo: int, hi: int) -> np.ndarray:
        """The samples k in (lo, hi) whose range differs from sample k - 1's (int64, sorted):
        `change_points(np.asarray(self)[lo:hi]) + lo`, from the packed bytes; those of the
        whole trace are kept once found, and any (lo, hi) taken from them."""
        lo, hi = max(0, int(lo)), min(self.n, int(hi))
        if self._changes is not None:
            every = self._changes
            return every[np.searchsorted(every, lo, "right"):np.searchsorted(every, hi, "left")]
        if lo == 0 and hi == self.n:
            self._changes = self._changes_in(lo, hi)
            self._changes.flags.writeable = False
            return self._changes
        return self._changes_in(lo, hi)

    def _changes_in(self, lo: int, hi: int) -> np.ndarray:
        found: list[np.ndarray] = []
        b, e = max(lo, self.begin), min(hi, self.end)
        if e - b > 1:
            found.append(self._nibble_changes(b - self.shift, e - self.shift) + self.shift)
        if self.end > self.begin:  # the edges of what the signal covers
            if lo < self.begin < hi and self.at(np.array([self.begin]))[0] != RANGE_NOT_TOLD:
                found.append(np.array([self.begin], dtype=np.int64))
            if lo < self.end < hi and self.at(np.array([self.end - 1]))[0] != RANGE_NOT_TOLD:
                found.append(np.array([self.end], dtype=np.int64))
        if not found:
            return np.empty(0, dtype=np.int64)
        return np.sort(np.concatenate(found)).astype(np.int64)

    def _nibble_changes(self, i0: int, i1: int) -> np.ndarray:
        """The value indices m in (i0, i1) whose value differs from value m - 1's."""
        j0, j1 = i0 // 2, (i1 + 1) // 2  # the bytes holding values [2 j0, 2 j1)
        p = self.packed
        # Two scratch blocks, reused: no array the size of the signal is made (fresh memory
        # costs page faults; a block stays in the CPU cache through the five passes below).
        size = min(_SEARCH_BYTES, max(1, j1 - j0))
        shifted, spare = np.empty(size, dtype=np.uint8), np.empty(size, dtype=np.uint8)
        found: list[np.ndarray] = []
        for a in range(j0, j1, size):
            b = min(a + size, j1)
            # Most blocks are one range throughout: every byte alike (with the next block's
            # first), its two nibbles alike. Two vectorised reductions tell (~4x quicker).
            whole = p[a : min(b + 1, len(p))]
            low = int(whole.min())
            if low == int(whole.max()) and low & 15 == low >> 4:
                continue
            s = shifted[: b - a]
            # Each byte against the values one nibble on: its high nibble and the next byte's
            # low one. XOR: low nibble set where values 2j and 2j+1 differ, high where 2j+1
            # and 2j+2 do (past the last byte: compared with 0, dropped below as m >= i1).
            np.right_shift(p[a:b], 4, out=s)
            nxt = p[a + 1 : min(b + 1, len(p))]
            np.multiply(nxt, _SIXTEEN, out=spare[: len(nxt)])  # << 4 (uint8 wraps): ~10x
            # quicker than numpy's uint8 left shift, which has no vector loop
            s[: len(nxt)] |= spare[: len(nxt)]
            s ^= p[a:b]
            if not s.any():  # ranges change seldom: most blocks hold no change
                continue
            hit = flatnonzero_sparse(s != 0)  # (np.flatnonzero of uint8 is byte by byte)
            d = s[hit]
            found += [2 * (hit[(d & 15) != 0] + a) + 1, 2 * (hit[(d >> 4) != 0] + a) + 2]
        if not found:
            return np.empty(0, dtype=np.int64)
        m = np.sort(np.concatenate(found))
        return m[(m > i0) & (m < i1)].astype(np.int64)
