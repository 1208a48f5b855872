"""The virtual bench: builds the World, the simulated DUT and the simulated energy monitor from a
bench file's description, and serves them on ptys and sockets, in this process or as a process
of its own (`python -m virtual_bench BENCH.toml`) that prints its ports.
"""

from __future__ import annotations

import json
import math
import os
import select
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from firmware.dut.asc_model import LinearAscModel
from virtual_bench.description import BenchDescription, load_description
from virtual_bench.dut import SimDut
from virtual_bench.errors import EXIT_CODE, BenchFileError, SetupError, VirtualBenchError
from virtual_bench.host_dut import HostShimDut, find_host_shim
from virtual_bench.io_manager import SimIoManager
from virtual_bench.joulescope import WorldSource, serve_source
from virtual_bench.keysight import Sim34465A, SimN6705
from virtual_bench.lpm01a import SimLpm01a
from virtual_bench.otii import SimOtii
from virtual_bench.ppk2 import SimPpk2
from virtual_bench.simavr_uno import SimavrUno, simavr_uno_binaries
from virtual_bench.world import Noise, PowerParams, World


class VirtualBench:
    """A simulated DUT and energy monitor (and IO manager), sharing one World, each on its own
    pty or socket."""

    def __init__(self, bench: BenchDescription, *, speed: float | None = None) -> None:
        params = PowerParams(
            idle_w=bench.idle_power_mw * 1e-3,
            active_w=bench.active_power_mw * 1e-3,
            inference_s=bench.inference_ms * 1e-3,
        )
        self.bench = bench
        noise = Noise(current_a=bench.current_noise_a, drift=bench.drift, seed=bench.noise_seed)
        self.world = World(params, speed=speed or bench.speed, noise=noise)
        mode = bench.timestamp_mode
        binary, why_not = (find_host_shim(build=True) if bench.dut in ("auto", "c-shim")
                           else (None, ""))
        #: The firmware files it runs, by role ("dut", "io_manager"): the rig records their
        #: digests, so that two runs on different builds are told apart.
        self.images: dict[str, str] = {}
        if binary is not None:
            self.dut: SimDut | HostShimDut = HostShimDut(self.world, binary, timestamp_mode=mode)
            self.dut_impl = f"c-shim ({binary})"
            self.images["dut"] = str(binary)
        elif bench.dut == "c-shim":
            raise SetupError(
                f"{bench.path}: [sim] dut = \"c-shim\" but the host shim is not built "
                f"({why_not})",
                hint="run `make firmware-host` (needs gcc), or set dut = \"auto\"",
            )
        else:
            self.dut = SimDut(self.world, LinearAscModel.load(), timestamp_mode=mode,
                              uart_baud=bench.uart_baud)
            self.dut_impl = "python" if bench.dut == "python" else f"python ({why_not})"
            if bench.uart_baud is not None:
                self.dut_impl += f", downloads at {bench.uart_baud:g} baud"
        self.emon_driver = bench.emon_driver
        self.emon: Any = None
        if self.emon_driver == "lpm01a":
            self.emon = SimLpm01a(self.world)
        elif self.emon_driver == "n6705":
            self.emon = SimN6705(self.world)
        elif self.emon_driver == "34465a":
            self.emon = Sim34465A(self.world)
        elif self.emon_driver == "otii":
            self.emon = SimOtii(self.world)  # the Otii app's TCP server, on 127.0.0.1
        elif self.emon_driver == "joulescope":
            self.emon = JoulescopeBridge(self.world, int(bench.sample_rate_hz))
        elif self.emon_driver == "ppk2":
            # Source mode supplies the DUT itself; in ampere mode the bench's supply does.
            self.emon = SimPpk2(self.world, ampere_supply_v=bench.supply_voltage_v)
        if self.emon_driver in ("34465a", "none", "joulescope"):
            # The monitor does not source the supply: a bench supply does. It stays on, except
            # that a Joulescope connects and disconnects the DUT with its current range.
            self.world.set_supply(bench.supply_voltage_v)
        self._bench_supply = self.emon_driver in ("34465a", "none")
        #: A simulated UNO in front of the DUT when the bench routes it through one.
        self.io_manager: SimIoManager | SimavrUno | None = None
        self._wants_io_manager = bench.has_io_manager
        self._io_manager_kind = bench.io_manager
        if self._wants_io_manager and bench.io_manager == "simavr":
            # Checked (and built) now, so that a missing toolchain is a clear error up front.
            self._avr = simavr_uno_binaries(build=True)
            self.dut_impl += ", behind io_manager.ino's AVR build on simavr"
            self.images["io_manager"] = str(self._avr[1])

    @property
    def ports(self) -> dict[str, str]:
        """The pty paths the rig opens: {"dut", "emon"[, "io_manager"]}."""
        ports = {"dut": self.dut.path}
        if isinstance(self.emon, SimLpm01a | SimPpk2):
            ports["emon"] = self.emon.path
        elif isinstance(self.emon, JoulescopeBridge):
            ports["emon"] = self.emon.address
        elif self.emon is not None:
            ports["emon"] = self.emon.resource
        if self.io_manager is not None:
            ports["io_manager"] = self.io_manager.path
        return ports

    def start(self) -> VirtualBench:
        """Start every device's threads (the IO manager last: it opens the DUT's port)."""
        self.dut.start()
        if self.emon is not None:
            self.emon.start()
        if self._bench_supply:
            self.world.power(True)
        if self._wants_io_manager and self._io_manager_kind == "simavr":
            harness, elf = self._avr
            self.io_manager = SimavrUno(self.dut.path, harness=harness, elf=elf,
                                        world=self.world)
        elif self._wants_io_manager:
            self.io_manager = SimIoManager(self.dut.path, world=self.world)
            self.io_manager.start()
        return self

    def close(self) -> None:
        """Stop every device and close its pty."""
        if self.io_manager is not None:
            self.io_manager.close()
        if self.emon is not None:
            self.emon.close()
        self.dut.close()

    def __enter__(self) -> VirtualBench:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


