"""Sum of i[k] * v[k] accumulated in float64, for sample arrays of any real dtype.

float64 inputs are one BLAS dot. Other dtypes (float32 from instruments and JLS traces) are
converted block by block into reused float64 scratch and multiplied there: a float32 is exactly a
float64 and the product of two is exact in float64 (48 significant bits), so the only rounding
left is the summation's, as for float64 inputs. (A float32 BLAS dot accumulates in float32: its
error grows with length, ~1e-6 relative over 1e7 samples.)

Where the time goes: numpy's float32 -> float64 conversion costs nearly as much per sample as
a whole float32 dot, both arrays need it, and a product array plus its sum would be two more
passes. So each block is converted into two scratch buffers that stay in the CPU cache and
dotted there row by row (`_ROW` samples, one BLAS ddot each, no product array), which one thread
does in ~2.4x one float32 `np.dot`; the blocks of a call (all its spans) are then shared among up
to `_THREADS` threads (numpy releases the GIL while it converts and dots): ~1.9x on two cores.
Rows are short enough that OpenBLAS runs them on the calling thread, so nothing spins on a busy
host: a thread that gets no CPU time just takes fewer blocks. Row sums add up pairwise and block
sums exactly (`math.fsum`), so the result does not depend on how blocks were shared.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

#: Samples converted per block: two float64 buffers of 2 MiB per thread, reused.
BLOCK = 1 << 18
#: Samples per BLAS ddot (OpenBLAS threads a ddot only above 10 000).
_ROW = 4096
#: Calls with fewer samples than this (all spans) stay on the calling thread.
_PARALLEL_MIN = 4 * BLOCK


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Threads that share a long call's blocks, the caller's included (1: the caller alone).
_THREADS = max(1, min(4, _cpu_count()))

_local = threading.local()
_pool_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid that made it, pool)


def _buffers() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """This thread's scratch: two flat float64 blocks and their row views for matmul."""
    bufs = getattr(_local, "bufs", None)
    if bufs is None:
        x, y = np.empty(BLOCK), np.empty(BLOCK)
        bufs = (x, y, x.reshape(-1, 1, _ROW), y.reshape(-1, _ROW, 1))
        _local.bufs = bufs
    return bufs


def _workers() -> ThreadPoolExecutor:
    """The helper threads, made on first use (again after a fork: threads do not survive it)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(),
                     ThreadPoolExecutor(max(1, _THREADS - 1), thread_name_prefix="rig-dot64"))
        return _pool[1]


def _block_dot(a: np.ndarray, b: np.ndarray) -> float:
    """Dot of one block (at most BLOCK samples) through this thread's float64 scratch."""
    x, y, rows_x, rows_y = _buffers()
    m = len(a)
    np.copyto(x[:m], a)  # exact: every float32 (and smaller int) value is a float64
    np.copyto(y[:m], b)
    rows = m // _ROW
    total = 0.0
    if rows:
        total = float(np.add.reduce(np.matmul(rows_x[:rows], rows_y[:rows]), axis=None))
    tail = rows * _ROW
    if tail < m:
        t = x[tail:m]
        np.multiply(t, y[tail:m], out=t)
        total += float(np.add.reduce(t))
    return total


def _total(sums: list[float]) -> float:
    """Exact sum of block sums; NaN (a lost sample) or inf as a plain sum gives them."""
    if all(math.isfinite(v) for v in sums):
        return math.fsum(sums)
    return float(sum(sums))


def span_dots(a: np.ndarray, b: np.ndarray, spans: np.ndarray) -> np.ndarray:
    """sum(a[s:e] * b[s:e]) for each [s, e) row of `spans`, products and sums in float64.

    All the spans' blocks go into one queue, so the threads wait for each other once per call,
    not once per span (a descheduled helper on a busy host costs a few ms at that wait).
    """
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    if a.dtype == np.float64 and b.dtype == np.float64:
        return np.array([float(np.dot(a[s:e], b[s:e])) for s, e in spans.tolist()])
    tasks: list[tuple[int, int]] = []
    first: list[int] = []  # index of each span's first block in `tasks`
    for s, e in spans.tolist():
        first.append(len(tasks))
        tasks.extend((lo, min(lo + BLOCK, e)) for lo in range(s, e, BLOCK))
    first.append(len(tasks))
    sums = [0.0] * len(tasks)
    claim = iter(range(len(tasks)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                k = next(claim, None)
            if k is None:
                return
            lo, hi = tasks[k]
            sums[k] = _block_dot(a[lo:hi], b[lo:hi])

    helpers: list[Future[None]] = []
    if _THREADS > 1 and len(tasks) > 1 and int((spans[:, 1] - spans[:, 0]).sum()) >= _PARALLEL_MIN:
        pool = _workers()
        helpers = [pool.submit(work) for _ in range(_THREADS - 1)]
    try:
        work()
    finally:
        for f in helpers:
            if not f.cancel():  # a helper that never started (pool busy) is not waited for
                f.result()
    return np.array([_total(sums[i:j]) for i, j in itertools.pairwise(first)])


def dot64(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) of two equal-length 1-D arrays, products and sum in float64 (NaN if any
    sample is NaN)."""
    if a.dtype == np.float64 and b.dtype == np.float64:
        return float(np.dot(a, b))
    if len(a) <= BLOCK:
        return _block_dot(a, b) if len(a) else 0.0
    return float(span_dots(a, b, np.array([[0, len(a)]]))[0])
