"""Two clocks on the same windows: the DUT's lap counter against the energy monitor's samples.

When the firmware reports its microsecond lap counter around a timed loop that the energy
monitor also sees as a GPIO window, the two durations of each window must agree. They differ by
quantisation alone (one tick of each clock: a duration is the difference of two readings) and by
whatever is wrong: a stretched trace, a monitor whose real sample rate is not the nominal one, a
DUT clock that is off. `timer_agreement` compares them per window against a relative tolerance
plus that quantisation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rig.errors import AnalysisError

#: Relative disagreement allowed between the two clocks on one window (issue 13: 0.5%).
TIMER_TOLERANCE = 0.005
#: One tick of the DUT's lap counter (`m-lap-us`).
DUT_TICK_S = 1e-6


@dataclass(frozen=True)
class TimerAgreement:
    """The comparison of `windows` windows; `worst` indexes the window that used most of its
    allowance (tolerance x DUT duration + `resolution_s`)."""

    windows: int
    failed: int
    worst: int
    #: (monitor - DUT) / DUT of the worst window.
    worst_relative: float
    #: |monitor - DUT| / allowance of the worst window (> 1 fails).
    worst_usage: float
    resolution_s: float
    tolerance: float

    @property
    def ok(self) -> bool:
        """True when every window agrees within its allowance."""
        return self.failed == 0


def timer_agreement(
    dut_s: np.ndarray,
    emon_s: np.ndarray,
    *,
    sample_period_s: float,
    tolerance: float = TIMER_TOLERANCE,
) -> TimerAgreement:
    """Compare per-window durations [s] by the DUT timer and by the monitor's sample count.

    A window agrees when |emon - dut| <= tolerance * dut + sample_period_s + `DUT_TICK_S`.
    """
    dut = np.asarray(dut_s, dtype=np.float64)
    emon = np.asarray(emon_s, dtype=np.float64)
    if dut.shape != emon.shape or dut.ndim != 1 or dut.size == 0:
        raise AnalysisError(
            f"timer agreement needs two equal, non-empty lists of durations, got {dut.shape} "
            f"and {emon.shape}")
    if not (np.all(np.isfinite(dut)) and np.all(np.isfinite(emon)) and np.all(dut > 0)):
        raise AnalysisError("timer agreement: a duration is not a positive finite number",
                            hint="a window was not timed by both clocks")
    if not (sample_period_s >= 0 and tolerance >= 0):
        raise AnalysisError(f"timer agreement: sample period {sample_period_s!r} and tolerance "
                            f"{tolerance!r} must be >= 0")
    resolution = float(sample_period_s) + DUT_TICK_S
    allowance = tolerance * dut + resolution
    usage = np.abs(emon - dut) / allowance
    worst = int(np.argmax(usage))
    return TimerAgreement(
        windows=int(dut.size),
        failed=int(np.count_nonzero(usage > 1.0)),
        worst=worst,
        worst_relative=float((emon[worst] - dut[worst]) / dut[worst]),
        worst_usage=float(usage[worst]),
        resolution_s=resolution,
        tolerance=tolerance,
    )
