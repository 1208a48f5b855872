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
import tempfile
import threading
from pathlib import Path

from virtual_bench.bus import SimBusServer
from virtual_bench.errors import SetupError
from virtual_bench.pty import Pty
from virtual_bench.world import NS, World

REPO = Path(__file__).resolve().parents[1]
#: Where `make firmware-host` puts the shim (a checkout).
DEFAULT_BINARY = REPO / "build" / "firmware" / "dut-host"
#: The shim's sources: the checkout's firmware/, or the copy installed with the rig.
SOURCES = REPO / "firmware" / "dut" / "host"


def shim_cache() -> Path:
    """Where an installed rig builds the shim, one folder per rig version: $RIG_CACHE (as the
    datasets), else $XDG_CACHE_HOME/neurobench-rig, else ~/.cache/neurobench-rig; then
    dut-host/<version>/dut-host."""
    base = os.environ.get("RIG_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neurobench-rig"
    try:  # what the build wrote (rig/_version.txt): read, not imported (we sit below rig/)
        version = (REPO / "rig" / "_version.txt").read_text(encoding="utf-8").strip()
    except OSError:
        version = "unknown"
    return Path(base) / "dut-host" / (version or "unknown")


def _target() -> Path:
    """A checkout's build/firmware (`make firmware-host`), else the user's cache."""
    return DEFAULT_BINARY if (REPO / ".git").exists() else shim_cache() / "dut-host"


def find_host_shim(*, build: bool) -> tuple[Path | None, str]:
    """The C shim to run and, where there is none, why (for the console, `rig sim` and the
    manifest: "no C compiler", ...). $RIG_DUT_HOST names one; else a checkout's
    build/firmware/dut-host, an installed rig's in the cache; with `build`, built there first
    from the sources (make + the C compiler, $CC or gcc) when it is not."""
    override = os.environ.get("RIG_DUT_HOST")
    if override:
        found = Path(override).is_file()
        return (Path(override), "") if found else (None, f"RIG_DUT_HOST={override} is no file")
    target = _target()
    if target.is_file():
        return target, ""
    if not build:
        return None, "the C shim is not built"
    compiler = shutil.which(os.environ.get("CC", "gcc"))
    if not compiler:
        return None, f"no C compiler: {os.environ.get('CC', 'gcc')} not found"
    if not shutil.which("make"):
        return None, "no make to build the C shim"
    if not SOURCES.is_dir():
        return None, f"no C shim sources ({SOURCES})"
    return _build(target)


def _build(target: Path) -> tuple[Path | None, str]:
    """Build into a fresh folder beside `target`, then rename the binary into place: benches
    starting at once each build their own and one rename wins, never half a file."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".build-", dir=target.parent) as work:
            done = subprocess.run(["make", "-s", "-C", str(SOURCES), f"OUT={work}"],
                                  check=False, capture_output=True, text=True, timeout=300)
            built = Path(work) / "dut-host"
            if done.returncode != 0 or not built.is_file():
                said = (done.stderr or done.stdout).strip().splitlines()
                return None, f"the C shim did not build: {said[-1] if said else done.returncode}"
            os.replace(built, target)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"the C shim did not build: {exc}"
    return target, ""


def host_shim_binary(*, build: bool) -> Path | None:
    """The built shim, or None (`find_host_shim` says why)."""
    return find_host_shim(build=build)[0]


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
