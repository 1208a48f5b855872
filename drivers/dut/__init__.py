"""DUT clients: drive a device under test that speaks the DUT protocol (protocols/dut/SPEC.md)."""

from drivers.dut.client import ByteTransport, DutClient, DutInfo, InferResult

__all__ = ["ByteTransport", "DutClient", "DutInfo", "InferResult"]
