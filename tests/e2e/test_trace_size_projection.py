"""Issue 25 item 2: the disk preflight's projected trace size, per shipped bench family.

A short real virtual-bench ASC run per family; its trace's real size is compared with the
projection for that run's length and sample rate, priced with the monitor kind's bytes per
sample (a voltage signal only where the monitor measures one) and the file's fixed part.
Also printed: the preflight's whole projection (`asc_trace_bytes`: its duration estimate too)
against the real size, which on the virtual bench depends on the host's load (see README).
"""

from __future__ import annotations

import pytest

from rig.bench.config import load_bench
from rig.run import measure as runner
from rig.traces.files import read_trace
from rig.traces.space import projected_trace_bytes

from .runs import REPO, bench_variant, only_run, run_rig

pytestmark = pytest.mark.slow

SHORT = {"runs": ("runs = 5", "runs = 2"), "run_s": ("min_run_s = 10.0", "min_run_s = 1.0")}
#: family -> (bench, the trace stores a voltage signal, replacements for a short run).
FAMILIES = {
    "sim (LPM01A)": ("sim", False,
                     {"spc": ("samples_per_class = 10", "samples_per_class = 1")}),
    "sim-io-manager (LPM01A)": ("sim-io-manager", False,
                                {"spc": ("samples_per_class = 2", "samples_per_class = 1")}),
    # 10 kHz (100 kHz / 10 averaged on the host): the full 100 kHz only makes a bigger file.
    "sim-ppk2": ("sim-ppk2", False,
                 {"spc": ("samples_per_class = 2", "samples_per_class = 1"),
                  "rate": ("sample_rate_hz = 100000", "sample_rate_hz = 10000")}),
    "sim-otii": ("sim-otii", True,
                 {"spc": ("samples_per_class = 2", "samples_per_class = 1")}),
    "sim-n6705 (aux)": ("sim-n6705", False,
                        {"spc": ("samples_per_class = 2", "samples_per_class = 1")}),
    "sim-joulescope": ("sim-joulescope", True,
                       {"spc": ("samples_per_class = 2", "samples_per_class = 1")}),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_projected_trace_size_is_within_20_percent_of_a_real_run(tmp_path, family) -> None:
    base, voltage_measured, replace = FAMILIES[family]
    path = bench_variant(tmp_path, base, base=base, **SHORT, **replace)
    bench = load_bench(path)
    assert runner.measures_voltage(bench) is voltage_measured
    done = run_rig("measure", "asc", "--bench", str(path), "--runs-dir", str(tmp_path / "runs"),
                   "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    trace_path = only_run(tmp_path / "runs") / "traces" / "emon.jls"
    trace = read_trace(trace_path)
    assert ("voltage" in trace.meta["samples_by_signal"]) is voltage_measured
    real = trace_path.stat().st_size
    projected = projected_trace_bytes(trace.duration_s, trace.sample_rate,
                                      voltage_measured=runner.measures_voltage(bench))
    preflight = runner.asc_trace_bytes(bench)
    print(f"{family}: {len(trace)} samples, real {real} B, projected {projected} B "
          f"({projected / real - 1:+.1%}); preflight {preflight} B ({preflight / real - 1:+.0%})")
    assert abs(projected - real) <= 0.2 * real
    assert projected >= real  # the disk check over-estimates, never under


def test_a_bench_without_a_monitor_projects_no_trace() -> None:
    bench = load_bench(REPO / "benches" / "qemu-m4.toml")
    assert not runner.records_trace(bench)
    assert runner.asc_trace_bytes(bench) == 0
