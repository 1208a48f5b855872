"""Byte transports with deadlines. Nothing above a transport sleeps to wait for bytes."""

from __future__ import annotations

import errno
import time
from collections.abc import Callable

import serial

from drivers.errors import DeviceTimeout, PortError

#: What flushing a port can raise: on POSIX an unplugged USB device makes tcflush raise
#: termios.error, which is not an OSError.
_FLUSH_ERRORS: tuple[type[Exception], ...] = (serial.SerialException, OSError)
try:
    import termios

    _FLUSH_ERRORS += (termios.error,)
except ImportError:  # not POSIX
    pass

#: How long one `read()` may block while polling; short so that deadlines stay sharp.
POLL_S = 0.02
#: How long one `write()` may wait for the device to take bytes before it is called hung. A
#: board at 9600 baud or more drains a 1 KB write in about a second.
WRITE_TIMEOUT_S = 5.0
_GONE_HINT = "the device was unplugged, reset or closed; reconnect it and run again"


class SerialTransport:
    """A pyserial port (device path, pty, or any pyserial URL such as ``socket://``).

    Opened exclusively, so a port already in use by another program is reported as busy
    instead of two programs silently sharing a UART.
    """

    def __init__(self, url: str, baudrate: int, *, name: str = "port",
                 write_timeout_s: float = WRITE_TIMEOUT_S) -> None:
        self.url = url
        self.baudrate = baudrate
        self.name = name
        try:
            self._port = serial.serial_for_url(
                url, baudrate=baudrate, timeout=POLL_S, write_timeout=write_timeout_s,
                exclusive=True
            )
        except serial.SerialException as exc:
            raise _port_error(name, url, exc) from exc
        except (FileNotFoundError, ValueError) as exc:
            raise PortError(
                f"{name}: cannot open {url!r}: {exc}",
                hint="check the port name (`rig devices` lists serial ports)",
            ) from exc

    def write(self, data: bytes) -> None:
        """Write all of `data`."""
        try:
            self._port.write(data)
            self._port.flush()
        except serial.SerialTimeoutException as exc:
            raise DeviceTimeout(
                f"{self.name}: write to {self.url} timed out",
                hint="the device is not reading its port; check that it is powered and running",
            ) from exc
        except _FLUSH_ERRORS as exc:  # the drain after the write raises termios.error
            raise PortError(
                f"{self.name}: write to {self.url} failed: {exc}", hint=_GONE_HINT
            ) from exc

    def read(self, max_bytes: int = 65536) -> bytes:
        """Return the bytes available now, waiting at most `POLL_S` for the first one."""
        # A closed pyserial port has no fd: `in_waiting` would fail with a TypeError.
        if not self._port.is_open:
            raise PortError(f"{self.name}: read from {self.url}: the port is closed",
                            hint=_GONE_HINT)
        try:
            waiting = self._port.in_waiting
            return self._port.read(min(max(waiting, 1), max_bytes))
        except (serial.SerialException, OSError) as exc:
            raise PortError(
                f"{self.name}: read from {self.url} failed: {exc}", hint=_GONE_HINT
            ) from exc

    def read_until(self, deadline: float, done: Callable[[bytearray], bool]) -> bytes:
        """Read until `done(buffer)` is true or the monotonic `deadline` passes (then raise)."""
        buf = bytearray()
        while not done(buf):
            if time.monotonic() > deadline:
                raise DeviceTimeout(
                    f"{self.name}: no complete reply from {self.url} in time",
                    hint="check that the device is powered, running and at this baud rate",
                )
            buf += self.read()
        return bytes(buf)

    def reset_input(self) -> None:
        """Drop whatever is waiting in the input buffer."""
        try:
            self._port.reset_input_buffer()
        except _FLUSH_ERRORS as exc:
            raise PortError(
                f"{self.name}: flushing {self.url} failed: {exc}", hint=_GONE_HINT
            ) from exc

    def close(self) -> None:
        """Close the port; safe to call twice."""
        if self._port.is_open:
            self._port.close()

    def __enter__(self) -> SerialTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _port_error(name: str, url: str, exc: serial.SerialException) -> PortError:
    text = str(exc)
    err = getattr(exc, "errno", None)
    if err in (errno.ENOENT, errno.ENODEV) or "No such file" in text:
        return PortError(
            f"{name}: port {url} does not exist",
            hint="check the cable and the port name; `rig devices` lists serial ports",
        )
    if err in (errno.EBUSY, errno.EAGAIN) or "busy" in text.lower() or "lock" in text.lower():
        return PortError(
            f"{name}: port {url} is busy",
            hint="another program has it open; close it (a serial monitor, another rig)",
        )
    if err == errno.EACCES or "Permission denied" in text:
        return PortError(
            f"{name}: no permission to open {url}",
            hint="add your user to the 'dialout' group or fix the udev rule",
        )
    return PortError(f"{name}: cannot open {url}: {text}")
