"""Fixtures shared by the firmware tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.firmware.simavr_uno import build_or_skip


@pytest.fixture(scope="session")
def simavr_uno_build() -> tuple[Path, Path]:
    """The simavr harness and the UNO build of the IO manager sketch (skipped if no toolchain)."""
    return build_or_skip()
