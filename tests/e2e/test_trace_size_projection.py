"""Issue 25 item 2: the disk preflight's projected trace size, per shipped bench family.

A short real virtual-bench ASC run per family. The projection the preflight makes before the
run (`asc_trace_bytes`: the run's length estimated from the bench file, priced with the monitor
kind's bytes per sample) must be within 20% of the real trace file; and, for the run's real
length, the bytes-per-sample part alone must be a slight over-estimate.

Each run is cut to 2 timed runs of 1 s and one test sample per class, at `[sim] speed = 1`:
simulated time then runs as fast as the host's, so the host's own work (Python, ptys, which no
bench figure gives and a loaded host stretches) adds to the trace only what it takes, not
20-50 times that. The families' runs take 5-10 s of host time each, the IO manager's ~30 s
(serial-worthy).
"""

from __future__ import annotations

import re

import pytest

from rig.bench.config import load_bench
from rig.run import measure as runner
from rig.traces.files import read_trace
from rig.traces.space import projected_trace_bytes

from .runs import REPO, bench_variant, only_run, run_rig

pytestmark = pytest.mark.slow

SHORT = {"runs": ("runs = 5", "runs = 2"), "run_s": ("min_run_s = 10.0", "min_run_s = 1.0")}
ONE_PER_CLASS = {"spc": ("samples_per_class = 2", "samples_per_class = 1")}
#: 10 kHz (100 kHz / 10 averaged on the host): the full 100 kHz only makes a bigger file.
PPK2_10K = {"rate": ("sample_rate_hz = 100000", "sample_rate_hz = 10000")}
#: family -> (bench, the trace stores a voltage signal, replacements for a short run).
FAMILIES = {
    "sim (LPM01A)": ("sim", False,
                     {"spc": ("samples_per_class = 10", "samples_per_class = 1")}),
    # Its timed runs keep their 10 s: its five hex downloads (615 `db` commands each over the
    # ptys) take host time, ~1 s each, which would otherwise be most of a 1 s-run trace.
    "sim-io-manager (LPM01A, hex downloads)": ("sim-io-manager", False, {
        **ONE_PER_CLASS, "run_s": ("min_run_s = 10.0", "min_run_s = 10.0")}),
    "sim-ppk2 (source)": ("sim-ppk2", False, {**ONE_PER_CLASS, **PPK2_10K}),
    "sim-ppk2 (ampere)": ("sim-ppk2", False, {
        **ONE_PER_CLASS, **PPK2_10K,
        "mode": ('driver = "ppk2-sim"', 'driver = "ppk2-sim"\nppk2_mode = "ampere"')}),
    "sim-otii": ("sim-otii", True, ONE_PER_CLASS),
    "sim-n6705 (Keysight, aux)": ("sim-n6705", False, ONE_PER_CLASS),
    "sim-joulescope": ("sim-joulescope", True, ONE_PER_CLASS),
}


def speed_one(base: str) -> tuple[str, str]:
    """The replacement that sets the bench's `[sim] speed` to 1."""
    line = re.search(r"^speed = .*$", (REPO / "benches" / f"{base}.toml").read_text(), re.M)
    return line.group(0), "speed = 1"


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_preflight_projection_is_within_20_percent_of_a_real_run(tmp_path, family) -> None:
    base, voltage_measured, replace = FAMILIES[family]
    path = bench_variant(tmp_path, base, base=base, speed=speed_one(base),
                         **{**SHORT, **replace})
    bench = load_bench(path)
    assert runner.measures_voltage(bench) is voltage_measured
    # What the preflight projects from the bench alone, before anything is opened.
    preflight = runner.asc_trace_bytes(bench)
    done = run_rig("measure", "asc", "--bench", str(path), "--runs-dir", str(tmp_path / "runs"),
                   "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    trace_path = only_run(tmp_path / "runs") / "traces" / "emon.jls"
    trace = read_trace(trace_path)
    assert ("voltage" in trace.meta["samples_by_signal"]) is voltage_measured
    real = trace_path.stat().st_size
    for_real_length = projected_trace_bytes(trace.duration_s, trace.sample_rate,
                                            voltage_measured=voltage_measured)
    print(f"{family}: {trace.duration_s:.3f} s real, {runner.asc_trace_seconds(bench):.3f} s "
          f"estimated; real {real} B, preflight {preflight} B ({preflight / real - 1:+.1%}); "
          f"for the real length {for_real_length} B ({for_real_length / real - 1:+.1%})")
    assert abs(preflight - real) <= 0.2 * real
    assert real <= for_real_length <= 1.2 * real  # bytes per sample: over, never under


def test_a_bench_without_a_monitor_projects_no_trace() -> None:
    bench = load_bench(REPO / "benches" / "qemu-m4.toml")
    assert not runner.records_trace(bench)
    assert runner.asc_trace_bytes(bench) == 0
