"""pyjls's `Writer` in a child process, so that its C code crashing ends the child, not the rig.

On a full disk pyjls's writer drops data with a line on stderr, and then, reading back the
headers of chunks it could not write, can take its whole process down (SIGSEGV: the short
soak in CI, a `rig measure` under a filled runs volume, at dc5ddbd). A live recording is the
one place a disk fills under a writer, and the process it runs in holds the DUT's power and
the run folder: there the writer runs here instead. The caller's thread only snapshots each
call (pickled at once: a chunk's buffer may be reused as soon as `fsr` returns) and queues
it; a feeder thread hands the calls to the child in order, so a child still starting (its
imports take ~0.2 s of CPU, more on a slow disk) never holds up the caller. If the child ends
early, the next call, or `close`, raises `RuntimeError` saying how it ended.

Frames on the child's stdin: an 8-byte little-endian length, then a pickle of
(method name, args, kwargs); "close" ends it. The child prints "flushed" on stdout after each
`flush`, "ok" after closing the file, or "error <what>" and exits 1. Its stderr is the
parent's (pyjls's own lines stay where they were). It runs in a session of its own, so a
Ctrl-C at the terminal reaches only the rig, which still closes the trace; if the rig itself
dies, the child reads the end of its input and closes the file with what it holds.
"""

from __future__ import annotations

import contextlib
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
from typing import Any

#: The child: pyjls alone (no rig import), one call per frame, in order.
_CHILD = """
import pickle, struct, sys
out = sys.stdout
try:
    import pyjls
    src = sys.stdin.buffer
    writer = pyjls.Writer(sys.argv[1])
    try:
        while True:
            head = src.read(8)
            if len(head) < 8:  # the rig is gone: close with what the file holds
                break
            body = src.read(struct.unpack("<Q", head)[0])
            name, args, kwargs = pickle.loads(body)
            if name == "close":
                break
            getattr(writer, name)(*args, **kwargs)
            if name == "flush":  # the caller waits until the file holds what it was given
                out.write("flushed\\n")
                out.flush()
    finally:
        writer.close()
    out.write("ok\\n")
except BaseException as exc:
    out.write(f"error {type(exc).__name__}: {exc}\\n".replace("\\n", " ").strip() + "\\n")
    out.flush()
    sys.exit(1)
"""
#: Calls queued for the child at most; beyond, the caller waits for it (a child far behind).
QUEUE_CALLS = 4096
#: Host seconds `close` waits for the child to write what is queued and close the file.
CLOSE_TIMEOUT_S = 600.0


class WriterProcess:
    """The methods of `pyjls.Writer` that `rig.traces.files.TraceWriter` calls, run by a child
    process writing `path` (see the module's docstring)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, path], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=None, start_new_session=True)
        self._calls: queue.Queue[bytes | None] = queue.Queue(QUEUE_CALLS)
        self._broken: str | None = None  # why the feeder stopped early
        self._closed = False
        self._feeder = threading.Thread(target=self._feed, name="rig-jls-writer", daemon=True)
        self._feeder.start()

    def _feed(self) -> None:
        pipe = self._proc.stdin
        assert pipe is not None
        while True:
            frame = self._calls.get()
            try:
                if frame is None:
                    pipe.close()
                    return
                pipe.write(frame)
                pipe.flush()
            except (OSError, ValueError) as exc:  # the child is gone (EPIPE)
                self._broken = str(exc) or type(exc).__name__
                with contextlib.suppress(OSError, ValueError):
                    pipe.close()  # its unsent bytes let go now, not at garbage collection
                self._drain()
                return
            finally:
                self._calls.task_done()  # `_calls.join()`: every call handed to the child

    def _drain(self) -> None:
        """Let go of what is queued, so that a caller waiting on a full queue goes on."""
        while True:
            try:
                self._calls.get_nowait()
            except queue.Empty:
                return
            self._calls.task_done()

    def _why(self, said: str = "") -> str:
        """How the child ended, in words (its own error line where it wrote one; `said`: what
        of its output was read already)."""
        code = self._proc.poll()
        if code is not None and self._proc.stdout is not None:
            said = (said + self._proc.stdout.read().decode(errors="replace")).strip()
        if code is not None and code < 0:
            try:
                how = signal.Signals(-code).name
            except ValueError:
                how = f"signal {-code}"
            return f"pyjls's writer process died ({how})"
        if said.startswith("error "):
            return f"pyjls's writer process failed: {said[6:]}"
        if code is not None:
            return f"pyjls's writer process ended early (exit status {code})"
        return f"pyjls's writer process stopped taking data ({self._broken})"

    def _send(self, method: str, /, *args: Any, **kwargs: Any) -> None:
        if self._closed:
            raise ValueError(f"the writer of {self.path} is closed")
        if self._broken is not None or self._proc.poll() is not None:
            raise RuntimeError(self._why())
        body = pickle.dumps((method, args, kwargs), protocol=pickle.HIGHEST_PROTOCOL)
        self._calls.put(struct.pack("<Q", len(body)) + body)

    def source_def(self, *args: Any, **kwargs: Any) -> None:
        self._send("source_def", *args, **kwargs)

    def signal_def(self, *args: Any, **kwargs: Any) -> None:
        self._send("signal_def", *args, **kwargs)

    def user_data(self, *args: Any, **kwargs: Any) -> None:
        self._send("user_data", *args, **kwargs)

    def fsr(self, *args: Any, **kwargs: Any) -> None:
        self._send("fsr", *args, **kwargs)

    def annotation(self, *args: Any, **kwargs: Any) -> None:
        self._send("annotation", *args, **kwargs)

    def flush(self) -> None:
        """Return once the file holds every call made so far (pyjls's `flush`, in the child)."""
        self._send("flush")
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if line.strip() != b"flushed":
            self._proc.wait()  # it ended instead: say how
            raise RuntimeError(self._why(line.decode(errors="replace")))

    def close(self) -> None:
        """Hand over what is queued, let the child close the file and wait for it; raises
        `RuntimeError` if it did not close it. Safe twice."""
        if self._closed:
            return
        self._closed = True
        if self._broken is None:
            body = pickle.dumps(("close", (), {}))
            self._calls.put(struct.pack("<Q", len(body)) + body)
        self._calls.put(None)
        self._feeder.join()
        try:
            code = self._proc.wait(timeout=CLOSE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
            raise RuntimeError(f"pyjls's writer process did not close {self.path} within "
                               f"{CLOSE_TIMEOUT_S:g} s (stopped)") from None
        if code != 0:
            raise RuntimeError(self._why())
        assert self._proc.stdout is not None
        self._proc.stdout.close()
