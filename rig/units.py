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


def pct(value: float | None, digits: int = 2) -> str:
    """A fraction as a percentage: 0.875 -> "87.50%"."""
    return "—" if value is None else f"{value * 100:.{digits}f}%"
