"""One simulated clock and one power model, shared by every simulated device of a virtual bench.

Time is kept in integer nanoseconds of simulated time, which runs `speed` times faster than the
host's monotonic clock. The DUT's power is a step function of simulated time: zero while
unpowered, `idle_w` while powered, `active_w` while it computes. The DUT registers its activity
and its GPIO pulses here *before* simulated time reaches them (under `lock`), and the energy
monitor integrates the step function exactly over each sample period, so the samples it reports
are the simulated truth up to its own quantisation.

A bench may make it noisy (`Noise`, the bench file's `[sim] current_noise_a`, `drift` and
`noise_seed`; both off by default, and then nothing here draws a number): every current sample a
simulated monitor reports passes through `measured_energy` or `mean_current`, which add white
Gaussian noise of `current_a` amps (standard deviation) to the sample's mean current; and each
timed run (`begin_run`) draws its own active level, `active_w` x (1 + `drift` z), z ~ N(0, 1).
"""

from __future__ import annotations

import bisect
import contextlib
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

NS = 1_000_000_000


@dataclass(frozen=True)
class PowerParams:
    """The simulated DUT: power levels [W] and seconds per inference."""

    idle_w: float = 1.20e-3
    active_w: float = 3.60e-3
    inference_s: float = 12.5e-3
    boot_s: float = 0.010
    #: How long the timestamp GPIO stays low per pulse.
    pulse_s: float = 10e-6


@dataclass(frozen=True)
class Noise:
    """What makes the virtual bench noisy (all 0: it is exact, and costs nothing)."""

    #: Standard deviation [A] of the white Gaussian noise on each current sample a simulated
    #: monitor reports (the sample's mean current over its period, plus sigma z).
    current_a: float = 0.0
    #: Relative standard deviation of the active power from one timed run to the next.
    drift: float = 0.0
    #: The same seed, the same noise (and the same drift for the same sequence of runs).
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("current_a", "drift"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"noise {name} must be a finite number >= 0, got {value!r}")


