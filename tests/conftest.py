"""Shared fixtures."""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# As `rig` itself does (rig.cli.main): the processes tests start directly (the virtual bench,
# the instruments' stand-ins) then skip OpenBLAS's spinning threads too.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def rig_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One RIG_CACHE (converted datasets, AFE rasters) for the session, shared by its xdist
    workers: each XyloSim run with a cold cache spent ~7 s of CPU making the same set and
    rasters again. Never the user's ~/.cache. (Cache writers rename whole files and folders
    into place, so workers filling it at once is safe; tests of the cache itself use their own.)
    """
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "rig-cache"
    path.mkdir(exist_ok=True)
    os.environ["RIG_CACHE"] = str(path)
    return path


@pytest.fixture
def sim_bench_text() -> str:
    """The shipped virtual-bench file's text, to derive variants from."""
    return (REPO / "benches" / "sim.toml").read_text()


def pytest_configure(config: pytest.Config) -> None:
    """In the xdist controller, before its workers start: the test modules' rewritten asserts
    and the rig's bytecode, made once by a pool rather than by every worker at once
    (tests/bytecode.py)."""
    workers = getattr(config.option, "numprocesses", None)
    if (os.environ.get("PYTEST_XDIST_WORKER") is None and workers not in (None, 0)
            and not sys.dont_write_bytecode):
        from tests.bytecode import warm

        warm(REPO)


#: Files holding `serial` tests, as this session deselected them (`RIG_SERIAL_FILES`).
_serial_files: set[str] = set()


def pytest_deselected(items: list[pytest.Item]) -> None:
    """With ``RIG_SERIAL_FILES`` set (`make test`'s parallel part, ``-m "not serial"``), write
    the files of the deselected `serial` tests there, one a line, so that the serial part
    collects only those files. Every worker collects every test, so each writes the same list
    (whole, by rename: never half a file)."""
    target = os.environ.get("RIG_SERIAL_FILES")
    if not target:
        return
    _serial_files.update(i.nodeid.split("::")[0] for i in items if i.get_closest_marker("serial"))
    part = f"{target}.{os.getpid()}"
    Path(part).write_text("".join(f"{f}\n" for f in sorted(_serial_files)), encoding="utf-8")
    os.replace(part, target)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with `slow` tests (the end-to-end runs, a minute for some) first, each group in
    collection order. xdist hands out whole files in this order (`make test` turns off its own,
    by number of tests, which put those files last): started early they overlap the rest, where
    last they left one worker busy for half a minute with the others done."""
    slow = {i.nodeid.split("::")[0] for i in items if i.get_closest_marker("slow")}
    items.sort(key=lambda i: i.nodeid.split("::")[0] not in slow)


#: The CPU reading at the end of the last phase (`pytest_runtest_makereport`).
_CPU_MARK = pytest.StashKey[float]()


def _cpu_s() -> float:
    """CPU seconds of this process and of its ended (waited-for) child processes."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_collection_finish(session: pytest.Session) -> None:
    """Start the CPU count once the tests are collected: the first phase (often a module
    fixture's runs) counted nothing before, having no earlier reading to take from."""
    session.config.stash[_CPU_MARK] = _cpu_s()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    """Give each phase's report the CPU its process and ended children used since the last
    phase (a module fixture's processes count where they end), for the suite's CPU table."""
    outcome = yield
    now = _cpu_s()
    report = outcome.get_result()
    report.cpu_s = now - item.config.stash.get(_CPU_MARK, now)
    item.config.stash[_CPU_MARK] = now


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``RIG_TEST_REPORT`` set (`make test`), append each phase's outcome, duration and
    CPU for tests/suite_report.py. Under xdist the controller gets every worker's reports."""
    target = os.environ.get("RIG_TEST_REPORT")
    if not target or os.environ.get("PYTEST_XDIST_WORKER"):  # the controller writes
        return
    with open(target, "a", encoding="utf-8") as out:
        worker = getattr(getattr(report, "node", None), "gateway", None)
        out.write(json.dumps({"nodeid": report.nodeid, "when": report.when,
                              "outcome": report.outcome, "duration": report.duration,
                              "cpu": getattr(report, "cpu_s", None), "start": report.start,
                              "worker": getattr(worker, "id", None)}) + "\n")
