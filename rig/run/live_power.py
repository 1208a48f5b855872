"""A live, decimated view of the power stream, for displays (the runner GUI, telemetry).

The recorder hands every chunk's power (i*v) to a `PowerDecimator` on the monitor's thread. It
cuts the stream into bins of a few milliseconds and keeps min, max and mean per bin, so a
display gets a few hundred points per second at any sample rate (1 kS/s or 2 MS/s alike) and
still shows every spike as the min/max envelope. Every `emit_s` of stream it hands a
`PowerPreview` to its callback, which must not block (append to a queue, nothing more).

Previews are not measurements: they are not written to events.jsonl (the trace file has every
sample) and nothing is computed from them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from rig.run.events import Event

#: Stream time per preview point [s]: fine enough for a screen, coarse enough to be cheap.
BIN_S = 0.005
#: Stream time per preview [s].
EMIT_S = 0.1


@dataclass(frozen=True)
class PowerPreview(Event):
    """Decimated power of `len(mean_w)` consecutive bins of `step` samples each."""

    kind: ClassVar[str] = "power_preview"
    #: A display stream: the run store does not keep it (the trace holds every sample).
    transient: ClassVar[bool] = True
    #: Sample id of the first sample of the first bin.
    first_sample: int = 0
    #: Samples per bin.
    step: int = 1
    sample_rate_hz: float = 0.0
    min_w: list[float] = field(default_factory=list)
    max_w: list[float] = field(default_factory=list)
    mean_w: list[float] = field(default_factory=list)

    @property
    def start_s(self) -> float:
        """Stream time [s] of the first bin's start."""
        return self.first_sample / self.sample_rate_hz

    def times_s(self) -> np.ndarray:
        """Stream time [s] of each bin's centre."""
        centres = self.first_sample + self.step * (np.arange(len(self.mean_w)) + 0.5)
        return centres / self.sample_rate_hz


class PowerDecimator:
    """Bins a sample stream of power values into min/max/mean previews (vectorised)."""

    def __init__(
        self,
        sample_rate: float,
        emit: Callable[[PowerPreview], None],
        *,
        bin_s: float = BIN_S,
        emit_s: float = EMIT_S,
    ) -> None:
        self.sample_rate = float(sample_rate)
        self.step = max(1, round(self.sample_rate * bin_s))
        self._emit = emit
        self._emit_bins = max(1, round(emit_s / (self.step / self.sample_rate)))
        self._carry = np.empty(0, dtype=np.float64)
        self._carry_first = 0
        self._next: int | None = None
        self._first: int | None = None  # sample id of the first pending bin
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._pending = 0

    def add(self, first: int, power: np.ndarray) -> None:
        """Take `power` for samples [first, first + len(power)) (the monitor's thread)."""
        if power.size == 0:
            return
        if self._next is not None and first != self._next:
            # Lost samples: bins never straddle a gap; what was pending goes out as it is.
            self.flush()
            self._carry = self._carry[:0]
        if self._carry.size == 0:
            self._carry_first = first
            data = power
        else:
            data = np.concatenate((self._carry, power))
        whole = data.size // self.step
        if whole:
            blocks = data[: whole * self.step].reshape(whole, self.step)
            if self._first is None:
                self._first = self._carry_first
            self._parts.append((blocks.min(axis=1), blocks.max(axis=1), blocks.mean(axis=1)))
            self._pending += whole
            self._carry_first += whole * self.step
        self._carry = data[whole * self.step :].copy()
        self._next = first + power.size
        if self._pending >= self._emit_bins:
            self.flush()

    def flush(self) -> None:
        """Hand over the whole bins taken so far (a partial bin waits for its samples)."""
        if not self._parts or self._first is None:
            return
        lows, highs, means = (np.concatenate(p) for p in zip(*self._parts, strict=True))
        # A flat bin's float mean can come out one ulp above its max: it never leaves the band.
        means = np.clip(means, lows, highs)
        preview = PowerPreview(
            first_sample=self._first, step=self.step, sample_rate_hz=self.sample_rate,
            min_w=lows.tolist(), max_w=highs.tolist(), mean_w=means.tolist(),
        )
        self._parts, self._pending, self._first = [], 0, None
        self._emit(preview)
