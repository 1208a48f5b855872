"""The sim bus: how a DUT running in another process (the host-built C shim) joins the World.

The DUT process holds one end of a socket pair and speaks ASCII lines (simulated ns):

    begin            -> <now>   the DUT starts work now; monitors wait for its declarations
    act <s> <e>                 active power over [s, e)
    pulse <t>                   a falling edge of the timestamp GPIO at t
    wait <t>         -> ok      block until simulated time reaches t (its UART output is due)
    end <t>                     idle from t on; monitors may report up to now again

The DUT keeps its own simulated time from `begin` on, so the timing of an inference loop is
exact however fast or slow the host computes it.
"""

from __future__ import annotations

import logging
import socket
import threading

from virtual_bench.world import World

log = logging.getLogger(__name__)


class SimBusServer:
    """Serves one DUT process's end of the bus on a thread; stops when the socket closes."""

    def __init__(self, world: World, sock: socket.socket, generation: int) -> None:
        self.world = world
        self.sock = sock
        self.generation = generation
        #: Lines the DUT sent that broke the protocol (counted, logged, never fatal).
        self.errors: list[str] = []
        self._begin_ns = 0
        self._thread = threading.Thread(target=self._serve, name="sim-bus", daemon=True)

    def start(self) -> SimBusServer:
        """Start serving."""
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        """Wait for the DUT to hang up (bounded)."""
        self._thread.join(timeout_s)

    def _serve(self) -> None:
        buf = b""
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return
                buf += data
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    reply = self.handle(line.decode("ascii", "replace").strip())
                    if reply is not None:
                        self.sock.sendall(reply.encode() + b"\n")
        except OSError:
            return  # the DUT process died or was powered off
        finally:
            self.world.release()

    def handle(self, line: str) -> str | None:
        """Apply one line to the World; returns the reply line for the verbs that have one.

        `begin` and `wait` are always answered, even when malformed or after a power cut, so
        a DUT process can never block on the bus.
        """
        verb, *args = line.split() or [""]
        world = self.world
        try:
            values = [int(a) for a in args]
        except ValueError:
            values = None
        current = world.generation == self.generation
        if verb == "begin":
            if values != [] or not current:
                self._complain(line, current)
                return str(world.clock.now_ns())
            world.begin_run()  # a compute span: a drifting bench draws its active power
            self._begin_ns = world.hold()
            return str(self._begin_ns)
        if verb == "wait":
            if values is None or len(values) != 1 or not current:
                self._complain(line, current)
                return "ok"
            world.sleep_until(values[0], self.generation)
            return "ok"
        if not current:
            return None  # the power was cut: whatever it declares no longer happens
        if verb == "act" and values is not None and len(values) == 2:
            start, end = values
            if start >= self._begin_ns and end >= start:
                with world.lock:
                    world.add_activity(start, end)
                    world.extend_horizon(end)
                return None
        elif verb == "pulse" and values is not None and len(values) == 1:
            with world.lock:
                world.add_pulse(values[0])
                world.extend_horizon(values[0])
            return None
        elif verb == "end" and values is not None and len(values) == 1:
            world.release()
            return None
        self._complain(line, current)
        return None

    def _complain(self, line: str, current: bool) -> None:
        if current:
            log.warning("sim bus: ignoring %r", line)
            self.errors.append(line)
