"""Waiting for another thread or process to get somewhere: a deadline, never a measurement."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(predicate: Callable[[], object], what: str = "the condition",
               timeout_s: float = 10.0, poll_s: float = 0.005) -> bool:
    """Poll `predicate()` until it is true (then True); fail the test naming `what` if it is
    still false after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not reached within {timeout_s:g} s")
        time.sleep(poll_s)
    return True
