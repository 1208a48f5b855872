"""`rig verify` speed: re-deriving a bundle of three systems against pyjls reading the same traces.

Makes three ASC runs on the virtual bench (benches sim, sim-otii and sim-ppk2: an LPM01A at
1 kHz, an Otii at 4 kHz, a PPK2 at 100 kHz), reports and bundles them, then prints:

- `trace_samples`: the samples of the three traces together;
- `pyjls_read_s`, `pyjls_rate`: pyjls alone reading the signals the re-derivation reads
  (current, voltage, the GPIO input and the current range, where a trace holds them): one
  reader per trace, each signal whole in one `fsr` call, nothing converted;
- `rederive_s`, `rederive_rate`: the re-derivation of the three runs as `rig verify` runs it
  (`rig.submission.verify.rederive_runs`: per run, `rig.submission.rederive.asc_checks`, the
  run folder read, the trace read once, every figure, window, idle span and range share
  integrated again; the runs `workers` at a time on threads, one per CPU where memory allows);
- `ratio` = rederive_rate / pyjls_rate (goal >= 0.5), on wall time, and the same on CPU time
  (`cpu_ratio`: the process's CPU seconds, helper threads included), which a busy host
  disturbs less;
- `one_at_a_time_s`, `one_at_a_time_ratio`: the same three runs one after the other on one
  thread (what a one-CPU machine gets);
- `verify_s`: the whole `rig verify` in process (extraction, digests, ledger, re-derivation,
  the report made again);
- `host`: the CPU time other processes (and the hypervisor, as steal) took while the rounds
  were timed, against the CPU time there was (Linux `/proc/stat` less this process's own; the
  load average elsewhere, which counts this benchmark's own runs too); on a busy host the
  figures are noisy: run it again when it is quiet.

Each figure is the best of `REPEATS` rounds, the reads taken in turn so that both meet the same
host. About a minute.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# As `rig verify` runs (rig.cli.main sets it before numpy loads): no OpenBLAS thread pool.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

#: Rounds: each read takes tens of ms, which one time slice lost to another process
#: stretches by a third: the best of 3 rounds varied more from run to run than the best of 15.
#: And a busy host's quieter spells come and go over seconds: 100 rounds (~8 s) meet more
#: of them than 40 did (making the runs takes most of the script's ~40 s).
REPEATS = 100
RIG = [str(Path(sys.executable).parent / "rig")]
BENCHES = ("sim", "sim-otii", "sim-ppk2")
#: The trace signals the re-derivation reads (`rig.traces.files.read_trace`): the GPIO input
#: under either of its names.
SIGNALS = ("current", "voltage", "gpi0", "gpio", "current_range")


def sh(*args: str) -> None:
    done = subprocess.run([*RIG, *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"rig {' '.join(args)} failed: {done.stderr.strip()}")


def pyjls_read(paths: list[Path]) -> int:
    """Read the re-derivation's signals of each trace with pyjls alone; the sample count."""
    from pyjls import Reader, SignalType

    total = 0
    for path in paths:
        with Reader(str(path)) as r:
            for signal in r.signals.values():
                if (signal.signal_type != SignalType.FSR or signal.length == 0
                        or signal.name not in SIGNALS):
                    continue
                data = r.fsr(signal.signal_id, 0, signal.length)
                total += len(data) if signal.name == "current" else 0
    return total


def best_of(runs: list[Callable[[], object]]) -> list[tuple[float, float]]:
    """(best wall seconds, best CPU seconds) of each callable, `REPEATS` rounds taking them in
    turn (a host whose load changes meets them alike)."""
    best = [(float("inf"), float("inf"))] * len(runs)
    for _ in range(REPEATS):
        for k, run in enumerate(runs):
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            best[k] = (min(best[k][0], wall), min(best[k][1], cpu))
    return best


#: Others' share of the CPU time above which the figures are called noisy: one time slice lost
#: in a 20-30 ms read already moves it by a few per cent.
BUSY_SHARE = 0.05


