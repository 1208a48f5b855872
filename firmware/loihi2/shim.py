"""Loihi 2 DUT shim: solves QUBOs with Lava and speaks the rig's DUT protocol over stdio.

Run it with the Lava environment's Python (`make lava-env`: Python 3.10, lava-nc 0.9.0,
lava-optimization 0.4.0); the rig starts it through `drivers.process.ProcessTransport`. It
imports only the standard library, numpy and Lava: the rig's packages need Python 3.11, so the
little of the protocol it needs (protocols/dut/SPEC.md) is written out here again.

Commands: name, profile (model qubo01), caps (bload, qubo, rcrc), db load / db <hex> / db print,
bload, timestamp (performance mode), results, qload, qsolve, qresult. See README.md for how a
wall-clock timeout becomes algorithm steps and how improvement times are obtained.

Backend: Lava's CPU simulation (nebm neurons) unless lava-loihi is importable, then Loihi 2
with its time and energy profiler. RIG_LOIHI2_BACKEND=CPU forces the CPU backend. A solve
through the profiler is ONE profiled run, then stop(), then the profiler is read
(`read_profiler`); its power is labelled unverified on hardware until a lab confirms it.
RIG_LOIHI2_STAND_IN_PROFILER_W=<watts> (tests only) runs the CPU backend with a stand-in for the
Loihi 2 profiler, a chip drawing that many watts while its network runs; the shim then says
SIMULATED in its name and `simpower` in its caps.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import threading
import time
import zlib
from typing import Any

import numpy as np

# -- protocol constants (protocols/dut/SPEC.md) ------------------------------------------------
PROFILE = "ULPMark for tinyML Firmware V0.0.1"
MODEL = "qubo01"
#: Input buffer of `db load` / `bload` (the inputs of the MLPerf Tiny models fit in it).
INPUT_CAPACITY = 65536
#: `qload` payload limit: a header plus this many terms (the CPU backend needs a dense Q anyway).
MAX_QLOAD_BYTES = 8 + 12 * 20_000_000
#: Lava gets a dense n x n matrix: refuse graphs that would not fit in memory.
MAX_VARS = int(os.environ.get("RIG_LOIHI2_MAX_VARS", "10000"))
INTER_BYTE_TIMEOUT_S = 1.0
#: How often the shim checks that the rig that started it is still there [s].
PARENT_POLL_S = 0.2
QSTATE_BYTES_PER_LINE = 32
#: Capability rcrc: after `caps`, result lines end with -crc-<CRC-32 of the text before it>.
RESULT_CRC_MARK = "-crc-"
LAP_MASK = 0xFFFFFFFF

# -- solver settings -----------------------------------------------------------------------------
#: NEBM hyperparameters (lava-optimization's QUBO tutorial values; they reach the NeuroBench
#: target on (100 nodes, 0.05, seed 0)).
HYPERPARAMETERS = {"neuron_model": "nebm", "temperature": 1, "refract": 1}
#: Steps run at `qload`, on a network built for the graph, to measure the time per step.
CALIBRATION_STEPS = 20
#: Rounds of `CALIBRATION_STEPS` timed at `qload`; the fastest counts.
CALIBRATION_ROUNDS = 3
#: Steps a network runs as part of the load: its first run also finishes starting Lava's
#: processes (several steps' time), which must not fall inside the solve's clock.
WARMUP_STEPS = 1
#: A chunk of a solve takes at most this fraction of the time left before the deadline.
CHUNK_FRACTION = 0.5
#: A chunk of at least this many steps replaces the step time; shorter ones are averaged in.
CHUNK_LEARN_STEPS = 20
#: A solve takes no further step with less than this many mean steps left. One step on Lava's
#: CPU backend (ten processes on the host's cores) takes 0.5x-3x the mean: stopping at half a
#: step overran by more than a step 2 times in 140 solves here, at 0.8 none did, and none ended
#: early by more than 0.85 of a step.
STOP_STEPS = 0.8
#: The cost probe of a solve holds this many times the steps the timeout allows at the
#: calibrated step time (a host that speeds up can run more), plus `PROBE_SPARE_STEPS`.
PROBE_FACTOR = 3.0
PROBE_SPARE_STEPS = 100
#: Most steps of a solve (the cost probe keeps one value per step).
MAX_STEPS = 50_000_000
#: Environment variable that selects the stand-in profiler (its constant power in watts).
STAND_IN_ENV = "RIG_LOIHI2_STAND_IN_PROFILER_W"
#: How the shim labels the Loihi 2 profiler's power (its name on hardware, its log) until a lab
#: with the chip confirms the readings of `read_profiler` (units and window).
POWER_LABEL = "profiler power unverified on hardware"


class Port:
    """The protocol's byte stream: commands from stdin, reply lines to the original stdout.

    fd 1 is pointed at stderr so that anything Lava or its child processes print can never
    corrupt the protocol stream; replies go to a private duplicate of the original stdout.
    """

    def __init__(self) -> None:
        self._out = os.dup(1)
        os.dup2(2, 1)
        self._in = 0
        self._buf = bytearray()
        self.eof = False

    def send(self, *lines: str) -> None:
        data = b"".join(line.encode() + b"\r\n" for line in lines)
        while data:
            data = data[os.write(self._out, data):]

    def _fill(self, timeout_s: float | None) -> bool:
        """Read what stdin has (waiting at most `timeout_s`, None: forever); False if nothing."""
        ready, _, _ = select.select([self._in], [], [], timeout_s)
        if not ready:
            return False
        chunk = os.read(self._in, 65536)
        if not chunk:
            self.eof = True
            return False
        self._buf += chunk
        return True

    def command(self) -> str | None:
        """The next `%`-terminated command, stripped; None at end of input."""
        while b"%" not in self._buf:
            if not self._fill(None) and self.eof:
                return None
        end = self._buf.index(b"%")
        text = bytes(self._buf[:end]).decode("utf-8", "replace")
        del self._buf[: end + 1]
        return " ".join(text.replace("\r", " ").replace("\n", " ").split())

    def payload(self, n: int) -> bytes:
        """Up to `n` raw bytes; fewer when the inter-byte timeout expires first."""
        while len(self._buf) < n:
            if not self._fill(INTER_BYTE_TIMEOUT_S):
                break
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


class Rejected(Exception):
    """A command refused with an `e-[...]` line (the text)."""


def parse_transfer(args: list[str], what: str, capacity: int) -> tuple[int, int]:
    """(n, crc) of `bload`/`qload` arguments; Rejected per the spec's texts."""
    ok = (len(args) == 2 and args[0].isdigit() and not args[0].startswith("0")
          and len(args[1]) == 8 and all(c in "0123456789abcdef" for c in args[1]))
    if not ok:
        raise Rejected(f"{what} bad arguments")
    n = int(args[0])
    if n > capacity:
        raise Rejected(f"{what} too large: {n} > {capacity}")
    return n, int(args[1], 16)


