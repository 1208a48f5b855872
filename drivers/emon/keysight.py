"""Keysight N6705 (DC power analyzer: sources the DUT rail and digitizes its current) and 34465A
(DMM: digitizes DC current) through pyvisa, with SCPI binary blocks (`protocols.scpi`).

Timestamp GPIO and windowing. With its defaults (``timestamp_input="gpio"``) neither instrument
samples a logic line next to the current: the DUT's timestamp line reaches them only as a
trigger input. What the rig can do with each:

- N6705 digitizer (implemented): one capture of ``points`` samples at ``1/SENS:SWE:TINT``, armed by
  ``INIT:ACQ`` and triggered by the first falling edge on a digital-port pin (``PIN<n>``, the pin
  set to trigger input, negative polarity), or by ``EXT``/``BUS``. ``pretrigger`` points before
  the trigger are kept (``SENS:SWE:OFFS:POIN -pretrigger``), so the trigger sample is capture index
  ``pretrigger`` exactly; the driver marks it as a falling edge in ``gpio``. The capture is
  fetched (``FETC:ARR:CURR?``/``VOLT?``) when it is complete and delivered then: the digitizer
  cannot stream, so `stop()` waits for a triggered capture to fill (an untriggered one is aborted).
- 34465A (implemented): ``TRIG:SOUR EXT``, ``TRIG:SLOP NEG``; the first falling edge starts a timed
  sample train (``SAMP:SOUR TIM``) of up to ``max_samples`` readings, read back while acquiring
  with ``DATA:POIN?`` + ``R? <n>`` and delivered live. The trigger sample is sample 0 (no
  pre-trigger), marked as a falling edge. It has no second input sampled with the current, so it
  can never see every edge of a run: ASC energy needs another monitor.
- Later edges (the end of a run, the next run) are invisible to a trigger. Those two modes set
  `sees_every_edge` False, and the rig refuses ASC energy windows with them (`every_edge_hint`).

N6705 source settings (both modes). The channel's module is asked for first (``SYST:CHAN:MOD?
(@ch)``): it decides the commands. An N678xA SMU is set the way the EEMBC EnergyRunner's
``n6705b.js`` (github.com/petertorelli/ni-visa) sets its N6781: ``EMUL PS2Q`` (two-quadrant
power supply) and ``FUNC VOLT`` (voltage priority), then ``VOLT:LEV`` and ``CURR:LIM``. Both
modes are set explicitly rather than kept from the last user, and before the levels: switching
priority turns the output off and reverts the output settings to their *RST values (N6705C
User's Guide, "Using the Source/Load Functions"). In voltage priority the current limit is
``CURR:LIM``; plain ``CURR`` (``CURR:LEV``) is the current-priority setting and limits nothing.
Other modules (no emulation, no priority) get ``VOLT:LEV`` and ``CURR:LEV``, as n6705b.js sends
to its N6731. Unconfirmed without hardware: that the N6782A/N6784A/N6785A/N6786A take ``EMUL
PS2Q`` as the N6781 does (if one refuses it, the error queue check names the command).

Over-voltage protection. The rig refuses a supply above the bench's ``voltage_limit_v`` before
sending a byte; the instrument is told the limit too, so a front-panel change or a driver bug
cannot hold the DUT above it. On an N678xA the limit is sent as its remote OVP, ``VOLT:PROT:REM
<limit>,(@ch)``, after the levels and before ``OUTP ON``, as n6705b.js sends ``VOLT:PROT:REM
3.3`` to its N6781 (N6700 Operating and Service Guide: above it "the output is disabled and the
Questionable Condition status register OV bit is set"). After ``OUTP ON`` the driver reads
``STAT:QUES:COND? (@ch)`` and an output the protection disabled is `InstrumentError`. Other
modules get no OVP command (none confirmed by a public source; see `PLAIN_SOURCE_SETTINGS`), and
`settings()` says so.

N6705 with the timestamp line on an SMU's auxiliary input (``timestamp_input="aux"``, N6781A or
N6785A channel only; ``SYST:CHAN:MOD? (@ch)`` is checked first). ``SENS:FUNC:VOLT:INP AUX`` is
meant to make the channel's voltage converter measure the module's auxiliary voltage input
instead of the output. Unconfirmed by any public source: no public guide, driver or host program
we could find shows this command or its ``AUX`` parameter (issue 35, item 14); its form stays to
be checked on a real N6781A, and a refusal is reported by the error queue check as
`InstrumentError` naming it. The N678xA measure voltage and current simultaneously, so the line
is sampled on the instrument's clock, beside the current. The external data logger it uses is
absent on mainframes with option 055 (N6705 User's Guide, "External Data Logging": "not
available if Option 055 has been ordered"): ``*OPT?`` is read before any setting and such a
mainframe is refused (`ElogUnavailable`). Three ways exist to record both channels for a whole
run:

- the built-in data logger (``SENS:DLOG:FUNC:VOLT/CURR``, ``INIT:DLOG``, ``MMEM:EXP:DLOG``): gap
  free down to 20.48 us, but into a file on the instrument read back after the log, and it takes
  the measurement resources of every output (N6705 user's guide, "External Data Logging", table of
  built-in vs external logger). ASC waits for each window's edges while it runs: not usable live;
- the digitizer in segments (``INIT:ACQ`` again and again): a gap at every re-arm and fetch, which
  can swallow an edge or a part of a window;
- the external data logger, Elog (``SENS:ELOG:*``, ``INIT:ELOG``, ``FETC:ELOG? <n>,(@ch)``,
  ``ABOR:ELOG``): runs continuously per output into a FIFO of about 20 s that the host empties
  while it runs; each record is the period's current average and, with ``SENS:ELOG:FUNC:VOLT:MINM
  ON``, the voltage average, minimum and maximum, in that order, as a REAL block (N6700/N6705
  guides, "External Data Logging": "samples are averaged, and min and max values are tracked").

The driver uses Elog (implemented): gap-free and live. Its cost: the shortest integration period
is 102.4 us per logged parameter, so current + voltage + min/max (4 parameters) log at most every
409.6 us (2441 Hz), in steps of 20.48 us (the default ``SENS:SWE:TINT:RES RES20``; the period in
effect is read back with ``SENS:ELOG:PER?``). The voltage *minimum* of
each record is thresholded with hysteresis (`aux_line.LineThreshold`, 30 % / 70 % of the supply by
default) into bit 0 of ``gpio``, so a pulse far shorter than the period still marks the record
that holds it; it must be longer than the instrument's raw reading interval (5.12 us on the
N678xA) to be seen for sure: hold the timestamp low for 10 us or more. The edges are then found
like any other monitor's GPIO (rig/run/recording.py) and `sees_every_edge` is True. The error queue
is read after every fetch, so an error the instrument reports while logging (a FIFO overrun
included) ends the run at once (`fault`).

Power in aux mode: the voltage converter measures the aux input, not the output, so the voltage
of every sample is the output's programmed voltage as the instrument reads it back (``VOLT?
(@ch)``), never the aux channel; with remote sense wired at the DUT the SMU holds the DUT's
terminals at it within its programming accuracy. `settings()` says so (``voltage_source``).

Current range. ``current_range_a`` (amps, from the bench's ``[emon] current_range``) is sent
as ``SENS:CURR:RANG <a>,(@ch)`` (N6705) or ``CONF:CURR:DC <a>`` (34465A); the instrument takes
its smallest range that holds the value, and the range it reports back (``SENS:CURR:RANG?
(@ch)``, ``CURR:DC:RANG?``) is the one in `settings()`. "auto" (``current_range_a=None``) keeps
the fixed `ranges.KEYSIGHT_DEFAULT_RANGE_A` (0.1 A) rather than autoranging: on the 34465A a
range change inside a timed sample train delays that sample and, when it takes longer than the
interval, offsets every later one (the Truevolt guide asks for a fixed range in triggered and
timed measurements), and the rig's times are sample counts; on the N6705 measurement
autoranging (``SENS:CURR:RANG:AUTO``, "seamless ranging") exists only on the N678xA SMU
modules, so sending it would be refused by the other modules.

The 34465A does not source the DUT: `power_on`/`power_off` only record the request (the bench's
supply switches the DUT) and ``voltage`` is the configured supply as a constant array.
After every configuration command the error queue is read (``SYST:ERR?``), so an error names the
command that caused it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from drivers.emon import ranges
from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy
from drivers.emon.aux_line import LineThreshold
from drivers.emon.base import (
    AcquisitionThread,
    Chunk,
    ChunkCallback,
    EnergyMonitor,
    check_voltage,
    identifies_as_simulator,
)
from drivers.errors import DeviceError, DeviceTimeout, InstrumentError, PortError
from protocols.errors import ProtocolError
from protocols.scpi import (
    BlockDecoder,
    channel_list,
    decode_reals,
    format_number,
    parse_error,
    real_dtype,
)

log = logging.getLogger(__name__)

#: VISA status code of a timeout (VI_ERROR_TMO), so pyvisa need not be imported to test it.
_VI_ERROR_TMO = -1073807339
#: Most entries read from an error queue in one drain (real queues hold ~20-30).
_MAX_ERRORS = 32
#: A value this large is the DMM's overload marker (+9.9E+37).
_OVERLOAD = 9.0e37
#: Host seconds between two polls of an acquiring instrument.
POLL_S = 0.02
#: Samples per delivered chunk when a capture arrives whole.
CHUNK_SAMPLES = 65536
_VISA_HINT = "check the instrument's network/USB connection and the VISA resource string"
#: Where the rig's ASC energy windows work when a Keysight setup cannot see every edge.
EVERY_EDGE_SETUPS = ("an N6705 with an N6781A/N6785A SMU and its auxiliary input "
                     '([emon] timestamp_input = "aux"), an LPM01A or a Joulescope')


#: Where the N6705/N6781A figures were looked for (2026-11-28).
N6781A_SEARCHED = (
    "2026-11-28: the N6781A base accuracy table (current measurement per range, voltage "
    "measurement, voltage programming) of the 'N6731B-N6792A DC Power & Load Modules, "
    "N6700C-N6705C Mainframes Specifications Guide' was not readable here: its only stored page "
    "(38.142.81.21:8001, manual/keysight/n6775a/datasheet-english/page-52.html) is the table "
    "'Measurement Accuracy and Resolution (with shorter measurement intervals)', the noise to "
    "add to the base accuracy below 1 NPLC; the older Agilent N6700 specifications copy "
    "(manual/agilent-technologies/n6705/specifications-english/page-18.html) holds the "
    "N673xB/N674xB table only. Pages searches 'N6781A measurement accuracy current 3 A range "
    "100 mA range 1 mA range 10 µA', 'N6781A programming accuracy voltage 20 V', 'N6731B-N6792A "
    "Specifications Guide N6781A', 'N6781A N6782A N6784A Programming ranges Measurement "
    "resolution temperature coefficient', the docs and code corpora, find_string 'N6781A', "
    "'N6700-90001' (a link only) and '5990-5829' (the N6780 data sheet: nothing) found no "
    "other page of it; the N6700/N6705C user and service guide pages reached give ranges, "
    "sampling and histogram bins, no accuracy; no time base figure was found either")
#: Where the 34465A figures were looked for (2026-11-28).
K34465A_SEARCHED = (
    "2026-11-28: the Truevolt data sheet (5991-1983EN, 34460A/61A/65A/70A) DC current table "
    "was not readable here: no copy of it in the pages, docs or code corpora (searches "
    "'34465A DC current 1 year accuracy % of reading % of range', 'Truevolt 34461A 34465A "
    "34470A DC current accuracy 1 year Tcal shunt resistance burden voltage', '34465A 34470A "
    "specifications DC current 1 µA 10 µA ... 24 hour 90 day 1 year', 'Truevolt Series Digital "
    "Multimeters Data Sheet DC current specifications'); find_string '5991-1983' found links "
    "to it and third parties' transcriptions only (not taken), find_files for the PDF by its "
    "usual names found none; the Truevolt help and operating guide pages reached (command "
    "reference, measurement tutorial) give ranges, not accuracy; nor a sample timer figure")
#: The 34465A's DC current ranges the driver may select [A] (1 µA ... 3 A; its 10 A range
#: needs the 10 A terminal, which the driver does not use: `ranges.KEYSIGHT_MAX_RANGE_A`).
K34465A_RANGES_A = (1e-6, 10e-6, 100e-6, 1e-3, 10e-3, 100e-3, 1.0, 3.0)


def range_name(amps: float) -> str:
    """A Keysight range's name as `settings()` records it (``current_range``): "0.1 A"."""
    return f"{format_number(amps)} A"


