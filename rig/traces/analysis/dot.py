"""Sum of i[k] * v[k] accumulated in float64, for sample arrays of any real dtype.

Other dtypes than float64 (float32 from instruments and JLS traces, set voltages broadcast
from one value) are converted block by block into reused float64 scratch and multiplied there;
contiguous float64 arrays are dotted where they lie, the same way. A float32 is exactly a
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
host: a thread that gets no CPU time just takes fewer blocks, and one taken off its CPU halfway
through a block is not waited for (its block is done again). Row sums add up pairwise and block
sums exactly (`math.fsum`), so the result does not depend on how blocks were shared.
(One `np.dot` over a long float64 span is no faster: OpenBLAS threads a ddot past 10 000
samples, and on a busy host its threads wait for each other, ~10x slower.)
"""

from __future__ import annotations

import itertools
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np

#: Samples converted per block: two float64 buffers of 2 MiB per thread, reused.
BLOCK = 1 << 18
#: Samples per BLAS ddot (OpenBLAS threads a ddot only above 10 000).
_ROW = 4096
#: Calls with fewer samples than this (all spans) stay on the calling thread.
_PARALLEL_MIN = 4 * BLOCK


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Threads that share a long call's blocks, the caller's included (1: the caller alone).
_THREADS = max(1, min(4, usable_cpus()))

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


def helper_pool() -> ThreadPoolExecutor:
    """The helper threads (`_THREADS` - 1 of them), made on first use (again after a fork:
    threads do not survive it); others may hand them short numpy work too."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(),
                     ThreadPoolExecutor(max(1, _THREADS - 1), thread_name_prefix="rig-dot64"))
        return _pool[1]


_T = TypeVar("_T")


class Crew:
    """Lets a thread that waits for a helper's `span_dots` or `span_sums` (handed to it with
    `crew=`) take blocks off that call's queue instead of waiting idle: the sums are the same
    whichever thread takes which block."""

    def __init__(self) -> None:
        self._posted = threading.Event()
        self._work: Callable[[], None] | None = None

    def _post(self, work: Callable[[], None] | None) -> None:
        self._work = work
        self._posted.set()

    def join(self, job: Future[_T]) -> _T:
        """`job`'s result, once this thread has taken what blocks were left in its queue."""
        job.add_done_callback(lambda _f: self._posted.set())  # nothing posted: not stuck
        self._posted.wait()
        work = self._work
        if work is not None:
            work()
        return job.result()


def _in_place(a: np.ndarray) -> bool:
    """Whether `a` can be dotted where it lies: contiguous native float64 (no copy needed)."""
    return a.dtype == np.float64 and a.dtype.isnative and a.flags.c_contiguous


def float64_block(a: np.ndarray) -> np.ndarray:
    """`a` (at most BLOCK samples) as float64: `a` itself when it is contiguous float64, else
    converted (exactly, for float32 and smaller ints) into this thread's scratch, which the
    next call on this thread overwrites."""
    if _in_place(a):
        return a
    x = _buffers()[0][: len(a)]
    np.copyto(x, a)
    return x


def _fill(y: np.ndarray, b: np.ndarray) -> None:
    """Copy `b` into the scratch `y`; a value broadcast to every sample (a set voltage) is
    written once per thread, not once per block, while `y` still holds it."""
    if b.ndim == 1 and len(b) and b.strides == (0,):
        value = float(b[0])
        if getattr(_local, "y_holds", None) != value:  # NaN never equals: written again
            y.fill(value)
            _local.y_holds = value
        return
    _local.y_holds = None
    np.copyto(y[: len(b)], b)


def _block_dot(a: np.ndarray, b: np.ndarray) -> float:
    """Dot of one block (at most BLOCK samples) through this thread's float64 scratch (or in
    place for contiguous float64)."""
    x, y, rows_x, rows_y = _buffers()
    m = len(a)
    rows = m // _ROW
    tail = rows * _ROW
    if _in_place(a):
        xa, ra = a, a[:tail].reshape(rows, 1, _ROW)
    else:
        np.copyto(x[:m], a)  # exact: every float32 (and smaller int) value is a float64
        xa, ra = x, rows_x[:rows]
    if _in_place(b):
        yb, rb = b, b[:tail].reshape(rows, _ROW, 1)
    else:
        _fill(y, b)
        yb, rb = y, rows_y[:rows]
    total = 0.0
    if rows:
        total = float(np.add.reduce(np.matmul(ra, rb), axis=None))
    if tail < m:  # under one row: a single-threaded ddot
        total += float(np.dot(xa[tail:m], yb[tail:m]))
    return total


