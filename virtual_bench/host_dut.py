"""The host-built C shim as the virtual bench's DUT: the real firmware code on a pty.

The shim runs as a child process whose stdin/stdout are the pty's device side, so the rig talks
to it through pyserial exactly as to a board. Its timer, its timestamp GPIO and the duration of
an inference live on the virtual bench's simulated clock through the sim bus
(`virtual_bench.bus`). Power is real too: the process is started when the LPM01A switches the supply
on and killed when it switches it off, so a power cycle is a reboot.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import socket
import subprocess
import threading
from pathlib import Path

from virtual_bench.bus import SimBusServer
from virtual_bench.errors import SetupError
from virtual_bench.pty import Pty
from virtual_bench.world import NS, World

REPO = Path(__file__).resolve().parents[1]
#: Where `make firmware-host` puts the shim.
DEFAULT_BINARY = REPO / "build" / "firmware" / "dut-host"
SOURCES = REPO / "firmware" / "dut" / "host"


def host_shim_binary(*, build: bool) -> Path | None:
    """The built shim (env RIG_DUT_HOST overrides); built first if asked and gcc is here."""
    override = os.environ.get("RIG_DUT_HOST")
    if override:
        return Path(override) if Path(override).is_file() else None
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if not DEFAULT_BINARY.is_file() and build and compiler and SOURCES.is_dir():
        subprocess.run(
            ["make", "-s", "-C", str(SOURCES), f"OUT={DEFAULT_BINARY.parent}"],
            check=False, capture_output=True, timeout=300,
        )
    return DEFAULT_BINARY if DEFAULT_BINARY.is_file() else None


class HostShimDut:
    """Supervises the C shim: boots it at power-on, kills it at power-off, serves its bus."""

    def __init__(self, world: World, binary: Path, *, timestamp_mode: str = "energy") -> None:
        if not binary.is_file():
            raise SetupError(f"the host DUT shim {binary} is not built",
                             hint="run `make firmware-host` (needs gcc)")
        self.world = world
        self.binary = binary
        self.timestamp_mode = timestamp_mode
        self._pty = Pty()
        self.path = self._pty.path
        self._stop = threading.Event()
        self._proc: subprocess.Popen | None = None
        self._bus: SimBusServer | None = None
        self._thread = threading.Thread(target=self._supervise, name="host-dut", daemon=True)
        #: How many times the shim was booted (one per power-on).
        self.boots = 0

    def start(self) -> HostShimDut:
        """Start supervising (the shim itself starts when the supply comes on)."""
        self._thread.start()
        return self

    def close(self) -> None:
        """Kill the shim and close the pty; safe to call twice."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self._power_cut()
        self._pty.close()

    def __enter__(self) -> HostShimDut:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- supervision --------------------------------------------------------------------------
    def _supervise(self) -> None:
        seen = -1
        while not self._stop.is_set():
            with self.world.changed:
                if self.world.generation == seen:
                    self.world.changed.wait(0.05)
                generation, powered = self.world.generation, self.world.powered
            if generation != seen:
                seen = generation
                self._power_cut()
                if powered:
                    self._boot(generation)
            if self._proc is None:
                self._discard_input()  # an unpowered UART drops what it is sent

    def _boot(self, generation: int) -> None:
        self._discard_input()
        ours, theirs = socket.socketpair()
        env = {
            **os.environ,
            "RIG_SIMBUS_FD": str(theirs.fileno()),
            "RIG_SIM_INFERENCE_NS": str(round(self.world.params.inference_s * NS)),
            "RIG_SIM_POWER_ON_NS": str(self.world.power_on_ns),
        }
        self.boots += 1  # before the spawn: the banner may reach the rig before we run again
        self._proc = subprocess.Popen(
            [str(self.binary), "--mode", self.timestamp_mode],
            # stderr is the bench's: the shim only writes there when something is wrong.
            stdin=self._pty.master, stdout=self._pty.master, stderr=None,
            pass_fds=(theirs.fileno(),), env=env, close_fds=True,
        )
        theirs.close()
        self._bus = SimBusServer(self.world, ours, generation).start()

    def _power_cut(self) -> None:
        proc, bus = self._proc, self._bus
        self._proc = self._bus = None
        if proc is not None and proc.poll() is None:
            proc.kill()  # the supply went away: no clean shutdown for the firmware
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5.0)
        if bus is not None:
            with contextlib.suppress(OSError):
                bus.sock.shutdown(socket.SHUT_RDWR)
            bus.join(2.0)
            bus.sock.close()

    def _discard_input(self) -> None:
        fd = self._pty.master
        if fd < 0:
            return
        with contextlib.suppress(OSError):
            while select.select([fd], [], [], 0)[0]:
                if not os.read(fd, 65536):
                    break
