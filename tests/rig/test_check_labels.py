"""How a summary's labels read: checks that do not apply (ok None), the execution time's
source, and simulated timing, in the console table, the report's check rows and `rig measure`'s
title."""

from __future__ import annotations

import io

from rich.console import Console

from rig.run.asc import HDK_TIMING, SIMULATED_XYLO_TIMING
from rig.run.console import ConsoleView, summary_table, timing_label
from rig.run.events import RunStarted
from rig.run.summary import asc_figure_rows

SUMMARY = {
    "inferences_per_s": 1.0, "execution_time_mean_s": 1.0, "execution_time_stderr_s": 0.0,
    "execution_time_source": "test_set", "execution_time_samples": 4,
    "timing": SIMULATED_XYLO_TIMING,
    "checks": [
        {"name": "latency replicable", "ok": True, "detail": "fine"},
        {"name": "timer agreement", "ok": None, "detail": "not applicable: one clock"},
        {"name": "run length", "ok": False, "detail": "short"},
    ],
}


def text_of(renderable) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def test_console_marks_not_applicable_checks_neither_pass_nor_fail() -> None:
    lines = text_of(summary_table(SUMMARY, title="t")).splitlines()
    (agreement,) = [x for x in lines if "timer agreement" in x]
    assert "n/a not applicable: one clock" in agreement
    assert "FAIL" not in agreement and "pass" not in agreement
    (length,) = [x for x in lines if "run length" in x]
    assert "FAIL short" in length


def test_console_rows_name_the_source_and_mark_simulated_time() -> None:
    text = text_of(summary_table(SUMMARY, title="t"))
    (execution,) = [x for x in text.splitlines() if "Execution time per inference" in x]
    assert "(mean) SIMULATED" in execution
    assert "(test set, 4 samples)" in execution
    assert "Inferences per second (median of runs) SIMULATED" in text
    (timing,) = [x for x in text.splitlines() if "Timing" in x]
    assert SIMULATED_XYLO_TIMING in timing
    assert timing_label(SUMMARY) == " (SIMULATED timing)"
    assert timing_label({"timing": HDK_TIMING}) == ""


def test_run_title_labels_xylosim_timing() -> None:
    out = io.StringIO()
    view = ConsoleView(Console(file=out, width=200))
    view(RunStarted(procedure="asc", device="xylo",
                    manifest={"bench": {"dut": {"kind": "xylo", "hdk": False}}}))
    view.close()
    assert "ASC on xylo (SIMULATED timing: XyloSim)" in out.getvalue()


def test_figures_say_where_the_execution_time_came_from() -> None:
    rows = dict(asc_figure_rows(SUMMARY))
    assert rows["Execution time per inference (mean)"].endswith(
        "(test set, 4 samples)")
    assert rows["Timing"] == SIMULATED_XYLO_TIMING
    old = {k: v for k, v in SUMMARY.items()
           if k not in ("execution_time_source", "execution_time_samples")}
    assert dict(asc_figure_rows(old))[
        "Execution time per inference (mean)"].endswith("(timed runs)")
