"""The rig's side of a virtual bench: a process it starts and knows only by what it prints.

`VirtualBenchProcess(bench)` writes the bench as the rig holds it to a temporary TOML file, runs
``python -m virtual_bench FILE`` (the simulated DUT, instruments and world, outside the rig) and
reads the one JSON line it prints: its ports (which the rig then opens like real hardware), or
an error and its hint (raised here as a `ConfigError`); the file is deleted then, having been
read. Closing the child's stdin stops it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from typing import Any

from drivers.errors import DeviceError
from drivers.process import ProcessTransport
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
        self._child = ProcessTransport(cmd, name="virtual bench")
        try:
            line = self._child.read_until(time.monotonic() + start_timeout_s,
                                          lambda buf: b"\n" in buf)
        except DeviceError:  # it exited, or printed nothing in time: its stderr says why
            line = b""
        finally:
            # The child has read the file by now (or never will): deleted at once, so that a
            # rig killed outright (SIGKILL: no close) leaves no temporary file behind.
            self._bench_file.close()
        text = line.decode(errors="replace").strip()
        try:
            started: dict[str, Any] = json.loads(text)
            if "error" in started:
                self.close()
                raise ConfigError(str(started["error"]), hint=started.get("hint") or None)
            self.ports: dict[str, str] = started["ports"]
            self.dut_impl: str = started.get("dut", "?")
            #: The files it runs as the DUT's and the IO manager's firmware, by role.
            self.images: dict[str, str] = dict(started.get("images") or {})
            self.speed: float = float(started.get("speed", 0.0))
            self.emon_driver: str = started.get("emon", "")
            self.powered: bool = bool(started.get("powered", False))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self.close()
            err = self._child.stderr_tail[-1] if self._child.stderr_tail else ""
            raise ConfigError(
                f"the virtual bench did not start: {err or text or 'no output'}",
                hint="run `rig --debug sim` to see why",
            ) from exc

    @property
    def running(self) -> bool:
        """True while the child serves."""
        return self._child.returncode is None

    def close(self) -> None:
        """Stop the child: close its stdin (it shuts its devices down), then TERM, then KILL.

        Safe to call twice.
        """
        self._child.close(grace_s=STOP_GRACE_S)
        if not self._bench_file.closed:
            self._bench_file.close()

    def __enter__(self) -> VirtualBenchProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
