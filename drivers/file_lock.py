"""One owner per file across processes: an exclusive ``flock`` held until released.

For what one process on a host must own alone: a sweep run folder (its events file) or the
host's power counters. The kernel drops the lock when the holder dies, so ``kill -9`` never
leaves it stale. A second holder is refused at once (it never waits); the caller says why.
"""

from __future__ import annotations

import fcntl
from pathlib import Path
from typing import IO


class FileLock:
    """An exclusive, non-blocking ``flock`` on `path` (opened for appending, created if missing,
    never truncated unless a `note` is written)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle: IO[str] | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._handle is not None

    def acquire(self, note: str | None = None) -> bool:
        """Take the lock: True, or False when another holder has it. `note` (e.g. "pid 123")
        replaces the file's text once the lock is ours, for `read_note` to show the next one.
        OSError if the file cannot be opened."""
        if self._handle is not None:
            return True
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        if note is not None:
            handle.seek(0)
            handle.truncate()
            handle.write(note)
            handle.flush()
        self._handle = handle
        return True

    def release(self) -> None:
        """Give the lock back (closing the file releases it)."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def read_note(self) -> str:
        """The file's text (what the holder wrote with `acquire(note=...)`); "" if none."""
        try:
            return self.path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:
            return ""


def held_elsewhere(path: Path) -> bool:
    """Whether another open file holds `path`'s lock right now (False if there is no file)."""
    try:
        with open(path, "rb") as handle:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
    except OSError:
        return False
    return False
