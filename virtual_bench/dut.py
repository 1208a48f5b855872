"""A simulated MLPerf Tiny DUT on a pty, powered and timed through the shared `World`.

It speaks the plain DUT protocol (protocols/dut/SPEC.md) like reference firmware: boot banner
after power-on, 80-character command buffer, ``m-ready`` after every command. Its inferences take
`world.params.inference_s` of simulated time each and are registered in the world's power model
before simulated time reaches them, so a simulated energy monitor sees them exactly; timestamps
are GPIO pulses in the world (energy mode) or lap lines from the world's 32-bit µs timer
(performance mode). Without power it discards its input and says nothing; a power cut abandons
whatever it was doing.

With `extensions` (the default) it also speaks the rig's negotiated extensions that a DUT shim
implements: ``caps``, the binary ``bload`` download (raw bytes on the same pty after its
ready line, CRC-32 checked, inter-byte timeout), ``db crc`` (``dbcrc``: the count and CRC-32 of
the bytes a hex download left in the buffer) and, in energy mode, ``elap`` (``infer`` prints
the lap counter of both pulses once the window has closed), ``rcrc`` (after ``caps``, result
lines end with their CRC-32, as the C shim's do) and ``lapcrc`` (lap lines too, and ``laps``
prints the last ``infer``'s two lap lines again; `lap_crc` False stands for firmware from
before it: lap lines plain, no ``laps``). Without, it is plain MLPerf Tiny firmware that answers
``caps`` with ``e-[Unknown command: caps]``.

With `uart_baud` its pty stands for a UART at that rate: a download (``bload`` and its bytes, or
``db load`` to its ``db crc``/``db print`` check) holds the bench's clock and moves it on by its
characters' time at that baud rate (virtual_bench/line_time.py), as a DUT on a real port takes.
"""

from __future__ import annotations

import os
import re
import select
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from protocols.dut.codec import (
    CAP_BLOAD,
    CAP_DB_CRC,
    CAP_ELAP,
    CAP_LAP_CRC,
    CAP_RESULT_CRC,
    MAX_COMMAND,
    TIMESTAMP_MODES,
    payload_crc,
    result_line_with_crc,
)
from virtual_bench.line_time import HeldLines
from virtual_bench.pty import Pty
from virtual_bench.world import NS, World

PROFILE = "ULPMark for tinyML Firmware V0.0.1"
#: Bytes per ``m-buffer-`` line of ``db print``.
DUMP_BYTES_PER_LINE = 16
#: Host seconds one poll of the pty waits: how late the DUT may notice a power-on or new input.
_POLL_S = 0.005
#: Host seconds a write to the pty may wait for the reader; after that the bytes are lost, as
#: on a UART with nobody listening.
_WRITE_WAIT_S = 0.5
#: Longest host wait in one slice of a simulated sleep, so that `close()` is noticed promptly.
_SLEEP_SLICE_S = 0.05

#: Host seconds a binary download may pause between two bytes before the DUT gives up (the
#: spec's 1000 ms; a UART timeout, not a simulated duration).
BLOAD_TIMEOUT_S = 1.0

_HEX = re.compile(r"(?:[0-9a-fA-F]{2})*")
_BLOAD_ARGS = re.compile(r"([1-9][0-9]{0,9}) ([0-9a-f]{8})")


@dataclass
class _BinaryReceive:
    """A ``bload`` in progress: `n` bytes announced with CRC `crc`; `got` so far."""

    n: int
    crc: int
    got: int = 0
    #: Host monotonic time of the last byte (or of the ready line).
    last: float = 0.0


class DutModel(Protocol):
    """The network the simulated DUT runs: input size in bytes, model id, and scores."""

    input_size: int
    model_id: str

    def __call__(self, data: bytes) -> np.ndarray: ...


