"""The bytecode warm-up of `make test`'s xdist controller (tests/bytecode.py, tests/conftest.py):
what it writes is what pytest and Python then read, it writes nothing twice, and only the
controller of a parallel run does it."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from _pytest.assertion import rewrite

from tests.bytecode import warm

HERE = Path(__file__).resolve().parent


def small_repo(root: Path) -> dict[str, Path]:
    """A test module, a test helper and a package module, as the repository lays them out."""
    (root / "tests").mkdir(parents=True)
    (root / "rig").mkdir()
    files = {"test": root / "tests" / "test_a.py", "helper": root / "tests" / "helpers.py",
             "module": root / "rig" / "unused.py"}
    files["test"].write_text("def test_a():\n    x = 1\n    assert x == 1\n")
    files["helper"].write_text("LIMIT = 3\n")
    files["module"].write_text("def f():\n    return 2\n")
    for package in ("tests", "rig"):
        (root / package / "__init__.py").write_text("")
    return files


def rewritten_pyc(test: Path) -> Path:
    return rewrite.get_cache_dir(test) / (test.name[:-3] + rewrite.PYC_TAIL)


def test_warm_writes_what_pytest_and_python_read_and_nothing_twice(tmp_path: Path) -> None:
    files = small_repo(tmp_path)
    assert warm(tmp_path, processes=2) == {"rewrite": 1, "compile": 4}  # 2 __init__, 2 modules
    # pytest accepts the test module's file as current, and its asserts are rewritten (the
    # rewritten module imports builtins as @py_builtins; a plain compile has no such name).
    code = rewrite._read_pyc(files["test"], rewritten_pyc(files["test"]))
    assert code is not None and "@py_builtins" in code.co_names
    for plain in ("helper", "module"):
        assert Path(importlib.util.cache_from_source(str(files[plain]))).is_file(), plain
    assert not Path(importlib.util.cache_from_source(str(files["test"]))).exists()

    assert warm(tmp_path, processes=2) == {"rewrite": 0, "compile": 0}
    files["test"].write_text("def test_a():\n    assert 2 == 2\n")
    assert warm(tmp_path, processes=2) == {"rewrite": 1, "compile": 0}
    assert rewrite._read_pyc(files["test"], rewritten_pyc(files["test"])) is not None


def test_only_the_controller_of_a_parallel_run_warms(tmp_path: Path) -> None:
    """A module no test imports gets its bytecode only from the warm-up: with -n 2 it has
    it after the run, without -n it does not."""
    files = small_repo(tmp_path)
    for name in ("conftest.py", "bytecode.py"):
        shutil.copy(HERE / name, tmp_path / "tests" / name)
    # Not this run's: a worker's PYTEST_XDIST_WORKER would make the inner controller a worker.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")
           and k not in ("PYTHONDONTWRITEBYTECODE", "RIG_TEST_REPORT", "RIG_SERIAL_FILES")}
    unused = Path(importlib.util.cache_from_source(str(files["module"])))
    for workers, warmed in ((), False), (("-n", "2"), True):
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *workers, "tests"], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 passed" in done.stdout
        assert unused.is_file() is warmed, workers
