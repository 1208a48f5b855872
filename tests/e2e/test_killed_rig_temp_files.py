"""A rig killed outright (SIGKILL: `rig serve` in the soak, benchmarks/soak.py, issue 39) leaves
no temporary file behind.

The rig hands its virtual bench the bench as it holds it in a temporary TOML file
(rig-vbench-*.toml), deleted when the bench is closed; a rig killed mid-run never closes it, so
every kill left one in the temp folder for good. The child has read the file by the time it
prints its ports, so the rig deletes it then.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from .runs import REPO, RIG, bench_variant, wait_for_event, wait_gone

pytestmark = pytest.mark.slow


def test_a_rig_killed_mid_run_leaves_no_temp_file(tmp_path: Path) -> None:
    temp = tmp_path / "tmp"
    temp.mkdir()
    bench = bench_variant(tmp_path, "sim", spc=("samples_per_class = 10", "samples_per_class = 1"),
                          runs=("runs = 5", "runs = 3"))
    runs = tmp_path / "runs"
    proc = subprocess.Popen([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                             str(runs)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(temp)})
    try:
        wait_for_event(runs, "latency_run", 1, proc)
        assert [p.name for p in temp.iterdir() if p.name.startswith("rig-vbench-")] == []
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    # Its virtual bench ends on its own (its stdin closed); nothing of the run stays in the
    # temp folder.
    assert wait_gone(bench) == []
    assert sorted(p.name for p in temp.iterdir()) == []
