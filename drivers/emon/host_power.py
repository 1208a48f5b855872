"""Host power monitors for CPU/GPU baselines: RAPL (powercap sysfs) and NVML.

The host's own energy counters are the instrument here. A thread reads them `sample_rate` times a
second; each reading is stamped with `time.monotonic_ns` (the host clock is part of this
instrument), and power over an interval is the counter delta over the clock delta. Samples sit on
a grid of 1/sample_rate from the first reading: a reading lands in the grid slot nearest its
time, and if the thread was late the interval's mean power fills every slot it spans (noted in
`stats`), so sample ids stay proportional to time and no energy is left out.

Chunks carry power, not current: ``current = P / 1 V`` with ``voltage = 1 V``, so ``i * v`` is the
power in watts and the rig's energy integration works unchanged. There is no timestamp line:
``gpio`` is all 1. The supply voltage given to `configure` is only checked against the bench
limit; the host powers itself (`power_on` / `power_off` do nothing).

Where there is no counter to read, `open()` raises `PowerUnavailable` ("power unavailable: ...")
instead of returning a monitor that would report zeros.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from drivers.emon.accuracy import MonitorAccuracy, NotPublished
from drivers.emon.base import Chunk, ChunkCallback, EnergyMonitor, check_voltage
from drivers.errors import DeviceError

log = logging.getLogger(__name__)

POWERCAP_ROOT = Path("/sys/class/powercap")
#: Rates the sampler thread is good for: file reads and a host clock, not a digitiser.
MIN_RATE_HZ = 1.0
MAX_RATE_HZ = 1000.0
#: Readings are turned into one chunk at least this often [s].
CHUNK_S = 0.05
NS = 1_000_000_000


class PowerUnavailable(DeviceError):
    """The host has no power counter this monitor can read; nothing is reported."""

    def __init__(self, why: str, *, hint: str | None = None) -> None:
        super().__init__(f"power unavailable: {why}", hint=hint)


#: The host's own clock times the counters' readings: its tolerance is the host's, unpublished.
HOST_CLOCK = NotPublished(
    what="tolerance of the host clock the counters are read on (CLOCK_MONOTONIC)",
    searched="nothing applies: it is the host's crystal, which no vendor of the counters "
             "specifies")
#: Where RAPL's accuracy was looked for (2026-11-28).
RAPL_SEARCHED = (
    "Intel SDM Vol. 3, RAPL interfaces (MSR_RAPL_POWER_UNIT: energy status units, a "
    "resolution, not an accuracy); Linux powercap / arch/x86/events/rapl.c; docs search "
    "'Intel RAPL energy counter accuracy'")
#: Where NVML's was (2026-11-28): nvml.h documents one figure, for old GPUs only.
NVML_SEARCHED = (
    "nvml.h / the NVML API reference: nvmlDeviceGetPowerUsage is 'accurate to within +/- 5% "
    "of current power draw' on Fermi and Kepler GPUs only, nothing for later ones; "
    "nvmlDeviceGetTotalEnergyConsumption (the driver's energy mode, Volta and later) has no "
    "accuracy figure")


def rapl_accuracy() -> MonitorAccuracy:
    """RAPL's declaration: nothing published (power over a conventional 1 V)."""
    return MonitorAccuracy(
        current_ranges=NotPublished(what="RAPL package energy counter accuracy",
                                    searched=RAPL_SEARCHED),
        voltage=None, voltage_set=None, clock=HOST_CLOCK,
        notes="'current' is power [W] over a conventional 1 V; Intel gives the counters' "
              "units, no accuracy.")