def receive(port: Port, n: int, crc: int, what: str) -> bytes:
    """The announced payload after the ready line, checked against its CRC-32."""
    port.send(f"m-{what}-ready-{n}")
    data = port.payload(n)
    if len(data) < n:
        raise Rejected(f"{what} timeout: got {len(data)} of {n} bytes")
    got = zlib.crc32(data)
    if got != crc:
        raise Rejected(f"{what} crc mismatch: expected {crc:08x} got {got:08x}")
    return data


def decode_terms(payload: bytes) -> tuple[int, np.ndarray]:
    """n_vars and (t, 3) int64 terms (i, j, w) of a `qload` payload; Rejected if malformed."""
    if len(payload) < 8:
        raise Rejected("qload bad graph: no 8-byte header")
    n_vars, n_terms = (int(v) for v in np.frombuffer(payload, "<u4", count=2))
    if len(payload) != 8 + 12 * n_terms:
        raise Rejected(f"qload bad graph: {n_terms} terms need {8 + 12 * n_terms} bytes, "
                       f"got {len(payload)}")
    if n_vars < 1:
        raise Rejected("qload bad graph: no variables")
    if n_vars > MAX_VARS:
        raise Rejected(f"qload bad graph: {n_vars} variables, this shim takes at most {MAX_VARS}")
    body = np.frombuffer(payload, np.dtype([("i", "<u4"), ("j", "<u4"), ("w", "<i4")]), offset=8)
    terms = np.stack([body["i"], body["j"], body["w"]], axis=1).astype(np.int64)
    if ((terms[:, 1] < terms[:, 0]) | (terms[:, 1] >= n_vars)).any():
        raise Rejected(f"qload bad graph: terms outside 0 <= i <= j < {n_vars}")
    return n_vars, terms


def qubo_cost(terms: np.ndarray, states: np.ndarray) -> np.ndarray | int:
    """cost(x) = sum w x_i x_j over the terms, for one state (n,) or many (k, n)."""
    x = np.asarray(states, dtype=np.int64)
    products = x[..., terms[:, 0]] * x[..., terms[:, 1]]
    total = products @ terms[:, 2]
    return int(total) if np.ndim(total) == 0 else total


class Problem:
    """A loaded QUBO: its terms (for the true cost) and the symmetric integer Q Lava gets.

    An off-diagonal term carries Q_ij + Q_ji; Lava's network wants a symmetric Q, so the
    weight is split in halves, and when a weight is odd the whole Q is doubled to keep it
    integer (`scale`; Lava's costs are then divided by it).
    """

    def __init__(self, n_vars: int, terms: np.ndarray) -> None:
        self.n_vars = n_vars
        self.terms = terms
        i, j, w = terms[:, 0], terms[:, 1], terms[:, 2]
        off = i != j
        self.scale = 2 if (w[off] % 2).any() else 1
        q = np.zeros((n_vars, n_vars), dtype=np.int64)
        np.add.at(q, (i[~off], i[~off]), w[~off] * self.scale)
        half = w[off] * self.scale // 2
        np.add.at(q, (i[off], j[off]), half)
        np.add.at(q, (j[off], i[off]), half)
        self.q = q
        #: No state costs less than the sum of the negative terms: a target never reached,
        #: so that Lava runs the whole step budget.
        self.unreachable = int(np.minimum(w, 0).sum()) * self.scale - 1
        #: Time per step [s], measured at `qload` and corrected by every solve (sizes chunks).
        self.step_s: float | None = None
        #: The step as `qload` measured it (its fastest round): the shortest timeout taken.
        self.shortest_step_s: float | None = None


