"""The submitting side: a sweep's points as Dask tasks, their outcomes as sweep events.

`ClusterDispatch` is a `rig.qubo.sweep.PointDispatch`. Every point is one task with the resources it
needs (`rig.cluster.resources.point_resources`) and a priority that keeps the sweep's order where
workers are free to choose. The process that runs the sweep stays the run folder's only writer:
each task's outcome comes back to it and is published as the same `SweepPointDone` a local sweep
writes (plus the worker that measured it).

Faults:
- a worker dies mid-point: the scheduler runs the task again on another worker with the resource
  (or waits for one to join); after `distributed.scheduler.allowed-failures` deaths (3 by
  default) the point is recorded as failed, naming them;
- a point fails on the rig (a DUT error): tried again up to `retries` times, then recorded as
  failed with the reason;
- a bad setup on a worker (a ConfigError there, such as a missing extra): the sweep stops, as a
  local sweep does, naming the worker (a SUT that cannot start, such as no Lava environment, is
  a failed point: retried, then recorded);
- the submitting process dies: its tasks are dropped by the scheduler; `rig sweep resume FOLDER
  --cluster ADDRESS` submits the points that have no event on disk.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Generator, Iterator
from concurrent.futures import CancelledError
from typing import Any

from rig.cluster import require_distributed
from rig.cluster.points import FAILED, SETUP, measure_point
from rig.cluster.resources import point_resources
from rig.errors import ConfigError, RigError
from rig.qubo.sweep import SweepPoint, SweepPointDone, SweepSpec, point_event
from rig.run.events import Event, Note
from rig.run.stopping import StopRequest

#: Extra tries of a point that failed on the rig (a DUT error) before it is recorded as failed.
DEFAULT_RETRIES = 1
#: How long to wait for the scheduler to answer when connecting [s].
CONNECT_TIMEOUT_S = 10.0
#: How often the wait for finished points looks at the stop flag [s].
_POLL_S = 0.5


class ClusterDispatch:
    """Points go to the Dask scheduler at `address` (tcp://HOST:PORT)."""

    def __init__(self, address: str, *, retries: int = DEFAULT_RETRIES,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S) -> None:
        if not address or "://" not in address:
            raise ConfigError(f"--cluster {address!r}: expected a scheduler address such as "
                              "tcp://HOST:8786",
                              hint="start one with `rig cluster local` or `dask scheduler`")
        if retries < 0:
            raise ConfigError(f"--retries {retries}: expected 0 or more")
        self.address = address
        self.retries = retries
        self.connect_timeout_s = connect_timeout_s

    def manifest(self) -> dict[str, Any]:
        """What the run folder records about where its points went."""
        return {"scheduler": self.address, "retries": self.retries}

    def connect(self) -> Any:
        """A Dask client of the scheduler, or a ConfigError saying it cannot be reached."""
        require_distributed()
        from distributed import Client

        try:
            return Client(self.address, timeout=self.connect_timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ConfigError(f"cannot reach the Dask scheduler at {self.address}: {exc}",
                              hint="start it (`rig cluster local`, or `dask scheduler` and a "
                                   "`rig worker` per rig host) or fix --cluster") from None

    def run(self, spec: SweepSpec, todo: list[SweepPoint], *, stand_in: bool,
            known: dict[tuple, tuple[int, str]], stop: StopRequest | None
            ) -> Generator[Event, None, None]:
        """Submit `todo`, yield each point's event as it finishes; cancel the rest on exit."""
        if not todo:
            return
        from distributed import wait
        from distributed.scheduler import KilledWorker

        client = self.connect()
        session = uuid.uuid4().hex[:8]
        futures: dict[Any, tuple[SweepPoint, int]] = {}
        failures: dict[str, list[str]] = {}

        def submit(point: SweepPoint, attempt: int) -> Any:
            future = client.submit(
                measure_point, spec, point, stand_in, known.get(point.workload),
                key=f"rig-point-{session}-{point.index}-{attempt}", pure=False,
                resources=point_resources(point.sut, spec.sut_options.get(point.sut, {})),
                priority=-point.index, retries=0,
            )
            futures[future] = (point, attempt)
            return future

        try:
            yield from self._notes(client, spec, todo)
            for point in todo:
                submit(point, 1)
            pending = set(futures)
            while pending:
                if stop is not None:
                    stop.check()
                try:
                    with client.as_current():  # `wait` asks for the current client
                        finished, pending = wait(pending, timeout=_POLL_S,
                                                 return_when="FIRST_COMPLETED")
                except TimeoutError:
                    continue
                except CancelledError as exc:  # the scheduler went away with our points
                    raise self._lost(len(pending)) from exc
                pending = set(pending)
                for future in sorted(finished, key=lambda f: futures[f][0].index):
                    point, attempt = futures.pop(future)
                    outcome = self._outcome(future, point, KilledWorker)
                    if outcome["status"] == SETUP:
                        worker = outcome["worker"]
                        raise ConfigError(f"worker {worker.get('name')} on {worker.get('host')}: "
                                          f"{outcome['error']}")
                    if outcome["status"] == FAILED and outcome.get("retry", True):
                        failures.setdefault(point.key, []).append(str(outcome["error"]))
                        if attempt <= self.retries:
                            pending.add(submit(point, attempt + 1))
                            yield Note(level="warning",
                                       text=f"point {point.key} failed on "
                                            f"{outcome['worker'].get('name')}: "
                                            f"{outcome['error']}; trying again "
                                            f"({attempt + 1} of {self.retries + 1})")
                            continue
                    yield self._event(point, outcome, attempt, failures.get(point.key, []))
        finally:
            with contextlib.suppress(Exception):
                client.cancel(list(futures), force=True)
            with contextlib.suppress(Exception):
                client.close(timeout=5)

    def _notes(self, client: Any, spec: SweepSpec, todo: list[SweepPoint]) -> Iterator[Event]:
        """Warn about points no worker can take right now (they wait for one to join)."""
        workers = client.scheduler_info().get("workers", {})
        owned = [set((w.get("resources") or {}).keys()) for w in workers.values()]
        waiting: dict[tuple[str, ...], int] = {}
        for point in todo:
            needs = point_resources(point.sut, spec.sut_options.get(point.sut, {}))
            if not any(set(needs) <= have for have in owned):
                key = tuple(sorted(needs))
                waiting[key] = waiting.get(key, 0) + 1
        for kinds, count in waiting.items():
            yield Note(level="warning",
                       text=f"no worker of {self.address} owns {' + '.join(kinds)} now: "
                            f"{count} points wait until one joins (rig worker --resources "
                            f"{','.join(f'{n}=1' for n in kinds)})")

    def _outcome(self, future: Any, point: SweepPoint, killed: type) -> dict[str, Any]:
        """The task's outcome; a task that never returned becomes a failed point or an error."""
        if future.status == "finished":
            return future.result()
        if future.status == "error":
            exc = future.exception()
            if isinstance(exc, killed):
                last = getattr(getattr(exc, "last_worker", None), "address", "?")
                why = (f"the {getattr(exc, 'allowed_failures', 0) + 1} workers measuring it "
                       f"all died (the last: {last}); the scheduler gave up on it "
                       "(distributed.scheduler.allowed-failures)")
            else:
                why = f"{type(exc).__name__}: {exc}"
            return {"status": FAILED, "result": {}, "error": why, "wall_s": 0.0,
                    "worker": {}, "retry": False}
        raise self._lost(1)

    def _lost(self, out: int) -> RigError:
        return RigError(f"lost the Dask scheduler at {self.address} with {out} points still out",
                        hint="every finished point is on disk: once the scheduler and workers "
                             "are back, `rig sweep resume FOLDER --cluster ADDRESS` measures "
                             "the rest")

    @staticmethod
    def _event(point: SweepPoint, outcome: dict[str, Any], attempts: int,
               failures: list[str]) -> SweepPointDone:
        worker = dict(outcome.get("worker") or {})
        worker["attempts"] = attempts
        if failures:  # the tries that failed before this outcome
            worker["errors"] = failures
        error = outcome.get("error")
        if error is not None and attempts > 1:
            error = f"{error} (tried {attempts} times)"
        return point_event(point, status="ok" if outcome["status"] == "ok" else "failed",
                           result=outcome.get("result") or {}, error=error,
                           wall_s=float(outcome.get("wall_s") or 0.0), worker=worker or None)
