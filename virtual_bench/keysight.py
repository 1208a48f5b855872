"""Simulated Keysight N6705 and 34465A serving raw SCPI over TCP on 127.0.0.1 (like port 5025 of
the real ones), measuring the shared `World`'s DUT. Simulated, not measured.

Both parse exactly the commands the drivers send, plus ``*IDN?``, ``*RST``, ``*CLS``, ``*OPC?`` and
``SYST:ERR?`` (an error queue with the instrument's codes: -113 undefined header, -224 illegal
parameter value, -222 data out of range, -221 settings conflict). Binary data goes out as
definite-length blocks, big-endian (``FORM:BORD NORM``) or little-endian (``SWAP``).

- N6705 source: ``VOLT``/``OUTP`` drive `World.set_supply`/`World.power`. The channel's module
  (``SYST:CHAN:MOD?``, an N6781A unless told otherwise) decides the source commands, as on the
  instrument. An N678xA SMU keeps an emulation (``EMUL``) and a priority (``FUNC VOLT|CURR``),
  both left as the last user set them (constructor arguments) until the host sets them; only the
  voltage-priority power-supply emulations source the simulated DUT rail, so ``OUTP ON`` in any
  other mode is refused (-221). A priority switch turns the output off and reverts the output
  settings to their *RST values (N6705C User's Guide, "Using the Source/Load Functions"). In
  voltage priority the current limit is ``CURR:LIM``; plain ``CURR`` (``CURR:LEV``) is stored as
  the current-priority setting and limits nothing (the EnergyRunner's n6705b.js sends ``CURR:LIM``
  to its N6781 and ``CURR:LEV`` to its N6731). Other modules: ``CURR:LEV`` is the limit; ``EMUL``,
  ``FUNC`` and ``CURR:LIM`` are refused (-241, the simulator's choice of code). ``*OPT?`` lists
  the mainframe's options (``"0"`` for none); with option 055 every Elog command is refused
  (-241): the N6705 User's Guide says Elog is not available with it.
- N6705 over-voltage protection (an N678xA): ``VOLT:PROT:REM <v>,(@ch)`` (and its query) keeps
  the remote OVP level, 0 to 22 V, *RST MAX (22 V) (N6700 Operating and Service Guide,
  ``[SOURce:]VOLTage:PROTection:REMote``; the form the EnergyRunner's n6705b.js sends its N6781).
  When the output would be above it (``VOLT`` while on, ``OUTP ON`` with ``VOLT`` above it, the
  level lowered under ``VOLT`` while on, or `front_panel_voltage`), the output is disabled
  before the rail changes, and ``STAT:QUES:COND? (@ch)`` has bit 0 (OV, value 1) set (the guide:
  "the output is disabled and the Questionable Condition status register OV bit is set"). The
  trip is latched: ``OUTP ON`` leaves the output off until ``*RST`` (the simulator's choice: the
  instrument's clear command is not modelled). Other modules: ``VOLT:PROT:REM`` is refused
  (-241, the simulator's choice of code; public N6700 wrappers send it to N678xA modules only)
  and no OVP is modelled. A priority switch also puts the level back at its *RST value, taken
  as one of the "output settings" the N6705C User's Guide says revert (unconfirmed).
- N6705 measurement: ``SENS:CURR:RANG <a>``
  selects the smallest measurement range of an N6781A-like SMU channel (1 mA, 100 mA, 3.06 A)
  that holds the value; ``SENS:CURR:RANG?`` reports it. Readings above the range are not
  modelled (they come back unclipped); seamless autoranging (``SENS:CURR:RANG:AUTO``) is not
  simulated (-113). ``INIT:ACQ`` starts a sample
  grid at the arm time t0 with period P = ``SENS:SWE:TINT`` rounded to 5.12 µs; the first falling
  edge of the timestamp line once the pre-trigger points are filled triggers; the capture is the
  grid sample holding the edge, ``pretrigger`` samples before it and the rest after. Each sample is
  the exact mean current (energy / (V * P)) of the world's power model.
- N6705 external data logger (Elog) with the timestamp line on the auxiliary input: the channel's
  module (``SYST:CHAN:MOD?``, an N6781A unless told otherwise) has an auxiliary voltage input
  wired to the DUT's timestamp line; ``SENS:FUNC:VOLT:INP AUX`` selects it for the voltage
  measurement (other modules: -241). That command is unconfirmed by any public source: the
  simulator takes the form the driver sends, not one a guide shows.
  ``SENS:ELOG:FUNC:CURR|VOLT[:MINM]`` pick what a record holds (current avg[, min, max], then
  voltage avg[, min, max]); ``SENS:ELOG:PER`` is rounded to the 20.48 us (``SENS:SWE:TINT:RES
  RES20``) or 40.96 us grid and must be at least 102.4 us per logged value (-221 at ``INIT:ELOG``
  otherwise). ``INIT:ELOG`` with ``TRIG:ELOG:SOUR IMM`` starts logging at once (``BUS``: at
  ``TRIG:ELOG``); record k covers [t0 + kP, t0 + (k+1)P). ``FETC:ELOG? n`` returns up to n whole
  records (never past `World.observable_ns`) and removes them; the FIFO holds `elog_fifo_s` of
  records, and an overrun loses the oldest and puts -230 on the error queue. Current is the exact
  mean of the power model; the aux line is at the DUT's supply voltage while the output is on, 0 V
  while it is off or inside a timestamp pulse; its minimum over a record is taken over raw
  readings every 5.12 us (a pulse that falls between two of them is missed, as on the instrument),
  its average is exact.
- 34465A: ``CONF:CURR:DC <a>`` picks the smallest DC current range (1 µA ... 10 A) that holds
  the value, ``CURR:DC:RANG?`` reports it, and a reading above 120 % of it is the overload
  marker +9.9E+37, as on the instrument. The first falling edge after ``INIT``
  (``TRIG:SOUR EXT``, ``TRIG:SLOP NEG``) starts timed samples: sample k covers
  [edge + k*P, edge + k*P + aperture). Readings appear in memory as simulated time passes
  (never past `World.observable_ns`); ``R? n`` removes them.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from protocols.errors import ProtocolError
from protocols.scpi import (
    Command,
    encode_reals,
    format_error,
    header_matches,
    parse_channel_list,
    parse_command,
    parse_number,
    real_dtype,
)
from virtual_bench.instrument import LoopbackServer
from virtual_bench.world import NS, World

log = logging.getLogger(__name__)

#: Longest a query waits for simulated time to catch up (host seconds) before giving up.
FETCH_PATIENCE_S = 30.0
_QUEUE_DEPTH = 20


class ScpiFault(Exception):
    """A command the instrument refuses: it goes on the error queue as (code, text)."""

    def __init__(self, code: int, text: str) -> None:
        super().__init__(text)
        self.code = code
        self.text = text


def _undefined(cmd: Command) -> ScpiFault:
    return ScpiFault(-113, "Undefined header")


def _number(text: str, lo: float, hi: float) -> float:
    try:
        value = parse_number(text)
    except ProtocolError:
        raise ScpiFault(-224, "Illegal parameter value") from None
    if not lo <= value <= hi:
        raise ScpiFault(-222, "Data out of range")
    return value


def _switch(text: str) -> bool:
    word = text.upper()
    if word in ("ON", "1"):
        return True
    if word in ("OFF", "0"):
        return False
    raise ScpiFault(-224, "Illegal parameter value")


class _ScpiServer(LoopbackServer):
    """A TCP listener: one client at a time, lines in, replies out, an error queue."""

    identity = "?"

    def __init__(self, world: World) -> None:
        self.world = world
        self.errors: deque[tuple[int, str]] = deque()
        self.lock = threading.RLock()
        self.commands_seen: list[str] = []
        self._listener: socket.socket | None = None
        self._init_threads()
        self.port = 0
        self.big_endian = True

    # -- life cycle ---------------------------------------------------------------------------
    def start(self, port: int = 0) -> None:
        """Listen on 127.0.0.1:`port` (0 picks a free port)."""
        self._listen(port, 2, f"{type(self).__name__}-accept")

    @property
    def resource(self) -> str:
        """The VISA resource string of this instrument."""
        return f"TCPIP0::127.0.0.1::{self.port}::SOCKET"

    def close(self) -> None:
        """Stop listening and serving; safe to call twice."""
        self._stop_listening()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self._serve(conn)  # one client at a time, like a busy instrument's socket

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(0.05)
        pending = b""
        with conn:
            while not self._closing.is_set():
                try:
                    data = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                pending += data
                *lines, pending = pending.split(b"\n")
                for raw in lines:
                    line = raw.decode("ascii", "replace").strip()
                    if not line:
                        continue
                    reply = self.handle(line)
                    if reply is not None:
                        try:
                            conn.sendall(reply + b"\n")
                        except OSError:
                            return

    # -- commands -----------------------------------------------------------------------------
    def handle(self, line: str) -> bytes | None:
        """Answer one program message; a refused one goes on the error queue."""
        with self.lock:
            self.commands_seen.append(line)
            try:
                cmd = parse_command(line)
                return self._common(cmd)
            except ScpiFault as fault:
                self._push_error(fault.code, fault.text)
            except ProtocolError:
                self._push_error(-102, "Syntax error")
            except Exception as exc:  # a simulator bug must not leave the instrument mute
                log.exception("SCPI simulator: %r failed", line)
                self._push_error(-300, f"Device-specific error; simulator: {exc}")
            return None

    def _push_error(self, code: int, text: str) -> None:
        if len(self.errors) >= _QUEUE_DEPTH:
            self.errors[-1] = (-350, "Queue overflow")
        else:
            self.errors.append((code, text))

    def _common(self, cmd: Command) -> bytes | None:
        h = cmd.header.upper()
        if h == "*IDN" and cmd.query:
            return self.identity.encode("ascii")
        if h == "*CLS":
            self.errors.clear()
            return None
        if h == "*RST":
            self.reset()
            return None
        if h == "*OPC" and cmd.query:
            return b"1"
        if header_matches(cmd.header, "SYSTem:ERRor[:NEXT]") and cmd.query:
            code, text = self.errors.popleft() if self.errors else (0, "")
            return format_error(code, text).encode("ascii")
        if header_matches(cmd.header, "FORMat:BORDer") and not cmd.query:
            self._need_args(cmd, 1)
            word = cmd.args[0].upper()
            if word not in ("NORM", "NORMAL", "SWAP", "SWAPPED"):
                raise ScpiFault(-224, "Illegal parameter value")
            self.big_endian = word.startswith("NORM")
            return None
        return self.command(cmd)

    @staticmethod
    def _need_args(cmd: Command, count: int) -> None:
        if len(cmd.args) < count:
            raise ScpiFault(-109, "Missing parameter")
        if len(cmd.args) > count:
            raise ScpiFault(-108, "Parameter not allowed")

    def _dispatch(self, cmd: Command,
                  table: list[tuple[str, bool, Callable[[Command], bytes | None]]]) -> bytes | None:
        for pattern, query, handler in table:
            if cmd.query == query and header_matches(cmd.header, pattern):
                return handler(cmd)
        raise _undefined(cmd)

    def _wait_observable(self, t_ns: int) -> None:
        """Block (without the lock) until the world may report up to `t_ns`."""
        self.lock.release()
        try:
            deadline = time.monotonic() + FETCH_PATIENCE_S
            while self.world.observable_ns() < t_ns:
                if time.monotonic() > deadline or self._closing.is_set():
                    raise ScpiFault(-230, "Data corrupt or stale")
                self._closing.wait(min(0.01, max(self.world.clock.wall_delay_s(t_ns), 0.001)))
        finally:
            self.lock.acquire()

    def reset(self) -> None:
        """``*RST``: the instrument's defaults."""

    def command(self, cmd: Command) -> bytes | None:
        """Instrument-specific commands."""
        raise _undefined(cmd)

    def _block(self, values: np.ndarray, bits: int) -> bytes:
        return encode_reals(values, real_dtype(bits, big_endian=self.big_endian))

    def _mean_current(self, starts: np.ndarray, length_ns: int) -> np.ndarray:
        """Mean current over [s, s + length) for each start (with the bench's current noise)."""
        return self.world.mean_current(starts, length_ns)


