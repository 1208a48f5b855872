"""A NaN in one event of a real run folder (issue 38): before, `rig report` stated it as "nan /s"
and wrote a bare `NaN` into results.json (not JSON), exit 0. Now `rig show`, `rig analyze` and
`rig report` refuse the folder in one line naming the file, the line, the event and the field."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from rig.errors import NonFiniteError
from tests.requires import needs
from tests.rig.test_non_finite import poison_event

from .runs import bench_variant, only_run, run_rig
from .test_analyze_run import FAST

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> Path:
    """One short energy-mode run on the virtual bench."""
    tmp = tmp_path_factory.mktemp("non-finite")
    bench = bench_variant(tmp, **FAST)
    done = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp / "runs"))
    assert done.returncode == 0, done.stderr
    return only_run(tmp / "runs")


def test_a_nan_latency_run_is_refused_by_name(measured: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(measured, tmp_path / measured.name))
    line = poison_event(run, "latency_run", 0, "inferences_per_s", "NaN")
    where = f"{run / 'events.jsonl'} line {line}: latency_run event (index 0): inferences_per_s"
    out = tmp_path / "report"
    for argv in (["report", str(run), "--out", str(out), "--format", "md"],
                 ["show", str(run), "--json"], ["analyze", str(run)]):
        done = run_rig(*argv)
        assert done.returncode == 2, (argv, done.stdout)
        [message] = done.stderr.strip().splitlines()
        assert message.startswith(f"rig: error: {where} is NaN, not a finite number"), argv
    assert not out.exists() or not (out / "results.json").exists()


@needs("matplotlib")
def test_a_report_never_writes_nan_into_results_json(measured: Path, tmp_path: Path,
                                                     monkeypatch) -> None:
    """Even when a number the report states came out NaN on its way (not from the folder):
    refused naming the field, before any file of the report is written."""
    from rig.report import writer

    real = writer.results

    def with_nan(*args, **kwargs):
        data = real(*args, **kwargs)
        data["runs"][0]["show"]["summary"]["inferences_per_s"] = math.nan
        return data

    monkeypatch.setattr(writer, "results", with_nan)
    out = tmp_path / "report"
    with pytest.raises(NonFiniteError, match=r"cannot write results\.json: runs\[0\]\.show\."
                                             r"summary\.inferences_per_s is NaN"):
        writer.write_report([measured], out, formats=("md",))
    assert not (out / "results.json").exists() and not (out / "report.md").exists()


def test_a_report_without_figures_has_the_same_results_json(measured: Path,
                                                             tmp_path: Path) -> None:
    """`rig verify` regenerates a report only to compare its results.json: drawn without
    figures (~0.7 s a system saved), it must hold the same numbers."""
    from rig.report import writer

    drawn = writer.write_report([measured], tmp_path / "drawn", formats=("md",))
    bare = writer.write_report([measured], tmp_path / "bare", formats=("md",), figures=False)
    assert list((tmp_path / "drawn" / "figures").iterdir())  # the drawn one has figures
    assert not list((tmp_path / "bare" / "figures").iterdir())
    a, b = (json.loads(o.files["json"].read_text()) for o in (drawn, bare))
    for x in (a, b):
        x["report"].pop("generated_at")
    assert a == b
