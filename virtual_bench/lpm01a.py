"""A simulated ST LPM01A (PowerShield) on a pty, measuring the shared `World`'s DUT.

It answers the board's ASCII commands (lines ending CR LF, as every public host sends them; a
bare LF is taken too) like the real one (ack / error + detail), supplies the DUT (`volt` ->
`World.set_supply`, `pwr` -> `World.power`) and, once started, streams ascii_dec samples: sample
k covers simulated [t0 + k*1e9//fs, t0 + (k+1)*1e9//fs) ns and is the exact mean current (or
energy) of the world's power model over that period, rounded to 4 digits like the board. Falling
edges of the DUT's timestamp line appear as ``event N ris`` lines just before the first sample
starting at or after the edge. Simulated, not measured: every number comes from the world's
power model.

It answers in the forms the public hosts read (see `protocols.lpm01a.codec`): query values on
the ack line (``ack volt get 3300-03``, ``ack version 1.0.5-sim``, ``ack status ok``), status
lines ``TimeStamp:>001s 000ms, buff 00%`` (the MLPerf Tiny runner's form), and on ``stop`` the
``Acquisition completed`` line BEFORE the ack (the MLPerf runner waits for the completion alone;
`stop_ack_first` gives the other order).

With ``format bin_hexa`` (any rate up to 100 kHz) the same samples go out as 16-bit words
(12-bit mantissa, see `encode_bin_hexa`), the once-a-second status as 0xF3 frames, the end of
the acquisition as an 0xF4 frame followed by the ``Acquisition completed`` line, and replies
stay text between them, as the codec documents. D7 events are NOT sent in bin_hexa: how the
board frames them there is not public.

A fault to inject: `clock_error` makes the board sample at freq x (1 + clock_error) while it
reports freq, so every duration counted from its samples comes out that much longer (a
stretched trace) while the DUT's own timer stays right.

Faults to inject as well: `inject_overrun` (samples lost in the board), `lose_event` (a D7 event
line lost on the link: the next numbers show the gap), `lose_next_event` (the same for whichever
event comes next, for a test that cannot know the numbers; `lost_events` then names it),
`inject_frame` (any bin_hexa frame, e.g. an 0xF1 error message, in the next burst).

Not simulated: ``trigsrc d7``, ``pwr auto``, ``eventsrc`` other than ``d7 fal`` (each is
refused with an error reply saying so), D7 events in bin_hexa (not public).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import select
import threading
from dataclasses import dataclass

import numpy as np

from protocols.errors import ProtocolError
from protocols.lpm01a.codec import (
    ASCII_DEC_MAX_HZ_SHORT,
    ASCII_DEC_MAX_HZ_UNLIMITED,
    FREQ_TOKENS,
    PROMPT,
    VOLT_MAX_MV,
    VOLT_MIN_MV,
    encode_acquisition_end_frame,
    encode_bin_hexa,
    encode_overrun,
    encode_timestamp_frame,
    format_samples,
    parse_number,
)
from virtual_bench.instrument import SerialInstrument
from virtual_bench.pty import Pty
from virtual_bench.world import CATCH_UP_S, NS, World

log = logging.getLogger(__name__)

VERSION = "1.0.5-sim"
#: What ``powershield`` answers: a board id (a real board's is three dash-separated numbers, per
#: the MLPerf Tiny runner's log of one: mlcommons/tiny benchmark/runner/sessions/).
BOARD_ID = "000000000-0000000000-0000000"
#: Host seconds between two bursts of streamed samples.
STREAM_PERIOD_S = 0.005
#: How long one write may wait for a reader before the rest is dropped (as USB would lose it).
WRITE_PATIENCE_S = 1.0
#: Commands that work without host control (`htc`).
_WITHOUT_HTC = {"htc", "hrc", "version", "powershield", "status", "help"}
#: Commands whose handler writes its own ack (its place relative to the data matters).
_SELF_ACKING = {"start", "stop"}
_MIN_ACQTIME_S = 100e-6
_MAX_ACQTIME_S = 100.0
#: Most samples formatted in one go.
_MAX_BURST = 200_000
#: Forget the world's history at most this often (simulated ns).
_FORGET_EVERY_NS = NS


@dataclass
class _Overrun:
    """An injected overrun: `lost` samples go missing at sample `at` (once it is known)."""

    lost: int
    after_edge: int | None  # samples after the first falling edge at or after `since_ns`
    since_ns: int
    report: bool  # say so in the stream (else only the next TimeStamp shows the shortfall)
    at: int | None = None


class _Refused(Exception):
    """A command the board answers with `error` + `Error detail: <text>`."""


class SimLpm01a(SerialInstrument):
    """The PowerShield: commands in, replies and ascii_dec data out, on `.path` (a pty)."""

    SIM_NAME = "lpm01a"

    def __init__(self, world: World, *, clock_error: float = 0.0,
                 stop_ack_first: bool = False) -> None:
        if not clock_error > -1.0:
            raise ValueError("clock_error must be > -1 (a sample clock runs forward)")
        self.world = world
        #: On `stop`, the ack before ``Acquisition completed`` (default: after it).
        self.stop_ack_first = stop_ack_first
        #: Fractional error of the sample clock (0: exact); see the module's docstring.
        self.clock_error = clock_error
        self._pty = Pty()
        self.path = self._pty.path
        os.set_blocking(self._pty.master, False)
        #: Bytes that could not be written because nobody read the port (lost, like on USB).
        self.dropped_bytes = 0
        self.host_control = False
        self.volt_mv = VOLT_MAX_MV
        self.freq_hz = 100
        self.acqtime_s = 10.0  # 0 means unlimited
        self.settings: dict[str, str] = {
            "acqmode": "dyn",
            "funcmode": "optim",
            "output": "current",
            "format": "ascii_dec",
            "trigsrc": "sw",
            "eventsrc": "none",
            "trigdelay": "0",
            "currthres": "0",
        }
        #: Simulated start time of the running (or last) acquisition, ns.
        self.acquisition_t0_ns: int | None = None
        self.running = False
        self._next_k = 0  # next sample index to emit
        self._edge_from_ns = 0  # edges at or after this time are still to place
        self._event_number = 0
        self._next_second = 1
        self._last_forget_ns = 0
        self._write_lock = threading.Lock()
        # Guards the acquisition state between the command and the streaming thread.
        self._acq_lock = threading.Lock()
        self._init_threads()
        self._overrun: _Overrun | None = None
        self._lost_events: set[int] = set()  # numbers of D7 event lines to lose
        self._lose_next = False  # lose the next D7 event line, whatever its number
        #: The numbers of the D7 event lines lost so far (`lose_event`, `lose_next_event`).
        self.lost_events: list[int] = []
        self._frames: list[bytes] = []  # bin_hexa frames to put in the next burst

    # -- faults (test hooks: what a real board does when things go wrong) --------------------
    def unplug(self) -> None:
        """The USB cable comes out: the port goes away under the host, and the board, powered
        over USB, loses power, and so does the DUT it supplies."""
        self.close()
        self.world.power(False)

    def inject_overrun(self, lost: int, *, after_edge: int | None = None,
                       report: bool = True) -> None:
        """Lose `lost` samples as a board whose buffer overflowed does, and report it in the
        stream where they are missing (`encode_overrun`): in the next burst, or `after_edge`
        samples after the next falling edge of the DUT's timestamp line (inside its window).
        With `report` false they vanish silently, as bytes lost on the USB link do."""
        if lost < 1 or (after_edge is not None and after_edge < 0):
            raise ValueError("lost must be >= 1 and after_edge >= 0")
        with self._acq_lock:
            self._overrun = _Overrun(lost, after_edge, self.world.clock.now_ns(), report)

    def lose_event(self, number: int) -> None:
        """Lose the D7 event line numbered `number` on the link: the number is used up, so the
        next event that arrives shows the gap (as a real loss would)."""
        if number < 1:
            raise ValueError("event numbers start at 1")
        with self._acq_lock:
            self._lost_events.add(number)

    def lose_next_event(self) -> None:
        """Lose the next D7 event line the board sends, as `lose_event` does; its number is
        appended to `lost_events` once it is lost."""
        with self._acq_lock:
            self._lose_next = True

    def inject_frame(self, frame: bytes) -> None:
        """Put a bin_hexa metadata frame (e.g. `encode_text_frame(FRAME_ERROR, ...)`) before the
        first sample of the next burst (bin_hexa only)."""
        with self._acq_lock:
            self._frames.append(bytes(frame))

    def _overrun_in(self, k: int, end: int, now_ns: int) -> int:
        """Carry out an injected overrun that falls in samples [k, end): emit what comes before
        it, report it, skip the lost samples; returns the sample to go on from."""
        ov, t0, fs = self._overrun, self.acquisition_t0_ns, self.freq_hz
        if ov is None or t0 is None:
            return k
        if ov.at is None and ov.after_edge is None:
            ov.at = k
        elif ov.at is None:
            edges = self.world.falling_edges_between(ov.since_ns, t0 + end * NS // fs)
            if not edges:
                return k
            # The first sample starting at or after the edge, then `after_edge` more.
            assert ov.after_edge is not None  # `at` and `after_edge` are not both None
            ov.at = max(k, -(-(edges[0] - t0) * fs // NS) + ov.after_edge)
        if ov.at >= end:
            return k
        if ov.at > k:
            self._emit_samples(k, ov.at, now_ns)
        self._overrun = None
        if ov.report:
            self._write(encode_overrun(ov.lost))
        self._next_k = ov.at + ov.lost
        while self._next_second * fs < self._next_k:  # status lines go with the lost samples
            self._next_second += 1
        return self._next_k

    # -- output -------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        """Write `data` to the master side; drop (and count) what nobody reads in time."""
        with self._write_lock:
            self.dropped_bytes += self._pty.write(data, patience_s=WRITE_PATIENCE_S,
                                                  stop=self._closing,
                                                  waiting=self.world.clock.running)

    def _reply(self, *lines: str) -> None:
        self._write("".join(f"{PROMPT} {line}\r\n" for line in lines).encode("ascii"))

    # -- commands -----------------------------------------------------------------------------
    def _command_loop(self) -> None:
        pending = b""
        fd = self._pty.master
        while not self._closing.is_set():
            try:
                readable, _, _ = select.select([fd], [], [], 0.05)
                if not readable:
                    continue
                data = os.read(fd, 4096)
            except BlockingIOError:
                continue
            except (OSError, ValueError):
                if self._closing.wait(0.05):
                    return
                continue
            pending += data.replace(b"\x00", b"")
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode("ascii", "replace").strip()
                if not line:
                    continue
                try:
                    self._handle(line)
                except Exception as exc:  # a simulator bug must not leave the board mute
                    log.exception("LPM01A simulator: command %r failed", line)
                    self._reply(f"error {line}", f"Error detail: simulator failure: {exc}")

    def _handle(self, line: str) -> None:
        """Answer one command line."""
        words = line.split()
        name = words[0].lower()
        args = [w.lower() for w in words[1:]]
        try:
            if name not in _WITHOUT_HTC and not self.host_control:
                raise _Refused("host control is off: send htc first")
            handler = getattr(self, f"_cmd_{name}", None)
            if handler is None:
                raise _Refused(f"unknown command '{name}'")
            if name in _SELF_ACKING:
                handler(line, args)  # acks by itself, in its place among the data
                return
            value = handler(args)
        except _Refused as exc:
            self._reply(f"error {line}", f"Error detail: {exc}")
            return
        except ProtocolError as exc:
            self._reply(f"error {line}", f"Error detail: {exc.message}")
            return
        # A value goes on the ack line, where the public hosts read it (the codec's docstring).
        self._reply(f"ack {line}" if value is None else f"ack {line} {value}")

    def _require_idle(self) -> None:
        if self.running:
            raise _Refused("acquisition running: send stop first")

    @staticmethod
    def _one_arg(args: list[str], allowed: tuple[str, ...] | None = None) -> str:
        if len(args) != 1:
            raise _Refused("expected one argument")
        if allowed is not None and args[0] not in allowed:
            raise _Refused(f"'{args[0]}' is not one of {'|'.join(allowed)}")
        return args[0]

    def _cmd_htc(self, args: list[str]) -> None:
        self.host_control = True

    def _cmd_hrc(self, args: list[str]) -> None:
        with self._acq_lock:
            self.running = False
        self.host_control = False

    def _cmd_version(self, args: list[str]) -> str:
        return VERSION

    def _cmd_powershield(self, args: list[str]) -> str:
        return BOARD_ID

    def _cmd_status(self, args: list[str]) -> str:
        return "ok"

    def _cmd_help(self, args: list[str]) -> str:
        return "commands: " + " ".join(
            sorted(n[5:] for n in dir(self) if n.startswith("_cmd_"))
        )

    def _cmd_volt(self, args: list[str]) -> str | None:
        if self._one_arg(args) == "get":
            # DDDD-EE, the form Zephyr's host parses (its example: 3292-03).
            return f"{self.volt_mv:04d}-03"
        self._require_idle()
        mv = round(parse_number(args[0]) * 1000)
        if not VOLT_MIN_MV <= mv <= VOLT_MAX_MV:
            raise _Refused(f"voltage out of range {VOLT_MIN_MV}m..{VOLT_MAX_MV}m")
        self.volt_mv = mv
        self.world.set_supply(mv / 1000)
        return None

    def _cmd_freq(self, args: list[str]) -> None:
        self._require_idle()
        hz = parse_number(self._one_arg(args))
        if hz not in FREQ_TOKENS:
            raise _Refused("frequency not allowed: " + " ".join(FREQ_TOKENS.values()))
        self._check_rate(int(hz), self.acqtime_s, self.settings["format"])
        self.freq_hz = int(hz)

    def _cmd_acqtime(self, args: list[str]) -> None:
        self._require_idle()
        seconds = parse_number(self._one_arg(args))
        if math.isinf(seconds):
            seconds = 0.0
        if seconds != 0 and not _MIN_ACQTIME_S <= seconds <= _MAX_ACQTIME_S:
            raise _Refused("acquisition time out of range 0|inf|100u..100")
        self._check_rate(self.freq_hz, seconds, self.settings["format"])
        self.acqtime_s = seconds

    def _cmd_format(self, args: list[str]) -> None:
        self._require_idle()
        fmt = self._one_arg(args, ("ascii_dec", "bin_hexa"))
        self._check_rate(self.freq_hz, self.acqtime_s, fmt)
        self.settings["format"] = fmt

    def _cmd_acqmode(self, args: list[str]) -> None:
        self._set("acqmode", args, ("dyn", "stat"))

    def _cmd_funcmode(self, args: list[str]) -> None:
        self._set("funcmode", args, ("optim", "high"))

    def _cmd_output(self, args: list[str]) -> None:
        self._set("output", args, ("current", "energy"))

    def _cmd_trigsrc(self, args: list[str]) -> None:
        if self._one_arg(args, ("sw", "d7")) == "d7":
            raise _Refused("trigsrc d7 is not simulated")
        self._set("trigsrc", args, ("sw",))

    def _cmd_trigdelay(self, args: list[str]) -> None:
        parse_number(self._one_arg(args))
        self._set("trigdelay", args)

    def _cmd_currthres(self, args: list[str]) -> None:
        parse_number(self._one_arg(args))
        self._set("currthres", args)

    def _cmd_eventsrc(self, args: list[str]) -> None:
        self._require_idle()
        if args != ["d7", "fal"]:
            raise _Refused("only 'eventsrc d7 fal' is simulated")
        self.settings["eventsrc"] = "d7 fal"

    def _cmd_pwr(self, args: list[str]) -> None:
        if not 1 <= len(args) <= 2 or (len(args) == 2 and args[1] not in ("status", "nostatus")):
            raise _Refused("expected pwr on|off|auto [nostatus|status]")
        if args[0] not in ("on", "off", "auto"):
            raise _Refused(f"'{args[0]}' is not one of on|off|auto")
        if args[0] == "auto":
            raise _Refused("pwr auto is not simulated")
        self.world.power(args[0] == "on")

    def _cmd_pwrend(self, args: list[str]) -> None:
        return None

    def _cmd_lcd(self, args: list[str]) -> None:
        return None

    def _cmd_start(self, line: str, args: list[str]) -> None:
        self._require_idle()
        self._check_rate(self.freq_hz, self.acqtime_s, self.settings["format"])
        with self._acq_lock:  # not the world's lock: the ack write below may wait
            t0 = self.world.clock.now_ns()
            self.acquisition_t0_ns = t0
            self._next_k = 0
            self._edge_from_ns = t0
            self._event_number = 0
            self._next_second = 1
            self._last_forget_ns = t0
            # Ack first, then data: the streaming thread cannot run before this lock is free.
            self._reply(f"ack {line}")
            self.running = True

    def _cmd_stop(self, line: str, args: list[str]) -> None:
        with self._acq_lock:
            if not self.running:
                raise _Refused("no acquisition running")
            if self.stop_ack_first:
                self._reply(f"ack {line}")
            self._emit_until(self.world.observable_ns())
            if self.running:  # a finite acquisition may have just ended by itself
                self._finish()
            if not self.stop_ack_first:
                self._reply(f"ack {line}")

    def _set(self, key: str, args: list[str], allowed: tuple[str, ...] | None = None) -> None:
        self._require_idle()
        self.settings[key] = self._one_arg(args, allowed)

    @staticmethod
    def _check_rate(hz: int, acqtime_s: float, fmt: str) -> None:
        """ascii_dec cannot stream fast: <= 5 kHz unlimited, 10 kHz for at most 1 s."""
        if fmt != "ascii_dec" or hz <= ASCII_DEC_MAX_HZ_UNLIMITED:
            return
        if hz <= ASCII_DEC_MAX_HZ_SHORT and 0 < acqtime_s <= 1.0:
            return
        raise _Refused(
            f"ascii_dec is limited to {ASCII_DEC_MAX_HZ_UNLIMITED} Hz for long acquisitions "
            f"and {ASCII_DEC_MAX_HZ_SHORT} Hz for 1 s: use bin_hexa"
        )

    # -- streaming ----------------------------------------------------------------------------
    def _stream_loop(self) -> None:
        while not self._closing.wait(STREAM_PERIOD_S):
            with self._acq_lock:
                if not self.running:
                    continue
                try:
                    self._emit_until(self.world.observable_ns())
                except Exception:  # a simulator bug must not hang the rig: end the acquisition
                    log.exception("LPM01A simulator: streaming failed")
                    self._finish()

    def _finish(self) -> None:
        """End the acquisition (caller holds `_acq_lock`): in bin_hexa the 0xF4 frame first
        (Zephyr's host reads ASCII after it), then the completion line."""
        self.running = False
        if self.settings["format"] == "bin_hexa":
            self._write(encode_acquisition_end_frame())
        self._reply("Acquisition completed")

    def _emit_until(self, now_ns: int) -> None:
        """Write every sample whose period ended by `now_ns` (caller holds `_acq_lock`)."""
        t0 = self.acquisition_t0_ns
        assert t0 is not None
        fs = self.freq_hz
        if self.clock_error:
            # Sample n ends at bound(n + 1): those with bound(n + 1) <= now are due.
            end = int((now_ns - t0) * fs * (1.0 + self.clock_error) // NS)
        else:
            # Samples n with t0 + n*1e9//fs <= now have ended: n <= ((now - t0 + 1)*fs - 1) // 1e9.
            end = ((now_ns - t0 + 1) * fs - 1) // NS
        total = round(self.acqtime_s * fs) if self.acqtime_s > 0 else None
        if total is not None:
            end = min(end, max(total, 1))
        behind = (end - self._next_k) / fs > CATCH_UP_S
        # In bursts of bounded size: a long backlog must not need gigabytes at once.
        with self.world.clock.held() if behind else contextlib.nullcontext():
            while self._next_k < end and not self._closing.is_set():
                self._emit_samples(self._next_k, min(end, self._next_k + _MAX_BURST), now_ns)
        if total is not None and end >= max(total, 1):
            self._finish()

    def _bounds(self, t0: int, idx: np.ndarray) -> np.ndarray:
        """Simulated start times [ns] of samples `idx`: exact integers at the nominal rate, else
        at the board's real rate freq x (1 + clock_error)."""
        if not self.clock_error:
            return t0 + (idx * NS) // self.freq_hz
        period_ns = NS / (self.freq_hz * (1.0 + self.clock_error))
        return t0 + np.floor(idx * period_ns).astype(np.int64)

    def _emit_samples(self, k: int, end: int, now_ns: int) -> None:
        """Write samples k..end-1 with their TimeStamp and event lines."""
        k = self._overrun_in(k, end, now_ns)
        if k >= end:
            return
        t0 = self.acquisition_t0_ns
        assert t0 is not None
        fs = self.freq_hz
        idx = np.arange(k, end + 1, dtype=np.int64)
        bounds = self._bounds(t0, idx)
        energy = self.world.measured_energy(bounds)
        if self.settings["output"] == "energy":
            values = energy
        else:
            with self.world.lock:
                volts = self.world.supply_v
            values = energy / (volts * (np.diff(bounds) / NS))
        binary = self.settings["format"] == "bin_hexa"
        data = encode_bin_hexa(values) if binary else format_samples(values)
        starts = bounds[:-1]

        # What goes between samples: (position = samples before it, bytes), in order.
        inserts: list[tuple[int, bytes]] = []
        if binary:
            inserts += [(0, frame) for frame in self._frames]
        self._frames.clear()
        while self._next_second * fs <= end:
            pos = self._next_second * fs - k
            # The MLPerf Tiny runner's form: "TimeStamp:" then ' ', '>' or '<', 3-digit s/ms.
            inserts.append((pos, encode_timestamp_frame(self._next_second * 1000, 0) if binary
                            else f"TimeStamp:>{self._next_second:03d}s 000ms, buff 00%\r\n"
                            .encode()))
            self._next_second += 1
        last_start = int(starts[-1])
        if self.settings["eventsrc"] == "d7 fal" and not binary:
            # An edge at t goes before the first sample starting at or after t.
            edges = self.world.falling_edges_between(self._edge_from_ns, last_start + 1)
            positions = np.searchsorted(starts, np.asarray(edges, dtype=np.int64), side="left")
            for pos in positions.tolist():
                self._event_number += 1
                if self._lose_next:
                    self._lose_next = False
                    self._lost_events.add(self._event_number)
                if self._event_number in self._lost_events:
                    self.lost_events.append(self._event_number)
                    continue
                inserts.append((pos, f"event {self._event_number} ris\r\n".encode()))
        # Edges up to here are done with, reported or not: `forget_before` may drop them.
        self._edge_from_ns = last_start + 1
        inserts.sort(key=lambda item: item[0])  # stable: TimeStamp before events at one place

        width = len(data) // len(starts)
        parts: list[bytes] = []
        done = 0
        for pos, blob in inserts:
            parts.append(data[done * width : pos * width])
            parts.append(blob)
            done = pos
        parts.append(data[done * width :])
        self._write(b"".join(parts))
        self._next_k = end

        if now_ns - self._last_forget_ns >= _FORGET_EVERY_NS:
            # Keep what the next burst needs: the step in force at its first sample, its edges.
            self.world.forget_before(min(self._edge_from_ns, int(bounds[-1])))
            self._last_forget_ns = now_ns
