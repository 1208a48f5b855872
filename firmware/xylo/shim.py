"""Xylo Audio 2 DUT shim: runs a network specification on XyloSim (or an HDK) and speaks the
rig's DUT protocol (protocols/dut/SPEC.md) on stdin/stdout, answering like the C shim.

    python firmware/xylo/shim.py --spec NET.npz|GRAPH.nir [--hdk] [--power-frequency HZ]

Run it with the rig's Python (it imports the installed `protocols` package); the rig starts it
through `drivers.process.ProcessTransport`. Performance timestamp mode only. The lap counter
under XyloSim is Xylo's own time base (timesteps x dt per inference, accumulated from boot): the
real-time length of the input, not an execution time anyone measured, so ``caps`` lists
``simtime``. On an HDK it adds up samna's measured ``inf_duration`` per evolve instead.
The input format, the extra power lines of ``--hdk`` and the exit codes are in README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import select
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    # Run as a script: make `firmware.xylo` importable (the repository root).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from firmware.xylo.nir_graph import load_network
from firmware.xylo.rockpool_import import XyloUnavailable, find_xylo_audio2_hdk, xylo_audio2
from firmware.xylo.spec import SpecError, XyloSpec
from protocols.dut.codec import (
    CAP_BLOAD,
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
    (none in simulation) and, on hardware, the seconds it took as the board's driver measured
    them (None where time is the simulator's: T x dt)."""

    output: np.ndarray
    power: dict[str, np.ndarray] = field(default_factory=dict)
    duration_s: float | None = None


class HdkTimingError(Rejected):
    """samna's record of an evolve carries no usable ``inf_duration``: the ``infer`` is refused
    (an ``e-`` line), never timed by a guess."""


def hdk_duration(record: dict[str, Any]) -> float:
    """The ``inf_duration`` [s] of one XyloSamna evolve: Rockpool's host-clock time around the
    board's accelerated-time run and its readout, the only execution time an HDK reports."""
    value = record.get("inf_duration")
    if isinstance(value, bool) or not isinstance(value, int | float | np.floating):
        raise HdkTimingError(f"the HDK's evolve record has no inf_duration (got {value!r}): "
                             "the installed Rockpool does not report execution time")
    seconds = float(value)
    if not (math.isfinite(seconds) and seconds > 0):
        raise HdkTimingError(f"the HDK's evolve took {seconds!r} s by its inf_duration")
    return seconds


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

    `xylo` is the evolvable XyloSamna module (`open` builds it through samna); the rest only
    calls ``reset_state()`` and ``xylo(raster, record_power=True)``, so a test can hand in a
    stand-in for the samna edge.
    """

    label = "HDK"
    has_power = True
    simulated_time = False

    def __init__(self, xylo: Any) -> None:
        self._xylo = xylo

    @classmethod
    def open(cls, spec: XyloSpec, power_hz: float) -> HdkBackend:
        """Configure the attached HDK for `spec` (needs samna and a board)."""
        module = xylo_audio2(hdk=True)
        device = find_xylo_audio2_hdk()
        config, valid, message = module.config_from_specification(**spec.specification())
        if not valid:
            raise SpecError(f"samna refused the network configuration: {message}",
                            hint="rebuild the specification for Xylo Audio 2")
        return cls(module.XyloSamna(device, config, dt=spec.dt, power_frequency=power_hz))

    def run(self, raster: np.ndarray) -> Evolved:
        """Output spikes, the power samples (W) of each rail and the measured duration."""
        self._xylo.reset_state()
        output, _, record = self._xylo(raster, record_power=True)
        return Evolved(np.asarray(output),
                       {k: np.asarray(record[k], float) for k in POWER_RAILS},
                       hdk_duration(record))


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
        self._dt, self._hz = spec.dt, power_hz
        names = {short: long for long, short in POWER_RAILS.items()}
        self._idle = {names[k]: v * 1e-6 for k, v in rails["idle_uw"].items()}
        self._active = {names[k]: v * 1e-6 for k, v in rails["active_uw"].items()}

    def run(self, raster: np.ndarray) -> Evolved:
        output = super().run(raster).output
        level = self._active if np.any(raster) else self._idle
        count = max(1, round(raster.shape[0] * self._dt * self._hz))
        return Evolved(output, {rail: np.full(count, watts) for rail, watts in level.items()})


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
        #: rcrc: result lines carry their CRC-32 once the host has asked `caps`.
        self._result_crc = False

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
                    + f",{CAP_RESULT_CRC}")
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
            return [self._lap()]
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
        lines = [f"m-warmup-start-{warmup}"]
        for _ in range(warmup):
            self._advance(self.backend.run(raster), per_ns)
        lines += ["m-warmup-done", f"m-infer-start-{n}", self._lap()]
        samples: dict[str, list[np.ndarray]] = {rail: [] for rail in POWER_RAILS}
        output = np.zeros((0, self.spec.n_output))
        for _ in range(n):
            evolved = self.backend.run(raster)
            self._advance(evolved, per_ns)
            output = evolved.output
            for rail, values in evolved.power.items():
                samples[rail].append(values)
        lines.append(self._lap())
        lines += _power_lines(samples)
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
        steps = max(1, round(ms / 1000 / self.spec.dt))
        power = self.backend.run(np.zeros((steps, self.spec.n_input), dtype=np.int64)).power
        return _power_lines({rail: [values] for rail, values in power.items()})

    def _advance(self, evolved: Evolved, per_ns: int) -> None:
        """Move the lap counter on by one inference: its measured time on hardware, else the
        simulator's T x dt."""
        self._xylo_ns += per_ns if evolved.duration_s is None else round(evolved.duration_s * 1e9)

    def _lap(self) -> str:
        return f"m-lap-us-{(self._xylo_ns // 1000) & LAP_MASK}"


def _power_lines(samples: dict[str, list[np.ndarray]]) -> list[str]:
    """``m-power-samples-<k>`` and the mean of each rail over the timed inferences, in µW."""
    joined = {rail: np.concatenate(v) if v else np.zeros(0) for rail, v in samples.items()}
    count = min(len(v) for v in joined.values())
    if count == 0:
        return []  # simulation: no power lines at all (unavailable, not zero)
    return [f"m-power-samples-{count}"] + [
        f"m-power-{POWER_RAILS[rail]}-uw-{round(float(v.mean()) * 1e6)}"
        for rail, v in joined.items()
    ]


def _results_line(scores: np.ndarray | None) -> str:
    values = () if scores is None else scores
    return "m-results-[" + ",".join(f"{v:.3f}" for v in values) + "]"


def _atoi(text: str) -> int:
    """Like C's atoi: the leading integer, 0 if there is none."""
    m = re.match(r"[+-]?\d+", text)
    return int(m.group(0)) if m else 0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, load the spec, start the backend, serve until stdin closes."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, type=Path,
                        help="network specification .npz, or a NIR graph (.nir, mapped and "
                        "quantised for Xylo Audio 2 on load)")
    parser.add_argument("--hdk", action="store_true",
                        help="run on an attached Xylo Audio 2 HDK (needs SynSense's samna)")
    parser.add_argument("--power-frequency", type=float, default=5.0, metavar="HZ",
                        help="HDK power-rail sampling rate (default 5 Hz, Rockpool's)")
    args = parser.parse_args(argv)
    if not args.power_frequency > 0:
        parser.error("--power-frequency must be positive")
    try:
        spec = load_network(args.spec)
        stand_in = os.environ.get("RIG_XYLO_STAND_IN_RAILS")
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
