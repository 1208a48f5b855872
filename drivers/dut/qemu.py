"""A DUT firmware image run on an emulated board: `qemu-system-arm` with the board's UART on a pty.

QEMU prints "char device redirected to /dev/pts/N" and then serves the guest's first UART there;
the rig opens that pty with pyserial as it would a board's port. `-icount shift=N` makes guest
time count instructions (2^N ns each), so the firmware's own timer gives deterministic,
instruction-counted times: emulated, never a hardware figure. The guest is held stopped (-S)
until `power_on()`, so the rig opens the pty first and sees the boot banner, as on a board the
energy monitor powers after the port was opened. QEMU runs in its own session, so
Ctrl-C reaches only the rig, which ends QEMU by its pid (`close()`) on every exit path.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from drivers.dut.elf import EM_ARM, ElfError, read_header, read_segments, word_at
from drivers.errors import PortError
from drivers.transport import SerialTransport

#: How long an emulated board may take no byte or give no reply before the rig calls it hung
#: (a board gets 5 s). QEMU's UART takes one byte per turn of QEMU's threads, and the pty holds
#: about 16 KB, so a download is paced by the host's scheduler: at load 7 on 2 cores one 1 KB
#: write here waited 1.6 s, and in CI (load 10-19) one waited more than 5 s.
STALL_S = 30.0
#: QEMU's line naming the pty of a `-serial pty` UART.
PTY_LINE = re.compile(rb"char device redirected to (/dev/pts/\d+)")
#: A message of QEMU's own ("qemu: fatal: Lockup ...", "qemu-system-arm: ...").
QEMU_MESSAGE = re.compile(r"(qemu[\w-]*: .*)")
#: How long `close()` waits for QEMU after SIGTERM before SIGKILL.
TERMINATE_GRACE_S = 2.0
_KILL_WAIT_S = 5.0
#: How long `exit_reason()` gives a QEMU whose pty just closed to be gone.
EXIT_WAIT_S = 0.5
#: The Debian package that has the emulator (facts.md; `make system-deps` installs it).
QEMU_PACKAGE = "qemu-system-arm"
#: The memory of each emulated board an image may be loaded into, as QEMU models it (its
#: hw/arm/mps2.c): (name, first address, size). QEMU's `-kernel` loads each ELF segment at its
#: load address, and the core boots from the vector table at 0 (initial SP, reset handler).
BOARD_MEMORY: dict[str, tuple[tuple[str, int, int], ...]] = {
    "mps2-an386": (("SSRAM1, the image's 'flash'", 0x0000_0000, 4 << 20),
                   ("block RAM", 0x0100_0000, 16 << 10),
                   ("SSRAM2/3, the RAM", 0x2000_0000, 4 << 20),
                   ("PSRAM", 0x2100_0000, 16 << 20)),
}
_IMAGE_HINT = ("give the DUT shim's Cortex-M4 image that `make firmware-arm` builds "
               "(build/firmware/arm/dut-mps2-an386.elf)")


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the rig's process dies, even by `kill -9`, so an
    emulator is never left running (Linux prctl PR_SET_PDEATHSIG; elsewhere a no-op)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


_PR_SET_PDEATHSIG = 1


def emulated_label(machine: str, icount_shift: int) -> str:
    """How every figure of such a run is labelled: emulated, not simulated, not hardware."""
    return (f"emulated: QEMU {machine}, -icount shift={icount_shift}, {2 ** icount_shift} ns per "
            "instruction")


def _image_fault(data: bytes, machine: str) -> str | None:
    """What makes `data` an image the emulated `machine` cannot run, or None."""
    try:
        header = read_header(data)
    except ElfError as exc:
        return str(exc)
    if header.bits != 32:
        return (f"is a {header.bits}-bit ELF for {header.machine_name} (machine "
                f"{header.machine}), not a 32-bit ARM image for the emulated {machine}")
    if not header.little_endian:
        return f"is a big-endian ELF; the emulated {machine} runs little-endian code"
    if header.machine != EM_ARM:
        return (f"is an ELF for machine {header.machine} ({header.machine_name}), not ARM "
                f"(40): the emulated {machine} is a Cortex-M4")
    try:
        _, segments = read_segments(data)
    except ElfError as exc:
        return str(exc)
    memory = BOARD_MEMORY.get(machine, ())

    def region(start: int, size: int) -> str | None:
        return next((name for name, first, length in memory
                     if first <= start and start + size <= first + length), None)

    for s in segments:
        for what, address in (("load", s.paddr), ("run", s.vaddr)):
            if s.memsz and region(address, s.memsz) is None:
                spans = ", ".join(f"0x{first:08x}-0x{first + length - 1:08x} ({name})"
                                  for name, first, length in memory)
                return (f"has segment {s.index} ({s.memsz} B to {what} at 0x{address:08x}) "
                        f"outside the emulated {machine}'s memory: {spans}")
    reset = word_at(data, segments, 4)
    if word_at(data, segments, 0) is None or reset is None:
        return ("loads no vector table at 0x00000000, where the Cortex-M core reads its "
                "initial stack pointer and reset handler")
    if not reset & 1 or not any(s.paddr <= reset - 1 < s.paddr + s.memsz for s in segments):
        return (f"has reset vector 0x{reset:08x}, not a Thumb address (odd) inside a "
                "segment of the image: the core would lock up at reset")
    return None


class QemuBoard:
    """`qemu-system-arm -M <machine> -kernel <elf>` with UART0 on a pty (`port`), the guest
    stopped until `power_on()` (QEMU's monitor, on its stdin, is told `cont`).

    Raises PortError when QEMU or the image is missing, or QEMU does not report its pty within
    `start_timeout_s` (its output is quoted).
    """

    def __init__(
        self,
        elf: str | os.PathLike[str],
        *,
        machine: str = "mps2-an386",
        icount_shift: int = 5,
        qemu: str = "qemu-system-arm",
        start_timeout_s: float = 10.0,
    ) -> None:
        self.machine = machine
        self.icount_shift = icount_shift
        self.elf = Path(elf)
        exe = self.check_setup(elf, machine=machine, qemu=qemu)
        self.argv = [exe, "-M", machine, "-nographic", "-monitor", "stdio", "-serial", "pty",
                     "-S", "-icount", f"shift={icount_shift}", "-kernel", str(self.elf)]
        # A file, not a pipe: nobody reads QEMU's output after the pty line, and a full pipe
        # would freeze it.
        self._out = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())
        self._proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            self.argv, stdin=subprocess.PIPE, stdout=self._out, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        self.pid = self._proc.pid
        try:
            self.port = self._wait_for_pty(start_timeout_s)
        except BaseException:
            self.close()
            raise

    @staticmethod
    def check_setup(elf: str | os.PathLike[str], *, machine: str = "mps2-an386",
                    qemu: str = "qemu-system-arm") -> str:
        """The QEMU executable; PortError when it or the firmware image is missing. Needs no
        process, so a run refuses before its folder exists."""
        exe = shutil.which(qemu)
        if exe is None:
            raise PortError(f"{qemu} is not installed: cannot run the emulated {machine}",
                            hint=f"apt-get install {QEMU_PACKAGE} (or `make system-deps`)")
        if not Path(elf).is_file():
            raise PortError(f"no firmware image at {elf}",
                            hint="build it with `make firmware-arm`")
        return exe

    @staticmethod
    def check_image(elf: str | os.PathLike[str], *, machine: str = "mps2-an386") -> None:
        """PortError unless `elf` is a 32-bit little-endian ARM ELF whose loadable segments lie
        in the board's memory (`BOARD_MEMORY`), with a vector table at 0 whose reset handler is
        a Thumb address the image loads. Reads the file only, so a run refuses before its
        folder exists: QEMU would load a cut-short, foreign or random image and abort
        ("Lockup") once the guest runs."""
        try:
            data = Path(elf).read_bytes()
        except OSError as exc:
            raise PortError(f"cannot read the firmware image {elf}: {exc.strerror or exc}",
                            hint=_IMAGE_HINT) from exc
        why = _image_fault(data, machine)
        if why:
            raise PortError(f"{elf} {why}", hint=_IMAGE_HINT)

    @property
    def label(self) -> str:
        return emulated_label(self.machine, self.icount_shift)

    def _output(self) -> bytes:
        self._out.seek(0)
        return self._out.read()

    def _wait_for_pty(self, timeout_s: float) -> str:
        assert self._proc is not None
        deadline = time.monotonic() + timeout_s
        while True:
            found = PTY_LINE.search(self._output())
            if found:
                return found.group(1).decode()
            if self._proc.poll() is not None or time.monotonic() > deadline:
                said = self._output().decode(errors="replace").strip()[-500:]
                why = (f"exited with status {self._proc.returncode}"
                       if self._proc.returncode is not None
                       else f"reported no pty within {timeout_s:g} s")
                raise PortError(f"QEMU ({self.machine}) {why}: {said or 'no output'}",
                                hint=f"run it by hand to see why: {' '.join(self.argv)}")
            time.sleep(0.02)

    def transport(self, baud: int = 115200, *, name: str = "DUT") -> SerialTransport:
        """The board's UART opened as the rig opens a board's port, but patient for `STALL_S`
        (give the `DutClient` on it ``command_timeout_s=STALL_S`` too)."""
        return SerialTransport(self.port, baud, name=name, write_timeout_s=STALL_S)

    def power_on(self) -> None:
        """Start the guest (it boots and prints its banner on the pty)."""
        if self._proc is None or self._proc.stdin is None or self._proc.poll() is not None:
            raise PortError(f"QEMU ({self.machine}) is not running",
                            hint=f"run it by hand to see why: {' '.join(self.argv)}")
        try:
            self._proc.stdin.write(b"cont\n")
            self._proc.stdin.flush()
        except OSError as exc:
            raise PortError(f"QEMU ({self.machine}) did not take the monitor command: {exc}",
                            hint=f"run it by hand to see why: {' '.join(self.argv)}") from exc

    def exit_reason(self) -> str | None:
        """Why QEMU is gone ("exited with status 134: qemu: fatal: Lockup ..."), or None while
        it runs (after waiting `EXIT_WAIT_S` for it to end) or after `close()`."""
        if self._proc is None:
            return None
        try:  # a QEMU that aborts closes its pty a moment before it can be reaped
            self._proc.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return None
        rc = self._proc.returncode
        how = (f"exited with status {rc}" if rc >= 0
               else f"was ended by {signal.Signals(-rc).name}")
        # QEMU's own messages start "qemu...: " (after a monitor prompt, maybe); the rest is
        # the monitor echoing `cont`.
        said = QEMU_MESSAGE.search(self._output().decode(errors="replace"))
        return how + (f": {said.group(1).strip()}" if said else "")

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        """End QEMU by its pid (SIGTERM, then SIGKILL); safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(_KILL_WAIT_S)
        if proc is not None and proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        if not self._out.closed:
            self._out.close()

    def __enter__(self) -> QemuBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
