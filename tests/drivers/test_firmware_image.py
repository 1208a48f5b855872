"""drivers/dut/qemu.py `QemuBoard.check_image` (drivers/dut/elf.py's reader): what the image
file alone shows is refused before QEMU starts (issue 39): not an ELF, not a 32-bit
little-endian ARM one, cut short, or with a loadable segment outside the emulated board's
memory or no vector table where the core boots from. QEMU itself would load any of them and
abort with "Lockup" once the run folder exists."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import pytest

from drivers.dut.qemu import QemuBoard
from drivers.errors import PortError
from tests.m4_image import EM_X86_64, LOCKUP_CODE, REPO, arm_elf

VECTORS = struct.pack("<II", 0x2000_1000, 0x41).ljust(0x44, b"\0")


def image(tmp_path: Path, data: bytes, name: str = "fw.elf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def refusal(path: Path) -> str:
    with pytest.raises(PortError) as err:
        QemuBoard.check_image(path, machine="mps2-an386")
    assert str(path) in err.value.message and err.value.hint
    return err.value.message


def test_the_shim_and_a_small_arm_image_pass(tmp_path: Path) -> None:
    QemuBoard.check_image(image(tmp_path, arm_elf([(0, LOCKUP_CODE, len(LOCKUP_CODE))])),
                          machine="mps2-an386")
    # Code in the image's SSRAM, data loaded there and copied to the RAM at 0x20000000 (a
    # segment whose addresses differ), a stack with no bytes in the file.
    QemuBoard.check_image(image(tmp_path, arm_elf([
        (0, VECTORS, 0x1000), (0x2000_0000, b"\1" * 64, 0x8000), (0x2000_8000, b"", 0x2000),
    ])), machine="mps2-an386")
    built = REPO / "build/firmware/arm/dut-mps2-an386.elf"
    if built.is_file():
        QemuBoard.check_image(built, machine="mps2-an386")


def test_bytes_that_are_no_elf_are_refused(tmp_path: Path) -> None:
    noise = random.Random(39).randbytes(4096)
    assert "is not an ELF image" in refusal(image(tmp_path, noise))
    assert "is not an ELF image" in refusal(image(tmp_path, bytes(4096)))
    assert "is empty" in refusal(image(tmp_path, b""))


def test_an_image_for_another_machine_is_refused(tmp_path: Path) -> None:
    x86 = arm_elf([(0x40_0000, b"\x90" * 16, 16)], machine=EM_X86_64, elf_class=2)
    message = refusal(image(tmp_path, x86))
    assert "64-bit" in message and "32-bit" in message
    x86_32 = arm_elf([(0, VECTORS, len(VECTORS))], machine=3)
    assert "machine 3 (x86)" in refusal(image(tmp_path, x86_32))
    big = bytearray(arm_elf([(0, VECTORS, len(VECTORS))]))
    big[5] = 2
    assert "big-endian" in refusal(image(tmp_path, bytes(big)))


def test_an_image_cut_short_is_refused(tmp_path: Path) -> None:
    whole = arm_elf([(0, VECTORS.ljust(0x3000, b"\1"), 0x3000)])
    message = refusal(image(tmp_path, whole[:1024]))
    assert "cut short" in message and "1024 B" in message
    assert "cut short" in refusal(image(tmp_path, whole[:40]))  # inside the ELF header
    assert "cut short" in refusal(image(tmp_path, whole[:60]))  # inside the program headers


def test_segments_outside_the_boards_memory_are_refused(tmp_path: Path) -> None:
    # Linked for an STM32 (flash at 0x08000000): nothing of the AN386 is there.
    stm32 = arm_elf([(0x0800_0000, VECTORS, len(VECTORS))])
    message = refusal(image(tmp_path, stm32))
    assert "0x08000000" in message and "mps2-an386" in message
    # Starts in the RAM but runs past its 4 MB.
    spills = arm_elf([(0, VECTORS, len(VECTORS)), (0x203F_F000, b"", 0x2000)])
    assert "0x203ff000" in refusal(image(tmp_path, spills))


def test_an_image_without_a_vector_table_at_0_is_refused(tmp_path: Path) -> None:
    no_vectors = arm_elf([(0x2000_0000, VECTORS, len(VECTORS))])
    assert "vector table" in refusal(image(tmp_path, no_vectors))
    arm_state = arm_elf([(0, struct.pack("<II", 0x2000_1000, 0x40).ljust(0x44, b"\0"), 0x44)])
    assert "reset vector 0x00000040" in refusal(image(tmp_path, arm_state))
    nowhere = arm_elf([(0, struct.pack("<II", 0x2000_1000, 0x0080_0001).ljust(64, b"\0"), 64)])
    assert "reset vector 0x00800001" in refusal(image(tmp_path, nowhere))


def test_too_many_program_headers_are_refused_without_reading_them(tmp_path: Path) -> None:
    data = bytearray(arm_elf([(0, VECTORS, len(VECTORS))]))
    struct.pack_into("<H", data, 44, 0xFFFF)  # e_phnum
    assert "cut short" in refusal(image(tmp_path, bytes(data)))
