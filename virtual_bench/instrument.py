"""The life cycle every simulated instrument shares: its threads started once, stopped and
joined on close (safe to call twice), a context manager; and, for the network instruments, a
listening socket on 127.0.0.1 with its accept thread."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from typing import Any, Self

#: How long close() waits for each thread [s] (they poll `_closing` far more often).
JOIN_TIMEOUT_S = 2.0


class ThreadedInstrument:
    """Base of a simulated instrument that serves on threads (call `_init_threads` first)."""

    _closing: threading.Event
    _threads: list[threading.Thread]

    def _init_threads(self) -> None:
        self._closing = threading.Event()
        self._threads = []

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _stop_threads(self) -> None:
        self._closing.set()
        for thread in self._threads:
            thread.join(timeout=JOIN_TIMEOUT_S)
        self._threads.clear()

    def start(self) -> None:  # pragma: no cover - every instrument defines its own
        raise NotImplementedError

    def close(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SerialInstrument(ThreadedInstrument):
    """A simulated USB-serial instrument on a pty: a command thread and a streaming thread
    (`_command_loop`, `_stream_loop`, which the subclass defines), named after `SIM_NAME`."""

    SIM_NAME = "instrument"
    _pty: Any

    def start(self) -> None:
        """Start the command and streaming threads."""
        if self._threads:
            return
        self._spawn(self._command_loop, f"{self.SIM_NAME}-sim-cmd")
        self._spawn(self._stream_loop, f"{self.SIM_NAME}-sim-stream")

    def close(self) -> None:
        """Stop every thread and close the pty; safe to call twice."""
        self._stop_threads()
        self._pty.close()

    def _command_loop(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def _stream_loop(self) -> None:  # pragma: no cover
        raise NotImplementedError


class LoopbackServer(ThreadedInstrument):
    """A simulated network instrument: listens on 127.0.0.1 and serves each connection in
    `_accept_loop` (which the subclass defines)."""

    _listener: socket.socket | None = None
    port: int = 0

    def _listen(self, port: int, backlog: int, name: str) -> None:
        """Listen on 127.0.0.1:`port` (0 picks a free port) and start the accept thread."""
        if self._listener is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", port))
        listener.listen(backlog)
        listener.settimeout(0.05)
        self._listener = listener
        self.port = listener.getsockname()[1]
        self._spawn(self._accept_loop, name)

    def _accept_loop(self) -> None:  # pragma: no cover
        raise NotImplementedError

    def _stop_listening(self) -> None:
        """Stop the threads, then the listening socket; safe to call twice."""
        self._stop_threads()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