class StandInProfiler:
    """Stands in for lava-loihi's Loihi 2 profiler (the edge of hardware we do not have; tests
    only): a chip that draws `power_w` watts while its network runs. Its power is SIMULATED,
    and labelled so.

    It answers in the forms the public code reads (see `read_profiler` for the sources):
    ``execution_time`` seconds per step, ``energy_breakdown()`` six totals in µJ and
    ``power_breakdown()`` six averages in W (total, dynamic, static, vdd, vdd_m, vdd_io; here
    all dynamic and all vdd), and ``energy`` one total, in µJ like ``energy_breakdown()[0]``
    (unconfirmed without hardware: Intel's 2022 lava-optimization docstring called it joules;
    the shim does not read it). Like the real one it allows one profiled ``run()`` (public note:
    a second raises), and it answers only after ``stop()`` (the order every public script
    follows; the stand-in enforces it, hardware may be laxer). `attach` hooks it to the solver
    process where Lava's run configuration carries the real one: the host's run of the network
    on Lava's CPU backend stands in for the chip's, each step an equal share of it.
    """

    label = "stand-in profiler, SIMULATED"

    def __init__(self, power_w: float) -> None:
        self.power_w = power_w
        self._step_s: np.ndarray | None = None
        self._runs = 0
        self._stopped = False

    def attach(self, process: Any) -> None:
        """Profile `process`'s runs: its ``run`` and ``stop`` go through the stand-in."""
        run, stop = process.run, process.stop

        def profiled_run(*args: object, condition: Any, **kwargs: object) -> None:
            if self._runs:
                raise RuntimeError("stand-in Loihi 2 profiler: one profiled run() per network "
                                   "(a second raises on the chip too)")
            self._runs += 1
            start = time.perf_counter_ns()
            run(*args, condition=condition, **kwargs)
            steps = int(condition.num_steps)
            seconds = (time.perf_counter_ns() - start) / 1e9
            self._step_s = np.full(steps, seconds / steps)

        def profiled_stop() -> None:
            stop()
            self._stopped = True

        process.run, process.stop = profiled_run, profiled_stop

    def _after_stop(self) -> np.ndarray:
        if not self._stopped or self._step_s is None:
            raise RuntimeError("stand-in Loihi 2 profiler: read it after the profiled run() "
                               "and stop(), as the public scripts do")
        return self._step_s

    @property
    def execution_time(self) -> np.ndarray:
        return self._after_stop().copy()

    def power_breakdown(self) -> tuple[float, float, float, float, float, float]:
        self._after_stop()
        p = float(self.power_w)
        return p, p, 0.0, p, 0.0, 0.0

    def energy_breakdown(self) -> tuple[float, float, float, float, float, float]:
        e_uj = self.power_w * float(np.sum(self._after_stop())) * 1e6
        return e_uj, e_uj, 0.0, e_uj, 0.0, 0.0

    @property
    def energy(self) -> float:
        return self.energy_breakdown()[0]


def stand_in_power(environ: dict[str, str]) -> float | None:
    """The stand-in profiler's watts from `STAND_IN_ENV`, None when unset; SystemExit if bad."""
    text = environ.get(STAND_IN_ENV, "").strip()
    if not text:
        return None
    try:
        watts = float(text)
    except ValueError:
        watts = float("nan")
    if not (np.isfinite(watts) and watts > 0):
        raise SystemExit(f"loihi2 shim: {STAND_IN_ENV}={text!r} is not a power in watts > 0 "
                         "(the stand-in profiler's constant power; unset it for real runs)")
    return watts


#: The profiler's two readings of the run's time, Σ execution_time and energy / power, must agree
#: within this factor, else the units assumed below are wrong (a µJ/J mix-up is a factor 10^6)
#: and the power is not reported.
UNIT_CHECK_FACTOR = 2.0


class Profile:
    """What the Loihi 2 profiler (or its stand-in) measured over a solve's one profiled run."""

    def __init__(self, step_times_s: np.ndarray | None, power_w: float | None,
                 energy_uj: float | None, note: str = "") -> None:
        #: Seconds per step (None: the profiler gave none for every step).
        self.step_times_s = step_times_s
        #: The run's average power [W]; None when missing or failing the unit check.
        self.power_w = power_w
        #: The run's energy [µJ], as the profiler totals it.
        self.energy_uj = energy_uj
        #: Why a reading is missing or was refused ("" when all is well).
        self.note = note


def read_profiler(profiler: Any, steps: int) -> Profile:
    """Read the Loihi 2 profiler after its one profiled run and ``stop()``, as the public code
    reads it. Power unverified on hardware: no lab has confirmed these readings yet.

    - ``execution_time``: seconds per step, one value a step (lava-optimization v0.4.0 and
      v0.5.0, tutorials/tutorial_01_solving_qp.ipynb: ``np.mean`` printed as "per timestep ... s",
      ``np.sum`` as the total; src/lava/lib/optimization/apps/tsp/solver.py and
      apps/clustering/solver.py: ``np.sum(report.profiler.execution_time)`` seconds).
    - ``energy_breakdown()[0]``: the run's total energy in µJ, and ``power_breakdown()[0]``:
      its average power in W, both read after ``stop()`` (NECOTIS/TemporalLearningInRSNNs,
      loihi_experiment/delay.py: ``total_time = total_energy * 10**-6 / total_power`` s).
      Unconfirmed without hardware: the unit of ``energy``, which the shim does not read
      (lava-optimization commits 42fb67b..15a7bf1, Nov. 2022, untagged: ``float(profiler.energy)``
      documented "Total energy to solution in Joule"; jasonlyik/neurobench loihi/profiling.py
      calls it ``total_energy`` and notes the energy probe "seems to be not available").

    The two readings of the run's time must agree (`UNIT_CHECK_FACTOR`): a profiler whose units
    are not those assumed gives no power rather than one off by 10^6.
    """
    if profiler is None:
        return Profile(None, None, None, "no profiler")
    times = getattr(profiler, "execution_time", None)
    step_times = None
    if times is not None and np.size(times) == steps:
        step_times = np.asarray(times, dtype=np.float64).ravel()
    try:
        energy_uj = float(profiler.energy_breakdown()[0])
        power_w = float(profiler.power_breakdown()[0])
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        return Profile(step_times, None, None,
                       f"no energy_breakdown()/power_breakdown(): {type(exc).__name__}: {exc}")
    if not (np.isfinite(power_w) and power_w > 0 and np.isfinite(energy_uj) and energy_uj >= 0):
        return Profile(step_times, None, energy_uj,
                       f"power {power_w!r} W, energy {energy_uj!r} uJ: not a measurement")
    if step_times is not None and step_times.sum() > 0:
        implied_s, timed_s = energy_uj * 1e-6 / power_w, float(step_times.sum())
        if not 1 / UNIT_CHECK_FACTOR <= implied_s / timed_s <= UNIT_CHECK_FACTOR:
            return Profile(step_times, None, energy_uj,
                           f"unit check failed: energy/power = {implied_s:.6g} s but the "
                           f"steps took {timed_s:.6g} s (energy assumed in uJ, power in W)")
    return Profile(step_times, power_w, energy_uj)


