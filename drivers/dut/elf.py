"""The loadable segments of an ELF image, read from its header and program headers (the ELF
specification's layout, 32- and 64-bit, either byte order): enough to tell, before an emulator
is started, whether a firmware image is one the emulated board can run at all.

`read_segments` raises `ElfError` saying what is wrong (not an ELF, cut short, ...); it never
reads section headers or symbols, and never more program headers than the file holds.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = b"\x7fELF"
#: e_machine values named in messages (the ELF specification's and its processor supplements').
MACHINES = {2: "SPARC", 3: "x86", 8: "MIPS", 20: "PowerPC", 40: "ARM", 62: "x86-64",
            83: "AVR", 183: "AArch64", 243: "RISC-V"}
EM_ARM = 40
PT_LOAD = 1
_EHDR = {1: (52, "HHIIIIIHHHHHH"), 2: (64, "HHIQQQIHHHHHH")}
_PHDR = {1: (32, "IIIIIIII"), 2: (56, "IIQQQQQQ")}


class ElfError(ValueError):
    """Bytes that are not the ELF image they claim to be; the message says what is wrong."""


@dataclass(frozen=True)
class Header:
    """What the ELF header says: 32 or 64 bits, byte order, type, machine, entry point."""

    bits: int
    little_endian: bool
    type: int
    machine: int
    entry: int

    @property
    def machine_name(self) -> str:
        return MACHINES.get(self.machine, "unknown")


@dataclass(frozen=True)
class Segment:
    """One PT_LOAD program header: its bytes at `offset` in the file (`filesz` of them) are
    loaded at `paddr`, where the program sees them at `vaddr`, zero-filled to `memsz`."""

    index: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int


def read_header(data: bytes) -> Header:
    """The ELF header of `data`; ElfError when `data` is no ELF image or is cut short."""
    if not data:
        raise ElfError("is empty")
    if data[:4] != MAGIC:
        raise ElfError(f"is not an ELF image (it starts {data[:4].hex(' ')}, not 7f 45 4c 46)")
    if len(data) < 16 or data[4] not in _EHDR or data[5] not in (1, 2):
        raise ElfError("is not an ELF image (its identification bytes are not valid)")
    bits, little = 32 * data[4], data[5] == 1
    size, layout = _EHDR[data[4]]
    if len(data) < size:
        raise ElfError(f"is cut short: {len(data)} B, less than its {size} B ELF header")
    fields = struct.unpack_from(("<" if little else ">") + layout, data, 16)
    return Header(bits=bits, little_endian=little, type=fields[0], machine=fields[1],
                  entry=fields[3])


def read_segments(data: bytes) -> tuple[Header, list[Segment]]:
    """The header and the PT_LOAD segments of `data`, each segment's bytes inside the file;
    ElfError naming what is wrong otherwise."""
    header = read_header(data)
    order = "<" if header.little_endian else ">"
    cls = header.bits // 32
    _, layout = _EHDR[cls]
    fields = struct.unpack_from(order + layout, data, 16)
    phoff, phentsize, phnum = fields[4], fields[8], fields[9]
    size, ph_layout = _PHDR[cls]
    if phnum == 0:
        raise ElfError("has no program headers: nothing in it is loaded")
    if phentsize < size:
        raise ElfError(f"has program headers of {phentsize} B, less than the {size} B of "
                       f"an ELF{header.bits} program header")
    end = phoff + phnum * phentsize
    if end > len(data):
        raise ElfError(f"is cut short: {len(data)} B, but its {phnum} program headers end at "
                       f"byte {end}")
    segments = []
    for i in range(phnum):
        ph = struct.unpack_from(order + ph_layout, data, phoff + i * phentsize)
        if cls == 1:
            p_type, offset, vaddr, paddr, filesz, memsz = ph[:6]
        else:
            p_type, offset, vaddr, paddr, filesz, memsz = ph[0], *ph[2:7]
        if p_type != PT_LOAD:
            continue
        if offset + filesz > len(data):
            raise ElfError(f"is cut short: {len(data)} B, but segment {i}'s {filesz} B end at "
                           f"byte {offset + filesz}")
        if filesz > memsz:
            raise ElfError(f"has segment {i} with more bytes in the file ({filesz}) than in "
                           f"memory ({memsz})")
        segments.append(Segment(i, offset, vaddr, paddr, filesz, memsz))
    if not segments:
        raise ElfError("has no loadable (PT_LOAD) segment")
    return header, segments


def word_at(data: bytes, segments: list[Segment], address: int) -> int | None:
    """The little-endian 32-bit word the image loads at `address` (by load address, where a
    boot reads it), or None when no segment's file bytes hold all four of its bytes."""
    for s in segments:
        if s.paddr <= address and address + 4 <= s.paddr + s.filesz:
            at = s.offset + address - s.paddr
            return int.from_bytes(data[at : at + 4], "little")
    return None
