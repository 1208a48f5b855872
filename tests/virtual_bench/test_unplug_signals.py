"""A virtual bench served as a process of its own (`python -m virtual_bench`, as a run starts
it) can be unplugged from outside (benchmarks/soak.py, issue 39): SIGUSR2 takes the DUT's port
away, SIGUSR1 the monitor's, as the in-process test hooks do; the process goes on serving until
its stdin closes."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def served(bench: str) -> Iterator[tuple[subprocess.Popen, dict]]:
    proc = subprocess.Popen([sys.executable, "-m", "virtual_bench", str(REPO / "benches" / bench),
                             "--power-on"], cwd=REPO, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())
        yield proc, started
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def gone(port: str, timeout_s: float = 10.0) -> bool:
    """Whether the pty at `port` goes away (EIO or end of file) within the deadline."""
    fd = os.open(port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    if not os.read(fd, 4096):
                        return True
                except OSError:
                    return True
        return False
    finally:
        os.close(fd)


@pytest.mark.parametrize("signum,role", [(signal.SIGUSR2, "dut"), (signal.SIGUSR1, "emon")])
def test_a_signal_unplugs_the_dut_or_the_monitor(signum: int, role: str) -> None:
    with served("sim.toml") as (proc, started):
        port = started["ports"][role]
        os.kill(proc.pid, signum)
        assert gone(port)
        assert proc.poll() is None  # still serving: a replug is the next run's bench
    assert proc.returncode == 0
    assert proc.stderr is not None
    said = proc.stderr.read().decode()
    assert f"the {'DUT' if role == 'dut' else 'lpm01a'} was unplugged" in said
