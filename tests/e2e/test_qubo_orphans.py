"""A rig process killed with SIGKILL mid-solve (issue 13.10): the solver worker (the CPU SUT's
spawned process, or the Loihi 2 Lava shim and its processes) notices that its parent is gone
and ends within a deadline, quietly: nothing on stderr, no traceback.

Without that, the CPU worker ran to the end of its (here 60 s) solve and then died on a broken
pipe, printing the traceback into the terminal the rig had been started from; the shim ran its
Lava solve on, orphaned, for as long."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drivers.process import group_members

from .runs import REPO, RIG

pytestmark = pytest.mark.slow

#: A solve far longer than the test: the worker is surely mid-solve when the rig is killed.
SOLVE_S = 60.0
#: How long a worker may outlive its parent (it polls every 0.2 s; a CPU slice is <= 1 s).
DEADLINE_S = 10.0
LAVA_PYTHON = REPO / ".venv-lava" / "bin" / "python"


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes whose parent is `pid`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            out.append((int(entry.name), cmd))
    return out


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for a reaper counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] not in ("Z", "X")


def start_sweep(tmp_path: Path, sut: str, nodes: int, env: dict[str, str] | None = None
                ) -> tuple[subprocess.Popen, Path]:
    """`rig sweep qubo` on one long point, its stderr (and the worker's) into a file."""
    sweep = tmp_path / "long.toml"
    sweep.write_text(f'[sweep]\nname = "long"\nsuts = ["{sut}"]\nnodes = [{nodes}]\n'
                     f"densities = [0.1]\ntimeouts = [{SOLVE_S}]\nseeds = [0]\n")
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as stderr:
        proc = subprocess.Popen([*RIG, "sweep", "qubo", str(sweep), "--runs-dir",
                                 str(tmp_path / "runs"), "--json"], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=stderr,
                                env={**os.environ, **(env or {})})
    return proc, err


def wait_for_worker(proc: subprocess.Popen, marker: str, timeout_s: float = 120.0) -> int:
    """The pid of the rig's child whose command line holds `marker` (a deadline, not timing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the sweep ended before its worker started"
        found = [pid for pid, cmd in children(proc.pid) if marker in cmd]
        if found:
            return found[0]
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"no worker ({marker}) within {timeout_s} s")


def wait_gone(pids: list[int], timeout_s: float = DEADLINE_S) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_rig(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)


def test_cpu_worker_of_a_killed_rig_exits_quietly(tmp_path: Path) -> None:
    proc, err = start_sweep(tmp_path, "cpu-sa", 100)
    worker = wait_for_worker(proc, "spawn_main")
    others = [pid for pid, _ in children(proc.pid) if pid != worker]  # resource tracker
    time.sleep(1.0)  # past loading and calibration: solving its 60 s point
    try:
        assert alive(worker)
        kill_rig(proc)
        left = wait_gone([worker, *others])
    finally:
        for pid in [worker, *others]:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"still running {DEADLINE_S:g} s after the rig was killed: {left}"
    text = err.read_text()
    assert "Traceback" not in text and "BrokenPipe" not in text, text
    assert text.strip() == "", text


#: A rig-like parent of the Loihi 2 shim: boots it, loads a graph, starts a 60 s qsolve, and
#: prints the shim's process group once the shim says the solve's clock started (after Lava's
#: calibration, whose stderr line would otherwise end an orphaned shim on a broken pipe).
PARENT = """
import sys, time
from drivers.dut.client import DutClient
from drivers.process import ProcessTransport
from protocols.dut.codec import cmd_qsolve, encode_command
from rig.qubo.suts import LAVA_PYTHON, LOIHI2_SHIM
from rig.qubo.workloads import generate, qubo_terms

transport = ProcessTransport([str(LAVA_PYTHON), str(LOIHI2_SHIM)], name="loihi2")
client = DutClient(transport, name="loihi2 shim")
client.wait_for_boot(120)
workload = generate(10, 0.1, 0)
client.qubo_load(workload.nodes, qubo_terms(workload))
transport.write(encode_command(cmd_qsolve(int(SOLVE_S * 1e6), 0)))
transport.read_until(time.monotonic() + 120, lambda buf: b"m-qsolve-start" in buf)
print(transport.pgid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not LAVA_PYTHON.exists(),
                    reason=f"no Lava environment at {LAVA_PYTHON}: run `make lava-env`")
def test_loihi2_shim_of_a_killed_parent_exits_with_its_lava_processes(tmp_path: Path) -> None:
    script = PARENT.replace("SOLVE_S", repr(SOLVE_S))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "RIG_LOIHI2_BACKEND": "CPU"})
    try:
        line = proc.stdout.readline()  # blocks until the solve runs (the parent's deadlines)
        assert line.strip().isdigit(), f"the parent did not start a solve: {line!r}"
        shim = int(line)
        members = group_members(shim)
        assert len(members) >= 2, "no Lava process is solving"
        kill_rig(proc)
        left = wait_gone(members)
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in group_members(shim) if "shim" in locals() else []:
            os.kill(pid, signal.SIGKILL)
    assert left == [], f"still running {DEADLINE_S:g} s after its parent was killed: {left}"
