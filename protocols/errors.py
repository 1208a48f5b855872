"""The shape every error the bench raises on purpose shares, and the protocol layer's own base.

Lives in `protocols` because that is the bottom layer. Each layer has its own base built on
`ActionableError`: `ProtocolError` here, `DriverError` in drivers/errors.py, `RigError` in
rig/errors.py (the firmware's Xylo tools subclass it directly). The CLI turns any of them into a
one-line message with its hint and exit code instead of a traceback.
"""

from __future__ import annotations


class ActionableError(Exception):
    """A failure the user can act on: `message` says what went wrong, `hint` what to do."""

    #: Process exit code when this error ends a CLI command (2: bad input or setup).
    exit_code: int = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ProtocolError(ActionableError):
    """Bytes that do not fit the protocol they claim to speak."""