class SimDut:
    """A simulated DUT: the rig opens `path` with pyserial; `start()` it, `close()` it."""

    def __init__(
        self,
        world: World,
        model: DutModel,
        *,
        timestamp_mode: str = "energy",
        name: str = "dut",
        vendor: str = "neurobench-rig virtual bench",
        extensions: bool = True,
        bload_timeout_s: float = BLOAD_TIMEOUT_S,
        uart_baud: float | None = None,
        lap_crc: bool = True,
    ) -> None:
        if timestamp_mode not in TIMESTAMP_MODES:
            raise ValueError(f"timestamp_mode must be one of {TIMESTAMP_MODES}")
        if uart_baud is not None and not uart_baud > 0:
            raise ValueError("uart_baud must be positive")
        if int(model.input_size) <= 0:
            raise ValueError("model.input_size must be positive")
        self.world = world
        self.model = model
        self.timestamp_mode = timestamp_mode
        self.name = name
        self.vendor = vendor
        self.extensions = extensions
        #: lapcrc offered (with the extensions): lap lines CRC-checked after `caps`, `laps`.
        self.lap_crc = extensions and lap_crc
        self.bload_timeout_s = bload_timeout_s
        self.uart_baud = uart_baud
        #: A download in progress on the paced UART (`uart_baud`), and what downloads took.
        self._line: HeldLines | None = None
        #: Simulated seconds charged for downloads' UART time so far, and their characters.
        self.download_line_s = 0.0
        self.download_chars = 0
        self._pty = Pty()
        self.path = self._pty.path
        os.set_blocking(self._pty.master, False)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._power_up_state()

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the firmware thread (it boots whenever the world powers the DUT)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="sim-dut", daemon=True)
            self._thread.start()

    def close(self) -> None:
        """Stop the firmware thread and close the pty; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._end_line()
        self._pty.close()

    def __enter__(self) -> SimDut:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- firmware main loop -------------------------------------------------------------------
    def _power_up_state(self) -> None:
        """RAM contents after power-on: empty command buffer, zeroed input buffer."""
        self._cmd = bytearray()
        self._buffer = bytearray(int(self.model.input_size))
        self._expected = 0
        self._pos = 0
        self._results: np.ndarray | None = None
        self._rx: _BinaryReceive | None = None
        #: rcrc: result lines carry their CRC-32 once the host has asked `caps` (lapcrc: and
        #: lap lines).
        self._result_crc = False
        #: The lap counter at the last infer's two timestamps (lapcrc's `laps`), if any.
        self._laps: tuple[int, int] | None = None

    def _run(self) -> None:
        world = self.world
        gen: int | None = None
        booted = False
        while not self._stop.is_set():
            with world.lock:
                now_gen, powered, on_ns = world.generation, world.powered, world.power_on_ns
            if now_gen != gen:
                gen, booted = now_gen, False
                self._end_line()  # a power cut ends a download: time runs again
                self._power_up_state()
            if not powered:
                self._read(_POLL_S)  # an unpowered UART receives nothing
                continue
            if not booted:
                if not self._sleep_until(on_ns + int(world.params.boot_s * NS), gen):
                    continue
                # Input that arrived while booting is ignored, as on the real firmware.
                while self._read(0.0):
                    pass
                self._say(gen, f"m-timestamp-mode-{self.timestamp_mode}", "m-init-done", "m-ready")
                booted = True
                continue
            self._receive(self._read(_POLL_S), gen)
            rx = self._rx
            if rx is not None and time.monotonic() - rx.last > self.bload_timeout_s:
                self._rx = None
                self._line_ends()
                self._say(gen, f"e-[bload timeout: got {rx.got} of {rx.n} bytes]", "m-ready")
            if self._line is not None and self._line.stalled():
                self._end_line()

    def _receive(self, data: bytes, gen: int) -> None:
        """Feed a binary download, or append to the command buffer (truncated at 80
        characters) and run each finished command; after a ``bload`` the bytes are raw data."""
        while data:
            if self._rx is not None:
                data = self._receive_binary(data, gen)
                continue
            end = data.find(b"%")
            part, data = (data, b"") if end < 0 else (data[:end], data[end + 1 :])
            self._cmd += part[: max(MAX_COMMAND - len(self._cmd), 0)]
            if end < 0:
                return
            text = self._cmd.decode("ascii", errors="replace")
            self._cmd.clear()
            self._track_line(text.strip(), len(text) + 1)
            if self._execute(text.strip(), gen):
                self._say(gen, "m-ready")
            if self.world.generation != gen:
                return  # power was cut: the rest of the input went to a dead DUT

    def _receive_binary(self, data: bytes, gen: int) -> bytes:
        """Store the next bytes of a ``bload`` in the input buffer; the rest is returned."""
        rx = self._rx
        assert rx is not None  # called only while a bload is being received
        take = data[: rx.n - rx.got]
        self._buffer[rx.got : rx.got + len(take)] = take
        rx.got += len(take)
        if self._line is not None:
            self._line.count(len(take))
        rx.last = time.monotonic()
        self._pos = rx.got
        if rx.got == rx.n:
            self._rx = None
            self._line_ends()
            crc = payload_crc(self._buffer[: rx.n])
            if crc == rx.crc:
                self._say(gen, f"m-bload-done-{crc:08x}", "m-ready")
            else:
                self._say(gen, f"e-[bload crc mismatch: expected {rx.crc:08x} got {crc:08x}]",
                          "m-ready")
        return data[len(take) :]

    def _execute(self, text: str, gen: int) -> bool:
        """Run one command; True when its reply is complete and ``m-ready`` is due.

        False if it was abandoned by a power cut (then nothing more), or if a ``bload`` now
        waits for its data (``m-ready`` follows the data).
        """
        words = text.split()
        head = words[0] if words else ""
        if head == "caps" and self.extensions:
            caps = f"{CAP_BLOAD},{CAP_DB_CRC},{CAP_RESULT_CRC}"
            caps += f",{CAP_LAP_CRC}" if self.lap_crc else ""
            caps += f",{CAP_ELAP}" if self.timestamp_mode == "energy" else ""
            self._result_crc = True
            self._say(gen, f"m-timestamp-mode-{self.timestamp_mode}", f"m-caps-[{caps}]")
        elif head == "bload" and self.extensions:
            return self._bload(text[len("bload") :].strip(), gen)
        elif head == "name":
            self._say(gen, f"m-name-{self.name}-[{self.vendor}]")
        elif head == "profile":
            self._say(gen, f"m-profile-[{PROFILE}]", f"m-model-[{self.model.model_id}]")
        elif head == "db" and len(words) >= 2:
            self._db(words[1:], gen)
        elif head == "infer":
            return self._infer(words[1:], gen)
        elif head == "results":
            self._say(gen, self._results_line(self._results))
        elif head == "timestamp":
            self._timestamp(gen)
        elif head == "laps" and self.lap_crc:
            if self._laps is None:
                self._say(gen, "e-[No inference yet]")
            else:
                self._say(gen, *(self._lap_line(us) for us in self._laps))
        else:
            self._say(gen, f"e-[Unknown command: {text}]")
        return True

    # -- commands -----------------------------------------------------------------------------
    def _bload(self, args: str, gen: int) -> bool:
        """``bload N CRC``: get ready for N raw bytes; True if refused (``m-ready`` now)."""
        m = _BLOAD_ARGS.fullmatch(args)
        if m is None:
            self._say(gen, "e-[bload bad arguments]")
            return True
        n, crc = int(m.group(1)), int(m.group(2), 16)
        if n > len(self._buffer):
            self._say(gen, f"e-[bload too large: {n} > {len(self._buffer)}]")
            return True
        # Listen before saying ready: the host may send the data right after the line.
        self._rx = _BinaryReceive(n, crc, last=time.monotonic())
        self._expected, self._pos = n, 0
        self._say(gen, f"m-bload-ready-{n}")
        return False

    def _db(self, args: list[str], gen: int) -> None:
        if args[0] == "load":
            arg = args[1] if len(args) > 1 else ""
            n = int(arg) if arg.isdigit() else 0
            if n <= 0:
                self._say(gen, f"e-[Invalid byte count '{arg}']")
            elif n > len(self._buffer):
                self._say(gen, f"e-[Cannot load {n} bytes: the buffer holds {len(self._buffer)}]")
            else:
                self._expected, self._pos = n, 0
                self._say(gen, f"m-[Expecting {n} bytes]")
        elif args[0] == "crc" and self.extensions:
            crc = payload_crc(bytes(self._buffer[: self._pos]))
            self._say(gen, f"m-db-crc-{self._pos}-{crc:08x}")
        elif args[0] == "print":
            data = bytes(self._buffer[: self._pos])
            step = DUMP_BYTES_PER_LINE
            rows = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
            self._say(gen, *("m-buffer-" + row.hex("-") for row in rows))
        else:
            self._db_hex(args[0], gen)

    def _db_hex(self, digits: str, gen: int) -> None:
        if len(digits) % 2:
            self._say(gen, "e-[Insufficent number of hex digits]")
            return
        if not _HEX.fullmatch(digits):
            bad = next(
                digits[i : i + 2]
                for i in range(0, len(digits), 2)
                if not _HEX.fullmatch(digits[i : i + 2])
            )
            self._say(gen, f"e-[Invalid hex digit '{bad}']")
            return
        data = bytes.fromhex(digits)
        if self._pos + len(data) > self._expected:
            self._say(gen, f"e-[Buffer overflow: more than the {self._expected} bytes announced]")
            return
        self._buffer[self._pos : self._pos + len(data)] = data
        self._pos += len(data)
        if self._pos == self._expected:
            self._say(gen, "m-load-done")

    def _infer(self, args: list[str], gen: int) -> bool:
        # The firmware parses numbers like atoi: anything that is not a number counts as 0.
        n = _atoi(args[0]) if args else 1
        warmup = _atoi(args[1]) if len(args) > 1 else 10
        if n <= 0:
            self._say(gen, "e-[Inference iterations must be >0]")
            return True
        if warmup < 0:
            self._say(gen, "e-[Inference warmup must be >=0]")
            return True
        try:
            scores = np.asarray(self.model(bytes(self._buffer)), dtype=np.float64).ravel()
        except Exception as exc:  # a broken test model must not kill the firmware thread
            self._say(gen, f"e-[Model failed: {exc}]")
            return True
        world = self.world
        per_ns = round(world.params.inference_s * NS)
        energy = self.timestamp_mode == "energy"
        self._laps = None
        # Register the whole run before simulated time reaches it: the energy monitor
        # integrates the power model up to "now".
        with world.lock:
            if world.generation != gen or not world.powered:
                return False
            world.begin_run()  # a drifting bench draws this run's active power
            t0 = world.clock.now_ns()
            t1 = t0 + warmup * per_ns
            t2 = t1 + n * per_ns
            world.add_activity(t0, t1)
            world.add_activity(t1, t2)
            if energy:
                world.add_pulse(t1)
                world.add_pulse(t2)
        self._say(gen, f"m-warmup-start-{warmup}")
        if not self._sleep_until(t1, gen):
            return False
        self._say(gen, "m-warmup-done", f"m-infer-start-{n}")
        laps = (world.dut_micros(t1), world.dut_micros(t2))
        if not energy:
            self._say(gen, self._lap_line(laps[0]))
        if not self._sleep_until(t2, gen):
            return False
        self._laps = laps
        if energy and self.extensions:
            # elap: the DUT's own clock of the window, now that it has closed.
            self._say(gen, *(self._lap_line(us) for us in laps))
        if not energy:
            self._say(gen, self._lap_line(laps[1]))
        self._results = scores
        self._say(gen, "m-infer-done", self._results_line(scores))
        return True

    def _lap_line(self, us: int) -> str:
        line = f"m-lap-us-{us}"
        return result_line_with_crc(line) if self._result_crc and self.lap_crc else line

    def _results_line(self, scores: np.ndarray | None) -> str:
        line = _results_line(scores)
        return result_line_with_crc(line) if self._result_crc else line

    def _timestamp(self, gen: int) -> None:
        world = self.world
        with world.lock:
            t = world.clock.now_ns()
            if self.timestamp_mode == "energy":
                world.add_pulse(t)
                return
        self._say(gen, self._lap_line(world.dut_micros(t)))

    # -- I/O and time -------------------------------------------------------------------------
    def _sleep_until(self, t_ns: int, gen: int) -> bool:
        """Sleep in simulated time; False on a power cycle or `close()`."""
        clock = self.world.clock
        slice_ns = int(_SLEEP_SLICE_S * clock.speed * NS)
        while not self._stop.is_set():
            step = min(t_ns, clock.now_ns() + slice_ns)
            if not self.world.sleep_until(step, gen):
                return False
            if step >= t_ns:
                return True
        return False

    def _say(self, gen: int, *lines: str) -> None:
        """Print lines, unless the DUT has lost power since generation `gen` began."""
        with self.world.lock:
            if self.world.generation != gen or not self.world.powered:
                return
        data = "".join(line + "\r\n" for line in lines).encode("ascii", errors="replace")
        line = self._line
        if line is not None:
            line.count(len(data))
            if line.ending and lines[-1] == "m-ready":
                # The clock moves on before the host sees the end: whatever it does next
                # happens after the download's time.
                self._end_line()
        self._write(data)

    # -- the paced UART (uart_baud) -----------------------------------------------------------
    def _track_line(self, command: str, chars: int) -> None:
        """Before `command` (`chars` on the line with its '%') runs: start or continue a held
        download (``bload``, ``db load``, ``db <hex>``), mark its check (``db crc``, ``db
        print``: its ``m-ready`` ends it), or end it before anything else, which runs on
        running time (an inference must)."""
        if self.uart_baud is None:
            return
        words = command.split()
        head = words[0] if words else ""
        sub = words[1] if head == "db" and len(words) >= 2 else None
        # Plain firmware refuses `bload` at once: no download, nothing to hold.
        if (head == "bload" and self.extensions) or (sub is not None
                                                     and sub not in ("print", "crc")):
            if self._line is None:
                self._line = HeldLines(self.world.clock, (self.uart_baud / 10,))
        elif sub is None:
            self._end_line()
        if self._line is not None:
            self._line.count(chars)
            self._line.ending = sub in ("print", "crc")

    def _line_ends(self) -> None:
        """The download's next ``m-ready`` ends it (a ``bload``'s data is complete)."""
        if self._line is not None:
            self._line.ending = True

    def _end_line(self) -> None:
        """Charge the held download's UART time to the clock and let time run again."""
        line, self._line = self._line, None
        if line is not None:
            self.download_chars += line.chars[0]
            self.download_line_s += line.end()

    def _write(self, data: bytes) -> None:
        # Nobody reading: the rest is lost, as on a real UART.
        self._pty.write(data, patience_s=_WRITE_WAIT_S, stop=self._stop)

    def _read(self, timeout_s: float) -> bytes:
        """Bytes the host sent, waiting at most `timeout_s` for the first."""
        try:
            ready, _, _ = select.select([self._pty.master], [], [], timeout_s)
            return os.read(self._pty.master, 4096) if ready else b""
        except (BlockingIOError, InterruptedError):
            return b""
        except (OSError, ValueError):
            # The pty is gone (closed under us): stop rather than spin.
            self._stop.set()
            return b""


def _atoi(text: str) -> int:
    m = re.match(r"[+-]?\d+", text)
    return int(m.group(0)) if m else 0


def _results_line(scores: np.ndarray | None) -> str:
    values = () if scores is None else scores
    return "m-results-[" + ",".join(f"{v:.3f}" for v in values) + "]"
