"""Detect and handshake a bench's devices without measuring: what the runner GUI's "Detect and
handshake" panel and `rig devices --check` show.

`check_bench` wires the bench exactly as a measurement does (`rig.run.measure.connect_bench`: the
virtual bench if the bench uses one, the IO manager, the DUT's port, the monitor with its
self-test, DUT power and boot banner), then asks the DUT ``caps``, ``name`` and ``profile``,
and always shuts down again with the DUT powered off. Device faults become states, never
exceptions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from drivers.errors import DeviceTimeout, PortError
from rig.bench.config import VIRTUAL_PORT, Bench
from rig.bench.ports import port_fault
from rig.errors import BENCH_ERRORS, ConfigError
from rig.run.events import Event, EventBus, InstrumentInfo, Note
from rig.run.measure import BenchParts, check_timestamp_edges, connect_bench

#: What a device can be found to be. "answering": it spoke and passed every check; "found":
#: its port opened but nothing answered; "wrong mode": a DUT built for the other timestamp
#: mode; "busy": another program has the port; "missing": no such port; "error": it answered
#: wrongly or failed; "not used": the bench has no such device; "not checked": an earlier
#: device failed, so this one was never reached.
STATES = ("answering", "found", "wrong mode", "busy", "missing", "error", "not used",
          "not checked")
#: The roles in the order they are reported.
ROLES = ("dut", "emon", "io_manager", "virtual_bench")
_LABEL = {"dut": "the DUT", "emon": "the energy monitor", "io_manager": "the IO manager",
          "virtual_bench": "the virtual bench"}


@dataclass
class DeviceState:
    """One device of the bench, as the check found it."""

    role: str
    state: str
    #: One line for humans.
    detail: str
    #: What the device said about itself (DUT: name, vendor, model, timestamp mode,
    #: capabilities; monitor: identity, self-test and settings) and, on a fault, its hint.
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class BenchCheck:
    """Every device of one bench, plus notes (warnings, shutdown problems)."""

    bench: str
    devices: list[DeviceState]
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every device the bench uses answered."""
        return all(d.state in ("answering", "not used") for d in self.devices)

    def device(self, role: str) -> DeviceState | None:
        """The state of `role`, or None when the bench has no such device."""
        return next((d for d in self.devices if d.role == role), None)

    def as_dict(self) -> dict[str, Any]:
        """Plain data (for JSON)."""
        return {"bench": self.bench, "ok": self.ok,
                "devices": [asdict(d) for d in self.devices], "notes": list(self.notes)}


def check_bench(bench: Bench, *, checkpoint: Callable[[], None] | None = None) -> BenchCheck:
    """Connect to every device of `bench`, handshake the DUT, shut down; report each device.

    `checkpoint` is called while waiting on a device and may raise to stop (that exception
    propagates, after the shutdown). A device fault never raises; a `ConfigError` about the
    bench itself (e.g. a monitor that cannot time energy windows: a monitor without every
    timestamp edge, an LPM01A above its ascii_dec rate) does, before any port is opened.
    """
    bench.require_dut()
    # What the bench alone refuses, raised here as about the bench (connect_bench refuses it
    # too, but before the virtual bench starts, where it would read as that bench failing).
    check_timestamp_edges(bench)
    seen: list[Event] = []
    bus = EventBus()
    bus.subscribe(seen.append)
    parts = BenchParts()
    stopped: list[BaseException] = []

    def guarded() -> None:
        try:
            if checkpoint is not None:
                checkpoint()
        except BaseException as exc:
            stopped.append(exc)
            raise

    try:
        failure: Exception | None = None
        try:
            connect_bench(bench, parts, bus, checkpoint=guarded)
        except (*BENCH_ERRORS, OSError) as exc:
            if stopped or (isinstance(exc, ConfigError) and not _vbench_failed(bench, parts)):
                raise
            failure = exc
        states = _assess(bench, parts, seen, failure)
        if states["dut"].state in ("answering", "wrong mode"):
            _handshake(bench, parts, states["dut"], stopped)
    finally:
        notes = parts.shutdown()
    notes = [e.text for e in seen if isinstance(e, Note)] + notes
    return BenchCheck(bench=bench.name,
                      devices=[states[r] for r in ROLES if r in states], notes=notes)


