"""The report's paragraph on several systems: which of their differences are distinguishable
(rig/report/content.py `_differences`, the same comparison as `rig compare`)."""

from __future__ import annotations

from pathlib import Path

from rig.report.content import _differences
from rig.report.document import Heading, Para, Table
from rig.report.runs import ASC, ReportRun, System
from rig.traces.analysis.uncertainty import combine, rectangular, type_a, unknown


def _system(sid: str, power: float, *, published: bool = True) -> System:
    terms = [type_a("active power: repeatability", [power, power * 1.001, power * 0.999],
                    source="windows"),
             rectangular("active power: gain", 0.02 * power, source="spec", group="gain")]
    if not published:
        terms.append(unknown("active power: supply voltage", source="not published"))
    budget = combine("active power", power, "W", terms)
    show = {"procedure": "asc", "summary": {"active_power_w": power,
                                            "uncertainty": {"active_power_w": budget.to_json()}}}
    manifest = {"procedure": "asc", "instruments": {"emon": {"driver": "otii", "serial": "S1"}}}
    run = ReportRun(Path(f"/runs/{sid}"), ASC, manifest, show, None)
    return System(sid, ASC, f"DUT {sid}", runs=[run])


def test_two_systems_get_a_table_of_verdicts() -> None:
    """One Otii (the same serial): the gain cancels, 0.02·0.5 mW/√3 ≈ 6 µW, so 0.5 mW differs."""
    blocks = _differences([_system("a", 3.6e-3), _system("b", 4.1e-3)])
    heading, para, table = blocks
    assert isinstance(heading, Heading) and heading.anchor == "differences"
    assert isinstance(para, Para) and "**differs**" in para.text
    assert isinstance(table, Table)
    (row,) = table.rows
    assert row[0] == "2 − 1" and row[1] == "active power" and row[-1] == "differs"


def test_incomplete_budgets_are_never_said_to_differ() -> None:
    blocks = _differences([_system("a", 3.6e-3, published=False),
                           _system("b", 4.1e-3, published=False)])
    (row,) = blocks[2].rows
    assert row[-1].startswith("undecided") and "lower bound" not in row[-1]
    assert "**undecided**" in blocks[1].text


def test_one_system_has_no_such_paragraph() -> None:
    assert _differences([_system("a", 3.6e-3)]) == []
