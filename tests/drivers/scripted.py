"""A scripted byte transport for conversation tests: exact bytes out, canned replies in."""

from __future__ import annotations

import time


class ScriptedTransport:
    """Plays a conversation: each write must equal the next expected one; its reply is queued.

    Replies are handed out a few bytes at a time so that the client must reassemble lines.
    """

    url = "scripted://port"

    def __init__(self, script: list[tuple[bytes, bytes]], *, initial: bytes = b"") -> None:
        self.script = list(script)
        self.written: list[bytes] = []
        self.inbox = bytearray(initial)
        self.resets = 0
        self.closed = False

    def write(self, data: bytes) -> None:
        assert self.script, f"unexpected write {data!r}"
        expected, reply = self.script.pop(0)
        assert data == expected
        self.written.append(data)
        self.inbox += reply

    def read(self) -> bytes:
        if not self.inbox:
            time.sleep(0.001)  # like a port with nothing to say: a short wait, then nothing
            return b""
        out = bytes(self.inbox[:7])
        del self.inbox[:7]
        return out

    def reset_input(self) -> None:
        self.resets += 1
        self.inbox.clear()

    def close(self) -> None:
        self.closed = True

    def done(self) -> bool:
        return not self.script
