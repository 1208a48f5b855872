"""The energy-monitor interface every driver implements.

A monitor is configured (supply voltage within the bench limit, sample rate), started with a
callback, and then delivers `Chunk`s on its own thread until stopped. Sample ids count from 0
at `start()` and are contiguous unless the instrument dropped samples (drivers report drops).
"""

from __future__ import annotations

import logging
import math
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from drivers.emon.accuracy import MonitorAccuracy, not_declared
from drivers.errors import VoltageLimitError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Chunk:
    """Consecutive samples: current [A], voltage [V], and GPIO bits (bit 0 = the timestamp line).

    Where the instrument tells the current range each sample was taken in (a PPK2's sample
    words, a Joulescope's range stream), `current_range` holds it per sample: an index into
    `range_names`, whose names are those of the driver's `accuracy()` declaration ("R0",
    "18 mA"; a name it does not declare, such as "off", has no figure). None where the
    instrument does not tell it (the range is then the configured one, in `settings()`)."""

    first_sample_id: int
    current: np.ndarray
    voltage: np.ndarray
    gpio: np.ndarray
    #: The range of each sample: uint8 indices into `range_names`; None: not told.
    current_range: np.ndarray | None = None
    #: The names of the `current_range` indices, index 0 first.
    range_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.current)
        if len(self.voltage) != n or len(self.gpio) != n:
            raise ValueError("chunk arrays differ in length")
        if self.current_range is not None:
            if len(self.current_range) != n:
                raise ValueError("chunk arrays differ in length")
            if not self.range_names:
                raise ValueError("a chunk's current ranges need their names")
            if n and int(self.current_range.max()) >= len(self.range_names):
                raise ValueError(f"a chunk's current range index {int(self.current_range.max())}"
                                 f" has no name (names: {self.range_names})")

    def __len__(self) -> int:
        return len(self.current)

    @property
    def end_sample_id(self) -> int:
        """One past the last sample id in this chunk."""
        return self.first_sample_id + len(self.current)


ChunkCallback = Callable[[Chunk], None]


def check_voltage(requested_v: float, limit_v: float, *, who: str = "supply") -> None:
    """Refuse a supply voltage above the bench limit. Call before any byte goes out."""
    if not (requested_v > 0):
        raise VoltageLimitError(f"{who}: supply voltage must be positive, got {requested_v} V")
    if requested_v > limit_v + 1e-12:
        raise VoltageLimitError(
            f"{who}: {requested_v:g} V is above the bench voltage limit of {limit_v:g} V",
            hint="lower the supply voltage in the bench file, or raise voltage_limit_v if the "
            "DUT is rated for it",
        )


def whole_millivolts(requested_v: float, limit_v: float, span_mv: tuple[int, int], *,
                     who: str, hint: str) -> int:
    """The whole millivolts an instrument is sent for `requested_v`: refused above the bench
    limit (`check_voltage`) or outside the instrument's `span_mv`, and never rounded up past
    the limit (3.2996 V on a 3.2996 V bench is sent as 3299 mV, not 3300)."""
    check_voltage(requested_v, limit_v, who=who)
    millivolts = min(round(requested_v * 1000), math.floor(limit_v * 1000 + 1e-9))
    low, high = span_mv
    if not low <= millivolts <= high:
        raise VoltageLimitError(
            f"{who}: can only supply {low / 1000:g}..{high / 1000:g} V, not {requested_v:g} V",
            hint=hint)
    return millivolts


#: An identity word that marks an instrument simulator: "1.0.5-sim", "MY00000001-SIM",
#: "Arc (simulated)". No real instrument's version or serial holds it as a word.
_SIMULATOR_WORD = re.compile(r"(?i)(?<![a-z0-9])sim(ulated|ulator)?(?![a-z0-9])")


def identifies_as_simulator(*identity: str | None) -> bool:
    """Whether what an instrument said about itself (version, ``*IDN?``, hardware name) says
    it is a simulator: the rig labels a monitor simulated from its own reply, never assumes."""
    return any(text and _SIMULATOR_WORD.search(text) for text in identity)