def n6705_accuracy(*, measures_voltage: bool) -> MonitorAccuracy:
    """An N6705 channel's declaration: nothing read first-hand yet (`N6781A_SEARCHED`)."""
    return MonitorAccuracy(
        current_ranges=NotPublished(what="N6781A current measurement accuracy per range",
                                    searched=N6781A_SEARCHED),
        voltage=(NotPublished(what="N6781A voltage measurement accuracy",
                              searched=N6781A_SEARCHED) if measures_voltage else None),
        voltage_set=NotPublished(what="N6781A voltage programming accuracy",
                                 searched=N6781A_SEARCHED),
        clock=NotPublished(what="N6705 digitizer / data logger time base tolerance",
                           searched=N6781A_SEARCHED),
        notes="The range a reading was taken in is the one the instrument reports "
              "(SENS:CURR:RANG?, SENS:ELOG:CURR:RANG?): the settings' current_range_a; the "
              "ranges differ per module, so none is declared until the guide's table is read. "
              "The guide's figures apply at 1 NPLC and above; shorter intervals add the noise "
              "of its 'shorter measurement intervals' table.",
    )


def k34465a_accuracy() -> MonitorAccuracy:
    """The 34465A's declaration: its DC current ranges, no figure read first-hand yet."""
    return MonitorAccuracy(
        current_ranges=tuple(
            RangeAccuracy(range_name(a), a, NotPublished(
                what=f"34465A DC current accuracy, {range_name(a)} range",
                searched=K34465A_SEARCHED))
            for a in K34465A_RANGES_A),
        voltage=None,  # a DMM on current: the voltage is the bench supply's, as configured
        voltage_set=None,  # the bench's supply sources the DUT
        clock=NotPublished(what="34465A sample timer tolerance", searched=K34465A_SEARCHED),
        notes="The range a reading was taken in is the one the DMM reports (CURR:DC:RANG?): "
              "the settings' current_range. When the data sheet's table is read, take its "
              "1-year class (Tcal ± 5 °C; a bench calibrated yearly), not the 24-hour one (it "
              "needs Tcal ± 1 °C and a calibration within a day); its figures assume the "
              "aperture the table names: shorter apertures add the noise it lists.",
    )


