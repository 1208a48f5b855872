"""`rig worker`: this process is a Dask worker whose resources name the hardware the host owns.

The worker runs in this process (no nanny), so that stopping or killing `rig worker` ends the
worker and, through their parent watch, the SUT processes it started. One thread per SUT it
owns; Dask's resources keep one point per instrument, and one power-measured point, at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable
from typing import Any

from rig.cluster import require_distributed
from rig.cluster.resources import HOST_POWER, HostPowerLock, worker_threads
from rig.errors import ConfigError

#: How long the worker waits for the scheduler at start [s].
CONNECT_TIMEOUT_S = 30.0


def serve_worker(
    scheduler: str,
    resources: dict[str, int],
    *,
    name: str | None = None,
    listen_host: str | None = None,
    nthreads: int | None = None,
    connect_timeout_s: float = CONNECT_TIMEOUT_S,
    say: Callable[[str], None] = print,
) -> None:
    """Run a Dask worker until it is stopped (SIGINT/SIGTERM) or the scheduler goes away."""
    require_distributed()
    if not scheduler or "://" not in scheduler:
        raise ConfigError(f"--scheduler {scheduler!r}: expected an address such as "
                          "tcp://HOST:8786", hint="the address `dask scheduler` printed")
    lock = HostPowerLock() if HOST_POWER in resources else None
    if lock is not None:
        lock.acquire()
    try:
        asyncio.run(_serve(scheduler, resources, name or socket.gethostname(), listen_host,
                           nthreads or worker_threads(resources), connect_timeout_s, say))
    finally:
        from rig.cluster.points import close_all

        close_all()
        if lock is not None:
            lock.release()


async def _serve(scheduler: str, resources: dict[str, int], name: str, listen_host: str | None,
                 nthreads: int, connect_timeout_s: float, say: Callable[[str], None]) -> None:
    from distributed import Worker

    worker = Worker(scheduler, nthreads=nthreads, resources=dict(resources), name=name,
                    host=listen_host, dashboard=False)
    try:
        await asyncio.wait_for(worker.start(), timeout=connect_timeout_s)
    except (TimeoutError, OSError) as exc:
        with contextlib.suppress(Exception):
            await worker.close(timeout=5)
        raise ConfigError(f"cannot reach the Dask scheduler at {scheduler}: "
                          f"{exc or 'no answer within ' + str(connect_timeout_s) + ' s'}",
                          hint="start it first (`dask scheduler --host HOST` or `rig cluster "
                               "local`) and check the address and firewall") from None
    except Exception as exc:  # the scheduler refused this worker, e.g. its name is taken
        with contextlib.suppress(Exception):
            await worker.close(timeout=5)
        raise ConfigError(f"the Dask scheduler at {scheduler} refused worker {name!r}: {exc}",
                          hint="another worker may have this name (the host name by default): "
                               "give each worker on a host its own --name") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    owned = ", ".join(f"{k}={v}" for k, v in sorted(resources.items()))
    say(f"rig worker {name} at {worker.address}: {owned} ({nthreads} threads); "
        f"scheduler {scheduler}")
    finished: Any = asyncio.ensure_future(worker.finished())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({finished, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if stopping.done():
        say(f"rig worker {name}: stopping")
        with contextlib.suppress(Exception):
            await worker.close(timeout=10)
    else:
        say(f"rig worker {name}: the scheduler closed the worker")
    for task in (finished, stopping):
        task.cancel()
