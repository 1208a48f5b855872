"""The Cortex-M4 build of the DUT shim (firmware/dut/mps2-an386) for the tests that run it."""

from __future__ import annotations

import shutil
import struct
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


#: ELF constants the crafted images below use (the ELF specification's).
EM_ARM, EM_X86_64 = 40, 62
PT_LOAD = 1
#: A vector table (initial SP, reset handler at 0x41 in Thumb) then, at 0x40, `udf #0`: the
#: core takes a UsageFault, escalated to a HardFault whose vector (0) is no Thumb address, and
#: locks up: QEMU aborts with "Lockup". An image the rig cannot tell from the bench alone.
LOCKUP_CODE = (struct.pack("<II", 0x2000_1000, 0x41).ljust(0x40, b"\0")
               + struct.pack("<H", 0xDE00))


def arm_elf(segments: list[tuple[int, bytes, int]], *, machine: int = EM_ARM,
            elf_class: int = 1, offset: int = 0x1000) -> bytes:
    """A minimal executable ELF (little-endian): one PT_LOAD per (address, bytes, memory size)
    of `segments`, loaded where it runs (p_paddr = p_vaddr), its bytes from `offset` on, one
    after another (each 4-byte aligned). `elf_class` 2 writes a 64-bit header (an x86-64
    image, with `machine`=EM_X86_64)."""
    wide = elf_class == 2
    ehsize, phentsize = (64, 56) if wide else (52, 32)
    headers, body, at = b"", b"", offset
    for address, data, memsz in segments:
        if wide:
            headers += struct.pack("<IIQQQQQQ", PT_LOAD, 5, at, address, address, len(data),
                                   memsz, 4)
        else:
            headers += struct.pack("<IIIIIIII", PT_LOAD, at, address, address, len(data),
                                   memsz, 5, 4)
        padded = data.ljust(-(-len(data) // 4) * 4, b"\0")
        body += padded
        at += len(padded)
    ident = b"\x7fELF" + bytes([elf_class, 1, 1, 0]) + bytes(8)
    entry = segments[0][0] | 1 if segments else 0
    if wide:
        head = ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, entry, ehsize, 0, 0,
                                   ehsize, phentsize, len(segments), 64, 0, 0)
    else:
        head = ident + struct.pack("<HHIIIIIHHHHHH", 2, machine, 1, entry, ehsize, 0,
                                   0x5000400, ehsize, phentsize, len(segments), 40, 0, 0)
    return (head + headers).ljust(offset, b"\0") + body
