"""The room a run killed outright kept is given back by the next run in its runs folder.

A run folder keeps room for its end (`.reserve`, 1 MiB, and 256 KiB allocated past
events.jsonl's end) until its run ends; a run killed with SIGKILL never gives it back, and a
night of killed runs (the soak's) piles it up. Each live run holds its reserve locked, so the
next run's `RunStore.create` frees only the rooms whose process is gone (found by the soak,
issue 39).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from rig.run.store import EVENTS, EVENTS_ROOM, RESERVE, RESERVE_BYTES, RunStore

HOLD = """
import sys, time
from pathlib import Path
from rig.run.store import RunStore
store = RunStore.create(Path(sys.argv[1]), "asc", sys.argv[2])
store._events.write('{"event": "note"}\\n'); store._events.flush()
print(store.path, flush=True)
time.sleep(60)
"""


def hold_a_run(root: Path, device: str) -> tuple[subprocess.Popen, Path]:
    """A process with a run under way in `root`; the process and its folder."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(root), device],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def test_a_killed_runs_room_is_given_back_and_a_live_runs_is_not(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    killed, killed_folder = hold_a_run(root, "killed")
    live, live_folder = hold_a_run(root, "live")
    try:
        events = killed_folder / EVENTS
        text = events.read_text()
        assert (killed_folder / RESERVE).stat().st_size == RESERVE_BYTES
        # The room past events.jsonl's end (where the file system allocates it: tmpfs and
        # ext4 do).
        kept = allocated(events) >= EVENTS_ROOM
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        store = RunStore.create(root, "asc", "next")
        try:
            assert not (killed_folder / RESERVE).exists()
            assert events.read_text() == text  # its events untouched
            if kept:
                assert allocated(events) < EVENTS_ROOM
            # The live run keeps its room; the new run has its own.
            assert (live_folder / RESERVE).stat().st_size == RESERVE_BYTES
            assert (store.path / RESERVE).stat().st_size == RESERVE_BYTES
        finally:
            store.close()
        assert not (store.path / RESERVE).exists()  # an ended run gives its room back itself
    finally:
        for p in (killed, live):
            p.kill()
            p.wait(10)
