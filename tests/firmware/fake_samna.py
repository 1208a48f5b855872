"""A fake ``samna`` for tests: the edge where a Xylo Audio 2 HDK would be, so that Rockpool's own
HDK code (``rockpool.devices.xylo``: ``find_xylo_hdks``, ``XyloSamna``, ``xa2_devkit_utils``) runs
unmodified above it without a board.

What the fake board does is what Rockpool 3.1.0's code asks of it (read in
``rockpool/devices/xylo/syns61201/xa2_devkit_utils.py`` and ``xylo_samna.py``): register reads and
writes, ``ReadVersion`` -> ``Version(1, 1)``, ``TriggerReadout`` -> ``Readout(timestamp)``, an
accelerated-time run over time-stamped input ``Spike`` events whose ``Readout`` events and output
spikes (``NeuronStateSinkNode.get_output_spike``) appear `latency_s` after the write, and a power
monitor that, once started at ``f`` Hz, yields one ``Measurement``-like event per rail every
``1/f`` s (the tutorial ``docs/devices/quick-xylo/xylo-audio-power.ipynb`` groups them by
``e.channel`` and reads ``e.value`` in watts).

Not the real board: its "network" spikes output neuron ``k`` in every step in which input
channel ``k`` got an event; the numeric values of ``MeasurementChannels`` are this fake's (0..3,
the tutorial indexes a 4-tuple with them); and whether the real board sends one ``Readout`` per
time step in accelerated-time mode is unconfirmed without hardware (Rockpool only waits for an
event whose ``timestamp`` reaches the last step).

Time is a `FakeClock` in integer nanoseconds that only moves when someone sleeps on it, so
every duration in a test is a closed-form number. Installed with `installed()`, which swaps
``samna`` and ``rockpool.devices.xylo*`` in ``sys.modules`` and restores them afterwards.
"""

from __future__ import annotations

import enum
import importlib
import importlib.abc
import importlib.machinery
import json
import os
import sys
import time
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

# -- time ----------------------------------------------------------------------------------------


class FakeClock:
    """Simulated host time in integer ns: `time()` reads it, `sleep()` is the only way on
    (and `spend()`, the fake's own cost of a read)."""

    def __init__(self) -> None:
        self.ns = 0

    def now_ns(self) -> int:
        return self.ns

    def time(self) -> float:
        return self.ns / 1e9

    def sleep(self, seconds: float) -> None:
        self.ns += round(seconds * 1e9)

    def spend(self, ns: int) -> None:
        self.ns += ns


class HostClock:
    """The host's own time (``time.perf_counter_ns``, the clock the Xylo shim times the board
    with), in integer ns from this clock's creation: for the fake board run in another process
    (`serve_as_package`), where nobody can move time for it."""

    def __init__(self) -> None:
        self._origin = time.perf_counter_ns()

    def now_ns(self) -> int:
        return time.perf_counter_ns() - self._origin

    def time(self) -> float:
        return self.now_ns() / 1e9

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def spend(self, ns: int) -> None:
        """A read costs what it costs on the host: nothing is added."""


# -- events and configuration (the names Rockpool uses) ------------------------------------------


class _Event:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__})"


def _event(name: str, **defaults: Any) -> type:
    def init(self: Any, **fields: Any) -> None:
        _Event.__init__(self, **{**defaults, **fields})

    return type(name, (_Event,), {"__init__": init})


Spike = _event("Spike", neuron_id=0, timestamp=None)
WriteRegisterValue = _event("WriteRegisterValue", address=0, data=0)
ReadRegisterValue = _event("ReadRegisterValue", address=0)
RegisterValue = _event("RegisterValue", address=0, data=0)
ReadVersion = _event("ReadVersion")
Version = _event("Version", major=1, minor=1)
TriggerProcessing = _event("TriggerProcessing")
TriggerReadout = _event("TriggerReadout")
Readout = _event("Readout", timestamp=0)
ReadMemoryValue = _event("ReadMemoryValue", address=0)
WriteMemoryValue = _event("WriteMemoryValue", address=0, data=0)
MemoryValue = _event("MemoryValue", address=0, data=0)
Measurement = _event("Measurement", channel=0, value=0.0, timestamp=0)