def profiled_steps(timeout_s: float, step_s: float) -> int:
    """Steps of a profiled solve: one run, sized before it starts, by the step time measured at
    `qload`. A step is taken with at least `STOP_STEPS` of it left, as the chunked solve does."""
    return int(max(1, min(timeout_s / step_s + 1.0 - STOP_STEPS, MAX_STEPS)))


class Run:
    """One Lava solve: what it found and how long it took by the shim's clock."""

    def __init__(self, elapsed_ns: int, steps: int, state: np.ndarray, best_step: int,
                 cost_series: np.ndarray, step_times_s: np.ndarray | None,
                 power_w: float | None, bounds: list[tuple[int, int]] | None = None,
                 load_ns: int = 0, steps_before_clock: int = WARMUP_STEPS) -> None:
        #: Steps run as part of the load, before the solve's clock (none on the profiled path).
        self.steps_before_clock = steps_before_clock
        #: (steps done, ns since the solve started) at each chunk boundary.
        self.bounds = bounds or [(0, 0), (steps, elapsed_ns)]
        self.load_ns = load_ns
        self.elapsed_ns = elapsed_ns
        self.steps = steps
        self.state = state
        self.best_step = best_step
        self.cost_series = cost_series
        self.step_times_s = step_times_s
        #: The profiler's average power over the solve [W], None without a profiler.
        self.power_w = power_w


class LavaSolver:
    """Runs lava-optimization's QUBO solver on the CPU backend or on Loihi 2."""

    def __init__(self, stand_in_w: float | None = None) -> None:
        from lava.lib.optimization.problems.problems import QUBO
        from lava.lib.optimization.solvers.generic.solver import OptimizationSolver, SolverConfig
        from lava.utils import loihi

        self._qubo, self._solver, self._config = QUBO, OptimizationSolver, SolverConfig
        forced = os.environ.get("RIG_LOIHI2_BACKEND", "").strip()
        # lava-loihi (not public) brings the Loihi 2 compiler and its profiler.
        #: The stand-in profiler's watts (tests only): never on hardware, always labelled.
        self.stand_in_w = stand_in_w
        self.hardware = stand_in_w is None and forced.upper() != "CPU" and loihi.is_installed()
        self.backend = "Loihi2" if self.hardware else "CPU"
        #: Solves go through the profiler (the chip's or its stand-in): one run each.
        self.profiled = self.hardware or stand_in_w is not None
        #: NEBM settings of every network built (main() puts a tuning file's entry over them).
        self.hyperparameters = dict(HYPERPARAMETERS)

    def build(self, problem: Problem, seed: int, max_steps: int,
              profiled: bool = False) -> Network:
        """Build, compile and start a network for `problem` (the SUT's load, outside any clock).

        Lava's CPU model draws its noise from numpy's global generator in processes forked
        when the runtime starts: seeding before that makes a CPU solve repeatable. The cost
        probe holds `max_steps` values, the most steps a solve on this network may run. A
        `profiled` network (only when `self.profiled`) carries the Loihi 2 profiler, or its
        stand-in, for exactly `max_steps` steps: it allows one run of them.
        """
        from lava.magma.core.run_conditions import RunSteps

        profiled = profiled and self.profiled
        probes = profiled and self.hardware
        np.random.seed(seed)
        config = self._config(
            timeout=max_steps, target_cost=problem.unreachable, backend=self.backend,
            hyperparameters=dict(self.hyperparameters), probe_cost=True,
            probe_time=probes, probe_energy=probes,
        )
        solver = self._solver(self._qubo(problem.q))
        _, run_cfg = solver._prepare_solver(config)
        solver.solver_process.create_runtime(run_cfg=run_cfg)
        if profiled and self.stand_in_w is not None:  # the same as `and not self.hardware`
            # Where lava-optimization keeps the Loihi 2 profiler on hardware.
            solver._profiler = StandInProfiler(self.stand_in_w)
            solver._profiler.attach(solver.solver_process)
        return Network(solver, config, max_steps, RunSteps,
                       solver._profiler if profiled else None)

    def calibrate(self, problem: Problem) -> float:
        """The time per step [s], measured on a network built for `problem` (at `qload`)."""
        if self.profiled:
            return self._calibrate_profiled(problem)
        network = self.build(problem, 0, CALIBRATION_ROUNDS * CALIBRATION_STEPS + 1)
        try:
            network.advance(1)  # the first run of a network also starts its processes
            # The fastest of a few rounds: one burst of host load during a single round made a
            # ~5 ms step read 10.9 ms, and a 10 ms solve was then refused as shorter than a step.
            # (A step read short costs nothing: a solve sizes its chunks from measured steps.)
            rounds = []
            for _ in range(CALIBRATION_ROUNDS):
                start = time.perf_counter_ns()
                network.advance(CALIBRATION_STEPS)
                rounds.append((time.perf_counter_ns() - start) / 1e9 / CALIBRATION_STEPS)
            step_s = min(rounds)
        finally:
            network.stop()
        print(f"calibration: {step_s * 1e3:.3f} ms/step", file=sys.stderr)
        return step_s

    def _calibrate_profiled(self, problem: Problem) -> float:
        """The chip's time per step [s]: the profiler's mean over one profiled run (the only
        run a profiled network allows), read after ``stop()``; the host's clock of that run
        when the profiler gave no time per step."""
        steps = CALIBRATION_ROUNDS * CALIBRATION_STEPS
        network = self.build(problem, 0, steps, profiled=True)
        try:
            start = time.perf_counter_ns()
            network.advance(steps)
            host_s = (time.perf_counter_ns() - start) / 1e9
        finally:
            network.stop()
        times = read_profiler(network.profiler, steps).step_times_s
        step_s = float(np.mean(times)) if times is not None else host_s / steps
        print(f"calibration (one profiled run of {steps} steps): {step_s * 1e3:.6f} ms/step",
              file=sys.stderr)
        return step_s


