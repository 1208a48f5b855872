"""QUBO systems under test (SUTs) behind one interface: load a workload, solve it for a timeout.

- ``cpu-tabu`` / ``cpu-sa``: D-Wave's tabu search and simulated annealing (dwave-samplers) in a
  worker process (spawn). The worker searches in slices and, after each slice, computes the cost
  of what it found itself (the cost tracking is part of the SUT, as the spec asks) and reports
  every improvement at once over a pipe, stamped by its own clock. It stops at the timeout; the
  parent kills it if it has not said "done" by the timeout plus a grace period.
- ``loihi2``: the Lava shim (``firmware/loihi2/shim.py``, run by ``.venv-lava``'s Python) driven
  with the DUT protocol's QUBO commands over its stdio; a solve that outlives its deadline gets
  the shim's whole process group killed.

Times in a `SolveResult` come from the SUT's own clock (``timer="sut"``): the worker's
monotonic clock, or the shim's microsecond timer.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from drivers.errors import DeviceError, DeviceTimeout
from protocols.dut.codec import CAP_POWER, CAP_SIMPOWER
from rig.bench.worker import SUT_NAMES  # the names bench, sweep and worker files use
from rig.errors import RigError
from rig.qubo.workloads import Workload, cost, qubo_terms

#: Names `open_sut` knows.
#: Default time the parent waits past the timeout before it kills a worker that did not stop.
DEFAULT_GRACE_S = 1.0
#: Default deadline for a worker to start and build its model (large graphs take a while).
DEFAULT_LOAD_TIMEOUT_S = 300.0
#: How often a worker checks that its parent is still there [s].
PARENT_POLL_S = 0.2
#: A slice is never shorter than this, nor longer than this fraction of the timeout (so that an
#: improvement is reported soon after it is found) or `_SLICE_MAX_S`.
_SLICE_MIN_S = 1e-3
_SLICE_FRACTION = 0.05
_SLICE_MAX_S = 1.0
#: Keep this share of a slice's predicted length free, against calibration error.
_SAFETY = 0.8
#: At most this many tabu iterations in one slice shorter than the solver's 1 ms resolution.
_MAX_SLICE_ITERATIONS = 1_000_000
#: Power sources of the Loihi 2 shim: its chip's profiler, or the stand-in for it (tests). The
#: profiler's units are read as public scripts read them (firmware/loihi2/shim.py) but no lab has
#: checked them on a chip: the label says so wherever the source is shown, until one does.
LOIHI_PROFILER = "loihi-profiler (unverified on hardware)"
LOIHI_PROFILER_SIMULATED = "loihi-profiler (SIMULATED)"
#: Loihi 2 shim: where it lives (relative to the repository) and its environment's Python.
REPO = Path(__file__).resolve().parents[2]
LAVA_PYTHON = REPO / ".venv-lava" / "bin" / "python"
LOIHI2_SHIM = REPO / "firmware" / "loihi2" / "shim.py"


class SutError(DeviceError):
    """A SUT could not load a workload or solve it (refused, crashed, out of memory)."""


class SutHung(DeviceTimeout):
    """A SUT did not finish a solve by its deadline and was killed."""


@dataclass
class SolveResult:
    """One solve: the best cost and state, and when each improvement was found.

    `improvements` are (seconds after the solve started, cost) in time order, by the SUT's own
    clock; `elapsed_s` is how long the solver ran; `timer` says which clock ("sut");
    `steps` counts algorithm steps where the SUT has them (sweeps, Lava time steps);
    `load_s` is the SUT's load before this solve's clock started (Lava: building, compiling and
    starting the seeded network), by the SUT's clock, None where the SUT does not say.
    `power_w` and `energy_j` are the SUT's own average power over the solve and the energy it
    gives over `elapsed_s` (the Loihi 2 profiler), None where the SUT does not measure them.
    `cpu_s` is the CPU time the solver's thread got over `elapsed_s` (CPU SUTs; None elsewhere):
    well under `elapsed_s`, the host kept the solver waiting, so its result understates the SUT.
    """

    best_cost: int
    best_state: np.ndarray
    improvements: list[tuple[float, int]] = field(default_factory=list)
    elapsed_s: float = 0.0
    timer: str = "sut"
    steps: int | None = None
    load_s: float | None = None
    power_w: float | None = None
    energy_j: float | None = None
    cpu_s: float | None = None


class QuboSut(Protocol):
    """What a procedure needs from a system under test."""

    name: str
    #: What measures its power: "rapl", "nvml", "loihi-profiler" (its stand-in: "loihi-profiler
    #: (SIMULATED)"), an EMON name, "unavailable".
    power_source: str

    def load(self, workload: Workload) -> None:
        """Put the graph into the SUT (before the clock of a solve starts)."""

    def solve(self, timeout_s: float, seed: int) -> SolveResult:
        """Solve the loaded graph for `timeout_s` of wall-clock time with solver seed `seed`."""

    def close(self) -> None:
        """Release the SUT (stop its process)."""


def _check_timeout(timeout_s: float) -> None:
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise RigError(f"solve timeout must be a positive number of seconds, not {timeout_s!r}",
                       hint="use e.g. 0.001 .. 100")


# -- the CPU worker (runs in the spawned process) -----------------------------------------------
def calibrate_steps(
    short: Callable[[], float], long: Callable[[], float], extra_steps: int, rounds: int = 3
) -> tuple[float, float]:
    """(time of `short`, time per step) from two timed calls that differ by `extra_steps` steps.

    The two are measured in turns and each keeps its fastest, so one burst of load on the host
    hits both alike. When noise still leaves the long call no slower than the short one, the step
    is bounded from above by the long call's whole time: a step estimated too long only makes
    slices shorter, one estimated near zero (as before) sized a slice of a billion steps.
    """
    short_s = long_s = math.inf
    for _ in range(rounds):
        short_s = min(short_s, short())
        long_s = min(long_s, long())
    step_s = (long_s - short_s) / extra_steps
    if step_s <= 0.1 * long_s / extra_steps:
        step_s = long_s / extra_steps
    return short_s, step_s


class _Search:
    """One solver in the worker: built at load, calibrated, then run slice by slice."""

    def slice(self, start: np.ndarray, budget_s: float, seed: int) -> tuple[np.ndarray, int] | None:
        """Search for at most `budget_s`; the state found and its steps (None: no room)."""
        raise NotImplementedError


def _physical_memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class _TabuSearch(_Search):
    """D-Wave's multi-start tabu search on the dense Q (its C++ core keeps a dense matrix)."""

    def __init__(self, workload: Workload, memory_limit_bytes: int | None) -> None:
        from dwave.samplers.tabu import TabuSearch  # in the worker only: dimod is heavy

        n = workload.nodes
        # numpy's matrix, the solver's copy of it, and its restart matrix: three n x n doubles.
        need = 3 * 8 * n * n
        limit = memory_limit_bytes or _physical_memory_bytes() // 2
        if need > limit:
            raise MemoryError(
                f"cpu-tabu keeps dense {n}x{n} matrices: {need / 1e9:.1f} GB needed, "
                f"limit {limit / 1e9:.1f} GB"
            )
        self._tabu = TabuSearch
        q = np.zeros((n, n), dtype=np.float64)
        q[np.diag_indices(n)] = -1.0
        i, j = workload.edges[:, 0], workload.edges[:, 1]
        q[i, j] = 4.0  # the solver wants Q symmetric: 8 x_i x_j split over both triangles
        q[j, i] = 4.0
        self._q = q
        self._tenure = min(20, n // 4)  # dwave's default
        # Calibrate: the fixed cost of a call (copying Q into the solver) and of one iteration,
        # so that a slice shorter than the solver's 1 ms time resolution can run by iterations.
        zero = np.zeros(n, dtype=np.intc)
        iters = 2000
        self.setup_s, self.iteration_s = calibrate_steps(
            lambda: self._timed(zero, 0), lambda: self._timed(zero, iters), iters
        )

    def _timed(self, start: np.ndarray, iterations: int) -> float:
        t = time.perf_counter()
        self._tabu(self._q, start, self._tenure, -1, 0, 0, None, 0, 0, iterations)
        return time.perf_counter() - t

    def slice(self, start: np.ndarray, budget_s: float, seed: int) -> tuple[np.ndarray, int] | None:
        init = start.astype(np.intc)
        work_s = budget_s - self.setup_s
        # The solver's time limit counts whole milliseconds and stops only once it is exceeded:
        # a limit of k ms runs for up to k + 1 ms.
        ms = math.floor(work_s * 1e3) - 1
        if ms >= 0:
            r = self._tabu(self._q, init, self._tenure, ms, 1_000_000, seed)
        else:
            # Calibrated on a quiet start: leave half the room free.
            iterations = min(int(0.5 * work_s / self.iteration_s), _MAX_SLICE_ITERATIONS)
            if iterations < 1:
                return None
            # A 0 ms limit too: the solver stops at the next millisecond tick whatever the
            # calibration said, so a bad calibration cannot turn a slice into a hang.
            r = self._tabu(self._q, init, self._tenure, 0, 0, seed, None, 0, 0, iterations)
        return np.asarray(r.bestSolution(), dtype=bool), 0


class _Annealing(_Search):
    """D-Wave's simulated annealing: independent anneals whose length doubles each slice.

    Sweeps are not time-based, so each anneal's sweep count is sized from a calibrated time per
    sweep to fit the slice.
    """

    def __init__(self, workload: Workload) -> None:
        from dwave.samplers.sa.simulated_annealing import simulated_annealing

        self._anneal = simulated_annealing
        n = workload.nodes
        i = workload.edges[:, 0].astype(np.intc)
        j = workload.edges[:, 1].astype(np.intc)
        degree = np.bincount(np.concatenate([i, j]), minlength=n)
        # x = (s + 1) / 2 turns -x_i + 8 x_i x_j into h_i = -1/2 + 2 deg_i, J_ij = 2.
        self._h = -0.5 + 2.0 * degree
        self._i, self._j = i, j
        self._w = np.full(len(i), 2.0)
        # Hot: the largest flip cost is accepted half the time; cold: the smallest (1) almost
        # never (1 %).
        biggest = float(np.max(2.0 * (np.abs(self._h) + 2.0 * degree))) if n else 1.0
        self._hot, self._cold = math.log(2.0) / max(biggest, 1.0), math.log(100.0)
        self._n = n
        rng = np.random.default_rng(0)
        fixed_s, self.sweep_s = calibrate_steps(
            lambda: self._timed(rng, 8), lambda: self._timed(rng, 72), 64
        )
        self.setup_s = max(fixed_s - 8 * self.sweep_s, 0.0)
        self.sweeps = 16  # the next anneal's length; doubles after every anneal

    def _run(self, rng: np.random.Generator, sweeps: int, seed: int) -> np.ndarray:
        states = (2 * rng.integers(0, 2, size=(1, self._n)) - 1).astype(np.int8)
        betas = np.geomspace(self._hot, self._cold, num=sweeps)
        samples, _ = self._anneal(1, self._h, self._i, self._j, self._w, 1, betas, seed, states)
        return samples[0] > 0

    def _timed(self, rng: np.random.Generator, sweeps: int) -> float:
        t = time.perf_counter()
        self._run(rng, sweeps, 0)
        return time.perf_counter() - t

    def slice(self, start: np.ndarray, budget_s: float, seed: int) -> tuple[np.ndarray, int] | None:
        fits = int(_SAFETY * (budget_s - self.setup_s) / self.sweep_s)
        sweeps = min(self.sweeps, fits)
        if sweeps < 2:
            return None
        if sweeps == self.sweeps:
            self.sweeps *= 2
        return self._run(np.random.default_rng(seed), sweeps, seed), sweeps


def _pack(state: np.ndarray) -> bytes:
    return np.packbits(state, bitorder="little").tobytes()


def _unpack(data: bytes, n: int) -> np.ndarray:
    return np.unpackbits(np.frombuffer(data, dtype=np.uint8), count=n, bitorder="little").astype(
        bool
    )


def _solve_in_worker(
    conn: Connection, search: _Search, workload: Workload, timeout_s: float, seed: int
) -> None:
    """Search until the timeout; report each improvement as it is found, then "done"."""
    n = workload.nodes
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    cpu0 = time.thread_time()
    deadline = t0 + timeout_s
    best = np.zeros(n, dtype=bool)  # the trivial state, cost 0, is where every solve starts
    best_cost = 0
    conn.send(("improve", 0.0, 0, _pack(best)))
    steps = 0
    slice_max = min(max(_SLICE_FRACTION * timeout_s, _SLICE_MIN_S), _SLICE_MAX_S)
    length = _SLICE_MIN_S
    while True:
        left = deadline - time.perf_counter()
        found = search.slice(best, min(length, left), int(rng.integers(2**32)))
        if found is None:
            break
        length = min(2 * length, slice_max)
        state, k = found
        t = time.perf_counter() - t0
        if t > timeout_s:
            break  # found after the timeout: not part of this solve
        steps += k
        c = int(cost(workload, state))  # the SUT's own cost tracking
        if c < best_cost:
            best, best_cost = state, c
            conn.send(("improve", t, c, _pack(state)))
    conn.send(("done", time.perf_counter() - t0, steps, time.thread_time() - cpu0))


def exit_with_parent(poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """In a worker process: end it, quietly, as soon as its parent is gone.

    A parent killed with SIGKILL cannot stop its worker, and a worker in the middle of a long
    solve would otherwise run to its timeout and then die on a broken pipe with a traceback.
    A daemon thread watches the parent pid (a dead parent's children are re-parented) and
    calls `os._exit(0)`: no traceback, no cleanup that could print.
    """
    known = multiprocessing.parent_process()  # the pid the parent had when it started us
    parent = known.pid if known is not None and known.pid else os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(0)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


def solver_worker(conn: Connection, algorithm: str, options: dict[str, Any]) -> None:
    """The worker process: ``load`` a workload, ``solve`` it (repeatedly), ``quit``.

    It ends quietly when the parent goes away: at once if the parent process dies (see
    `exit_with_parent`), and on a closed pipe (EOF, broken pipe) wherever it notices one.
    """
    exit_with_parent()
    try:
        _serve(conn, algorithm, options)
    except (EOFError, OSError):  # the pipe to the parent is gone (broken pipe, reset)
        return


def _serve(conn: Connection, algorithm: str, options: dict[str, Any]) -> None:
    """Answer the parent's messages until ``quit`` or the end of the pipe."""
    search: _Search | None = None
    workload: Workload | None = None
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return  # the parent went away
        try:
            if message[0] == "quit":
                return
            if message[0] == "load":
                search = workload = None  # free the old model before building the new one
                workload = message[1]
                if algorithm == "tabu":
                    search = _TabuSearch(workload, options.get("memory_limit_bytes"))
                else:
                    search = _Annealing(workload)
                conn.send(("loaded", {"setup_s": search.setup_s}))
            elif message[0] == "solve":
                if search is None or workload is None:
                    raise RuntimeError("no workload loaded")
                _solve_in_worker(conn, search, workload, message[1], message[2])
        except (EOFError, BrokenPipeError, ConnectionResetError):
            raise  # the parent is gone: nobody to report to
        except (Exception, MemoryError) as exc:  # reported to the parent, which raises it
            search = workload = None
            conn.send(("error", f"{type(exc).__name__}: {exc}"))


# -- the CPU SUT (parent side) -------------------------------------------------------------------
class CpuSut:
    """``cpu-tabu`` or ``cpu-sa``: a D-Wave sampler in a spawned worker with a hard deadline.

    `worker` is the worker's entry point (tests pass a stand-in); `grace_s` how long past the
    timeout the parent waits for "done" before it kills the worker.
    """

    def __init__(
        self,
        name: str,
        *,
        grace_s: float = DEFAULT_GRACE_S,
        load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S,
        memory_limit_bytes: int | None = None,
        worker: Callable[[Connection, str, dict[str, Any]], None] = solver_worker,
        power_source: str = "rapl",
    ) -> None:
        if name not in ("cpu-tabu", "cpu-sa"):
            raise RigError(f"unknown CPU SUT {name!r}", hint="use cpu-tabu or cpu-sa")
        self.name = name
        self.power_source = power_source
        self.grace_s = grace_s
        self.load_timeout_s = load_timeout_s
        self._algorithm = "tabu" if name == "cpu-tabu" else "sa"
        self._options: dict[str, Any] = {"memory_limit_bytes": memory_limit_bytes}
        self._worker_fn = worker
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self.workload: Workload | None = None
        #: How long the last load took (host clock: sending the graph, building, calibrating).
        self._load_s: float | None = None

    @property
    def pid(self) -> int | None:
        """The worker's process id (None when there is none)."""
        return self._process.pid if self._process is not None else None

    def _start(self) -> Connection:
        if self._process is not None and self._process.is_alive() and self._conn is not None:
            return self._conn
        self._stop_worker()
        ctx = multiprocessing.get_context("spawn")  # no fork: the parent may have threads
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=self._worker_fn, args=(child, self._algorithm, self._options),
            name=f"{self.name}-worker", daemon=True,
        )
        process.start()
        child.close()
        self._process, self._conn = process, parent
        return parent

    def load(self, workload: Workload) -> None:
        """Start the worker if needed, send the graph, wait until it is built and calibrated."""
        self.workload = None
        conn = self._start()
        started = time.perf_counter()
        conn.send(("load", workload))
        reply = self._receive(time.monotonic() + self.load_timeout_s, "load")
        self._load_s = time.perf_counter() - started
        if reply is None:
            self._stop_worker()
            raise SutHung(
                f"{self.name} did not load {workload!r} within {self.load_timeout_s:g} s; "
                "worker killed",
                hint="the graph may be too large for this host: raise load_timeout_s or use a "
                "smaller workload",
            )
        self.workload = workload

    def solve(self, timeout_s: float, seed: int) -> SolveResult:
        """Solve for `timeout_s`; the worker reports improvements as it finds them."""
        _check_timeout(timeout_s)
        if self.workload is None or self._conn is None:
            raise RigError(f"{self.name}: solve before a workload was loaded",
                           hint="call load(workload) first")
        n = self.workload.nodes
        self._conn.send(("solve", float(timeout_s), int(seed)))
        deadline = time.monotonic() + timeout_s + self.grace_s
        improvements: list[tuple[float, int]] = []
        best_state: np.ndarray | None = None
        while True:
            reply = self._receive(deadline, "solve")
            if reply is None:
                self._stop_worker()
                self.workload = None
                raise SutHung(
                    f"{self.name} did not stop within its {timeout_s:g} s timeout + "
                    f"{self.grace_s:g} s grace; worker killed",
                    hint="the solver ignored its time limit; load the workload again to retry",
                )
            if reply[0] == "improve":
                _, t, c, packed = reply
                improvements.append((float(t), int(c)))
                best_state = _unpack(packed, n)
            elif reply[0] == "done":
                _, elapsed, steps, cpu_s = reply
                break
        if best_state is None:
            raise SutError(f"{self.name} finished without any state",
                           hint="the worker is broken: report this")
        best_cost = improvements[-1][1]
        return SolveResult(best_cost, best_state, improvements, float(elapsed), "sut",
                           int(steps) if self._algorithm == "sa" else None, self._load_s,
                           cpu_s=float(cpu_s))

    def _receive(self, deadline: float, what: str) -> tuple | None:
        """The worker's next message, or None if it sent none by `deadline`."""
        assert self._conn is not None
        left = deadline - time.monotonic()
        try:
            if left <= 0 or not self._conn.poll(left):
                return None
            reply = self._conn.recv()
        except (EOFError, OSError):
            code = self._process.exitcode if self._process is not None else None
            self._stop_worker()
            self.workload = None
            raise SutError(
                f"{self.name}: the worker died during {what} (exit code {code})",
                hint="it may have run out of memory: try a smaller workload",
            ) from None
        if reply[0] == "error":
            self.workload = None
            raise SutError(f"{self.name} failed to {what}: {reply[1]}",
                           hint="see the message; a MemoryError means the graph is too large")
        return reply

    def _stop_worker(self) -> None:
        process, conn = self._process, self._conn
        self._process = self._conn = None
        if conn is not None:
            conn.close()
        if process is not None:
            if process.is_alive():
                process.kill()
            process.join(5.0)

    def close(self) -> None:
        """Ask the worker to quit; kill it if it does not. Idempotent."""
        if self._conn is not None and self._process is not None and self._process.is_alive():
            try:
                self._conn.send(("quit",))
                self._process.join(1.0)
            except OSError:
                pass
        self._stop_worker()
        self.workload = None

    def __enter__(self) -> CpuSut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- Loihi 2 through the Lava shim ---------------------------------------------------------------
class Loihi2Sut:
    """The Lava shim as a SUT, over the DUT protocol's ``qload`` / ``qsolve`` / ``qresult``.

    `margin_s` is how long past the timeout the rig waits for ``qsolve`` to finish (Lava builds
    and starts a seeded network before each solve's clock starts: that load is reported as
    `load_s`) before the watchdog kills the shim's process group.
    """

    name = "loihi2"

    def __init__(
        self,
        *,
        python: str | os.PathLike[str] = LAVA_PYTHON,
        shim: str | os.PathLike[str] = LOIHI2_SHIM,
        margin_s: float = 60.0,
        boot_timeout_s: float = 120.0,
        hyperparameters: dict[str, Any] | None = None,
    ) -> None:
        import json

        from drivers.dut.client import DutClient
        from drivers.process import ProcessTransport

        if not Path(python).exists():
            raise RigError(
                f"loihi2: no Lava environment at {python}",
                hint="run `make lava-env` (Python 3.10, lava-nc 0.9.0, lava-optimization 0.4.0)",
            )
        self.margin_s = margin_s
        #: Over the shim's defaults (a tuning file's entry); recorded with each point.
        self.hyperparameters = dict(hyperparameters or {})
        argv = [os.fspath(python), os.fspath(shim)]
        if self.hyperparameters:
            argv += ["--hyperparameters", json.dumps(self.hyperparameters, sort_keys=True)]
        self._transport = ProcessTransport(argv, name="loihi2", cwd=REPO)
        self._client = DutClient(self._transport, name="loihi2 shim")
        try:
            self._client.wait_for_boot(boot_timeout_s)
            caps = self._client.negotiate()
            self.info = self._client.identify()
        except BaseException:
            self._transport.close()
            raise
        # The shim offers its profiler's power only on Loihi hardware (lava-loihi present), or
        # a stand-in's, which it says is simulated (`simpower`).
        self.power_source = (LOIHI_PROFILER_SIMULATED if CAP_SIMPOWER in caps
                             else LOIHI_PROFILER if CAP_POWER in caps else "unavailable")
        self.workload: Workload | None = None

    def load(self, workload: Workload) -> None:
        """``qload`` the graph's terms (verified by the client)."""
        self.workload = None
        self._client.qubo_load(workload.nodes, qubo_terms(workload))
        self.workload = workload

    def solve(self, timeout_s: float, seed: int) -> SolveResult:
        """``qsolve`` then ``qresult``; the shim's timer gives every time."""
        _check_timeout(timeout_s)
        if self.workload is None:
            raise RigError("loihi2: solve before a workload was loaded",
                           hint="call load(workload) first")
        timeout_us = max(1, round(timeout_s * 1e6))
        deadline = timeout_s + self.margin_s
        try:
            with self._transport.watchdog(deadline + 5.0):
                elapsed_us = self._client.qubo_solve(timeout_us, seed & 0xFFFFFFFF,
                                                     deadline_s=deadline)
                result = self._client.qubo_result()
        except DeviceTimeout as exc:
            self._transport.kill()
            self.workload = None
            raise SutHung(
                f"loihi2 did not finish a {timeout_s:g} s solve within {deadline:g} s; "
                "its process group was killed",
                hint="Lava's scif model can hang in a child process: start the SUT again",
            ) from exc
        improvements = [(t / 1e6, int(c)) for t, c in result.improvements]
        # the client has both lines or neither (it refuses one without the other)
        measured = self.power_source != "unavailable"
        power_uw, energy_uj = (result.power_uw, result.energy_uj) if measured else (None, None)
        return SolveResult(
            int(result.best_cost), result.state, improvements, elapsed_us / 1e6, "sut",
            result.steps, None if result.load_us is None else result.load_us / 1e6,
            power_w=None if power_uw is None else power_uw / 1e6,
            energy_j=None if energy_uj is None else energy_uj / 1e6,
        )

    def close(self) -> None:
        """Stop the shim (terminate, then kill its group)."""
        self._transport.close()

    def __enter__(self) -> Loihi2Sut:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_sut(name: str, **options: Any) -> QuboSut:
    """Open a SUT by name: "cpu-tabu", "cpu-sa" or "loihi2" (options go to its class).

    A CPU SUT's power source is RAPL even on a host that has none: the power meter then says
    why there is none and what to enable (a VM: RAPL passthrough; the counters: read access)."""
    if name in ("cpu-tabu", "cpu-sa"):
        return CpuSut(name, **options)
    if name == "loihi2":
        return Loihi2Sut(**options)
    raise RigError(f"unknown SUT {name!r}", hint=f"use one of {', '.join(SUT_NAMES)}")
