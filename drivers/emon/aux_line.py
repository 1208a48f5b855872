"""A logic line recorded as an analog voltage, turned into the GPIO bits of a `Chunk`.

An N6781A/N6785A SMU logs the DUT's timestamp line on its auxiliary voltage input (see
drivers/emon/keysight.py). Each logged sample carries the lowest voltage the input saw during
that sample's period (the instrument's minimum over its fast raw readings), so a timestamp pulse
much shorter than a sample period still shows in the sample that holds it.

`LineThreshold` turns those minima into bit 0 of the GPIO stream with hysteresis:

- a sample whose minimum is below `low_v` reads low (0): the line went low during it;
- a sample whose minimum is above `high_v` reads high (1): the line stayed high all through it;
- a sample in between keeps the level before it (a slow edge or noise between the thresholds
  never toggles the bit).

Until the line has been seen high for one whole sample, everything reads high: a DUT that is not
powered yet holds its line at 0 V, and that must not count as a timestamp (the rig starts the
monitor before it switches the DUT on). The level carries over from one chunk to the next.
Vectorised: no Python loop per sample.
"""

from __future__ import annotations

import numpy as np

#: Default thresholds as fractions of the DUT's I/O voltage (CMOS input levels: low below 30 %,
#: high above 70 % of the supply).
LOW_FRACTION = 0.3
HIGH_FRACTION = 0.7


class LineThreshold:
    """Schmitt trigger over per-sample minimum voltages; `bits()` is called chunk by chunk."""

    def __init__(self, low_v: float, high_v: float) -> None:
        if not 0 < low_v < high_v:
            raise ValueError(f"line thresholds need 0 < low < high, got {low_v} and {high_v}")
        self.low_v = float(low_v)
        self.high_v = float(high_v)
        #: The level after the last sample seen (1 high, 0 low).
        self.state = 1
        #: True once the line was high for a whole sample (before that, lows are ignored).
        self.armed = False

    @classmethod
    def for_supply(cls, io_voltage_v: float) -> LineThreshold:
        """Thresholds at `LOW_FRACTION` and `HIGH_FRACTION` of the DUT's I/O voltage."""
        return cls(LOW_FRACTION * io_voltage_v, HIGH_FRACTION * io_voltage_v)

    def bits(self, minimum_v: np.ndarray) -> np.ndarray:
        """GPIO bits (uint8, 1 high) for samples whose lowest line voltage is `minimum_v`.

        A NaN (a reading the instrument could not make) keeps the level before it.
        """
        v = np.asarray(minimum_v, dtype=np.float64)
        n = v.size
        if n == 0:
            return np.empty(0, dtype=np.uint8)
        decided = np.full(n, -1, dtype=np.int8)  # -1: between the thresholds, keep the level
        decided[v < self.low_v] = 0
        decided[v > self.high_v] = 1
        if not self.armed:
            high = np.flatnonzero(decided == 1)
            if high.size == 0:
                return np.ones(n, dtype=np.uint8)
            decided[: high[0]] = -1  # lows before the line was first seen high: ignored
            self.armed = True
        # Forward-fill each decision until the next one; before the first, the carried level.
        last = np.where(decided >= 0, np.arange(n), -1)
        np.maximum.accumulate(last, out=last)
        out = np.where(last >= 0, decided[np.maximum(last, 0)], self.state).astype(np.uint8)
        self.state = int(out[-1])
        return out