def nvml_accuracy(mode: str) -> MonitorAccuracy:
    """NVML's declaration in `mode` ("energy", "power"): not published for the GPUs the rig
    meets (nvml.h's ±5 % covers Fermi and Kepler's power reading only; the driver does not
    identify the architecture, so it is not applied)."""
    reading = ("nvmlDeviceGetTotalEnergyConsumption" if mode == "energy"
               else "nvmlDeviceGetPowerUsage")
    return MonitorAccuracy(
        current_ranges=NotPublished(what=f"NVML {reading} accuracy", searched=NVML_SEARCHED),
        voltage=None, voltage_set=None, clock=HOST_CLOCK,
        notes="'current' is power [W] over a conventional 1 V. nvml.h: on Fermi and Kepler "
              "GPUs nvmlDeviceGetPowerUsage is accurate to within ±5 % of the power draw; on "
              "Ampere (except GA100) and later it is a 1 s average. Neither figure is "
              "applied: the GPU's architecture is not checked, and the energy counter has no "
              "published accuracy.")


class _CounterMonitor(EnergyMonitor):
    """A thread that reads host counters on a grid and delivers power as chunks.

    Subclasses give `_read()` (one row of raw counter values) and `_power()` (watts for each
    interval between rows, vectorised).
    """

    #: The host powers itself, and there is no timestamp line to see (gpio is all 1).
    powers_dut = False
    sees_every_edge = False
    measures_voltage = False  # power over a conventional 1 V

    def __init__(
        self, *, voltage_limit_v: float, simulated: bool = False,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v)
        self.simulated = simulated
        self._clock = clock
        self._rate_hz: float | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._closed = False

    # -- to implement -------------------------------------------------------------------------
    def _read(self) -> list[float]:
        """One reading of every counter (raw units)."""
        raise NotImplementedError

    def _power(self, raw: np.ndarray, dt_ns: np.ndarray) -> np.ndarray:
        """Watts over each interval: `raw` has one row more than `dt_ns` (the previous one)."""
        raise NotImplementedError

    # -- EnergyMonitor ------------------------------------------------------------------------
    @property
    def sample_rate(self) -> float:
        """The configured sample rate [Hz]."""
        if self._rate_hz is None:
            raise DeviceError(f"{self.driver}: sample rate asked before configure()",
                              hint="call configure(voltage, sample_rate) first")
        return self._rate_hz

    @classmethod
    def check_setup(cls, voltage: float, sample_rate: float, *, voltage_limit_v: float,
                    **options: Any) -> None:
        """The voltage limit (nothing else uses it) and a rate the counters are read at."""
        check_voltage(voltage, voltage_limit_v, who=cls.driver)
        if not MIN_RATE_HZ <= sample_rate <= MAX_RATE_HZ:
            raise DeviceError(
                f"{cls.driver}: cannot sample host counters at {sample_rate:g} Hz",
                hint=f"use {MIN_RATE_HZ:g}..{MAX_RATE_HZ:g} Hz (e.g. 100)",
            )

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Check `voltage` against the bench limit (nothing else uses it); set the rate."""
        self.check_setup(voltage, sample_rate, voltage_limit_v=self.voltage_limit_v)
        if self._thread is not None:
            raise DeviceError(f"{self.driver}: configure() while sampling", hint="stop() first")
        self._rate_hz = float(sample_rate)

    def set_voltage(self) -> tuple[float, str] | None:
        """Chunks carry power as current over a conventional 1 V."""
        return 1.0, "convention: host power counters, current = P / 1 V"

    def power_on(self) -> None:
        """Nothing: the host powers itself."""

    def power_off(self) -> None:
        """Nothing: the host powers itself."""

    def start(self, on_chunk: ChunkCallback) -> None:
        """Take the first reading now (errors surface here), then sample on a thread."""
        if self._rate_hz is None:
            raise DeviceError(f"{self.driver}: start() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        if self._thread is not None:
            raise DeviceError(f"{self.driver}: start() while already sampling",
                              hint="stop() first")
        t0 = self._clock()
        first = self._read()
        self._stop.clear()
        self._error = None
        self._thread = threading.Thread(
            target=self._sample_loop, args=(on_chunk, t0, first), name=f"{self.driver}-sampler",
            daemon=True,
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling; returns after the last chunk was delivered."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stop.set()
        thread.join(timeout=5.0)
        if thread.is_alive():
            raise DeviceError(f"{self.driver}: the sampler thread did not stop",
                              hint="a counter read is hanging; check the host")
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def close(self) -> None:
        """Stop sampling and release the counters. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop_while_closing()
        self._release()

    def _release(self) -> None:
        """Give the counters back (subclasses)."""

    # -- the sampler thread -------------------------------------------------------------------
    def _sample_loop(self, on_chunk: ChunkCallback, t0: int, first: list[float]) -> None:
        fs = self._rate_hz
        assert fs is not None
        period_s = 1.0 / fs
        per_chunk = max(1, round(fs * CHUNK_S))
        times = [t0]
        rows = [first]
        slot = 0  # grid slot of the last reading handed on (the first reading is slot 0)
        wake = time.monotonic()
        try:
            while True:
                # Paced by the host clock (the counters are the measurement, not this sleep).
                wake += period_s
                stopping = self._stop.wait(max(0.0, wake - time.monotonic()))
                if wake < time.monotonic() - period_s:
                    wake = time.monotonic()  # far behind: do not try to catch up in a burst
                times.append(self._clock())
                rows.append(self._read())
                if len(times) > per_chunk or stopping:
                    slot, last = self._deliver(on_chunk, t0, slot, times, rows)
                    # The next interval starts at the last reading used.
                    times, rows = times[last : last + 1], rows[last : last + 1]
                if stopping:
                    return
        except BaseException as exc:  # surfaced by stop(); never dies silently
            log.exception("%s: sampling failed", self.driver)
            self._error = exc

    def _deliver(
        self, on_chunk: ChunkCallback, t0: int, slot: int, times: list[int], rows: list[list[float]]
    ) -> tuple[int, int]:
        """Turn readings (the first one already handed on) into a chunk.

        Returns the grid slot and the index (in `times`) of the last reading used.
        """
        fs = self._rate_hz
        assert fs is not None
        t = np.asarray(times, dtype=np.int64)
        raw = np.asarray(rows, dtype=np.float64)
        slots = np.rint((t - t0) * (fs / NS)).astype(np.int64)
        slots[0] = slot
        # A reading in the same slot as the one before is merged into the next interval
        # (the counters are cumulative, so dropping it loses nothing).
        keep = np.concatenate(([True], slots[1:] > np.maximum.accumulate(slots)[:-1]))
        last = int(np.flatnonzero(keep)[-1])
        t, raw, slots = t[keep], raw[keep], slots[keep]
        if len(t) < 2:
            return slot, last
        watts = self._power(raw, np.diff(t))
        counts = np.diff(slots)
        if np.any(counts > 1):
            self.stats.note(f"sampler late: {int(np.sum(counts - 1))} slot(s) filled with the "
                            "mean power of a longer interval")
        current = np.repeat(watts, counts)
        n = len(current)
        self.stats.samples += n
        on_chunk(Chunk(slot, current, np.ones(n), np.ones(n, dtype=np.uint8)))
        return int(slots[-1]), last


