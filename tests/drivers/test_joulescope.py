"""The Joulescope driver against a scripted Driver that records every call: exact topics and
values, stream alignment by sample id, drops, GPI padding, errors and the voltage guard."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.joulescope import Joulescope
from drivers.errors import DeviceError, DeviceTimeout, InstrumentError, VoltageLimitError

DEV = "u/js220/000415"
DEV110 = "u/js110/001234"
DATA = ["s/i/!data", "s/v/!data", "s/gpi/0/!data", "s/gpi/1/!data"]
CTRL = ["s/i/ctrl", "s/v/ctrl", "s/gpi/0/ctrl", "s/gpi/1/ctrl"]
#: The range stream an auto-ranging acquisition adds (the tests of alignment, drops and GPI
#: open without it: `record_range=False`; it has tests of its own below).
RANGE_DATA, RANGE_CTRL = "s/i/range/!data", "s/i/range/ctrl"
RATES = [1_000_000, 100_000, 10_000, 1_000]


class ScriptedDriver:
    """Records every call; `fail` maps a call tuple to the exception it raises."""

    def __init__(self, paths: list[str] | None = None) -> None:
        self.paths = [DEV] if paths is None else paths
        self.calls: list[tuple[Any, ...]] = []
        self.fail: dict[tuple[Any, ...], BaseException] = {}
        self.subs: dict[str, Any] = {}
        self.meta: Any = {"options": [[r, f"{r} Hz"] for r in RATES]}

    def _record(self, *call: Any) -> None:
        self.calls.append(call)
        if call in self.fail:
            raise self.fail[call]

    def device_paths(self, timeout=None):
        self._record("device_paths")
        return list(self.paths)

    def open(self, device_prefix, mode=None, timeout=None):
        self._record("open", device_prefix, mode)

    def close(self, device_prefix, timeout=None):
        self._record("close", device_prefix)

    def publish(self, topic, value, timeout=None):
        self._record("publish", topic, value)

    def query(self, topic, timeout=None):
        self._record("query", topic)
        if topic.endswith("h/fs%"):
            if isinstance(self.meta, BaseException):
                raise self.meta
            return self.meta
        return 1000

    def subscribe(self, topic, flags, fn, timeout=None):
        self._record("subscribe", topic, tuple(flags))
        self.subs[topic] = fn

    def unsubscribe(self, topic, fn, timeout=None):
        self._record("unsubscribe", topic)
        if self.subs.get(topic) is not fn:  # the real binding matches the very object
            raise RuntimeError(f"jsdrv_unsubscribe failed 16 NOT_FOUND | {topic}")
        del self.subs[topic]

    def finalize(self, timeout=None):
        self._record("finalize")

    def emit(self, suffix: str, out_id: int, data: np.ndarray, decimate: int = 1000,
             sample_rate: int = 1_000_000) -> None:
        """Publish one block of stream `suffix` whose first sample id at its own rate is
        `out_id` (``sample_rate / decimate``)."""
        topic = f"{self.paths[0]}/{suffix}"
        self.subs[topic](topic, {
            "sample_id": out_id * decimate, "utc": 0, "field_id": 1, "index": 0,
            "sample_rate": sample_rate, "decimate_factor": decimate,
            "time_map": {"offset_time": 0, "offset_counter": 0, "counter_rate": 1e6},
            "data": data,
        })


def opened(paths: list[str] | None = None, limit: float = 3.6, *, record_range: bool = False,
           **options: Any) -> tuple[Joulescope, ScriptedDriver]:
    drv = ScriptedDriver(paths)
    js = Joulescope.open("", voltage_limit_v=limit, driver_factory=lambda: drv,
                         record_range=record_range, **options)
    return js, drv


def started(limit: float = 3.6, *, record_range: bool = False
            ) -> tuple[Joulescope, ScriptedDriver, list[Chunk]]:
    js, drv = opened(limit=limit, record_range=record_range)
    js.configure(3.3, 1000)
    chunks: list[Chunk] = []
    js.start(chunks.append)
    drv.calls.clear()
    return js, drv, chunks


def packed(bits: list[int] | np.ndarray) -> np.ndarray:
    return np.packbits(np.asarray(bits, dtype=np.uint8), bitorder="little")


def emit_all(drv: ScriptedDriver, out_id: int, current, voltage, gpi0, gpi1=None) -> None:
    n = len(current)
    drv.emit("s/i/!data", out_id, np.asarray(current, np.float32))
    drv.emit("s/v/!data", out_id, np.asarray(voltage, np.float32))
    drv.emit("s/gpi/0/!data", out_id, packed(gpi0))
    drv.emit("s/gpi/1/!data", out_id, packed(np.zeros(n) if gpi1 is None else gpi1))


def joined(chunks: list[Chunk]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in chunks])
    return (ids, np.concatenate([c.current for c in chunks]),
            np.concatenate([c.voltage for c in chunks]), np.concatenate([c.gpio for c in chunks]))


# -- conversations ------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "range_topic"), [(DEV, "s/i/range/mode"),
                                                   (DEV110, "s/i/range/select")])
def test_open_configure_power_start_stop_close_conversation(path: str, range_topic: str) -> None:
    drv = ScriptedDriver([path])
    js = Joulescope.open("", voltage_limit_v=3.6, driver_factory=lambda: drv)  # the defaults
    assert drv.calls == [("device_paths",), ("open", path, "restore"),
                         ("publish", f"{path}/{range_topic}", "off")]
    drv.calls.clear()
    js.configure(3.3, 10_000)
    assert drv.calls == [("query", f"{path}/h/fs%"), ("publish", f"{path}/h/fs", 10_000)]
    assert js.sample_rate == 10_000
    drv.calls.clear()
    js.start(lambda chunk: None)
    # Auto-ranging (the default): the range stream too, after the four others.
    assert drv.calls == (
        [("subscribe", f"{path}/{d}", ("pub",)) for d in [*DATA, RANGE_DATA]]
        + [("publish", f"{path}/{c}", 1) for c in [*CTRL, RANGE_CTRL]]
    )
    drv.calls.clear()
    js.power_on()
    js.power_off()
    assert drv.calls == [("publish", f"{path}/{range_topic}", "auto"),
                         ("publish", f"{path}/{range_topic}", "off")]
    drv.calls.clear()
    js.stop()
    assert drv.calls == ([("publish", f"{path}/{c}", 0) for c in [*CTRL, RANGE_CTRL]]
                         + [("unsubscribe", f"{path}/{d}") for d in [*DATA, RANGE_DATA]])
    drv.calls.clear()
    js.close()
    js.close()  # idempotent: nothing more is sent
    assert drv.calls == [("publish", f"{path}/{range_topic}", "off"), ("close", path),
                         ("finalize",)]


def test_close_while_running_stops_then_disconnects() -> None:
    js, drv, _ = started()
    js.close()
    assert drv.calls == (
        [("publish", f"{DEV}/{c}", 0) for c in CTRL]
        + [("unsubscribe", f"{DEV}/{d}") for d in DATA]
        + [("publish", f"{DEV}/s/i/range/mode", "off"), ("close", DEV), ("finalize",)]
    )


def test_settings_and_self_test() -> None:
    js, drv = opened()
    js.configure(3.3, 1000)
    s = js.settings()
    assert s["driver"] == "joulescope" and s["model"] == "js220" and s["simulated"] is False
    assert s["sample_rate_hz"] == 1000 and s["voltage_v"] == 3.3
    assert s["range_topic"] == "s/i/range/mode" and s["range"] == "off"
    drv.calls.clear()
    info = js.self_test()
    assert drv.calls == [("device_paths",), ("query", f"{DEV}/h/fs")]
    assert info["serial"] == "000415" and info["model"] == "js220"


@pytest.mark.parametrize("address", ["", "u/js220/999999"])
def test_address_errors_list_the_devices(address: str) -> None:
    drv = ScriptedDriver([DEV, "u/js110/000001"])
    with pytest.raises(DeviceError) as err:
        Joulescope.open(address, voltage_limit_v=3.6, driver_factory=lambda: drv)
    assert DEV in str(err.value) and "u/js110/000001" in str(err.value)
    assert drv.calls[-1] == ("finalize",)


def test_no_device_attached() -> None:
    drv = ScriptedDriver([])
    with pytest.raises(DeviceError, match="no Joulescope is attached"):
        Joulescope.open("", voltage_limit_v=3.6, driver_factory=lambda: drv)


def test_explicit_address_is_opened() -> None:
    drv = ScriptedDriver(["u/js110/000001", DEV])
    js = Joulescope.open(DEV, voltage_limit_v=3.6, driver_factory=lambda: drv)
    assert js.device_path == DEV and ("open", DEV, "restore") in drv.calls


def test_voltage_above_limit_sends_nothing() -> None:
    js, drv = opened(limit=3.3)
    drv.calls.clear()
    with pytest.raises(VoltageLimitError, match=r"3\.6 V is above the bench voltage limit"):
        js.configure(3.6, 1000)
    assert drv.calls == []


def test_unavailable_rate_refused_with_the_list() -> None:
    js, drv = opened()
    drv.calls.clear()
    with pytest.raises(DeviceError) as err:
        js.configure(3.3, 3000)
    assert "3000 Hz is not available" in str(err.value)
    assert "1000, 10000, 100000, 1e+06" in str(err.value)
    assert drv.calls == [("query", f"{DEV}/h/fs%")]


def test_rates_fall_back_to_the_model_table() -> None:
    js, drv = opened([DEV110])
    drv.meta = RuntimeError("no metadata")
    js.configure(3.3, 2_000_000)  # only a JS110 has 2 MHz
    assert drv.calls[-1] == ("publish", f"{DEV110}/h/fs", 2_000_000)


def test_instrument_error_names_the_command() -> None:
    js, drv = opened()
    drv.fail[("publish", f"{DEV}/h/fs", 1000)] = RuntimeError("jsdrv error 5")
    with pytest.raises(InstrumentError) as err:
        js.configure(3.3, 1000)
    assert err.value.command == f"{DEV}/h/fs = 1000"
    assert "refused" in str(err.value) and "h/fs = 1000" in str(err.value)
    assert "jsdrv error 5" in str(err.value)


def test_timeout_becomes_device_timeout() -> None:
    js, drv = opened()
    drv.fail[("publish", f"{DEV}/s/i/range/mode", "auto")] = TimeoutError()
    with pytest.raises(DeviceTimeout, match=r"no answer to .*range/mode"):
        js.power_on()


def test_simulated_without_driver_factory_is_refused() -> None:
    with pytest.raises(DeviceError, match="driver_factory"):
        Joulescope.open("", voltage_limit_v=3.6, simulated=True)


def test_missing_sdk_says_install_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyjoulescope_driver", None)
    with pytest.raises(DeviceError) as err:
        Joulescope.open("", voltage_limit_v=3.6)
    assert "install the joulescope extra" in str(err.value)


# -- streams ------------------------------------------------------------------------------------
def test_aligned_blocks_become_chunks_rebased_to_zero() -> None:
    js, drv, chunks = started()
    n = 16
    cur = np.arange(n) * 1e-3
    g0 = np.ones(n, np.uint8)
    g0[5] = 0
    g1 = np.zeros(n, np.uint8)
    g1[7] = 1
    emit_all(drv, 5000, cur, np.full(n, 3.3), g0, g1)
    emit_all(drv, 5000 + n, cur + 1, np.full(n, 3.3), np.ones(n))
    js.stop()
    ids, c, v, g = joined(chunks)
    assert ids.tolist() == list(range(2 * n))
    np.testing.assert_allclose(c, np.concatenate([cur, cur + 1]).astype(np.float32))
    assert c.dtype == np.float64 and v.dtype == np.float64 and g.dtype == np.uint8
    np.testing.assert_allclose(v, np.float32(3.3))
    assert np.flatnonzero((g & 1) == 0).tolist() == [5]
    assert np.flatnonzero(g & 2).tolist() == [7]
    assert js.stats.dropped == 0 and js.stats.samples == 2 * n


def test_misaligned_arrival_order_is_aligned_by_sample_id() -> None:
    js, drv, chunks = started()
    # 3 blocks of 10; the streams run ahead of each other and start at different ids.
    cur = np.arange(40, dtype=np.float32)
    gpi = np.ones(40, np.uint8)
    gpi[[3, 17, 29]] = 0
    for k in range(4):
        drv.emit("s/i/!data", 100 + 10 * k, cur[10 * k : 10 * k + 10])
    assert chunks == []
    drv.emit("s/gpi/1/!data", 110, packed(np.zeros(30)))
    drv.emit("s/v/!data", 105, np.full(35, 3.3, np.float32))
    for k in range(4):
        drv.emit("s/gpi/0/!data", 100 + 10 * k, packed(gpi[10 * k : 10 * k + 10]))
    js.stop()
    ids, c, _, g = joined(chunks)
    # Streams enabled one after another: output starts where all of them have data (id 110).
    assert ids.tolist() == list(range(30))
    np.testing.assert_array_equal(c, cur[10:40])
    assert np.flatnonzero((g & 1) == 0).tolist() == [17 - 10, 29 - 10]
    assert js.stats.dropped == 0


def test_a_dropped_block_is_counted_and_visible_in_the_ids() -> None:
    js, drv, chunks = started()
    n = 10
    emit_all(drv, 0, np.zeros(n), np.full(n, 3.3), np.ones(n))
    # The current stream loses ids 10..19; the other streams have them.
    drv.emit("s/v/!data", 10, np.full(n, 3.3, np.float32))
    drv.emit("s/gpi/0/!data", 10, packed(np.ones(n)))
    drv.emit("s/gpi/1/!data", 10, packed(np.zeros(n)))
    emit_all(drv, 20, np.ones(n), np.full(n, 3.3), np.ones(n))
    js.stop()
    assert joined(chunks)[0].tolist() == list(range(10)) + list(range(20, 30))
    assert 20 in [c.first_sample_id for c in chunks]  # the gap is between two chunks
    assert js.stats.dropped == 10
    assert any("current: samples 10..19 missing" in note for note in js.stats.notes)


def test_gpi_padding_bits_are_not_samples() -> None:
    js, drv, chunks = started()
    # Blocks of 13 samples: each GPI block is 2 bytes, 3 of its bits padding (set to 0 here).
    rng = np.random.default_rng(1)
    levels = rng.integers(0, 2, 52).astype(np.uint8)
    for k in range(4):
        sl = slice(13 * k, 13 * k + 13)
        drv.emit("s/gpi/0/!data", 13 * k, packed(levels[sl]))  # GPI ahead of the analog data
        drv.emit("s/gpi/1/!data", 13 * k, packed(levels[sl]))
        drv.emit("s/i/!data", 13 * k, np.arange(52, dtype=np.float32)[sl])
        drv.emit("s/v/!data", 13 * k, np.full(13, 3.3, np.float32))
    js.stop()
    ids, c, _, g = joined(chunks)
    assert ids.tolist() == list(range(52))
    np.testing.assert_array_equal(c, np.arange(52))
    np.testing.assert_array_equal(g & 1, levels)
    np.testing.assert_array_equal((g >> 1) & 1, levels)
    assert js.stats.dropped == 0


def test_decimated_sample_ids() -> None:
    js, drv, chunks = started()
    drv.emit("s/i/!data", 7, np.ones(8, np.float32), decimate=100)
    drv.emit("s/v/!data", 7, np.full(8, 3.3, np.float32), decimate=100)
    drv.emit("s/gpi/0/!data", 7, packed(np.ones(8)), decimate=100)
    drv.emit("s/gpi/1/!data", 7, packed(np.zeros(8)), decimate=100)
    drv.emit("s/i/!data", 15, np.ones(8, np.float32), decimate=100)
    drv.emit("s/v/!data", 15, np.full(8, 3.3, np.float32), decimate=100)
    drv.emit("s/gpi/0/!data", 15, packed(np.ones(8)), decimate=100)
    drv.emit("s/gpi/1/!data", 15, packed(np.zeros(8)), decimate=100)
    js.stop()
    assert joined(chunks)[0].tolist() == list(range(16))
    assert js.stats.dropped == 0


def test_measured_voltage_over_the_limit_disconnects_the_dut() -> None:
    js, drv, chunks = started(limit=3.6)
    n = 8
    emit_all(drv, 0, np.zeros(n), np.full(n, 3.3), np.ones(n))
    emit_all(drv, n, np.zeros(n), np.full(n, 5.0), np.ones(n))
    assert ("publish", f"{DEV}/s/i/range/mode", "off") in drv.calls
    assert isinstance(js.fault, VoltageLimitError)
    emit_all(drv, 2 * n, np.zeros(n), np.full(n, 3.3), np.ones(n))
    assert [c.first_sample_id for c in chunks] == [0]  # nothing after the fault is delivered
    with pytest.raises(VoltageLimitError, match=r"measured 5\.000 V at sample 8, above"):
        js.stop()
    with pytest.raises(VoltageLimitError):
        js.power_on()


def test_callback_error_surfaces_at_stop() -> None:
    js, drv = opened()
    js.configure(3.3, 1000)

    def broken(chunk: Chunk) -> None:
        raise ValueError("recorder broke")

    js.start(broken)
    emit_all(drv, 0, np.zeros(8), np.full(8, 3.3), np.ones(8))
    with pytest.raises(ValueError, match="recorder broke"):
        js.stop()


def test_a_silent_stream_fails_the_run_instead_of_growing_memory(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("drivers.emon.joulescope.UNALIGNED_MAX_S", 0.0)
    js, drv, chunks = started()
    block = 50_000
    for k in range(3):  # GPI1 never arrives
        drv.emit("s/i/!data", k * block, np.zeros(block, np.float32))
        drv.emit("s/v/!data", k * block, np.full(block, 3.3, np.float32))
        drv.emit("s/gpi/0/!data", k * block, packed(np.ones(block)))
    assert chunks == []
    with pytest.raises(DeviceError, match="gpi1 stopped arriving"):
        js.stop()


# -- streams at their own rates (a JS220: GPI at 2 MS/s, current and voltage at h/fs) ---------
JS220_ID_RATE = 2_000_000  # sample ids count at 2 MHz (js220_usb.c SAMPLING_FREQUENCY)


def test_js220_gpi_at_2_msps_is_cut_to_the_output_rate_low_if_any_input_was_low() -> None:
    js, drv, chunks = started()  # h/fs = 1000 Hz
    k = JS220_ID_RATE // 1000  # 2000 GPI samples per output sample
    first, n_out = 50, 48  # analog output ids 50..97
    g_start = first * k - 8  # the GPI starts 8 samples into output 49 (cut: only partly seen)
    g_end = (first + n_out) * k
    gpi0 = np.ones(g_end - g_start, np.uint8)
    gpi1 = np.ones(g_end - g_start, np.uint8)

    def low(levels: np.ndarray, at: int, length: int) -> None:
        levels[at - g_start : at - g_start + length] = 0

    low(gpi0, 55 * k + 777, 20)  # a 10 µs pulse inside output sample 55
    low(gpi0, 70 * k - 10, 20)  # straddles outputs 69 and 70
    low(gpi0, 91 * k - 1, 1)  # the last input sample of output 90
    low(gpi1, 80 * k, 1)  # the first input sample of output 80
    cur = np.arange(first, first + n_out, dtype=np.float32) * 1e-3
    gblock = 8 * 1237  # GPI blocks end anywhere inside an output sample's period
    g_at = g_start
    for a in range(first, first + n_out, 16):
        drv.emit("s/i/!data", a, cur[a - first : a - first + 16], k, JS220_ID_RATE)
        drv.emit("s/v/!data", a, np.full(16, 3.3, np.float32), k, JS220_ID_RATE)
        while g_at < min(g_end, (a + 16) * k):
            sl = slice(g_at - g_start, min(g_at - g_start + gblock, g_end - g_start))
            drv.emit("s/gpi/0/!data", g_at, packed(gpi0[sl]), 1, JS220_ID_RATE)
            drv.emit("s/gpi/1/!data", g_at, packed(gpi1[sl]), 1, JS220_ID_RATE)
            g_at += sl.stop - sl.start
    js.stop()
    ids, c, _, g = joined(chunks)
    assert ids.tolist() == list(range(n_out))
    np.testing.assert_array_equal(c, cur)
    assert np.flatnonzero((g & 1) == 0).tolist() == [55 - first, 69 - first, 70 - first,
                                                     90 - first]
    assert np.flatnonzero((g & 2) == 0).tolist() == [80 - first]
    assert js.stats.dropped == 0


def test_a_gpi_rate_that_is_no_whole_multiple_of_the_output_rate_fails_the_run() -> None:
    js, drv, chunks = started()
    drv.emit("s/i/!data", 0, np.zeros(8, np.float32), 2000, JS220_ID_RATE)
    drv.emit("s/gpi/0/!data", 0, packed(np.ones(8)), 3, JS220_ID_RATE)
    with pytest.raises(DeviceError, match=r"gpi0 at 666667 Hz is not a whole multiple of the "
                                          r"current's 1000 Hz"):
        js.stop()
    assert chunks == []  # nothing cut from a stream whose rate makes no sense


def test_rates_from_json_metadata_and_a_js220_stops_at_1_mhz() -> None:
    js, drv = opened()
    # pub/sub holds metadata as JSON text; a JS220 offers 2 MHz (js220_usb.c h/fs options).
    drv.meta = '{"dtype": "u32", "options": [[2000000, "2 MHz"], [1000000, "1 MHz"], [1000]]}'
    drv.calls.clear()
    with pytest.raises(DeviceError) as err:
        js.configure(3.3, 2_000_000)
    assert err.value.hint == "choose one of 1000, 1e+06 Hz"
    assert drv.calls == [("query", f"{DEV}/h/fs%")]
    js.configure(3.3, 1_000_000)
    assert drv.calls[-1] == ("publish", f"{DEV}/h/fs", 1_000_000)


# -- the current range of each sample (auto-ranging) ---------------------------------------------
def test_js220_range_stream_at_2_msps_gives_each_output_sample_its_largest_range() -> None:
    js, drv, chunks = started(record_range=True)  # h/fs = 1000 Hz, the default auto range
    k = JS220_ID_RATE // 1000
    n_out = 10
    # Range values per 2 MS/s input sample (0 = 10 A ... 5 = 18 µA, 6.. = off on a JS220).
    per_output = [[2], [2], [2], [2], [2, 1], [3], [7], [6], [5, 0], [5]]
    values = np.concatenate([np.resize(np.array(v, np.uint8), k) for v in per_output])
    drv.emit("s/i/!data", 0, np.full(n_out, 1e-3, np.float32), k, JS220_ID_RATE)
    drv.emit("s/v/!data", 0, np.full(n_out, 3.3, np.float32), k, JS220_ID_RATE)
    drv.emit("s/gpi/0/!data", 0, packed(np.ones(n_out)), k, JS220_ID_RATE)
    drv.emit("s/gpi/1/!data", 0, packed(np.ones(n_out)), k, JS220_ID_RATE)
    for at in range(0, len(values), 3001):  # blocks that end inside an output period
        drv.emit(RANGE_DATA, at, values[at : at + 3001], 1, JS220_ID_RATE)
    js.stop()
    assert sum(len(c) for c in chunks) == n_out
    got = [c.range_names[int(i)] for c in chunks for i in c.current_range]
    assert got == ["18 mA"] * 4 + ["180 mA", "1.8 mA", "off", "off", "10 A", "18 µA"]
    assert js.settings()["current_range_recorded"] == "per sample (s/i/range/!data)"


def test_js110_range_stream_at_the_output_rate_names_its_seven_ranges() -> None:
    js, drv = opened([DEV110], record_range=True)
    js.configure(3.3, 1000)
    chunks: list[Chunk] = []
    js.start(chunks.append)
    n = 9
    emit_all(drv, 0, np.zeros(n), np.full(n, 3.3), np.ones(n))
    drv.emit(RANGE_DATA, 0, np.array([0, 1, 2, 3, 4, 5, 6, 7, 9], np.uint8))
    js.stop()
    assert [chunks[0].range_names[int(i)] for i in chunks[0].current_range] == [
        "10 A", "2 A", "180 mA", "18 mA", "1.8 mA", "180 µA", "18 µA", "off", "off"]


def test_a_fixed_range_streams_no_range_and_its_chunks_tell_none() -> None:
    js, drv = opened(record_range=True, current_range="18 mA")
    js.configure(3.3, 1000)
    chunks: list[Chunk] = []
    drv.calls.clear()
    js.start(chunks.append)
    assert [c for c in drv.calls if c[0] == "subscribe"] == [
        ("subscribe", f"{DEV}/{d}", ("pub",)) for d in DATA]
    emit_all(drv, 0, np.zeros(4), np.full(4, 3.3), np.ones(4))
    js.stop()
    assert chunks[0].current_range is None and chunks[0].range_names == ()
    assert js.settings()["current_range_recorded"] == "no: the fixed current_range"
    assert Joulescope.records_range_with(current_range="18 mA") is False
    assert Joulescope.records_range_with(current_range="auto") is True
    assert Joulescope.records_range_with(record_range=False) is False


def test_an_instrument_that_never_streams_its_range_loses_no_sample() -> None:
    # A short capture: the range stream never came; stop() goes on without it.
    js, drv, chunks = started(record_range=True)
    emit_all(drv, 0, np.arange(6, dtype=np.float32), np.full(6, 3.3), np.ones(6))
    assert chunks == []  # waiting for the range stream to cover these ids
    js.stop()
    ids, cur, _, _ = joined(chunks)
    assert ids.tolist() == list(range(6)) and cur.tolist() == list(range(6))
    assert all(c.current_range is None for c in chunks)
    assert js.settings()["current_range_recorded"] == "no: the instrument sent no range stream"
    assert "the instrument sent no current range" in js.stats.notes[-1]
    # A long one: once the others buffered UNALIGNED_MAX_S, the run goes on without it.
    js, drv, chunks = started(record_range=True)
    block = 100_000
    for k in range(2):
        emit_all(drv, k * block, np.zeros(block), np.full(block, 3.3), np.ones(block))
    assert sum(len(c) for c in chunks) == 2 * block and js.stats.dropped == 0
    js.stop()
