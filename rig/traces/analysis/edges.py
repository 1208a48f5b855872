"""Timestamp edges on the GPIO line and the measurement windows they delimit.

In energy mode the DUT pulls its timestamp line low once at the start and once at the end of
each timed loop, so consecutive falling edges pair up into windows: (1st, 2nd), (3rd, 4th), ...
"""

from __future__ import annotations

import numpy as np

from rig.errors import AnalysisError

_NO_EDGES_HINT = (
    "check the GPIO wiring from the DUT's timestamp pin to the energy monitor, and that the DUT "
    "firmware is built for energy timestamp mode: its boot banner says m-timestamp-mode-energy"
)
_ODD_EDGES_HINT = (
    "a window was cut off at the start or end of the trace, or the DUT was reset mid-run; "
    "start the capture before the first timestamp and stop it after the last"
)


#: Samples per block `flatnonzero_sparse` skips at once when none is set.
_SKIP = 4096


def flatnonzero_sparse(mask: np.ndarray) -> np.ndarray:
    """`np.flatnonzero(mask)` of a 1-D bool array, quicker where few are set (edges on a line,
    range changes, lost samples): blocks with none set are skipped 8 bytes at a time, and only
    the blocks holding one are searched (`np.flatnonzero` looks at every byte twice)."""
    mask = np.ascontiguousarray(mask, dtype=bool)
    whole = len(mask) - len(mask) % _SKIP
    blocks = mask[:whole].view(np.uint64).reshape(-1, _SKIP // 8)
    # OR of each block's words: ~3x quicker than .any(axis=1), which tests word by word.
    hit = np.flatnonzero(np.bitwise_or.reduce(blocks, axis=1))
    if 8 * len(hit) > len(blocks):  # set all over: nothing to skip
        return np.flatnonzero(mask)
    found = np.flatnonzero(mask[:whole].reshape(-1, _SKIP)[hit])
    return np.concatenate((hit[found // _SKIP] * _SKIP + found % _SKIP,
                           np.flatnonzero(mask[whole:]) + whole))


def change_points(values: np.ndarray) -> np.ndarray:
    """The indices k >= 1 of a 1-D array where values[k] != values[k - 1] (int64)."""
    values = np.asarray(values)
    if (values.ndim == 1 and values.dtype.itemsize == 1 and values.flags.c_contiguous
            and len(values) >= 4 * _SKIP):
        return _byte_changes(values.view(np.uint8))
    return flatnonzero_sparse(values[1:] != values[:-1]) + 1


#: Eight copies of a byte in a word: byte b times this is b in every byte of a uint64.
_EVERY_BYTE = np.uint64(0x0101010101010101)


def _byte_changes(b: np.ndarray) -> np.ndarray:
    """`change_points` of a long 1-D uint8 array (a GPIO line, one byte a sample), most of
    whose `_SKIP`-byte blocks hold one value throughout: each block's words are ORed and ANDed
    together (eight bytes at a time, reductions along rows that numpy vectorises; no bool a
    sample), and only the blocks where those differ or a word's bytes do, and the block
    boundaries, are looked at byte by byte (~2.5x quicker than comparing each byte with the
    next)."""
    n = len(b)
    blocks = n // _SKIP
    whole = blocks * _SKIP
    words = b[:whole].view(np.uint64).reshape(blocks, _SKIP // 8)
    # One value throughout: every word alike (OR = AND of them) and every byte of it alike.
    ored = np.bitwise_or.reduce(words, axis=1)
    same = (ored == np.bitwise_and.reduce(words, axis=1)) & (
        ored == (ored & np.uint64(0xFF)) * _EVERY_BYTE)
    mixed = np.flatnonzero(~same)
    if 8 * len(mixed) > blocks:  # changing all over: nothing to skip
        return flatnonzero_sparse(b[1:] != b[:-1]) + 1
    found = [np.flatnonzero(b[_SKIP:whole:_SKIP] != b[_SKIP - 1:whole - 1:_SKIP]) * _SKIP
             + _SKIP]  # at a block's first byte
    if len(mixed):
        inner = b[:whole].reshape(blocks, _SKIP)[mixed]
        hit = np.flatnonzero(inner[:, 1:] != inner[:, :-1])  # (row, byte - 1) flattened
        found.append(mixed[hit // (_SKIP - 1)] * _SKIP + hit % (_SKIP - 1) + 1)
    found.append(np.flatnonzero(b[whole:] != b[whole - 1:n - 1]) + whole)  # the tail
    return np.sort(np.concatenate(found)).astype(np.int64)


def falling_edges(gpio: np.ndarray, bit: int = 0, initial_level: int = 1) -> np.ndarray:
    """Sample indices k where `bit` of `gpio` goes 1 -> 0 between sample k-1 and sample k.

    Sample 0 is compared with `initial_level` (the line level just before the trace began).
    """
    gpio = np.asarray(gpio)
    if gpio.ndim != 1:
        raise AnalysisError(f"gpio must be one-dimensional, got shape {gpio.shape}")
    if not np.issubdtype(gpio.dtype, np.integer):
        raise AnalysisError(f"gpio must hold integer bit fields, got dtype {gpio.dtype}")
    if not 0 <= bit < 8 * gpio.dtype.itemsize:
        raise AnalysisError(f"gpio bit {bit} does not exist in {gpio.dtype} samples")
    if initial_level not in (0, 1):
        raise AnalysisError(f"initial_level must be 0 or 1, got {initial_level!r}")
    if gpio.size == 0:
        return np.empty(0, dtype=np.int64)
    # A line changes seldom: one compare of whole samples finds every change of any bit (no
    # per-sample shift, mask or bool copy), and only those few are looked at for `bit` going
    # 1 -> 0.
    changed = change_points(gpio)
    before, after = (gpio[changed - 1] >> bit) & 1, (gpio[changed] >> bit) & 1
    inner = changed[(before == 1) & (after == 0)]
    if initial_level == 1 and not (gpio[0] >> bit) & 1:
        return np.concatenate(([0], inner)).astype(np.int64)
    return inner.astype(np.int64)


def _where(sample: int, sample_rate: float | None) -> str:
    if sample_rate:
        return f"sample {sample} ({sample / sample_rate:.6f} s)"
    return f"sample {sample}"


def windows_from_edges(edges: np.ndarray, sample_rate: float | None = None) -> np.ndarray:
    """Pair consecutive falling edges into windows: an (n, 2) int64 array of [start, end).

    `sample_rate` only makes error messages name times as well as sample indices.
    """
    edges = np.asarray(edges, dtype=np.int64)
    if edges.ndim != 1:
        raise AnalysisError(f"edges must be one-dimensional, got shape {edges.shape}")
    if edges.size == 0:
        raise AnalysisError("no falling edges on the timestamp line", hint=_NO_EDGES_HINT)
    if edges.size > 1 and not np.all(np.diff(edges) > 0):
        raise AnalysisError("falling edges must be strictly increasing sample indices")
    if edges.size % 2:
        first, last = int(edges[0]), int(edges[-1])
        if edges.size == 1:
            where = f"the only edge is at {_where(first, sample_rate)}"
        else:
            # Which end is missing its partner cannot be known from the edges alone: name both.
            where = (
                f"the unpaired edge is the first, at {_where(first, sample_rate)}, "
                f"or the last, at {_where(last, sample_rate)}"
            )
        raise AnalysisError(
            f"odd number of falling edges on the timestamp line ({edges.size}): "
            f"they do not pair into windows; {where}",
            hint=_ODD_EDGES_HINT,
        )
    return edges.reshape(-1, 2)
