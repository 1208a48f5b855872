"""A byte transport over a child process's stdin/stdout, with a watchdog.

A shim that runs on the host (the Loihi 2 shim under Lava) speaks the DUT protocol over its
stdio; `ProcessTransport` gives it the same interface as `drivers.transport.SerialTransport`, so
`DutClient(ProcessTransport([...]))` works unchanged. The child starts in its own session, which
makes it the leader of a new process group: `kill()` ends it together with every process it
started (Lava runs its models in child processes that can hang).
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO

from drivers.errors import DeviceError, DeviceTimeout, PortError

#: How long one `read()` may block while polling (as `drivers.transport.POLL_S`).
POLL_S = 0.02
#: How long a write may wait for the child to take the bytes (as SerialTransport's write timeout).
WRITE_TIMEOUT_S = 5.0
#: How long `close()` lets the group end after SIGTERM before it sends SIGKILL.
TERMINATE_GRACE_S = 2.0
#: How many of the child's last stderr lines an error message quotes.
STDERR_LINES = 10
#: Deadline for the group to vanish after SIGKILL (bounded wait; the kernel is quick).
_KILL_WAIT_S = 5.0
_READ_CHUNK = 65536


class ProcessTransport:
    """Runs `argv` as a child process and carries bytes over its stdin (write) and stdout (read).

    `env` replaces the environment as in `subprocess.Popen` (None: inherit); `cwd` is its
    working directory. The child's stderr is collected in the background so that it can never
    block on a full pipe; the last lines go into error messages. Not thread-safe except for
    `kill()`, which the watchdog calls from its own thread.
    """

    #: The pipe carries raw bytes (binary downloads are allowed).
    binary_ok = True
    #: No baud rate: `DutClient` then assumes a serial line's, which only makes deadlines longer.
    baudrate: int | None = None

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str = "process",
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        if not argv:
            raise PortError(f"{name}: no program to start", hint="give the command line to run")
        self.argv = [os.fspath(a) for a in argv]
        self.name = name
        self.url = "process:" + shlex.join(self.argv)
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_LINES)
        self._watchdog: threading.Timer | None = None
        self._watchdog_s: float | None = None
        #: True once the watchdog (not the caller) killed the group.
        self.killed_by_watchdog = False
        self._closed = False
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=None if env is None else dict(env),
                cwd=cwd,
                bufsize=0,
                start_new_session=True,  # a process group of its own, for kill()
            )
        except FileNotFoundError as exc:
            missing = cwd is not None and not Path(cwd).is_dir()
            raise PortError(
                f"{name}: cannot start {self.argv[0]!r}: "
                + (f"no directory {os.fspath(cwd or '')!r}" if missing else "no such program"),
                hint="check the path (for the Loihi 2 shim run `make lava-env` first)",
            ) from exc
        except PermissionError as exc:
            raise PortError(
                f"{name}: cannot start {self.argv[0]!r}: permission denied",
                hint="make the program executable",
            ) from exc
        #: The child's process group id (its pid: it leads the new session).
        self.pgid = self._proc.pid
        # all three are PIPEs, so Popen made them (its types allow None for the other cases)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        assert self._proc.stderr is not None
        self._stdin_pipe: IO[bytes] = self._proc.stdin
        self._stdout_pipe: IO[bytes] = self._proc.stdout
        self._stderr_pipe: IO[bytes] = self._proc.stderr
        self._stdout = self._stdout_pipe.fileno()
        self._stdin = self._stdin_pipe.fileno()
        os.set_blocking(self._stdout, False)
        os.set_blocking(self._stdin, False)
        self._stderr_reader = threading.Thread(
            target=self._collect_stderr, name=f"{name}-stderr", daemon=True
        )
        self._stderr_reader.start()

    # -- the transport interface --------------------------------------------------------------
    @property
    def pid(self) -> int:
        """The child's process id."""
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The child's exit code (negative: killed by that signal); None while it runs."""
        return self._proc.poll()

    @property
    def stderr_tail(self) -> list[str]:
        """The child's last `STDERR_LINES` lines on stderr (for diagnostics)."""
        return list(self._stderr_tail)

    def write(self, data: bytes) -> None:
        """Write all of `data` to the child's stdin within `WRITE_TIMEOUT_S`."""
        self._check_open("write to")
        view = memoryview(bytes(data))
        deadline = time.monotonic() + WRITE_TIMEOUT_S
        while view:
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeviceTimeout(
                    f"{self.name}: write to {self.url} timed out",
                    hint="the program is not reading its input; it may be stuck: restart it",
                )
            _, writable, _ = select.select([], [self._stdin], [], min(left, POLL_S))
            if not writable:
                continue
            try:
                sent = os.write(self._stdin, view)
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError) as exc:
                raise self._died("write to") from exc
            view = view[sent:]

    def read(self, max_bytes: int = _READ_CHUNK) -> bytes:
        """Return the bytes available now, waiting at most `POLL_S` for the first one.

        Raises `DeviceError` (with the exit code and the last stderr lines) once the child
        has closed its stdout, i.e. died, and everything it wrote has been read.
        """
        self._check_open("read from")
        readable, _, _ = select.select([self._stdout], [], [], POLL_S)
        if not readable:
            return b""
        try:
            data = os.read(self._stdout, max_bytes)
        except BlockingIOError:
            return b""
        except OSError as exc:
            raise self._died("read from") from exc
        if not data:
            raise self._died("read from")
        return data

    def read_until(self, deadline: float, done: Callable[[bytearray], bool]) -> bytes:
        """Read until `done(buffer)` is true or the monotonic `deadline` passes (then raise)."""
        buf = bytearray()
        while not done(buf):
            if time.monotonic() > deadline:
                raise DeviceTimeout(
                    f"{self.name}: no complete reply from {self.url} in time",
                    hint="the program is running but not answering: check its stderr",
                )
            buf += self.read()
        return bytes(buf)

    def reset_input(self) -> None:
        """Drop whatever the child has written and nobody read yet (without waiting)."""
        self._check_open("flushing")
        while select.select([self._stdout], [], [], 0)[0]:
            try:
                if not os.read(self._stdout, _READ_CHUNK):
                    return  # EOF: the next read() reports the death
            except BlockingIOError:
                return
            except OSError as exc:
                raise self._died("flushing") from exc

    def close(self, grace_s: float = 0.0) -> None:
        """End the child: close its stdin, give it `grace_s` to end on its own (a child that
        stops at the end of its input shuts down in order), then SIGTERM its group and after
        `TERMINATE_GRACE_S` SIGKILL it. Safe to call twice.
        """
        if self._closed:
            return
        self._closed = True
        self.disarm_watchdog()
        with suppress(OSError):  # a broken pipe: the child is gone already
            self._stdin_pipe.close()
        if grace_s > 0:
            with suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=grace_s)
        _signal_group(self.pgid, signal.SIGTERM)
        if not self._wait_group(TERMINATE_GRACE_S):
            self._kill_group()
        self._stdout_pipe.close()
        self._stderr_reader.join(timeout=1.0)

    def __enter__(self) -> ProcessTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the watchdog -------------------------------------------------------------------------
    def kill(self) -> None:
        """SIGKILL the child's whole process group and reap the child (the watchdog's action).

        Reads then raise `DeviceError`; `close()` is still to be called (it is harmless).
        """
        self._kill_group()

    def arm_watchdog(self, timeout_s: float) -> None:
        """Kill the group if `disarm_watchdog()` is not called within `timeout_s` (re-arms)."""
        if timeout_s <= 0:
            raise ValueError(f"watchdog timeout must be positive, not {timeout_s!r}")
        self.disarm_watchdog()
        self._watchdog_s = timeout_s
        self._watchdog = threading.Timer(timeout_s, self._fire_watchdog)
        self._watchdog.daemon = True
        self._watchdog.start()

    def disarm_watchdog(self) -> None:
        """Stop the watchdog (no effect if it is not armed or has fired)."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None

    @contextmanager
    def watchdog(self, timeout_s: float) -> Iterator[ProcessTransport]:
        """``with transport.watchdog(s):`` the body must finish within `s` or the group dies."""
        self.arm_watchdog(timeout_s)
        try:
            yield self
        finally:
            self.disarm_watchdog()

    # -- internals ----------------------------------------------------------------------------
    def _fire_watchdog(self) -> None:
        if self._proc.poll() is None:
            self.killed_by_watchdog = True
        self._kill_group()

    def _kill_group(self) -> None:
        _signal_group(self.pgid, signal.SIGKILL)
        self._wait_group(_KILL_WAIT_S)

    def _wait_group(self, timeout_s: float) -> bool:
        """Reap the child and wait until no live process is left in its group; True if so."""
        deadline = time.monotonic() + timeout_s
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        while group_members(self.pgid):
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)  # bounded wait for the kernel to finish the kill, not a measurement
        return True

    def _collect_stderr(self) -> None:
        """Keep the last stderr lines; runs until the child (and its group) closes stderr."""
        stream = self._stderr_pipe
        try:
            for raw in iter(stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip()
                if line:
                    self._stderr_tail.append(line)
        except (OSError, ValueError):
            pass  # closed under us at close(): nothing more to keep
        finally:
            stream.close()

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise PortError(f"{self.name}: {what} {self.url}: the transport is closed",
                            hint="open a new transport (restart the program)")

    def _died(self, what: str) -> DeviceError:
        """The error for a child that closed its end: exit code and last stderr lines."""
        try:
            code = self._proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None  # it closed stdout but still runs
        self._stderr_reader.join(timeout=0.5)
        if self.killed_by_watchdog:
            how = f"was killed by the watchdog after {self._watchdog_s:g} s"
            hint = "it hung or was too slow: give it a longer deadline or check its model"
        elif code is None:
            how = "closed its output but is still running"
            hint = "the program stopped talking: check its stderr"
        elif code < 0:
            how = f"was killed by signal {signal.Signals(-code).name}"
            hint = "something killed it: check memory limits (the OOM killer) and its stderr"
        else:
            how = f"exited with code {code}"
            hint = "check its stderr below and its environment"
        tail = " | ".join(self._stderr_tail)
        message = f"{self.name}: {what} {self.url} failed: the program {how}"
        if tail:
            message += f"; last stderr: {tail}"
        return DeviceError(message, hint=hint)


def group_members(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in process group `pgid` (Linux: from /proc).

    Elsewhere: [pgid] while the group exists, zombies included.
    """
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for entry in proc.iterdir():  # one entry per process, not per sample
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # it ended while we looked
        # Fields after the command name, which is in parentheses and may hold spaces.
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError):  # the whole group has ended already
        os.killpg(pgid, sig)
