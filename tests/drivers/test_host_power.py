"""Host power monitors: RAPL against a fake powercap tree, NVML against a fake pynvml module.

A fake host clock drives both the timestamps and the counters, so every power value has a
closed form (integer µJ / mJ per interval)."""

from __future__ import annotations

import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

from drivers.emon import open_monitor
from drivers.emon.base import Chunk
from drivers.emon.host_power import NvmlMonitor, PowerUnavailable, RaplMonitor
from drivers.errors import DeviceError, VoltageLimitError

MS = 1_000_000  # ns


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


class FakeRapl:
    """A powercap tree whose counters follow a power schedule of the fake clock.

    `packages` is a list of (max_energy_range_uj, start_uj, power_mw(t_ns) -> mW).
    """

    def __init__(self, root: Path, packages, steps_ns) -> None:
        self.root = root
        self.packages = packages
        self.steps = list(steps_ns)
        self.t = 0
        self.energy_uj = [start for _, start, _ in packages]
        for i, (max_uj, start, _) in enumerate(packages):
            write(root / f"intel-rapl:{i}" / "name", f"package-{i}")
            write(root / f"intel-rapl:{i}" / "max_energy_range_uj", str(max_uj))
            write(root / f"intel-rapl:{i}" / "energy_uj", str(start))
            # Inside the package: must not be added again.
            write(root / f"intel-rapl:{i}:0" / "name", "core")
            write(root / f"intel-rapl:{i}:0" / "energy_uj", "123")
        n = len(packages)
        write(root / f"intel-rapl:{n}" / "name", "psys")  # overlaps the packages
        write(root / f"intel-rapl:{n}" / "energy_uj", "5")
        write(root / f"intel-rapl:{n}" / "max_energy_range_uj", "1000")
        write(root / "intel-rapl-mmio:0" / "name", "package-0")  # another interface

    def clock(self) -> int:
        """Advance the fake host time and the counters with it (1 ms unless scripted)."""
        dt = self.steps.pop(0) if self.steps else MS
        for i, (max_uj, _, power_mw) in enumerate(self.packages):
            # Power constant over [t, t + dt): mW * ns / 1e6 = µJ (chosen to be integers).
            self.energy_uj[i] += power_mw(self.t) * dt // 1_000_000
            value = self.energy_uj[i] % (max_uj + 1)
            write(self.root / f"intel-rapl:{i}" / "energy_uj", str(value))
        self.t += dt
        return self.t


class Collector:
    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.cond = threading.Condition()

    def __call__(self, chunk: Chunk) -> None:
        with self.cond:
            self.chunks.append(chunk)
            self.cond.notify_all()

    def wait_for(self, n: int, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while sum(len(c) for c in self.chunks) < n:
                assert time.monotonic() < deadline, "not enough samples in time"
                self.cond.wait(0.05)

    def arrays(self):
        ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in self.chunks])
        return (ids, *(np.concatenate([getattr(c, k) for c in self.chunks])
                       for k in ("current", "voltage", "gpio")))


def run(monitor, n: int, rate: float = 1000.0) -> Collector:
    monitor.configure(1.8, rate)
    got = Collector()
    monitor.start(got)
    got.wait_for(n)
    monitor.stop()
    return got


# -- RAPL ----------------------------------------------------------------------------------------


def test_rapl_sums_packages_across_a_wrap_and_matches_the_closed_form(tmp_path):
    def pkg0(t):  # 5 W, then 7 W from 100 ms
        return 5000 if t < 100 * MS else 7000

    def pkg1(t):
        return 3250

    # Package 1 wraps every ~308 ms (modulus 1e6 µJ), the first time ~31 ms in.
    fake = FakeRapl(tmp_path, [(262_143_328_850, 10_000, pkg0), (999_999, 900_000, pkg1)], [])
    monitor = RaplMonitor(tmp_path, voltage_limit_v=3.3, clock=fake.clock)
    assert monitor.names == ["package-0", "package-1"]
    got = run(monitor, 400)
    ids, current, voltage, gpio = got.arrays()
    n = len(ids)
    np.testing.assert_array_equal(ids, np.arange(n))
    # The baseline reading is at 1 ms: sample k covers [k + 1, k + 2) ms.
    expected = np.where(np.arange(n) + 1 < 100, 5.0, 7.0) + 3.25
    np.testing.assert_allclose(current, expected, rtol=1e-12)
    assert np.all(voltage == 1.0) and np.all(gpio == 1)
    assert monitor.stats.samples == n and monitor.stats.notes == []
    s = monitor.settings()
    assert s["domains"] == ["intel-rapl:0", "intel-rapl:1"] and s["sample_rate_hz"] == 1000.0
    assert s["simulated"] is False
    monitor.close()
    monitor.close()