def cpu_seconds() -> tuple[float, float, float] | None:
    """(all CPUs' busy seconds, of which steal, this process's CPU seconds) now; None where
    /proc/stat is not there to read."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    # user nice system idle iowait irq softirq steal (guest time is inside user already)
    ticks = [int(v) for v in fields[1:9]]
    hz = os.sysconf("SC_CLK_TCK")
    busy = sum(ticks[:3]) + sum(ticks[5:8])
    return busy / hz, ticks[7] / hz, time.process_time()


def host_line(before: tuple[float, float, float] | None,
              after: tuple[float, float, float] | None, wall: float) -> str:
    """What the rest of the host took while the rounds were timed, and whether that makes the
    figures noisy."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cpus = cpus or 1
    if before is None or after is None:
        # The load average counts this benchmark's own runs just made as well.
        load = os.getloadavg()[0]
        busy = load > max(1.0, 0.75 * cpus)
        return (f"host load average {load:.1f} on {cpus} CPUs (this benchmark's own work "
                "included): " + ("BUSY: the figures are noisy; run it again on a quiet host"
                                 if busy else "quiet"))
    steal = after[1] - before[1]
    # A stolen tick can be charged to this process's threads as well: steal counted apart.
    others = max(0.0, (after[0] - before[0]) - steal - (after[2] - before[2]))
    share = (others + steal) / (wall * cpus)
    return (f"host: other processes took {others:.2f} and the hypervisor (steal) {steal:.2f} "
            f"of the {wall * cpus:.2f} CPU seconds while the rounds were timed ({share:.0%}): "
            + (f"BUSY (above {BUSY_SHARE:.0%}): the figures are noisy, the ratio most of all; "
               "run it again on a quiet host" if share > BUSY_SHARE else "quiet"))


def main() -> None:
    from rig.submission import rederive
    from rig.submission.verify import rederive_runs, rederive_workers, verify_bundle

    with tempfile.TemporaryDirectory(prefix="rig-bench-verify-") as tmp:
        root = Path(tmp)
        for bench in BENCHES:
            sh("measure", "asc", "--device", bench, "--runs-dir", str(root / "runs"))
        runs = sorted(p for p in (root / "runs").iterdir() if p.is_dir())
        sh("report", *map(str, runs), "--out", str(root / "report"), "--format", "md")
        sh("keys", "new", "--out", str(root / "lab"))
        sh("bundle", *map(str, runs), "--report", str(root / "report"), "--key",
           str(root / "lab.key"), "--out", str(root / "b.zip"))
        traces = [r / "traces" / "emon.jls" for r in runs]
        # The runs just written out first: the kernel writing them back meanwhile took CPU
        # time from whichever read it met.
        os.sync()
        samples = pyjls_read(traces)  # warm: both then read from the page cache alike
        for run in runs:
            rederive.asc_checks(run, None)

        rederive_runs(runs, {})
        before, timed = cpu_seconds(), time.perf_counter()
        (read_s, read_cpu), (rederive_s, rederive_cpu), (one_s, _) = best_of([
            lambda: pyjls_read(traces),
            lambda: rederive_runs(runs, {}),
            lambda: [rederive.asc_checks(run, None) for run in runs],
        ])
        after, timed = cpu_seconds(), time.perf_counter() - timed
        workers = rederive_workers(runs)
        t0 = time.perf_counter()
        result = verify_bundle(root / "b.zip", key=root / "lab.pub")
        verify_s = time.perf_counter() - t0
        if not result.ok:
            sys.exit(f"the honest bundle failed: {[c.item for c in result.failed]}")
    print(f"trace_samples {samples}")
    print(f"pyjls_read_s {read_s:.4f} (cpu {read_cpu:.4f})")
    print(f"pyjls_rate {samples / read_s:.4g} samples/s")
    print(f"rederive_s {rederive_s:.4f} (cpu {rederive_cpu:.4f})")
    print(f"rederive_rate {samples / rederive_s:.4g} samples/s")
    print(f"verify_s {verify_s:.3f}")
    print(f"workers {workers}")
    print(f"ratio {read_s / rederive_s:.3f} (goal >= 0.5)")
    print(f"cpu_ratio {read_cpu / rederive_cpu:.3f}")
    print(f"one_at_a_time_s {one_s:.4f}")
    print(f"one_at_a_time_ratio {read_s / one_s:.3f}")
    print(host_line(before, after, timed))


if __name__ == "__main__":
    main()