@dataclass(frozen=True)
class Setting:
    """One SCPI setting: its command, and the span its value must lie in before anything is sent.

    ``command`` is a template: ``{ch}`` is the channel list, ``{value}`` the value (sent with
    `format_number`); ``value`` names the value it takes (None: a fixed command).
    """

    command: str
    value: str | None = None
    lo: float = -math.inf
    hi: float = math.inf
    unit: str = ""

    def render(self, values: dict[str, float], ch: str, who: str) -> str:
        """The command to send; `DeviceError` if the value is outside [lo, hi]."""
        if self.value is None:
            return self.command.format(ch=ch)
        value = float(values[self.value])
        # A bound computed as 1 / rate may differ from the span's in its last bit.
        if not self.lo - 1e-12 * abs(self.lo) <= value <= self.hi + 1e-12 * abs(self.hi):
            raise DeviceError(
                f"{who}: {self.value.replace('_', ' ')} {value:g} {self.unit} is outside "
                f"{self.lo:g}..{self.hi:g} {self.unit}",
                hint="change the value in the bench file")
        return self.command.format(ch=ch, value=format_number(value))


#: The source of an N678xA SMU channel, in the order sent: emulation and priority first (a
#: priority switch reverts the levels), then the levels, then the over-voltage protection.
#: Source: the EEMBC EnergyRunner's n6705b.js (github.com/petertorelli/ni-visa), setup_p():
#: EMUL PS2Q, FUNC VOLT, VOLT:LEV, CURR:LIM, VOLT:PROT:REM 3.3 on its N6781, in that order, all
#: before OUTP ON. Spans: 20.4 V and 3.06 A, as this driver had them for the N6781A (not
#: re-checked against its data sheet in issue 35).
#:
#: Over-voltage protection: the SMU's own remote OVP is set to the bench's ``voltage_limit_v``,
#: so a front-panel change or a driver bug cannot hold the DUT above it. Keysight N6700
#: Operating and Service Guide, ``[SOURce:]VOLTage:PROTection:REMote`` (example ``VOLT:PROT:REM
#: 15, (@1)``): "If the remote voltage exceeds the OVP level, the output is disabled and the
#: Questionable Condition status register OV bit is set"; positive level 0 to 22 V, *RST MAX;
#: it also trips when the output terminals are more than 1.5 V above the sense terminals. The
#: form sent is n6705b.js's (``VOLT:PROT:REM <v>,(@ch)``). It follows ``FUNC VOLT`` because a
#: priority switch reverts the output settings to their *RST values (N6705C User's Guide), which
#: would put the OVP back at MAX. Unconfirmed without hardware: that every N678xA (not only the
#: N6781A n6705b.js drives) takes it; a refusal is named by the error queue check. The level is
#: the limit itself, with no margin: a supply programmed exactly at the limit leaves the OVP no
#: headroom, and whether an N678xA trips on noise there is unconfirmed without hardware.
SMU_SOURCE_SETTINGS: tuple[Setting, ...] = (
    Setting("EMUL PS2Q,{ch}"),  # two-quadrant power supply, whatever the last user chose
    Setting("FUNC VOLT,{ch}"),  # voltage priority: the output holds VOLT:LEV
    Setting("VOLT:LEV {value},{ch}", "voltage", 0.0, 20.4, "V"),  # and the bench limit, first
    Setting("CURR:LIM {value},{ch}", "current_limit", 0.0, 3.06, "A"),  # the limit in CV
    # The bench's voltage limit; 0..22 V: the N6700 guide's positive remote OVP span.
    Setting("VOLT:PROT:REM {value},{ch}", "voltage_limit", 0.0, 22.0, "V"),
)
#: The command that sets `SMU_SOURCE_SETTINGS`' over-voltage protection (for `settings()`).
SMU_OVP_COMMAND = "VOLT:PROT:REM"
#: The source of a module without emulation or priority modes (n6705b.js: CURR:LEV on its
#: N6731). Its spans are the module's: the instrument's error queue reports a value outside them.
#: No over-voltage protection is sent to these modules: n6705b.js sets none on its N6731 ("TODO
#: why not 6731?"), and no Keysight guide text for their ``VOLT:PROT[:LEV]`` was reachable here
#: (public third-party N6700 wrappers send ``VOLT:PROT <v>,(@ch)`` to non-N678xA modules; their
#: span, and whether they trip on the output or the sense terminals, stay unconfirmed). Their
#: OVP is left as the last user set it, and `settings()` says so.
PLAIN_SOURCE_SETTINGS: tuple[Setting, ...] = (
    Setting("VOLT:LEV {value},{ch}", "voltage", 0.0),
    Setting("CURR:LEV {value},{ch}", "current_limit", 0.0),
)
#: ``STAT:QUES:COND? (@ch)`` bit 0 (value 1), OV: "Output is disabled by the over-voltage
#: protection" (N6705C Operating and Service Guide, Questionable Status Group; the query form:
#: N6700C Operating and Service Guide, ``STAT:QUES:COND? (@1)``, the live, unlatched register).
QUES_OV = 1
#: Modules with emulation and priority modes (the N678xA SMUs): ``SYST:CHAN:MOD?`` prefix.
SMU_PREFIX = "N678"
#: The mainframe option without the external data logger (N6705 User's Guide, "External Data
#: Logging": "not available if Option 055 has been ordered"), as ``*OPT?`` lists it.
#: Unconfirmed without hardware: the exact spelling of the N6705's ``*OPT?`` reply (taken as
#: IEEE 488.2's comma-separated list, "0" for none; quotes and spaces are ignored).
NO_ELOG_OPTION = "055"

#: N6705 aux mode (an N6781A/N6785A channel): the timestamp line on the auxiliary input, logged
#: with current by the external data logger (Elog). One line per setting, in the order sent,
#: after `SMU_SOURCE_SETTINGS`. Sources: N6700/N6705 guides, "External Data Logging"
#: (functions, min/max, 102.4 us per parameter, REAL format, trigger source, FETC:ELOG?). The
#: period is rounded by the instrument (20.48 us steps at its default resolution, RES20) and
#: read back (``SENS:ELOG:PER?``): the sample rate is the instrument's, not the one asked for.
AUX_ELOG_SETTINGS: tuple[Setting, ...] = (
    # The voltage converter measures the aux input. Unconfirmed by any public source (issue 35,
    # item 14): no public guide, driver or host program shows SENS:FUNC:VOLT:INP or its AUX
    # parameter; to be checked on a real N6781A/N6785A.
    Setting("SENS:FUNC:VOLT:INP AUX,{ch}"),
    Setting("SENS:ELOG:FUNC:CURR ON,{ch}"),
    Setting("SENS:ELOG:FUNC:CURR:MINM OFF,{ch}"),
    Setting("SENS:ELOG:FUNC:VOLT ON,{ch}"),
    Setting("SENS:ELOG:FUNC:VOLT:MINM ON,{ch}"),  # the minimum catches a short pulse
    Setting("SENS:ELOG:CURR:RANG {value},{ch}", "current_range", 0.0, 3.06, "A"),
    Setting("SENS:ELOG:PER {value},{ch}", "period", 409.6e-6, 60.0, "s"),  # 4 x 102.4 us
    Setting("TRIG:ELOG:SOUR IMM,{ch}"),  # logging starts at INIT:ELOG
    Setting("FORM REAL"),
    Setting("FORM:BORD NORM"),
)
#: Values per Elog record in aux mode: current average; aux voltage average, minimum, maximum.
AUX_RECORD = ("current", "aux_avg_v", "aux_min_v", "aux_max_v")
#: SMU modules with an auxiliary voltage input (``SYST:CHAN:MOD?`` answers).
AUX_MODULES = ("N6781A", "N6785A")
#: Which input the DUT's timestamp line is wired to (the bench's ``[emon] timestamp_input``).
TIMESTAMP_INPUTS = ("gpio", "aux")


