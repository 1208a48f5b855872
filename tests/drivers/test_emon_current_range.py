"""The energy monitors' current range: tolerant spellings, per-driver refusals, and the exact
topics (Joulescope) and SCPI commands (Keysight) a fixed range or "auto" sends."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.emon import open_monitor, ranges
from drivers.emon.base import Chunk
from drivers.emon.joulescope import Joulescope
from drivers.emon.keysight import N6705, Keysight34465A
from drivers.errors import DeviceError

from .test_joulescope import DEV, DEV110, ScriptedDriver, emit_all
from .test_keysight import DMM_CONFIG, N6705_CONFIG, OK, ScriptedResource, checked


# -- spellings ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "amps"), [
    ("0.018", 0.018), ("18 mA", 0.018), ("18mA", 0.018), ("18 MA", 0.018), ("1e-3", 1e-3),
    ("180 µA", 180e-6), ("180 uA", 180e-6), ("180 \u03bcA", 180e-6), ("10 A", 10.0),
    (" 2A ", 2.0), (".5", 0.5), ("100 nA", 1e-7),
])
def test_parse_amps(text: str, amps: float) -> None:
    assert ranges.parse_amps(text) == pytest.approx(amps, rel=1e-12)


@pytest.mark.parametrize("text", ["", "mA", "18 mV", "18 m A", "1e999", "nan", "ten"])
def test_parse_amps_refuses(text: str) -> None:
    with pytest.raises(ValueError):
        ranges.parse_amps(text)


@pytest.mark.parametrize(("driver", "text", "want"), [
    ("joulescope", "18mA", "18 mA"), ("joulescope", "0.018", "18 mA"),
    ("joulescope", "180 uA", "180 µA"), ("joulescope", "10", "10 A"),
    ("joulescope", "AUTO", "auto"), ("n6705", "1e-3", "0.001"), ("n6705", "100 mA", "0.1"),
    ("n6705", "3.06", "3.06"), ("34465a", "0.1", "0.1"), ("34465a", "10 uA", "1e-05"),
    ("lpm01a", "auto", "auto"), ("rapl", " Auto ", "auto"), ("none", "auto", "auto"),
])
def test_normalize(driver: str, text: str, want: str) -> None:
    assert ranges.normalize(driver, text) == want


@pytest.mark.parametrize(("driver", "text", "hint"), [
    ("joulescope", "20 mA", "180 mA, 18 mA"),
    ("joulescope", "fast", "2 A (JS110 only)"),
    ("n6705", "5", "up to 3.06"),
    ("34465a", "10", "up to 3"),
    ("34465a", "0", "up to 3"),
    ("lpm01a", "18 mA", "dynamic acquisition mode"),
    ("nvml", "0.1", "no current range"),
])
def test_normalize_refusal_says_what_the_driver_takes(driver: str, text: str, hint: str) -> None:
    with pytest.raises(ranges.RangeError) as err:
        ranges.normalize(driver, text)
    assert text in err.value.message and hint in err.value.hint


def test_open_monitor_refuses_a_range_before_opening_anything() -> None:
    with pytest.raises(DeviceError, match="lpm01a takes only") as err:
        open_monitor("lpm01a", "/dev/nonexistent-rig-port", voltage_limit_v=3.3,
                      current_range="18 mA")
    assert "auto-ranges" in err.value.hint


# -- Joulescope ---------------------------------------------------------------------------------
def opened(path: str, current_range: str) -> tuple[Joulescope, ScriptedDriver]:
    drv = ScriptedDriver([path])
    js = Joulescope.open("", voltage_limit_v=3.6, driver_factory=lambda: drv,
                         current_range=current_range)
    return js, drv


def test_js220_fixed_range_selects_then_goes_manual() -> None:
    js, drv = opened(DEV, "18mA")
    assert drv.calls[-1] == ("publish", f"{DEV}/s/i/range/mode", "off")  # opened disconnected
    drv.calls.clear()
    js.power_on()
    assert drv.calls == [("publish", f"{DEV}/s/i/range/select", "18 mA"),
                         ("publish", f"{DEV}/s/i/range/mode", "manual")]
    s = js.settings()
    assert (s["current_range"], s["current_range_full_scale_a"], s["range"]) == (
        "18 mA", 0.018, "manual")
    drv.calls.clear()
    js.power_off()
    assert drv.calls == [("publish", f"{DEV}/s/i/range/mode", "off")]
    js.close()


def test_js110_fixed_range_is_its_range_selection() -> None:
    js, drv = opened(DEV110, "0.18")
    drv.calls.clear()
    js.power_on()
    js.power_off()
    assert drv.calls == [("publish", f"{DEV110}/s/i/range/select", "180 mA"),
                         ("publish", f"{DEV110}/s/i/range/select", "off")]
    assert js.settings()["current_range"] == "180 mA"
    js.close()


def test_auto_reports_auto() -> None:
    js, drv = opened(DEV, "auto")
    drv.calls.clear()
    js.power_on()
    assert drv.calls == [("publish", f"{DEV}/s/i/range/mode", "auto")]
    s = js.settings()
    assert s["current_range"] == "auto" and s["current_range_full_scale_a"] is None
    js.close()


@pytest.mark.parametrize(("path", "rng", "match"), [
    (DEV, "2 A", "js220: there is no 2 A range"),
    (DEV110, "20 mA", "not a Joulescope range"),
])
def test_a_range_the_model_lacks_is_refused_before_anything_is_published(
        path: str, rng: str, match: str) -> None:
    drv = ScriptedDriver([path])
    with pytest.raises(DeviceError, match=match):
        Joulescope.open("", voltage_limit_v=3.6, driver_factory=lambda: drv, current_range=rng)
    assert drv.calls == [("device_paths",), ("finalize",)]


def test_samples_at_a_fixed_ranges_full_scale_are_counted_and_noted() -> None:
    js, drv = opened(DEV, "18 mA")
    js.configure(3.3, 1000)
    chunks: list[Chunk] = []
    js.start(chunks.append)
    # The instrument saturates at full scale: float32(0.018) is what a clipped sample reads.
    emit_all(drv, 0, [0.002, 0.018, 0.018, 0.0179], [3.3] * 4, [1, 1, 1, 1])
    emit_all(drv, 4, [0.018, 0.001, 0.001, 0.001], [3.3] * 4, [1, 1, 1, 1])
    js.stop()
    assert sum(len(c) for c in chunks) == 8
    assert js.over_range_samples == 3 and js.settings()["over_range_samples"] == 3
    assert js.stats.notes == ["current at the 18 mA range's full scale from sample 1 on: "
                              "clipped; use a larger range or auto"]
    js.close()


def test_auto_never_counts_over_range() -> None:
    js, drv = opened(DEV, "auto")
    js.configure(3.3, 1000)
    js.start(lambda chunk: None)
    emit_all(drv, 0, [10.0] * 8, [3.3] * 8, [1] * 8)
    drv.emit("s/i/range/!data", 0, np.zeros(8, np.uint8))  # auto-ranging: in the 10 A range
    js.stop()
    assert js.over_range_samples == 0 and js.stats.notes == []
    js.close()


# -- Keysight -----------------------------------------------------------------------------------
def n6705_script(range_cmd: str, range_reply: bytes) -> list[tuple[str, bytes | None]]:
    """The N6705 configuration with another range command and reply."""
    script = [(range_cmd if cmd.startswith("SENS:CURR:RANG ") else cmd, reply)
              for cmd, reply in N6705_CONFIG]
    assert script[-1][0] == "SENS:CURR:RANG? (@1)"
    return [*script[:-1], ("SENS:CURR:RANG? (@1)", range_reply)]


def test_n6705_fixed_range_is_sent_and_read_back() -> None:
    res = ScriptedResource(n6705_script("SENS:CURR:RANG 0.0005,(@1)", b"0.001"))
    monitor = N6705(res, voltage_limit_v=3.6, points=4, pretrigger=1, current_range_a=5e-4)
    monitor.configure(3.3, 10_000)
    assert res.script == []
    s = monitor.settings()
    assert s["current_range"] == "0.001 A" and s["current_range_a"] == 0.001
    assert s["current_range_requested"] == "0.0005" and s["autorange"] is False
    assert "autorange_note" not in s


def test_n6705_auto_keeps_the_fixed_default_and_says_why() -> None:
    res = ScriptedResource(n6705_script("SENS:CURR:RANG 0.1,(@1)", b"0.1"))
    monitor = N6705(res, voltage_limit_v=3.6, points=4, pretrigger=1)
    monitor.configure(3.3, 10_000)
    assert res.script == []
    assert not any("AUTO" in w for w in res.writes)  # no autoranging command
    s = monitor.settings()
    assert s["current_range"] == "0.1 A" and s["current_range_requested"] == "auto"
    assert "not used during a timed capture" in s["autorange_note"]


def test_34465a_fixed_range_conversation() -> None:
    script = [(cmd.replace("CONF:CURR:DC 0.01", "CONF:CURR:DC 0.001"), reply)
              for cmd, reply in DMM_CONFIG[:-1]]
    script += [("CURR:DC:RANG?", b"+1.00000000E-03")]
    res = ScriptedResource(script)
    monitor = Keysight34465A(res, voltage_limit_v=3.6, current_range_a=1e-3, max_samples=3)
    monitor.configure(3.3, 10_000)
    assert res.script == [] and res.writes[0] == "CONF:CURR:DC 0.001"
    s = monitor.settings()
    assert s["current_range"] == "0.001 A" and s["current_range_a"] == 0.001


def test_34465a_auto_sends_the_fixed_default() -> None:
    monitor = Keysight34465A(ScriptedResource([]), voltage_limit_v=3.6)
    assert monitor._range_to_send() == ranges.KEYSIGHT_DEFAULT_RANGE_A == 0.1


def test_keysight_open_takes_the_benches_text(monkeypatch) -> None:
    res = ScriptedResource([
        ("*CLS", None), ("*IDN?", b"Keysight Technologies,N6705C,X,Y"),
        # the known state at connect (issue 22.3): a crashed session's logging aborted, DUT off
        ("ABOR:ELOG (@1)", None), ("ABOR:ACQ (@1)", None), ("SYST:ERR?", OK),
        *checked("OUTP OFF,(@1)"),
    ])
    monkeypatch.setattr("drivers.emon.keysight.open_visa_resource", lambda *a, **k: res)
    monitor = open_monitor("n6705", "TCPIP0::x::5025::SOCKET", voltage_limit_v=3.6,
                           current_range="100 mA")
    assert isinstance(monitor, N6705) and monitor.current_range_a == 0.1
    res.script += checked("OUTP OFF,(@1)")
    monitor.close()
    assert res.script == []


def test_keysight_open_refuses_before_opening_the_resource(monkeypatch) -> None:
    def no_visa(*args, **kwargs):
        raise AssertionError("the instrument was opened")

    monkeypatch.setattr("drivers.emon.keysight.open_visa_resource", no_visa)
    with pytest.raises(DeviceError, match="outside the 34465a's current ranges"):
        Keysight34465A.open("TCPIP0::x::5025::SOCKET", voltage_limit_v=3.6, current_range="10")

