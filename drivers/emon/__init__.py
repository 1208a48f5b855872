"""Energy monitors: one interface (`EnergyMonitor`), one driver per instrument."""

from drivers.emon.base import Chunk, EnergyMonitor, check_voltage

__all__ = ["Chunk", "EnergyMonitor", "check_voltage"]