class _Bag:
    """A configuration record: any attribute can be set."""


class XyloConfiguration(_Bag):
    def __init__(self) -> None:
        self.input, self.reservoir, self.readout, self.debug = _Bag(), _Bag(), _Bag(), _Bag()
        self.input.weights = np.zeros((16, 1000), int)
        self.readout.weights = np.zeros((1000, 8), int)
        self.synapse2_enable = False
        self.bias_enable = False


class ReservoirNeuron(_Bag):
    pass


class OutputNeuron(_Bag):
    pass


@dataclass
class NeuronRange:
    start: int
    end: int


class OperationMode(enum.Enum):
    Manual = 0
    AcceleratedTime = 1
    RealTime = 2


class MeasurementChannels(enum.IntEnum):
    """The four Xylo Audio 2 rails; the values are this fake's."""

    Io = 0
    Logic = 1
    IoAfe = 2
    LogicAfe = 3


# -- the board -----------------------------------------------------------------------------------


@dataclass
class Firmware:
    fxtree: str = "0.11.5"
    unifirm: str = "1.1.3"


@dataclass
class DeviceInfo:
    device_type_name: str = "XyloA2TestBoard"
    firmware: Firmware = field(default_factory=Firmware)


class _Sink:
    """A buffer the board delivers events to; each event becomes visible at a clock time."""

    def __init__(self) -> None:
        self.board: XyloA2Board | None = None
        self._queue: list[tuple[int, Any]] = []

    def push(self, at_ns: int, event: Any) -> None:
        self._queue.append((at_ns, event))

    def get_events(self) -> list[Any]:
        now = 0
        if self.board is not None:
            self.board.polls += 1
            self.board.clock.spend(self.board.poll_cost_ns)
            now = self.board.clock.now_ns()
            self.board.on_read(self, now)
        ready = [e for at, e in self._queue if at <= now]
        self._queue = [(at, e) for at, e in self._queue if at > now]
        return ready


class ReadBuffer(_Sink):
    pass


class WriteBuffer:
    def __init__(self) -> None:
        self.board: XyloA2Board | None = None

    def write(self, events: list[Any]) -> None:
        assert self.board is not None, "write buffer not connected to a board"
        self.board.receive(list(events))


class NeuronStateSinkNode:
    """Rockpool reads output spikes as (neurons, T) and transposes them."""

    def __init__(self) -> None:
        self.board: XyloA2Board | None = None
        self.output: np.ndarray = np.zeros((0, 0), int)

    def reset(self) -> None:
        self.output = np.zeros((0, 0), int)

    def set_configuration(self, config: Any) -> None:
        self.config = config

    def get_output_spike(self) -> list[list[int]]:
        return self.output.T.tolist()

    def get_reservoir_spike(self) -> list:
        return []

    def get_reservoir_v_mem(self) -> list:
        return []

    def get_reservoir_i_syn(self) -> list:
        return []

    def get_reservoir_i_syn2(self) -> list:
        return []


class PowerBuffer(_Sink):
    pass


class PowerMonitor:
    """Samples every rail each ``1/f`` s from its start, at the level the board is in then."""

    def __init__(self, board: XyloA2Board) -> None:
        self.board = board
        self.period_ns: int | None = None
        self.started_ns = 0
        self.buffers: list[PowerBuffer] = []
        self._next = 1
        self.frequencies: list[float] = []

    def get_source_node(self) -> PowerMonitor:
        return self

    def is_auto_power_measurement_active(self) -> bool:
        return self.period_ns is not None

    def start_auto_power_measurement(self, frequency: float) -> None:
        self.frequencies.append(frequency)
        self.period_ns = round(1e9 / frequency)
        self.started_ns, self._next = self.board.clock.now_ns(), 1
        self.board.log(event="power_monitor_started", hz=frequency)

    def stop_auto_power_measurement(self) -> None:
        self.period_ns = None

    def produce(self, now_ns: int) -> None:
        """Queue every sample due by `now_ns` into the connected buffers."""
        if self.period_ns is None:
            return
        while (at := self.started_ns + self._next * self.period_ns) <= now_ns:
            level = self.board.level_at(at)
            for channel in MeasurementChannels:
                for buf in self.buffers:
                    buf.push(at, Measurement(channel=int(channel), value=level[channel],
                                             timestamp=at))
            self._next += 1