def test_a_late_sampler_fills_the_slots_it_missed_and_merges_early_readings(tmp_path):
    def power(t):  # 2 W, 5 W from 3 ms, 9 W from 6.3 ms
        return 2000 if t < 3 * MS else 5000 if t < 6_300_000 else 9000

    # Readings at 1, 2, 3, 6.2 (late: slots 3..5), 6.3 and 6.4 (same slot 6: merged), 7, 8 ms.
    steps = [0, MS, MS, MS, 3_200_000, 100_000, 100_000, 600_000, MS]
    fake = FakeRapl(tmp_path, [(10**12, 0, power)], steps)
    monitor = RaplMonitor(tmp_path, voltage_limit_v=3.3, clock=fake.clock)
    got = run(monitor, 9)
    _, current, _, _ = got.arrays()
    # 6.2 -> 7.0 ms: (5 W * 0.1 ms + 9 W * 0.7 ms) / 0.8 ms = 8.5 W, not from the merged ones.
    np.testing.assert_allclose(current[:9], [2, 2, 2, 5, 5, 5, 8.5, 9, 9], rtol=1e-12)
    assert any("late" in note for note in monitor.stats.notes)
    monitor.close()


def test_rapl_open_through_the_registry(tmp_path):
    FakeRapl(tmp_path, [(10**9, 0, lambda t: 1000)], [])
    monitor = open_monitor("rapl", str(tmp_path), voltage_limit_v=3.3)
    try:
        assert isinstance(monitor, RaplMonitor)
        assert monitor.self_test()["domains"] == {"package-0": 0.0}
    finally:
        monitor.close()


def test_no_powercap_means_power_unavailable_never_zeros(tmp_path):
    with pytest.raises(PowerUnavailable, match=r"^power unavailable: no .*missing/intel-rapl"):
        RaplMonitor.open(str(tmp_path / "missing"), voltage_limit_v=3.3)
    write(tmp_path / "intel-rapl:0" / "name", "psys")
    write(tmp_path / "intel-rapl:0:0" / "name", "package-0")
    with pytest.raises(PowerUnavailable, match=r"no RAPL package domain .*\(only psys\)"):
        RaplMonitor.open(str(tmp_path), voltage_limit_v=3.3)


def test_no_rapl_says_why_and_what_to_enable(tmp_path):
    """A VM has no /sys/class/powercap at all, or one without intel-rapl (issue 13.5)."""
    with pytest.raises(PowerUnavailable) as info:
        RaplMonitor.open(str(tmp_path / "missing"), voltage_limit_v=3.3)
    assert "a VM" in info.value.message
    assert "RAPL passthrough" in info.value.hint and "bare metal" in info.value.hint
    (tmp_path / "intel-rapl-mmio:0").mkdir()  # powercap, but no intel-rapl zone
    with pytest.raises(PowerUnavailable) as info:
        RaplMonitor.open(str(tmp_path), voltage_limit_v=3.3)
    assert info.value.message == (f"power unavailable: no {tmp_path}/intel-rapl (a VM, or the "
                                  "intel_rapl_common module not loaded)")
    assert "modprobe intel_rapl_msr" in info.value.hint and "passthrough" in info.value.hint


def test_an_unreadable_energy_uj_says_run_as_root_or_chmod(tmp_path, monkeypatch):
    fake = FakeRapl(tmp_path, [(10**9, 0, lambda t: 1000)], [])
    monitor = RaplMonitor(tmp_path, voltage_limit_v=1.8, clock=fake.clock)
    energy = tmp_path / "intel-rapl:0" / "energy_uj"

    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("drivers.emon.host_power._read_int", denied)
    with pytest.raises(PowerUnavailable) as info:
        monitor.self_test()
    assert info.value.message == (f"power unavailable: {energy} is not readable (energy_uj is "
                                  "root-only since Linux 5.10)")
    assert "run as root" in info.value.hint and "chmod a+r" in info.value.hint
    monitor.close()


@pytest.mark.skipif(Path("/sys/class/powercap/intel-rapl:0").exists(), reason="host has RAPL")
def test_this_host_without_rapl_says_power_unavailable():
    with pytest.raises(PowerUnavailable) as info:
        open_monitor("rapl", "", voltage_limit_v=3.3)
    assert str(info.value).startswith("power unavailable:") and info.value.hint


def test_an_unreadable_counter_is_power_unavailable(tmp_path):
    write(tmp_path / "intel-rapl:0" / "name", "package-0")
    write(tmp_path / "intel-rapl:0" / "max_energy_range_uj", "1000")
    (tmp_path / "intel-rapl:0" / "energy_uj").mkdir()  # reading it fails like EACCES would
    with pytest.raises(PowerUnavailable, match="cannot read"):
        RaplMonitor.open(str(tmp_path), voltage_limit_v=3.3)


