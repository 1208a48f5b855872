"""Keysight N6705 / 34465A drivers against a scripted VISA resource (exact writes and replies),
plus a pyvisa-sim open + identify smoke test."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.keysight import N6705, Keysight34465A
from drivers.errors import DeviceError, DeviceTimeout, InstrumentError, VoltageLimitError
from protocols.scpi import encode_reals, real_dtype
from tests.deadline import wait_until

OK = b'+0,"No error"'
YAML = Path(__file__).with_name("keysight_sim.yaml")


class ScriptedResource:
    """A VISA resource that expects an exact list of writes and queues the scripted replies.

    `idle` answers a repeated poll (e.g. ``DATA:POIN?``) when it is not the next scripted write.
    """

    def __init__(
        self, script: list[tuple[str, bytes | None]], idle: dict[str, bytes] | None = None
    ) -> None:
        self.script = list(script)
        self.idle = idle or {}
        self.writes: list[str] = []
        self.out = bytearray()
        self.timeout = 5000.0
        self.closed = False
        self.lock = threading.Lock()

    def write(self, message: str) -> None:
        with self.lock:
            if self.script and self.script[0][0] == message:
                _, reply = self.script.pop(0)
            elif message in self.idle:
                reply = self.idle[message]
            else:
                raise AssertionError(
                    f"unexpected write {message!r}; next expected "
                    f"{self.script[0][0] if self.script else None!r}"
                )
            self.writes.append(message)
            if reply is not None:
                self.out += reply + b"\n"

    def read(self) -> str:
        with self.lock:
            end = self.out.find(b"\n")
            if end < 0:
                raise TimeoutError("nothing to read")
            line = bytes(self.out[:end])
            del self.out[: end + 1]
            return line.decode("ascii")

    def read_bytes(self, count: int) -> bytes:
        with self.lock:
            if len(self.out) < count:
                raise TimeoutError("not enough bytes")
            data = bytes(self.out[:count])
            del self.out[:count]
            return data

    def close(self) -> None:
        self.closed = True


def checked(*commands: str) -> list[tuple[str, bytes | None]]:
    """Each setting followed by an empty error queue."""
    out: list[tuple[str, bytes | None]] = []
    for cmd in commands:
        out += [(cmd, None), ("SYST:ERR?", OK)]
    return out


#: The channel's module first (it decides the source commands), then an N6781A set up the way
#: the EEMBC EnergyRunner's n6705b.js sets its N6781: two-quadrant supply emulation, voltage
#: priority (both before the levels: a priority switch reverts them), VOLT:LEV, CURR:LIM, and
#: the SMU's remote over-voltage protection at the bench's voltage limit (n6705b.js: VOLT:PROT:REM).
N6705_CONFIG = [
    ("SYST:CHAN:MOD? (@1)", b"N6781A"),
    *checked(
        "EMUL PS2Q,(@1)",
        "FUNC VOLT,(@1)",
        "VOLT:LEV 3.3,(@1)",
        "CURR:LIM 0.1,(@1)",
        "VOLT:PROT:REM 3.6,(@1)",
        "SENS:FUNC:CURR ON,(@1)",
        "SENS:FUNC:VOLT ON,(@1)",
        "SENS:CURR:RANG 0.1,(@1)",
        "SENS:SWE:TINT 0.0001,(@1)",
        "SENS:SWE:POIN 4,(@1)",
        "SENS:SWE:OFFS:POIN -1,(@1)",
        "DIG:PIN1:FUNC TINP",
        "DIG:PIN1:POL NEG",
        "TRIG:ACQ:SOUR PIN1,(@1)",
        "FORM REAL",
        "FORM:BORD NORM",
    ),
    ("SENS:SWE:TINT? (@1)", b"0.0001024"),
    ("SENS:CURR:RANG? (@1)", b"0.1"),
]

DMM_CONFIG = [
    *checked(
        "CONF:CURR:DC 0.01",
        "CURR:DC:APER 0.0001",
        "TRIG:SOUR EXT",
        "TRIG:SLOP NEG",
        "TRIG:DEL 0",
        "TRIG:COUN 1",
        "SAMP:SOUR TIM",
        "SAMP:TIM 0.0001",
        "SAMP:COUN 3",
        "FORM:DATA REAL,64",
        "FORM:BORD NORM",
    ),
    ("SAMP:TIM?", b"0.0001"),
    ("CURR:DC:RANG?", b"+1.00000000E-02"),
]


def n6705(resource: ScriptedResource, **kw) -> N6705:
    monitor = N6705(resource, voltage_limit_v=3.6, points=4, pretrigger=1, **kw)
    monitor.identity = "Keysight Technologies,N6705C,X,Y"
    return monitor


def f32(values: list[float]) -> bytes:
    return encode_reals(np.array(values), real_dtype(32))


def f64(values: list[float]) -> bytes:
    return encode_reals(np.array(values), real_dtype(64))


def test_n6705_configure_start_fetch_close_conversation() -> None:
    current = [1e-3, 2e-3, 3e-3, 4e-3]  # exact enough in float32 for assert_allclose
    script = [
        *N6705_CONFIG,
        ("OUTP ON,(@1)", None),
        ("SYST:ERR?", OK),
        ("STAT:QUES:COND? (@1)", b"0"),  # not disabled by a protection
        ("INIT:ACQ (@1)", None),
        ("SYST:ERR?", OK),
        ("STAT:OPER:COND? (@1)", b"25"),  # output on + waiting for trigger + measuring
        ("STAT:OPER:COND? (@1)", b"17"),  # triggered
        ("STAT:OPER:COND? (@1)", b"1"),  # capture complete
        ("FETC:ARR:CURR? (@1)", f32(current)),
        ("FETC:ARR:VOLT? (@1)", f32([3.25, 3.25, 3.25, 3.25])),
        ("OUTP OFF,(@1)", None),
        ("SYST:ERR?", OK),
    ]
    res = ScriptedResource(script)
    monitor = n6705(res)
    monitor.configure(3.3, 10_000)
    assert monitor.sample_rate == pytest.approx(1 / 102.4e-6)
    monitor.power_on()
    chunks: list[Chunk] = []
    monitor.start(chunks.append)
    # The whole capture, then the stop: a stop before the capture ended would be an abort
    # (test_n6705_stop_before_the_trigger_aborts), which a loaded host could otherwise give.
    wait_until(lambda: len(chunks) == 1, "the capture delivered")
    monitor.stop()
    monitor.close()
    monitor.close()  # idempotent: nothing more is sent
    assert res.script == [] and res.closed
    assert len(chunks) == 1
    chunk = chunks[0]
    assert chunk.first_sample_id == 0
    np.testing.assert_allclose(chunk.current, current, rtol=1e-7)
    np.testing.assert_array_equal(chunk.voltage, 3.25)
    assert chunk.gpio.tolist() == [1, 0, 1, 1]  # the trigger sample = the pre-trigger count
    settings = monitor.settings()
    assert settings["trigger"] == "PIN1" and settings["pretrigger_points"] == 1
    assert settings["output"] == "off" and settings["simulated"] is False
    assert settings["module"] == "N6781A"
    assert (settings["emulation"], settings["priority"]) == ("PS2Q", "voltage")
    assert settings["current_limit_command"] == "CURR:LIM"


def test_n6705_a_module_without_priority_modes_gets_its_current_level() -> None:
    """An N6731B has no emulation or priority: its constant-current setting is CURR:LEV, as the
    EnergyRunner's n6705b.js sends to its N6731 (CURR:LIM is the N678xA's)."""
    script = [
        ("SYST:CHAN:MOD? (@1)", b"N6731B"),
        *checked("VOLT:LEV 3.3,(@1)", "CURR:LEV 0.25,(@1)"),
        *N6705_CONFIG[11:],  # the measurement settings as for the N6781A
    ]
    res = ScriptedResource(script)
    monitor = n6705(res, current_limit_a=0.25)
    monitor.configure(3.3, 10_000)
    assert res.script == []
    assert not any(w.startswith(("EMUL", "FUNC ", "CURR:LIM")) for w in res.writes)
    settings = monitor.settings()
    assert settings["module"] == "N6731B" and settings["current_limit_command"] == "CURR:LEV"
    assert "emulation" not in settings and "priority" not in settings


def test_n6705_smu_protects_the_bench_voltage_limit_before_the_output_goes_on() -> None:
    """The N678xA's remote OVP is set to the bench's voltage_limit_v (3.6 V here), after CURR:LIM
    and before OUTP ON as n6705b.js does, checked against the error queue, and recorded."""
    res = ScriptedResource([*N6705_CONFIG, *checked("OUTP ON,(@1)"),
                            ("STAT:QUES:COND? (@1)", b"0")])
    monitor = n6705(res)
    monitor.configure(3.3, 10_000)
    monitor.power_on()
    assert res.script == []
    sent = [w for w in res.writes if w != "SYST:ERR?"]
    at = sent.index("VOLT:PROT:REM 3.6,(@1)")
    assert sent[at - 1] == "CURR:LIM 0.1,(@1)" and at < sent.index("OUTP ON,(@1)")
    s = monitor.settings()
    assert s["over_voltage_protection_v"] == 3.6
    assert s["over_voltage_protection_command"] == "VOLT:PROT:REM"
    assert s["output"] == "on"


def test_n6705_a_refused_over_voltage_protection_stops_before_the_output() -> None:
    script = [
        *N6705_CONFIG[:9],
        ("VOLT:PROT:REM 3.6,(@1)", None),
        ("SYST:ERR?", b'-241,"Hardware missing"'),
        ("SYST:ERR?", OK),
    ]
    res = ScriptedResource(script)
    with pytest.raises(InstrumentError) as info:
        n6705(res).configure(3.3, 10_000)
    assert info.value.command == "VOLT:PROT:REM 3.6,(@1)"
    assert res.script == []  # nothing sent after the refused command


def test_n6705_power_on_reports_an_output_its_over_voltage_protection_disabled() -> None:
    """STAT:QUES:COND? bit 0 (OV) after OUTP ON: the instrument's own guard tripped."""
    res = ScriptedResource([*N6705_CONFIG, *checked("OUTP ON,(@1)"),
                            ("STAT:QUES:COND? (@1)", b"1")])
    monitor = n6705(res)
    monitor.configure(3.3, 10_000)
    with pytest.raises(InstrumentError, match=r"over-voltage protection at 3\.6 V") as info:
        monitor.power_on()
    assert info.value.command == "OUTP ON,(@1)"
    assert res.script == []
    assert monitor.settings()["output"].startswith("off")


