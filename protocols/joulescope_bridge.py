"""The Joulescope bridge: how the virtual bench's simulated Joulescope hands its samples to the
rig's stand-in for the vendor library over a socket (sans-IO: bytes in, typed blocks out).

There is no official Joulescope emulator, so the seam is the vendor library's Driver object: the
rig loads `drivers.emon.joulescope_socket.FakeJoulescopeDriver` in its own process, and its
samples come over loopback from the virtual bench, which owns the simulated world. Both sides
use this module.

Frames (both directions): an 8-byte header ``<2sBxI`` = magic ``b"JS"``, frame type, pad,
payload length, then the payload (at most `MAX_PAYLOAD` bytes).

- ``HELLO`` (1, bench -> rig, first frame): JSON ``{"version": 1, "sample_rate": fs}``.
- ``SAMPLES`` (2, bench -> rig): ``<QI`` first sample index and count n, then n float32 current
  [A], n float32 voltage [V], ceil(n/8) bytes GPI0 and ceil(n/8) bytes GPI1 (packed, little).
- ``CONTROL`` (3, rig -> bench): JSON ``{"op": "rate", "hz": fs}`` | ``{"op": "power", "on": b}``
  | ``{"op": "start"}`` | ``{"op": "stop"}``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

from protocols.errors import ProtocolError

#: Top ``h/fs`` of current and voltage on each model [Hz] (a JS110's at 2 MS/s, a JS220's at
#: 1 MS/s; both count sample ids at 2 MHz and a JS220's GPI stay at 2 MS/s: joulescope_driver
#: 2.2.12 ``js220_usb.c`` PORT_MAP and ``SAMPLING_FREQUENCY``).
BASE_RATES = {"js110": 2_000_000, "js220": 1_000_000}
#: Most samples in one block.
MAX_BLOCK = 65_536
#: Largest socket frame payload accepted (a full SAMPLES block is ~600 kB).
MAX_PAYLOAD = 4 * 1024 * 1024
_HEADER = struct.Struct("<2sBxI")
_SAMPLES_HEAD = struct.Struct("<QI")
MAGIC = b"JS"
HELLO, SAMPLES, CONTROL = 1, 2, 3


@dataclass(frozen=True)
class SampleBlock:
    """Consecutive samples from a source: index of the first (0 at `start`), and the signals."""

    first: int
    current: np.ndarray  # float32 [A]
    voltage: np.ndarray  # float32 [V]
    gpi0: np.ndarray  # uint8 0/1
    gpi1: np.ndarray  # uint8 0/1

    def __len__(self) -> int:
        return len(self.current)


def encode_frame(kind: int, payload: bytes) -> bytes:
    """One frame: header + payload."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError(f"frame payload of {len(payload)} bytes is too large")
    return _HEADER.pack(MAGIC, kind, len(payload)) + payload


def encode_samples(block: SampleBlock) -> bytes:
    """A SAMPLES frame for `block`."""
    n = len(block)
    payload = b"".join((
        _SAMPLES_HEAD.pack(block.first, n),
        block.current.astype("<f4").tobytes(),
        block.voltage.astype("<f4").tobytes(),
        np.packbits(block.gpi0.astype(np.uint8), bitorder="little").tobytes(),
        np.packbits(block.gpi1.astype(np.uint8), bitorder="little").tobytes(),
    ))
    return encode_frame(SAMPLES, payload)


def decode_samples(payload: bytes) -> SampleBlock:
    """The block in a SAMPLES payload; `ProtocolError` if its size does not add up."""
    if len(payload) < _SAMPLES_HEAD.size:
        raise ProtocolError("Joulescope bridge: SAMPLES frame too short")
    first, n = _SAMPLES_HEAD.unpack_from(payload)
    nbytes = (n + 7) // 8
    if len(payload) != _SAMPLES_HEAD.size + 8 * n + 2 * nbytes:
        raise ProtocolError(f"Joulescope bridge: SAMPLES frame of {len(payload)} bytes does not "
                            f"hold {n} samples")
    at = _SAMPLES_HEAD.size
    current = np.frombuffer(payload, "<f4", n, at).astype(np.float32)
    voltage = np.frombuffer(payload, "<f4", n, at + 4 * n).astype(np.float32)
    at += 8 * n
    bits = np.frombuffer(payload, np.uint8, 2 * nbytes, at)
    gpi0 = np.unpackbits(bits[:nbytes], count=n, bitorder="little")
    gpi1 = np.unpackbits(bits[nbytes:], count=n, bitorder="little")
    return SampleBlock(first, current, voltage, gpi0, gpi1)


class FrameReader:
    """Splits a byte stream into (kind, payload) frames; bounded by `MAX_PAYLOAD`."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        """Add received bytes."""
        self._buf += data

    def next_frame(self) -> tuple[int, bytes] | None:
        """The next complete frame, or None if it has not fully arrived."""
        if len(self._buf) < _HEADER.size:
            return None
        magic, kind, length = _HEADER.unpack_from(self._buf)
        if magic != MAGIC:
            raise ProtocolError(f"Joulescope bridge: bad frame magic {bytes(magic)!r}")
        if length > MAX_PAYLOAD:
            raise ProtocolError(f"Joulescope bridge: frame of {length} bytes is too large")
        end = _HEADER.size + length
        if len(self._buf) < end:
            return None
        payload = bytes(self._buf[_HEADER.size : end])
        del self._buf[:end]
        return kind, payload

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame."""
        return len(self._buf)
