"""How accurate an energy monitor is, as its vendor publishes it: per range, with the source.

Each driver declares a `MonitorAccuracy` (its ``accuracy()``), and its ``settings()`` carries
the declaration's `MonitorAccuracy.to_json` so that it reaches the run's manifest
(``instruments.emon.accuracy``). An uncertainty budget (GUM, JCGM 100) takes its Type B terms
from it: the half-width ``a`` of the instrument's accuracy at the measured current in its range
(a rectangular distribution, ``u = a/√3``), the supply voltage, the sample clock.

Every figure is the vendor's own, cited in `Spec.source` (document and section or table) and
in a comment beside it in the driver. Where a vendor publishes no figure, or where the figure
was not read in the vendor's own document, the declaration is `NotPublished`, saying what was
looked for and where: the budget then reports "instrument accuracy not published" for that
term, never an invented number.

Conventions: a `Spec` is ``± (gain × |reading| + offset)``, ``gain`` a fraction (0.001 for
0.1 %), ``offset`` in the quantity's unit (A for current, V for voltage). A sample clock's
tolerance is relative: ``gain`` = ppm × 1e-6 and ``offset`` 0, so that its half-width for a
duration ``t`` is ``gain × t``.

Pure: no numpy, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any

#: What `NotPublished.message` starts with (the budget's wording for such a term).
NOT_PUBLISHED = "instrument accuracy not published"
#: What a lab's own figure's `Spec.source` starts with (`MonitorAccuracy.with_lab_figures`).
LAB = "lab: "
#: The name of the one range a lab's current figure makes where the driver declares no ranges:
#: it holds every reading (`MonitorAccuracy.range_for`).
ANY_RANGE = "any range (lab)"


@dataclass(frozen=True)
class Spec:
    """± (gain × |reading| + offset): a published accuracy and where it was read."""

    #: Part of the reading, as a fraction (0.001 for 0.1 %).
    gain: float
    #: Fixed part, in the quantity's unit (A, V; 0 for a relative clock tolerance).
    offset: float
    #: The document and its section or table, e.g. "Joulescope JS220 User's Guide, ...".
    source: str

    def __post_init__(self) -> None:
        if not (self.gain >= 0 and self.offset >= 0):
            raise ValueError(f"a spec's gain and offset are half-widths (>= 0), got "
                             f"{self.gain!r} and {self.offset!r}")
        if not self.source.strip():
            raise ValueError("a spec names its source (document, section or table)")

    def half_width(self, reading: float) -> float:
        """The half-width ``a`` of the accuracy at `reading` (in the reading's unit)."""
        return self.gain * abs(reading) + self.offset

    def to_json(self) -> dict[str, Any]:
        return {"kind": "spec", "gain": self.gain, "offset": self.offset,
                "source": self.source}


@dataclass(frozen=True)
class NotPublished:
    """No published figure: what was looked for, and where it was searched."""

    #: What figure was looked for, e.g. "JS220 current accuracy per range".
    what: str
    #: Where it was looked for (documents, pages, search terms), and what was found instead.
    searched: str

    def __post_init__(self) -> None:
        if not self.what.strip() or not self.searched.strip():
            raise ValueError("a NotPublished says what was looked for and where")

    @property
    def message(self) -> str:
        """The budget's words for this term."""
        return f"{NOT_PUBLISHED}: {self.what} (searched: {self.searched})"

    def to_json(self) -> dict[str, Any]:
        return {"kind": "not_published", "what": self.what, "searched": self.searched,
                "message": self.message}


@dataclass(frozen=True)
class RangeAccuracy:
    """One current range: its name (as the driver records it), full scale, accuracy."""

    #: The range's name as the driver records it in ``settings()`` (e.g. "18 mA", "0.1 A").
    name: str
    #: The largest current the range holds [A]; None where the vendor publishes none (the
    #: range is then found by name only, never by the current).
    full_scale_a: float | None
    current: Spec | NotPublished

    def holds(self, current_a: float) -> bool:
        """Whether `current_a` is within this range's (published) full scale."""
        return self.full_scale_a is not None and abs(current_a) <= self.full_scale_a

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "full_scale_a": self.full_scale_a,
                "current": self.current.to_json()}


Figure = Spec | NotPublished


