"""Skip marks for optional packages, found by presence (`importlib.util.find_spec` finds a
package without importing it).

`pytest.importorskip` at module level imported Rockpool (with JAX, SciPy and matplotlib: 2.3 s,
and on a fresh clone its compile) or WeasyPrint in every xdist worker at collection, for tests
that run them in a `rig` subprocess or import them only when they run.
"""

from __future__ import annotations

import importlib.util

import pytest


def missing(*names: str) -> list[str]:
    """The top-level packages of `names` that are not installed."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def needs(*names: str) -> pytest.MarkDecorator:
    """Skip unless every package of `names` is installed (`make test` installs them all)."""
    absent = missing(*names)
    return pytest.mark.skipif(bool(absent), reason=f"not installed: {', '.join(absent)} "
                              "(`make test` installs it)")