class ElogUnavailable(DeviceError):
    """The N6705 mainframe has no external data logger (option 055): aux mode cannot run."""


def parse_options(reply: str) -> list[str]:
    """``*OPT?`` -> the options listed (IEEE 488.2: comma-separated, "0" when none)."""
    fields = (f.strip().strip('"').strip().upper() for f in reply.split(","))
    return [f for f in fields if f and f != "0"]


class VisaResource(Protocol):
    """What the drivers need from a pyvisa message-based resource (or a scripted fake)."""

    timeout: float

    def write(self, message: str) -> Any: ...
    def read(self) -> str: ...
    def read_bytes(self, count: int) -> bytes: ...
    def close(self) -> None: ...


def open_visa_resource(address: str, *, backend: str = "@py", timeout_ms: int = 5000) -> Any:
    """Open `address` with pyvisa (imported here: it is an optional extra)."""
    try:
        import pyvisa
    except ImportError as exc:
        raise DeviceError(
            "pyvisa is not installed",
            hint="install the visa extra: pip install 'neurobench-rig[visa]'",
        ) from exc
    try:
        manager = pyvisa.ResourceManager(backend)
        return manager.open_resource(address, read_termination="\n", write_termination="\n",
                                     timeout=timeout_ms)
    except Exception as exc:  # pyvisa raises several unrelated types for a bad address
        raise PortError(f"cannot open VISA resource {address!r}: {exc}", hint=_VISA_HINT) from exc


class _ScpiMonitor(EnergyMonitor):
    """What both Keysight drivers share: SCPI I/O, error queue, acquisition thread."""

    #: They see the DUT's timestamp line only as a trigger input: the first edge of a capture.
    sees_every_edge = False
    #: What a bench needing every edge (ASC energy) should use instead; the rig's refusal says it.
    every_edge_hint = f"use {EVERY_EDGE_SETUPS}; record traces with `rig emon record`"

    #: Substring the ``*IDN?`` model field must contain.
    model_hint = ""
    #: The current range asked for [A]; None = "auto" (the fixed `KEYSIGHT_DEFAULT_RANGE_A`).
    current_range_a: float | None = None

    def __init__(self, resource: VisaResource, *, voltage_limit_v: float,
                 simulated: bool = False, address: str | None = None) -> None:
        super().__init__(voltage_limit_v=voltage_limit_v)
        self.resource = resource
        self.address = address
        self.simulated = simulated
        self.identity: str | None = None
        self._voltage_v: float | None = None
        self._sample_rate_hz: float | None = None
        self._settings: dict[str, Any] = {}
        self._io_lock = threading.RLock()  # one exchange at a time (worker vs. caller)
        self._acquisition = AcquisitionThread(self.driver)
        self._on_chunk: ChunkCallback | None = None
        self._next_id = 0
        self._running = False
        self._closed = False

    @classmethod
    def open(cls, address: str, *, voltage_limit_v: float, simulated: bool = False,
             backend: str = "@py", current_range: str = ranges.AUTO,
             **options: Any) -> _ScpiMonitor:
        """Open the instrument at VISA `address`, clear its status and identify it.

        `current_range` is the bench's text ("auto", "0.1", "1e-3"); it becomes
        ``current_range_a`` (None for auto). A range the driver does not take is refused before
        the instrument is opened.
        """
        try:
            current_range = ranges.normalize(cls.driver, current_range)
        except ranges.RangeError as exc:
            raise DeviceError(f"{cls.driver}: current range: {exc.message}",
                              hint=exc.hint) from None
        if current_range != ranges.AUTO:
            if options.get("current_range_a") is not None:
                raise DeviceError(f"{cls.driver}: current_range and current_range_a both given",
                                  hint="give the range once")
            options["current_range_a"] = float(current_range)
        resource = open_visa_resource(address, backend=backend)
        monitor = cls(resource, voltage_limit_v=voltage_limit_v, simulated=simulated,
                      address=address, **options)
        return cls._connect_or_close(monitor)

    def connect(self) -> None:
        """``*CLS`` then ``*IDN?``; refuses an instrument of another model."""
        self._write("*CLS")
        self.identity = self._query("*IDN?")
        fields = [f.strip() for f in self.identity.split(",")]
        # The virtual bench's serial numbers end in "-SIM": simulated, whatever the caller said.
        self.simulated = self.simulated or identifies_as_simulator(*fields[2:3])
        model = fields[1] if len(fields) > 1 else self.identity
        if self.model_hint and self.model_hint not in model.upper():
            raise DeviceError(
                f"{self.driver}: instrument at {self.address} is {self.identity!r}, "
                f"not a {self.model_hint}",
                hint="check the VISA resource string in the bench file",
            )

    # -- SCPI I/O -----------------------------------------------------------------------------
    def _io(self, what: str, action: Any) -> Any:
        try:
            return action()
        except ProtocolError:
            raise
        except Exception as exc:  # pyvisa's VisaIOError, socket errors, a fake's TimeoutError
            if isinstance(exc, TimeoutError) or getattr(exc, "error_code", None) == _VI_ERROR_TMO:
                raise DeviceTimeout(f"{self.driver}: no reply to {what!r} in time",
                                    hint=_VISA_HINT) from exc
            raise DeviceError(f"{self.driver}: I/O failed on {what!r}: {exc}",
                              hint=_VISA_HINT) from exc

    def _write(self, cmd: str) -> None:
        with self._io_lock:
            self._io(cmd, lambda: self.resource.write(cmd))

    def _query(self, cmd: str) -> str:
        with self._io_lock:
            self._io(cmd, lambda: self.resource.write(cmd))
            return str(self._io(cmd, self.resource.read)).strip()

    def _query_reals(self, cmd: str, dtype: np.dtype) -> np.ndarray:
        """Send `cmd`, read its definite-length block (asking for exactly the missing bytes)."""
        with self._io_lock:
            self._io(cmd, lambda: self.resource.write(cmd))
            decoder = BlockDecoder()
            while not decoder.done:
                count = decoder.needed
                decoder.feed(self._io(cmd, lambda n=count: self.resource.read_bytes(n)))
            rest = decoder.rest
            if not rest.endswith(b"\n"):  # the message terminator is still in the pipe
                rest += self._io(cmd, lambda: self.resource.read_bytes(1))
            if rest.strip():
                raise ProtocolError(f"{self.driver}: {rest[:20]!r} after the block of {cmd!r}")
            return decode_reals(decoder.payload, dtype)

    def _errors(self) -> list[str]:
        """Drain the error queue; the entries that are errors."""
        found: list[str] = []
        for _ in range(_MAX_ERRORS):
            entry = parse_error(self._query("SYST:ERR?"))
            if not entry.is_error:
                return found
            found.append(str(entry))
        return found

    def _checked(self, cmd: str) -> None:
        """Send a setting and make sure the instrument took it (error queue empty)."""
        with self._io_lock:
            self._write(cmd)
            errors = self._errors()
        if errors:
            raise InstrumentError(
                f"{self.driver} refused {cmd!r}: {'; '.join(errors)}", command=cmd,
                hint="check the value against the instrument's ranges and installed options",
            )

    # -- EnergyMonitor --------------------------------------------------------------------------
    @property
    def sample_rate(self) -> float:
        """Sample rate [Hz] as the instrument reported it back."""
        if self._sample_rate_hz is None:
            raise DeviceError(f"{self.driver}: sample rate asked before configure()",
                              hint="call configure(voltage, sample_rate) first")
        return self._sample_rate_hz

    @classmethod
    def check_setup(cls, voltage: float, sample_rate: float, *, voltage_limit_v: float,
                    **options: Any) -> None:
        """The voltage limit, and a rate up to the fastest of the mode `options` select."""
        cls._check_rate(voltage, sample_rate, voltage_limit_v, cls._max_rate(**options))

    @classmethod
    def _max_rate(cls, **options: Any) -> float:
        raise NotImplementedError

    @classmethod
    def _check_rate(cls, voltage: float, sample_rate: float, voltage_limit_v: float,
                    max_rate: float) -> None:
        check_voltage(voltage, voltage_limit_v, who=cls.driver)
        if not 0 < sample_rate <= max_rate:
            raise DeviceError(f"{cls.driver}: sample rate {sample_rate:g} Hz is out of range",
                              hint=f"use up to {max_rate:g} Hz")

    def _check_configurable(self, voltage: float, sample_rate: float, max_rate: float) -> None:
        self._check_rate(voltage, sample_rate, self.voltage_limit_v, max_rate)
        if self._running:
            raise DeviceError(f"{self.driver}: configure() during an acquisition",
                              hint="stop() first")

    def start(self, on_chunk: ChunkCallback) -> None:
        """Arm the acquisition; chunks go to `on_chunk` on the driver's thread."""
        if self._sample_rate_hz is None:
            raise DeviceError(f"{self.driver}: start() before configure()",
                              hint="call configure(voltage, sample_rate) first")
        if self._running:
            raise DeviceError(f"{self.driver}: start() while acquiring", hint="stop() first")
        self._on_chunk = on_chunk
        self._next_id = 0
        self._acquisition.reset()
        self._arm()
        self._running = True
        self._acquisition.start(self._acquire, name=f"{self.driver}-acq")

    def stop(self) -> None:
        """End the acquisition; every acquired sample has been delivered when this returns."""
        if not self._running:
            return
        error = self._acquisition.stop(self._stop_timeout_s(), lambda: DeviceTimeout(
            f"{self.driver}: the acquisition did not end in time",
            hint="check the trigger wiring and the capture length"))
        self._running = False
        if error is not None:
            self._acquisition.error = None
            raise error

    def close(self) -> None:
        """Stop, switch the DUT off, release the resource. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._running:
            self._stop_while_closing()
        if self.identity is not None:
            self.power_off()
        try:
            self.resource.close()
        except Exception as exc:
            log.warning("%s: closing the resource failed: %s", self.driver, exc)


    def self_test(self) -> dict[str, Any]:
        """``*IDN?`` again and an empty error queue."""
        identity = self._query("*IDN?")
        return {"driver": self.driver, "identity": identity, "errors": self._errors(),
                "address": self.address, "simulated": self.simulated}

    def _range_settings(self, requested_a: float | None, in_effect_a: float) -> dict[str, Any]:
        """The range entries of `settings()`: what was asked, what the instrument reports."""
        out: dict[str, Any] = {
            "current_range": range_name(in_effect_a),
            "current_range_a": in_effect_a,
            "current_range_requested": (ranges.AUTO if requested_a is None
                                        else format_number(requested_a)),
            "autorange": False,
            # Fixed for the capture: every reading's range (the uncertainty budget's words).
            "current_range_source": "reported by the instrument (its range query, once per "
                                    "capture)",
        }
        if requested_a is None:
            out["autorange_note"] = (
                f"auto keeps the driver's fixed {format_number(ranges.KEYSIGHT_DEFAULT_RANGE_A)} "
                "A range: instrument autoranging is not used during a timed capture")
        return out

    def _range_to_send(self) -> float:
        """The range [A] the configuration sends: the one asked for, or the fixed default."""
        if self.current_range_a is None:
            return ranges.KEYSIGHT_DEFAULT_RANGE_A
        return self.current_range_a

    def _base_settings(self) -> dict[str, Any]:
        return {
            "driver": self.driver,
            "address": self.address,
            "simulated": self.simulated,
            "identity": self.identity,
            "voltage_v": self._voltage_v,
            "sample_rate_hz": self._sample_rate_hz,
            "voltage_limit_v": self.voltage_limit_v,
            **dict(self._settings),
            "accuracy": self.accuracy().to_json(),
        }

    # -- acquisition ----------------------------------------------------------------------------
    def _deliver(self, current: np.ndarray, voltage: np.ndarray, trigger_index: int | None,
                 gpio: np.ndarray | None = None) -> None:
        """Deliver samples in chunks; `trigger_index` (id) is marked as a falling edge, or
        `gpio` gives every sample's bits."""
        overload = np.abs(current) > _OVERLOAD
        if overload.any():
            self.stats.note(f"{int(overload.sum())} overload reading(s) from sample "
                            f"{self._next_id + int(np.argmax(overload))} on (kept as NaN)")
            current = np.where(overload, np.nan, current)
        for lo in range(0, len(current), CHUNK_SAMPLES):
            cur = current[lo : lo + CHUNK_SAMPLES]
            if gpio is not None:
                bits = gpio[lo : lo + CHUNK_SAMPLES]
            else:
                bits = np.ones(len(cur), dtype=np.uint8)
            first = self._next_id
            if trigger_index is not None and first <= trigger_index < first + len(cur):
                bits[trigger_index - first] = 0
            chunk = Chunk(first, cur, voltage[lo : lo + CHUNK_SAMPLES], bits)
            self._next_id += len(cur)
            self.stats.samples += len(cur)
            if self._on_chunk is not None:
                self._on_chunk(chunk)

    def _arm(self) -> None:
        raise NotImplementedError

    def _acquire(self) -> None:
        raise NotImplementedError

    def _stop_timeout_s(self) -> float:
        return 10.0


