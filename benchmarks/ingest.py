"""Live-pipeline ingest: a 2 MS/s stream (a JS110 at full rate) through `EmonRecorder`.

A producer thread plays the driver: it hands chunks of 15 000..40 000 samples (what a
Joulescope delivers per callback) to `recorder.on_chunk`, with a 10-sample timestamp pulse every
10 ms, and the recorder writes the JLS trace into a temporary folder (deleted afterwards).

Default: the stream is fed as fast as the pipeline takes it (throughput). `--realtime` paces it
at 2 MS/s through a bounded buffer (0.5 s, like the instrument's) that drops chunks when the
pipeline falls behind, so `dropped` shows whether it keeps up.

Prints `samples_per_s`, `dropped` (goal 0), `cpu_fraction` (process CPU time / signal duration:
goal < 0.5), `peak_rss_mb_at_10s` and `peak_rss_mb_at_60s` (goal: flat), then a few checks.
Then the Nordic PPK2 at its full 100 kS/s through its real driver from the simulated PPK2 on a
pty, in real time (`run_ppk2`, `--ppk2-seconds`): `ppk2_dropped` (goal 0) and its CPU share.
Then the Qoitech Otii at its full rate through its real driver from the simulated Otii TCP server
on 127.0.0.1, in real time (`run_otii`, `--otii-seconds`): an Arc at 4 kS/s and an Ace at 50 kS/s
(the simulator's top rate), `otii_arc_dropped` / `otii_ace_dropped` (goal 0) and CPU shares.
"""

from __future__ import annotations

import argparse
import queue
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from drivers.emon.base import Chunk
from rig.run.live_power import PowerPreview
from rig.run.recording import EmonRecorder