class SimClock:
    """Simulated time in ns, running `speed` times faster than the host's monotonic clock.

    A monitor that falls behind (a loaded host cannot stream `speed` times its sample rate) holds
    the clock while it catches up (`held`): simulated time then never runs ahead of what the
    instruments can report, as on a real bench, where no instrument is ever minutes behind.
    """

    def __init__(self, speed: float = 1.0) -> None:
        if speed <= 0:
            raise ValueError("speed must be positive")
        self.speed = speed
        #: (host ns at simulated 0, host ns when the clock was held or None): one tuple, swapped
        #: whole, so that `now_ns` reads a consistent pair without a lock.
        self._state: tuple[int, int | None] = (time.monotonic_ns(), None)
        self._holds = 0
        #: Holds `running` does not lift (`held(firm=True)`).
        self._firm = 0
        self._hold_lock = threading.Lock()
        #: Host time [ns] the clock has stood still in all, for the record.
        self.held_ns = 0

    def now_ns(self) -> int:
        """Current simulated time."""
        wall0, held_at = self._state
        wall = time.monotonic_ns() if held_at is None else held_at
        return int((wall - wall0) * self.speed)

    def wall_delay_s(self, until_ns: int) -> float:
        """Host seconds until simulated time reaches `until_ns` (0 if already past)."""
        return max(0.0, (until_ns - self.now_ns()) / self.speed / NS)

    @contextlib.contextmanager
    def held(self, *, firm: bool = False) -> Iterator[None]:
        """Simulated time stands still inside (holds nest: it runs again after the last). A
        `firm` hold is one `running` does not lift: time that passes on a line the host does
        not pace (a download through an IO manager), charged when it ends (`advance`)."""
        with self._hold_lock:
            self._set_holds(self._holds + (not firm), self._firm + firm)
        try:
            yield
        finally:
            with self._hold_lock:
                self._set_holds(self._holds - (not firm), self._firm - firm)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Time runs inside, even within a hold (but not a firm one): for a stream that waits on
        its reader (a reader that waits on simulated time must not wait on a held clock)."""
        with self._hold_lock:
            holds = self._holds
            self._set_holds(0, self._firm)
        try:
            yield
        finally:
            with self._hold_lock:
                self._set_holds(self._holds + holds, self._firm)

    def advance(self, ns: int) -> None:
        """Simulated time jumps `ns` ahead at once: time that passed on something the host does
        not pace (the IO manager's 9600-baud line to the DUT while a download was held)."""
        if ns < 0:
            raise ValueError("simulated time only runs forward")
        with self._hold_lock:
            wall0, held_at = self._state
            self._state = (wall0 - round(ns / self.speed), held_at)

    def _set_holds(self, holds: int, firm: int) -> None:
        """Stop or restart the clock as the count of holds leaves or reaches 0 (lock held)."""
        before = self._holds + self._firm
        self._holds, self._firm = holds, firm
        after = holds + firm
        wall0, held_at = self._state
        if before == 0 and after > 0:
            self._state = (wall0, time.monotonic_ns())
        elif before > 0 and after == 0:
            assert held_at is not None
            stood = time.monotonic_ns() - held_at
            self.held_ns += stood
            self._state = (wall0 + stood, None)


#: A stream (PPK2, LPM01A) behind simulated time by more than this [s] holds the clock while it
#: catches up: at `speed` x its rate on a loaded host it would otherwise fall further behind for
#: good, and the rig's waits (30 s of host time for an edge) would end on samples still unsent.
CATCH_UP_S = 0.05


class World:
    """The shared state of a virtual bench: clock, DUT supply, power steps, GPIO edges."""

    def __init__(self, params: PowerParams | None = None, *, speed: float = 1.0,
                 noise: Noise | None = None) -> None:
        self.params = params or PowerParams()
        self.noise = noise or Noise()
        self.clock = SimClock(speed)
        #: Guards every field below; hold it while reading `now_ns()` to register activity.
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.supply_v = 3.3
        self.powered = False
        self.power_on_ns = 0
        #: Power as a step function: at _step_t[k] the power becomes _step_w[k].
        self._step_t: list[int] = [0]
        self._step_w: list[float] = [0.0]
        #: Falling-edge times of the timestamp line, and their rising edges.
        self.falling_ns: list[int] = []
        self.rising_ns: list[int] = []
        #: Bumped on every power cycle so that a DUT can abandon work across a reset.
        self.generation = 0
        #: Set while an out-of-process DUT works (sim bus): the latest simulated time whose
        #: state it has declared. Monitors report nothing past it (see `observable_ns`).
        self.horizon_ns: int | None = None
        #: The active power [W] of the timed run under way (`begin_run`): `params.active_w`
        #: unless the bench drifts.
        self.run_active_w = self.params.active_w
        #: Draws each run's drift (seeded; never drawn from when drift is 0).
        self._drift_rng = np.random.default_rng([self.noise.seed, 1])
        #: The seed's part of each sample's noise key (`_sample_noise`).
        self._noise_key = _mix64(np.array([self.noise.seed], dtype=np.uint64))[0]

    # -- supply -------------------------------------------------------------------------------
    def set_supply(self, volts: float) -> None:
        """Set the DUT supply voltage (the power model is in watts, so current = P / V)."""
        with self.lock:
            self.supply_v = volts

    def power(self, on: bool) -> int:
        """Switch the DUT supply; returns the simulated time it happened."""
        with self.lock:
            t = self.clock.now_ns()
            if on == self.powered:
                return t
            self._truncate_after(t)
            self.powered = on
            self.generation += 1
            self.horizon_ns = None  # a power cut ends whatever the DUT had declared
            if on:
                self.power_on_ns = t
            self._set_step(t, self.params.idle_w if on else 0.0)
            self.changed.notify_all()
            return t

    # -- activity registered by the DUT -------------------------------------------------------
    def begin_run(self) -> float:
        """A timed run (an ``infer`` command, its warm-up included) starts: under drift, its
        active power is drawn anew, `active_w` x (1 + drift z), z ~ N(0, 1) (never below 0 W),
        and holds until the next run. Returns it [W]."""
        with self.lock:
            if self.noise.drift:
                z = float(self._drift_rng.standard_normal())
                self.run_active_w = max(0.0, self.params.active_w * (1.0 + self.noise.drift * z))
            return self.run_active_w

    def add_activity(self, start_ns: int, end_ns: int) -> None:
        """The DUT computes at the run's active power (`run_active_w`) over [start, end); must
        not start in the past."""
        with self.lock:
            if end_ns <= start_ns:
                return
            self._set_step(start_ns, self.run_active_w)
            self._set_step(end_ns, self.params.idle_w)

    def add_pulse(self, t_ns: int) -> None:
        """A falling edge of the timestamp line at `t_ns`, rising again after `pulse_s`."""
        with self.lock:
            # Kept sorted: edge queries bisect these lists.
            i = bisect.bisect_right(self.falling_ns, t_ns)
            self.falling_ns.insert(i, t_ns)
            self.rising_ns.insert(i, t_ns + int(self.params.pulse_s * NS))

    def _set_step(self, t: int, watts: float) -> None:
        i = bisect.bisect_right(self._step_t, t)
        if i > 0 and self._step_t[i - 1] == t:
            self._step_w[i - 1] = watts
        else:
            self._step_t.insert(i, t)
            self._step_w.insert(i, watts)

    def _truncate_after(self, t: int) -> None:
        """Forget steps and pulses scheduled after `t` (a power cycle aborts them)."""
        i = bisect.bisect_right(self._step_t, t)
        del self._step_t[i:], self._step_w[i:]
        j = bisect.bisect_right(self.falling_ns, t)
        del self.falling_ns[j:], self.rising_ns[j:]

    # -- the horizon of an out-of-process DUT ------------------------------------------------
    def hold(self) -> int:
        """The DUT starts work now: monitors wait for it to declare what it does from here."""
        with self.lock:
            t = self.clock.now_ns()
            self.horizon_ns = t
            return t

    def extend_horizon(self, t_ns: int) -> None:
        """The DUT has declared its state up to `t_ns`."""
        with self.lock:
            if self.horizon_ns is not None and t_ns > self.horizon_ns:
                self.horizon_ns = t_ns

    def release(self) -> None:
        """The DUT is idle until further notice: monitors may report up to now again."""
        with self.lock:
            self.horizon_ns = None

    def observable_ns(self) -> int:
        """How far a monitor may report: now, or the DUT's horizon if it is holding one.

        A DUT in another process runs on the host's CPU, which may be slower than simulated
        time; without this, a monitor could report idle power for time the DUT then declares
        busy.
        """
        with self.lock:
            now = self.clock.now_ns()
            return now if self.horizon_ns is None else min(now, self.horizon_ns)

    # -- what an energy monitor sees ----------------------------------------------------------
    # Every simulated monitor samples the current through `mean_current` (N6705, 34465A, Otii,
    # PPK2) or `measured_energy` (LPM01A, Joulescope): the two places the current noise is
    # added, the same for every monitor family.
    def mean_current(self, starts_ns: np.ndarray, length_ns: int) -> np.ndarray:
        """Mean current [A] over [s, s + length) for each start, as a sampling monitor reads
        it: the energy drawn over it divided by the supply voltage and the length, plus the
        bench's current noise (exact when it has none)."""
        starts = np.asarray(starts_ns, dtype=np.int64)
        bounds = np.empty(2 * len(starts), dtype=np.int64)
        bounds[0::2], bounds[1::2] = starts, starts + length_ns
        energy = self.energy_between(bounds)[0::2]
        with self.lock:
            volts = self.supply_v
        current = energy / (volts * length_ns / NS)
        if self.noise.current_a:
            current = current + self._sample_noise(starts, starts + length_ns)
        return current

    def measured_energy(self, bounds_ns: np.ndarray) -> np.ndarray:
        """Energy [J] over each interval [bounds[k], bounds[k+1]) as a monitor measures it: the
        exact energy (`energy_between`), plus the current noise times the supply voltage and
        the interval's length (so that energy / (V dt) is the noisy mean current)."""
        energy = self.energy_between(bounds_ns)
        if not self.noise.current_a:
            return energy
        b = np.asarray(bounds_ns, dtype=np.int64)
        with self.lock:
            volts = self.supply_v
        return energy + self._sample_noise(b[:-1], b[1:]) * (volts * np.diff(b) / NS)

    def _sample_noise(self, starts_ns: np.ndarray, ends_ns: np.ndarray) -> np.ndarray:
        """sigma z [A] for the samples over [start, end): z ~ N(0, 1), a function of the
        seed and the sample's interval (Box-Muller on two hashes of them), so that a sample
        read twice (a FETCH repeated, an Otii range re-read) reads the same, whichever thread
        asks first or in what blocks."""
        key = _mix64(_mix64(starts_ns.astype(np.uint64) ^ self._noise_key)
                     ^ ends_ns.astype(np.uint64))
        u1 = ((key >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53  # in (0, 1)
        u2 = (_mix64(key ^ np.uint64(0xD1B54A32D192ED03)) >> np.uint64(11)) * 2.0**-53
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        return self.noise.current_a * z

    def energy_between(self, bounds_ns: np.ndarray) -> np.ndarray:
        """Exact energy [J] drawn over each interval [bounds[k], bounds[k+1])."""
        with self.lock:
            t = np.asarray(self._step_t, dtype=np.float64)
            w = np.asarray(self._step_w, dtype=np.float64)
        # Cumulative energy at each step time; piecewise linear in between, flat before 0.
        cum = np.concatenate(([0.0], np.cumsum(w[:-1] * np.diff(t)) / NS))
        b = np.asarray(bounds_ns, dtype=np.float64)
        # Beyond the last step, energy grows at the last step's power.
        e = np.interp(b, t, cum)
        tail = b > t[-1]
        e[tail] = cum[-1] + w[-1] * (b[tail] - t[-1]) / NS
        return np.diff(e)

    def falling_edges_between(self, t0_ns: int, t1_ns: int) -> list[int]:
        """Falling edges of the timestamp line with t0 <= t < t1."""
        with self.lock:
            lo = bisect.bisect_left(self.falling_ns, t0_ns)
            hi = bisect.bisect_left(self.falling_ns, t1_ns)
            return self.falling_ns[lo:hi]

    def pulses_between(self, t0_ns: int, t1_ns: int) -> list[tuple[int, int]]:
        """(falling, rising) times of the timestamp pulses that overlap [t0, t1)."""
        with self.lock:
            # Pulses all last `pulse_s` and never overlap: both lists are sorted alike.
            lo = bisect.bisect_right(self.rising_ns, t0_ns)
            hi = bisect.bisect_left(self.falling_ns, t1_ns)
            return list(zip(self.falling_ns[lo:hi], self.rising_ns[lo:hi], strict=True))

    def gpio_levels(self, times_ns: np.ndarray) -> np.ndarray:
        """Level (0/1) of the timestamp line at each time; high except inside a pulse."""
        with self.lock:
            fall = np.asarray(self.falling_ns, dtype=np.int64)
            rise = np.asarray(self.rising_ns, dtype=np.int64)
        t = np.asarray(times_ns, dtype=np.int64)
        if fall.size == 0:
            return np.ones(t.shape, dtype=np.uint8)
        k = np.searchsorted(fall, t, side="right") - 1
        inside = (k >= 0) & (t < rise[np.clip(k, 0, None)])
        return (~inside).astype(np.uint8)

    def forget_before(self, t_ns: int) -> None:
        """Drop history before `t_ns` that no monitor will ask for again (bounded memory)."""
        with self.lock:
            i = bisect.bisect_right(self._step_t, t_ns) - 1
            if i > 0:
                del self._step_t[:i], self._step_w[:i]
            j = bisect.bisect_left(self.falling_ns, t_ns)
            if j > 0:
                del self.falling_ns[:j], self.rising_ns[:j]

    # -- waiting in simulated time ------------------------------------------------------------
    def sleep_until(self, t_ns: int, generation: int | None = None) -> bool:
        """Block until simulated time reaches `t_ns`. False if the DUT was power-cycled first."""
        with self.changed:
            while True:
                if generation is not None and generation != self.generation:
                    return False
                delay = self.clock.wall_delay_s(t_ns)
                if delay <= 0:
                    return True
                self.changed.wait(min(delay, 0.05))

    def dut_micros(self, t_ns: int | None = None) -> int:
        """The DUT's 32-bit microsecond timer (counts from power-on, wraps like the real one)."""
        with self.lock:
            t = self.clock.now_ns() if t_ns is None else t_ns
            return ((t - self.power_on_ns) // 1000) & 0xFFFFFFFF


def _mix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on each element: a bijection of uint64 whose outputs look
    independent and uniform however alike the inputs (the sample noise's hash)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