@dataclass(frozen=True)
class MonitorAccuracy:
    """A monitor's declared accuracy: current per range, voltage, set supply, sample clock."""

    #: Each current range, any order; `NotPublished` when no range's figure (nor the ranges
    #: themselves) is published.
    current_ranges: tuple[RangeAccuracy, ...] | NotPublished
    #: The voltage measurement's accuracy; None: the monitor does not measure the voltage (it
    #: sets it, or is given it).
    voltage: Spec | NotPublished | None
    #: The accuracy of the supply voltage the monitor sets; None: it does not source the DUT.
    voltage_set: Spec | NotPublished | None
    #: The sample clock's tolerance, relative (gain = ppm × 1e-6, offset 0).
    clock: Spec | NotPublished
    #: What the figures assume (accuracy class, conditions, how a reading's range is known).
    notes: str = ""

    def __post_init__(self) -> None:
        if isinstance(self.current_ranges, tuple):
            names = [r.name for r in self.current_ranges]
            if len(set(names)) != len(names):
                raise ValueError(f"current range names repeat: {names}")
        if isinstance(self.clock, Spec) and self.clock.offset != 0:
            raise ValueError("a clock tolerance is relative: its offset is 0")

    # -- which range ------------------------------------------------------------------------
    def range_named(self, name: str) -> RangeAccuracy:
        """The declared range called `name`; `KeyError` if there is none."""
        if isinstance(self.current_ranges, NotPublished):
            raise KeyError(f"no current ranges are declared, so none is called {name!r}")
        for rng in self.current_ranges:
            if rng.name == name:
                return rng
        raise KeyError(f"no current range {name!r}: the declared ones are "
                       f"{[r.name for r in self.current_ranges]}")

    def range_for(self, current_a: float, range_name: str | None = None
                  ) -> RangeAccuracy | None:
        """The range a reading of `current_a` was taken in: by name where the instrument
        recorded it (or the range was fixed), else the smallest range whose published full
        scale holds the current (what an auto-ranging instrument picks). None when that cannot
        be told: no ranges declared, no published full scale holds the current (above every
        range, or full scales not published)."""
        if isinstance(self.current_ranges, tuple) and [r.name for r in self.current_ranges] \
                == [ANY_RANGE]:
            return self.current_ranges[0]  # a lab's figure for every range
        if range_name is not None:
            return self.range_named(range_name)
        if isinstance(self.current_ranges, NotPublished):
            return None
        holding = [r for r in self.current_ranges if r.holds(current_a)]
        return min(holding, key=lambda r: r.full_scale_a or 0.0) if holding else None

    # -- half-widths --------------------------------------------------------------------------
    def current_half_width(self, current_a: float, range_name: str | None = None
                           ) -> float | NotPublished:
        """± [A] of a current reading in its range (`range_for`), or why there is no figure."""
        if isinstance(self.current_ranges, NotPublished):
            return self.current_ranges
        rng = self.range_for(current_a, range_name)
        if rng is None:
            return NotPublished(
                what=f"the current range of a {current_a:g} A reading",
                searched="no range was recorded and no declared range with a published full "
                         "scale holds it (declared: "
                         + ", ".join(f"{r.name} ({_amps(r.full_scale_a)})"
                                     for r in self.current_ranges) + ")")
        if isinstance(rng.current, NotPublished):
            return rng.current
        return rng.current.half_width(current_a)

    def voltage_half_width(self, voltage_v: float) -> float | NotPublished | None:
        """± [V] of a measured voltage; None when the monitor does not measure it."""
        return _half_width(self.voltage, voltage_v)

    def voltage_set_half_width(self, voltage_v: float) -> float | NotPublished | None:
        """± [V] of the supply the monitor set to `voltage_v`; None when it sources nothing."""
        return _half_width(self.voltage_set, voltage_v)

    def clock_half_width(self, duration_s: float) -> float | NotPublished:
        """± [s] of a duration counted on the sample clock."""
        if isinstance(self.clock, NotPublished):
            return self.clock
        return self.clock.half_width(duration_s)

    # -- a lab's figures -------------------------------------------------------------------------
    def with_lab_figures(self, source: str, *, current: tuple[float, float] | None = None,
                         voltage: tuple[float, float] | None = None,
                         voltage_measured: bool = False, clock_ppm: float | None = None
                         ) -> MonitorAccuracy:
        """This declaration with the lab's own figures (a calibration certificate, say) in
        place of the driver's for the terms given, and only those: `current` (gain, offset [A])
        for every range, `voltage` (gain, offset [V]) for the measured voltage when
        `voltage_measured`, else for the set (or bench) supply, `clock_ppm` for the sample
        clock. Each such `Spec` cites `source` prefixed "lab: "; `notes` say which terms."""
        cite = LAB + source
        changes: dict[str, Any] = {}
        terms = []
        if current is not None:
            spec = Spec(current[0], current[1], cite)
            changes["current_ranges"] = (
                (RangeAccuracy(ANY_RANGE, None, spec),)
                if isinstance(self.current_ranges, NotPublished)
                else tuple(replace(r, current=spec) for r in self.current_ranges))
            terms.append("current")
        if voltage is not None:
            field = "voltage" if voltage_measured else "voltage_set"
            changes[field] = Spec(voltage[0], voltage[1], cite)
            terms.append("voltage" if voltage_measured else "voltage set")
        if clock_ppm is not None:
            changes["clock"] = Spec(clock_ppm / 1e6, 0.0, cite)
            terms.append("clock")
        if not changes:
            return self
        said = (f"The lab's figures replace the driver's for: {', '.join(terms)} "
                f"({cite}).")
        changes["notes"] = f"{self.notes} {said}".strip()
        return replace(self, **changes)

    # -- listing --------------------------------------------------------------------------------
    def figures(self) -> Iterator[tuple[str, Figure]]:
        """Every declared figure with a label ("current 18 mA", "voltage", "clock", ...)."""
        if isinstance(self.current_ranges, NotPublished):
            yield "current", self.current_ranges
        else:
            for rng in self.current_ranges:
                yield f"current {rng.name}", rng.current
        if self.voltage is not None:
            yield "voltage", self.voltage
        if self.voltage_set is not None:
            yield "voltage set", self.voltage_set
        yield "clock", self.clock

    def to_json(self) -> dict[str, Any]:
        """The declaration as JSON values, for the manifest (`from_json` reads it back)."""
        ranges = (self.current_ranges.to_json() if isinstance(self.current_ranges, NotPublished)
                  else [r.to_json() for r in self.current_ranges])
        return {
            "current_ranges": ranges,
            "voltage": None if self.voltage is None else self.voltage.to_json(),
            "voltage_set": None if self.voltage_set is None else self.voltage_set.to_json(),
            "clock": self.clock.to_json(),
            "notes": self.notes,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MonitorAccuracy:
        """The declaration `to_json` wrote (e.g. a manifest's ``instruments.emon.accuracy``)."""
        ranges = data["current_ranges"]
        current_ranges: tuple[RangeAccuracy, ...] | NotPublished
        if isinstance(ranges, Mapping):
            figure = _figure(ranges)
            if not isinstance(figure, NotPublished):
                raise ValueError(f"current ranges are a list or a NotPublished: {ranges!r}")
            current_ranges = figure
        else:
            current_ranges = tuple(
                RangeAccuracy(str(r["name"]),
                              None if r["full_scale_a"] is None else float(r["full_scale_a"]),
                              _figure(r["current"]))
                for r in ranges)
        return cls(
            current_ranges=current_ranges,
            voltage=None if data["voltage"] is None else _figure(data["voltage"]),
            voltage_set=None if data["voltage_set"] is None else _figure(data["voltage_set"]),
            clock=_figure(data["clock"]),
            notes=str(data.get("notes", "")),
        )


def not_declared(driver: str) -> MonitorAccuracy:
    """The declaration of a driver that declares nothing: every figure `NotPublished`."""
    why = NotPublished(what=f"the {driver} driver's accuracy",
                       searched=f"nothing: the {driver} driver declares no accuracy")
    return MonitorAccuracy(current_ranges=why, voltage=why, voltage_set=why, clock=why,
                           notes=f"the {driver} driver declares no accuracy")


def _half_width(figure: Figure | None, reading: float) -> float | NotPublished | None:
    if figure is None or isinstance(figure, NotPublished):
        return figure
    return figure.half_width(reading)


def _figure(data: Mapping[str, Any]) -> Figure:
    if data["kind"] == "spec":
        return Spec(float(data["gain"]), float(data["offset"]), str(data["source"]))
    if data["kind"] == "not_published":
        return NotPublished(str(data["what"]), str(data["searched"]))
    raise ValueError(f"not an accuracy figure: {dict(data)!r}")


def _amps(value: float | None) -> str:
    return "full scale not published" if value is None else f"{value:g} A"
