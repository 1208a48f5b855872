"""Energy monitors: one interface (`EnergyMonitor`), one driver per instrument.

Drivers are looked up by name and imported lazily, so a bench that uses the LPM01A never needs
the Joulescope or VISA packages installed. Every driver class has
`open(address, *, voltage_limit_v, simulated=False) -> EnergyMonitor`, where `address` is a
serial port, a VISA resource string or a device path, whatever the instrument is reached by.
"""

from __future__ import annotations

import importlib

from drivers.emon.base import Chunk, EnergyMonitor, check_voltage
from drivers.errors import DeviceError

#: name -> "module:Class" (imported only when that driver is opened)
DRIVERS = {
    "lpm01a": "drivers.emon.lpm01a:Lpm01a",
    "joulescope": "drivers.emon.joulescope:Joulescope",
    "n6705": "drivers.emon.keysight:N6705",
    "34465a": "drivers.emon.keysight:Keysight34465A",
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
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise DeviceError(f"the {name} driver is not available: {exc}",
                          hint="install the matching extra, e.g. pip install "
                          "'neurobench-rig[joulescope]' or '[visa]'") from exc


def open_monitor(name: str, address: str, *, voltage_limit_v: float,
                 simulated: bool = False) -> EnergyMonitor:
    """Open the energy monitor `name` at `address`."""
    return monitor_class(name).open(address, voltage_limit_v=voltage_limit_v,
                                    simulated=simulated)


__all__ = ["DRIVERS", "Chunk", "EnergyMonitor", "check_voltage", "monitor_class", "open_monitor"]
