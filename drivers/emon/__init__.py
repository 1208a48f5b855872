"""Energy monitors: one interface (`EnergyMonitor`), one driver per instrument.

Drivers are looked up by name and imported lazily, so a bench that uses the LPM01A never needs
the Joulescope or VISA packages installed. Every driver class has
`open(address, *, voltage_limit_v, simulated=False) -> EnergyMonitor`, where `address` is a
serial port, a VISA resource string or a device path, whatever the instrument is reached by.
Drivers with a choosable current range (Joulescope, Keysight) also take `current_range=`
(see `drivers.emon.ranges`); `open_monitor` passes it only when it is not "auto".
"""

from __future__ import annotations

import importlib
from typing import Any

from drivers.emon import ranges
from drivers.emon.base import Chunk, EnergyMonitor, check_voltage
from drivers.errors import DeviceError

#: name -> "module:Class" (imported only when that driver is opened)
DRIVERS = {
    "lpm01a": "drivers.emon.lpm01a:Lpm01a",
    "joulescope": "drivers.emon.joulescope:Joulescope",
    "n6705": "drivers.emon.keysight:N6705",
    "34465a": "drivers.emon.keysight:Keysight34465A",
    "otii": "drivers.emon.otii:Otii",
    "ppk2": "drivers.emon.ppk2:Ppk2",
    "rapl": "drivers.emon.host_power:RaplMonitor",
    "nvml": "drivers.emon.host_power:NvmlMonitor",
}


def monitor_class(name: str) -> type[EnergyMonitor]:
    """The driver class registered under `name`."""
    if name not in DRIVERS:
        raise DeviceError(f"unknown energy-monitor driver {name!r}",
                          hint=f"known drivers: {', '.join(sorted(DRIVERS))}")
    module, _, cls = DRIVERS[name].partition(":")
    try:
        driver_class: type[EnergyMonitor] = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise DeviceError(f"the {name} driver is not available: {exc}",
                          hint="install the matching extra, e.g. pip install "
                          "'neurobench-rig[joulescope]' or '[visa]'") from exc
    return driver_class


def check_current_range(name: str, current_range: str | float) -> str:
    """`current_range` as driver `name` takes it; `DeviceError` (before anything is opened)
    saying what it takes otherwise."""
    try:
        return ranges.normalize(name, current_range)
    except ranges.RangeError as exc:
        raise DeviceError(f"{name}: current range: {exc.message}", hint=exc.hint) from None


def open_monitor(name: str, address: str, *, voltage_limit_v: float,
                 simulated: bool = False, current_range: str = ranges.AUTO,
                 **options: Any) -> EnergyMonitor:
    """Open the energy monitor `name` at `address`, measuring in `current_range`; `options`
    go to the driver's constructor (e.g. ``timestamp_input="aux"`` for the N6705)."""
    cls = monitor_class(name)
    current_range = check_current_range(name, current_range)
    if current_range != ranges.AUTO:
        options["current_range"] = current_range
    return cls.open(address, voltage_limit_v=voltage_limit_v, simulated=simulated, **options)


__all__ = ["DRIVERS", "Chunk", "EnergyMonitor", "check_current_range", "check_voltage",
           "monitor_class", "open_monitor"]
