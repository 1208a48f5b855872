"""The Cortex-M4 build of the DUT shim (firmware/dut/mps2-an386) for the tests that run it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def build_m4_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the firmware image into a fresh folder; skip (reason printed) without the
    toolchain or QEMU, which `make system-deps` installs."""
    missing = [t for t in ("make", "arm-none-eabi-gcc", "qemu-system-arm") if not shutil.which(t)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: cannot run the Cortex-M4 build "
                    "(`make system-deps` installs the Debian packages)")
    out = tmp_path_factory.mktemp("m4")
    done = subprocess.run(["make", "-s", "-C", str(REPO / "firmware/dut/mps2-an386"),
                           f"OUT={out}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return out / "dut-mps2-an386.elf"
