"""Xylo Audio 2 DUT shim: runs a network specification on XyloSim (or an HDK) and speaks the
rig's DUT protocol (protocols/dut/SPEC.md) on stdin/stdout, answering like the C shim.

    python firmware/xylo/shim.py --spec NET.npz|GRAPH.nir [--hdk] [--power-frequency HZ]

Run it with the rig's Python (it imports the installed `protocols` package); the rig starts it
through `drivers.process.ProcessTransport`. Performance timestamp mode only. The lap counter
under XyloSim is Xylo's own time base (timesteps x dt per inference, accumulated from boot): the
real-time length of the input, not an execution time anyone measured, so ``caps`` lists
``simtime``. On an HDK it adds up the time from the start of Rockpool's read of the board to our
poll that saw the readout of the last time step (`ReadoutPoll`), and says that poll's resolution.
The input format, the extra power lines of ``--hdk`` and the exit codes are in README.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import re
import select
import sys
import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    # Run as a script: make `firmware.xylo` importable (the repository root).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from firmware.xylo.nir_graph import load_network
from firmware.xylo.rockpool_import import (
    XYLO_AUDIO2,
    XyloUnavailable,
    find_xylo_audio2_hdk,
    load_samna,
    xylo_audio2,
)
from firmware.xylo.spec import SpecError, XyloSpec
from protocols.dut.codec import (
    CAP_BLOAD,
    CAP_LAP_CRC,
    CAP_RESULT_CRC,
    CAP_SIMTIME,
    MAX_COMMAND,
    payload_crc,
    result_line_with_crc,
)

PROFILE = "ULPMark for tinyML Firmware V0.0.1"
NAME = "xylo"
#: Input buffer (`db load`, `bload`): a 16-channel raster of 65535 steps fits.
INPUT_CAPACITY = 4 + 16 * 65535
#: Inter-byte timeout of a `bload` payload (SPEC.md).
INTER_BYTE_TIMEOUT_S = 1.0
#: Raster header: u16 T, u16 channels, little-endian.
RASTER_HEADER = 4
#: Xylo takes at most 15 input events per channel and time step.
MAX_EVENTS_PER_BIN = 15
LAP_MASK = 0xFFFFFFFF
DUMP_BYTES_PER_LINE = 16
#: Power rails of Xylo Audio 2 as Rockpool's `evolve(record_power=True)` names them, and the
#: names of the ``m-power-<rail>-uw-<n>`` lines.
POWER_RAILS = {"io_power": "io", "snn_core_power": "snn_core",
               "afe_core_power": "afe_core", "afe_ldo_power": "afe_ldo"}
#: The samna measurement channel of each rail, as Rockpool 3.1.0's XyloSamna.evolve splits the
#: power events (rockpool/devices/xylo/syns61201/xylo_samna.py, `samna.xyloA2TestBoard.
#: MeasurementChannels`); used for idle power, which is read without an evolve.
RAIL_CHANNELS = {"io_power": "Io", "snn_core_power": "Logic",
                 "afe_core_power": "LogicAfe", "afe_ldo_power": "IoAfe"}
#: Rail sampling rate [Hz]: SynSense's power tutorial builds XyloSamna with power_frequency=20.
#: (synsense/rockpool docs/devices/quick-xylo/xylo-audio-power.ipynb, commit 925e2e9); Rockpool's
#: own default of 5 Hz leaves a 0.1-0.2 s evolve with no sample at all.
DEFAULT_POWER_HZ = 20.0
#: Interval of our poll of the board's read buffer for the readout of an evolve's last time
#: step. Rockpool 3.1.0's blocking_read sleeps 0.1 s before every poll (xa2_devkit_utils.py), so
#: its inf_duration is never below 0.1 s and moves in 0.1 s steps.
POLL_INTERVAL_S = 1e-3
#: Exit codes: bad arguments or spec, no HDK/samna.
EXIT_USAGE, EXIT_UNAVAILABLE = 2, 3


class Rejected(Exception):
    """A command refused with an ``e-[...]`` line (the text)."""


def decode_raster(data: bytes, n_input: int) -> np.ndarray:
    """A ``(T, channels)`` int array from the input bytes; `Rejected` if it is malformed."""
    if len(data) < RASTER_HEADER:
        raise Rejected(f"Input is {len(data)} bytes, a raster needs a {RASTER_HEADER}-byte "
                       "header")
    steps, channels = (int(v) for v in np.frombuffer(data, "<u2", count=2))
    if channels != n_input:
        raise Rejected(f"Raster has {channels} channels, the network needs {n_input}")
    if steps == 0:
        raise Rejected("Raster has no time steps")
    need = RASTER_HEADER + steps * channels
    if len(data) != need:
        raise Rejected(f"Input is {len(data)} bytes, a {steps} x {channels} raster needs {need}")
    raster = np.frombuffer(data, np.uint8, offset=RASTER_HEADER).reshape(steps, channels)
    if raster.max() > MAX_EVENTS_PER_BIN:
        raise Rejected(f"Raster has {raster.max()} events in a bin, Xylo takes at most "
                       f"{MAX_EVENTS_PER_BIN}")
    return raster.astype(np.int64)


def encode_raster(raster: np.ndarray) -> bytes:
    """The input bytes of a ``(T, channels)`` raster of event counts (0..15)."""
    raster = np.asarray(raster)
    steps, channels = raster.shape
    return (np.array([steps, channels], "<u2").tobytes()
            + np.ascontiguousarray(raster, dtype=np.uint8).tobytes())


def class_scores(output: np.ndarray) -> np.ndarray:
    """Output spikes ``(T, n_out)`` -> spike count per class / all output spikes (0 if none)."""
    counts = np.asarray(output, dtype=np.float64).sum(axis=0)
    total = counts.sum()
    return counts / total if total > 0 else np.zeros_like(counts)


@dataclass(frozen=True)
class Evolved:
    """One inference on a backend: output spikes ``(T, n_out)``, power samples (W) per rail
    (none in simulation) and, on hardware, the seconds it took as the host saw the board finish
    and the resolution of that figure (None where time is the simulator's: T x dt)."""

    output: np.ndarray
    power: dict[str, np.ndarray] = field(default_factory=dict)
    duration_s: float | None = None
    resolution_s: float | None = None


class HdkTimingError(Rejected):
    """An evolve on the HDK could not be timed (no readout seen, or a time not above the poll's
    resolution): the ``infer`` is refused with an ``e-`` line, never timed by a guess."""


class PowerUnavailable(Rejected):
    """A measurement window collected no power sample on some rail: refused by name, so that
    power never reads as silently unavailable."""


@dataclass(frozen=True)
class BoardTime:
    """When one evolve's last readout was seen: `seconds` from the start of the read to the end
    of the poll that saw it; it arrived within the last `resolution_s` of that."""

    seconds: float
    resolution_s: float


class ReadoutPoll:
    """Our stand-in for Rockpool's ``xa2_devkit_utils.blocking_read`` while the shim evolves.

    Same contract as Rockpool 3.1.0's (``(events, is_timeout)``; wait for an event whose
    ``timestamp`` reaches `target_timestamp`, or for `count` events, or for any event; give up
    after `timeout` s; one last read at the end), but it polls every `interval_s` instead of
    sleeping 0.1 s first, and records in `last` when the readout was seen and to within what.
    XyloSamna.evolve starts its clock right after writing the input and calls this at once, so
    `last.seconds` is Rockpool's ``inf_duration`` without the polling floor. It is host time:
    USB transfer and samna's event pipeline are in it (their share is unconfirmed without
    hardware).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep,
                 interval_s: float = POLL_INTERVAL_S) -> None:
        self._clock, self._sleep, self._interval = clock, sleep, interval_s
        self.last: BoardTime | None = None

    def __call__(self, read_buffer: Any, target_timestamp: int | None = None,
                 count: int | None = None, timeout: float | None = None
                 ) -> tuple[list[Any], bool]:
        events: list[Any] = []
        start = previous = self._clock()
        while True:
            before = self._clock()
            batch = list(read_buffer.get_events())
            after = self._clock()
            events += batch
            if _read_done(batch, events, target_timestamp, count):
                self.last = BoardTime(after - start, after - previous)
                events += read_buffer.get_events()
                return events, False
            if timeout and after - start > timeout:
                return events + list(read_buffer.get_events()), True
            previous = before
            self._sleep(self._interval)

    @contextmanager
    def installed(self, devkit: Any) -> Iterator[ReadoutPoll]:
        """This poll as `devkit.blocking_read` (XyloSamna.evolve looks it up there on each
        call) for the body; Rockpool's own is put back afterwards."""
        # `devkit: Any`, not ModuleType: mypy lets a module's attributes be read, not assigned.
        original = devkit.blocking_read
        self.last = None
        devkit.blocking_read = self
        try:
            yield self
        finally:
            devkit.blocking_read = original


def _read_done(batch: list[Any], events: list[Any], target: int | None,
               count: int | None) -> bool:
    if target is not None:
        stamps = [e.timestamp for e in batch if getattr(e, "timestamp", None) is not None]
        return bool(stamps) and max(stamps) >= target
    if count:
        return len(events) >= count
    return bool(events)


class SimBackend:
    """XyloSim, reset before every inference so that each one sees the same network state."""

    label = "XyloSim"
    has_power = False
    #: The lap counter is the simulator's time base (T x dt), not a measured time.
    simulated_time = True

    def __init__(self, spec: XyloSpec) -> None:
        self._sim = xylo_audio2().XyloSim.from_specification(**spec.specification())

    def run(self, raster: np.ndarray) -> Evolved:
        """Output spikes ``(T, n_out)``; no power and no measured time in simulation."""
        self._sim.reset_state()
        output, _, _ = self._sim(raster)
        return Evolved(np.asarray(output))


class HdkBackend:
    """XyloSamna on an attached Xylo Audio 2 HDK, its power rails sampled at `power_hz`.

    `xylo` is Rockpool's XyloSamna module, `devkit` the Rockpool module whose ``blocking_read``
    its evolve calls (``syns61201.xa2_devkit_utils``) and `samna` the samna library; `open`
    builds all three. `clock` and `sleep` time the board (tests hand in a simulated clock).
    """

    label = "HDK"
    has_power = True
    simulated_time = False

    def __init__(self, xylo: Any, devkit: types.ModuleType, samna: Any, power_hz: float, *,
                 clock: Callable[[], float] = time.perf_counter,
                 sleep: Callable[[float], None] = time.sleep,
                 poll_s: float = POLL_INTERVAL_S) -> None:
        for owner, name in ((devkit, "blocking_read"), (xylo, "_power_buf")):
            if not hasattr(owner, name):
                raise XyloUnavailable(
                    f"the installed Rockpool has no {name} where 3.1.0 has it: the shim "
                    "cannot time the board or read idle power through it",
                    hint="install rockpool 3.1.0 (the rig's xylo extra)")
        self._xylo, self._devkit, self._samna = xylo, devkit, samna
        self.power_hz = power_hz
        self._sleep = sleep
        self._poll = ReadoutPoll(clock, sleep, poll_s)

    @classmethod
    def open(cls, spec: XyloSpec, power_hz: float, **timing: Any) -> HdkBackend:
        """Configure the attached HDK for `spec` (needs samna and a board); `timing` goes to
        the constructor (``clock``, ``sleep``, ``poll_s``)."""
        module = xylo_audio2(hdk=True)
        samna = load_samna()
        device = find_xylo_audio2_hdk()
        arguments = spec.specification()
        # XyloSim takes the hidden biases as `bias`, config_from_specification as `bias_hidden`
        # (rockpool 3.1.0 syns61201/xylo_sim.py and xylo_samna.py): without this the board
        # would run without them.
        arguments["bias_hidden"] = arguments["bias"]
        config, valid, message = module.config_from_specification(**arguments)
        if not valid:
            raise SpecError(f"samna refused the network configuration: {message}",
                            hint="rebuild the specification for Xylo Audio 2")
        try:
            xylo = module.XyloSamna(device, config, dt=spec.dt, power_frequency=power_hz)
        except (TimeoutError, ValueError) as exc:  # XyloSamna's version check, samna's replies
            raise XyloUnavailable(
                f"the Xylo Audio 2 HDK did not come up under Rockpool's XyloSamna ({exc})",
                hint="unplug and replug the HDK, check that samna sees it, and retry") from exc
        return cls(xylo, importlib.import_module(f"{XYLO_AUDIO2}.xa2_devkit_utils"), samna,
                   power_hz, **timing)

    def run(self, raster: np.ndarray) -> Evolved:
        """Output spikes, the power samples (W) of each rail and the board's time."""
        self._xylo.reset_state()
        try:
            with self._poll.installed(self._devkit):
                output, _, record = self._xylo(raster, record_power=True)
        except TimeoutError as exc:  # XyloSamna.evolve: the board did not reach the last step
            raise HdkTimingError(f"the HDK did not finish the inference: {exc}") from exc
        seen = self._poll.last
        if seen is None:
            raise HdkTimingError("the HDK's evolve returned without our poll seeing the "
                                 "readout of its last time step: it cannot be timed")
        return Evolved(np.asarray(output),
                       {k: np.asarray(record[k], float) for k in POWER_RAILS},
                       seen.seconds, seen.resolution_s)

    def idle(self, seconds: float) -> dict[str, np.ndarray]:
        """The rails over `seconds` with the network configured and nothing evolving, read as
        SynSense's tutorial reads idle power (xylo-audio-power.ipynb, "Measure idle power (no
        evolution)"): empty XyloSamna's power buffer, wait, take what arrived, split by
        channel."""
        buffer = self._xylo._power_buf
        buffer.get_events()
        self._sleep(seconds)
        events = buffer.get_events()
        channels = np.fromiter((int(e.channel) for e in events), int, len(events))
        values = np.fromiter((float(e.value) for e in events), float, len(events))
        names = self._samna.xyloA2TestBoard.MeasurementChannels
        return {rail: values[channels == int(getattr(names, RAIL_CHANNELS[rail]))]
                for rail in POWER_RAILS}


class StandInRails(SimBackend):
    """XyloSim plus stand-in power rails: the edge of hardware we do not have, for tests only.

    Set by the environment variable RIG_XYLO_STAND_IN_RAILS = JSON {"idle_uw": {rail: µW},
    "active_uw": {rail: µW}}: each rail reads its idle value while the input is silent and its
    active value otherwise, sampled at `power_hz`. The name says SIMULATED so nothing it
    measures can pass for an HDK's.
    """

    label = "XyloSim + stand-in rails, SIMULATED"
    has_power = True

    def __init__(self, spec: XyloSpec, power_hz: float, rails: dict[str, dict[str, float]]):
        super().__init__(spec)
        self._dt, self.power_hz = spec.dt, power_hz
        names = {short: long for long, short in POWER_RAILS.items()}
        self._idle = {names[k]: v * 1e-6 for k, v in rails["idle_uw"].items()}
        self._active = {names[k]: v * 1e-6 for k, v in rails["active_uw"].items()}

    def run(self, raster: np.ndarray) -> Evolved:
        output = super().run(raster).output
        level = self._active if np.any(raster) else self._idle
        count = round(raster.shape[0] * self._dt * self.power_hz)
        return Evolved(output, {rail: np.full(count, watts) for rail, watts in level.items()})

    def idle(self, seconds: float) -> dict[str, np.ndarray]:
        """The idle levels, one sample per ``1/power_hz`` of `seconds` (none when shorter)."""
        count = round(seconds * self.power_hz)
        return {rail: np.full(count, watts) for rail, watts in self._idle.items()}


class Port:
    """Commands from stdin, reply lines to the original stdout.

    fd 1 is pointed at stderr so that anything Rockpool or samna prints can never corrupt the
    protocol stream; replies go to a private duplicate of the original stdout.
    """

    def __init__(self) -> None:
        self._out = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._buf = bytearray()
        self.eof = False

    def send(self, *lines: str) -> None:
        """Write lines, each ending CR LF."""
        data = "".join(line + "\r\n" for line in lines).encode("ascii", "replace")
        while data:
            data = data[os.write(self._out, data):]

    def _fill(self, timeout_s: float | None) -> bool:
        ready, _, _ = select.select([0], [], [], timeout_s)
        if not ready:
            return False
        chunk = os.read(0, 65536)
        if not chunk:
            self.eof = True
            return False
        self._buf += chunk
        return True

    def command(self) -> str | None:
        """The next ``%``-terminated command, its first 80 characters; None at end of input."""
        while b"%" not in self._buf:
            if not self._fill(None) and self.eof:
                return None
        end = self._buf.index(b"%")
        text = bytes(self._buf[: min(end, MAX_COMMAND)]).decode("ascii", "replace")
        del self._buf[: end + 1]
        return text.strip()

    def payload(self, n: int) -> bytes:
        """Up to `n` raw bytes; fewer when the inter-byte timeout expires first."""
        while len(self._buf) < n and self._fill(INTER_BYTE_TIMEOUT_S):
            pass
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data


class XyloShim:
    """The command interpreter: input buffer, Xylo time base, last results."""

    def __init__(self, spec: XyloSpec, backend: Any, port: Port) -> None:
        self.spec = spec
        self.backend = backend
        self.port = port
        self._buffer = bytearray(INPUT_CAPACITY)
        self._expected = 0
        self._loaded = 0
        #: The lap counter since boot in ns: advanced per inference by timesteps x dt (XyloSim)
        #: or by the HDK's measured inf_duration.
        self._xylo_ns = 0
        self._results: np.ndarray | None = None
        #: rcrc: result lines carry their CRC-32 once the host has asked `caps` (lapcrc: and
        #: lap lines).
        self._result_crc = False
        #: The lap counter at the last infer's two timestamps (lapcrc's `laps`), if any.
        self._laps: tuple[int, int] | None = None

    def serve(self) -> int:
        """Boot banner, then one reply per command until stdin ends; the exit code."""
        self.port.send("m-timestamp-mode-performance", "m-init-done", "m-ready")
        while (text := self.port.command()) is not None:
            try:
                lines = self.execute(text)
            except Rejected as refusal:
                lines = [f"e-[{refusal}]"]
            self.port.send(*lines, "m-ready")
        return 0

    def execute(self, text: str) -> list[str]:
        """The reply lines of one command (before ``m-ready``)."""
        words = text.split()
        head = words[0] if words else ""
        if head == "name":
            return [f"m-name-{NAME}-[SynSense Xylo Audio 2 ({self.backend.label})]"]
        if head == "profile":
            return [f"m-profile-[{PROFILE}]", f"m-model-[{self.spec.model_id}]"]
        if head == "caps":
            caps = (CAP_BLOAD + (",power" if self.backend.has_power else "")
                    + (f",{CAP_SIMTIME}" if self.backend.simulated_time else "")
                    + f",{CAP_RESULT_CRC},{CAP_LAP_CRC}")
            self._result_crc = True
            return ["m-timestamp-mode-performance", f"m-caps-[{caps}]"]
        if head == "bload":
            return self._bload(words[1:])
        if head == "db" and len(words) >= 2:
            return self._db(words[1:])
        if head == "infer":
            return self._infer(words[1:])
        if head == "results":
            return [self._results_line()]
        if head == "timestamp":
            return [self._lap_line(self._lap_us())]
        if head == "laps":  # lapcrc: the last infer's two lap lines again
            if self._laps is None:
                raise Rejected("No inference yet")
            return [self._lap_line(us) for us in self._laps]
        if head == "idle":
            return self._idle(words[1:])
        return [f"e-[Unknown command: {text}]"]

    # -- downloads ----------------------------------------------------------------------------
    def _bload(self, args: list[str]) -> list[str]:
        ok = (len(args) == 2 and args[0].isdigit() and not args[0].startswith("0")
              and len(args[1]) == 8 and all(c in "0123456789abcdef" for c in args[1]))
        if not ok:
            raise Rejected("bload bad arguments")
        n, crc = int(args[0]), int(args[1], 16)
        if n > INPUT_CAPACITY:
            raise Rejected(f"bload too large: {n} > {INPUT_CAPACITY}")
        self._expected, self._loaded = n, 0
        self.port.send(f"m-bload-ready-{n}")
        data = self.port.payload(n)
        if len(data) < n:
            raise Rejected(f"bload timeout: got {len(data)} of {n} bytes")
        got = payload_crc(data)
        if got != crc:
            raise Rejected(f"bload crc mismatch: expected {crc:08x} got {got:08x}")
        self._buffer[:n] = data
        self._loaded = n
        return [f"m-bload-done-{got:08x}"]

    def _db(self, args: list[str]) -> list[str]:
        if args[0] == "load":
            arg = args[1] if len(args) > 1 else ""
            n = int(arg) if arg.isdigit() else 0
            if n <= 0:
                raise Rejected(f"Invalid byte count '{arg}'")
            if n > INPUT_CAPACITY:
                raise Rejected(f"Cannot load {n} bytes: the buffer holds {INPUT_CAPACITY}")
            self._expected, self._loaded = n, 0
            return [f"m-[Expecting {n} bytes]"]
        if args[0] == "print":
            data = bytes(self._buffer[: self._loaded])
            step = DUMP_BYTES_PER_LINE
            rows = [data[i : i + step] for i in range(0, len(data), step)] or [b""]
            return ["m-buffer-" + row.hex("-") for row in rows]
        digits = args[0]
        if len(digits) % 2:
            raise Rejected("Insufficent number of hex digits")  # the firmware's spelling
        for i in range(0, len(digits), 2):
            pair = digits[i : i + 2]
            if not all(c in "0123456789abcdefABCDEF" for c in pair):
                raise Rejected(f"Invalid hex digit '{pair}'")
        data = bytes.fromhex(digits)
        if self._loaded + len(data) > self._expected:
            raise Rejected(f"Buffer overflow: more than the {self._expected} bytes announced")
        self._buffer[self._loaded : self._loaded + len(data)] = data
        self._loaded += len(data)
        return ["m-load-done"] if self._loaded == self._expected else []

    # -- inference ----------------------------------------------------------------------------
    def _infer(self, args: list[str]) -> list[str]:
        n = _atoi(args[0]) if args else 1
        warmup = _atoi(args[1]) if len(args) > 1 else 10
        if n <= 0:
            raise Rejected("Inference iterations must be >0")
        if warmup < 0:
            raise Rejected("Inference warmup must be >=0")
        raster = decode_raster(bytes(self._buffer[: self._loaded]), self.spec.n_input)
        # Xylo's time base: one inference is T steps of dt (integer ns, so laps add up exactly).
        per_ns = round(raster.shape[0] * self.spec.dt * 1e9)
        self._laps = None
        lines = [f"m-warmup-start-{warmup}"]
        for _ in range(warmup):
            self._advance(self.backend.run(raster), per_ns)
        start = self._lap_us()
        lines += ["m-warmup-done", f"m-infer-start-{n}", self._lap_line(start)]
        samples: dict[str, list[np.ndarray]] = {rail: [] for rail in POWER_RAILS}
        output = np.zeros((0, self.spec.n_output))
        durations, resolutions = np.zeros(n), np.zeros(n)
        for i in range(n):
            evolved = self.backend.run(raster)
            self._advance(evolved, per_ns)
            output = evolved.output
            durations[i] = per_ns / 1e9 if evolved.duration_s is None else evolved.duration_s
            resolutions[i] = evolved.resolution_s or 0.0
            for rail, values in evolved.power.items():
                samples[rail].append(values)
        self._laps = (start, self._lap_us())
        lines.append(self._lap_line(self._laps[1]))
        if not self.backend.simulated_time:
            lines.append(_resolution_line(durations, resolutions))
        if self.backend.has_power:
            lines += self._power_lines(
                samples, f"{n} timed inference(s), {durations.sum():.3f} s")
        self._results = class_scores(output)
        lines += ["m-infer-done", self._results_line()]
        return lines

    def _results_line(self) -> str:
        line = _results_line(self._results)
        return result_line_with_crc(line) if self._result_crc else line

    def _idle(self, args: list[str]) -> list[str]:
        """``idle <ms>``: the rails while the configured network gets no input for <ms>."""
        ms = _atoi(args[0]) if args else 0
        if ms <= 0:
            raise Rejected("idle needs a duration in ms > 0")
        if not self.backend.has_power:
            raise Rejected(f"idle power needs an HDK ({self.backend.label} has no power rails)")
        power = self.backend.idle(ms / 1000)  # no evolve: the tutorial's idle
        return self._power_lines({rail: [values] for rail, values in power.items()},
                                 f"idle span of {ms} ms")

    def _power_lines(self, samples: dict[str, list[np.ndarray]], window: str) -> list[str]:
        """``m-power-samples-<k>`` and the mean of each rail over `window`, in µW;
        `PowerUnavailable` naming the window when a rail collected no sample in it."""
        joined = {rail: np.concatenate(v) if v else np.zeros(0) for rail, v in samples.items()}
        empty = [POWER_RAILS[rail] for rail, v in joined.items() if v.size == 0]
        if empty:
            raise PowerUnavailable(
                f"no power sample on rail(s) {', '.join(empty)} over the {window} at "
                f"{self.backend.power_hz:g} Hz: power not measured (use longer windows or a "
                "higher --power-frequency)")
        count = min(v.size for v in joined.values())
        return [f"m-power-samples-{count}"] + [
            f"m-power-{POWER_RAILS[rail]}-uw-{round(float(v.mean()) * 1e6)}"
            for rail, v in joined.items()
        ]

    def _advance(self, evolved: Evolved, per_ns: int) -> None:
        """Move the lap counter on by one inference: its measured time on hardware, else the
        simulator's T x dt."""
        self._xylo_ns += per_ns if evolved.duration_s is None else round(evolved.duration_s * 1e9)

    def _lap_us(self) -> int:
        return (self._xylo_ns // 1000) & LAP_MASK

    def _lap_line(self, us: int) -> str:
        line = f"m-lap-us-{us}"
        return result_line_with_crc(line) if self._result_crc else line


def _resolution_line(durations: np.ndarray, resolutions: np.ndarray) -> str:
    """``m-lap-resolution-us-<n>``: each timed inference's time is known to within the
    largest poll bracket `n` µs; `HdkTimingError` when an inference took no longer than that
    (the board answered before we could tell its time from zero)."""
    worst = float(resolutions.max())
    if float(durations.min()) <= worst:
        raise HdkTimingError(
            f"an inference on the HDK took {durations.min() * 1e6:.0f} us, not above the "
            f"timing resolution of {worst * 1e6:.0f} us (our poll of the board's readout): "
            "no lap time finer than that is reported")
    return f"m-lap-resolution-us-{math.ceil(round(worst * 1e9) / 1000)}"  # whole ns, then up


def _results_line(scores: np.ndarray | None) -> str:
    values = () if scores is None else scores
    return "m-results-[" + ",".join(f"{v:.3f}" for v in values) + "]"


def _atoi(text: str) -> int:
    """Like C's atoi: the leading integer, 0 if there is none."""
    m = re.match(r"[+-]?\d+", text)
    return int(m.group(0)) if m else 0


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """fd 1 and ``sys.stdout`` on stderr for the body, both put back afterwards: the backend
    opens before `Port` takes fd 1 over, and Rockpool's ``find_xylo_hdks`` prints which board it
    found (samna may write to fd 1 itself), which would reach the host ahead of the banner."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def build_parser() -> argparse.ArgumentParser:
    """The shim's command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path,
                        help="network specification .npz, or a NIR graph (.nir, mapped and "
                        "quantised for Xylo Audio 2 on load)")
    parser.add_argument("--hdk", action="store_true",
                        help="run on an attached Xylo Audio 2 HDK (needs SynSense's samna)")
    parser.add_argument("--power-frequency", type=float, default=DEFAULT_POWER_HZ, metavar="HZ",
                        help=f"HDK power-rail sampling rate (default {DEFAULT_POWER_HZ:g} Hz, as "
                        "SynSense's power-measurement tutorial)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, load the spec, start the backend, serve until stdin closes."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.power_frequency > 0:
        parser.error("--power-frequency must be positive")
    try:
        with stdout_to_stderr():  # until Port has fd 1: what the imports and the board print
            spec = load_network(args.spec)
            stand_in = os.environ.get("RIG_XYLO_STAND_IN_RAILS")
            backend: SimBackend | HdkBackend  # StandInRails is a SimBackend
            if args.hdk and stand_in:
                backend = StandInRails(spec, args.power_frequency, json.loads(stand_in))
            else:
                backend = (HdkBackend.open(spec, args.power_frequency) if args.hdk
                           else SimBackend(spec))
    except (SpecError, XyloUnavailable) as exc:
        hint = f"\nhint: {exc.hint}" if exc.hint else ""
        print(f"xylo shim: {exc.message}{hint}", file=sys.stderr)
        return EXIT_UNAVAILABLE if isinstance(exc, XyloUnavailable) else EXIT_USAGE
    return XyloShim(spec, backend, Port()).serve()


if __name__ == "__main__":
    sys.exit(main())
