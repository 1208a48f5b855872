"""The IO manager sketch's real AVR build on simavr: an emulated Arduino UNO on a pty.

`make firmware-avr` builds ``io_manager.ino`` for the UNO with Debian's Arduino core and avr-gcc
(``build/firmware/io_manager-uno/io_manager_uno.elf``) and the libsimavr harness that runs it
(``build/firmware/uno-simavr``, firmware/io_manager/simavr). `SimavrUno` starts the harness as a
child process with the DUT's serial device on its SoftwareSerial pins and reads the pty of the
UNO's USB serial from its stdout; the rig opens that pty like the real board's port. The process
is killed by its pid on every exit path (`close`), and dies with its parent.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from virtual_bench.child import end_process, read_line
from virtual_bench.errors import SetupError

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / "build" / "firmware"
#: Where `make firmware-avr` puts the UNO build of the sketch and the harness.
DEFAULT_ELF = BUILD / "io_manager-uno" / "io_manager_uno.elf"
DEFAULT_HARNESS = BUILD / "uno-simavr"
#: Host seconds the harness may take to load the ELF and print its port.
START_TIMEOUT_S = 10.0


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
    """

    def __init__(self, dut_port: str | None, *, harness: Path | None = None,
                 elf: Path | None = None, speed: float = 0.0) -> None:
        if harness is None or elf is None:
            harness, elf = simavr_uno_binaries(build=True)
        argv = [str(harness), "--speed", f"{speed:g}"]
        if dut_port is not None:
            argv += ["--dut", dut_port]
        argv.append(str(elf))
        # stderr to a file: nobody reads it during a run and a full pipe would stop the AVR.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        env = {k: v for k, v in os.environ.items() if not k.startswith("SIMAVR_")}
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=self._stderr, env=env, close_fds=True)
        #: The harness's process id (what `close` kills).
        self.pid = self._proc.pid
        line = read_line(self._proc, START_TIMEOUT_S)
        if not line.startswith("port: "):
            why = self.stderr_text().strip().splitlines()
            self.close()
            raise SetupError(
                f"the simavr UNO did not start: {why[-1] if why else line or 'no output'}",
                hint="run `make firmware-avr`, then build/firmware/uno-simavr by hand to see why",
            )
        #: The pty of the UNO's USB serial (115200 baud).
        self.path = line.removeprefix("port: ")


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
