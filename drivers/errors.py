"""Typed errors raised by transports and device drivers."""

from __future__ import annotations

from protocols.errors import ActionableError


class DriverError(ActionableError):
    """The driver layer's base: a device, port or limit the driver cannot accept."""


class DeviceError(DriverError):
    """A device did something the driver cannot accept."""


class PortError(DeviceError):
    """A port that does not exist, is busy, or cannot be opened."""


class DeviceTimeout(DeviceError):
    """A device did not answer before its deadline."""


class InstrumentError(DeviceError):
    """An instrument refused a command; `command` is the command it refused."""

    def __init__(self, message: str, *, command: str | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.command = command


class VoltageLimitError(DriverError):
    """A supply voltage above the bench's limit was asked for; nothing was sent."""


class DutError(DeviceError):
    """The DUT answered a command with an `e-[...]` line; `command` is what it refused."""

    def __init__(self, message: str, *, command: str | None = None, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.command = command