# -- how far the connection got, and who failed ---------------------------------------------------
def _uses_vbench(bench: Bench) -> bool:
    """The same test `connect_bench` makes before starting a virtual bench."""
    io_port = bench.io_manager.port if bench.io_manager else None
    emon_port = bench.emon.address if bench.emon.driver != "none" else None
    return bench.sim is not None and VIRTUAL_PORT in (bench.dut.port, emon_port, io_port)


def _vbench_failed(bench: Bench, parts: BenchParts) -> bool:
    return _uses_vbench(bench) and parts.vbench is None


def _assess(bench: Bench, parts: BenchParts, seen: list[Event],
            failure: Exception | None) -> dict[str, DeviceState]:
    """A state per role from what `connect_bench` opened and what it published."""
    infos = {e.role: dict(e.info) for e in seen if isinstance(e, InstrumentInfo)}
    uses_emon = bench.emon.driver != "none" and bench.dut.kind != "xylo"
    states: dict[str, DeviceState] = {}
    if _uses_vbench(bench):
        states["virtual_bench"] = DeviceState("virtual_bench", "answering", "", {})
    if bench.io_manager is not None and bench.dut.kind == "xylo":
        states["io_manager"] = DeviceState("io_manager", "not used",
                                           "the Xylo shim is reached without it", {})
    elif bench.io_manager is not None:
        states["io_manager"] = DeviceState("io_manager", "answering", "", {})
    states["dut"] = DeviceState("dut", "answering", "", {})
    if uses_emon:
        states["emon"] = DeviceState("emon", "answering", "", {})
    else:
        why = ("the Xylo shim is not measured by an energy monitor here"
               if bench.dut.kind == "xylo" else "no energy monitor on this bench (driver none)")
        states["emon"] = DeviceState("emon", "not used", why, {})

    # Who failed, in the order connect_bench reaches them: the virtual bench, the IO manager,
    # the DUT's port, the monitor (open, configure, self-test, start, power on), the DUT's boot.
    blamed: str | None = None
    unreached: set[str] = set()
    if failure is not None:
        if _vbench_failed(bench, parts):
            blamed, unreached = "virtual_bench", {"io_manager", "dut", "emon"}
        elif bench.dut.kind == "xylo":
            blamed = "dut"
        elif bench.io_manager is not None and "io_manager" not in infos:
            blamed, unreached = "io_manager", {"dut", "emon"}
        elif parts.dut is None or not uses_emon:
            blamed, unreached = "dut", {"emon"}
        elif parts.emon is None or "emon" not in infos or not parts.acquiring:
            blamed, unreached = "emon", {"dut"}
        elif _from_dut(failure):  # powered: the DUT's boot banner or its mode
            blamed = "dut"
        else:  # the monitor's `pwr on`
            blamed, unreached = "emon", {"dut"}
    unreached = {r for r in unreached if r in states and states[r].state != "not used"}
    reached = [r for r in states if r != blamed and r not in unreached]

    if "virtual_bench" in states and "virtual_bench" in reached:
        vb = infos.get("virtual_bench", {})
        states["virtual_bench"].info = vb
        states["virtual_bench"].detail = f"started: DUT {vb.get('dut', '?')}"
    if "io_manager" in states and "io_manager" in reached:
        io = infos.get("io_manager", {})
        states["io_manager"].info = io
        states["io_manager"].detail = (f"{io.get('name', '?')} {io.get('version', '')} at "
                                       f"{io.get('port', '?')}").replace("  ", " ")
    if uses_emon and "emon" in reached:
        em = infos.get("emon", {})
        states["emon"].info = em
        states["emon"].detail = _emon_detail(em)
    if "dut" in reached:
        states["dut"].info = _dut_info(bench, parts, infos)
    if blamed is None or failure is None:
        return states

    target = states[blamed]
    if blamed == "dut":
        target.info = _dut_info(bench, parts, infos)
    mode = parts.dut.timestamp_mode if parts.dut is not None else None
    if blamed == "dut" and mode is not None and mode != bench.dut.timestamp_mode:
        target.state = "wrong mode"
        target.detail = _wrong_mode(mode, bench.dut.timestamp_mode)
    else:
        target.state, target.detail = _fault(failure)
    hint = getattr(failure, "hint", None)
    if hint:
        target.info["hint"] = hint
    for role in sorted(unreached):
        states[role].state = "not checked"
        opened = role == "dut" and parts.dut is not None
        states[role].detail = ("port opened; " if opened else "") + \
            f"not reached: {_LABEL[blamed]} failed first"
    return states