def _total(sums: list[float]) -> float:
    """Exact sum of block sums; NaN (a lost sample) or inf as a plain sum gives them."""
    if all(math.isfinite(v) for v in sums):
        return math.fsum(sums)
    return float(sum(sums))


def span_dots(a: np.ndarray, b: np.ndarray, spans: np.ndarray, *,
              ready: Callable[[int], None] | None = None, crew: Crew | None = None
              ) -> np.ndarray:
    """sum(a[s:e] * b[s:e]) for each [s, e) row of `spans`, products and sums in float64.

    All the spans' blocks go into one queue, so the threads wait for each other once per call,
    not once per span (a descheduled helper on a busy host costs a few ms at that wait).
    Where `b` is one value broadcast to every sample (a set voltage), each span's sum of `a`
    times that value: half the memory traffic (~2x quicker), and within a few units in the
    last place of the product-by-product sum (each product rounds once, the sum only once).
    `ready`: `a` is still coming in (`rig.traces.files`): `ready(k)` returns once its first
    k samples are there; the blocks are then taken in order on this thread alone, each as
    soon as its samples are in (the same blocks, the same result).
    `crew`: a thread waiting for this call (`Crew.join`) takes blocks too.
    """
    if b.ndim == 1 and len(b) and b.strides == (0,) and math.isfinite(float(b[0])):
        return span_sums(a, spans, ready=ready, crew=crew) * float(b[0])
    return _span_blocks(spans, lambda lo, hi: _block_dot(a[lo:hi], b[lo:hi]), ready, crew)


def _block_sum(a: np.ndarray) -> float:
    """Sum of one block (at most BLOCK samples) in float64 (pairwise, in the scratch)."""
    return float(np.add.reduce(float64_block(a))) if len(a) else 0.0


def span_sums(a: np.ndarray, spans: np.ndarray, *,
              ready: Callable[[int], None] | None = None, crew: Crew | None = None
              ) -> np.ndarray:
    """sum(a[s:e]) for each [s, e) row of `spans`, in float64 whatever a's dtype (as
    `span_dots` with b = 1, without the products, `ready` and `crew` alike): e.g. the current
    in each run of one current range."""
    return _span_blocks(spans, lambda lo, hi: _block_sum(a[lo:hi]), ready, crew)


def _span_blocks(spans: np.ndarray, block: Callable[[int, int], float],
                 ready: Callable[[int], None] | None = None, crew: Crew | None = None
                 ) -> np.ndarray:
    """For each [s, e) row of `spans`, the exact sum of `block(lo, hi)` over its blocks of at
    most BLOCK samples; long calls share the blocks among the threads (`ready`: in order on
    this thread, each once `ready(hi)` has returned; `crew`: with the thread that joins it
    too, whatever the length)."""
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    tasks: list[tuple[int, int]] = []
    first: list[int] = []  # index of each span's first block in `tasks`
    for s, e in spans.tolist():
        first.append(len(tasks))
        tasks.extend((lo, min(lo + BLOCK, e)) for lo in range(s, e, BLOCK))
    first.append(len(tasks))
    sums = [0.0] * len(tasks)
    if ready is not None:
        for k in sorted(range(len(tasks)), key=lambda k: tasks[k][1]):
            ready(tasks[k][1])
            sums[k] = block(*tasks[k])
        return np.array([_total(sums[i:j]) for i, j in itertools.pairwise(first)])
    done = [False] * len(tasks)
    claim = iter(range(len(tasks)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                k = next(claim, None)
            if k is None:
                return
            sums[k] = block(*tasks[k])
            done[k] = True

    helpers: list[Future[None]] = []
    if crew is not None:
        crew._post(work)
    if _THREADS > 1 and len(tasks) > 1 and int((spans[:, 1] - spans[:, 0]).sum()) >= _PARALLEL_MIN:
        pool = helper_pool()
        helpers = [pool.submit(work) for _ in range(_THREADS - 1)]
    try:
        work()
    finally:
        for f in helpers:
            f.cancel()  # a helper that never started (pool busy) is not waited for
    # Nor one the host took off its CPU halfway through a block (a busy host: it may sleep for
    # a whole time slice, ~10 blocks): its blocks are done here again instead. A block's sum
    # is the same on any thread, so the helper's late write changes nothing.
    for k in [k for k, finished in enumerate(done) if not finished]:
        sums[k] = block(*tasks[k])
    return np.array([_total(sums[i:j]) for i, j in itertools.pairwise(first)])


def dot64(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) of two equal-length 1-D arrays, products and sum in float64 (NaN if any
    sample is NaN)."""
    if len(a) <= BLOCK:
        return _block_dot(a, b) if len(a) else 0.0
    return float(span_dots(a, b, np.array([[0, len(a)]]))[0])