def test_rapl_refuses_a_voltage_above_the_limit_and_bad_rates_before_reading(tmp_path):
    fake = FakeRapl(tmp_path, [(10**9, 0, lambda t: 1000)], [])
    calls = []

    def clock():
        calls.append(1)
        return fake.clock()

    monitor = RaplMonitor(tmp_path, voltage_limit_v=1.8, clock=clock)
    with pytest.raises(VoltageLimitError):
        monitor.configure(3.3, 100)
    for rate in (0.5, 5000):
        with pytest.raises(DeviceError, match="Hz"):
            monitor.configure(1.8, rate)
    with pytest.raises(DeviceError, match="configure"):
        monitor.start(lambda chunk: None)
    assert calls == []
    monitor.close()


# -- NVML ----------------------------------------------------------------------------------------


class NVMLError(Exception):
    pass


def fake_pynvml(*, energy: bool = True, power: bool = True, init_fails: bool = False,
                count: int = 1):
    """A stand-in for pynvml: 75 W on the energy counter, a scripted power reading."""
    mod = types.ModuleType("pynvml")
    mod.NVMLError = NVMLError
    mod.calls = []
    mod.t = 0
    mod.power_mw = iter([])

    def init():
        mod.calls.append("init")
        if init_fails:
            raise NVMLError("Driver Not Loaded")

    def clock():
        mod.t += MS
        return mod.t

    def total_energy(handle):
        if not energy:
            raise NVMLError("Not Supported")
        return 75 * mod.t // MS  # mJ: 75 W

    def power_usage(handle):
        if not power:
            raise NVMLError("Not Supported")
        return next(mod.power_mw, 40_000)

    mod.clock = clock
    mod.nvmlInit = init
    mod.nvmlShutdown = lambda: mod.calls.append("shutdown")
    mod.nvmlDeviceGetCount = lambda: count
    mod.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", i)
    mod.nvmlDeviceGetName = lambda h: b"Fake GPU"
    mod.nvmlDeviceGetTotalEnergyConsumption = total_energy
    mod.nvmlDeviceGetPowerUsage = power_usage
    return mod


def test_nvml_energy_counter_gives_power_from_deltas(monkeypatch):
    mod = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monitor = NvmlMonitor(0, voltage_limit_v=3.3, clock=mod.clock)
    assert monitor.mode == "energy" and monitor.gpu_name == "Fake GPU"
    got = run(monitor, 100)
    ids, current, voltage, gpio = got.arrays()
    np.testing.assert_array_equal(ids, np.arange(len(ids)))
    np.testing.assert_allclose(current, 75.0, rtol=1e-12)
    assert np.all(voltage == 1.0) and np.all(gpio == 1)
    assert monitor.settings()["mode"] == "energy"
    monitor.close()
    monitor.close()
    assert mod.calls == ["init", "shutdown"]


def test_nvml_falls_back_to_power_usage(monkeypatch):
    mod = fake_pynvml(energy=False)
    mod.power_mw = iter([30_000, 31_000, 32_500, 33_000])
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    monitor = NvmlMonitor.open("0", voltage_limit_v=3.3)
    monitor._clock = mod.clock
    assert monitor.mode == "power"
    got = run(monitor, 5)
    _, current, _, _ = got.arrays()
    # The first reading is consumed by mode detection, the second is the baseline at start.
    np.testing.assert_allclose(current[:3], [32.5, 33.0, 40.0])
    monitor.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"init_fails": True}, r"no NVIDIA driver/libnvidia-ml: NVML did not start"),
     ({"energy": False, "power": False}, r"GPU 0 \(Fake GPU\) reports neither"),
     ({"count": 0}, "no NVIDIA GPU 0")],
)
def test_nvml_without_a_readable_gpu_is_power_unavailable(monkeypatch, kwargs, match):
    mod = fake_pynvml(**kwargs)
    monkeypatch.setitem(sys.modules, "pynvml", mod)
    with pytest.raises(PowerUnavailable, match=f"^power unavailable: {match}") as info:
        open_monitor("nvml", "0", voltage_limit_v=3.3)
    assert mod.calls[-1] == ("init" if kwargs.get("init_fails") else "shutdown")
    if kwargs.get("init_fails"):
        assert "nvidia-smi" in info.value.hint and "pass the GPU through" in info.value.hint


def test_nvml_without_pynvml_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(PowerUnavailable, match="pynvml is not installed") as info:
        NvmlMonitor.open("", voltage_limit_v=3.3)
    assert "nvml extra" in info.value.hint


def test_nvml_address_must_be_an_index(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    with pytest.raises(DeviceError, match="GPU index"):
        NvmlMonitor.open("gpu0", voltage_limit_v=3.3)
