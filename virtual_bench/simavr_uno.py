"""The IO manager sketch's real AVR build on simavr: an emulated Arduino UNO on a pty.

`make firmware-avr` builds ``io_manager.ino`` for the UNO with Debian's Arduino core and avr-gcc
(``build/firmware/io_manager-uno/io_manager_uno.elf``) and the libsimavr harness that runs it
(``build/firmware/uno-simavr``, firmware/io_manager/simavr). `SimavrUno` starts the harness as a
child process with the DUT's serial device on its SoftwareSerial pins and reads the pty of the
UNO's USB serial from its stdout; the rig opens that pty like the real board's port. The process
is killed by its pid on every exit path (`close`), and dies with its parent.

On a virtual bench (`world` given) the bench's time follows the UNO's while the UNO works: the
harness (``--clock``) says when its clock stops ("idle <cycle>": nothing crossed its pins for
10 ms of its time) and runs again ("busy <cycle>"); while it is busy the bench's clock is held
(firmly: a monitor's stream waiting on its reader does not lift it), and each time it goes
idle the bench's clock moves on by the UNO's time since it went busy. Time runs again only once
the UNO has stayed idle for `IDLE_RELEASE_S` of host time: a gap between two commands of a
download (the rig's turn: host time, which a slow host stretches past the UNO's 10 ms) then
counts nothing, and what counts is what the emulated UNO took (its lines at 9600 and 115200
baud, as a real one), not the host's time for the emulation times the bench's `speed`. While
the UNO idles longer (an inference, the monitor's waits) the bench's time runs as before.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from virtual_bench.child import end_process, read_line
from virtual_bench.errors import SetupError
from virtual_bench.world import NS, World

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "firmware"
#: Where `make firmware-avr` puts the UNO build of the sketch and the harness.
DEFAULT_ELF = BUILD / "io_manager-uno" / "io_manager_uno.elf"
DEFAULT_HARNESS = BUILD / "uno-simavr"
#: Host seconds the harness may take to load the ELF and print its port.
START_TIMEOUT_S = 10.0
#: The emulated ATmega328P's clock [Hz] (its cycle counts in "busy"/"idle" lines).
F_CPU = 16_000_000
#: Host seconds the UNO must stay idle before the bench's time runs again: longer than the
#: rig's turn between two commands (~1-5 ms, more on a loaded host), short next to what a
#: deliberate wait lasts (an idle span, a monitor's delivery).
IDLE_RELEASE_S = 0.05


def simavr_uno_missing() -> str | None:
    """Why the emulated UNO cannot run here (a tool or a build is missing), or None."""
    for tool, package in (("avr-gcc", "gcc-avr"), ("gcc", "gcc")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; `make system-deps`)"
    for path, package in ((Path("/usr/share/arduino/Arduino.mk"), "arduino-mk"),
                          (Path("/usr/share/arduino/hardware/arduino/avr/boards.txt"),
                           "arduino-core-avr"),
                          (Path("/usr/include/simavr/sim_avr.h"), "libsimavr-dev")):
        if not path.is_file():
            return f"{path} is missing (Debian package {package}; `make system-deps`)"
    return None


def simavr_uno_binaries(*, build: bool) -> tuple[Path, Path]:
    """(harness, ELF); built with `make firmware-avr` first when asked and missing.

    Raises `SetupError` naming what is missing when they cannot be had.
    """
    missing = simavr_uno_missing()
    if missing is not None:
        raise SetupError(f"the simavr UNO cannot run: {missing}",
                         hint="install the AVR toolchain and simavr (`make system-deps`)")
    if build and not (DEFAULT_HARNESS.is_file() and DEFAULT_ELF.is_file()):
        done = subprocess.run(["make", "-s", "-C", str(REPO), "firmware-avr"],
                              capture_output=True, text=True, timeout=600, check=False)
        if done.returncode != 0:
            raise SetupError(f"`make firmware-avr` failed: {done.stderr.strip()[-400:]}",
                             hint="run `make firmware-avr` to see why")
    for path in (DEFAULT_HARNESS, DEFAULT_ELF):
        if not path.is_file():
            raise SetupError(f"{path} is not built", hint="run `make firmware-avr`")
    return DEFAULT_HARNESS, DEFAULT_ELF


class SimavrUno:
    """The harness process: the rig opens `path`; `close()` kills it (safe to call twice).

    `dut_port` is the DUT's serial device wired to the UNO's SoftwareSerial pins (None: the pins
    are left idle). `speed` caps simulated seconds per wall second (0: as fast as the host runs).
    With `world`, the bench's clock follows the UNO's while it works (see the module).
    """

    def __init__(self, dut_port: str | None, *, harness: Path | None = None,
                 elf: Path | None = None, speed: float = 0.0,
                 world: World | None = None) -> None:
        if harness is None or elf is None:
            harness, elf = simavr_uno_binaries(build=True)
        argv = [str(harness), "--speed", f"{speed:g}"]
        if dut_port is not None:
            argv += ["--dut", dut_port]
        if world is not None:
            argv.append("--clock")
        argv.append(str(elf))
        # stderr to a file: nobody reads it during a run and a full pipe would stop the AVR.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIMAVR_")}
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=self._stderr, env=env, close_fds=True)
        #: The harness's process id (what `close` kills).
        self.pid = self._proc.pid
        text = read_line(self._proc, START_TIMEOUT_S)
        line, _, more = text.partition("\n")  # the clock's first lines may come with it
        if not line.startswith("port: "):
            why = self.stderr_text().strip().splitlines()
            self.close()
            raise SetupError(
                f"the simavr UNO did not start: {why[-1] if why else line or 'no output'}",
                hint="run `make firmware-avr`, then build/firmware/uno-simavr by hand to see why",
            )
        #: The pty of the UNO's USB serial (115200 baud).
        self.path = line.removeprefix("port: ").strip()
        self._world = world
        self._hold: contextlib.ExitStack | None = None
        self._busy_from = 0
        #: Seconds of the UNO's time the bench's clock was moved on by, in all (tests read it).
        self.busy_s = 0.0
        self._clock_thread: threading.Thread | None = None
        if world is not None:
            self._clock_thread = threading.Thread(target=self._follow_clock, args=(more,),
                                                  name="simavr-uno-clock", daemon=True)
            self._clock_thread.start()

    # -- the bench's clock while the UNO works ------------------------------------------------
    def _follow_clock(self, pending: str) -> None:
        """Read the harness's "busy"/"idle" lines until it ends; then let time run."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        buf = pending.encode() + b"\n" if pending else b""
        idle_since: float | None = None  # host time the UNO went idle, while still held
        while True:
            while b"\n" in buf:
                line, _, buf = buf.partition(b"\n")
                words = line.decode(errors="replace").split()
                if len(words) == 2 and words[1].isdigit():
                    idle_since = self._on_clock_line(words[0], int(words[1]), idle_since)
            wait = None if idle_since is None else max(
                0.0, idle_since + IDLE_RELEASE_S - time.monotonic())
            try:
                ready, _, _ = select.select([fd], [], [], wait)
                chunk = os.read(fd, 4096) if ready else None
            except (OSError, ValueError):
                chunk = b""
            if chunk is None:  # idle long enough: the bench's time runs
                self._release()
                idle_since = None
                continue
            if not chunk:
                break
            buf += chunk
        self._release()

    def _on_clock_line(self, kind: str, cycle: int, idle_since: float | None
                       ) -> float | None:
        """One "busy"/"idle" line; returns since when the UNO idles while still held."""
        if kind == "busy":
            if self._hold is None:
                assert self._world is not None
                hold = contextlib.ExitStack()
                hold.enter_context(self._world.clock.held(firm=True))
                self._hold = hold
            self._busy_from = cycle  # an idle gap inside a hold counts nothing
            return None
        if kind == "idle" and self._hold is not None:
            if cycle > self._busy_from:
                busy_s = (cycle - self._busy_from) / F_CPU
                self.busy_s += busy_s
                assert self._world is not None
                self._world.clock.advance(round(busy_s * NS))
                self._busy_from = cycle
            return time.monotonic()
        return idle_since

    def _release(self) -> None:
        """Let the bench's time run (the UNO stayed idle, or the harness ended)."""
        hold, self._hold = self._hold, None
        if hold is not None:
            hold.close()


    def stderr_text(self) -> str:
        """What the harness wrote on stderr so far (its exit line says what crossed the pins)."""
        if self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    @property
    def returncode(self) -> int | None:
        """The harness's exit status, None while it runs."""
        return self._proc.poll()

    def close(self) -> str:
        """TERM, then KILL, the harness by its pid; returns its stderr."""
        end_process(self._proc, 5.0)
        if self._clock_thread is not None:
            self._clock_thread.join(timeout=5.0)  # it ends at the harness's end of output
        text = self.stderr_text()
        for stream in (self._proc.stdout, self._stderr):
            if stream is not None and not stream.closed:
                with contextlib.suppress(OSError):
                    stream.close()
        return text

    def __enter__(self) -> SimavrUno:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
