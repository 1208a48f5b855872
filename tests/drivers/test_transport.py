"""SerialTransport over a real pty: a port that is gone fails with a typed PortError."""

from __future__ import annotations

import termios
import time

import pytest

from drivers.errors import DeviceTimeout, PortError
from drivers.transport import SerialTransport
from virtual_bench.pty import Pty


@pytest.fixture
def transport():
    pty = Pty()
    port = SerialTransport(pty.path, 115200, name="DUT")
    yield port
    port.close()
    pty.close()


def test_read_and_flush_of_a_closed_port_raise_port_error(transport) -> None:
    transport.close()
    with pytest.raises(PortError, match=r"DUT: read from .*closed"):
        transport.read()
    with pytest.raises(PortError, match="DUT: flushing"):
        transport.reset_input()
    transport.close()  # twice is fine


def test_flushing_an_unplugged_device_raises_port_error(transport, monkeypatch) -> None:
    def unplugged(fd: int, queue: int) -> None:
        raise termios.error(5, "Input/output error")

    monkeypatch.setattr(termios, "tcflush", unplugged)
    with pytest.raises(PortError, match="Input/output error") as info:
        transport.reset_input()
    assert "reconnect" in info.value.hint


def test_a_device_unplugged_between_the_write_and_its_drain_raises_port_error(
        transport, monkeypatch) -> None:
    """CI: the runner window's port vanished after `write` took the bytes; pyserial's flush
    (tcdrain) raised termios.error, which is no OSError, and the window showed a traceback."""
    def unplugged(fd: int) -> None:
        raise termios.error(5, "Input/output error")

    monkeypatch.setattr(termios, "tcdrain", unplugged)
    with pytest.raises(PortError, match=r"DUT: write to .* failed: .*Input/output error") as info:
        transport.write(b"infer 10 1%")
    assert "reconnect" in info.value.hint


def test_a_device_that_stops_reading_times_the_write_out_after_its_patience() -> None:
    # Nobody reads the pty's other side: it takes ~16 KB, then the write waits.
    pty = Pty()
    port = SerialTransport(pty.path, 115200, name="DUT", write_timeout_s=0.3)
    try:
        start = time.monotonic()
        with pytest.raises(DeviceTimeout, match=r"DUT: write to .* timed out") as info:
            for _ in range(64):
                port.write(bytes(1024))
        assert 0.3 <= time.monotonic() - start < 10.0
        assert "not reading" in info.value.hint
    finally:
        port.close()
        pty.close()