def _from_dut(exc: Exception) -> bool:
    """An error raised by the DUT's client or transport (they name it "DUT"), or by the IO
    manager passing the DUT through."""
    message = exc.message if isinstance(exc, BENCH_ERRORS) else str(exc)
    return message.startswith(("DUT", "IO manager"))


def _fault(exc: Exception) -> tuple[str, str]:
    """The state and one-line detail for a device that raised `exc`."""
    message = exc.message if isinstance(exc, BENCH_ERRORS) else str(exc)
    if isinstance(exc, PortError):
        return port_fault(exc), message
    if isinstance(exc, DeviceTimeout):
        return "found", f"port opened, no answer: {message}"
    return "error", message


def _wrong_mode(actual: str, wanted: str) -> str:
    return (f"the firmware is in {actual} timestamp mode, the bench expects {wanted} mode "
            f"(rebuild the firmware for {wanted} mode, or change [dut] timestamp_mode)")


def _dut_info(bench: Bench, parts: BenchParts, infos: dict[str, dict[str, Any]]) -> dict:
    port = bench.dut.port
    if port == VIRTUAL_PORT and bench.io_manager is None:
        port = infos.get("virtual_bench", {}).get("ports", {}).get("dut", port)
    info: dict[str, Any] = {"kind": bench.dut.kind, "port": port,
                            "expected_timestamp_mode": bench.dut.timestamp_mode}
    if bench.io_manager is not None:
        info["port"] = "through the IO manager"
    if parts.dut is not None and parts.dut.timestamp_mode is not None:
        info["timestamp_mode"] = parts.dut.timestamp_mode
    return info


def _emon_detail(info: dict[str, Any]) -> str:
    """E.g. "lpm01a 1.0.5 at /dev/ttyACM1; supply 1.8 V, 1000 Hz"."""
    who = " ".join(str(info[k]) for k in ("driver", "model", "version") if info.get(k))
    if info.get("serial"):
        who += f" #{info['serial']}"
    where = info.get("port") or info.get("device_path") or info.get("resource")
    if where:
        who += f" at {where}"
    settings = []
    if info.get("voltage_v") is not None:
        settings.append(f"supply {info['voltage_v']:g} V")
    if info.get("sample_rate_hz") is not None:
        settings.append(f"{info['sample_rate_hz']:g} Hz")
    text = "; ".join([who or "monitor", ", ".join(settings)] if settings else [who or "monitor"])
    return text + (" (simulated)" if info.get("simulated") else "")


def _handshake(bench: Bench, parts: BenchParts, state: DeviceState,
               stopped: list[BaseException]) -> None:
    """``caps``, ``name``, ``profile``; the mode check for benches without a boot banner."""
    dut = parts.dut
    assert dut is not None
    try:
        caps = dut.negotiate()
        state.info["capabilities"] = sorted(caps)
        who = dut.identify()
    except (*BENCH_ERRORS, OSError) as exc:
        if stopped:
            raise
        if state.state == "answering":
            state.state, state.detail = _fault(exc)
            if state.state == "found":
                state.state, state.detail = "error", f"stopped answering: {state.detail}"
        return
    finally:
        if dut.timestamp_mode is not None:
            state.info["timestamp_mode"] = dut.timestamp_mode
    state.info.update(name=who.name, vendor=who.vendor, profile=who.profile, model=who.model)
    if state.state == "answering" and dut.timestamp_mode != bench.dut.timestamp_mode:
        state.state = "wrong mode"
        state.detail = _wrong_mode(str(dut.timestamp_mode), bench.dut.timestamp_mode)
    elif state.state == "answering":
        state.detail = (f"'{who.name}' ({who.vendor}), model {who.model}, "
                        f"{dut.timestamp_mode} mode")
    else:
        state.detail = f"'{who.name}' ({who.vendor}): {state.detail}"