class _Model:
    def __init__(self, board: XyloA2Board) -> None:
        self.board = board

    def get_source_node(self) -> _Model:
        return self

    def get_sink_node(self) -> _Model:
        return self

    def get_configuration(self) -> Any:
        return self.board.config

    def apply_configuration(self, config: Any) -> None:
        self.board.config = config
        self.board.applied.append(config)

    def set_saer_interface_enable(self, on: bool) -> None:
        pass


class XyloA2Board:
    """One Xylo Audio 2 HDK: registers, time steps, accelerated-time runs, power rails.

    `latency_s`: how long after the input is written its last readout appears; `idle_w` /
    `active_w`: rail power [W] per `MeasurementChannels` outside / inside a run.
    """

    def __init__(self, clock: FakeClock, info: DeviceInfo, *, latency_s: float = 0.0125,
                 idle_w: dict[MeasurementChannels, float] | None = None,
                 active_w: dict[MeasurementChannels, float] | None = None,
                 poll_cost_s: float = 0.0) -> None:
        self.clock, self.info = clock, info
        self.latency_ns = round(latency_s * 1e9)
        self.poll_cost_ns = round(poll_cost_s * 1e9)
        self.idle_w = idle_w or dict.fromkeys(MeasurementChannels, 0.0)
        self.active_w = active_w or dict.fromkeys(MeasurementChannels, 0.0)
        self.config: Any = XyloConfiguration()
        self.applied: list[Any] = []
        self.registers: dict[int, int] = {}
        self.timestep = 0
        self.runs: list[tuple[int, int]] = []  # (start ns, end ns) of every accelerated run
        self.inputs: list[np.ndarray] = []     # the raster of every run
        self.polls = 0
        self.readers: list[ReadBuffer] = []
        self.states: list[NeuronStateSinkNode] = []
        self.power = PowerMonitor(self)

    # what Rockpool calls on a device
    def get_firmware_versions(self) -> Firmware:
        return self.info.firmware

    def get_xylo_model(self) -> _Model:
        return _Model(self)

    def get_afe_model(self) -> _Model:
        return _Model(self)

    def get_power_monitor(self) -> PowerMonitor:
        return self.power

    # the board's behaviour
    def level_at(self, at_ns: int) -> dict[MeasurementChannels, float]:
        busy = any(start <= at_ns <= end for start, end in self.runs)
        return self.active_w if busy else self.idle_w

    def _reply(self, event: Any, at_ns: int | None = None) -> None:
        for reader in self.readers:
            reader.push(self.clock.now_ns() if at_ns is None else at_ns, event)

    def receive(self, events: list[Any]) -> None:
        stamped = [e for e in events if isinstance(e, Spike) and e.timestamp is not None]
        for e in events:
            if isinstance(e, ReadVersion):
                self._reply(Version(major=1, minor=1))
            elif isinstance(e, ReadRegisterValue):
                self._reply(RegisterValue(address=e.address,
                                          data=self.registers.get(e.address, 0)))
            elif isinstance(e, WriteRegisterValue):
                self.registers[e.address] = e.data
            elif isinstance(e, TriggerProcessing):
                self.timestep += 1
            elif isinstance(e, TriggerReadout):
                self._reply(Readout(timestamp=self.timestep))
        if stamped:
            self._run(stamped)

    def _run(self, spikes: list[Any]) -> None:
        """An accelerated-time run up to the last stamped event (Rockpool's extra event one
        step after the input's end)."""
        first, last = self.timestep, max(e.timestamp for e in spikes) - 1
        steps = last - first + 1
        n_in = int(np.shape(self.config.input.weights)[0])
        raster = np.zeros((steps, n_in), int)
        for e in spikes:
            if e.timestamp <= last:
                raster[e.timestamp - first, e.neuron_id] += 1
        n_out = int(np.shape(self.config.readout.weights)[1])
        out = (raster[:, np.arange(n_out) % n_in] > 0).astype(int)
        start = self.clock.now_ns()
        done = start + self.latency_ns
        self.runs.append((start, done))
        self.inputs.append(raster)
        for state in self.states:
            state.output = out
        for t in range(first, last + 1):
            self._reply(Readout(timestamp=t), at_ns=done)
        self.timestep = last + 2
        self._started(start)

    def _started(self, now_ns: int) -> None:
        """A run was written at `now_ns` (its readouts are queued for `latency_s` later)."""

    # hooks of the buffers, and the board's log
    def on_read(self, sink: _Sink, now_ns: int) -> None:
        """A buffer is read at `now_ns`, before it hands out what is due: a power buffer gets
        every sample due by then."""
        if isinstance(sink, PowerBuffer):
            self.power.produce(now_ns)

    def log(self, **record: Any) -> None:
        """Facts a test in another process reads back (`HostBoard`); none here."""


