"""The root of every error the rig raises on purpose.

Lives in `protocols` because that is the bottom layer: drivers and rig subclass it, and the CLI
turns any `RigError` into a one-line message with its hint and exit code instead of a traceback.
"""

from __future__ import annotations


class RigError(Exception):
    """A failure the user can act on: `message` says what went wrong, `hint` what to do."""

    #: Process exit code when this error ends a CLI command (2: bad input or setup).
    exit_code: int = 2

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ProtocolError(RigError):
    """Bytes that do not fit the protocol they claim to speak."""
