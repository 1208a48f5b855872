"""Current ranges: which values each energy-monitor driver takes, read from tolerant spellings.

A bench names the range as text (``[emon] current_range``); this module turns it into the one
spelling the driver sends, or says what the driver accepts instead. Pure: no instrument, no I/O.

- ``lpm01a``: only ``auto``. The PowerShield auto-ranges by itself in its dynamic acquisition
  mode (``acqmode dyn``, what the driver uses); it has no range to choose.
- ``joulescope``: ``auto`` or a fixed range by its pyjoulescope_driver name: ``10 A``, ``2 A``
  (JS110 only), ``180 mA``, ``18 mA``, ``1.8 mA``, ``180 µA``, ``18 µA`` (the options of the
  JS110's ``s/i/range/select``; the JS220 takes the same names on its ``s/i/range/select`` with
  ``s/i/range/mode`` = ``manual``, and has no 2 A range). Spellings such as ``18mA``, ``0.018``
  or ``18 uA`` are taken and written back as the driver's name.
- ``n6705``, ``34465a``: ``auto`` or amps (``0.1``, ``1e-3``, ``100 mA``) up to the driver's
  largest range; the instrument selects its smallest range that holds the value. ``auto`` keeps
  the driver's fixed default range (`KEYSIGHT_DEFAULT_RANGE_A`): autoranging during a timed
  capture is not used (see drivers/emon/keysight.py).
- ``ppk2``: only ``auto``. The PPK2 picks one of its five ranges for every sample by itself.
- ``otii``: only ``auto``: the Otii auto-ranges (``arc_set_range low``, see drivers/emon/otii.py).
- ``rapl``, ``nvml``, ``none``: only ``auto`` (nothing to range).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from protocols.errors import quoted
from protocols.scpi import format_number

AUTO = "auto"

#: Joulescope range names -> full scale [A], largest first (JS110 ``s/i/range/select`` options).
JOULESCOPE_RANGES: dict[str, float] = {
    "10 A": 10.0,
    "2 A": 2.0,
    "180 mA": 0.18,
    "18 mA": 0.018,
    "1.8 mA": 1.8e-3,
    "180 µA": 180e-6,
    "18 µA": 18e-6,
}
#: The names a JS220 takes on ``s/i/range/select`` (it has no 2 A range).
JS220_RANGES: tuple[str, ...] = tuple(n for n in JOULESCOPE_RANGES if n != "2 A")
#: The fixed range a Keysight driver measures in when the bench says "auto" [A].
KEYSIGHT_DEFAULT_RANGE_A = 0.1
#: Largest range each Keysight driver may be asked for [A]: an N678x SMU module's top range;
#: the 34465A's 3 A input (its 10 A range needs the 10 A terminal, which the driver does not use).
KEYSIGHT_MAX_RANGE_A = {"n6705": 3.06, "34465a": 3.0}

_WHY_AUTO_ONLY = {
    "lpm01a": "the PowerShield auto-ranges by itself in its dynamic acquisition mode "
              "(acqmode dyn); it has no fixed range to choose",
    "ppk2": "the PPK2 switches among its five ranges by itself, per sample; it has no fixed "
            "range to choose",
    "otii": "the Otii Arc/Ace auto-ranges by itself (arc_set_range low, what the driver sets); "
            "forcing its high range only loses the low range's resolution",
    "rapl": "a RAPL counter reads power; it has no current range",
    "nvml": "an NVML counter reads power; it has no current range",
    "none": "there is no energy monitor to range",
}
#: unit -> power of ten (scaled in decimal, so that "10 uA" is exactly 1e-05)
_UNITS = {"a": 0, "ma": -3, "ua": -6, "µa": -6, "na": -9}
_AMPS = re.compile(r"([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?)\s*([a-zµ]*)")


class RangeError(ValueError):
    """A current range the driver does not take: `hint` lists what it does take."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def parse_amps(text: str) -> float:
    """Amps from ``0.018``, ``1e-3``, ``18 mA``, ``18mA``, ``180 µA`` / ``180 uA``, ``10 A``.

    Raises `ValueError` for anything else (no number, an unknown unit, not finite).
    """
    # Both micro signs (U+00B5 and Greek mu U+03BC) are "µ"; case never matters (mA == ma).
    s = text.strip().replace("\u03bc", "\u00b5").lower()
    m = _AMPS.fullmatch(s)
    if m is None or m.group(2) not in ("", *_UNITS):
        raise ValueError(f"{quoted(text)} is not a current")
    value = float(Decimal(m.group(1)).scaleb(_UNITS[m.group(2) or "a"]))
    if not math.isfinite(value):
        raise ValueError(f"{quoted(text)} is not a finite current")
    return value


def accepted(driver: str) -> str:
    """What `driver` takes, in words (for hints and tooltips)."""
    if driver == "joulescope":
        names = ", ".join(n + (" (JS110 only)" if n == "2 A" else "") for n in JOULESCOPE_RANGES)
        return f'"auto" or a fixed range: {names}'
    if driver in KEYSIGHT_MAX_RANGE_A:
        return (f'"auto" (the driver\'s fixed {format_number(KEYSIGHT_DEFAULT_RANGE_A)} A '
                f"range) or amps up to {format_number(KEYSIGHT_MAX_RANGE_A[driver])}, "
                'e.g. "0.1" or "1e-3"')
    return '"auto"'


def choices(driver: str) -> tuple[str, ...] | None:
    """Every value `driver` takes, when they are a short list (None: any amps in a span)."""
    if driver == "joulescope":
        return (AUTO, *JOULESCOPE_RANGES)
    if driver in KEYSIGHT_MAX_RANGE_A:
        return None
    return (AUTO,)


def normalize(driver: str, value: str | float) -> str:
    """`value` spelled as `driver` takes it (``auto``, a Joulescope name, amps as SCPI sends
    them); `RangeError` naming what the driver takes if it takes no such range."""
    text = str(value).strip()
    if text.lower() == AUTO:
        return AUTO
    if driver not in ("joulescope", *KEYSIGHT_MAX_RANGE_A):
        why = _WHY_AUTO_ONLY.get(driver, f"the {driver} driver takes no current range")
        raise RangeError(f"the {driver} takes only \"auto\", found {quoted(text)}",
                         hint=f"{why}; use \"auto\" (the default)")
    try:
        amps = parse_amps(text)
    except ValueError:
        raise RangeError(f"{quoted(text)} is not a current range of the {driver}",
                         hint=f"use {accepted(driver)}") from None
    if driver == "joulescope":
        for name, full_scale in JOULESCOPE_RANGES.items():
            if math.isclose(amps, full_scale, rel_tol=1e-9):
                return name
        raise RangeError(f"{quoted(text)} is not a Joulescope range",
                         hint=f"use {accepted(driver)}")
    top = KEYSIGHT_MAX_RANGE_A[driver]
    if not 0 < amps <= top * (1 + 1e-12):
        raise RangeError(f"{quoted(text)} is outside the {driver}'s current ranges",
                         hint=f"use {accepted(driver)}")
    return format_number(amps)


def full_scale_a(name: str) -> float:
    """Full scale [A] of the Joulescope range `name`."""
    return JOULESCOPE_RANGES[name]
