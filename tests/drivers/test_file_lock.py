"""One owner per file across processes (drivers/file_lock.py): a second holder in another
process is refused at once, sees the first one's note, and gets the lock once the first is gone
(also when it dies without releasing it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from drivers.file_lock import FileLock, held_elsewhere

REPO = Path(__file__).resolve().parents[2]
#: A holder in its own process: takes the lock, says so, keeps it until its stdin closes.
HOLDER = """
import sys
from pathlib import Path
from drivers.file_lock import FileLock
lock = FileLock(Path(sys.argv[1]))
print("taken" if lock.acquire(note="pid holder") else "refused", flush=True)
sys.stdin.read()
if sys.argv[2] == "release":
    lock.release()
"""


def start_holder(path: Path, ending: str = "release") -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), ending], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "taken"
    return proc


def stop_holder(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


@pytest.mark.parametrize("ending", ["release", "exit without release"])
def test_a_second_holder_in_another_process_is_refused(tmp_path: Path, ending: str) -> None:
    path = tmp_path / "owner.lock"
    first = start_holder(path, ending)
    try:
        second = FileLock(path)
        assert second.acquire(note="pid second") is False and not second.held
        assert second.read_note() == "pid holder"  # who holds it, for the refusal message
        assert held_elsewhere(path)
    finally:
        stop_holder(first)
    assert not held_elsewhere(path)
    assert second.acquire(note="pid second") and second.held
    assert second.read_note() == "pid second"
    second.release()


def test_a_lock_without_a_note_keeps_the_file(tmp_path: Path) -> None:
    """The sweep locks its events file: taking the lock never truncates it."""
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "run_started"}\n')
    lock = FileLock(path)
    assert lock.acquire()
    lock.release()
    assert path.read_text() == '{"kind": "run_started"}\n'
    assert not held_elsewhere(tmp_path / "missing")


def test_a_file_that_cannot_be_opened_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        FileLock(tmp_path / "no-such-folder" / "x.lock").acquire()
