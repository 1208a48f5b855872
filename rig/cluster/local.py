"""A Dask scheduler and rig workers as processes on this machine (`rig cluster local`, tests,
benchmarks): real `dask scheduler` and `rig worker` processes on 127.0.0.1, each stopped by its
process id.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from rig.cluster import require_distributed
from rig.errors import ConfigError

#: Deadline for the scheduler to write its address, and for workers to join [s].
START_TIMEOUT_S = 60.0
#: How long a process gets after SIGTERM before SIGKILL [s].
STOP_GRACE_S = 10.0


@dataclass
class Proc:
    """One started process and the file its output goes to."""

    popen: subprocess.Popen
    log: Path
    name: str

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.popen.pid

    def tail(self, lines: int = 15) -> str:
        """The last lines of its output (for error messages)."""
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class LocalCluster:
    """A scheduler process and worker processes; `stop()` ends them all by pid."""

    address: str
    scheduler: Proc
    workers: list[Proc] = field(default_factory=list)

    def stop(self) -> None:
        """SIGTERM every process (workers first), SIGKILL what is left after the grace."""
        for proc in [*self.workers, self.scheduler]:
            stop_process(proc.popen)


def _open_log(path: Path) -> IO[bytes]:
    path.parent.mkdir(parents=True, exist_ok=True)
    return open(path, "wb")  # the child gets a copy; ours is closed after the start


def start_scheduler(log_dir: Path, *, host: str = "127.0.0.1", port: int = 0,
                    timeout_s: float = START_TIMEOUT_S) -> tuple[str, Proc]:
    """`dask scheduler` on `host:port` (0: any free port); returns its address once it is up."""
    require_distributed()
    info = log_dir / "scheduler.json"
    info.unlink(missing_ok=True)
    log = log_dir / "scheduler.log"
    with _open_log(log) as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", "dask", "scheduler", "--host", host, "--port", str(port),
             "--no-dashboard", "--scheduler-file", str(info)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    proc = Proc(popen, log, "scheduler")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise ConfigError(f"dask scheduler exited ({popen.returncode}) on {host}:{port}:\n"
                              f"{proc.tail()}", hint="is the port taken? try another --port")
        with contextlib.suppress(OSError, ValueError):
            address = json.loads(info.read_text())["address"]
            return address, proc
        time.sleep(0.05)
    stop_process(popen)
    raise ConfigError(f"dask scheduler did not start within {timeout_s:g} s:\n{proc.tail()}")


def start_worker(address: str, resources: Mapping[str, int], log_dir: Path, *, name: str,
                 env: Mapping[str, str] | None = None, nthreads: int | None = None) -> Proc:
    """`rig worker --scheduler ADDRESS --resources ...` as a process (not waited for)."""
    spec = ",".join(f"{k}={v}" for k, v in resources.items())
    argv = [sys.executable, "-m", "rig.cli", "worker", "--scheduler", address,
            "--resources", spec, "--name", name, "--listen-host", "127.0.0.1"]
    if nthreads is not None:
        argv += ["--nthreads", str(nthreads)]
    log = log_dir / f"worker-{name}.log"
    with _open_log(log) as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    return Proc(popen, log, name)


def wait_for_workers(address: str, names: list[str], procs: Sequence[Proc] = (),
                     timeout_s: float = START_TIMEOUT_S) -> None:
    """Block until the workers `names` are registered with the scheduler (a deadline)."""
    from distributed import Client

    deadline = time.monotonic() + timeout_s
    with Client(address, timeout=timeout_s, set_as_default=False) as client:
        while time.monotonic() < deadline:
            for proc in procs:
                if proc.popen.poll() is not None:
                    raise ConfigError(f"rig worker {proc.name} exited "
                                      f"({proc.popen.returncode}):\n{proc.tail()}")
            joined = {str(w.get("name")) for w in client.scheduler_info(n_workers=-1)
                      .get("workers", {}).values()}
            if set(names) <= joined:
                return
            time.sleep(0.1)
    raise ConfigError(f"workers {sorted(set(names) - joined)} did not join {address} within "
                      f"{timeout_s:g} s")


def local_resources(index: int, loihi2: bool = False, host_power: bool = True
                    ) -> dict[str, int]:
    """What worker `index` of a one-machine cluster owns: the CPU samplers each; the host's own
    hardware (its power counters, the Loihi 2 shim) only the first, as one host owns one."""
    out: dict[str, int] = {"cpu-tabu": 1, "cpu-sa": 1}
    if index == 0 and loihi2:
        out["loihi2"] = 1
    if index == 0 and host_power:
        out["host-power"] = 1
    return out


def start_local(workers: int, log_dir: Path, *, port: int = 0,
                resources: list[dict[str, int]] | None = None,
                env: Mapping[str, str] | None = None,
                timeout_s: float = START_TIMEOUT_S) -> LocalCluster:
    """A scheduler and `workers` rig workers on 127.0.0.1 (worker i owning `resources[i]`,
    by default `local_resources(i)`), all joined when this returns."""
    address, scheduler = start_scheduler(log_dir, port=port, timeout_s=timeout_s)
    cluster = LocalCluster(address, scheduler)
    try:
        for i in range(workers):
            owned = resources[i] if resources is not None else local_resources(i)
            cluster.workers.append(start_worker(address, owned, log_dir, name=f"local-{i + 1}",
                                                env=env))
        wait_for_workers(address, [w.name for w in cluster.workers], cluster.workers,
                         timeout_s=timeout_s)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def stop_process(popen: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> Any:
    """SIGTERM `popen`, wait up to `grace_s`, then SIGKILL it; its exit code."""
    if popen.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            popen.send_signal(signal.SIGTERM)
        try:
            popen.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                popen.kill()
            popen.wait(grace_s)
    return popen.returncode
