"""Test helpers for the IO manager sketch's AVR build on simavr (virtual_bench.simavr_uno).

`build_or_skip` gives the harness and the UNO ELF (`make firmware-avr`), or skips with what is
missing (`make test` installs the Debian packages); tests/firmware/conftest.py serves it as the
session fixture `simavr_uno_build`. `relay` puts the emulated UNO between the rig and a DUT pty:
the IO manager's client, handshaken.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from drivers.io_manager import IoManager, IoManagerTransport
from drivers.transport import SerialTransport
from virtual_bench.simavr_uno import SimavrUno, simavr_uno_binaries, simavr_uno_missing


def build_or_skip() -> tuple[Path, Path]:
    """(harness, ELF), built once; skipped with the reason when the toolchain is missing."""
    missing = simavr_uno_missing()
    if missing is not None:
        pytest.skip(f"the simavr UNO cannot run: {missing}")
    return simavr_uno_binaries(build=True)


@dataclass
class Relay:
    """The emulated UNO wired to a DUT port, and the rig's IO manager client on its USB pty."""

    uno: SimavrUno
    io: IoManager

    def transport(self) -> IoManagerTransport:
        """The DUT transport through the UNO's pass-through."""
        return IoManagerTransport(self.io)

    def close(self) -> str:
        """Close the client and kill the harness; the harness's stderr (its byte counts)."""
        self.io.close()
        return self.uno.close()


def relay(build: tuple[Path, Path], dut_port: str) -> Relay:
    """Start the harness on `dut_port` and handshake with the sketch (before the DUT boots)."""
    harness, elf = build
    uno = SimavrUno(dut_port, harness=harness, elf=elf)
    io = IoManager(SerialTransport(uno.path, 115200, name="IO manager"), label="simavr UNO")
    try:
        io.handshake(timeout_s=10.0)
    except Exception:
        io.close()
        uno.close()
        raise
    return Relay(uno, io)