FS = 2_000_000
#: A timestamp pulse every 10 ms, 10 samples low.
PULSE_EVERY = FS // 100
PULSE_LEN = 10
#: Samples per chunk, cycled (a Joulescope callback carries tens of milliseconds).
CHUNK_SIZES = (20_000, 32_768, 15_000, 40_000, 24_576)
#: The played signal repeats after this many samples (a whole number of pulse periods).
POOL = 50 * PULSE_EVERY
#: The instrument-side buffer in --realtime mode, in samples.
BUFFER_SAMPLES = FS // 2


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far [MB] (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_pool() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One pool of signal plus the longest chunk again, so every chunk is a view (no copy)."""
    rng = np.random.default_rng(1)
    n = POOL + max(CHUNK_SIZES)
    k = np.arange(n)
    phase = k % PULSE_EVERY
    # Active for the first 60 % of each 10 ms period, idle after, with measurement noise.
    current = np.where(phase < PULSE_EVERY * 6 // 10, 2.0e-3, 0.667e-3)
    current = current + rng.normal(0.0, 5e-6, n)
    voltage = 1.8 + rng.normal(0.0, 1e-4, n)
    gpio = np.where(phase < PULSE_LEN, 0, 1).astype(np.uint8)
    return current, voltage, gpio


def run(seconds: float, realtime: bool,
        preview: Callable[[PowerPreview], None] | None = None) -> dict[str, float]:
    """Ingest `seconds` of the 2 MS/s stream; `preview` taps the live power as a display or
    telemetry does (benchmarks/mqtt.py)."""
    current, voltage, gpio = build_pool()
    total = round(seconds * FS)
    folder = Path(tempfile.mkdtemp(prefix="rig-ingest-"))
    recorder = EmonRecorder(FS, folder / "ingest.jls", preview=preview)
    # Free-running: a few chunks of slack, the producer waits. Realtime: bounded by samples.
    buffer: queue.Queue[Chunk | None] = queue.Queue(maxsize=0 if realtime else 16)
    buffered = [0]  # samples waiting in the buffer (realtime mode)
    lock = threading.Lock()
    dropped_by_buffer = [0]
    rss: dict[int, float] = {}

    def produce() -> None:
        first, j = 0, 0
        wall0 = time.monotonic()
        while first < total:
            m = min(CHUNK_SIZES[j % len(CHUNK_SIZES)], total - first)
            j += 1
            lo = first % POOL
            chunk = Chunk(first, current[lo : lo + m], voltage[lo : lo + m], gpio[lo : lo + m])
            first += m
            if realtime:
                delay = wall0 + first / FS - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                with lock:
                    if buffered[0] + m > BUFFER_SAMPLES:
                        dropped_by_buffer[0] += m  # the instrument overwrites what was not read
                        continue
                    buffered[0] += m
            buffer.put(chunk)
        buffer.put(None)

    def consume() -> None:
        marks = [10 * FS, 60 * FS]
        while (chunk := buffer.get()) is not None:
            recorder.on_chunk(chunk)
            if realtime:
                with lock:
                    buffered[0] -= len(chunk)
            while marks and chunk.end_sample_id >= marks[0]:
                rss[marks.pop(0) // FS] = peak_rss_mb()

    producer = threading.Thread(target=produce, name="instrument")
    consumer = threading.Thread(target=consume, name="driver")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    try:
        producer.start()
        consumer.start()
        producer.join()
        consumer.join()
        recorder.close()
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
        file_mb = (folder / "ingest.jls").stat().st_size / 1e6
    finally:
        recorder.close()
        shutil.rmtree(folder, ignore_errors=True)
    if recorder.error is not None:
        raise recorder.error
    edges = recorder.edges()
    # Check the pipeline's arithmetic on one window: 60 % active per 10 ms period.
    window_power = recorder.mean_power(edges[0], edges[1]) if len(edges) > 1 else float("nan")
    return {
        "samples_per_s": recorder.received / wall,
        "dropped": recorder.dropped + dropped_by_buffer[0],
        "cpu_fraction": cpu / (total / FS),
        "peak_rss_mb_at_10s": rss.get(10, float("nan")),
        "peak_rss_mb_at_60s": rss.get(60, float("nan")),
        "wall_s": wall,
        "signal_s": total / FS,
        "edges": len(edges),
        "first_window_mean_power_w": window_power,
        "jls_mb": file_mb,
    }


def record_simulated(world: Any, monitor: Any, fs: float, seconds: float, trace: Path, *,
                     await_power: bool) -> tuple[EmonRecorder, float, float]:
    """Record `seconds` of a simulated monitor in real time at `fs` into `trace` while the
    World's DUT runs a 60 %-active period with a pulse every 10 ms (from 0.1 s on); the
    recorder (closed), wall seconds and process CPU seconds. The monitor is closed after."""
    from virtual_bench.world import NS

    period_ns = NS // 100
    count = round(seconds * fs)
    recorder = EmonRecorder(fs, trace, simulated=True, stop_after=count)
    try:
        monitor.configure(1.8, fs)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        monitor.start(recorder.on_chunk)
        monitor.power_on()
        while await_power and not world.powered:
            time.sleep(0.001)
        with world.lock:  # the DUT's whole schedule, from 0.1 s after now
            t = world.clock.now_ns() + NS // 10
            for k in range(round(seconds * 100)):
                start = t + k * period_ns
                world.add_activity(start, start + period_ns * 6 // 10)
                world.add_pulse(start)
        recorder.wait_for_samples(count, timeout_s=seconds * 3 + 10)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    finally:
        monitor.power_off()
        monitor.stop()
        monitor.close()
        recorder.close()
    return recorder, wall, cpu


def run_ppk2(seconds: float) -> dict[str, float]:
    """The PPK2 at its full rate, in real time: the simulated PPK2 streams 100 kS/s of 4-byte
    words over a pty (World at speed 1, a 60 %-active period with a pulse every 10 ms), the
    real driver decodes them and `EmonRecorder` writes the JLS trace. `ppk2_dropped` counts
    samples lost anywhere (counter jumps, bytes the pty could not take, shortfall): goal 0.
    `ppk2_cpu_fraction` is this process's CPU (simulator included) per signal second."""
    from drivers.emon.ppk2 import Ppk2
    from protocols.ppk2 import SAMPLE_RATE_HZ
    from virtual_bench.ppk2 import SimPpk2
    from virtual_bench.world import World

    fs = SAMPLE_RATE_HZ
    count = round(seconds * fs)
    world = World()
    folder = Path(tempfile.mkdtemp(prefix="rig-ingest-ppk2-"))
    try:
        with SimPpk2(world) as sim:
            monitor = Ppk2.open(sim.path, voltage_limit_v=3.3, simulated=True)
            # the PPK2 acks nothing; powering on resets the DUT: wait until it is powered
            recorder, wall, cpu = record_simulated(world, monitor, fs, seconds,
                                                   folder / "ppk2.jls", await_power=True)
            lost_bytes = sim.dropped_bytes
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "ppk2_samples": recorder.samples,
        "ppk2_dropped": recorder.dropped + monitor.stats.dropped + lost_bytes // 4
        + max(0, count - recorder.samples),
        "ppk2_edges": recorder.edge_count,
        "ppk2_samples_per_s": recorder.samples / wall,
        "ppk2_cpu_fraction": cpu / seconds,
    }


