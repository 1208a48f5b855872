"""DUT clients: drive a device under test that speaks the DUT protocol (protocols/dut/SPEC.md)."""

from drivers.dut.client import (
    ByteTransport,
    DownloadError,
    DutClient,
    DutInfo,
    DutStats,
    InferResult,
    LoadResult,
    QuboResult,
)

__all__ = [
    "ByteTransport",
    "DownloadError",
    "DutClient",
    "DutInfo",
    "DutStats",
    "InferResult",
    "LoadResult",
    "QuboResult",
]
