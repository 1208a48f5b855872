"""The disk preflight's projected trace size against the real trace, per shipped virtual bench at
its shipped speed (issue 25.2).

For each shipped bench that records a trace, `rig measure asc --bench benches/<name>.toml` runs
the shipped file as it is (the PPK2's ampere mode as a variant of sim-ppk2) into a temporary
folder; printed: what the preflight projects from the bench file alone (`asc_trace_bytes`), the
trace file's real size, the error, and both lengths. `tests/e2e/test_trace_size_projection.py`
asserts the 20% per family at `speed = 1` (and the IO manager's at its shipped speed); here the
virtual bench runs `speed` times faster than the host, so the host's own time (command exchanges
over ptys, the monitors' delivery periods) counts `speed` times in the trace, and a loaded host
records longer: these figures are this host's, at its present load. Asserts nothing.
`RIG_BENCH_FAMILIES=sim,sim-otii` runs only those. About 50 s; the emulated UNO's bench
(simavr-io-manager) only with `RIG_BENCH_FAMILIES` naming it (its downloads run at the pace
simavr emulates the UNO, not at the bench's speed: ~100 s).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rig.bench.config import load_bench
from rig.run import measure as runner
from rig.traces.files import read_trace

REPO = Path(__file__).resolve().parents[1]
RIG = str(Path(sys.executable).parent / "rig")
#: name -> (bench file, text replacements for a variant).
FAMILIES: dict[str, tuple[str, dict[str, str]]] = {
    "sim": ("sim", {}),
    "sim-io-manager": ("sim-io-manager", {}),
    "sim-ppk2": ("sim-ppk2", {}),
    "sim-ppk2-ampere": ("sim-ppk2", {'driver = "ppk2-sim"':
                                     'driver = "ppk2-sim"\nppk2_mode = "ampere"'}),
    "sim-otii": ("sim-otii", {}),
    "sim-n6705": ("sim-n6705", {}),
    "sim-joulescope": ("sim-joulescope", {}),
    "simavr-io-manager": ("simavr-io-manager", {}),
}
DEFAULT = [name for name in FAMILIES if name != "simavr-io-manager"]


def one(name: str, folder: Path) -> str:
    """Run family `name` in `folder`; its line of figures."""
    base, replace = FAMILIES[name]
    text = (REPO / "benches" / f"{base}.toml").read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    path = folder / f"{name}.toml"
    # Relative paths in a bench file (datasets, firmware) are the repository's.
    path.write_text(text.replace('"../', f'"{REPO}/'))
    bench = load_bench(path)
    projected = runner.asc_trace_bytes(bench)
    estimated_s = runner.asc_trace_seconds(bench)
    start = time.monotonic()
    done = subprocess.run([RIG, "measure", "asc", "--bench", str(path), "--runs-dir",
                           str(folder / "runs"), "--json"], capture_output=True, text=True,
                          timeout=1800, cwd=REPO)
    took = time.monotonic() - start
    if done.returncode != 0:
        return f"{name}: the run failed ({done.returncode}): {done.stderr.strip()[-300:]}"
    run = Path(json.loads(done.stdout)["run"])
    trace_path = run / "traces" / "emon.jls"
    trace = read_trace(trace_path)
    real = trace_path.stat().st_size
    return (f"{name}: speed {bench.sim.speed:g}, projected {projected} B, real {real} B: "
            f"{projected / real - 1:+.1%} (length {estimated_s:.1f} s estimated, "
            f"{trace.duration_s:.1f} s recorded; run {took:.1f} s of host time)")


def main() -> None:
    wanted = os.environ.get("RIG_BENCH_FAMILIES")
    names = [n.strip() for n in wanted.split(",")] if wanted else DEFAULT
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
    print(f"host load (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for name in names:
        with tempfile.TemporaryDirectory(dir=os.environ.get("RIG_BENCH_TMP")) as tmp:
            print(one(name, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