class SimN6705(_ScpiServer):
    """One N6705 channel sourcing the DUT, with its digitizer."""

    identity = "Keysight Technologies,N6705C,MY00000001-SIM,D.03.01"
    #: The digitizer's interval grid (N678x SMU modules); also the raw reading interval behind
    #: an Elog record's minimum and maximum.
    GRID_NS = 5120
    MAX_POINTS = 524288
    #: Current measurement ranges of the simulated channel [A] (an N6781A-like SMU).
    RANGES = (1e-3, 0.1, 3.06)
    #: Modules whose auxiliary voltage input can be measured.
    AUX_MODULES = ("N6781A", "N6785A")
    #: Elog: shortest period per logged value, and the two period resolutions.
    ELOG_NS_PER_VALUE = 102_400
    ELOG_RES_NS: ClassVar[dict[str, int]] = {"RES20": 20_480, "RES40": 40_960}

    #: Emulations (``EMUL``, short forms) of an N678xA; those that source a voltage rail.
    EMULATIONS = ("PS4Q", "PS2Q", "PS1Q", "BATT", "CHAR", "CCL", "CVL", "VMET", "AMET")
    SUPPLY_EMULATIONS = ("PS4Q", "PS2Q", "PS1Q")
    #: The mainframe option without the external data logger (N6705 User's Guide).
    NO_ELOG_OPTION = "055"
    #: Remote over-voltage protection span of an N678xA, and its *RST value (MAX) (N6700
    #: Operating and Service Guide, VOLT:PROT:REM: "Positive: 0 - 22|MIN|MAX, *RST MAX").
    OVP_MAX_V = 22.0
    #: STAT:QUES:COND bit 0, OV: "Output is disabled by the over-voltage protection" (N6705C
    #: Operating and Service Guide, Questionable Status Group).
    QUES_OV = 1

    def __init__(self, world: World, *, channel: int = 1, module: str = "N6781A",
                 elog_fifo_s: float = 20.0, emulation: str = "PS2Q", priority: str = "VOLT",
                 options: tuple[str, ...] = ()) -> None:
        super().__init__(world)
        self.channel = channel
        self.module = module
        self.elog_fifo_s = elog_fifo_s
        #: The mainframe's options, as ``*OPT?`` lists them.
        self.options = tuple(options)
        #: (time, on) of every output switch, so the aux line knows when the DUT had power.
        self.output_log: list[tuple[int, bool]] = []
        self.reset()
        # What the last user left (an SMU's emulation and priority); *RST here keeps them: what
        # *RST does to them on the instrument is unconfirmed without hardware.
        self.emulation = emulation
        self.priority = priority

    @property
    def smu(self) -> bool:
        """An N678xA SMU: emulation and priority modes, ``CURR:LIM``."""
        return self.module.upper().startswith("N678")

    @property
    def current_limit_a(self) -> float:
        """The current limit in effect [A]."""
        return self.curr_limit

    def reset(self) -> None:
        """``*RST`` defaults (output off)."""
        self.volt = 0.0
        self.curr_limit = 0.1
        self.curr_level = 0.0  # an SMU's current-priority setting (not a limit)
        self.ovp_v = self.OVP_MAX_V  # an SMU's remote OVP level (*RST MAX)
        self.ovp_tripped = False  # the output disabled by the OVP (STAT:QUES:COND bit OV)
        self.output = False
        self.func_curr = True
        self.func_volt = False
        self.curr_range = self.RANGES[-1]
        self.interval_ns = 20480
        self.points = 1024
        self.offset = 0
        self.trigger_source = "BUS"
        self.pins: dict[int, dict[str, str]] = {}
        self.real_format = False
        self.big_endian = True
        self.armed_ns: int | None = None
        self.trigger_ns: int | None = None
        self.volt_input = "MAIN"
        self.elog_funcs = {"CURR": False, "CURR:MINM": False, "VOLT": False, "VOLT:MINM": False}
        self.elog_range = self.RANGES[-1]
        self.resolution = "RES20"
        self.elog_period_ns = 1_003_520  # about 1 ms
        self.elog_source = "BUS"
        self.elog_t0: int | None = None  # when logging started
        self.elog_end: int | None = None  # ABOR:ELOG
        self.elog_next = 0  # the next record a FETC:ELOG? returns
        self.elog_lost = 0
        self.elog_waiting = False  # initiated, waiting for TRIG:ELOG

    def _chan(self, text: str) -> None:
        try:
            chans = parse_channel_list(text)
        except ProtocolError:
            raise ScpiFault(-224, "Illegal parameter value") from None
        if chans != [self.channel]:
            raise ScpiFault(-222, "Data out of range")

    def _value_chan(self, cmd: Command) -> str:
        self._need_args(cmd, 2)
        self._chan(cmd.args[1])
        return cmd.args[0]

    def command(self, cmd: Command) -> bytes | None:
        h = cmd.header.upper()
        if h == "*OPT" and cmd.query:
            return (",".join(self.options) or "0").encode("ascii")
        if "ELOG" in h.split(":") and self.NO_ELOG_OPTION in self.options:
            raise ScpiFault(-241, "Hardware missing")  # option 055: no external data logger
        if h.startswith(("DIG:PIN", "DIGITAL:PIN", "SOUR:DIG:PIN")):
            self._pin(cmd)
            return None
        table: list[tuple[str, bool, Callable[[Command], bytes | None]]] = [
            ("[SOURce]:VOLTage[:LEVel][:IMMediate][:AMPLitude]", False, self._volt),
            ("[SOURce]:VOLTage[:LEVel][:IMMediate][:AMPLitude]", True, self._volt_q),
            ("SYSTem:CHANnel:MODel", True, self._model_q),
            ("[SENSe]:FUNCtion:VOLTage:INPut", False, self._volt_input),
            ("[SENSe]:ELOG:FUNCtion:CURRent", False, self._elog_func("CURR")),
            ("[SENSe]:ELOG:FUNCtion:CURRent:MINMax", False, self._elog_func("CURR:MINM")),
            ("[SENSe]:ELOG:FUNCtion:VOLTage", False, self._elog_func("VOLT")),
            ("[SENSe]:ELOG:FUNCtion:VOLTage:MINMax", False, self._elog_func("VOLT:MINM")),
            ("[SENSe]:ELOG:CURRent[:DC]:RANGe[:UPPer]", False, self._elog_range_set),
            ("[SENSe]:ELOG:CURRent[:DC]:RANGe[:UPPer]", True, self._elog_range_q),
            ("[SENSe]:ELOG:PERiod", False, self._elog_per),
            ("[SENSe]:ELOG:PERiod", True, self._elog_per_q),
            ("[SENSe]:SWEep:TINTerval:RESolution", False, self._resolution_set),
            ("TRIGger:ELOG:SOURce", False, self._elog_trig_source),
            ("TRIGger:ELOG[:IMMediate]", False, self._elog_trigger),
            ("INITiate[:IMMediate]:ELOG", False, self._elog_init),
            ("ABORt:ELOG", False, self._elog_abort),
            ("FETCh:ELOG", True, self._elog_fetch),
            ("[SOURce]:CURRent[:LEVel][:IMMediate][:AMPLitude]", False, self._curr),
            ("[SOURce]:CURRent:LIMit[:POSitive][:IMMediate][:AMPLitude]", False,
             self._curr_lim),
            ("[SOURce]:EMULation", False, self._emul),
            ("[SOURce]:FUNCtion", False, self._func),
            ("OUTPut[:STATe]", False, self._outp),
            ("[SENSe]:FUNCtion:CURRent", False, self._func_curr),
            ("[SENSe]:FUNCtion:VOLTage", False, self._func_volt),
            ("[SENSe]:CURRent[:DC]:RANGe[:UPPer]", False, self._range),
            ("[SENSe]:CURRent[:DC]:RANGe[:UPPer]", True, self._range_q),
            ("[SENSe]:SWEep:TINTerval", False, self._tint),
            ("[SENSe]:SWEep:TINTerval", True, self._tint_q),
            ("[SENSe]:SWEep:POINts", False, self._points),
            ("[SENSe]:SWEep:OFFSet:POINts", False, self._offset),
            ("TRIGger:ACQuire:SOURce", False, self._trig_source),
            ("TRIGger:ACQuire[:IMMediate]", False, self._trig_now),
            ("FORMat[:DATA]", False, self._format),
            ("INITiate[:IMMediate]:ACQuire", False, self._init),
            ("ABORt:ACQuire", False, self._abort),
            ("STATus:OPERation:CONDition", True, self._status),
            ("STATus:QUEStionable:CONDition", True, self._ques_q),
            ("[SOURce]:VOLTage:PROTection:REMote[:POSitive][:LEVel]", False, self._ovp),
            ("[SOURce]:VOLTage:PROTection:REMote[:POSitive][:LEVel]", True, self._ovp_q),
            ("FETCh:ARRay:CURRent[:DC]", True, self._fetch_curr),
            ("FETCh:ARRay:VOLTage[:DC]", True, self._fetch_volt),
        ]
        return self._dispatch(cmd, table)

    def _volt(self, cmd: Command) -> None:
        self._set_volt(_number(self._value_chan(cmd), 0.0, 20.4))

    def front_panel_voltage(self, volts: float) -> None:
        """A user turning the voltage knob: the level changes without a SCPI command (and
        without the host's limit check); the OVP still guards the output."""
        with self.lock:
            self._set_volt(float(volts))

    def _set_volt(self, volts: float) -> None:
        self.volt = volts
        if self.output and self._over_ovp():
            self._trip()  # the output goes off before the rail would rise above the level
        self.world.set_supply(self.volt)

    def _over_ovp(self) -> bool:
        """The programmed voltage is above an SMU's OVP level (the sim's output is exact)."""
        return self.smu and self.volt > self.ovp_v

    def _trip(self) -> None:
        self.ovp_tripped = True
        self._switch_output(False)

    def _ovp(self, cmd: Command) -> None:
        self._smu_only()
        self.ovp_v = _number(self._value_chan(cmd), 0.0, self.OVP_MAX_V)
        if self.output and self._over_ovp():
            self._trip()

    def _ovp_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        self._smu_only()
        return f"{self.ovp_v:+.6E}".encode("ascii")  # the guide: +n.nnnnnnE+nn

    def _ques_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        return str(self.QUES_OV if self.ovp_tripped else 0).encode("ascii")

    def _curr(self, cmd: Command) -> None:
        value = _number(self._value_chan(cmd), 0.0, 3.06)
        if self.smu:
            self.curr_level = value  # current priority's setting: in voltage priority, no limit
        else:
            self.curr_limit = value

    def _smu_only(self) -> None:
        if not self.smu:
            raise ScpiFault(-241, "Hardware missing")

    def _curr_lim(self, cmd: Command) -> None:
        self._smu_only()
        self.curr_limit = _number(self._value_chan(cmd), 0.0, 3.06)

    def _emul(self, cmd: Command) -> None:
        self._smu_only()
        word = self._value_chan(cmd).upper()
        short = next((e for e in self.EMULATIONS if word.startswith(e)), None)
        if short is None:
            raise ScpiFault(-224, "Illegal parameter value")
        self.emulation = short

    def _func(self, cmd: Command) -> None:
        self._smu_only()
        word = self._value_chan(cmd).upper()
        if word not in ("VOLT", "VOLTAGE", "CURR", "CURRENT"):
            raise ScpiFault(-224, "Illegal parameter value")
        priority = word[:4]
        if priority != self.priority:
            # N6705C User's Guide: the output turns off and its settings revert to *RST values.
            self._switch_output(False)
            self.volt, self.curr_limit, self.curr_level = 0.0, 0.1, 0.0
            self.ovp_v = self.OVP_MAX_V
            self.priority = priority

    def _outp(self, cmd: Command) -> None:
        on = _switch(self._value_chan(cmd))
        if on and (self.volt <= 0 or (self.smu and (
                self.emulation not in self.SUPPLY_EMULATIONS or self.priority != "VOLT"))):
            # Only a voltage-priority supply sources the simulated DUT rail.
            self._switch_output(False)
            raise ScpiFault(-221, "Settings conflict")
        if on and (self.ovp_tripped or self._over_ovp()):
            self._trip()  # latched off; at once off if the level is above the OVP
            return
        self._switch_output(on)

    def _switch_output(self, on: bool) -> None:
        self.output = on
        t = self.world.power(on)
        if not self.output_log or self.output_log[-1][1] != on:
            self.output_log.append((t, on))

    def _volt_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        return f"{self.volt:+.6E}".encode("ascii")

    def _model_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        return self.module.encode("ascii")

    def _volt_input(self, cmd: Command) -> None:
        word = self._value_chan(cmd).upper()
        if word not in ("MAIN", "AUX", "AUXILIARY"):
            raise ScpiFault(-224, "Illegal parameter value")
        if word != "MAIN" and self.module not in self.AUX_MODULES:
            raise ScpiFault(-241, "Hardware missing")
        self.volt_input = word[:3] if word != "MAIN" else "MAIN"

    def _func_curr(self, cmd: Command) -> None:
        self.func_curr = _switch(self._value_chan(cmd))

    def _func_volt(self, cmd: Command) -> None:
        self.func_volt = _switch(self._value_chan(cmd))

    def _range(self, cmd: Command) -> None:
        value = _number(self._value_chan(cmd), 0.0, self.RANGES[-1])
        self.curr_range = next(r for r in self.RANGES if r >= value * (1 - 1e-9))

    def _range_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        return repr(self.curr_range).encode("ascii")

    def _tint(self, cmd: Command) -> None:
        seconds = _number(self._value_chan(cmd), self.GRID_NS / NS, 40e-3)
        self.interval_ns = max(1, round(seconds * NS / self.GRID_NS)) * self.GRID_NS

    def _tint_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        return repr(self.interval_ns / NS).encode("ascii")

    def _points(self, cmd: Command) -> None:
        self.points = int(_number(self._value_chan(cmd), 1, self.MAX_POINTS))

    def _offset(self, cmd: Command) -> None:
        self.offset = int(_number(self._value_chan(cmd), -(self.MAX_POINTS - 1), 2e9))

    def _pin(self, cmd: Command) -> None:
        parts = cmd.header.upper().split(":")
        pin_node = next((p for p in parts if p.startswith("PIN")), "")
        if not pin_node[3:].isdigit() or not 1 <= int(pin_node[3:]) <= 7:
            raise ScpiFault(-113, "Undefined header")
        pin = int(pin_node[3:])
        self._need_args(cmd, 1)
        value = cmd.args[0].upper()
        if parts[-1] in ("FUNC", "FUNCTION"):
            if value not in ("TINP", "TINPUT", "DIO", "DINP", "DINPUT", "TOUT", "TOUTPUT"):
                raise ScpiFault(-224, "Illegal parameter value")
            self.pins.setdefault(pin, {})["function"] = value[:4]
        elif parts[-1] in ("POL", "POLARITY"):
            if value not in ("POS", "POSITIVE", "NEG", "NEGATIVE"):
                raise ScpiFault(-224, "Illegal parameter value")
            self.pins.setdefault(pin, {})["polarity"] = value[:3]
        else:
            raise ScpiFault(-113, "Undefined header")

    def _trig_source(self, cmd: Command) -> None:
        source = self._value_chan(cmd).upper()
        if source not in ("BUS", "EXT", "EXTERNAL") and not (
            source.startswith("PIN") and source[3:].isdigit() and 1 <= int(source[3:]) <= 7
        ):
            raise ScpiFault(-224, "Illegal parameter value")
        self.trigger_source = source[:3] if source.startswith("EXT") else source

    def _format(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        word = cmd.args[0].upper()
        if word not in ("REAL", "ASC", "ASCII", "ASCI"):
            raise ScpiFault(-224, "Illegal parameter value")
        self.real_format = word == "REAL"

    def _init(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        if self.trigger_source.startswith("PIN"):
            pin = self.pins.get(int(self.trigger_source[3:]), {})
            if pin.get("function") != "TINP" or pin.get("polarity") != "NEG":
                # Only the falling edge on a trigger-input pin is wired to the DUT here.
                raise ScpiFault(-221, "Settings conflict")
        elif self.trigger_source == "EXT":
            raise ScpiFault(-221, "Settings conflict")  # no external trigger wired in the sim
        if -self.offset >= self.points:
            raise ScpiFault(-221, "Settings conflict")
        self.armed_ns = self.world.clock.now_ns()
        self.trigger_ns = None

    def _trig_now(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        if self.armed_ns is None or self.trigger_source != "BUS":
            raise ScpiFault(-211, "Trigger ignored")
        self.trigger_ns = max(self.world.clock.now_ns(), self._pretrigger_end())

    def _abort(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        self.armed_ns = None
        self.trigger_ns = None

    def _pretrigger_end(self) -> int:
        assert self.armed_ns is not None
        return self.armed_ns + max(0, -self.offset) * self.interval_ns

    def _find_trigger(self) -> None:
        """Look for the falling edge that triggers (only in time the world may report)."""
        if self.armed_ns is None or self.trigger_ns is not None:
            return
        if not self.trigger_source.startswith("PIN"):
            return
        edges = self.world.falling_edges_between(self._pretrigger_end(),
                                                 self.world.observable_ns() + 1)
        if edges:
            self.trigger_ns = edges[0]

    def _capture_starts(self) -> np.ndarray:
        """Start time of every sample of the triggered capture (on the grid from the arm time)."""
        assert self.armed_ns is not None and self.trigger_ns is not None
        p = self.interval_ns
        trigger_sample = (self.trigger_ns - self.armed_ns) // p
        first = trigger_sample + self.offset  # offset < 0 keeps points before the trigger
        k = np.arange(first, first + self.points, dtype=np.int64)
        return self.armed_ns + k * p

    def _capture_end_ns(self) -> int | None:
        if self.armed_ns is None or self.trigger_ns is None:
            return None
        return int(self._capture_starts()[-1]) + self.interval_ns

    def _status(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        bits = 0
        if self.armed_ns is not None:
            self._find_trigger()
            end = self._capture_end_ns()
            if end is None:
                bits = 8 | 16
            elif self.world.observable_ns() < end:
                bits = 16
        return str(bits | (1 if self.output else 0)).encode("ascii")

    def _fetch(self, cmd: Command) -> np.ndarray:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        if self.armed_ns is None:
            raise ScpiFault(-230, "Data corrupt or stale")
        self._find_trigger()
        end = self._capture_end_ns()
        if end is None:
            raise ScpiFault(-230, "Data corrupt or stale")
        self._wait_observable(end)
        return self._capture_starts()

    def _fetch_curr(self, cmd: Command) -> bytes:
        starts = self._fetch(cmd)
        if not self.func_curr:
            raise ScpiFault(-221, "Settings conflict")
        current = self._mean_current(starts, self.interval_ns)
        return self._values(current)

    def _fetch_volt(self, cmd: Command) -> bytes:
        starts = self._fetch(cmd)
        if not self.func_volt:
            raise ScpiFault(-221, "Settings conflict")
        with self.world.lock:
            volts = self.world.supply_v if self.world.powered else 0.0
        return self._values(np.full(len(starts), volts))

    def _values(self, values: np.ndarray) -> bytes:
        if self.real_format:
            return self._block(values, 32)
        return ",".join(f"{v:.6E}" for v in values.tolist()).encode("ascii")

    # -- the external data logger (Elog) -------------------------------------------------------
    def _elog_func(self, key: str) -> Callable[[Command], None]:
        def handler(cmd: Command) -> None:
            self.elog_funcs[key] = _switch(self._value_chan(cmd))
        return handler

    def _elog_range_set(self, cmd: Command) -> None:
        value = _number(self._value_chan(cmd), 0.0, self.RANGES[-1])
        self.elog_range = next(r for r in self.RANGES if r >= value * (1 - 1e-9))

    def _elog_range_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        return repr(self.elog_range).encode("ascii")

    def _elog_per(self, cmd: Command) -> None:
        seconds = _number(self._value_chan(cmd), 0.0, 60.0)
        step = self.ELOG_RES_NS[self.resolution]
        self.elog_period_ns = max(1, round(seconds * NS / step)) * step

    def _elog_per_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        return repr(self.elog_period_ns / NS).encode("ascii")

    def _resolution_set(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        word = cmd.args[0].upper()
        if word not in self.ELOG_RES_NS:
            raise ScpiFault(-224, "Illegal parameter value")
        self.resolution = word

    def _elog_trig_source(self, cmd: Command) -> None:
        word = self._value_chan(cmd).upper()
        if word not in ("IMM", "IMMEDIATE", "BUS"):
            raise ScpiFault(-224, "Illegal parameter value")  # only what the sim wires
        self.elog_source = word[:3]

    def _elog_values(self) -> int:
        """Values per record: current and voltage, each with its min and max when enabled."""
        f = self.elog_funcs
        return sum((1 + 2 * f[f"{q}:MINM"]) for q in ("CURR", "VOLT") if f[q])

    def _elog_init(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        values = self._elog_values()
        shortest = values * self.ELOG_NS_PER_VALUE
        if not values or self.elog_period_ns < shortest or (
                values > 4 and self.resolution == "RES20"):
            raise ScpiFault(-221, "Settings conflict")
        if not self.real_format:
            raise ScpiFault(-221, "Settings conflict")  # ASCII cannot keep up (guide); not sim'd
        self.elog_t0 = None
        self.elog_end = None
        self.elog_next = self.elog_lost = 0
        self.elog_waiting = True
        if self.elog_source == "IMM":
            self._elog_start()

    def _elog_start(self) -> None:
        self.elog_t0 = self.world.clock.now_ns()
        self.elog_waiting = False

    def _elog_trigger(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        if not self.elog_waiting:
            raise ScpiFault(-211, "Trigger ignored")
        self._elog_start()

    def _elog_abort(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self._chan(cmd.args[0])
        self.elog_waiting = False
        if self.elog_t0 is not None and self.elog_end is None:
            self.elog_end = self.world.observable_ns()

    def _elog_fetch(self, cmd: Command) -> bytes:
        self._need_args(cmd, 2)
        self._chan(cmd.args[1])
        wanted = int(_number(cmd.args[0], 1, 2e9))
        if self.elog_t0 is None:
            if self.elog_waiting:
                return self._block(np.empty(0), 32)  # waiting for its trigger: nothing yet
            raise ScpiFault(-230, "Data corrupt or stale")
        p = self.elog_period_ns
        until = self.world.observable_ns() if self.elog_end is None else self.elog_end
        done = max(0, (until - self.elog_t0) // p)
        fifo = max(1, int(self.elog_fifo_s * NS) // p)
        if done - self.elog_next > fifo:  # the host fell behind: the oldest records are gone
            lost = done - self.elog_next - fifo
            self.elog_lost += lost
            self.elog_next += lost
            self._push_error(-230, f"Data corrupt or stale; Elog FIFO overrun, {lost} records "
                             "lost")
        count = min(wanted, done - self.elog_next)
        ks = np.arange(self.elog_next, self.elog_next + count, dtype=np.int64)
        self.elog_next += count
        if count == 0:
            return self._block(np.empty(0), 32)
        starts = self.elog_t0 + ks * p
        columns = []
        f = self.elog_funcs
        if f["CURR"]:
            current = self._mean_current(starts, p)
            columns.append(current)
            if f["CURR:MINM"]:  # the model is flat inside a record between steps: approximate
                columns += [current, current]
        if f["VOLT"]:
            avg, low, high = self._volt_records(starts, p)
            columns.append(avg)
            if f["VOLT:MINM"]:
                columns += [low, high]
        if int(starts[0]) - getattr(self, "_forgot_ns", 0) >= NS:
            self.world.forget_before(int(starts[0]))  # bounded memory over a long log
            self._forgot_ns = int(starts[0])
        return self._block(np.column_stack(columns).ravel(), 32)

    def _volt_records(self, starts: np.ndarray,
                      p: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(average, minimum, maximum) voltage of each record [s, s + p)."""
        with self.world.lock:
            volts = self.world.supply_v
        a, b = int(starts[0]), int(starts[-1]) + p
        lows = self._off_intervals(a, b)
        if self.volt_input == "AUX":
            lows += self.world.pulses_between(a, b)
        lows = _merged(lows)
        bounds = np.concatenate((starts, [b])).astype(np.float64)
        if lows:
            # Low time up to t: piecewise linear through the intervals' ends (lo1, hi1, lo2...).
            x = np.asarray(lows, dtype=np.float64).ravel()
            total = np.concatenate(([0.0], np.cumsum(x[1::2] - x[0::2])))
            y = np.empty(len(x))
            y[0::2], y[1::2] = total[:-1], total[1:]
            low_time = np.diff(np.interp(bounds, x, y))
        else:
            low_time = np.zeros(len(starts))
        avg = volts * (1.0 - low_time / p)
        high = np.where(low_time < p, volts, 0.0)
        # The minimum is over raw readings on the 5.12 us grid from the log's start.
        low = np.full(len(starts), volts)
        assert self.elog_t0 is not None
        g, t0 = self.GRID_NS, self.elog_t0
        for lo, hi in lows:
            first = t0 + -((t0 - lo) // g) * g  # the first raw reading at or after lo
            if first >= hi:
                continue  # no reading fell inside: the instrument never saw this low
            last = t0 + ((hi - 1 - t0) // g) * g
            k0 = max(0, (first - a) // p)
            k1 = min(len(starts) - 1, (last - a) // p)
            low[k0 : k1 + 1] = 0.0
        return avg, low, high

    def _off_intervals(self, a: int, b: int) -> list[tuple[int, int]]:
        """Spans of [a, b) in which the output was off."""
        out: list[tuple[int, int]] = []
        off_from: int | None = a  # off before the first switch
        for t, on in self.output_log:
            if on and off_from is not None:
                out.append((off_from, t))
                off_from = None
            elif not on and off_from is None:
                off_from = t
        if off_from is not None:
            out.append((off_from, b))
        return [(max(lo, a), min(hi, b)) for lo, hi in out if hi > a and lo < b]


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping union of half-open intervals (a few per fetch)."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


class Sim34465A(_ScpiServer):
    """A 34465A (DIG option) digitizing DC current, started by its external trigger input."""

    identity = "Keysight Technologies,34465A,MY00000002-SIM,A.03.01-02.40-03.01-00.52-01-01"
    MEMORY = 50_000
    OVERLOAD = 9.9e37
    _RANGES = (1e-6, 10e-6, 100e-6, 1e-3, 10e-3, 100e-3, 1.0, 3.0, 10.0)

    def __init__(self, world: World, *, memory: int = MEMORY) -> None:
        super().__init__(world)
        self.memory = memory
        self.reset()

    def reset(self) -> None:
        """``*RST`` defaults."""
        self.function = "VOLT:DC"
        self.curr_range = 1.0
        self.aperture_ns: int | None = None
        self.trigger_source = "IMM"
        self.trigger_slope = "NEG"
        self.trigger_delay_ns = 0
        self.trigger_count = 1
        self.sample_source = "IMM"
        self.sample_ns = 1_000_000
        self.sample_count = 1
        self.real_bits: int | None = None
        self.big_endian = True
        self.armed_ns: int | None = None
        self.trigger_ns: int | None = None
        self.stopped_count: int | None = None  # readings taken when ABOR came
        self.read_count = 0
        self.lost = 0

    def command(self, cmd: Command) -> bytes | None:
        table: list[tuple[str, bool, Callable[[Command], bytes | None]]] = [
            ("CONFigure:CURRent[:DC]", False, self._conf),
            ("[SENSe]:CURRent[:DC]:RANGe[:UPPer]", True, self._range_q),
            ("[SENSe]:CURRent[:DC]:APERture", False, self._aper),
            ("TRIGger:SOURce", False, self._trig_source),
            ("TRIGger:SLOPe", False, self._trig_slope),
            ("TRIGger:DELay", False, self._trig_delay),
            ("TRIGger:COUNt", False, self._trig_count),
            ("SAMPle:SOURce", False, self._samp_source),
            ("SAMPle:TIMer", False, self._samp_timer),
            ("SAMPle:TIMer", True, lambda c: repr(self.sample_ns / NS).encode("ascii")),
            ("SAMPle:COUNt", False, self._samp_count),
            ("FORMat[:DATA]", False, self._format),
            ("INITiate[:IMMediate]", False, self._init),
            ("ABORt", False, self._abort),
            ("DATA:POINts", True, self._points),
            ("R", True, self._read),
        ]
        return self._dispatch(cmd, table)

    def _conf(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        value = _number(cmd.args[0], 0.0, 10.0)
        fits = [r for r in self._RANGES if r >= value * (1 - 1e-9)]
        self.function = "CURR:DC"
        self.curr_range = fits[0]
        self.trigger_source, self.trigger_count, self.sample_count = "IMM", 1, 1
        self.armed_ns = None

    def _range_q(self, cmd: Command) -> bytes:
        self._need_args(cmd, 0)
        return f"{self.curr_range:+.8E}".encode("ascii")

    def _aper(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self.aperture_ns = round(_number(cmd.args[0], 2e-6, 1.0) * NS)

    def _trig_source(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        word = cmd.args[0].upper()
        if word not in ("EXT", "EXTERNAL", "IMM", "IMMEDIATE"):
            raise ScpiFault(-224, "Illegal parameter value")
        self.trigger_source = word[:3]

    def _trig_slope(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        word = cmd.args[0].upper()
        if word not in ("NEG", "NEGATIVE", "POS", "POSITIVE"):
            raise ScpiFault(-224, "Illegal parameter value")
        self.trigger_slope = word[:3]

    def _trig_delay(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self.trigger_delay_ns = round(_number(cmd.args[0], 0.0, 3600.0) * NS)

    def _trig_count(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self.trigger_count = int(_number(cmd.args[0], 1, 1e6))

    def _samp_source(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        word = cmd.args[0].upper()
        if word not in ("TIM", "TIMER", "IMM", "IMMEDIATE"):
            raise ScpiFault(-224, "Illegal parameter value")
        self.sample_source = word[:3]

    def _samp_timer(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        # The timer resolves 1 µs in this simulation (whole ns keep the sample grid exact).
        self.sample_ns = round(_number(cmd.args[0], 20e-6, 3600.0) * 1e6) * 1000

    def _samp_count(self, cmd: Command) -> None:
        self._need_args(cmd, 1)
        self.sample_count = int(_number(cmd.args[0], 1, 1e9))

    def _format(self, cmd: Command) -> None:
        if not cmd.args or cmd.args[0].upper() not in ("REAL", "ASC", "ASCII"):
            raise ScpiFault(-224, "Illegal parameter value")
        if cmd.args[0].upper() == "REAL":
            bits = int(_number(cmd.args[1], 32, 64)) if len(cmd.args) > 1 else 64
            if bits not in (32, 64):
                raise ScpiFault(-224, "Illegal parameter value")
            self.real_bits = bits
        else:
            self.real_bits = None

    def _init(self, cmd: Command) -> None:
        self._need_args(cmd, 0)
        if self.function != "CURR:DC":
            raise ScpiFault(-221, "Settings conflict")
        if self.trigger_slope != "NEG" or self.sample_source != "TIM" or self.trigger_count != 1:
            # Only what the rig wires is simulated: one falling-edge trigger, timed samples.
            raise ScpiFault(-221, "Settings conflict")
        aperture = self.aperture_ns if self.aperture_ns is not None else self.sample_ns
        if aperture > self.sample_ns:
            raise ScpiFault(-221, "Settings conflict")
        self.armed_ns = self.world.clock.now_ns()
        self.trigger_ns = self.armed_ns if self.trigger_source == "IMM" else None
        self.stopped_count = None
        self.read_count = 0
        self.lost = 0

    def _abort(self, cmd: Command) -> None:
        self._need_args(cmd, 0)
        if self.armed_ns is not None and self.stopped_count is None:
            self.stopped_count = self._taken()
        self.armed_ns = None if self.trigger_ns is None else self.armed_ns

    def _taken(self) -> int:
        """Readings taken so far (whose aperture ended by the observable time)."""
        if self.stopped_count is not None:
            return self.stopped_count
        if self.armed_ns is None:
            return 0
        if self.trigger_ns is None:
            edges = self.world.falling_edges_between(self.armed_ns, self.world.observable_ns() + 1)
            if not edges:
                return 0
            self.trigger_ns = edges[0]
        first = self.trigger_ns + self.trigger_delay_ns
        aperture = self.aperture_ns if self.aperture_ns is not None else self.sample_ns
        done = self.world.observable_ns() - first - aperture
        if done < 0:
            return 0
        return min(self.sample_count, done // self.sample_ns + 1)

    def _in_memory(self) -> int:
        waiting = self._taken() - self.read_count - self.lost
        if waiting > self.memory:  # memory full: later readings are lost
            self.lost += waiting - self.memory
            waiting = self.memory
        return waiting

    def _points(self, cmd: Command) -> bytes:
        self._need_args(cmd, 0)
        return str(self._in_memory()).encode("ascii")

    def _read(self, cmd: Command) -> bytes:
        self._need_args(cmd, 1)
        wanted = int(_number(cmd.args[0], 1, 2e9))
        count = min(wanted, self._in_memory())
        start = self.read_count + self.lost
        self.read_count += count
        assert self.trigger_ns is not None or count == 0
        first = (self.trigger_ns or 0) + self.trigger_delay_ns
        starts = first + np.arange(start, start + count, dtype=np.int64) * self.sample_ns
        aperture = self.aperture_ns if self.aperture_ns is not None else self.sample_ns
        current = self._mean_current(starts, aperture)
        current = np.where(np.abs(current) > 1.2 * self.curr_range, self.OVERLOAD, current)
        if self.real_bits is None:
            return ",".join(f"{v:+.9E}" for v in current.tolist()).encode("ascii")
        return self._block(current, self.real_bits)