class N6705(_ScpiMonitor):
    """N6705 DC power analyzer: output `channel` supplies the DUT and measures it, with its
    digitizer (one triggered capture) or, with ``timestamp_input="aux"``, its external data
    logger streaming current and the timestamp line on an N6781A/N6785A auxiliary input."""

    driver = "n6705"
    model_hint = "N67"
    every_edge_hint = (
        'set [emon] timestamp_input = "aux" and wire the timestamp line to the auxiliary '
        "voltage input of the N6781A/N6785A channel that powers the DUT (the N6705 then logs it "
        "with current), or use an LPM01A or a Joulescope; record traces with `rig emon record`")
    #: Fastest digitizer interval of the N678x SMU modules (others: 20.48 µs).
    MIN_INTERVAL_S = 5.12e-6
    MAX_POINTS = 524288
    #: STAT:OPER bits (N6700 programming guide): waiting for a measurement trigger, measuring.
    WTG_MEAS = 8
    MEAS_ACTIVE = 16
    #: Shortest Elog period in aux mode: 102.4 us per logged parameter, 4 parameters.
    ELOG_MIN_PERIOD_S = 4 * 102.4e-6
    #: Records asked for per ``FETC:ELOG?``: this many seconds of logging.
    ELOG_FETCH_S = 1.0

    def __init__(self, resource: VisaResource, *, voltage_limit_v: float,
                 simulated: bool = False, address: str | None = None, channel: int = 1,
                 current_limit_a: float = 0.1, current_range_a: float | None = None,
                 points: int = 262144, pretrigger: int = 1024, trigger: str = "PIN1",
                 measure_voltage: bool = True, timestamp_input: str = "gpio",
                 aux_thresholds_v: tuple[float, float] | None = None) -> None:
        super().__init__(resource, voltage_limit_v=voltage_limit_v, simulated=simulated,
                         address=address)
        if timestamp_input not in TIMESTAMP_INPUTS:
            raise DeviceError(f"n6705: timestamp input {timestamp_input!r} is not "
                              f"{' or '.join(TIMESTAMP_INPUTS)}",
                              hint="set [emon] timestamp_input in the bench file")
        if aux_thresholds_v is not None and not 0 < aux_thresholds_v[0] < aux_thresholds_v[1]:
            raise DeviceError(f"n6705: aux thresholds {aux_thresholds_v} need 0 < low < high",
                              hint="give the low threshold first")
        trigger = trigger.upper()
        if not (trigger in ("EXT", "BUS") or (trigger.startswith("PIN") and trigger[3:].isdigit()
                                              and 1 <= int(trigger[3:]) <= 7)):
            raise DeviceError(f"n6705: trigger {trigger!r} is not PIN1..PIN7, EXT or BUS",
                              hint="set the emon trigger in the bench file")
        if not (1 <= points <= self.MAX_POINTS and 0 <= pretrigger < points):
            raise DeviceError(f"n6705: {points} points with {pretrigger} pre-trigger points "
                              "do not fit the digitizer",
                              hint=f"use 1..{self.MAX_POINTS} points and fewer pre-trigger points")
        self.channel = channel
        self.chan = channel_list(channel)
        self.current_limit_a = current_limit_a
        #: The measurement range asked for [A]; None = "auto" (the driver's fixed default).
        self.current_range_a = current_range_a
        self.points = points
        self.pretrigger = pretrigger
        self.trigger = trigger
        self.measure_voltage = measure_voltage
        #: "gpio": the line on a digital-port trigger pin; "aux": on the SMU's auxiliary input.
        self.timestamp_input = timestamp_input
        #: Every edge of the line reaches the stream only through the auxiliary input.
        self.sees_every_edge = timestamp_input == "aux"
        self.aux_thresholds_v = aux_thresholds_v
        self._line: LineThreshold | None = None
        self._dtype = real_dtype(32, big_endian=True)
        self._output_on = False

    @property
    def fault(self) -> BaseException | None:
        """What stopped the acquisition thread, if anything (a waiting recorder ends with it)."""
        return self._acquisition.error

    def connect(self) -> None:
        """Identify, then a known state whatever a crashed session left: its Elog and
        digitizer acquisition aborted, the DUT's output off."""
        super().connect()
        with self._io_lock:
            self._write(f"ABOR:ELOG {self.chan}")
            self._write(f"ABOR:ACQ {self.chan}")
            self._errors()  # nothing to abort is no fault
        self._checked(f"OUTP OFF,{self.chan}")
        self._output_on = False
        self._settings["output"] = "off"

    @classmethod
    def _max_rate(cls, *, timestamp_input: str = "gpio", **options: Any) -> float:
        """The digitizer's fastest rate, or in aux mode the Elog's."""
        return 1 / (cls.ELOG_MIN_PERIOD_S if timestamp_input == "aux" else cls.MIN_INTERVAL_S)

    @classmethod
    def sees_every_edge_with(cls, *, timestamp_input: str = "gpio", **options: Any) -> bool:
        """Every edge reaches the stream only through the auxiliary input."""
        return timestamp_input == "aux"

    @classmethod
    def measures_voltage_with(cls, *, timestamp_input: str = "gpio",
                              measure_voltage: bool = True, **options: Any) -> bool:
        """In aux mode the voltage converter measures the aux input, not the output."""
        return measure_voltage and timestamp_input != "aux"

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Set the rail and the digitizer (or, in aux mode, the Elog); every command is checked
        against the error queue."""
        if self.timestamp_input == "aux":
            self._configure_aux(voltage, sample_rate)
            return
        self._check_configurable(voltage, sample_rate, 1 / self.MIN_INTERVAL_S)
        ch = self.chan
        module = self._module()
        commands = [
            *self._source_commands(module, voltage),
            f"SENS:FUNC:CURR ON,{ch}",
            f"SENS:FUNC:VOLT {'ON' if self.measure_voltage else 'OFF'},{ch}",
            f"SENS:CURR:RANG {format_number(self._range_to_send())},{ch}",
            f"SENS:SWE:TINT {format_number(1 / sample_rate)},{ch}",
            f"SENS:SWE:POIN {self.points},{ch}",
            f"SENS:SWE:OFFS:POIN {-self.pretrigger},{ch}",
        ]
        if self.trigger.startswith("PIN"):
            pin = self.trigger[3:]
            commands += [f"DIG:PIN{pin}:FUNC TINP", f"DIG:PIN{pin}:POL NEG"]
        commands += [f"TRIG:ACQ:SOUR {self.trigger},{ch}", "FORM REAL", "FORM:BORD NORM"]
        for cmd in commands:
            self._checked(cmd)
        interval = float(self._query(f"SENS:SWE:TINT? {ch}"))
        in_range = float(self._query(f"SENS:CURR:RANG? {ch}"))
        self._voltage_v = float(voltage)
        self._sample_rate_hz = 1.0 / interval
        self._settings.update({
            "channel": self.channel, **self._source_settings(module),
            **self._range_settings(self.current_range_a, in_range), "interval_s": interval,
            "points": self.points, "pretrigger_points": self.pretrigger,
            "trigger": self.trigger, "trigger_slope": "negative",
            "mode": "digitizer: one triggered capture",
        })

    def power_on(self) -> None:
        """``OUTP ON,(@ch)``, then ``STAT:QUES:COND? (@ch)``: an output its over-voltage
        protection disabled (bit OV) is `InstrumentError`, not a run on an unpowered DUT."""
        cmd = f"OUTP ON,{self.chan}"
        self._checked(cmd)
        self._output_on = True
        self._settings["output"] = "on"
        status = self.questionable()
        if status & QUES_OV:
            self._output_on = False
            self._settings["output"] = "off (disabled by the over-voltage protection)"
            level = self._settings.get("over_voltage_protection_v")
            at = f" at {level:g} V" if level is not None else ""
            raise InstrumentError(
                f"n6705: the output's over-voltage protection{at} disabled it after {cmd!r} "
                f"(STAT:QUES:COND? {self.chan} = {status})", command=cmd,
                hint="the output voltage reached the protection level: check the voltage set on "
                "the instrument (front panel) against the bench's voltage_limit_v, then clear "
                "the protection on the instrument")

    def questionable(self) -> int:
        """The channel's live Questionable Condition register (``STAT:QUES:COND? (@ch)``)."""
        return int(float(self._query(f"STAT:QUES:COND? {self.chan}")))

    def power_off(self) -> None:
        """``OUTP OFF,(@ch)``; only logs if the instrument is gone."""
        try:
            self._checked(f"OUTP OFF,{self.chan}")
            self._output_on = False
            self._settings["output"] = "off"
        except Exception as exc:  # called on error paths: never mask the original error
            log.warning("n6705: OUTP OFF failed: %s", exc)

    def set_voltage(self) -> tuple[float, str] | None:
        """The programmed output voltage when the voltage converter does not measure the output
        (aux mode: it measures the aux input; or voltage measurement off)."""
        if self._voltage_v is None or (self.measure_voltage and self.timestamp_input != "aux"):
            return None
        return self._voltage_v, f"set: N6705 VOLT {self._voltage_v:g},{self.chan}"

    def settings(self) -> dict[str, Any]:
        """Every setting sent, plus identity."""
        return self._base_settings()

    def accuracy(self) -> MonitorAccuracy:
        """`n6705_accuracy`; a voltage figure only where the output voltage is measured."""
        return n6705_accuracy(measures_voltage=self.measures_voltage_with(
            timestamp_input=self.timestamp_input, measure_voltage=self.measure_voltage))

    def _module(self) -> str:
        """The channel's module (``SYST:CHAN:MOD?``), e.g. "N6781A"."""
        return self._query(f"SYST:CHAN:MOD? {self.chan}").strip().strip('"').upper()

    @staticmethod
    def _is_smu(module: str) -> bool:
        return module.startswith(SMU_PREFIX)

    def _source_commands(self, module: str, voltage: float) -> list[str]:
        """The source settings for `module` (`SMU_SOURCE_SETTINGS` or `PLAIN_SOURCE_SETTINGS`);
        `DeviceError` if a value is outside their spans."""
        settings = SMU_SOURCE_SETTINGS if self._is_smu(module) else PLAIN_SOURCE_SETTINGS
        values = {"voltage": voltage, "current_limit": self.current_limit_a,
                  "voltage_limit": self.voltage_limit_v}
        return [s.render(values, self.chan, self.driver) for s in settings]

    def _source_settings(self, module: str) -> dict[str, Any]:
        """The source entries of `settings()`."""
        out: dict[str, Any] = {"module": module, "current_limit_a": self.current_limit_a}
        if self._is_smu(module):
            out.update(emulation="PS2Q", priority="voltage", current_limit_command="CURR:LIM",
                       over_voltage_protection_v=self.voltage_limit_v,
                       over_voltage_protection_command=SMU_OVP_COMMAND)
        else:
            out["current_limit_command"] = "CURR:LEV"
            out["over_voltage_protection"] = (
                f"not set: no public source confirms the OVP command of an {module or 'unknown'}"
                " module; its OVP is as the instrument's last user left it")
        return out

    def _options(self) -> list[str]:
        """The mainframe's options (``*OPT?``); `ElogUnavailable` with option 055."""
        options = parse_options(self._query("*OPT?"))
        if NO_ELOG_OPTION in options:
            raise ElogUnavailable(
                f"n6705: this mainframe has option {NO_ELOG_OPTION} (*OPT? lists "
                f"{', '.join(options)}), and with it the external data logger (Elog) is not "
                "available (N6705 User's Guide): [emon] timestamp_input = \"aux\" logs the "
                "timestamp line with Elog, so it cannot run on this mainframe",
                hint='use [emon] timestamp_input = "gpio" (the digitizer: one triggered capture, '
                "no ASC energy windows), or for ASC energy an LPM01A or a Joulescope")
        return options

    def _configure_aux(self, voltage: float, sample_rate: float) -> None:
        """Elog of current and the aux input (`AUX_ELOG_SETTINGS`) on an N6781A/N6785A channel.

        Every value is checked before the first byte goes out; then the channel's module is
        asked for (``SYST:CHAN:MOD?``) and one without an auxiliary input is refused, and the
        mainframe's options (``*OPT?``): one without Elog (option 055) is refused. Only then is
        anything set.
        """
        self._check_configurable(voltage, sample_rate, 1 / self.ELOG_MIN_PERIOD_S)
        ch = self.chan
        values = {"current_range": self._range_to_send(), "period": 1 / sample_rate}
        # The aux modules are SMUs: their source spans are checked before anything is sent.
        source = self._source_commands(AUX_MODULES[0], voltage)
        commands = [s.render(values, ch, self.driver) for s in AUX_ELOG_SETTINGS]
        module = self._module()
        if module not in AUX_MODULES:
            raise DeviceError(
                f"n6705: channel {self.channel} is an {module or 'unknown module'}, which has no "
                "auxiliary voltage input for the timestamp line",
                hint=f"power the DUT from an {' or '.join(AUX_MODULES)} SMU channel, or use "
                '[emon] timestamp_input = "gpio" (no ASC energy), an LPM01A or a Joulescope')
        options = self._options()
        for cmd in (*source, *commands):
            self._checked(cmd)
        period = float(self._query(f"SENS:ELOG:PER? {ch}"))
        in_range = float(self._query(f"SENS:ELOG:CURR:RANG? {ch}"))
        programmed = float(self._query(f"VOLT? {ch}"))
        check_voltage(programmed, self.voltage_limit_v, who=f"{self.driver}: VOLT? read back")
        default = LineThreshold.for_supply(programmed)  # the DUT's I/O runs on its supply
        low, high = self.aux_thresholds_v or (default.low_v, default.high_v)
        self._voltage_v = programmed
        self._sample_rate_hz = 1.0 / period
        self._settings.update({
            "channel": self.channel, **self._source_settings(module), "options": options,
            **self._range_settings(self.current_range_a, in_range), "interval_s": period,
            "mode": "external data logger (Elog): current and the auxiliary voltage input, "
                    "continuous and live",
            "timestamp_input": "aux", "elog_record": list(AUX_RECORD),
            "aux_threshold_low_v": low, "aux_threshold_high_v": high,
            "voltage_source": "programmed output voltage (VOLT? read back): the voltage "
                              "converter measures the auxiliary input, not the output",
        })

    def _arm(self) -> None:
        if self.timestamp_input == "aux":
            low = self._settings["aux_threshold_low_v"]
            self._line = LineThreshold(low, self._settings["aux_threshold_high_v"])
            self._checked(f"INIT:ELOG {self.chan}")
            return
        self._checked(f"INIT:ACQ {self.chan}")
        if self.trigger == "BUS":
            self._checked(f"TRIG:ACQ {self.chan}")

    def _capture_s(self) -> float:
        return self.points / self.sample_rate

    def _stop_timeout_s(self) -> float:
        if self.timestamp_input == "aux":
            return 10.0 + 2 * self.ELOG_FETCH_S
        return self._capture_s() + 10.0

    def _acquire_elog(self) -> None:
        """Empty the Elog FIFO until stopped, then ``ABOR:ELOG``; the error queue is read after
        every fetch, so a fault the instrument reports ends the run at once."""
        want = max(1, round(self.ELOG_FETCH_S * self.sample_rate))
        try:
            while True:
                with self._io_lock:  # an error drained here belongs to this fetch
                    records = self._fetch_elog(want)
                    errors = self._errors()
                if errors:
                    raise InstrumentError(
                        f"n6705 reported while logging: {'; '.join(errors)}",
                        command=f"FETC:ELOG? {want},{self.chan}",
                        hint="an Elog overrun loses samples: keep the host reading (a slower "
                        "period or a less busy host)")
                self._deliver_records(records)
                if len(records) < want:
                    if self._acquisition.stop_wanted.is_set():
                        break
                    self._acquisition.stop_wanted.wait(POLL_S)
        except BaseException:
            with contextlib.suppress(Exception):  # best effort: the error above is the news
                self._write(f"ABOR:ELOG {self.chan}")
            raise
        self._checked(f"ABOR:ELOG {self.chan}")
        if self._line is not None and not self._line.armed:
            self.stats.note(
                f"the auxiliary input never stayed above {self._settings['aux_threshold_high_v']:g}"
                " V for a whole sample: is the DUT's timestamp line wired to Aux?")

    def _fetch_elog(self, want: int) -> np.ndarray:
        """One ``FETC:ELOG?``: up to `want` records, one row each (`AUX_RECORD`)."""
        data = self._query_reals(f"FETC:ELOG? {want},{self.chan}", self._dtype)
        width = len(AUX_RECORD)
        if data.size % width:
            raise ProtocolError(f"n6705: Elog block of {data.size} values is not whole "
                                f"records of {width} ({', '.join(AUX_RECORD)})")
        records = data.reshape(-1, width)
        if len(records) > want:
            raise ProtocolError(f"n6705: FETC:ELOG? {want} returned {len(records)} records")
        return records

    def _deliver_records(self, records: np.ndarray) -> None:
        """Records -> samples: current, the programmed voltage, the line's bits."""
        n = len(records)
        if not n:
            return
        assert self._line is not None
        gpio = self._line.bits(records[:, AUX_RECORD.index("aux_min_v")])
        voltage = np.full(n, self._voltage_v if self._voltage_v is not None else math.nan)
        self._deliver(records[:, 0].copy(), voltage, None, gpio=gpio)

    def _status(self) -> int:
        return int(float(self._query(f"STAT:OPER:COND? {self.chan}")))

    def _acquire(self) -> None:
        if self.timestamp_input == "aux":
            self._acquire_elog()
            return
        triggered_at: float | None = None
        while True:
            status = self._status()
            if not status & (self.WTG_MEAS | self.MEAS_ACTIVE):
                break
            if not status & self.WTG_MEAS and triggered_at is None:
                triggered_at = time.monotonic()
            if self._acquisition.stop_wanted.is_set() and triggered_at is None:
                self._checked(f"ABOR:ACQ {self.chan}")
                self.stats.note("stopped before the trigger: no capture")
                return
            late = triggered_at is not None and (
                time.monotonic() > triggered_at + self._stop_timeout_s())
            if late:
                raise DeviceTimeout(f"n6705: the capture of {self.points} points did not end",
                                    hint="check STAT:OPER and the digitizer settings")
            self._acquisition.stop_wanted.wait(POLL_S)
        current = self._query_reals(f"FETC:ARR:CURR? {self.chan}", self._dtype)
        if self.measure_voltage:
            voltage = self._query_reals(f"FETC:ARR:VOLT? {self.chan}", self._dtype)
        else:
            voltage = np.full(len(current), self._voltage_v or math.nan)
        if len(current) != self.points or len(voltage) != len(current):
            raise DeviceError(
                f"n6705: capture returned {len(current)} current and {len(voltage)} voltage "
                f"points, {self.points} expected", hint="check SENS:SWE:POIN")
        self._deliver(current, voltage, self.pretrigger)


