"""The run ledger: every run a rig starts, in order, in a hash chain (``<runs>/ledger.jsonl``).

Each line is one entry, canonical JSON (sorted keys, no spaces, no NaN): a sequence number, the
run it is about, what happened (``started``, ``resumed``, ``ended``), and ``prev``, the SHA-256
of the previous line's bytes (64 zeros for the first). An ``ended`` entry carries the run's
status, its figures (the summary's finite numbers) and the SHA-256 of its manifest, events and
traces as they were when it ended. A run that never ended (killed, power cut) has a
``started`` entry and no ``ended`` one: it reads back as interrupted.

So a ledger span says which runs a rig made between two of them, and binds each run's files to
the moment it ended: a run left out of a submission, a file changed afterwards or an entry
removed shows (`verify_chain`, `rig verify`). The head (the last entry's digest and sequence
number) is published, retained, to the rig's broker, so that a second party holds it.

Crash-safe like the run store: an entry is one ``write`` of one line, flushed and synced under an
exclusive lock (several rigs may share a runs folder). A line torn by a crash is not an entry:
the next append cuts it off (the chain continues from the last whole entry) and says so in its
``repaired`` field.
"""

from __future__ import annotations

import datetime as dt
import fcntl
import hashlib
import itertools
import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEDGER = "ledger.jsonl"
#: The ``prev`` of the first entry.
GENESIS = "0" * 64
STARTED, RESUMED, ENDED = "started", "resumed", "ended"
#: Read in blocks of this size when hashing files (a trace may be gigabytes).
_BLOCK = 1 << 20


@dataclass(frozen=True)
class LedgerHead:
    """The last entry of a ledger: its sequence number and digest (what the broker holds)."""

    seq: int
    digest: str
    run: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "digest": self.digest, "run": self.run}


@dataclass(frozen=True)
class Entry:
    """One ledger line read back: its fields, its own bytes' digest, its line number."""

    data: dict[str, Any]
    digest: str
    line: int

    @property
    def seq(self) -> int:
        return int(self.data.get("seq", -1))

    @property
    def run(self) -> str:
        return str(self.data.get("run", ""))

    @property
    def event(self) -> str:
        return str(self.data.get("event", ""))


def canonical(data: Mapping[str, Any]) -> bytes:
    """The entry's bytes: sorted keys, no spaces, UTF-8; NaN and infinities refused."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode("utf-8")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


def run_digests(run: Path) -> dict[str, str]:
    """SHA-256 of the files that hold a run's result: its manifest, events and traces (by path
    inside the run folder, '/'-separated)."""
    names = [p for p in (run / "manifest.json", run / "events.jsonl") if p.is_file()]
    traces = run / "traces"
    if traces.is_dir():
        names += sorted(p for p in traces.rglob("*") if p.is_file())
    return {p.relative_to(run).as_posix(): sha256_file(p) for p in names}


def figures_of(summary: Mapping[str, Any] | None) -> dict[str, float]:
    """The summary's finite numbers (the figures a left-out run is shown with)."""
    out: dict[str, float] = {}
    for key, value in (summary or {}).items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if math.isfinite(value):
            out[key] = value
    return out


class Ledger:
    """The ledger of one runs folder."""

    def __init__(self, runs_root: Path) -> None:
        self.path = Path(runs_root) / LEDGER

    # -- writing ----------------------------------------------------------------------------
    def append(self, event: str, run: Path, **fields: Any) -> LedgerHead:
        """Append one entry about `run` (a run folder inside this runs folder) and return the
        new head. `fields` add to it (status, figures, digests, run_id, procedure, ...)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        with os.fdopen(fd, "rb+") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                last, torn = _last_entry(f)
                entry: dict[str, Any] = {
                    "seq": 0 if last is None else last.seq + 1,
                    "prev": GENESIS if last is None else last.digest,
                    "event": event,
                    "run": run.name,
                    "at": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                    **{k: v for k, v in fields.items() if v is not None},
                }
                if torn:
                    entry["repaired"] = (f"a torn line of {torn} bytes (a crash while an entry "
                                         "was written) was cut off before this entry")
                line = canonical(entry)
                f.seek(0, os.SEEK_END)
                f.write(line + b"\n")
                f.flush()
                os.fsync(f.fileno())
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return LedgerHead(int(entry["seq"]), sha256_bytes(line), run.name)

    # -- reading ----------------------------------------------------------------------------
    def entries(self) -> list[Entry]:
        """Every whole entry (a torn last line is left out); `LedgerError` for a line that is
        not an entry."""
        if not self.path.is_file():
            return []
        return list(read_entries(self.path.read_bytes(), str(self.path)))

    def head(self) -> LedgerHead | None:
        """The last entry's sequence number and digest; None for an empty ledger."""
        entries = self.entries()
        if not entries:
            return None
        last = entries[-1]
        return LedgerHead(last.seq, last.digest, last.run)


class LedgerError(ValueError):
    """A ledger that cannot be read as one."""


def read_entries(data: bytes, where: str) -> Iterator[Entry]:
    """The entries of ledger bytes, in order; a torn last line (no newline) is not one."""
    lines = data.split(b"\n")
    if lines and lines[-1] != b"":
        lines = lines[:-1]  # torn: never finished, never an entry
    for number, line in enumerate(lines, 1):
        if not line:
            continue
        try:
            value = json.loads(line)
        except ValueError as exc:
            raise LedgerError(f"{where} line {number} is not JSON ({exc})") from None
        if not isinstance(value, dict):
            raise LedgerError(f"{where} line {number} is not an entry (a JSON object)")
        yield Entry(value, sha256_bytes(line), number)


def verify_chain(entries: list[Entry]) -> list[str]:
    """What is wrong with a span of entries: each ``prev`` must be the previous line's
    digest, sequence numbers consecutive, and each line canonical (re-encoding it gives the
    same bytes, so its digest is the digest of its content). Empty when the chain holds."""
    problems = []
    for before, entry in itertools.pairwise(entries):
        if entry.data.get("prev") != before.digest:
            problems.append(f"entry {entry.seq} (line {entry.line}): prev is not the digest of "
                            f"entry {before.seq}: an entry was removed, added or changed")
        if entry.seq != before.seq + 1:
            problems.append(f"entry {entry.seq} (line {entry.line}) follows entry "
                            f"{before.seq}: sequence numbers are not consecutive")
    for entry in entries:
        try:
            again = sha256_bytes(canonical(entry.data))
        except ValueError:
            again = ""
        if again != entry.digest:
            problems.append(f"entry {entry.seq} (line {entry.line}) is not in canonical form: "
                            "it was written by hand")
    return problems


def _last_entry(f: Any) -> tuple[Entry | None, int]:
    """The last whole entry of the open ledger, and the size of a torn tail it cut off."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size == 0:
        return None, 0
    # Read backwards until the last two newlines are found (entries are short).
    chunk = 4096
    while True:
        start = max(0, size - chunk)
        f.seek(start)
        data = f.read(size - start)
        if start == 0 or data.count(b"\n") >= 2:
            break
        chunk *= 4
    torn = 0
    if not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1  # 0 when the file holds only a torn line
        torn = len(data) - cut
        f.truncate(start + cut)
        f.flush()
        os.fsync(f.fileno())
        data = data[:cut]
    lines = [line for line in data.split(b"\n") if line]
    if not lines:
        return None, torn
    last = lines[-1]
    try:
        value = json.loads(last)
    except ValueError:
        raise LedgerError(f"the last entry of the ledger is not JSON: {last[:80]!r}") from None
    return Entry(value, sha256_bytes(last), 0), torn
