"""One closing report for a suite run in several pytest invocations (`make test`: the parallel
part, then the serial one): the 15 slowest test phases, the 15 test files that used the most CPU,
and the outcome counts over all of them.

Each invocation appends its reports to the file named by ``RIG_TEST_REPORT`` (tests/conftest.py
writes them, one JSON object a line); ``python tests/suite_report.py FILE`` prints the summary.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

SLOWEST = 15


def summarize(lines: list[dict], slowest: int = SLOWEST) -> str:
    """The slowest `slowest` phases, then ``N passed, N failed, N skipped`` over every test."""
    outcome: dict[str, str] = {}
    for rec in lines:
        node, result = rec["nodeid"], rec["outcome"]
        if result == "failed":
            outcome[node] = "failed"
        elif result == "skipped" and outcome.get(node) != "failed":
            outcome[node] = "skipped"
        elif rec["when"] == "call" and result == "passed" and node not in outcome:
            outcome[node] = "passed"
    counts = Counter(outcome.values())
    top = sorted(lines, key=lambda r: r["duration"], reverse=True)[:slowest]
    rows = [f"{r['duration']:8.2f}s {r['when']:<8} {r['nodeid']}" for r in top]
    return "\n".join([f"{len(top)} slowest test phases (all invocations):", *rows,
                      *_cpu_by_file(lines, slowest),
                      f"{counts['passed']} passed, {counts['failed']} failed, "
                      f"{counts['skipped']} skipped"])


def _cpu_by_file(lines: list[dict], slowest: int) -> list[str]:
    """The test files that used the most CPU (their processes and ended children), with the
    total: on a saturated machine this, more than wall time, is what the suite's length is."""
    cpu: Counter[str] = Counter()
    for rec in lines:
        if rec.get("cpu") is not None:
            cpu[rec["nodeid"].split("::")[0]] += rec["cpu"]
    if not cpu:
        return []
    rows = [f"{s:8.1f}s {name}" for name, s in cpu.most_common(slowest)]
    return [f"CPU by test file, {sum(cpu.values()):.0f} s in all ({slowest} most):", *rows]


def main(argv: list[str]) -> int:
    path = Path(argv[1])
    if not path.is_file():
        print(f"no test reports in {path}: did pytest run?", file=sys.stderr)
        return 1
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    print(summarize(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
