"""A noisy DUT->host line for the virtual bench: a relay between the DUT's pty and a new pty
that the rig opens instead, corrupting result lines at a known, seeded rate.

Host->DUT bytes (commands, binary downloads) pass untouched. DUT->host bytes pass line by line;
in each result line (``m-results-...``, the part before its line ending) every byte is, with
probability `rate`, hit by one flipped bit, as noise on a UART does. Other lines pass intact:
this relay tests what the rig accepts as a result. The relay records the true scores of every
inference (the result line that follows ``m-infer-done``, before any corruption) so a test can
compare what the rig accepted.

`NoisyLine` flips bits in every DUT->host byte alike (any line, its ``\r\n`` included), as a
noisy UART does: what the rig must survive, not only what it must refuse. It records the true
lap lines of every ``infer`` too, so a test can compare the times the rig accepted.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import threading

import numpy as np

from virtual_bench.pty import Pty

_SCORES = re.compile(rb"m-results-\[([^\]]*)\]")


class NoisyResultLine:
    """Relays between the DUT's pty at `dut_path` and its own pty (`path`, for the rig)."""

    def __init__(self, dut_path: str, *, rate: float, seed: int) -> None:
        self.rate = rate
        self._rng = np.random.default_rng(seed)
        self._dut = os.open(dut_path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        self._pty = Pty()
        self.path = self._pty.path
        #: The true scores of each inference, in order (the line after ``m-infer-done``).
        self.truth: list[list[float]] = []
        #: Per inference: whether its result line (the infer reply's) was corrupted.
        self.hit: list[bool] = []
        #: Result lines seen and corrupted (infer replies and ``results%`` re-asks).
        self.result_lines = 0
        self.corrupted_lines = 0
        self.flipped_bytes = 0
        self.result_bytes = 0
        self._line = bytearray()
        self._after_infer_done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="noisy-line", daemon=True)

    def __enter__(self) -> NoisyResultLine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)
        with contextlib.suppress(OSError):
            os.close(self._dut)
        self._pty.close()

    def _run(self) -> None:
        rig = self._pty.master
        while not self._stop.is_set():
            ready = select.select([self._dut, rig], [], [], 0.05)[0]
            if rig in ready:
                with contextlib.suppress(BlockingIOError):
                    data = os.read(rig, 65536)
                    if data:
                        self._from_rig(data)
            if self._dut in ready:
                try:
                    data = os.read(self._dut, 65536)
                except BlockingIOError:
                    continue
                except OSError:  # the DUT side went away (power cut): wait for it to return
                    self._stop.wait(0.01)
                    continue
                self._from_dut(data)

    def _from_rig(self, data: bytes) -> None:
        self._write(self._dut, data)

    def _from_dut(self, data: bytes) -> None:
        out = bytearray()
        for piece in re.split(rb"(\n)", data):
            if piece != b"\n":
                self._line += piece
                continue
            line = bytes(self._line)
            self._line.clear()
            out += self._pass_line(line) + b"\n"
        self._write(self._pty.master, bytes(out))

    def _pass_line(self, line: bytes) -> bytes:
        body = line.rstrip(b"\r")
        ending = line[len(body):]
        if body.startswith(b"m-infer-done"):
            self._after_infer_done = True
            return line
        if not body.startswith(b"m-results-"):
            return line
        self.result_lines += 1
        self.result_bytes += len(body)
        raw = np.frombuffer(body, dtype=np.uint8).copy()
        hit = self._rng.random(raw.size) < self.rate
        bits = self._rng.integers(0, 8, raw.size).astype(np.uint8)
        raw[hit] ^= (np.uint8(1) << bits[hit])
        self.flipped_bytes += int(hit.sum())
        self.corrupted_lines += bool(hit.any())
        if self._after_infer_done:
            self._after_infer_done = False
            m = _SCORES.match(body)
            self.truth.append([float(v) for v in m.group(1).split(b",")] if m else [])
            self.hit.append(bool(hit.any()))
        return raw.tobytes() + ending

    def _write(self, fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view and not self._stop.is_set():
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                select.select([], [fd], [], 0.05)
            except OSError:
                return


_LAP = re.compile(rb"m-lap-us-(\d+)")
_BLOAD = re.compile(rb"bload \d+ ([0-9a-f]{8})%")


class NoisyLine(NoisyResultLine):
    """Flips one bit in each DUT->host byte with probability `rate`, whatever the line.

    The hits are drawn per byte from their own seeded streams, so they fall on the same byte
    offsets however the bytes are read in pieces. What the DUT truly sent is recorded per
    input it held (the CRC-32 of the last ``bload``): `true_scores[crc]` the score vectors of
    its inferences' replies, `true_laps[crc]` their ``m-lap-us`` pairs; `flipped_bytes` and
    `dut_bytes` count what was hit.
    """

    def __init__(self, dut_path: str, *, rate: float, seed: int) -> None:
        super().__init__(dut_path, rate=rate, seed=seed)
        self._hits = np.random.default_rng([seed, 1])
        self._bits = np.random.default_rng([seed, 2])
        self.dut_bytes = 0
        self.true_scores: dict[int, set[tuple[float, ...]]] = {}
        self.true_laps: dict[int, list[tuple[int, int]]] = {}
        self._input: int | None = None
        self._laps: list[int] = []
        self._command = bytearray()

    def _from_rig(self, data: bytes) -> None:
        self._command += data
        for m in _BLOAD.finditer(self._command):
            self._input = int(m.group(1), 16)
        del self._command[: max(0, len(self._command) - 64)]
        super()._from_rig(data)

    def _from_dut(self, data: bytes) -> None:
        for piece in re.split(rb"(\n)", data):  # the truth, from the bytes as sent
            if piece != b"\n":
                self._line += piece
                continue
            body = bytes(self._line).rstrip(b"\r")
            self._line.clear()
            lap = _LAP.match(body)
            if body.startswith(b"m-warmup-start"):
                self._laps = []
            elif lap is not None:
                self._laps.append(int(lap.group(1)))
            elif body.startswith(b"m-infer-done") and self._input is not None:
                if len(self._laps) == 2:
                    self.true_laps.setdefault(self._input, []).append(
                        (self._laps[0], self._laps[1]))
                self._after_infer_done = True
            elif body.startswith(b"m-results-") and self._after_infer_done:
                self._after_infer_done = False
                m = _SCORES.match(body)
                if m and self._input is not None:
                    scores = tuple(float(v) for v in m.group(1).split(b","))
                    self.true_scores.setdefault(self._input, set()).add(scores)
        raw = np.frombuffer(data, dtype=np.uint8).copy()
        hit = self._hits.random(raw.size) < self.rate
        bits = self._bits.integers(0, 8, raw.size).astype(np.uint8)
        raw[hit] ^= (np.uint8(1) << bits[hit])
        self.dut_bytes += raw.size
        self.flipped_bytes += int(hit.sum())
        self._write(self._pty.master, raw.tobytes())