# -- RAPL ----------------------------------------------------------------------------------------
class RaplMonitor(_CounterMonitor):
    """Package energy of every CPU socket, summed, from ``intel-rapl:*/energy_uj``.

    Only top-level package domains count (``intel-rapl:N`` whose ``name`` starts with
    ``package``): core/uncore/dram subdomains are inside them and ``psys`` overlaps them. Each
    counter wraps at ``max_energy_range_uj``; it is read as a counter of 0..max, so a delta that
    goes backwards gains ``max + 1`` µJ (a read interval far shorter than one wrap, minutes at
    the least, is assumed).
    """

    driver = "rapl"

    def __init__(
        self, root: Path | str = POWERCAP_ROOT, *, voltage_limit_v: float,
        simulated: bool = False, clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v, simulated=simulated, clock=clock)
        self.root = Path(root)
        self.domains = _package_domains(self.root)
        self._files = [d / "energy_uj" for d in self.domains]
        self._wrap_uj = np.array([_read_int(d / "max_energy_range_uj") + 1
                                  for d in self.domains], dtype=np.float64)
        self.names = [(d / "name").read_text().strip() for d in self.domains]
        self._read()  # proves the counters can be read (not root-only, as on kernels >= 5.10)

    @classmethod
    def open(
        cls, address: str = "", *, voltage_limit_v: float, simulated: bool = False
    ) -> RaplMonitor:
        """`address` is the powercap root ("" for /sys/class/powercap)."""
        return cls(address or POWERCAP_ROOT, voltage_limit_v=voltage_limit_v,
                   simulated=simulated)

    def _read(self) -> list[float]:
        try:
            return [float(_read_int(f)) for f in self._files]
        except PermissionError as exc:
            raise PowerUnavailable(
                f"{exc.filename} is not readable (energy_uj is root-only since Linux 5.10)",
                hint=f"run as root, or `sudo chmod a+r {self.root}/intel-rapl:*/energy_uj` "
                "(a udev rule keeps it across reboots)",
            ) from exc
        except (OSError, ValueError) as exc:
            raise PowerUnavailable(f"cannot read a RAPL counter: {exc}",
                                   hint="check /sys/class/powercap") from exc

    def _power(self, raw: np.ndarray, dt_ns: np.ndarray) -> np.ndarray:
        delta = np.diff(raw, axis=0)
        delta += np.where(delta < 0, self._wrap_uj, 0.0)  # a counter wrapped in the interval
        watts: np.ndarray = delta.sum(axis=1) * 1e-6 / (dt_ns / NS)
        return watts

    def settings(self) -> dict[str, Any]:
        """Where the counters are and which ones are summed."""
        return {
            "driver": self.driver,
            "root": str(self.root),
            "domains": [d.name for d in self.domains],
            "domain_names": list(self.names),
            "sample_rate_hz": self._rate_hz,
            "voltage_limit_v": self.voltage_limit_v,
            "units": "current = power [W] at 1 V",
            "simulated": self.simulated,
            "accuracy": self.accuracy().to_json(),
        }

    def accuracy(self) -> MonitorAccuracy:
        """`rapl_accuracy`: nothing published."""
        return rapl_accuracy()

    def self_test(self) -> dict[str, Any]:
        """Read every counter once."""
        values = self._read()
        return {"driver": self.driver, "domains": dict(zip(self.names, values, strict=True)),
                "simulated": self.simulated}


