"""A simulated IO manager (the Arduino UNO proxy of firmware/io_manager) on its own pty.

It behaves like the sketch: an 80-character command buffer (a longer command is refused whole),
its own commands, and ``dut <cmd>%`` forwarded to the DUT's UART (the DUT's pty, opened with
pyserial like the UNO's wires) before the acknowledgement, with every DUT line relayed as
``[dut]: <line>``. Given the bench's `World`, its timer captures the DUT's timestamp edges
from the world and prints ``m-lap-us-<n>`` from the UNO's own µs clock (4 µs steps, 32 bits)
once simulated time has passed them. Without a world the timer commands are accepted but
capture nothing. The reset line is not modelled: ``res`` only records its polarity.

A hex download through it (``db load``, the ``db <hex>`` commands, then the ``db crc`` or
``db print`` check) takes, in simulated time, what a real UNO's two lines take for its
characters: the sketch's 9600-baud line to the DUT and its 115200-baud USB serial to the rig
(each command, the sketch's acknowledgement, the DUT's relayed lines). While it lasts simulated
time stands still (held); when it ends the clock jumps by both lines' time. Without
that, each of its ~600 command exchanges would cost the host's time for the ptys and Python
(~1 ms, more on a loaded host) times `speed`, and the recording's length would depend on the
host (20-50 s of simulated time per input at `speed = 50`, varying by a quarter run to run).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import select
import threading

import serial

from protocols.io_manager.codec import (
    DUT_BAUD,
    DUT_PREFIX,
    EDGE_CHANGE,
    HOST_BAUD,
    MAX_COMMAND,
    PASSTHROUGH_PREFIX,
)
from virtual_bench.line_time import HeldLines
from virtual_bench.pty import Pty
from virtual_bench.world import World

NAME = "neurobench-rig IO manager (simulated)"
VERSION = "1.0.0"
#: Longest DUT line relayed as one line; the sketch splits longer ones at its buffer size.
DUT_LINE_MAX = 128
#: The UNO's micros() advances in steps of 4 µs (16 MHz clock, timer0 prescaler 64).
MICROS_STEP = 4
HELP = (
    "name: this board's name",
    "version: firmware version",
    "dut <cmd>: pass <cmd>% through to the DUT",
    "res <0|1>: DUT reset line level that holds the DUT in reset",
    "enable-timer: print m-lap-us-<us> for each timestamp edge",
    "disable-timer: stop printing timestamp edges",
    "tm <0|1>: timer edges 0=falling 1=any change",
    "help: this list",
)
#: Host seconds one poll waits; how late the UNO may notice input or a timestamp edge.
_POLL_S = 0.005
#: Host seconds a write to the host pty may wait for the reader; then the bytes are lost.
_WRITE_WAIT_S = 0.5
#: Characters per second on the UNO's SoftwareSerial line to the DUT and on its USB serial to the
#: host (start, 8 data and stop bits each).
DUT_CHARS_PER_S = DUT_BAUD / 10
HOST_CHARS_PER_S = HOST_BAUD / 10
class SimIoManager:
    """A simulated IO manager: the rig opens `path` with pyserial; `start()` it, `close()` it."""

    def __init__(self, dut_port_path: str, *, world: World | None = None) -> None:
        self.world = world
        self.dut_port_path = dut_port_path
        self._pty = Pty()
        self.path = self._pty.path
        os.set_blocking(self._pty.master, False)
        # The UNO's side of the DUT's UART; pyserial like on hardware.
        self._dut = serial.Serial(dut_port_path, DUT_BAUD, timeout=0, exclusive=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cmd = bytearray()
        self._overflow = False
        self._dut_line = bytearray()
        #: Observable state of the sketch (tests read these).
        self.reset_level: int | None = None
        self.timer_enabled = False
        self.edge_mode = 0
        self._epoch_ns = world.clock.now_ns() if world else 0
        self._edges_from = 0
        #: A hex download in progress: its lines (to the DUT, to the host) and their characters.
        self._download: HeldLines | None = None
        #: Simulated seconds charged for downloads' line time so far, and the characters on the
        #: DUT's line and on the host's they were for (tests read them).
        self.download_line_s = 0.0
        self.download_chars = (0, 0)

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the sketch's loop in a thread."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sim-io-manager", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the loop, close the DUT port and the pty; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._end_download()
        with contextlib.suppress(serial.SerialException, OSError):
            self._dut.close()
        self._pty.close()

    def __enter__(self) -> SimIoManager:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sketch's loop --------------------------------------------------------------------
    def _run(self) -> None:
        dut_fd: int | None = self._dut.fileno()
        while not self._stop.is_set():
            watched = [self._pty.master] if dut_fd is None else [self._pty.master, dut_fd]
            try:
                ready, _, _ = select.select(watched, [], [], _POLL_S)
            except (OSError, ValueError):
                return  # closed under us
            if self._pty.master in ready:
                self._from_host(self._read_host())
            if dut_fd is not None and dut_fd in ready:
                data = self._read_dut()
                if data is None:
                    dut_fd = None  # the DUT's port is gone: stop watching it, keep serving
                else:
                    self._from_dut(data)
            self._report_edges()
            if self._download is not None and self._download.stalled():
                self._end_download()

    def _from_host(self, data: bytes) -> None:
        """Collect command bytes; run each command at its ``%``."""
        parts = data.split(b"%")
        for i, part in enumerate(parts):
            part = part.replace(b"\r", b"").replace(b"\n", b"")
            room = MAX_COMMAND - 1 - len(self._cmd)  # the '%' takes the 80th place
            if len(part) > room:
                self._overflow = True
            self._cmd += part[: max(room, 0)]
            if i == len(parts) - 1:
                break
            text = self._cmd.decode("ascii", errors="replace").strip()
            overflow, self._overflow = self._overflow, False
            self._cmd.clear()
            if overflow:
                self._say(f"e-[Command too long: more than {MAX_COMMAND} characters]", "m-ready")
            else:
                self._execute(text)

    def _execute(self, text: str) -> None:
        words = text.split()
        head = words[0] if words else ""
        arg = words[1] if len(words) == 2 else None
        if head + " " == PASSTHROUGH_PREFIX and len(text) > len(PASSTHROUGH_PREFIX):
            command = text[len(PASSTHROUGH_PREFIX) :].strip()
            if self.world is not None:
                self._track_download(command)
            # Forward first, acknowledge second: on the UNO the host must not send while
            # SoftwareSerial transmits, and it waits for this acknowledgement.
            self._write_dut((command + "%").encode("ascii", errors="replace"))
            self._say(f"m-dut-passthrough({command})", "m-ready")
            return
        if text == "name":
            reply = [f"m-name-[{NAME}]"]
        elif text == "version":
            reply = [f"m-version-[{VERSION}]"]
        elif text == "help":
            reply = [f"m-help-[{line}]" for line in HELP]
        elif head == "res" and arg in ("0", "1"):
            self.reset_level = int(arg)
            reply = [f"m-res-{arg}"]
        elif head == "tm" and arg in ("0", "1"):
            self.edge_mode = int(arg)
            reply = [f"m-tm-{arg}"]
        elif text in ("enable-timer", "disable-timer"):
            enabled = text == "enable-timer"
            if enabled and not self.timer_enabled and self.world is not None:
                self._edges_from = self.world.clock.now_ns()  # no edges from before
            self.timer_enabled = enabled
            reply = ["m-timer-enabled" if enabled else "m-timer-disabled"]
        elif head in ("res", "tm"):
            reply = [f"e-[{head} needs 0 or 1]"]
        elif head == "dut":
            reply = ["e-[dut needs a command]"]
        else:
            reply = [f"e-[Unknown command: {text}]"]
        self._say(*reply, "m-ready")

    def _from_dut(self, data: bytes) -> None:
        """Relay whole DUT lines with the prefix, so own replies never split one."""
        for byte in data.replace(b"\r", b""):
            if byte == 0x0A:
                self._relay_line()
                continue
            self._dut_line.append(byte)
            if len(self._dut_line) >= DUT_LINE_MAX:
                self._relay_line()

    def _relay_line(self) -> None:
        if self._dut_line:
            text = self._dut_line.decode("ascii", errors="replace")
            self._dut_line.clear()
            download = self._download
            if download is not None:
                download.count(len(text) + 2)  # with its CR LF
                if download.ending and text == "m-ready":
                    # The clock moves on before the host sees the end: whatever it does next
                    # happens after the download's time.
                    download.count(0, len(DUT_PREFIX) + len(text) + 2)
                    self._end_download()
            self._say(DUT_PREFIX + text)

    # -- downloads: the line's time, not the host's ----------------------------------------------
    def _track_download(self, command: str) -> None:
        """Before `command` goes to the DUT: start or continue a held download (``db load``,
        ``db <hex>``), mark its check (``db crc``/``db print``: its reply ends it), or end it
        before anything else, which runs on running time (an inference must)."""
        words = command.split()
        sub = words[1] if len(words) >= 2 and words[0] == "db" else None
        if sub is not None and sub not in ("print", "crc"):
            if self._download is None:
                assert self.world is not None
                self._download = HeldLines(self.world.clock, (DUT_CHARS_PER_S, HOST_CHARS_PER_S))
        elif sub is None:
            self._end_download()
        download = self._download
        if download is not None:
            # The command with its '%' on both lines, behind "dut " on the host's.
            download.count(len(command) + 1, len(PASSTHROUGH_PREFIX) + len(command) + 1)
            download.ending = sub in ("print", "crc")

    def _end_download(self) -> None:
        """Charge the held download's line time to the clock and let time run again."""
        download, self._download = self._download, None
        if download is None or self.world is None:
            return
        dut, host = self.download_chars
        self.download_chars = (dut + download.chars[0], host + download.chars[1])
        self.download_line_s += download.end()

    def _report_edges(self) -> None:
        """Print a lap for every timestamp edge that simulated time has passed."""
        world = self.world
        if world is None or not self.timer_enabled:
            return
        # An out-of-process DUT (sim bus) declares its edges only up to its horizon: report no
        # further, or an edge it declares late would be skipped.
        observable = getattr(world, "observable_ns", world.clock.now_ns)
        with world.lock:
            t0 = self._edges_from
            now = max(observable(), t0)
            edges = world.falling_edges_between(t0, now)
            if self.edge_mode == EDGE_CHANGE:
                lo = bisect.bisect_left(world.rising_ns, t0)
                hi = bisect.bisect_left(world.rising_ns, now)
                edges = sorted(edges + world.rising_ns[lo:hi])
        self._edges_from = now
        if edges:
            self._say(*(f"m-lap-us-{self._micros(t)}" for t in edges))

    def _micros(self, t_ns: int) -> int:
        us = (t_ns - self._epoch_ns) // 1000
        return (us - us % MICROS_STEP) & 0xFFFFFFFF

    # -- I/O ----------------------------------------------------------------------------------
    def _say(self, *lines: str) -> None:
        data = "".join(line + "\r\n" for line in lines).encode("ascii", errors="replace")
        if self._download is not None:
            self._download.count(0, len(data))
        # Nobody reading the host port: the rest is lost, as on a real UART.
        self._pty.write(data, patience_s=_WRITE_WAIT_S, stop=self._stop)

    def _read_host(self) -> bytes:
        try:
            return os.read(self._pty.master, 4096)
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError:
            self._stop.set()
            return b""

    def _read_dut(self) -> bytes | None:
        """What the DUT sent; None once its port is gone (a readable fd that gives nothing)."""
        try:
            return self._dut.read(max(self._dut.in_waiting, 1))
        except (serial.SerialException, OSError):
            return None

    def _write_dut(self, data: bytes) -> None:
        with contextlib.suppress(serial.SerialException, OSError):
            self._dut.write(data)