class Network:
    """A built and started Lava network: run it (chunk by chunk, or once when profiled), read
    what it found, stop it; a profiled network's profiler is read after that."""

    def __init__(self, solver: Any, config: Any, max_steps: int, run_steps: type,
                 profiler: Any = None) -> None:
        # Any: Lava's solver, config and profiler (lava.* has no types; tests hand in fakes)
        self.solver = solver
        self.config = config
        self.max_steps = max_steps
        self.steps = 0
        #: The Loihi 2 profiler (or its stand-in) of a profiled network: one run, then stop().
        self.profiler = profiler
        self._run_steps = run_steps
        self._stopped = False

    def advance(self, steps: int) -> None:
        """Run `steps` more algorithm steps (blocking)."""
        self.solver.solver_process.run(condition=self._run_steps(num_steps=steps, blocking=True))
        self.steps += steps

    def result(self, problem: Problem) -> tuple[np.ndarray, int, np.ndarray]:
        """(best state, best step, cost per step) of the steps run, read from the running
        network (as lava-optimization's `solve()` does, before `stop()`)."""
        solver = self.solver
        best_state, _, best_step = solver._get_results(self.config)
        series, _ = solver._get_probing(self.config)
        series = np.asarray(series, dtype=np.int64).ravel()[: self.steps]
        state = np.asarray(best_state).ravel()[: problem.n_vars] > 0.5
        return state, int(best_step), series // problem.scale

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self.solver.solver_process.stop()


def solve_until(network: Network, timeout_s: float, step_s: float,
                clock=time.perf_counter_ns) -> tuple[int, list[tuple[int, int]], float]:
    """Run `network` in chunks until `timeout_s` has passed on `clock` (ns).

    The first chunk is one step, which measures the step time on this network (the one
    `step_s` from calibration can be off by 2x); each further chunk is sized from the step time
    measured so far to end before the deadline (at most half of what is left, so a slow chunk
    cannot overshoot far; short chunks only raise the estimate, as a step slower than thought
    is what overshoots). After its first step, the solve stops when less than `STOP_STEPS` of
    this solve's mean step is left, or when the cost probe is full: the mean, not the raised
    estimate, as a solve
    ending early by more than one step falls short of its timeout as surely as one late.
    Returns (elapsed ns, [(steps done, ns since start)] at each chunk boundary, the step time
    measured).
    """
    start = clock()
    deadline = start + int(timeout_s * 1e9)
    bounds = [(0, 0), (network.steps, 0)] if network.steps else [(0, 0)]
    first = len(bounds)
    steps_before = network.steps
    while network.steps < network.max_steps:
        now = clock()
        left_s = (deadline - now) / 1e9
        ran = network.steps - steps_before
        # The first step always runs (qsolve refused a timeout shorter than one step): the
        # estimate it would be judged by is the previous solves', which a loaded host can raise
        # past the whole timeout (CI: a 10 ms solve ran no step, so over 12.5 ms).
        if ran and left_s < STOP_STEPS * (now - start) / 1e9 / ran:
            break
        # Most of the budget in big chunks; near the end, chunks of a few steps.
        k = int(max(1, min(left_s * CHUNK_FRACTION / step_s, left_s / step_s - 0.5)))
        if len(bounds) == first:
            k = 1
        k = min(k, network.max_steps - network.steps)
        t0 = clock()
        network.advance(k)
        t1 = clock()
        bounds.append((network.steps, t1 - start))
        chunk_step_s = (t1 - t0) / 1e9 / k
        if len(bounds) == first + 1 or k >= CHUNK_LEARN_STEPS:
            step_s = chunk_step_s
        else:
            step_s = max(chunk_step_s, 0.5 * (step_s + chunk_step_s))
    return clock() - start, bounds, step_s


class Result:
    """What `qresult` reports: best cost/state, when it was found, the improvements (µs)."""

    def __init__(self, cost: int, time_us: int, state: np.ndarray,
                 improvements: list[tuple[int, int]], power_w: float | None,
                 elapsed_us: int, load_us: int = 0, steps: int = 0) -> None:
        self.load_us = load_us
        self.steps = steps
        self.cost = cost
        self.time_us = time_us
        self.state = state
        self.improvements = improvements
        self.power_w = power_w
        self.elapsed_us = elapsed_us


