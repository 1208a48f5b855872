"""Every figure is shown with its expanded uncertainty, one wording everywhere
(`with_uncertainty`): "figure ± U (k=…)", an incomplete budget as "± ≥U (k=…, incomplete)" (its U
is a lower bound), one with no known term as "± U unknown (incomplete)"; the console summary
(`rig measure`, `rig show`) uses it for every figure that has a budget, and says under the table
which terms are unknown."""

from __future__ import annotations

import io

from rich.console import Console

from rig.run.console import summary_table
from rig.run.summary import asc_figure_rows, figures_note
from rig.traces.analysis.uncertainty import (
    combine,
    incomplete_note,
    rectangular,
    type_a,
    unknown,
    unknown_terms,
    with_uncertainty,
)
from rig.units import si_alongside


def budget(value: float, u: float, *, k: float = 2.0, missing: tuple[str, ...] = (),
           figure: str = "energy per inference") -> dict:
    return {"figure": figure, "value": value, "unit": "J", "U": u, "k": k,
            "complete": not missing, "unknown": [f"{figure}: {m}" for m in missing],
            "lower_bound": bool(missing)}


def test_u_reads_in_the_figures_prefix_with_two_significant_digits() -> None:
    assert si_alongside(1.0392e-6, 4.5e-5, "J") == "1.0 µJ"
    assert si_alongside(1.1547e-6, 0.0125, "s") == "0.0012 ms"
    assert si_alongside(0.0128, 80.0, "/s") == "0.013 /s"
    assert si_alongside(1234.0, 45.0, "W") == "1234 W"  # never an exponent
    assert si_alongside(0.0, 4.5e-5, "J") == "0 µJ"


def test_the_four_forms() -> None:
    assert with_uncertainty(4.5e-5, "J", budget(4.5e-5, 1.04e-6)) == "45.00 µJ ± 1.0 µJ (k=2)"
    assert with_uncertainty(4.5e-5, "J", budget(4.5e-5, 1.04e-6, k=2.776)) == \
        "45.00 µJ ± 1.0 µJ (k=2.78)"
    assert with_uncertainty(4.5e-5, "J", budget(4.5e-5, 1.04e-6, missing=("clock",))) == \
        "45.00 µJ ± ≥1.0 µJ (k=2, incomplete)"
    assert with_uncertainty(4.5e-5, "J", budget(4.5e-5, 0.0, missing=("clock",))) == \
        "45.00 µJ ± U unknown (incomplete)"
    assert with_uncertainty(4.5e-5, "J", None) == "45.00 µJ"
    assert with_uncertainty(None, "J", budget(4.5e-5, 1e-6)) == "—"


def test_a_budget_object_reads_as_its_json() -> None:
    b = combine("idle power", 1.2e-3, "W", [
        type_a("idle power: repeatability", [1.19e-3, 1.21e-3, 1.2e-3], source="spans"),
        rectangular("idle power: gain", 2.4e-5, source="manual"),
        unknown("idle power: supply voltage", source="not published")])
    assert with_uncertainty(1.2e-3, "W", b) == with_uncertainty(1.2e-3, "W", b.to_json())
    assert with_uncertainty(1.2e-3, "W", b).endswith("(k=2, incomplete)")
    assert unknown_terms(b) == ["supply voltage"]


def test_the_note_names_each_unknown_term_once() -> None:
    assert incomplete_note([budget(1, 0.1), None]) is None
    note = incomplete_note([
        budget(1, 0.1, missing=("supply voltage", "lpm01a sample clock")),
        {**budget(1, 0.1, figure="dynamic energy per inference"),
         "complete": False,
         "unknown": ["active power: supply voltage (x execution time)"]},
    ])
    assert note == ("± ≥U (incomplete): U from the known terms only, a lower bound; unknown: "
                    "supply voltage, lpm01a sample clock")


SUMMARY = {
    "idle_power_w": 1.2e-3,
    "energy_per_inference_j": 4.5e-5,
    "execution_time_mean_s": 0.0125, "execution_time_stderr_s": 0.0,
    "execution_time_source": "test_set", "execution_time_samples": 40,
    "uncertainty": {
        "idle_power_w": {**budget(1.2e-3, 2.77e-5, figure="idle power"), "unit": "W"},
        "energy_per_inference_j": budget(4.5e-5, 1.04e-6, missing=("supply voltage",)),
        "execution_time_mean_s": {**budget(0.0125, 1.16e-6, figure="execution time",
                                           missing=("DUT timer clock",)), "unit": "s"},
    },
}


def test_the_console_summary_shows_u_and_the_unknown_terms() -> None:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(summary_table(SUMMARY, title="Summary"))
    text = console.export_text()
    rows = {label.strip(): value.strip() for label, value in
            (line.split("│")[1:3] for line in text.splitlines() if "│" in line)}
    assert rows["Idle power"] == "1.200 mW ± 0.028 mW (k=2)"
    assert rows["Energy per inference (median of windows)"] == \
        "45.00 µJ ± ≥1.0 µJ (k=2, incomplete)"
    assert rows["Execution time per inference (mean)"] == \
        "12.50 ms ± ≥0.0012 ms (k=2, incomplete) (test set, 40 samples)"
    assert figures_note(SUMMARY) in text
    assert "unknown: DUT timer clock, supply voltage" in text
    assert dict(asc_figure_rows(SUMMARY))["Idle power"] == rows["Idle power"]


def test_a_summary_from_before_budgets_reads_as_it_did() -> None:
    old = {k: v for k, v in SUMMARY.items() if k != "uncertainty"}
    rows = dict(asc_figure_rows(old))
    assert rows["Idle power"] == "1.200 mW"
    assert rows["Execution time per inference (mean)"] == \
        "12.50 ms, standard error 0 s (test set, 40 samples)"
    assert figures_note(old) is None


def test_the_appendix_says_why_a_term_is_unknown() -> None:
    """The appendix's "Known" column: a Type A term with one value is "not evaluated" (it is
    never published), a Type B term without a declared accuracy "not published"."""
    from rig.report.content import _budget_blocks
    from rig.report.document import Table

    b = combine("idle power", 1e-3, "W", [
        type_a("idle power: repeatability", [1e-3], source="the 1 idle span"),
        rectangular("idle power: gain", 1e-5, source="spec"),
        unknown("idle power: supply voltage", source="not published: the supply")]).to_json()
    table = _budget_blocks(b, "Idle power")[0]
    assert isinstance(table, Table) and table.header[-1] == "Known"
    assert [row[-1] for row in table.rows] == ["**no**: not evaluated", "yes",
                                               "**no**: not published"]
    assert "Published" not in table.header
