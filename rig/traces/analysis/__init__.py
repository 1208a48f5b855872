"""Energy analysis: pure numpy functions over sample arrays (no I/O, no Python loop per sample).

`analyze()` finds the GPIO timestamp windows and integrates energy inside them; the helpers
(`median`, `mean_stderr`, `replicability`) are shared with the benchmark procedures.
"""

from rig.traces.analysis.edges import falling_edges, windows_from_edges
from rig.traces.analysis.energy import (
    REPLICABILITY_TOLERANCE,
    EnergyAnalysis,
    WindowEnergy,
    analyze,
    mean_stderr,
    median,
    replicability,
    span_power,
    window_energies,
)
from rig.traces.analysis.span import (
    SpanAccumulator,
    SpanStats,
    span_samples,
    span_statistics,
)

__all__ = [
    "REPLICABILITY_TOLERANCE",
    "EnergyAnalysis",
    "SpanAccumulator",
    "SpanStats",
    "WindowEnergy",
    "analyze",
    "falling_edges",
    "mean_stderr",
    "median",
    "replicability",
    "span_power",
    "span_samples",
    "span_statistics",
    "window_energies",
    "windows_from_edges",
]