def timeline(problem: Problem, run: Run) -> Result:
    """The best state's true cost and the improvement timeline in µs after the solve started.

    The cost is recomputed from the terms (the cost tracking belongs to the SUT, and a very
    short Lava run can report a cost its state does not have). The network was built and
    started before the clock (the load), so step k ends at the time the solve's clock read
    when k + 1 steps were done, interpolated inside the chunk that ran it. A profiled solve
    (one run, no step in the load) takes step k's end from the profiler's per-step times
    instead (their running sum); steps before the clock, if any, end at 0. Probe values below
    the best state's cost are not trusted.
    """
    best = int(qubo_cost(problem.terms, run.state))  # one state: an int already
    steps = max(run.steps, 1)
    if run.step_times_s is not None:
        times = np.asarray(run.step_times_s, dtype=np.float64).copy()
        times[: run.steps_before_clock] = 0.0
        ends = np.cumsum(times)
    else:
        done, at_ns = (np.array(v, dtype=np.float64) for v in zip(*run.bounds, strict=True))
        ends = np.interp(np.arange(1, steps + 1), done, at_ns) / 1e9
    ends_us = np.minimum(np.round(ends * 1e6).astype(np.int64), run.elapsed_ns // 1000)
    best_step = min(max(run.best_step, 0), steps - 1)
    series = run.cost_series[: best_step + 1]
    big = np.iinfo(np.int64).max
    trusted = np.where(series >= best, series, big)
    running = np.minimum.accumulate(trusted)
    previous = np.concatenate([[big], running[:-1]])
    at = np.flatnonzero(running < previous)
    improvements = [(int(ends_us[k]), int(running[k])) for k in at]
    if not improvements or improvements[-1][1] != best:
        improvements.append((int(ends_us[best_step]), best))
    return Result(best, improvements[-1][0], run.state, improvements, run.power_w,
                  int(run.elapsed_ns // 1000), int(run.load_ns // 1000), run.steps)


class Shim:
    """The DUT: command dispatch and state (input buffer, loaded QUBO, last result)."""

    def __init__(self, port: Port, solver: LavaSolver) -> None:
        self.port = port
        self.solver = solver
        self.boot_ns = time.perf_counter_ns()
        self.buffer = bytearray()
        self.expected = 0
        self.problem: Problem | None = None
        self.result: Result | None = None
        #: rcrc: result lines carry their CRC-32 once the host has asked `caps`.
        self.result_crc = False

    def checked(self, line: str) -> str:
        """A result line, with its CRC-32 once the host has asked `caps` (SPEC.md: rcrc)."""
        if not self.result_crc:
            return line
        return f"{line}{RESULT_CRC_MARK}{zlib.crc32(line.encode('ascii')) & 0xFFFFFFFF:08x}"

    def lap_us(self) -> int:
        return (time.perf_counter_ns() - self.boot_ns) // 1000 & LAP_MASK

    def handle(self, text: str) -> None:
        """Run one command and always end its reply with `m-ready`."""
        words = text.split(" ") if text else [""]
        handler = getattr(self, "do_" + words[0], None) if words[0].isalpha() else None
        try:
            if handler is None:
                raise Rejected(f"Unknown command: {text}")
            handler(words[1:])
        except Rejected as refusal:
            self.port.send(f"e-[{refusal}]")
        self.port.send("m-ready")

    # -- MLPerf Tiny commands -----------------------------------------------------------------
    def do_name(self, args: list[str]) -> None:
        vendor = (f"intel loihi2-hw lava, {POWER_LABEL}" if self.solver.hardware
                  else "intel lava-cpu")
        if self.solver.stand_in_w is not None:
            vendor += f", {StandInProfiler.label}"
        self.port.send(f"m-name-loihi2-[{vendor}]")

    def do_profile(self, args: list[str]) -> None:
        self.port.send(f"m-profile-[{PROFILE}]", f"m-model-[{MODEL}]")

    def do_timestamp(self, args: list[str]) -> None:
        self.port.send(f"m-lap-us-{self.lap_us()}")

    def do_results(self, args: list[str]) -> None:
        self.port.send(self.checked("m-results-[]"))  # no inference model here

    def do_db(self, args: list[str]) -> None:
        if args[:1] == ["load"]:
            arg = args[1] if len(args) > 1 else ""
            if not arg.isdigit() or int(arg) < 1:
                raise Rejected(f"Invalid byte count '{arg}'")
            if int(arg) > INPUT_CAPACITY:
                raise Rejected(f"Cannot load {arg} bytes: the buffer holds {INPUT_CAPACITY}")
            self.expected, self.buffer = int(arg), bytearray()
            self.port.send(f"m-[Expecting {arg} bytes]")
        elif args[:1] == ["print"]:
            lines = [self.buffer[k:k + 16] for k in range(0, len(self.buffer), 16)] or [bytearray()]
            self.port.send(*("m-buffer-" + "-".join(f"{b:02x}" for b in line) for line in lines))
        elif len(args) == 1:
            digits = args[0]
            if len(digits) % 2:
                raise Rejected("Insufficent number of hex digits")  # sic: the firmware's text
            try:
                data = bytes.fromhex(digits)
            except ValueError:
                raise Rejected(f"Invalid hex digit '{digits[:2]}'") from None
            if len(self.buffer) + len(data) > self.expected:
                raise Rejected(f"Buffer overflow: more than the {self.expected} bytes announced")
            self.buffer += data
            if len(self.buffer) == self.expected:
                self.port.send("m-load-done")
        else:
            raise Rejected(f"Unknown command: db {' '.join(args)}")

    # -- rig extensions -----------------------------------------------------------------------
    def do_caps(self, args: list[str]) -> None:
        words = "bload,qubo,rcrc,power" if self.solver.hardware else "bload,qubo,rcrc"
        if self.solver.stand_in_w is not None:
            words += ",power,simpower"  # the power is the stand-in's: SIMULATED
        self.result_crc = True
        self.port.send("m-timestamp-mode-performance", f"m-caps-[{words}]")

    def do_bload(self, args: list[str]) -> None:
        n, crc = parse_transfer(args, "bload", INPUT_CAPACITY)
        self.buffer = bytearray(receive(self.port, n, crc, "bload"))
        self.expected = n
        self.port.send(f"m-bload-done-{crc:08x}")

    def do_qload(self, args: list[str]) -> None:
        n, crc = parse_transfer(args, "qload", MAX_QLOAD_BYTES)
        payload = receive(self.port, n, crc, "qload")
        self.problem, self.result = None, None
        n_vars, terms = decode_terms(payload)
        problem = Problem(n_vars, terms)
        try:  # a network built for the graph measures the time per step
            problem.step_s = problem.shortest_step_s = self.solver.calibrate(problem)
        except Exception as exc:  # Lava's own failures: report them, keep serving
            raise Rejected(f"qload failed: {type(exc).__name__}: {exc}") from exc
        self.problem = problem
        self.port.send(f"m-qload-done-{n_vars}-{len(terms)}")

    def do_qsolve(self, args: list[str]) -> None:
        ok = len(args) == 2 and all(a.isdigit() for a in args)
        if not ok or int(args[0]) < 1 or int(args[1]) > LAP_MASK:
            raise Rejected("qsolve bad arguments")
        if self.problem is None:
            raise Rejected("qsolve no graph loaded")
        timeout_s, seed = int(args[0]) / 1e6, int(args[1])
        problem = self.problem
        step_s = problem.step_s or 0.0
        # Against the step as measured at qload, not as corrected since: one solve on a host
        # under load raised the figure to 13.5 ms here, and a 10 ms solve was refused.
        shortest_s = problem.shortest_step_s or step_s
        if timeout_s < shortest_s:
            raise Rejected(f"qsolve timeout {int(args[0])} us is shorter than one step "
                           f"({shortest_s * 1e6:.0f} us on this graph)")
        self.result = None
        if self.solver.profiled:
            # Sized by the chip's step as the profiler measured it at qload (a host's load does
            # not slow the chip; the stand-in's steps also carry Lava CPU's start-up).
            run, measured = self._solve_profiled(problem, timeout_s, seed, shortest_s)
        else:
            run, measured = self._solve_chunked(problem, timeout_s, seed, step_s)
            problem.step_s = 0.5 * (step_s + measured)  # Lava's speed drifts with host load
        self.result = timeline(problem, run)
        print(f"qsolve: {run.steps} steps in {run.elapsed_ns / 1e9:.4f} s of {timeout_s:.4f} s "
              f"(load {run.load_ns / 1e9:.3f} s, {measured * 1e3:.3f} ms/step)", file=sys.stderr)
        self.port.send(f"m-qsolve-done-{self.result.elapsed_us}")

    def _solve_chunked(self, problem: Problem, timeout_s: float, seed: int,
                       step_s: float) -> tuple[Run, float]:
        """Lava's CPU backend without a profiler: run in chunks until the shim's clock has
        spent the timeout (`solve_until`); (the run, the step time it measured)."""
        max_steps = int(min(timeout_s / step_s * PROBE_FACTOR + PROBE_SPARE_STEPS, MAX_STEPS))
        network = None
        try:
            # The load: build, compile and start the seeded network, before the clock. Lava's
            # processes finish starting during the first run (4-12 ms more than a step here),
            # so the load runs the network's first step too: the solve's clock then pays steps
            # only, and that one step is reported at time 0.
            load_start = time.perf_counter_ns()
            network = self.solver.build(problem, seed, max_steps)
            network.advance(WARMUP_STEPS)
            load_ns = time.perf_counter_ns() - load_start
            self.port.send("m-qsolve-start")
            elapsed_ns, bounds, measured = solve_until(network, timeout_s, step_s)
            state, best_step, series = network.result(problem)
        except Exception as exc:  # Lava's own failures: report them, keep serving
            raise Rejected(f"qsolve failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if network is not None:
                network.stop()
        return Run(elapsed_ns, network.steps, state, best_step, series, None, None,
                   bounds, load_ns), measured

    def _solve_profiled(self, problem: Problem, timeout_s: float, seed: int,
                        step_s: float) -> tuple[Run, float]:
        """Through the Loihi 2 profiler (or its stand-in): ONE profiled run of the steps the
        timeout holds at the step time measured at `qload`, then `stop()`, then the profiler
        is read, as every public script does (jasonlyik/neurobench loihi/gsc.py notes that a
        second profiled run() raises). No step runs in the load (it would be that one run);
        the solve's time is the profiler's: the sum of its per-step execution times."""
        steps = profiled_steps(timeout_s, step_s)
        network = None
        try:
            load_start = time.perf_counter_ns()
            network = self.solver.build(problem, seed, steps, profiled=True)
            load_ns = time.perf_counter_ns() - load_start
            self.port.send("m-qsolve-start")
            start = time.perf_counter_ns()
            network.advance(steps)  # the one profiled run
            host_ns = time.perf_counter_ns() - start
            state, best_step, series = network.result(problem)
            network.stop()
            profile = read_profiler(network.profiler, steps)  # after stop()
        except Exception as exc:  # Lava's own failures: report them, keep serving
            raise Rejected(f"qsolve failed: {type(exc).__name__}: {exc}") from exc
        finally:
            if network is not None:
                network.stop()
        times = profile.step_times_s
        elapsed_ns = host_ns if times is None else round(float(times.sum()) * 1e9)
        if profile.note:
            print(f"qsolve: the profiler's power is not reported: {profile.note}",
                  file=sys.stderr)
        else:
            print(f"qsolve: profiler power {profile.power_w:.6g} W, energy "
                  f"{profile.energy_uj:.6g} uJ ({POWER_LABEL})", file=sys.stderr)
        run = Run(elapsed_ns, steps, state, best_step, series, times, profile.power_w,
                  load_ns=load_ns, steps_before_clock=0)
        return run, elapsed_ns / 1e9 / steps

    def do_qresult(self, args: list[str]) -> None:
        result = self.result
        if result is None:
            raise Rejected("qresult no result")
        packed = np.packbits(result.state.astype(np.uint8), bitorder="little").tobytes()
        lines = [f"m-qbest-cost-{result.cost}", f"m-qbest-time-us-{result.time_us}"]
        lines += [f"m-qstate-{k}-[{packed[k:k + QSTATE_BYTES_PER_LINE].hex()}]"
                  for k in range(0, len(packed), QSTATE_BYTES_PER_LINE)]
        lines += [f"m-qimprove-{t}-{c}" for t, c in result.improvements]
        # The load before the clock, the steps run (SPEC.md).
        lines += [f"m-qload-us-{result.load_us}", f"m-qsteps-{result.steps}"]
        if result.power_w is not None:
            # Caps `power` (Loihi 2's profiler, or the stand-in): the average power over the
            # solve and the energy it gives over the elapsed time of `m-qsolve-done-`.
            energy_uj = result.power_w * result.elapsed_us
            lines += [f"m-qenergy-uj-{round(energy_uj)}",
                      f"m-qpower-uw-{round(result.power_w * 1e6)}"]
        # rcrc: every line of the result (cost, time, state, timeline, load, steps, power).
        self.port.send(*[self.checked(line) for line in lines])


def exit_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """End the shim, quietly, with everything it started, once its parent `parent` is gone.

    A rig killed with SIGKILL cannot stop the shim, and a solve in Lava does not read stdin:
    it would run to its timeout with no one to answer, then die on a broken pipe. A daemon
    thread watches the parent pid (a dead parent's children are re-parented) and kills the
    shim's process group (Lava's processes with it) when the shim leads one, as it does when
    the rig starts it; else it ends just the shim.
    """

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signal.SIGKILL)
        os._exit(0)

    thread = threading.Thread(target=watch, name="exit-with-parent", daemon=True)
    thread.start()
    return thread


def tuned(argv: list[str]) -> dict:
    """HYPERPARAMETERS with `--hyperparameters JSON` (from `rig qubo tune`/a tuning file) over
    them; only the names already there are accepted."""
    merged = dict(HYPERPARAMETERS)
    if "--hyperparameters" in argv:
        given = json.loads(argv[argv.index("--hyperparameters") + 1])
        unknown = sorted(set(given) - set(HYPERPARAMETERS))
        if unknown:
            raise SystemExit(f"loihi2 shim: unknown hyperparameters {unknown}; "
                             f"known: {sorted(HYPERPARAMETERS)}")
        merged.update(given)
    return merged


#: `--self-test`: MIS on the path 0-1-2-3 (node -1, edge +8), whose optimum is -2.
SELF_TEST_TERMS = np.array([[0, 0, -1], [1, 1, -1], [2, 2, -1], [3, 3, -1],
                            [0, 1, 8], [1, 2, 8], [2, 3, 8]], dtype=np.int64)
#: Steps it runs: a number, not a time, so that a loaded host cannot fail it (in 0.5 s under
#: load Lava's CPU backend ran 44-72 steps here and found nothing below 0 before ~60).
SELF_TEST_STEPS = 300


def self_test(solver: LavaSolver) -> int:
    """Load and solve a 4-variable QUBO as `qload` and `qsolve` do, seeded, for a fixed number
    of steps; 0 if the best state found is the optimum (brute force over the 16 states).
    `make lava-env` runs it: it proves the environment solves, and it is the first import of
    everything a solve needs (bytecode written then, not by the first `qload` against its
    transfer deadline)."""
    problem = Problem(4, SELF_TEST_TERMS)
    solver.calibrate(problem)
    network = solver.build(problem, 0, WARMUP_STEPS + SELF_TEST_STEPS)
    try:
        network.advance(WARMUP_STEPS)
        start = time.perf_counter_ns()
        network.advance(SELF_TEST_STEPS)
        elapsed_ns = time.perf_counter_ns() - start
        state = network.result(problem)[0]
    finally:
        network.stop()
    every = (np.arange(16)[:, None] >> np.arange(4)) & 1
    optimum = int(np.min(qubo_cost(SELF_TEST_TERMS, every)))
    best = qubo_cost(SELF_TEST_TERMS, state)
    ok = best == optimum
    print(f"loihi2 shim self-test: Lava {solver.backend} backend, {network.steps} steps in "
          f"{elapsed_ns / 1e9:.3f} s, best cost {best} (optimum {optimum}): "
          f"{'ok' if ok else 'FAILED'}")
    return 0 if ok else 1


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test(LavaSolver())
    hyperparameters = tuned(sys.argv[1:])
    stand_in_w = stand_in_power(dict(os.environ))
    exit_with_parent(os.getppid())
    port = Port()
    # Imports Lava before the banner: `m-ready` means ready to solve.
    solver = LavaSolver(stand_in_w)
    solver.hyperparameters = hyperparameters
    shim = Shim(port, solver)
    stand_in = "" if stand_in_w is None else f" + {StandInProfiler.label} at {stand_in_w:g} W"
    print(f"loihi2 shim: Lava {solver.backend} backend{stand_in}", file=sys.stderr)
    try:
        port.send("m-timestamp-mode-performance", "m-init-done", "m-ready")
        while True:
            text = port.command()
            if text is None:
                return 0
            shim.handle(text)
    except (BrokenPipeError, ConnectionResetError):
        return 0  # the rig closed the pipe (or is gone): no one left to answer


if __name__ == "__main__":
    sys.exit(main())