def run_otii(seconds: float, device_type: str) -> dict[str, float]:
    """The Otii at its full rate, in real time: the simulated Otii server (World at speed 1, a
    60 %-active period with a pulse every 10 ms) serves its recording as JSON over loopback TCP,
    the real driver polls it and `EmonRecorder` writes the JLS trace. `dropped` counts samples
    the recording held that never reached the recorder: goal 0. `cpu_fraction` is this
    process's CPU (server included) per signal second."""
    from drivers.emon.otii import ARC_RATE_HZ, Otii
    from virtual_bench.otii import ACE_RATE_SPAN_HZ, SimOtii
    from virtual_bench.world import World

    fs = ARC_RATE_HZ if device_type == "Arc" else ACE_RATE_SPAN_HZ[-1]
    count = round(seconds * fs)
    world = World()
    folder = Path(tempfile.mkdtemp(prefix="rig-ingest-otii-"))
    prefix = f"otii_{device_type.lower()}"
    try:
        with SimOtii(world, device_type=device_type) as sim:
            monitor = Otii.open(sim.address, voltage_limit_v=3.3, simulated=True)
            recorder, wall, cpu = record_simulated(world, monitor, fs, seconds,
                                                   folder / "otii.jls", await_power=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        f"{prefix}_rate_hz": fs,
        f"{prefix}_samples": recorder.samples,
        f"{prefix}_dropped": recorder.dropped + monitor.stats.dropped
        + max(0, count - recorder.samples),
        f"{prefix}_edges": recorder.edge_count,
        f"{prefix}_samples_per_s": recorder.samples / wall,
        f"{prefix}_cpu_fraction": cpu / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="signal length (>= 60)")
    parser.add_argument("--realtime", action="store_true", help="pace the stream at 2 MS/s")
    parser.add_argument("--ppk2-seconds", type=float, default=10.0,
                        help="seconds of the simulated PPK2 at its full 100 kS/s (0: skip)")
    parser.add_argument("--otii-seconds", type=float, default=10.0,
                        help="seconds of each simulated Otii (Arc 4 kS/s, Ace 50 kS/s; 0: skip)")
    args = parser.parse_args()
    result = run(args.seconds, args.realtime)
    for key in ("samples_per_s", "dropped", "cpu_fraction", "peak_rss_mb_at_10s",
                "peak_rss_mb_at_60s"):
        value = result.pop(key)
        print(f"{key} {value:.0f}" if key in ("samples_per_s", "dropped") else f"{key} {value:.3f}")
    for key, value in result.items():
        print(f"{key} {value:.6g}")
    if args.ppk2_seconds > 0:
        for key, value in run_ppk2(args.ppk2_seconds).items():
            print(f"{key} {value:.6g}")
    if args.otii_seconds > 0:
        for device_type in ("Arc", "Ace"):
            for key, value in run_otii(args.otii_seconds, device_type).items():
                print(f"{key} {value:.6g}")


if __name__ == "__main__":
    main()
