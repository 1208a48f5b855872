"""The rig's side of a virtual bench: a process it starts and knows only by what it prints.

`VirtualBenchProcess(bench)` writes the bench as the rig holds it to a temporary TOML file, runs
``python -m virtual_bench FILE`` (the simulated DUT, instruments and world, outside the rig) and
reads the one JSON line it prints: its ports (which the rig then opens like real hardware), or
an error and its hint (raised here as a `ConfigError`). Closing the child's stdin stops it.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from typing import Any

from rig.bench.config import Bench
from rig.bench.saving import bench_to_toml
from rig.errors import ConfigError

#: The module the child runs (`python -m ...`).
VIRTUAL_BENCH_MODULE = "virtual_bench"
#: How long the child may take to print its ports (it may build the host C shim first).
START_TIMEOUT_S = 30.0
#: How long a stopping child may take to shut its devices down before it is terminated.
STOP_GRACE_S = 3.0


class VirtualBenchProcess:
    """A virtual bench serving in a child process; the rig talks to its ports like to hardware.

    `ports` ({"dut", "emon"[, "io_manager"]}), `dut_impl`, `speed`, `emon_driver` and `powered`
    are what the child reported when it started.
    """

    def __init__(self, bench: Bench, *, speed: float | None = None, power_on: bool = False,
                 start_timeout_s: float = START_TIMEOUT_S) -> None:
        # The child serves the bench as the rig holds it (command-line overrides, a bench edited
        # in the runner window, an unsaved one), not as the file on disk says; `--for` names the
        # file so that `ps` shows which bench a child serves.
        self._bench_file = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed in close())
            "w", suffix=".toml", prefix="rig-vbench-", encoding="utf-8")
        self._bench_file.write(bench_to_toml(bench))
        self._bench_file.flush()
        cmd = [sys.executable, "-m", VIRTUAL_BENCH_MODULE, self._bench_file.name,
               "--for", str(bench.path)]
        if speed is not None:
            cmd += ["--speed", repr(float(speed))]
        if power_on:
            cmd.append("--power-on")
        # stderr goes to a file, not a pipe: nobody reads a pipe during the run, and a full one
        # would freeze the bench.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            start_new_session=True,  # Ctrl-C goes to the rig, which shuts the bench down in order
        )
        line = _first_line(self._proc, start_timeout_s)
        try:
            started: dict[str, Any] = json.loads(line)
            if "error" in started:
                self.close()
                raise ConfigError(str(started["error"]), hint=started.get("hint") or None)
            self.ports: dict[str, str] = started["ports"]
            self.dut_impl: str = started.get("dut", "?")
            self.speed: float = float(started.get("speed", 0.0))
            self.emon_driver: str = started.get("emon", "")
            self.powered: bool = bool(started.get("powered", False))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            err = self._stderr_tail()
            self.close()
            raise ConfigError(
                f"the virtual bench did not start: {err or line or 'no output'}",
                hint="run `rig --debug sim` to see why",
            ) from exc

    def _stderr_tail(self) -> str:
        """The child's last stderr line, once it has exited (its error message)."""
        if self._proc.poll() is None:
            return ""
        self._stderr.seek(0)
        lines = self._stderr.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    @property
    def running(self) -> bool:
        """True while the child serves."""
        return self._proc.poll() is None

    def close(self) -> None:
        """Stop the child: close its stdin, then TERM, then KILL. Safe to call twice."""
        if self._proc.poll() is None:
            try:
                if self._proc.stdin:
                    self._proc.stdin.close()
                self._proc.wait(timeout=STOP_GRACE_S)
            except (subprocess.TimeoutExpired, OSError):
                _end(self._proc, STOP_GRACE_S)
        for stream in (self._proc.stdout, self._proc.stdin, self._stderr, self._bench_file):
            if stream and not stream.closed:
                stream.close()

    def __enter__(self) -> VirtualBenchProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _first_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
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


def _end(proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """TERM `proc`, then KILL it if it has not ended within `timeout_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