@dataclass
class MonitorStats:
    """Counters a driver keeps so that a run can prove it lost nothing."""

    samples: int = 0
    dropped: int = 0
    notes: list[str] = field(default_factory=list)
    #: Notes not kept because `MAX_NOTES` were already there (a noisy line must not eat memory).
    notes_suppressed: int = 0

    MAX_NOTES = 100

    def note(self, text: str) -> None:
        """Keep a note about the stream, up to `MAX_NOTES`; count the rest."""
        if len(self.notes) < self.MAX_NOTES:
            self.notes.append(text)
        else:
            self.notes_suppressed += 1


class CallbackErrors:
    """The first error the recorder's chunk callback raised on a driver's thread, kept for
    `stop()` to raise. The driver logs it and keeps draining the stream meanwhile: a broken
    recorder must not stall the instrument, and the run still ends with the error."""

    def __init__(self, who: str) -> None:
        self.who = who
        self.first: BaseException | None = None

    def call(self, on_chunk: ChunkCallback, chunk: Chunk) -> None:
        """`on_chunk(chunk)`; an exception it raises is logged and kept, not raised."""
        try:
            on_chunk(chunk)
        except Exception as exc:  # surfaced by stop(); the stream must keep draining
            log.exception("%s: on_chunk callback failed", self.who)
            self.keep(exc)

    def keep(self, exc: BaseException) -> None:
        """Keep `exc` unless an earlier error is kept already."""
        if self.first is None:
            self.first = exc

    def clear(self) -> None:
        """Forget a kept error (a new acquisition starts)."""
        self.first = None

    def raise_kept(self) -> None:
        """Raise the kept error once (it is forgotten), if there is one."""
        error, self.first = self.first, None
        if error is not None:
            raise error


class AcquisitionThread:
    """A driver's acquisition thread: runs a body that polls `stop_wanted`, and keeps what the
    body raised in `error` (the driver's `fault`, raised by its `stop`)."""

    def __init__(self, who: str, what: str = "acquisition") -> None:
        self.who, self.what = who, what
        self.stop_wanted = threading.Event()
        self.error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def reset(self) -> None:
        """No error, no stop wanted: before a new acquisition is armed."""
        self.error = None
        self.stop_wanted.clear()

    def start(self, body: Callable[[], None], name: str) -> None:
        """Run `body` on a daemon thread called `name`."""
        self._thread = threading.Thread(target=self._run, args=(body,), name=name, daemon=True)
        self._thread.start()

    def _run(self, body: Callable[[], None]) -> None:
        try:
            body()
        except BaseException as exc:  # surfaced by stop() and `fault`
            log.warning("%s: %s failed: %s", self.who, self.what, exc)
            self.error = exc

    def stop(self, timeout_s: float, late: Callable[[], BaseException]) -> BaseException | None:
        """Ask the body to end and wait up to `timeout_s` for it; the error that ended it (the
        first), `late()` when it did not end in time, else None."""
        self.stop_wanted.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout_s)
            if thread.is_alive():
                self.error = self.error or late()
        return self.error


class _Connectable(Protocol):
    """A driver that takes control of its instrument in `connect()` (after `open`)."""

    def connect(self) -> None: ...

    def close(self) -> None: ...


M = TypeVar("M", bound=_Connectable)


