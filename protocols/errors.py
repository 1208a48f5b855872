"""The shape every error the bench raises on purpose shares, and the protocol layer's own base.

Lives in `protocols` because that is the bottom layer. Each layer has its own base built on
`ActionableError`: `ProtocolError` here, `DriverError` in drivers/errors.py, `RigError` in
rig/errors.py (the firmware's Xylo tools subclass it directly). The CLI turns any of them into a
one-line message with its hint and exit code instead of a traceback.
"""

from __future__ import annotations

#: At most this many characters of a value are quoted in a message (`quoted`).
QUOTE_LIMIT = 80


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


def quoted(value: object, limit: int = QUOTE_LIMIT) -> str:
    """`value` as a message quotes it: its repr, or, when it is longer than `limit` characters,
    the repr of its first `limit`, an ellipsis and how long it is ("'xxx…' (1000000
    characters)"), so that a bad value of a million characters still gives a one-line refusal.
    Every message quoting a value from a user's file or command line goes through here."""
    if isinstance(value, str):
        if len(value) <= limit:
            return repr(value)
        head = repr(value[:limit])  # a whole literal: its escapes are never cut in two
        return f"{head[:-1]}…{head[-1]} ({len(value)} characters)"
    text = repr(value)
    if len(text) <= limit:
        return text
    if isinstance(value, list | tuple | dict | set):
        n = len(value)
        size = f"a {type(value).__name__} of {n} item{'s' * (n != 1)}"
    else:
        size = f"{len(text)} characters"
    return f"{text[:limit]}… ({size})"
