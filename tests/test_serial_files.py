"""`make test`'s serial part collects only the files the parallel part found `serial` tests in
(tests/conftest.py, ``RIG_SERIAL_FILES``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_the_parallel_part_lists_the_files_of_the_serial_tests_it_left_out(tmp_path) -> None:
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n")
    (tmp_path / "test_timed.py").write_text(
        "import pytest\n\n@pytest.mark.serial\ndef test_a():\n    pass\n\n"
        "def test_b():\n    pass\n")
    (tmp_path / "test_plain.py").write_text("def test_c():\n    pass\n")
    (tmp_path / "test_class.py").write_text(
        "import pytest\n\n@pytest.mark.serial\nclass TestTimed:\n    def test_d(self):\n"
        "        pass\n")
    listing = tmp_path / "serial.txt"
    env = {**os.environ, "RIG_SERIAL_FILES": str(listing)}
    env.pop("RIG_TEST_REPORT", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-m", "not serial", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed, 2 deselected" in done.stdout
    assert listing.read_text() == "test_class.py\ntest_timed.py\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("serial")) == [
        "serial.txt"]  # no part file left behind


def test_files_with_slow_tests_are_handed_out_first(tmp_path) -> None:
    """The conftest's order (`make test` passes --no-loadscope-reorder): files with a `slow`
    test first, each group in collection order, every test of a file kept together."""
    shutil.copy(HERE / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: long\n")
    (tmp_path / "test_a.py").write_text("def test_1():\n    pass\n\ndef test_2():\n    pass\n")
    (tmp_path / "test_b.py").write_text(
        "import pytest\n\ndef test_3():\n    pass\n\n@pytest.mark.slow\ndef test_4():\n    pass\n")
    (tmp_path / "test_c.py").write_text("def test_5():\n    pass\n")
    (tmp_path / "test_d.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.slow\n\ndef test_6():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIG_")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "--collect-only",
                           "-p", "no:cacheprovider", str(tmp_path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    order = [line.split("::")[1] for line in done.stdout.splitlines() if "::" in line]
    assert order == ["test_3", "test_4", "test_6", "test_1", "test_2", "test_5"]


def test_the_session_cache_is_one_folder_of_the_session_never_the_users(rig_cache) -> None:
    import tempfile

    assert os.environ["RIG_CACHE"] == str(rig_cache) and rig_cache.is_dir()
    assert rig_cache.is_relative_to(tempfile.gettempdir()) or rig_cache.is_relative_to(
        Path(os.environ.get("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())))
    assert not rig_cache.is_relative_to(Path.home() / ".cache")
    if os.environ.get("PYTEST_XDIST_WORKER"):  # beside the workers' own folders, shared
        assert rig_cache.parent.name.startswith("pytest-")