def test_n6705_no_guessed_protection_command_for_other_modules() -> None:
    """No public source confirms an N6731B's OVP command: none is sent, settings() says so."""
    res = ScriptedResource([("SYST:CHAN:MOD? (@1)", b"N6731B"),
                            *checked("VOLT:LEV 3.3,(@1)", "CURR:LEV 0.1,(@1)"),
                            *N6705_CONFIG[11:]])
    monitor = n6705(res)
    monitor.configure(3.3, 10_000)
    assert res.script == []
    assert not any(":PROT" in w for w in res.writes)
    s = monitor.settings()
    assert s["over_voltage_protection"].startswith("not set")
    assert "over_voltage_protection_v" not in s


def test_n6705_a_limit_beyond_the_smu_s_protection_span_sends_no_setting() -> None:
    res = ScriptedResource([("SYST:CHAN:MOD? (@1)", b"N6781A")])
    monitor = N6705(res, voltage_limit_v=24.0, points=4, pretrigger=1)
    with pytest.raises(DeviceError, match=r"0\.\.22 V"):
        monitor.configure(3.3, 10_000)
    assert res.writes == ["SYST:CHAN:MOD? (@1)"]


def test_n6705_bus_trigger_arms_and_triggers_at_once() -> None:
    script = [
        *checked("INIT:ACQ (@1)", "TRIG:ACQ (@1)"),
        ("STAT:OPER:COND? (@1)", b"0"),
        ("FETC:ARR:CURR? (@1)", f32([1.0, 2.0, 3.0, 4.0])),
        ("FETC:ARR:VOLT? (@1)", f32([3.0, 3.0, 3.0, 3.0])),
    ]
    res = ScriptedResource(script)
    monitor = n6705(res, trigger="BUS")
    monitor._sample_rate_hz = 1e4  # as after configure()
    chunks: list[Chunk] = []
    monitor.start(chunks.append)
    wait_until(lambda: len(chunks) == 1, "the capture delivered")  # then the stop (above)
    monitor.stop()
    assert res.script == []
    assert chunks[0].gpio.tolist() == [1, 0, 1, 1]


