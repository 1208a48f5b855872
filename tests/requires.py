"""Skip marks for optional packages, found by presence (`importlib.util.find_spec` finds a
package without importing it).

`pytest.importorskip` at module level imported Rockpool (with JAX, SciPy and matplotlib: 2.3 s,
and on a fresh clone its compile) or WeasyPrint in every xdist worker at collection, for tests
that run them in a `rig` subprocess or import them only when they run. `LazyModule` is the
same for a module a test file uses throughout: it is imported by the first test that uses it.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest


def missing(*names: str) -> list[str]:
    """The top-level packages of `names` that are not installed."""
    return [name for name in names if importlib.util.find_spec(name) is None]


def needs(*names: str) -> pytest.MarkDecorator:
    """Skip unless every package of `names` is installed (`make test` installs them all)."""
    absent = missing(*names)
    return pytest.mark.skipif(bool(absent), reason=f"not installed: {', '.join(absent)} "
                              "(`make test` installs it)")


class LazyModule:
    """The module `name`, imported at the first use of one of its names rather than when the
    test file is: for modules a test file uses throughout that import heavy ones (matplotlib,
    pyqtgraph), which every xdist worker would otherwise import at collection.

    Collection looks at every name of a test module (pytest asks each for `_mock_name` and
    `__wrapped__`): such probes (dunder names, `_mock*`) are answered without importing."""

    def __init__(self, name: str) -> None:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(f"no module named {name!r}", name=name)
        self._lazy_name = name

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith(("__", "_mock", "_lazy")):
            raise AttributeError(attr)
        return getattr(importlib.import_module(self._lazy_name), attr)

    def __repr__(self) -> str:
        return f"<LazyModule {self._lazy_name}>"