class JoulescopeBridge:
    """Serves the simulated Joulescope's samples to the rig process over loopback TCP.

    The rig's `FakeJoulescopeDriver` (standing in for pyjoulescope_driver.Driver) reads them
    through `SocketSource`; its current-range switch powers the DUT in this World.
    """

    def __init__(self, world: World, sample_rate: int) -> None:
        self.world = world
        self.sample_rate = sample_rate
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        """Accept connections (one stream per connection) on a thread."""
        thread = threading.Thread(target=self._accept, name="joulescope-bridge", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            source = WorldSource(self.world, self.sample_rate)
            thread = threading.Thread(target=self._serve, args=(source, conn), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, source: WorldSource, conn: socket.socket) -> None:
        with conn:
            serve_source(source, conn, self._stop)

    def close(self) -> None:
        """Stop serving; safe to call twice."""
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=2.0)


#: Faults asked for from outside the process (benchmarks/soak.py injects them into the
#: virtual bench a run started): the USB cable of the monitor (SIGUSR1) or of the DUT (SIGUSR2)
#: comes out, as the in-process test hooks do it (`unplug`, the DUT's port closed).
UNPLUG_SIGNALS = {signal.SIGUSR1: "emon", signal.SIGUSR2: "dut"}


def unplug(vb: VirtualBench, what: str) -> None:
    """Take the DUT's ("dut") or the monitor's ("emon") port away under the rig: the DUT's pty
    closes (its firmware killed); a monitor that powers the DUT over USB takes the supply with
    it (`unplug`), any other closes its port or server."""
    if what == "dut":
        vb.dut.close()
    elif vb.emon is not None:
        getattr(vb.emon, "unplug", vb.emon.close)()
    print(f"virtual bench: the {'DUT' if what == 'dut' else vb.emon_driver} was unplugged",
          file=sys.stderr, flush=True)


def serve(bench_path: Path, *, speed: float | None = None, power_on: bool = False) -> int:
    """Process entry: print one JSON line on stdout (the ports, or the error and its hint), then
    serve until stdin closes (the rig is done, or died), SIGTERM or SIGINT; the exit code.
    SIGUSR1 and SIGUSR2 unplug the monitor and the DUT (`UNPLUG_SIGNALS`)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    unplugged: list[str] = []  # acted on by the serving loop, not inside the handler
    for signum, what in UNPLUG_SIGNALS.items():
        signal.signal(signum, lambda *_, what=what: unplugged.append(what))
    vb: VirtualBench | None = None
    try:
        if speed is not None and not (math.isfinite(speed) and speed > 0):
            raise BenchFileError(f"--speed: expected a positive number, found {speed!r}",
                                 hint="simulated seconds per host second, e.g. --speed 50")
        vb = VirtualBench(load_description(bench_path), speed=speed)
        vb.start()
    except VirtualBenchError as exc:
        if vb is not None:
            vb.close()
        print(json.dumps({"error": exc.message, "hint": exc.hint}), flush=True)
        print(f"virtual bench: {exc}", file=sys.stderr, flush=True)
        return EXIT_CODE
    try:
        if power_on:  # as the LPM01A would: supply at the bench's voltage, then on
            vb.world.set_supply(vb.bench.supply_voltage_v)
            vb.world.power(True)
        print(json.dumps({"ports": vb.ports, "speed": vb.world.clock.speed, "dut": vb.dut_impl,
                          "emon": vb.emon_driver, "powered": vb.world.powered,
                          "images": vb.images, "simulated": True}), flush=True)
        while not stop.is_set():
            ready, _, _ = select.select([sys.stdin], [], [], 0.2)
            if ready and not os.read(sys.stdin.fileno(), 4096):
                break  # our stdin closed: the rig is done (or died)
            while unplugged:
                unplug(vb, unplugged.pop(0))
    finally:
        vb.close()
    return 0
