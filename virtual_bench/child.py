"""Reading a child process's first line (the ports a virtual bench or a harness prints)."""

from __future__ import annotations

import os
import select
import subprocess
import time


def read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """The first line `proc` writes on stdout within `timeout_s`, stripped; what came so far
    (or "") when it exits or the time is up, so the caller can say why it did not start."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
        elif proc.poll() is not None:
            break
    return buf.decode(errors="replace").strip()


def end_process(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """TERM `proc` by its pid, then KILL it if it has not ended within `timeout_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
