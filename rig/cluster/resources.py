"""Worker resources: what hardware a rig host owns, and what each sweep point needs.

A worker's resources are Dask worker resources, one unit per instrument: `cpu-tabu=1`,
`cpu-sa=1` (the D-Wave samplers on that host), `loihi2=1` (the Lava shim, or the chip behind it),
`xylo=1` (a Xylo bench), `host-power=1` (the host's power counters, RAPL or NVML). A point needs
one unit of its SUT, and `host-power` too when its power is read from the host's counters: Dask
then runs at most one point per instrument on a worker at a time, and never two power-measured
points on one worker. One host must give `host-power` to one worker only (its counters see the
whole host); `HostPowerLock` makes a second worker on the same host refuse it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from drivers.file_lock import FileLock
from rig.bench.config import load_bench
from rig.bench.worker import (  # noqa: F401 (re-exported: the cluster's vocabulary)
    HOST_POWER,
    KNOWN_RESOURCES,
    SUT_RESOURCES,
    check_resources,
    parse_resources,
)
from rig.errors import ConfigError

#: A CPU SUT's power source that reads the host's counters (rig.qubo.procedure.open_power_meter).
HOST_POWER_SOURCES = ("rapl", "nvml")
#: Where the per-host lock file lives (tests point it into their own folder).
HOST_POWER_LOCK_ENV = "RIG_HOST_POWER_LOCK"


def bench_resources(path: Path) -> tuple[dict[str, int], str | None]:
    """A bench file's `[worker]` table, as `load_bench` validates it: (resources, name or None).

    ```toml
    [worker]
    resources = { cpu-tabu = 1, cpu-sa = 1, host-power = 1 }
    name = "cpu-baseline-1"   # optional; default: the host name
    ```
    """
    worker = load_bench(path).worker
    if worker is None:
        raise ConfigError(f"{path}: no [worker] table",
                          hint="add [worker] resources = { cpu-tabu = 1, ... } naming what this "
                               "host owns, or pass --resources")
    return dict(worker.resources), worker.name or None


def point_resources(sut: str, sut_options: dict[str, Any]) -> dict[str, int]:
    """What a point of `sut` needs: its SUT, and the host's power counters when its power is
    read from them (a CPU SUT's `power_source`, "rapl" unless the sweep's options say else)."""
    needs = {sut: 1}
    if sut in ("cpu-tabu", "cpu-sa"):
        source = sut_options.get("power_source", "rapl")
        if source in HOST_POWER_SOURCES:
            needs[HOST_POWER] = 1
    return needs


def worker_threads(resources: dict[str, int]) -> int:
    """One thread per SUT the worker owns: its instruments can measure side by side."""
    return max(1, sum(1 for name in resources if name in SUT_RESOURCES))


class HostPowerLock:
    """Held by the worker that owns `host-power` for as long as it runs: a second worker on the
    same host asking for it is refused (their points would share one power reading)."""

    def __init__(self, path: Path | None = None) -> None:
        default = Path(tempfile.gettempdir()) / "rig-host-power.lock"
        self.path = path or Path(os.environ.get(HOST_POWER_LOCK_ENV) or default)
        self._lock = FileLock(self.path)

    def acquire(self) -> None:
        """Take the lock or raise ConfigError naming the worker that holds it."""
        try:
            taken = self._lock.acquire(note=f"pid {os.getpid()}\n")
        except OSError as exc:
            raise ConfigError(f"cannot open the host-power lock file {self.path}: {exc}",
                              hint=f"set {HOST_POWER_LOCK_ENV} to a file this user may write "
                                   "(the same file for every rig worker on this host)") from None
        if not taken:
            holder = self._lock.read_note() or "another process"
            raise ConfigError(
                f"host-power is already owned by another rig worker on this host ({holder})",
                hint="give host-power to one worker per host: its power counters see the whole "
                     "host, so two workers would share one reading",
            )

    def release(self) -> None:
        """Give the lock back (also done by the kernel when the process dies)."""
        self._lock.release()