#: What to do where there is no RAPL at all (a VM has none of its own).
_NO_RAPL_HINT = ("enable RAPL passthrough in the hypervisor or run on bare metal; on bare metal "
                 "load the driver: `sudo modprobe intel_rapl_msr`")


def _package_domains(root: Path) -> list[Path]:
    """The top-level package domains under the powercap root; PowerUnavailable says why none."""
    if not root.is_dir():
        raise PowerUnavailable(
            f"no {root}/intel-rapl (no powercap at all: a VM or a container without it, or "
            "a kernel without CONFIG_POWERCAP)",
            hint=_NO_RAPL_HINT,
        )
    found, names = [], []
    for path in sorted(root.glob("intel-rapl:*")):
        suffix = path.name.split(":", 1)[1]
        if not suffix.isdigit():
            continue  # a subdomain such as intel-rapl:0:1
        try:
            name = (path / "name").read_text().strip()
        except OSError:
            continue
        names.append(name)
        if name.startswith("package"):
            found.append(path)
    if not names:
        raise PowerUnavailable(
            f"no {root}/intel-rapl (a VM, or the intel_rapl_common module not loaded)",
            hint=_NO_RAPL_HINT,
        )
    if not found:
        raise PowerUnavailable(
            f"no RAPL package domain under {root} (only {', '.join(names)})",
            hint="this CPU exposes no package energy counter: measure on a host whose CPU has "
            "one (Intel since Sandy Bridge, AMD since Zen)",
        )
    return found


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