class HostBoard(XyloA2Board):
    """The board on the host's clock (`HostClock`), for the shim run as a subprocess, where the
    time between any two of the host's steps is whatever the host took. A run's readouts appear
    `latency_s` after the input write, as on `XyloA2Board`; and so that a test's closed-form
    power holds however slow the host is, a rail sample counts as active from the power
    buffer's last read before the input write to its first read after the readouts are out.
    XyloSamna.evolve empties that buffer just before the write and reads it just after the
    readout, so every sample of an evolve's window is at the active level (on a real board the
    few µs of host steps at either end would be idle; a sample lands there only by the host's
    timing).

    `log`: a file to which one JSON line per fact is appended: ``power_monitor_started`` with its
    ``hz``; per run, once its readouts have been read, ``run`` with (board clock, ns) its
    ``write_ns``, ``visible_ns`` (when the readouts appeared), ``first_read_ns`` (the first read
    of the read buffer after the write) and the two reads around the readouts: ``read_seen_ns``
    (the first to hand them out) and ``read_before_ns`` (the read before it).
    """

    def __init__(self, *args: Any, log: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log_path = log
        self._last_power_read_ns = 0
        self._last_read_ns: int | None = None
        #: [window start, window end or None while open] of every run's power window.
        self.windows: list[list[int | None]] = []
        #: The run written whose readouts nobody has read yet: its facts so far.
        self._pending: dict[str, Any] | None = None

    def log(self, **record: Any) -> None:
        if self.log_path:
            with open(self.log_path, "a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")

    def _started(self, now_ns: int) -> None:
        self.windows.append([self._last_power_read_ns, None])
        self._pending = {"write_ns": now_ns, "visible_ns": self.runs[-1][1],
                         "first_read_ns": None}

    def on_read(self, sink: _Sink, now_ns: int) -> None:
        if isinstance(sink, ReadBuffer):
            run = self._pending
            if run is not None:
                if run["first_read_ns"] is None:
                    run["first_read_ns"] = now_ns
                if now_ns >= run["visible_ns"]:
                    self.log(event="run", **run, read_before_ns=self._last_read_ns,
                             read_seen_ns=now_ns)
                    self._pending = None
            self._last_read_ns = now_ns
        if isinstance(sink, PowerBuffer):
            # Runs follow one another: only the last window can be open, and it closes at the
            # first power read once its run's readouts are out.
            if self.windows and self.windows[-1][1] is None and self.runs[-1][1] <= now_ns:
                self.windows[-1][1] = now_ns
            self._last_power_read_ns = now_ns
        super().on_read(sink, now_ns)

    def level_at(self, at_ns: int) -> dict[MeasurementChannels, float]:
        busy = any(start < at_ns and (end is None or at_ns <= end)
                   for start, end in self.windows)
        return self.active_w if busy else self.idle_w


# -- the samna module tree -----------------------------------------------------------------------


class EventFilterGraph:
    def sequential(self, nodes: list[Any]) -> None:
        source, sink = nodes
        if isinstance(source, _Model) and isinstance(sink, ReadBuffer):
            sink.board = source.board
            source.board.readers.append(sink)
        elif isinstance(source, _Model) and isinstance(sink, NeuronStateSinkNode):
            sink.board = source.board
            source.board.states.append(sink)
        elif isinstance(source, WriteBuffer) and isinstance(sink, _Model):
            source.board = sink.board
        elif isinstance(source, PowerMonitor) and isinstance(sink, PowerBuffer):
            sink.board = source.board
            source.buffers.append(sink)
        else:
            raise AssertionError(f"fake samna cannot connect {source!r} -> {sink!r}")


class _AutoModule(types.ModuleType):
    """A samna submodule we do not model: any attribute is another such module, so that the
    other Xylo families' module-level references import."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _module(f"{self.__name__}.{name}")


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = sys.modules.get(name)
    if mod is None:
        mod = _AutoModule(name)
        mod.__path__ = []  # a package, so `from samna.a.b import c` works
        sys.modules[name] = mod
        parent, _, leaf = name.rpartition(".")
        if parent:
            setattr(_module(parent), leaf, mod)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname == "samna" or fullname.startswith("samna."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        return _module(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class Samna:
    """The fake library's state: the devices samna lists and the clock they run on."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.devices: list[tuple[DeviceInfo, XyloA2Board]] = []

    def attach(self, info: DeviceInfo | None = None, *, kind: type[XyloA2Board] | None = None,
               **board: Any) -> XyloA2Board:
        info = info or DeviceInfo()
        hdk = (kind or XyloA2Board)(self.clock, info, **board)
        self.devices.append((info, hdk))
        return hdk

    def build(self) -> None:
        """Register the samna module tree in sys.modules."""
        _module("samna", BasicSinkNode_xylo_core2_event_output_event=ReadBuffer,
                BasicSourceNode_xylo_core2_event_input_event=WriteBuffer,
                BasicSinkNode_unifirm_modules_events_measurement=PowerBuffer)
        _module("samna.device", get_all_devices=lambda: [i for i, _ in self.devices],
                open_device=self._open)
        _module("samna.graph", EventFilterGraph=EventFilterGraph)
        _module("samna.xyloCore2", NeuronStateSinkNode=NeuronStateSinkNode,
                OperationMode=OperationMode, XyloConfiguration=XyloConfiguration,
                validate_configuration=lambda config: (True, ""))
        _module("samna.xyloCore2.configuration", XyloConfiguration=XyloConfiguration,
                ReservoirNeuron=ReservoirNeuron, OutputNeuron=OutputNeuron,
                NeuronRange=NeuronRange)
        _module("samna.xyloCore2.event", Spike=Spike, WriteRegisterValue=WriteRegisterValue,
                ReadRegisterValue=ReadRegisterValue, RegisterValue=RegisterValue,
                ReadVersion=ReadVersion, Version=Version, TriggerProcessing=TriggerProcessing,
                TriggerReadout=TriggerReadout, Readout=Readout,
                ReadMemoryValue=ReadMemoryValue, WriteMemoryValue=WriteMemoryValue,
                MemoryValue=MemoryValue)
        _module("samna.xyloA2TestBoard", MeasurementChannels=MeasurementChannels)

    def _open(self, info: DeviceInfo) -> XyloA2Board:
        return next(board for i, board in self.devices if i is info)


_SWAPPED = ("samna", "rockpool.devices.xylo")


@contextmanager
def installed(clock: FakeClock | None = None) -> Iterator[Samna]:
    """The fake samna in sys.modules (and a fresh Rockpool Xylo import above it) for the body;
    whatever was there before is put back afterwards."""
    saved = {k: v for k, v in sys.modules.items()
             if any(k == p or k.startswith(p + ".") for p in _SWAPPED)}
    for name in saved:
        del sys.modules[name]
    devices = sys.modules.get("rockpool.devices")
    saved_attr = getattr(devices, "xylo", None) if devices is not None else None
    finder = _Finder()
    sys.meta_path.insert(0, finder)
    fake = Samna(clock or FakeClock())
    fake.build()
    try:
        yield fake
    finally:
        sys.meta_path.remove(finder)
        for name in [k for k in sys.modules
                     if any(k == p or k.startswith(p + ".") for p in _SWAPPED)]:
            del sys.modules[name]
        sys.modules.update(saved)
        if devices is not None:
            if saved_attr is None:
                if hasattr(devices, "xylo"):
                    delattr(devices, "xylo")
            else:
                devices.xylo = saved_attr


# -- Rockpool's Xylo Audio 2 package over the fake -----------------------------------------------


@dataclass
class Harness:
    """Rockpool's own ``syns61201`` imported over the fake samna, on one `FakeClock`."""

    samna: Samna
    clock: FakeClock
    devkit: types.ModuleType  # syns61201.xa2_devkit_utils (its blocking_read is Rockpool's)

    def reset(self) -> None:
        """No boards, time zero: each test attaches its own."""
        self.samna.devices.clear()
        self.clock.ns = 0


@contextmanager
def rockpool_hdk() -> Iterator[Harness]:
    """Rockpool's Xylo packages imported fresh over the fake samna, their host clock the fake
    one (``time`` in ``xa2_devkit_utils`` and ``xylo_samna`` is the only other edge replaced),
    for the body; everything is put back afterwards."""
    clock = FakeClock()
    with installed(clock) as fake:
        from firmware.xylo.rockpool_import import xylo_audio2

        xylo_audio2(hdk=True)
        devkit = importlib.import_module("rockpool.devices.xylo.syns61201.xa2_devkit_utils")
        samna_module = importlib.import_module("rockpool.devices.xylo.syns61201.xylo_samna")
        host_time = types.SimpleNamespace(time=clock.time, sleep=clock.sleep)
        devkit.time = samna_module.time = host_time
        yield Harness(fake, clock, devkit)


# -- the fake as an importable ``samna`` package, for the shim run as a subprocess ---------------

#: JSON describing the board `serve_as_package` attaches: ``latency_s``, ``idle_w`` and
#: ``active_w`` ({MeasurementChannels name: W}), ``firmware`` ({"fxtree", "unifirm"}) and
#: ``log`` (a file path, see `HostBoard`). Unset: samna lists no device.
BOARD_ENV = "FAKE_SAMNA_BOARD"
#: The folder to put first on a process's PYTHONPATH so that its ``import samna`` is this fake.
PACKAGE_ROOT = Path(__file__).resolve().parent / "fake_samna_pkg"


def serve_as_package(package: types.ModuleType) -> Samna:
    """Make `package` (``samna``, being imported from `PACKAGE_ROOT`) this fake on the host's
    clock, with the board `BOARD_ENV` describes attached as a `HostBoard`."""
    sys.meta_path.insert(0, _Finder())  # `import samna.<anything>`: a stand-in module
    package.__getattr__ = lambda name: _AutoModule.__getattr__(package, name)  # samna.<any>
    fake = Samna(HostClock())
    fake.build()
    text = os.environ.get(BOARD_ENV)
    if text:
        board = json.loads(text)
        levels = {key: {MeasurementChannels[name]: float(watts)
                        for name, watts in board.get(key, {}).items()} or None
                  for key in ("idle_w", "active_w")}
        fake.attach(DeviceInfo(firmware=Firmware(**board.get("firmware", {}))), kind=HostBoard,
                    latency_s=float(board.get("latency_s", 0.0125)), log=board.get("log"),
                    **levels)
    package.fake = fake
    return fake
