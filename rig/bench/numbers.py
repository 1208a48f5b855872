"""Numbers read from the rig's TOML files (bench, sweep, system and tuning files).

One reader for all of them, so every number is checked alike: the right type (a TOML boolean
is never a number, a float never an integer), finite (TOML has ``nan`` and ``inf``, which no
setting means), and inside its declared span. A refusal is one `ConfigError` line naming the
file, the table and the key, raised while the file is loaded: before any run folder exists or
any instrument is opened.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from protocols.errors import quoted
from rig.errors import ConfigError

#: What a non-finite value is told to do instead.
FINITE_HINT = "write a finite number: nan and inf mean no setting here"


@dataclass(frozen=True)
class Span:
    """Where a number may lie: `low`..`high` (None: unbounded), each end open or closed."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    #: Appended to the bounds in messages ("V", "Hz", ...).
    unit: str = ""

    def holds(self, value: float) -> bool:
        """Whether `value` lies in the span."""
        if self.low is not None and (value < self.low or (self.low_open and value == self.low)):
            return False
        return self.high is None or not (value > self.high
                                         or (self.high_open and value == self.high))

    def text(self) -> str:
        """The span in words: "in (0, 60] V", "> 0", ">= 1"."""
        unit = f" {self.unit}" if self.unit else ""
        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}"
                    f"{')' if self.high_open else ']'}{unit}")
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}{unit}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_num(self.high)}{unit}"
        return "finite"


def positive(high: float | None = None, unit: str = "") -> Span:
    """> 0 (and <= `high`)."""
    return Span(0.0, high, low_open=True, unit=unit)


def at_least(low: float, high: float | None = None, unit: str = "") -> Span:
    """>= `low` (and <= `high`)."""
    return Span(low, high, unit=unit)


def where(path: Path | str, table: str) -> str:
    """"FILE: [table]", or "FILE:" for the top level."""
    return f"{path}: [{table}]" if table else f"{path}:"


def number(value: Any, *, path: Path | str, table: str, key: str, kind: type = float,
           span: Span | None = None, hint: str | None = None) -> Any:
    """`value` as a `kind` (float or int) inside `span`, or a ConfigError naming path, table
    and key. An int is a valid float (``1`` for ``1.0``); a bool is never a number."""
    at = f"{where(path, table)} {key}"
    wanted = "an integer" if kind is int else "a number"
    if isinstance(value, float) and not math.isfinite(value):
        expected = f"; expected {wanted} {span.text() if span is not None else ''}".rstrip()
        raise ConfigError(f"{at}: {_toml(value)} is not a finite number{expected}",
                          hint=hint or FINITE_HINT)
    ok_type = (not isinstance(value, bool) and isinstance(value, int | float)
               and (kind is float or isinstance(value, int)))
    if not ok_type:
        raise ConfigError(f"{at}: expected {wanted}, found {quoted(value)} ({_kind(value)})",
                          hint=hint)
    if span is not None and not span.holds(value):
        raise ConfigError(f"{at}: expected {wanted} {span.text()}, found {quoted(value)}",
                          hint=hint)
    return float(value) if kind is float else value


def refuse_non_finite(data: Any, path: Path | str, table: str = "") -> None:
    """Refuse the first nan or inf anywhere in `data` (tables, arrays, inline tables), naming
    its table and key: the one check every number of every file passes, known key or not."""
    if isinstance(data, dict):
        for key, value in data.items():
            if isinstance(value, dict):
                refuse_non_finite(value, path, f"{table}.{key}" if table else str(key))
            else:
                _refuse_in_value(value, path, table, str(key))
    elif isinstance(data, list):
        for i, item in enumerate(data):
            _refuse_in_value(item, path, table, f"[{i}]")


def _refuse_in_value(value: Any, path: Path | str, table: str, key: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where(path, table)} {key}: {_toml(value)} is not a finite number",
                          hint=FINITE_HINT)
    if isinstance(value, list):
        for i, item in enumerate(value):
            _refuse_in_value(item, path, table, f"{key}[{i}]")
    elif isinstance(value, dict):  # an inline table, or a table in an array of tables
        refuse_non_finite(value, path, f"{table}.{key}" if table else key)


def _num(value: float) -> str:
    """A bound as people write it: whole numbers in full (4294967295), others with %g."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e16 else f"{value:g}"


def _toml(value: float) -> str:
    """How TOML spells a non-finite float."""
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "true or false"
    return {float: "a number", int: "an integer", str: "a string", list: "an array",
            dict: "a table"}.get(type(value), type(value).__name__)