class EnergyMonitor(ABC):
    """Configure, power, start, stream chunks, stop. Drivers subclass this."""

    #: Short driver name, e.g. "lpm01a".
    driver: str = "?"
    #: False for monitors that do not switch the DUT's supply (the bench's supply does).
    powers_dut: bool = True
    #: False for monitors that see the timestamp line only as a trigger (its first edge).
    sees_every_edge: bool = True
    #: False for monitors that set (or are given) the supply voltage instead of measuring it.
    measures_voltage: bool = True
    #: True for monitors whose chunks carry each sample's current range (`Chunk.current_range`).
    records_range: bool = False

    #: Every driver's constructor, a classmethod: ``open(address, *, voltage_limit_v,
    #: simulated=False, ...)`` with options of its own (`drivers.emon.open_monitor` calls it).
    open: ClassVar[Callable[..., EnergyMonitor]]

    def __init__(self, *, voltage_limit_v: float) -> None:
        self.voltage_limit_v = voltage_limit_v
        self.stats = MonitorStats()

    @classmethod
    def check_setup(cls, voltage: float, sample_rate: float, *, voltage_limit_v: float,
                    **options: Any) -> None:
        """Refuse, without the instrument, what `configure(voltage, sample_rate)` would refuse
        of a driver opened with `options` (a supply or rate no such instrument gives); the rig
        calls it before it creates a run folder. Drivers with more to check extend it."""
        check_voltage(voltage, voltage_limit_v, who=cls.driver)

    @classmethod
    def measures_voltage_with(cls, **options: Any) -> bool:
        """Whether a driver opened with `options` measures the supply voltage (its traces then
        store a voltage signal) rather than setting it (`set_voltage`); known before opening,
        for the disk-space projection."""
        return cls.measures_voltage

    @classmethod
    def records_range_with(cls, **options: Any) -> bool:
        """Whether a driver opened with `options` delivers each sample's current range
        (`Chunk.current_range`; its traces then store a range signal); known before opening,
        for the disk-space projection."""
        return cls.records_range

    @classmethod
    def sees_every_edge_with(cls, **options: Any) -> bool:
        """`sees_every_edge` of a driver opened with `options` (known before opening it)."""
        return cls.sees_every_edge

    @property
    @abstractmethod
    def sample_rate(self) -> float:
        """Samples per second of the delivered stream."""

    @abstractmethod
    def configure(self, voltage: float, sample_rate: float) -> None:
        """Set supply voltage [V] and sample rate [Hz]; must call `check_voltage` first."""

    @abstractmethod
    def power_on(self) -> None:
        """Switch the DUT supply on."""

    @abstractmethod
    def power_off(self) -> None:
        """Switch the DUT supply off. Safe to call at any time, also after errors."""

    @abstractmethod
    def start(self, on_chunk: ChunkCallback) -> None:
        """Start acquiring; `on_chunk` is called on the driver's thread for every chunk."""

    @abstractmethod
    def stop(self) -> None:
        """Stop acquiring; every chunk acquired before has been delivered when this returns."""

    @abstractmethod
    def close(self) -> None:
        """Power off, give control back, release the port. Safe to call twice."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """A snapshot of every instrument setting, for the run manifest."""

    @classmethod
    def _connect_or_close(cls, monitor: M) -> M:
        """`monitor` after its driver's `connect()` (taking control of the instrument), or
        closed (port released) if that fails: the tail of every serial/network `open`."""
        try:
            monitor.connect()
        except BaseException:
            monitor.close()
            raise
        return monitor

    def _stop_while_closing(self) -> None:
        """Stop an acquisition as part of `close()`: log a failure, never raise, so that closing
        (power off, release the port) always goes on."""
        try:
            self.stop()
        except Exception as exc:
            log.warning("%s: stop while closing failed: %s", self.driver, exc)

    def __enter__(self) -> EnergyMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def set_voltage(self) -> tuple[float, str] | None:
        """(volts, where it came from) when every chunk's voltage is a value the monitor set or
        was given rather than measured (call after `configure`); None when it measures the
        voltage. A trace then stores no voltage signal, only this value and its source."""
        return None

    def accuracy(self) -> MonitorAccuracy:
        """The instrument's accuracy as its vendor publishes it, each figure with its source
        (`drivers.emon.accuracy`); drivers override it. This default declares nothing: every
        figure is `NotPublished`, saying the driver declares none. ``settings()`` carries its
        `MonitorAccuracy.to_json` as ``accuracy`` (the manifest's
        ``instruments.emon.accuracy``)."""
        return not_declared(self.driver)

    def self_test(self) -> dict[str, Any]:
        """Identify the instrument and check it answers; returns what was learnt."""
        return {"driver": self.driver}
