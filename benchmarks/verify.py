"""`rig verify` speed: re-deriving a bundle of three systems against pyjls reading the same traces.

Makes three ASC runs on the virtual bench (benches sim, sim-otii and sim-ppk2: an LPM01A at
1 kHz, an Otii at 4 kHz, a PPK2 at 100 kHz), reports and bundles them, then prints:

- `trace_samples`: the samples of the three traces together;
- `pyjls_read_s`, `pyjls_rate`: pyjls alone reading every sample of the current, voltage and
  GPIO signals (what any re-derivation has to read at least);
- `rederive_s`, `rederive_rate`: the re-derivation checks of the three runs
  (`rig.submission.rederive`, what `rig verify` runs per run);
- `verify_s`: the whole `rig verify` in process (extraction, digests, ledger, re-derivation,
  the report made again);
- `ratio` = rederive_rate / pyjls_rate (goal >= 0.5).

Best of a few repeats; a busy host makes the figures noisy, run it again.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPEATS = 3
RIG = [str(Path(sys.executable).parent / "rig")]
BENCHES = ("sim", "sim-otii", "sim-ppk2")


def sh(*args: str) -> None:
    done = subprocess.run([*RIG, *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        sys.exit(f"rig {' '.join(args)} failed: {done.stderr.strip()}")


def pyjls_read(paths: list[Path]) -> int:
    """Read every sample of every signal of each trace with pyjls alone; the sample count."""
    from pyjls import Reader

    total = 0
    for path in paths:
        with Reader(str(path)) as r:
            for signal in r.signals.values():
                if signal.signal_type != 0 or signal.length == 0:  # FSR signals only
                    continue
                data = r.fsr(signal.signal_id, 0, signal.length)
                total += int(np.asarray(data).size) if signal.name == "current" else 0
    return total


def main() -> None:
    from rig.submission import rederive
    from rig.submission.verify import verify_bundle

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

        best_read, samples = float("inf"), 0
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            samples = pyjls_read(traces)
            best_read = min(best_read, time.perf_counter() - t0)
        best_rederive = float("inf")
        for _ in range(REPEATS):
            t0 = time.perf_counter()
            for run in runs:
                rederive.asc_checks(run, None)
            best_rederive = min(best_rederive, time.perf_counter() - t0)
        t0 = time.perf_counter()
        result = verify_bundle(root / "b.zip", key=root / "lab.pub")
        verify_s = time.perf_counter() - t0
        if not result.ok:
            sys.exit(f"the honest bundle failed: {[c.item for c in result.failed]}")
    print(f"trace_samples {samples}")
    print(f"pyjls_read_s {best_read:.3f}")
    print(f"pyjls_rate {samples / best_read:.4g} samples/s")
    print(f"rederive_s {best_rederive:.3f}")
    print(f"rederive_rate {samples / best_rederive:.4g} samples/s")
    print(f"verify_s {verify_s:.3f}")
    print(f"ratio {best_read / best_rederive:.3f} (goal >= 0.5)")


if __name__ == "__main__":
    main()
