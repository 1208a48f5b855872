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