# -- NVML ----------------------------------------------------------------------------------------
class NvmlMonitor(_CounterMonitor):
    """One NVIDIA GPU through NVML (pynvml, imported only here).

    Uses the total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ since the driver
    loaded) where the GPU has it, else the board power reading (``nvmlDeviceGetPowerUsage``, mW,
    the driver's own short average) at each sample.
    """

    driver = "nvml"

    def __init__(
        self, index: int = 0, *, voltage_limit_v: float, simulated: bool = False,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v, simulated=simulated, clock=clock)
        self.index = index
        try:
            import pynvml  # lazily: only hosts with NVIDIA GPUs have it
        except ImportError as exc:
            raise PowerUnavailable(
                "pynvml is not installed (NVML's Python binding)",
                hint="install the nvml extra (the nvidia-ml-py package) on a host with an "
                "NVIDIA GPU and its driver",
            ) from exc
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError: no driver, no libnvidia-ml, no GPU
            raise PowerUnavailable(
                f"no NVIDIA driver/libnvidia-ml: NVML did not start ({exc})",
                hint="install the NVIDIA driver so that `nvidia-smi` works (in a VM, pass the "
                "GPU through first)",
            ) from exc
        self._initialised = True
        try:
            count = pynvml.nvmlDeviceGetCount()
            if not 0 <= index < count:
                raise PowerUnavailable(f"no NVIDIA GPU {index} ({count} found)",
                                       hint="pick a GPU index that nvidia-smi lists")
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.gpu_name = _text(pynvml.nvmlDeviceGetName(self._handle))
            self.mode = self._pick_mode()
        except BaseException:
            self._release()
            raise

    @classmethod
    def open(
        cls, address: str = "", *, voltage_limit_v: float, simulated: bool = False
    ) -> NvmlMonitor:
        """`address` is the GPU index ("" for GPU 0)."""
        try:
            index = int(address or 0)
        except ValueError:
            raise DeviceError(f"nvml: {address!r} is not a GPU index",
                              hint="give the GPU's index as nvidia-smi lists it, e.g. 0") from None
        return cls(index, voltage_limit_v=voltage_limit_v, simulated=simulated)

    def _pick_mode(self) -> str:
        try:
            self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
            return "energy"
        except Exception:  # NVMLError_NotSupported on older GPUs
            pass
        try:
            self._nvml.nvmlDeviceGetPowerUsage(self._handle)
            return "power"
        except Exception as exc:
            raise PowerUnavailable(
                f"GPU {self.index} ({self.gpu_name}) reports neither energy nor power: {exc}",
                hint="this GPU has no power sensor NVML can read",
            ) from exc

    def _read(self) -> list[float]:
        try:
            if self.mode == "energy":
                return [float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))]
            return [float(self._nvml.nvmlDeviceGetPowerUsage(self._handle))]
        except Exception as exc:
            raise DeviceError(f"nvml: reading GPU {self.index} failed: {exc}",
                              hint="check the NVIDIA driver (nvidia-smi)") from exc

    def _power(self, raw: np.ndarray, dt_ns: np.ndarray) -> np.ndarray:
        if self.mode == "energy":
            return np.diff(raw[:, 0]) * 1e-3 / (dt_ns / NS)  # mJ over s
        return raw[1:, 0] * 1e-3  # mW at the end of each interval

    def _release(self) -> None:
        if getattr(self, "_initialised", False):
            self._initialised = False
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()

    def settings(self) -> dict[str, Any]:
        """Which GPU and which NVML reading."""
        return {
            "driver": self.driver,
            "gpu_index": self.index,
            "gpu_name": self.gpu_name,
            "mode": self.mode,
            "sample_rate_hz": self._rate_hz,
            "voltage_limit_v": self.voltage_limit_v,
            "units": "current = power [W] at 1 V",
            "simulated": self.simulated,
            "accuracy": self.accuracy().to_json(),
        }

    def accuracy(self) -> MonitorAccuracy:
        """`nvml_accuracy` of the reading in use."""
        return nvml_accuracy(self.mode)

    def self_test(self) -> dict[str, Any]:
        """Read the GPU's counter once."""
        return {"driver": self.driver, "gpu": self.gpu_name, "mode": self.mode,
                "reading": self._read()[0], "simulated": self.simulated}


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
