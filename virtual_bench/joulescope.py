"""The simulated Joulescope: samples of the shared `World`, served to the rig over a socket.

`WorldSource(world, sample_rate)`: sample k covers simulated [t0 + k/fs, t0 + (k+1)/fs)
(integer ns, floored); current = energy / (supply * dt) from the world's exact power model,
voltage = the world's supply, GPI0 = 0 if the timestamp line is low at the sample's start or
falls inside its period (a 10 µs pulse is never missed at low rates). Nothing past
`world.observable_ns()` is reported.

`serve_source(source, sock)` serves it in the wire format of `protocols.joulescope_bridge`; in
the rig's process `drivers.emon.joulescope_socket` (the stand-in for the vendor library) reads it.
"""

from __future__ import annotations

import json
import logging
import select
import socket
import threading
import time
from typing import Any

import numpy as np

from protocols.errors import ProtocolError
from protocols.joulescope_bridge import (
    CONTROL,
    HELLO,
    MAX_BLOCK,
    FrameReader,
    SampleBlock,
    encode_frame,
    encode_samples,
)
from virtual_bench.world import NS, World

log = logging.getLogger(__name__)

#: Host seconds the server waits for a block or a control frame before looking again.
POLL_S = 0.005
#: Host time a simulated block spans (a real Joulescope hands over blocks every few ms).
BLOCK_WALL_S = 0.02


class WorldSource:
    """Samples of the World's DUT, computed exactly from its power model."""

    def __init__(self, world: World, sample_rate: int, *, max_block: int = MAX_BLOCK) -> None:
        self.world = world
        self.sample_rate = int(sample_rate)
        self.max_block = max_block
        #: Simulated time of sample 0 of the running (or last) stream.
        self.t0_ns: int | None = None
        self._next_k = 0
        self._running = False
        self._last_forget_ns = 0
        self._last_block_at = 0.0

    def set_sample_rate(self, hz: int) -> None:
        """Rate of the next stream."""
        if self._running:
            raise RuntimeError("sample rate change while streaming")
        self.sample_rate = int(hz)

    def set_power(self, on: bool) -> None:
        """Connect or disconnect the DUT (the Joulescope's shunt switch)."""
        self.world.power(on)

    def start(self) -> None:
        """Sample 0 starts now (simulated time)."""
        with self.world.lock:
            self.t0_ns = self.world.clock.now_ns()
        self._next_k = 0
        self._running = True

    def stop(self) -> None:
        """No more samples until `start`."""
        self._running = False

    def close(self) -> None:
        """Nothing to release."""
        self._running = False

    def bounds_ns(self, ks: np.ndarray) -> np.ndarray:
        """Simulated start time of samples `ks` (int64 math that does not overflow)."""
        assert self.t0_ns is not None
        fs = self.sample_rate
        return self.t0_ns + (ks // fs) * NS + ((ks % fs) * NS) // fs

    def read(self, timeout_s: float) -> SampleBlock | None:
        """The samples whose period has fully passed (observably), up to `max_block`."""
        if not self._running or self.t0_ns is None:
            time.sleep(timeout_s)
            return None
        fs = self.sample_rate
        observable = self.world.observable_ns()
        ready = max(0, ((observable - self.t0_ns) * fs) // NS)
        n = min(ready - self._next_k, self.max_block)
        # Deliver in blocks of about BLOCK_WALL_S of host time, as the instrument's USB does:
        # a few samples at a time would drown the rig in per-message overhead.
        now = time.monotonic()
        if 0 < n < self.max_block and now - self._last_block_at < BLOCK_WALL_S:
            time.sleep(min(timeout_s, BLOCK_WALL_S - (now - self._last_block_at)))
            return None
        if n <= 0:
            # Wait about one sample period (host time), never longer than asked.
            period_s = 1.0 / fs / self.world.clock.speed
            time.sleep(min(timeout_s, max(period_s, 0.001)))
            return None
        ks = np.arange(self._next_k, self._next_k + n + 1, dtype=np.int64)
        bounds = self.bounds_ns(ks)
        with self.world.lock:
            supply = self.world.supply_v
            energy = self.world.measured_energy(bounds)
            gpi0 = self.world.gpio_levels(bounds[:-1])
            edges = self.world.falling_edges_between(int(bounds[0]), int(bounds[-1]))
            if bounds[0] - self._last_forget_ns >= NS:
                self.world.forget_before(int(bounds[0]))
                self._last_forget_ns = int(bounds[0])
        if edges:
            # A falling edge inside a sample's period marks that sample (the line was low).
            gpi0[np.searchsorted(bounds, np.asarray(edges, dtype=np.int64), "right") - 1] = 0
        dt_s = np.diff(bounds) / NS
        current = energy / (supply * dt_s) if supply > 0 else np.zeros(n)
        block = SampleBlock(
            self._next_k,
            current.astype(np.float32),
            np.full(n, supply, dtype=np.float32),
            gpi0.astype(np.uint8),
            np.zeros(n, dtype=np.uint8),  # GPI1 is not wired on the virtual bench
        )
        self._next_k += n
        self._last_block_at = time.monotonic()
        return block


# -- the server --------------------------------------------------------------------------------
def serve_source(source: WorldSource, sock: socket.socket,
                 stop: threading.Event | None = None) -> None:
    """Bench side: apply CONTROL frames to `source`, stream its blocks as SAMPLES frames.

    Returns when the rig closes its end, on a protocol error (logged), or when `stop` is set.
    """
    reader = FrameReader()
    streaming = False
    sample_rate = getattr(source, "sample_rate", 0)
    sock.sendall(encode_frame(HELLO, json.dumps({"version": 1,
                                                 "sample_rate": sample_rate}).encode()))
    try:
        while stop is None or not stop.is_set():
            readable, _, _ = select.select([sock], [], [], 0 if streaming else POLL_S)
            if readable:
                data = sock.recv(65536)
                if not data:
                    return  # the rig closed its end
                reader.feed(data)
                while (frame := reader.next_frame()) is not None:
                    kind, payload = frame
                    if kind != CONTROL:
                        raise ProtocolError(f"Joulescope bridge: unexpected frame type {kind}")
                    streaming = _apply_control(source, json.loads(payload), streaming)
            if streaming:
                block = source.read(POLL_S)
                if block is not None and len(block):
                    sock.sendall(encode_samples(block))
    except (ProtocolError, ValueError, OSError) as exc:
        log.warning("Joulescope bridge: serving stopped: %s", exc)
    finally:
        if streaming:
            source.stop()


def _apply_control(source: WorldSource, msg: dict[str, Any], streaming: bool) -> bool:
    op = msg.get("op")
    if op == "rate":
        source.set_sample_rate(int(msg["hz"]))
    elif op == "power":
        source.set_power(bool(msg["on"]))
    elif op == "start":
        source.start()
        return True
    elif op == "stop":
        source.stop()
        return False
    else:
        raise ProtocolError(f"Joulescope bridge: unknown control {msg!r}")
    return streaming
