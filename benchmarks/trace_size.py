"""Trace size on disk per monitor kind, and pyjls writer layouts to choose from (issue 25).

For each channel set a monitor gives (current + gpi0 where the supply is set; current +
voltage + gpi0 where it is measured) and each candidate `signal_def` layout, a trace of 1 M
and of 8 M samples is written with the rig's own `TraceWriter` (a noisy 1 MS/s pattern with a
timestamp pulse per step): the slope between the two is the bytes per sample of a long trace,
the rest the file's fixed part. For each layout it also times what the viewer's zoom asks of a
file (`fsr_statistics` over 1000 pixel columns at 1x, 100x and 10000x zoom). Prints the
figures; asserts nothing. About 30 s; ~0.3 GB of temporary disk (`RIG_BENCH_TMP`).
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pyjls

from rig.traces.files import JLS_SIGNAL_OPTIONS, TraceWriter

RATE = 1_000_000
LENGTHS = (1_000_000, 8_000_000)
CHUNK = 10_000
#: Monitors by what they measure (README "Energy monitors").
MONITORS = {
    "set supply (LPM01A, PPK2, N6705 aux, Otii without mv, 34465A)": (1.8, "set: benchmark"),
    "measured voltage (Joulescope, N6705 VOLT, Otii with mv)": None,
}
#: Candidate layouts: pyjls's defaults, what the rig writes, then coarser ones.
LAYOUTS: dict[str, dict[str, int]] = {
    "pyjls defaults (8192/128/x20)": {},
    "rig (JLS_SIGNAL_OPTIONS)": JLS_SIGNAL_OPTIONS,
    "blocks of 65536": {"samples_per_data": 65536},
    "summary per 256": {"sample_decimate_factor": 256, "entries_per_summary": 1280},
    "summary per 256, blocks of 65536": {"sample_decimate_factor": 256,
                                         "entries_per_summary": 1280,
                                         "samples_per_data": 65536},
    "summary per 1024": {"sample_decimate_factor": 1024, "entries_per_summary": 5120},
    "summary x100 per level": {"summary_decimate_factor": 100, "entries_per_summary": 2000},
}


def pattern(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Idle and active steps of 1 ms at 1.8 V with noise, a timestamp pulse on each step."""
    rng = np.random.default_rng(0)
    current = np.where((np.arange(n) // 1000) % 2, 2e-3, 0.7e-3) + rng.normal(0, 2e-6, n)
    voltage = 1.8 + rng.normal(0, 1e-4, n)
    gpio = np.ones(n, dtype=np.uint8)
    gpio[::1000] = 0
    return current.astype(np.float32), voltage.astype(np.float32), gpio


def write(path: Path, n: int, data, set_voltage, layout: dict[str, int]) -> int:
    current, voltage, gpio = data
    with TraceWriter(path, RATE, set_voltage=set_voltage, jls_options=layout) as w:
        for lo in range(0, n, CHUNK):
            hi = lo + CHUNK
            w.append(lo, current[lo:hi], voltage[lo:hi], gpio[lo:hi])
    return path.stat().st_size


def zoom_ms(path: Path, n: int) -> float:
    """Milliseconds for the summaries of three zoom levels, 1000 columns each (current)."""
    reader = pyjls.Reader(str(path))
    try:
        t0 = time.perf_counter()
        for span in (n, n // 100, n // 10_000):
            incr = max(1, span // 1000)
            reader.fsr_statistics(1, (n - span) // 2, incr, span // incr)
        return (time.perf_counter() - t0) * 1e3
    finally:
        reader.close()


def main() -> None:
    data = pattern(max(LENGTHS))
    tmp = Path(tempfile.mkdtemp(prefix="trace-size-", dir=os.environ.get("RIG_BENCH_TMP")))
    print(f"trace size at {RATE / 1e6:g} MS/s, {CHUNK}-sample chunks "
          f"(bytes/sample = slope between {LENGTHS[0]:,} and {LENGTHS[1]:,} samples)")
    try:
        for monitor, set_voltage in MONITORS.items():
            print(f"\n{monitor}")
            for name, layout in LAYOUTS.items():
                small, large = (write(tmp / f"t{n}.jls", n, data, set_voltage, layout)
                                for n in LENGTHS)
                slope = (large - small) / (LENGTHS[1] - LENGTHS[0])
                fixed = small - slope * LENGTHS[0]
                ms = zoom_ms(tmp / f"t{LENGTHS[1]}.jls", LENGTHS[1])
                print(f"  {name:32s} {slope:6.3f} B/sample  fixed {fixed / 1024:6.1f} KiB  "
                      f"1 h: {slope * RATE * 3600 / 1e9:5.1f} GB  zoom x3: {ms:6.1f} ms")
                for f in tmp.iterdir():
                    f.unlink()
    finally:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()


if __name__ == "__main__":
    main()
