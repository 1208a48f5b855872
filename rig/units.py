"""Numbers as a lab engineer reads them: an SI prefix and a fixed count of significant digits.

One formatter for every place the rig shows a measured value to a person (the report, the
viewer), so the same number always reads the same.
"""

from __future__ import annotations

import math

_PREFIXES = [(1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"),
             (1e-9, "n"), (1e-12, "p"), (1e-15, "f")]


def si(value: float | None, unit: str, digits: int = 4) -> str:
    """`value` with an SI prefix and `digits` significant digits: 4.5e-05, "J" -> "45.00 µJ".

    None (not measured) is "—" and NaN (lost samples) is "n/a", never a number.
    """
    if value is None:
        return "—"
    if not math.isfinite(value):
        return "n/a"
    if value == 0:
        return f"0 {unit}"
    # 0.9995 of the step: a value that rounds up to 1000 of a prefix takes the next one.
    scale, prefix = next(((s, p) for s, p in _PREFIXES if abs(value) >= s * 0.9995),
                         _PREFIXES[-1])
    return f"{value / scale:#.{digits}g}".rstrip(".") + f" {prefix}{unit}"


def si_prefix(value: float) -> tuple[float, str]:
    """The scale and prefix `si` writes `value` with: 4.5e-05 -> (1e-06, "µ")."""
    if not math.isfinite(value) or value == 0:
        return 1.0, ""
    return next(((s, p) for s, p in _PREFIXES if abs(value) >= s * 0.9995), _PREFIXES[-1])


def si_alongside(u: float, value: float, unit: str, digits: int = 2) -> str:
    """An uncertainty `u` in the prefix of the `value` it goes with, to `digits` significant
    digits in fixed point (never an exponent): (1.04e-06, 4.5e-05, "J") -> "1.0 µJ"."""
    if not math.isfinite(u):
        return "n/a"
    scale, prefix = si_prefix(value if math.isfinite(value) and value != 0 else u)
    x = abs(u) / scale
    if x == 0:
        return f"0 {prefix}{unit}"
    decimals = min(15, max(0, digits - 1 - math.floor(math.log10(x))))
    return f"{x:.{decimals}f} {prefix}{unit}"


def pct(value: float | None, digits: int = 2) -> str:
    """A fraction as a percentage: 0.875 -> "87.50%"."""
    return "—" if value is None else f"{value * 100:.{digits}f}%"
