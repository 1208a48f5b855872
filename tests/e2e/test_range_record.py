"""Issue 37: the range each reading was taken in, recorded where the instrument tells it. A
virtual-bench run with an auto-ranging Joulescope and one with a PPK2 record how each window
and idle span spread over the ranges; the budgets take the ranges from that record, say so, and
`rig analyze RUN` counts the ranges again from the trace's range signal, to the same budgets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from drivers.emon.joulescope import RANGE_STREAM_NAMES
from drivers.emon.ppk2 import RANGE_NAMES
from rig.run.events import IdleMeasured, WindowMeasured
from rig.run.store import load_run
from rig.traces.files import read_trace

from .runs import only_run, run_rig, short_bench

pytestmark = pytest.mark.slow

#: bench -> (replacements for a short run, the range names its monitor gives).
BENCHES = {
    "sim-joulescope": ({}, set(RANGE_STREAM_NAMES["js220"])),
    "sim-ppk2": ({"rate": ("sample_rate_hz = 100000", "sample_rate_hz = 10000")},
                 set(RANGE_NAMES)),
}


@pytest.mark.parametrize("base", list(BENCHES))
def test_a_run_records_each_spans_ranges_and_analyze_counts_them_again(
        tmp_path: Path, base: str) -> None:
    replace, names = BENCHES[base]
    bench = short_bench(tmp_path, base, **replace)
    done = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "runs"),
                   "--json", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run = only_run(tmp_path / "runs")
    record = load_run(run)
    spans = [e for e in record.events if isinstance(e, IdleMeasured | WindowMeasured)]
    assert spans and all(e.end_sample > e.start_sample for e in spans)
    for e in spans:  # every sample of every span counted once, in a range the monitor names
        assert sum(r["samples"] for r in e.current_ranges.values()) == \
            e.end_sample - e.start_sample
        assert set(e.current_ranges) <= names
    trace = read_trace(run / "traces" / "emon.jls")
    assert trace.current_range is not None and set(trace.range_names) >= set().union(
        *(e.current_ranges for e in spans))
    manifest = json.loads((run / "manifest.json").read_text())
    budget = manifest["summary"]["uncertainty"]["active_power_w"]
    sources = " ".join(c["source"] for c in budget["components"])
    assert "recorded per sample by the instrument: " in sources
    again = run_rig("analyze", str(run), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    out = json.loads(again.stdout)
    assert out["ok"] is True
    def current_terms(components: list[dict]) -> list[tuple[str, str]]:
        return [(c["name"], c["source"]) for c in components if " current" in c["name"]]

    # The ranges counted again from the trace's range signal: the same terms, the same shares.
    again_terms = current_terms(out["uncertainty"]["active_power_w"]["components"])
    assert again_terms and again_terms == current_terms(budget["components"])
    # `rig verify`'s re-derivation takes the trace as it is: the 4-bit range signal's pad
    # sample (an odd count) is not a cut signal, and every check of the run holds but the
    # method's (this short bench runs 2 timed runs of 1 s, not 5 of 10 s).
    from rig.submission.rederive import asc_checks

    checks = asc_checks(run, None)
    assert next(c for c in checks if c.item == "trace sample count").ok is True
    assert [(c.item, c.detail) for c in checks
            if c.ok is False and not c.item.startswith("method:")] == []
