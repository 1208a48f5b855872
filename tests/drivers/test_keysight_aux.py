"""N6705 aux mode against a scripted VISA resource: the exact SCPI of the external data logger
with the timestamp line on an N6781A/N6785A auxiliary input, the records it turns into samples
and GPIO bits, and what it refuses before sending anything."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.keysight import N6705, ElogUnavailable, Keysight34465A
from drivers.errors import DeviceError, InstrumentError, VoltageLimitError
from tests.deadline import wait_until

from .test_keysight import OK, ScriptedResource, checked, f32

FETCH = "FETC:ELOG? 996,(@1)"  # 1 s of records at 1 / 1.00352 ms
EMPTY = b"#10"

AUX_CONFIG = [
    ("SYST:CHAN:MOD? (@1)", b"N6781A"),
    ("*OPT?", b"0"),  # no options (IEEE 488.2: "0" when none is installed)
    *checked(
        "EMUL PS2Q,(@1)",
        "FUNC VOLT,(@1)",
        "VOLT:LEV 1.8,(@1)",
        "CURR:LIM 0.1,(@1)",
        "VOLT:PROT:REM 3.3,(@1)",  # the bench's voltage limit (aux() below)
        "SENS:FUNC:VOLT:INP AUX,(@1)",
        "SENS:ELOG:FUNC:CURR ON,(@1)",
        "SENS:ELOG:FUNC:CURR:MINM OFF,(@1)",
        "SENS:ELOG:FUNC:VOLT ON,(@1)",
        "SENS:ELOG:FUNC:VOLT:MINM ON,(@1)",
        "SENS:ELOG:CURR:RANG 0.1,(@1)",
        "SENS:ELOG:PER 0.001,(@1)",
        "TRIG:ELOG:SOUR IMM,(@1)",
        "FORM REAL",
        "FORM:BORD NORM",
    ),
    ("SENS:ELOG:PER? (@1)", b"0.00100352"),  # 49 x 20.48 us
    ("SENS:ELOG:CURR:RANG? (@1)", b"0.1"),
    ("VOLT? (@1)", b"+1.800000E+00"),
]


def aux(resource: ScriptedResource, **kw) -> N6705:
    monitor = N6705(resource, voltage_limit_v=3.3, timestamp_input="aux", **kw)
    monitor.identity = "Keysight Technologies,N6705C,X,Y"
    return monitor


def records(*rows: tuple[float, float, float, float]) -> bytes:
    """An Elog REAL block: per record current avg, aux avg, aux min, aux max."""
    return f32([v for row in rows for v in row])


def test_aux_elog_conversation_and_samples() -> None:
    # Two fetches: the DUT just switched on (0 V), high, a pulse; then between the thresholds
    # (keeps low), high again. Bits: unarmed 1, 1, 0 | 0, 1 -> one falling edge, at sample 2.
    script = [
        *AUX_CONFIG,
        *checked("OUTP ON,(@1)"),
        ("STAT:QUES:COND? (@1)", b"0"),
        *checked("INIT:ELOG (@1)"),
        (FETCH, records((1e-3, 0.2, 0.0, 1.8), (1e-3, 1.8, 1.8, 1.8), (2e-3, 1.78, 0.0, 1.8))),
        ("SYST:ERR?", OK),
        (FETCH, records((2e-3, 1.2, 1.0, 1.8), (1e-3, 1.8, 1.8, 1.8))),
        ("SYST:ERR?", OK),
    ]
    res = ScriptedResource(script, idle={FETCH: EMPTY, "SYST:ERR?": OK})
    monitor = aux(res)
    assert monitor.sees_every_edge is True
    monitor.configure(1.8, 1000)
    assert monitor.sample_rate == pytest.approx(1 / 1.00352e-3)
    monitor.power_on()
    chunks: list[Chunk] = []
    monitor.start(chunks.append)
    wait_until(lambda: len(chunks) == 2, "both fetches", timeout_s=5.0)
    res.script += checked("ABOR:ELOG (@1)")
    monitor.stop()
    res.script += checked("OUTP OFF,(@1)")
    monitor.close()
    assert res.script == [] and res.closed
    assert [c.first_sample_id for c in chunks] == [0, 3]
    current = np.concatenate([c.current for c in chunks])
    np.testing.assert_allclose(current, [1e-3, 1e-3, 2e-3, 2e-3, 1e-3], rtol=1e-7)
    # Power uses the programmed voltage read back, never the aux channel.
    np.testing.assert_array_equal(np.concatenate([c.voltage for c in chunks]), 1.8)
    assert np.concatenate([c.gpio for c in chunks]).tolist() == [1, 1, 0, 0, 1]
    s = monitor.settings()
    assert s["module"] == "N6781A" and s["timestamp_input"] == "aux"
    assert s["interval_s"] == 0.00100352 and s["voltage_v"] == 1.8
    assert (s["aux_threshold_low_v"], s["aux_threshold_high_v"]) == pytest.approx((0.54, 1.26))
    assert s["voltage_source"].startswith("programmed output voltage")
    assert s["elog_record"] == ["current", "aux_avg_v", "aux_min_v", "aux_max_v"]
    assert (s["emulation"], s["priority"], s["current_limit_command"]) == (
        "PS2Q", "voltage", "CURR:LIM")
    assert s["options"] == []
    assert s["over_voltage_protection_v"] == 3.3
    assert monitor.stats.notes == []


def test_a_module_without_an_aux_input_is_refused_before_any_setting() -> None:
    res = ScriptedResource([("SYST:CHAN:MOD? (@1)", b"N6762A")])
    with pytest.raises(DeviceError) as info:
        aux(res).configure(1.8, 1000)
    assert "channel 1 is an N6762A, which has no auxiliary voltage input" in str(info.value)
    assert "N6781A or N6785A" in info.value.hint
    assert res.writes == ["SYST:CHAN:MOD? (@1)"]


@pytest.mark.parametrize("options", [b"055", b"054,055", b'"055"'])
def test_option_055_refuses_elog_before_any_setting(options: bytes) -> None:
    """Option 055 removes the external data logger (N6705 User's Guide, "External Data
    Logging"): the refusal names the option and the setups to use instead, and nothing of the
    source or the Elog has been sent."""
    res = ScriptedResource([("SYST:CHAN:MOD? (@1)", b"N6781A"), ("*OPT?", options)])
    with pytest.raises(ElogUnavailable) as info:
        aux(res).configure(1.8, 1000)
    assert isinstance(info.value, DeviceError)
    assert "option 055" in str(info.value) and "external data logger" in str(info.value)
    assert 'timestamp_input = "gpio"' in info.value.hint
    assert "an LPM01A or a Joulescope" in info.value.hint
    assert res.writes == ["SYST:CHAN:MOD? (@1)", "*OPT?"]


def test_other_options_do_not_refuse_elog() -> None:
    """Only 055 removes Elog; an option list without it goes on to the settings."""
    script = [AUX_CONFIG[0], ("*OPT?", b"054"), *AUX_CONFIG[2:]]
    res = ScriptedResource(script)
    monitor = aux(res)
    monitor.configure(1.8, 1000)
    assert res.script == [] and monitor.settings()["options"] == ["054"]


def test_values_outside_the_elog_spans_send_nothing() -> None:
    res = ScriptedResource([])
    with pytest.raises(DeviceError, match="out of range"):
        aux(res).configure(1.8, 2500)  # above 1 / 409.6 us: 4 logged values
    with pytest.raises(VoltageLimitError):
        aux(res).configure(3.4, 1000)
    with pytest.raises(DeviceError, match=r"current limit 5 A is outside 0\.\.3\.06 A"):
        aux(res, current_limit_a=5.0).configure(1.8, 1000)
    assert res.writes == []


def test_an_error_while_logging_is_a_fault_at_once() -> None:
    overrun = b'-230,"Data corrupt or stale; Elog FIFO overrun, 12 records lost"'
    script = [
        *AUX_CONFIG,
        *checked("INIT:ELOG (@1)"),
        (FETCH, records((1e-3, 1.8, 1.8, 1.8))),
        ("SYST:ERR?", overrun),
        ("SYST:ERR?", OK),
        ("ABOR:ELOG (@1)", None),  # best effort on the way out
    ]
    res = ScriptedResource(script)
    monitor = aux(res)
    monitor.configure(1.8, 1000)
    monitor.start(lambda chunk: None)
    wait_until(lambda: monitor.fault is not None, "the fault", timeout_s=5.0)
    assert isinstance(monitor.fault, InstrumentError) and "FIFO overrun" in str(monitor.fault)
    with pytest.raises(InstrumentError, match="reported while logging"):
        monitor.stop()
    assert res.script == []


def test_unknown_timestamp_input_is_refused() -> None:
    with pytest.raises(DeviceError, match="'trigger' is not gpio or aux"):
        N6705(ScriptedResource([]), voltage_limit_v=3.3, timestamp_input="trigger")


def test_the_refusal_hints_name_the_setups_that_see_every_edge() -> None:
    gpio = N6705(ScriptedResource([]), voltage_limit_v=3.3)
    assert gpio.sees_every_edge is False
    assert 'timestamp_input = "aux"' in gpio.every_edge_hint
    dmm = Keysight34465A(ScriptedResource([]), voltage_limit_v=3.3)
    assert dmm.sees_every_edge is False
    assert ("an N6705 with an N6781A/N6785A SMU and its auxiliary input" in dmm.every_edge_hint
            and "an LPM01A or a Joulescope" in dmm.every_edge_hint)
