"""Window integration speed over 100 M in-memory samples, against one numpy dot of the same arrays.

Prints `samples`, `window_integration_s`, `numpy_dot_s`, `ratio` (float64 inputs; goal <= 2),
edge detection and the whole `analyze()`, then the same integration on float32 inputs (what
instruments and JLS traces hold): `float32_window_integration_s`, `float32_numpy_dot_s`,
`float32_ratio` (goal <= 2), the same with the caller's thread alone (`float32_ratio_one_thread`:
what a host with no free core gets), and the float32 window's relative error against its closed
form (float64 level: the float32 path multiplies and sums in float64, `rig.traces.analysis.dot`).
Timings are the best of a few repeats; on a busy host the ratios are noisy, run it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from rig.traces.analysis import analyze, dot, falling_edges, window_energies, windows_from_edges

N = 100_000_000
FS = 1_000_000.0
REPEATS = 3
T = TypeVar("T")


def best_of(fn: Callable[[], T], repeats: int = REPEATS) -> tuple[float, T]:
    """Smallest wall time of `repeats` calls, and the last result."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def build() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """1.2 mW idle, 3.6 mW inside ten windows that cover 99 % of the samples; 10-sample low
    pulses at every window boundary."""
    voltage = np.full(N, 1.8)
    current = np.full(N, 1.2e-3 / 1.8)
    gpio = np.ones(N, dtype=np.uint8)
    step = N // 10
    for start in range(step // 200, N, step):
        end = start + step - step // 100
        current[start:end] = 3.6e-3 / 1.8
        gpio[start : start + 10] = 0
        gpio[end : end + 10] = 0
    return current, voltage, gpio


def bench_float64(current: np.ndarray, voltage: np.ndarray, gpio: np.ndarray) -> np.ndarray:
    """The headline figures; returns the windows for the float32 run."""
    edge_s, edges = best_of(lambda: falling_edges(gpio))
    windows = windows_from_edges(edges, FS)
    covered = int((windows[:, 1] - windows[:, 0]).sum())
    integ_s, energies = best_of(lambda: window_energies(current, voltage, windows, FS))
    dot_s, _ = best_of(lambda: np.dot(current, voltage))
    print(f"window_integration_s {integ_s:.4f}")
    print(f"numpy_dot_s {dot_s:.4f}")
    print(f"ratio {integ_s / dot_s:.2f}")
    print(f"windows {len(windows)} covering {covered} samples")
    print(f"edge_detection_s {edge_s:.4f}")
    total_s, _ = best_of(lambda: analyze(current, voltage, gpio, FS, idle=(0.0, 0.04)), 1)
    print(f"analyze_total_s {total_s:.4f}")
    expected = 3.6e-3 * (windows[0, 1] - windows[0, 0]) / FS
    print(f"window1_energy_rel_error {abs(energies[0] - expected) / expected:.2e}")
    return windows


def bench_float32(current: np.ndarray, voltage: np.ndarray, windows: np.ndarray) -> None:
    """Same integration on float32 inputs (float64 products and sums, blocks shared among
    `dot._THREADS` threads), then on the calling thread alone."""
    integ_s, energies = best_of(lambda: window_energies(current, voltage, windows, FS))
    dot_s, _ = best_of(lambda: np.dot(current, voltage))
    print(f"float32_threads {dot._THREADS}")
    print(f"float32_window_integration_s {integ_s:.4f}")
    print(f"float32_numpy_dot_s {dot_s:.4f}")
    print(f"float32_ratio {integ_s / dot_s:.2f}")
    threads, dot._THREADS = dot._THREADS, 1
    try:
        one_s, _ = best_of(lambda: window_energies(current, voltage, windows, FS))
    finally:
        dot._THREADS = threads
    print(f"float32_window_integration_one_thread_s {one_s:.4f}")
    print(f"float32_ratio_one_thread {one_s / dot_s:.2f}")
    # Window 1 is constant: count * i * v, with i * v exact in float64.
    start, end = (int(x) for x in windows[0])
    expected = (end - start) * (float(current[start]) * float(voltage[start])) / FS
    print(f"float32_window1_energy_rel_error {abs(energies[0] - expected) / expected:.2e}")


def main() -> None:
    t0 = time.perf_counter()
    current, voltage, gpio = build()
    print(f"samples {N}")
    print("dtype float64")
    print(f"generate_s {time.perf_counter() - t0:.3f}")
    windows = bench_float64(current, voltage, gpio)
    c32, v32 = current.astype(np.float32), voltage.astype(np.float32)
    del current, voltage
    bench_float32(c32, v32, windows)


if __name__ == "__main__":
    main()
