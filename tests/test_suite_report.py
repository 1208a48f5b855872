"""tests/suite_report.py: the closing summary of a suite run in several pytest invocations."""

from __future__ import annotations

from tests.suite_report import summarize


def rec(node: str, when: str, outcome: str, duration: float) -> dict:
    return {"nodeid": node, "when": when, "outcome": outcome, "duration": duration}


def test_counts_each_test_once_by_its_worst_phase_and_lists_the_slowest() -> None:
    lines = [
        rec("a", "setup", "passed", 0.1), rec("a", "call", "passed", 3.0),
        rec("a", "teardown", "passed", 0.0),
        rec("b", "setup", "passed", 0.2), rec("b", "call", "passed", 1.0),
        rec("b", "teardown", "failed", 0.5),  # an error in teardown fails the test
        rec("c", "setup", "skipped", 0.0),
        rec("d", "setup", "failed", 7.0),  # an error in setup: no call phase at all
    ]
    text = summarize(lines, slowest=2).splitlines()
    assert text[0] == "2 slowest test phases (all invocations):"
    assert text[1].split() == ["7.00s", "setup", "d"] and text[2].split() == ["3.00s", "call", "a"]
    assert text[-1] == "1 passed, 2 failed, 1 skipped"


def test_cpu_is_summed_per_test_file_largest_first() -> None:
    lines = [
        {**rec("tests/x.py::a", "setup", "passed", 0.1), "cpu": 2.0},
        {**rec("tests/x.py::a", "call", "passed", 1.0), "cpu": 3.5},
        {**rec("tests/y.py::b", "call", "passed", 9.0), "cpu": 4.0},
        {**rec("tests/z.py::c", "call", "passed", 1.0), "cpu": 0.5},
        rec("tests/z.py::d", "call", "passed", 1.0),  # from a run before CPU was recorded
    ]
    text = summarize(lines, slowest=2).splitlines()
    at = text.index("CPU by test file, 10 s in all (2 most):")
    assert [line.split() for line in text[at + 1 : at + 3]] == [["5.5s", "tests/x.py"],
                                                               ["4.0s", "tests/y.py"]]
    assert text[-1] == "4 passed, 0 failed, 0 skipped"