def test_n6705_stop_before_the_trigger_aborts() -> None:
    res = ScriptedResource(checked("INIT:ACQ (@1)"), idle={"STAT:OPER:COND? (@1)": b"24"})
    monitor = n6705(res)
    monitor._sample_rate_hz = 1e4
    chunks: list[Chunk] = []
    monitor.start(chunks.append)
    res.script += checked("ABOR:ACQ (@1)")
    monitor.stop()
    assert res.script == [] and chunks == []
    assert "stopped before the trigger" in monitor.stats.notes[0]


def test_n6705_error_queue_entry_names_the_command() -> None:
    script = [
        *N6705_CONFIG[:7],
        ("CURR:LIM 0.1,(@1)", None),
        ("SYST:ERR?", b'-222,"Data out of range"'),
        ("SYST:ERR?", OK),
    ]
    res = ScriptedResource(script)
    with pytest.raises(InstrumentError) as info:
        n6705(res).configure(3.3, 10_000)
    assert info.value.command == "CURR:LIM 0.1,(@1)"
    assert "CURR:LIM 0.1,(@1)" in str(info.value) and "-222" in str(info.value)
    assert res.script == []  # nothing sent after the refused command


@pytest.mark.parametrize(
    "make",
    [
        lambda res: n6705(res),
        lambda res: Keysight34465A(res, voltage_limit_v=3.6),
    ],
)
def test_voltage_over_the_limit_sends_nothing(make) -> None:
    res = ScriptedResource([])
    with pytest.raises(VoltageLimitError, match=r"3\.6"):
        make(res).configure(5.0, 1000)
    assert res.writes == []


