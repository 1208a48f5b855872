"""What runs on a cluster worker: one sweep point, measured with this host's instruments.

`measure_point` is the Dask task. It never raises for a point that failed: it returns the
outcome (`ok`, `failed` with the reason, or `setup` for a bad setup such as a missing SUT
environment) with the worker's host, name, resources and software versions, so that the
submitting process records it as a local sweep would. A worker that dies mid-point returns
nothing: Dask runs the point again on another worker with the resource.

SUTs stay open between points, one `QuboPointFunction` per (sweep, SUT) on each worker; the
worker's resources guarantee that only one point uses each at a time.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import threading
import time
from functools import cache
from importlib import metadata
from typing import Any

from rig.errors import BENCH_ERRORS, ConfigError
from rig.qubo.sweep import QuboPointFunction, SweepPoint, SweepSpec, plain, stand_in_point

OK, FAILED, SETUP = "ok", "failed", "setup"

_lock = threading.Lock()
#: Open point functions on this worker, by SUT: (sweep digest, function).
_functions: dict[str, tuple[str, QuboPointFunction]] = {}
#: Targets this worker found, by (sweep digest, workload): its other SUTs reuse them (a computed
#: target can take many seconds).
_targets: dict[tuple, tuple[int, str]] = {}


def measure_point(spec: SweepSpec, point: SweepPoint, stand_in: bool = False,
                  known_target: tuple[int, str] | None = None) -> dict[str, Any]:
    """Measure `point` of `spec` here; stand-in points when `stand_in`.

    Returns {"status", "result", "error", "wall_s", "worker"}; `worker` holds the host, the
    worker's name and address, its resources, the instruments the point used (SUT and what it
    said it is, power source), software versions and the host times the point started and
    ended (for the record: the measurement's times come from the SUT).
    """
    started, t0 = time.time(), time.monotonic()
    result: dict[str, Any] = {}
    instruments: dict[str, Any] = {"sut": point.sut, "stand_in": True} if stand_in else {}
    status, error = OK, None
    try:
        if stand_in:
            result = stand_in_point(point)
        else:
            function = _function(spec, point.sut)
            found = (_digest(spec), point.workload)
            known_target = known_target or _targets.get(found)
            if known_target is not None:
                function.remember_target(point.workload, *known_target)
            try:
                result = function(point)
            finally:
                instruments = function.instruments()
            if isinstance(result.get("target"), int):
                _targets[found] = (result["target"], str(result.get("target_method")))
        result = plain(result)
    except ConfigError as exc:
        status, error = SETUP, str(exc)
    except BENCH_ERRORS as exc:
        status, error = FAILED, str(exc)
    finished = time.time()
    # The worker's log: what it measured (the submitter records the outcome).
    print(f"point {point.key}: {status} in {finished - started:.2f} s"
          + (f" ({error})" if error else ""), flush=True)
    return {"status": status, "result": result, "error": error,
            "wall_s": time.monotonic() - t0,
            "worker": {**worker_identity(), "instruments": instruments,
                       "started_at": started, "finished_at": finished, "pid": os.getpid()}}


def _digest(spec: SweepSpec) -> str:
    data = json.dumps(spec.snapshot(), sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()


def _function(spec: SweepSpec, sut: str) -> QuboPointFunction:
    """The open point function for `sut` under `spec` (a new sweep closes the old one)."""
    digest = _digest(spec)
    with _lock:
        entry = _functions.get(sut)
        if entry is not None and entry[0] == digest:
            return entry[1]
        old = entry[1] if entry is not None else None
        function = QuboPointFunction(spec)
        _functions[sut] = (digest, function)
    if old is not None:
        with contextlib.suppress(Exception):
            old.close()
    return function


def close_all() -> None:
    """Close every SUT this worker opened (`rig worker` calls it when it stops)."""
    with _lock:
        functions = [f for _, f in _functions.values()]
        _functions.clear()
        _targets.clear()
    for function in functions:
        with contextlib.suppress(Exception):
            function.close()


def worker_identity() -> dict[str, Any]:
    """Host, worker name/address and resources (inside a Dask worker), software versions."""
    out: dict[str, Any] = {"host": socket.gethostname()}
    try:
        from distributed import get_worker

        worker = get_worker()
        out.update(name=str(worker.name), address=worker.address,
                   resources=dict(worker.state.total_resources))
    except (ImportError, ValueError):  # not in a worker (a local call)
        out.update(name=out["host"], address=None, resources={})
    out["versions"] = versions()
    return out


@cache
def versions() -> dict[str, str]:
    """Python and the packages a QUBO point depends on, on this worker."""
    from rig.run.store import software_versions

    found = dict(software_versions())
    for dist in ("distributed", "dwave-samplers", "dimod", "networkx", "scipy"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "not installed"
    return found