class Keysight34465A(_ScpiMonitor):
    """34465A DMM digitizing DC current, started by a falling edge on its external trigger."""

    driver = "34465a"
    measures_voltage = False  # a DMM on current
    powers_dut = False  # a DMM measures; the bench's supply powers the DUT
    model_hint = "34465A"
    every_edge_hint = (
        "the 34465A has no input sampled alongside the current, only its trigger: for ASC "
        f"energy use {EVERY_EDGE_SETUPS}; record traces with `rig emon record`")
    #: Fastest sample timer with the DIG option (50 kS/s).
    MAX_RATE_HZ = 50_000.0

    @classmethod
    def _max_rate(cls, **options: Any) -> float:
        return cls.MAX_RATE_HZ

    def __init__(self, resource: VisaResource, *, voltage_limit_v: float,
                 simulated: bool = False, address: str | None = None,
                 current_range_a: float | None = None, max_samples: int = 1_000_000_000,
                 real_bits: int = 64) -> None:
        super().__init__(resource, voltage_limit_v=voltage_limit_v, simulated=simulated,
                         address=address)
        #: The DC current range asked for [A]; None = "auto" (the driver's fixed default).
        self.current_range_a = current_range_a
        self.max_samples = max_samples
        self.real_bits = real_bits
        self._dtype = real_dtype(real_bits, big_endian=True)
        self._power_requested: str | None = None
        self._trigger_seen = False

    def connect(self) -> None:
        """Identify, then abort a measurement a crashed session left running."""
        super().connect()
        with self._io_lock:
            self._write("ABOR")
            self._errors()  # nothing to abort is no fault

    def configure(self, voltage: float, sample_rate: float) -> None:
        """Current range, aperture = sample period, external falling-edge trigger, timed samples.

        `voltage` is the bench supply's voltage (checked against the limit, reported per sample).
        """
        self._check_configurable(voltage, sample_rate, self.MAX_RATE_HZ)
        period = format_number(1 / sample_rate)
        commands = [
            f"CONF:CURR:DC {format_number(self._range_to_send())}",
            f"CURR:DC:APER {period}",
            "TRIG:SOUR EXT",
            "TRIG:SLOP NEG",
            "TRIG:DEL 0",
            "TRIG:COUN 1",
            "SAMP:SOUR TIM",
            f"SAMP:TIM {period}",
            f"SAMP:COUN {self.max_samples}",
            f"FORM:DATA REAL,{self.real_bits}",
            "FORM:BORD NORM",
        ]
        for cmd in commands:
            self._checked(cmd)
        interval = float(self._query("SAMP:TIM?"))
        in_range = float(self._query("CURR:DC:RANG?"))
        self._voltage_v = float(voltage)
        self._sample_rate_hz = 1.0 / interval
        self._settings.update({
            **self._range_settings(self.current_range_a, in_range), "interval_s": interval,
            "aperture_s": interval, "max_samples": self.max_samples,
            "trigger": "EXT", "trigger_slope": "negative", "format": f"REAL,{self.real_bits}",
            "mode": "timed samples from one external trigger, read while acquiring",
            "supply": "not sourced by the 34465A: the bench supply powers the DUT; voltage is "
                      "the configured supply, not measured",
        })

    def power_on(self) -> None:
        """No-op: the DMM does not source the DUT (recorded in settings)."""
        self._power_requested = "on"
        self._settings["power_requested"] = "on (no-op: the bench supply switches the DUT)"

    def set_voltage(self) -> tuple[float, str] | None:
        """A DMM measures current only: the bench supply's value as given."""
        if self._voltage_v is None:
            return None
        return self._voltage_v, (f"given: bench supply {self._voltage_v:g} V "
                                 "(the 34465A measures current)")

    def power_off(self) -> None:
        """No-op: the DMM does not source the DUT (recorded in settings)."""
        self._power_requested = "off"
        self._settings["power_requested"] = "off (no-op: the bench supply switches the DUT)"

    def settings(self) -> dict[str, Any]:
        """Every setting sent, plus identity."""
        return self._base_settings()

    def accuracy(self) -> MonitorAccuracy:
        """`k34465a_accuracy`."""
        return k34465a_accuracy()

    def _arm(self) -> None:
        self._trigger_seen = False
        self._checked("INIT")

    def _read_available(self) -> int:
        """Read and deliver every reading in memory; how many there were."""
        count = int(float(self._query("DATA:POIN?")))
        if count <= 0:
            return 0
        current = self._query_reals(f"R? {count}", self._dtype)
        if len(current) != count:
            raise DeviceError(f"34465a: R? {count} returned {len(current)} readings",
                              hint="check FORM:DATA and the VISA connection")
        voltage = np.full(count, self._voltage_v if self._voltage_v is not None else math.nan)
        self._trigger_seen = True
        self._deliver(current, voltage, 0)
        return count

    def _acquire(self) -> None:
        while not self._acquisition.stop_wanted.is_set() and self._next_id < self.max_samples:
            if not self._read_available():
                self._acquisition.stop_wanted.wait(POLL_S)
        if self._next_id < self.max_samples:
            self._checked("ABOR")
        # Readings taken before ABOR are still in memory.
        while self._read_available():
            pass
        if not self._trigger_seen:
            self.stats.note("stopped before the trigger: no samples")