def test_rate_out_of_range_sends_nothing() -> None:
    res = ScriptedResource([])
    with pytest.raises(DeviceError, match="out of range"):
        Keysight34465A(res, voltage_limit_v=3.6).configure(3.3, 1e6)
    assert res.writes == []


def test_34465a_conversation_reads_blocks_while_acquiring() -> None:
    script = (
        DMM_CONFIG
        + checked("INIT")
        + [
            ("DATA:POIN?", b"2"),
            ("R? 2", f64([1e-3, 2e-3])),
            ("DATA:POIN?", b"1"),
            ("R? 1", f64([9.9e37])),  # overload marker
            ("DATA:POIN?", b"0"),  # the drain after the last sample
        ]
    )
    res = ScriptedResource(script, idle={"DATA:POIN?": b"0"})
    monitor = Keysight34465A(res, voltage_limit_v=3.6, current_range_a=0.01, max_samples=3)
    monitor.identity = "Keysight Technologies,34465A,X,Y"
    monitor.configure(3.3, 10_000)
    assert monitor.sample_rate == pytest.approx(10_000)
    monitor.power_on()  # a no-op for a DMM: nothing is sent
    chunks: list[Chunk] = []
    monitor.start(chunks.append)
    # Its three readings (max_samples) read while it acquires, then the stop: a stop before
    # them would be an ABOR, which a loaded host gave once (CI run 32).
    wait_until(lambda: sum(map(len, chunks)) == 3, "the three readings delivered")
    monitor.stop()
    monitor.close()  # no OUTP: a DMM sources nothing
    assert res.script == [] and res.closed
    assert [c.first_sample_id for c in chunks] == [0, 2]
    np.testing.assert_array_equal(chunks[0].current, [1e-3, 2e-3])
    assert np.isnan(chunks[1].current[0])
    assert "overload" in monitor.stats.notes[0]
    assert chunks[0].gpio.tolist() == [0, 1] and chunks[1].gpio.tolist() == [1]
    np.testing.assert_array_equal(chunks[0].voltage, 3.3)
    settings = monitor.settings()
    assert "not sourced" in settings["supply"]
    assert settings["power_requested"].startswith("off")


