"""Bytecode for the suite's xdist workers, made once before they start (tests/conftest.py).

Every worker imports every test module to collect it. On a fresh clone the three workers then
each rewrote the asserts of the same 150 test files (pytest's rewrite: 6 s of CPU) and compiled
the rig's own packages, all at once: three times the work of one process, on the longest path
of `make test`. Here a pool of processes makes both once, in the xdist controller, before the
workers start. Nothing depends on it: pytest checks a rewritten file against its source's hash
(and Python a compiled one against its source's time and size), so whatever is missing,
stale or unreadable is only made again by the worker that imports it.
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import os
import py_compile
import struct
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

#: The repository's packages the test modules import (compiled as Python does on import).
PACKAGES = ("rig", "gui", "drivers", "protocols", "virtual_bench", "firmware", "tests")


class _Trace:
    """What pytest's pyc writer reports to (its assertion state): nowhere."""

    @staticmethod
    def trace(message: str) -> None:
        del message


def _rewrite(path: str) -> bool:
    """Write the assert-rewritten bytecode of the test module `path` where pytest reads it;
    False when it was already there and current."""
    # pytest's own rewrite (private names: on any change in them, the warm-up just fails and
    # the workers rewrite as before). Without a config it rewrites as this suite's does: the
    # only setting it reads, enable_assertion_pass_hook, is off here.
    from _pytest.assertion import rewrite

    source = Path(path)
    cache_dir = rewrite.get_cache_dir(source)
    pyc = cache_dir / (source.name[:-3] + rewrite.PYC_TAIL)
    if rewrite._read_pyc(source, pyc) is not None:
        return False
    source_hash, code = rewrite._rewrite_test(source, None)  # type: ignore[arg-type]
    cache_dir.mkdir(exist_ok=True)
    return rewrite._write_pyc(_Trace(), code, source_hash, pyc)  # type: ignore[arg-type]


def _compile(path: str) -> bool:
    """Compile a module that is imported plainly (not a test module) into its __pycache__, as
    an import would; False when its bytecode there is current (same source time and size)."""
    pyc = importlib.util.cache_from_source(path)
    stat = os.stat(path)
    header = importlib.util.MAGIC_NUMBER + struct.pack(
        "<4xLL", int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
    try:
        with open(pyc, "rb") as f:
            if f.read(16) == header:
                return False
    except OSError:
        pass
    # Timestamp-based, as an import writes it (py_compile would write a hash-based file under
    # SOURCE_DATE_EPOCH, which the check above would then never find current).
    py_compile.compile(path, cfile=pyc, doraise=True,
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)
    return True


def _job(job: tuple[str, str]) -> tuple[str, bool]:
    kind, path = job
    try:
        return kind, (_rewrite if kind == "rewrite" else _compile)(path)
    except Exception:  # a speed-up only: the worker that imports it makes it instead
        return kind, False


def is_test_module(path: Path) -> bool:
    """Whether pytest rewrites `path`'s asserts (its default python_files, and conftests)."""
    return path.name == "conftest.py" or path.name.startswith("test_") or \
        path.name.endswith("_test.py")


def jobs(repo: Path) -> list[tuple[str, str]]:
    """One job per module of `PACKAGES`: the test modules to rewrite first (the larger part)."""
    paths = sorted(p for package in PACKAGES if (repo / package).is_dir()
                   for p in (repo / package).rglob("*.py") if "__pycache__" not in p.parts)
    tests = {p for p in paths if p.parts[len(repo.parts)] == "tests" and is_test_module(p)}
    return ([("rewrite", str(p)) for p in paths if p in tests] +
            [("compile", str(p)) for p in paths if p not in tests])


def warm(repo: Path, processes: int | None = None) -> dict[str, int]:
    """Rewrite the test modules and compile the packages of `repo` that are not current;
    returns how many of each were written."""
    todo = jobs(repo)
    written = {"rewrite": 0, "compile": 0}
    # Spawned, not forked: a fork of a process with threads (JAX's, when a test calls this)
    # can deadlock in the child.
    with ProcessPoolExecutor(max_workers=processes or os.cpu_count() or 1,
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        for kind, wrote in pool.map(_job, todo, chunksize=8):
            written[kind] += wrote
    return written