def test_34465a_stop_aborts_and_drains_memory() -> None:
    # The configuration above up to SAMP:TIM, then the default count and REAL,32.
    script = [
        *DMM_CONFIG[:16],
        *checked("SAMP:COUN 1000000000", "FORM:DATA REAL,32", "FORM:BORD NORM"),
        ("SAMP:TIM?", b"0.0001"),
        ("CURR:DC:RANG?", b"+1.00000000E-02"),
    ]
    res = ScriptedResource(script, idle={"DATA:POIN?": b"0"})
    monitor = Keysight34465A(res, voltage_limit_v=3.6, current_range_a=0.01, real_bits=32)
    monitor.configure(3.3, 10_000)
    res.script += [*checked("INIT"), ("DATA:POIN?", b"2"), ("R? 2", f32([0.25, 0.5]))]
    got: list[Chunk] = []
    monitor.start(got.append)
    # Wait (bounded) until the worker has read the first block, then stop.
    for _ in range(500):
        if got:
            break
        threading.Event().wait(0.01)
    res.script += [
        *checked("ABOR"),
        ("DATA:POIN?", b"1"),
        ("R? 1", f32([0.75])),
        ("DATA:POIN?", b"0"),
    ]
    monitor.stop()
    assert res.script == []
    assert np.concatenate([c.current for c in got]).tolist() == [0.25, 0.5, 0.75]
    assert [c.first_sample_id for c in got] == [0, 2]


def test_timeout_becomes_device_timeout() -> None:
    res = ScriptedResource([("*CLS", None), ("*IDN?", None)])
    monitor = N6705(res, voltage_limit_v=3.6)
    with pytest.raises(DeviceTimeout, match=r"\*IDN\?"):
        monitor.connect()


OK = b'+0,"No error"'


def test_n6705_connect_aborts_a_crashed_session_s_logging_and_switches_the_dut_off() -> None:
    """A crashed session leaves the Elog or digitizer running and the output on (issue 22.3)."""
    res = ScriptedResource([
        ("*CLS", None), ("*IDN?", b"Keysight Technologies,N6705C,X,Y"),
        ("ABOR:ELOG (@1)", None), ("ABOR:ACQ (@1)", None), ("SYST:ERR?", OK),
        ("OUTP OFF,(@1)", None), ("SYST:ERR?", OK),
    ])
    monitor = N6705(res, voltage_limit_v=3.6)
    monitor.connect()
    assert res.script == [] and monitor.settings()["output"] == "off"


def test_34465a_connect_aborts_a_crashed_session_s_measurement() -> None:
    res = ScriptedResource([
        ("*CLS", None), ("*IDN?", b"Keysight Technologies,34465A,X,Y"),
        ("ABOR", None), ("SYST:ERR?", OK),
    ])
    Keysight34465A(res, voltage_limit_v=3.6).connect()
    assert res.script == []


def test_wrong_model_is_refused() -> None:
    res = ScriptedResource([("*CLS", None), ("*IDN?", b"Keysight Technologies,34465A,X,Y")])
    with pytest.raises(DeviceError, match="not a N67"):
        N6705(res, voltage_limit_v=3.6).connect()


def test_bad_trigger_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(DeviceError, match=r"PIN1\.\.PIN7"):
        N6705(ScriptedResource([]), voltage_limit_v=3.6, trigger="PIN9")


@pytest.mark.parametrize(
    "cls,address,model",
    [
        (N6705, "TCPIP0::10.0.0.5::5025::SOCKET", "N6705C"),
        (Keysight34465A, "TCPIP0::10.0.0.6::5025::SOCKET", "34465A"),
    ],
)
def test_pyvisa_sim_open_and_identify(cls, address: str, model: str) -> None:
    pytest.importorskip("pyvisa_sim")
    monitor = cls.open(address, voltage_limit_v=3.6, backend=f"{YAML}@sim")
    try:
        assert model in monitor.identity
        report = monitor.self_test()
        assert model in report["identity"] and report["errors"] == []
    finally:
        monitor.close()
