"""The LPM01A driver: conversation tests against a scripted transport, then over a pty against
the simulated board sharing a `World`."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from drivers.emon.base import Chunk
from drivers.emon.lpm01a import Lpm01a
from drivers.errors import (
    DeviceError,
    DeviceTimeout,
    InstrumentError,
    PortError,
    VoltageLimitError,
)
from protocols.errors import ProtocolError
from protocols.lpm01a.codec import (
    BIN_HEXA_RTOL,
    FRAME_ERROR,
    FRAME_INFO,
    encode_acquisition_end_frame,
    encode_bin_hexa,
    encode_overcurrent_frame,
    encode_overrun,
    encode_text_frame,
    encode_timestamp_frame,
)
from virtual_bench.lpm01a import SimLpm01a
from virtual_bench.world import NS, PowerParams, World


def ack(cmd: str) -> bytes:
    return f"PowerShield > ack {cmd}\r\n".encode()


class ScriptedTransport:
    """Checks every write against a script and answers with the script's canned bytes.

    Script entries are (expected bytes written, reply bytes). Replies can also be pushed
    directly with `feed` (data the board streams on its own).
    """

    def __init__(self, script: list[tuple[bytes, bytes]]) -> None:
        self.script = list(script)
        self.written: list[bytes] = []
        self.errors: list[str] = []
        self._incoming = bytearray()
        self._cond = threading.Condition()
        self.closed = False
        self.resets = 0

    def expect(self, *entries: tuple[bytes, bytes]) -> None:
        self.script += entries

    def write(self, data: bytes) -> None:
        self.written.append(data)
        if not self.script:
            self.errors.append(f"unexpected write {data!r}")
            return
        expected, reply = self.script.pop(0)
        if data != expected:
            self.errors.append(f"wrote {data!r}, expected {expected!r}")
            return
        self.feed(reply)

    def feed(self, data: bytes) -> None:
        with self._cond:
            self._incoming += data
            self._cond.notify_all()

    def read(self) -> bytes:
        with self._cond:
            if not self._incoming:
                self._cond.wait(0.01)
            data = bytes(self._incoming[:4096])
            del self._incoming[:4096]
            return data

    def reset_input(self) -> None:
        self.resets += 1
        with self._cond:
            self._incoming.clear()

    def close(self) -> None:
        self.closed = True


CONNECT = [
    # Leftovers of a previous session: samples and half a line, dropped by the flush.
    (b"htc\r\n", b""),
    (b"stop\r\n", b"1234-07\r\n1234-07\r\nPowerShield > ack stop\r\n12"),
    (b"htc\r\n", ack("htc")),
    # A crashed session leaves the DUT powered: off, so that power-on reboots it.
    (b"pwr off\r\n", ack("pwr off")),
    # The value on the ack line, where the MLPerf Tiny runner reads it.
    (b"version\r\n", ack("version 1.0.5")),
]

# The order of the public hosts (mlcommons/tiny power_manager.py): acqtime, trigdelay 0 (its
# default is 1 ms), trigsrc, eventsrc, output; funcmode only after output current; the rate
# before ascii_dec (the board refuses ascii_dec at a rate it cannot stream).
CONFIGURE = [
    (b"volt 1800m\r\n", ack("volt 1800m")),
    (b"acqtime 0\r\n", ack("acqtime 0")),
    (b"trigdelay 0\r\n", ack("trigdelay 0")),
    (b"trigsrc sw\r\n", ack("trigsrc sw")),
    (b"eventsrc d7 fal\r\n", ack("eventsrc d7 fal")),
    (b"output current\r\n", ack("output current")),
    (b"acqmode dyn\r\n", ack("acqmode dyn")),
    (b"funcmode optim\r\n", ack("funcmode optim")),
    (b"freq 1k\r\n", ack("freq 1k")),
    (b"format ascii_dec\r\n", ack("format ascii_dec")),
]

CLOSE = [(b"pwr off\r\n", ack("pwr off")), (b"hrc\r\n", ack("hrc"))]


def connected(extra=()) -> tuple[Lpm01a, ScriptedTransport]:
    transport = ScriptedTransport(CONNECT + list(extra))
    monitor = Lpm01a(transport, voltage_limit_v=3.3)
    monitor.connect()
    return monitor, transport


def test_connect_flushes_takes_control_switches_the_dut_off_and_reads_the_version():
    monitor, transport = connected()
    try:
        assert transport.errors == []
        assert transport.written == [b"htc\r\n", b"stop\r\n", b"htc\r\n", b"pwr off\r\n",
                                     b"version\r\n"]
        assert monitor.settings()["pwr"] == "off"
        assert transport.resets == 1
        assert monitor.version == "1.0.5"
    finally:
        transport.expect(*CLOSE)
        monitor.close()


def test_configure_sends_every_command_in_order_and_keeps_the_settings():
    monitor, transport = connected(CONFIGURE)
    monitor.configure(1.8, 1000)
    assert transport.errors == []
    assert transport.written[len(CONNECT):] == [cmd for cmd, _ in CONFIGURE]
    assert monitor.sample_rate == 1000.0
    s = monitor.settings()
    assert s["driver"] == "lpm01a" and s["version"] == "1.0.5" and s["simulated"] is False
    assert s["voltage_v"] == 1.8 and s["freq"] == "1k" and s["eventsrc"] == "d7 fal"
    assert s["format"] == "ascii_dec" and s["output"] == "current" and s["acqtime"] == "0"
    transport.expect(*CLOSE)
    monitor.close()


@pytest.mark.parametrize(
    ("volts", "error"),
    [(3.31, VoltageLimitError), (5.0, VoltageLimitError), (1.5, VoltageLimitError),
     (0.0, VoltageLimitError)],
)
def test_a_voltage_outside_the_limits_is_refused_before_any_byte(volts, error):
    transport = ScriptedTransport([])
    monitor = Lpm01a(transport, voltage_limit_v=3.3)
    with pytest.raises(error):
        monitor.configure(volts, 1000)
    assert transport.written == []


def test_the_bench_limit_is_checked_first():
    transport = ScriptedTransport([])
    monitor = Lpm01a(transport, voltage_limit_v=2.5)
    with pytest.raises(VoltageLimitError, match="bench voltage limit"):
        monitor.configure(3.0, 1000)
    assert transport.written == []


def test_whole_millivolts_never_round_above_the_limit():
    transport = ScriptedTransport(CONNECT)
    monitor = Lpm01a(transport, voltage_limit_v=3.2996)
    monitor.connect()
    transport.expect(*[(b"volt 3299m\r\n", ack("volt 3299m")) if cmd.startswith(b"volt ")
                       else (cmd, reply) for cmd, reply in CONFIGURE])
    monitor.configure(3.2996, 1000)  # 3299.6 mV would round to 3300: 3299 is sent
    assert transport.errors == []
    assert b"volt 3299m\r\n" in transport.written
    assert monitor.settings()["voltage_v"] == 3.299
    transport.expect(*CLOSE)
    monitor.close()


@pytest.mark.parametrize(
    ("rate", "fmt", "error"),
    [(3000, None, ProtocolError), (200_000, "bin_hexa", ProtocolError),
     (10_000, "ascii_dec", DeviceError), (1000, "bin_hex", DeviceError)],
)
def test_a_rate_or_format_the_board_cannot_stream_is_refused_before_any_byte(rate, fmt, error):
    transport = ScriptedTransport([])
    monitor = Lpm01a(transport, voltage_limit_v=3.3)
    with pytest.raises(error):
        monitor.configure(1.8, rate, data_format=fmt)
    assert transport.written == []


def test_an_error_reply_raises_instrument_error_naming_the_command():
    monitor, transport = connected([
        (b"volt 1800m\r\n",
         b"PowerShield > error volt 1800m\r\nPowerShield > Error detail: board is busy\r\n"),
    ])
    with pytest.raises(InstrumentError) as info:
        monitor.configure(1.8, 1000)
    assert info.value.command == "volt 1800m"
    assert "volt 1800m" in info.value.message and "board is busy" in info.value.message
    transport.expect(*CLOSE)
    monitor.close()


def test_no_reply_raises_device_timeout_naming_the_command():
    monitor, transport = connected([(b"pwr on\r\n", b"")])
    with pytest.raises(DeviceTimeout) as info:
        monitor._command("pwr on", timeout_s=0.1)
    assert "pwr on" in info.value.message and "USB" in info.value.hint
    transport.expect(*CLOSE)
    monitor.close()


def test_a_late_ack_of_another_command_is_not_taken_for_this_one():
    # `pwr on` timed out; its ack arrives late, just before `pwr off` is acked.
    monitor, transport = connected([
        (b"pwr on\r\n", b""),
        (b"pwr off\r\n", ack("pwr on") + ack("pwr off")),
    ])
    with pytest.raises(DeviceTimeout):
        monitor._command("pwr on", timeout_s=0.1)
    reply = monitor._command("pwr off")
    assert reply.echoed == "pwr off"
    transport.expect(*CLOSE)
    monitor.close()


def test_stream_notes_are_bounded():
    stats = Lpm01a(ScriptedTransport([]), voltage_limit_v=3.3).stats
    for k in range(stats.MAX_NOTES + 7):
        stats.note(f"garbled {k}")
    assert len(stats.notes) == stats.MAX_NOTES and stats.notes_suppressed == 7


def test_start_streams_chunks_with_edges_on_their_samples_and_stop_drains():
    monitor, transport = connected([*CONFIGURE, (b"pwr on\r\n", ack("pwr on"))])
    monitor.configure(1.8, 1000)
    monitor.power_on()
    chunks: list[Chunk] = []
    transport.expect((b"start\r\n", ack("start") + b"1000-06\r\n2000-06\r\nevent 1 ris\r\n"))
    monitor.start(chunks.append)
    # The edge is before sample 2, which arrives in the next read: it must land there.
    transport.feed(b"3000-06\r\n4000-06\r\nTimeStamp: 0s 004ms, buff 00%\r\n")
    transport.feed(b"event 2 ris\r\n5000-06\r\n")
    transport.expect((b"stop\r\n", ack("stop") + b"6000-06\r\n"
                      b"PowerShield > Acquisition completed\r\n"))
    monitor.stop()
    assert transport.errors == []
    current = np.concatenate([c.current for c in chunks])
    gpio = np.concatenate([c.gpio for c in chunks])
    voltage = np.concatenate([c.voltage for c in chunks])
    ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in chunks])
    np.testing.assert_array_equal(ids, np.arange(6))
    np.testing.assert_array_equal(current, np.arange(1, 7) * 1e-3)
    np.testing.assert_array_equal(gpio, [1, 1, 0, 1, 0, 1])
    np.testing.assert_array_equal(voltage, np.full(6, 1.8))
    assert monitor.stats.samples == 6 and monitor.stats.dropped == 0
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []


def test_a_timestamp_ahead_of_the_samples_counts_the_shortfall_once():
    monitor, transport = connected(CONFIGURE)
    monitor.configure(1.8, 1000)
    transport.expect((b"start\r\n", ack("start")))
    monitor.start(lambda chunk: None)
    lines = b"1000-06\r\n" * 990
    transport.feed(lines + b"TimeStamp: 1s 000ms, buff 40%\r\n")  # 10 missing
    transport.feed(b"1000-06\r\n" * 1000 + b"TimeStamp: 2s 000ms, buff 40%\r\n")  # none more
    transport.feed(b"1000-06\r\n" * 500 + b"TimeStamp: 3s 000ms, buff 40%\r\n")  # 500 more
    transport.expect((b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"))
    monitor.stop()
    assert monitor.stats.samples == 2490
    assert monitor.stats.dropped == 510
    assert len([n for n in monitor.stats.notes if "lost" in n]) == 2
    transport.expect(*CLOSE)
    monitor.close()


def test_an_overrun_in_the_stream_becomes_a_gap_in_the_sample_ids():
    """``error acquisition overrun`` + its detail, where samples went missing: the ids jump by
    the count (a TimeStamp then agrees), and a D7 edge before a lost sample is kept, on the first
    sample after the gap (dropping it would pair every later window wrongly)."""
    monitor, transport = connected(CONFIGURE)
    monitor.configure(1.8, 1000)
    chunks: list[Chunk] = []
    transport.expect((b"start\r\n", ack("start")))
    monitor.start(chunks.append)
    transport.feed(b"1000-06\r\n" * 500 + b"event 1 ris\r\n" + encode_overrun(300)
                   + b"2000-06\r\n" * 200 + b"TimeStamp: 1s 000ms, buff 99%\r\n")
    transport.expect((b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"))
    monitor.stop()
    ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in chunks])
    np.testing.assert_array_equal(ids, np.r_[0:500, 800:1000])
    gpio = np.concatenate([c.gpio for c in chunks])
    assert np.flatnonzero(gpio == 0).tolist() == [500]  # sample id 800
    assert monitor.stats.samples == 700 and monitor.stats.dropped == 0  # the gap says it
    assert any("lost 300 samples at sample 500" in n for n in monitor.stats.notes)
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []


def test_close_stops_powers_off_and_gives_control_back_once():
    monitor, transport = connected(CONFIGURE)
    monitor.configure(1.8, 1000)
    transport.expect((b"start\r\n", ack("start")))
    monitor.start(lambda chunk: None)
    transport.expect(
        (b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"), *CLOSE
    )
    monitor.close()
    monitor.close()
    assert transport.errors == []
    assert transport.written[-3:] == [b"stop\r\n", b"pwr off\r\n", b"hrc\r\n"]
    assert transport.closed


def test_close_after_the_port_died_does_not_raise():
    monitor, transport = connected()

    def dead(*args):
        raise PortError("LPM01A: read from /dev/x failed: gone")

    transport.read = dead
    transport.write = dead
    monitor._reader.join(timeout=5.0)  # the reader sees the dead port and records it
    assert not monitor._reader.is_alive()
    with pytest.raises(DeviceError, match="port failed"):
        monitor.power_on()  # fails at once, without waiting for a reply that cannot come
    monitor.close()
    assert transport.closed


def test_a_failing_callback_surfaces_at_stop():
    monitor, transport = connected(CONFIGURE)
    monitor.configure(1.8, 1000)

    def broken(chunk):
        raise ValueError("consumer bug")

    transport.expect((b"start\r\n", ack("start") + b"1000-06\r\n"))
    monitor.start(broken)
    transport.expect((b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"))
    with pytest.raises(ValueError, match="consumer bug"):
        monitor.stop()
    transport.expect(*CLOSE)
    monitor.close()


def test_a_silent_board_fails_connect_with_a_timeout_and_close_sends_nothing_more():
    transport = ScriptedTransport([(b"htc\r\n", b""), (b"stop\r\n", b""), (b"htc\r\n", b"")])
    monitor = Lpm01a(transport, voltage_limit_v=3.3)
    monitor.command_timeout_s = 0.2
    with pytest.raises(DeviceTimeout, match="htc"):
        monitor.connect()
    monitor.close()
    assert transport.written == [b"htc\r\n", b"stop\r\n", b"htc\r\n"] and transport.closed


def test_a_port_that_fails_to_flush_fails_connect_with_the_port_error():
    transport = ScriptedTransport([(b"htc\r\n", b""), (b"stop\r\n", b"")])

    def unplugged():
        raise PortError("LPM01A: flushing /dev/x failed: Input/output error")

    transport.reset_input = unplugged
    monitor = Lpm01a(transport, voltage_limit_v=3.3)
    with pytest.raises(DeviceError, match="Input/output error"):
        monitor.connect()
    monitor.close()
    assert transport.written == [b"htc\r\n", b"stop\r\n"] and transport.closed
    assert not monitor._reader.is_alive()


def test_open_names_a_missing_port():
    with pytest.raises(PortError):
        Lpm01a.open("/dev/does-not-exist-lpm01a", voltage_limit_v=3.3)


def _wait_until(ready, what: str = "the reader", limit_s: float = 5.0) -> None:
    """Wait for the reader thread to reach a state (a bound on a hang, not a timed claim)."""
    deadline = time.monotonic() + limit_s
    while not ready():
        assert time.monotonic() < deadline, f"{what} never got there"
        time.sleep(0.005)


def test_every_command_ends_with_cr_lf():
    monitor, transport = connected([*CONFIGURE, (b"pwr on\r\n", ack("pwr on"))])
    monitor.configure(1.8, 1000)
    monitor.power_on()
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []
    assert transport.written and all(w.endswith(b"\r\n") and w.count(b"\n") == 1
                                     for w in transport.written)


def test_a_query_value_on_the_next_line_is_taken_too():
    script = [*CONNECT[:-1], (b"version\r\n", ack("version") + b"PowerShield > 1.0.7\r\n")]
    transport = ScriptedTransport(script)
    monitor = Lpm01a(transport, voltage_limit_v=3.3)
    monitor.connect()
    assert monitor.version == "1.0.7" and transport.errors == []
    transport.expect(*CLOSE)
    monitor.close()


@pytest.mark.parametrize(
    ("reply", "volts"),
    [(ack("volt get 3292-03"), 3.292),  # zephyr PowerShield.py __get_voltage_level: parts[5]
     (ack("volt get 3300m"), 3.3),
     (ack("volt get") + b"PowerShield > 1800m\r\n", 1.8)],
)
def test_read_voltage_takes_the_value_from_the_ack_line_or_the_next(reply, volts):
    monitor, transport = connected([(b"volt get\r\n", reply)])
    assert monitor.read_voltage() == volts
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []


@pytest.mark.parametrize(
    "stamp",
    [b"TimeStamp:>001s 500ms, buff 00%", b"TimeStamp:<001s 500ms, buff 00%",
     b"TimeStamp: 001s 500ms, buff 00%", b"TimeStamp: 1s 500ms, buff 00%"],
)
def test_timestamp_lines_in_every_mlperf_form_count_lost_samples(stamp):
    """300 samples left out before 1.5 s: the stamp says 1500 were due, 1200 came."""
    monitor, transport = connected(CONFIGURE)
    monitor.configure(1.8, 1000)
    transport.expect((b"start\r\n", ack("start")))
    monitor.start(lambda chunk: None)
    transport.feed(b"1000-06\r\n" * 1200 + stamp + b"\r\n")
    transport.expect((b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"))
    monitor.stop()
    assert monitor.stats.samples == 1200 and monitor.stats.dropped == 300
    assert any("300 sample(s) lost by 1.500 s" in n for n in monitor.stats.notes)
    transport.expect(*CLOSE)
    monitor.close()


def test_a_gap_in_the_event_numbers_fails_the_acquisition_loudly():
    """event 1, event 2, event 4: event 3 was lost; pairing edges into windows would be wrong
    (the MLPerf runner raises "Timestamps are not consecutive" for this)."""
    monitor, transport = connected(CONFIGURE)
    monitor.configure(1.8, 1000)
    transport.expect((b"start\r\n", ack("start")))
    monitor.start(lambda chunk: None)
    transport.feed(b"1000-06\r\nevent 1 ris\r\n1000-06\r\nevent 2 ris\r\n1000-06\r\n")
    transport.feed(b"1000-06\r\n")
    _wait_until(lambda: monitor.stats.samples == 4)
    assert monitor.fault is None  # consecutive so far
    transport.feed(b"event 4 ris\r\n1000-06\r\n")
    _wait_until(lambda: monitor.fault is not None)
    assert "event 3 never arrived" in monitor.fault.message
    transport.expect((b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"))
    with pytest.raises(DeviceError, match="event 3 never arrived"):
        monitor.stop()
    assert any("event 3 never arrived" in n for n in monitor.stats.notes)
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []


def test_a_stop_whose_completion_comes_before_its_ack_is_not_lost():
    monitor, transport = connected([*CONFIGURE, (b"start\r\n", ack("start"))])
    monitor.configure(1.8, 1000)
    chunks: list[Chunk] = []
    monitor.start(chunks.append)
    transport.expect((b"stop\r\n", b"1000-06\r\nPowerShield > Acquisition completed\r\n"
                      + ack("stop")), *CLOSE)
    monitor.command_timeout_s = 0.5
    monitor.stop()  # no DeviceTimeout: the completion counted though it came first
    assert monitor.stats.samples == 1 and len(chunks) == 1
    monitor.close()
    assert transport.errors == []


def test_a_stop_that_is_never_acked_ends_with_the_completion():
    monitor, transport = connected([*CONFIGURE, (b"start\r\n", ack("start"))])
    monitor.configure(1.8, 1000)
    monitor.start(lambda chunk: None)
    transport.expect((b"stop\r\n", b"PowerShield > Acquisition completed\r\n"), *CLOSE)
    monitor.stop()
    monitor.close()
    assert transport.errors == []


def test_energy_windows_are_refused_above_the_ascii_limit_and_bin_hexa_asks_no_d7_events():
    assert Lpm01a.sees_every_edge_with(sample_rate_hz=5_000) is True
    assert Lpm01a.sees_every_edge_with(sample_rate_hz=10_000) is False
    assert "not public" in Lpm01a.every_edge_reason
    assert "sample_rate_hz to 5000 or less" in Lpm01a.every_edge_hint
    monitor, transport = connected(CONFIGURE_BIN)
    assert monitor.sees_every_edge is True  # not configured yet
    monitor.configure(1.8, 100_000)
    assert monitor.sees_every_edge is False
    assert not any(w.startswith(b"eventsrc") for w in transport.written)
    assert "eventsrc" not in monitor.settings()
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []


# -- against the simulated board -----------------------------------------------------------------

FS = 1000
VOLTS = 1.8
PARAMS = PowerParams(idle_w=1.2e-3, active_w=3.6e-3)


def expected_current(t0: int, n: int, activity: tuple[int, int]) -> np.ndarray:
    """Mean current of each sample period [t0 + k*1e6, t0 + (k+1)*1e6) ns at 1 kHz."""
    start = t0 + np.arange(n, dtype=np.int64) * (NS // FS)
    end = start + NS // FS
    a, b = activity
    overlap = np.clip(np.minimum(end, b) - np.maximum(start, a), 0, None)
    watts = PARAMS.idle_w + (PARAMS.active_w - PARAMS.idle_w) * overlap / (NS // FS)
    return watts / VOLTS


def test_driver_against_the_simulated_board_sample_exact():
    world = World(PARAMS, speed=200)
    with SimLpm01a(world) as sim:
        monitor = Lpm01a.open(sim.path, voltage_limit_v=3.3, simulated=True)
        try:
            assert monitor.version.endswith("-sim")
            monitor.configure(VOLTS, FS)
            monitor.power_on()
            assert world.powered and world.supply_v == VOLTS
            chunks: list[Chunk] = []
            monitor.start(chunks.append)
            t0 = sim.acquisition_t0_ns
            period = NS // FS
            with world.lock:
                # Ahead of the simulated clock (held still by the lock): not yet emitted.
                base = world.clock.now_ns() + period
                activity = (base + 123_456, base + 700_000_000)
                world.add_activity(*activity)
                boundary = t0 + (-(-(base - t0) // period) + 1_900) * period
                pulses = [base + 123_456, base + 700_000_000, base + 1_500_000_000, boundary]
                for p in sorted(pulses):
                    world.add_pulse(p)
            world.sleep_until(base + 3_300 * period)
            monitor.stop()
        finally:
            monitor.close()
    assert not world.powered
    ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in chunks])
    current = np.concatenate([c.current for c in chunks])
    gpio = np.concatenate([c.gpio for c in chunks])
    n = len(current)
    assert n >= 3300 and t0 + n * (NS // FS) > max(pulses)
    np.testing.assert_array_equal(ids, np.arange(n))
    np.testing.assert_allclose(current, expected_current(t0, n, activity), rtol=5.0001e-4)
    # An edge at t is before the first sample starting at or after t: ceil((t - t0) / period).
    expected_edges = sorted(-(-(p - t0) // (NS // FS)) for p in pulses)
    assert np.flatnonzero(gpio == 0).tolist() == expected_edges
    assert monitor.stats.dropped == 0 and monitor.stats.samples == n
    assert sim.dropped_bytes == 0



# -- bin_hexa ------------------------------------------------------------------------------------

# bin_hexa goes before the rate: the board refuses 100k while ascii_dec is still set. No
# eventsrc: how the board frames D7 events in bin_hexa is not public.
CONFIGURE_BIN = [
    (b"volt 1800m\r\n", ack("volt 1800m")),
    (b"acqtime 0\r\n", ack("acqtime 0")),
    (b"trigdelay 0\r\n", ack("trigdelay 0")),
    (b"trigsrc sw\r\n", ack("trigsrc sw")),
    (b"output current\r\n", ack("output current")),
    (b"acqmode dyn\r\n", ack("acqmode dyn")),
    (b"funcmode optim\r\n", ack("funcmode optim")),
    (b"format bin_hexa\r\n", ack("format bin_hexa")),
    (b"freq 100k\r\n", ack("freq 100k")),
]


def bin_words(values) -> bytes:
    return encode_bin_hexa(np.asarray(values, dtype=np.float64))


@pytest.mark.parametrize(
    ("rate", "fmt", "freq", "expected"),
    [(100_000, None, "100k", "bin_hexa"), (10_000, None, "10k", "bin_hexa"),
     (5_000, None, "5k", "ascii_dec"), (1_000, "bin_hexa", "1k", "bin_hexa")],
)
def test_configure_picks_bin_hexa_above_5_khz_or_as_asked(rate, fmt, freq, expected):
    script = list(CONFIGURE if expected == "ascii_dec" else CONFIGURE_BIN)
    at = [cmd.startswith(b"freq") for cmd, _ in script].index(True)
    script[at] = (f"freq {freq}\r\n".encode(), ack(f"freq {freq}"))
    monitor, transport = connected(script)
    monitor.configure(1.8, rate, data_format=fmt)
    assert transport.errors == [] and transport.written[len(CONNECT):] == [cmd for cmd, _ in script]
    assert monitor.settings()["format"] == expected
    assert monitor._decoder.bin_hexa == (expected == "bin_hexa")  # followed from the ack
    transport.expect(*CLOSE)
    monitor.close()


def test_bin_hexa_stream_gives_chunks_and_stop_drains_through_the_replies_and_frames():
    """0xF1 is an error message and 0xF2 information (Zephyr's host), never D7 edges: no sample
    of the stream is marked, and the error fails the acquisition at stop."""
    monitor, transport = connected(CONFIGURE_BIN)
    monitor.configure(1.8, 100_000)
    chunks: list[Chunk] = []
    transport.expect((b"start\r\n", ack("start") + bin_words([1e-3, 2e-3])
                      + encode_text_frame(FRAME_INFO, "hello")))
    monitor.start(chunks.append)
    transport.feed(bin_words([3e-3, 4e-3]) + encode_timestamp_frame(0, 2))
    transport.feed(bin_words([5e-3]))
    transport.expect((b"stop\r\n", ack("stop") + bin_words([6e-3])
                      + encode_acquisition_end_frame()
                      + b"PowerShield > Acquisition completed\r\n"))
    monitor.stop()
    assert transport.errors == []
    current = np.concatenate([c.current for c in chunks])
    gpio = np.concatenate([c.gpio for c in chunks])
    ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in chunks])
    np.testing.assert_array_equal(ids, np.arange(6))
    np.testing.assert_allclose(current, np.arange(1, 7) * 1e-3, rtol=BIN_HEXA_RTOL)
    np.testing.assert_array_equal(gpio, np.ones(6))
    assert monitor.stats.samples == 6 and monitor.stats.dropped == 0
    assert monitor.stats.notes == ["board information (0xF2 frame): hello"]
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []


@pytest.mark.parametrize(
    ("frame", "words"),
    [(encode_text_frame(FRAME_ERROR, "ADC saturated"), "error during the acquisition: 'ADC "
      "saturated'"), (encode_overcurrent_frame(), "overcurrent")],
)
def test_an_error_or_overcurrent_frame_fails_the_acquisition(frame, words):
    monitor, transport = connected(CONFIGURE_BIN)
    monitor.configure(1.8, 100_000)
    chunks: list[Chunk] = []
    transport.expect((b"start\r\n", ack("start")))
    monitor.start(chunks.append)
    transport.feed(bin_words([1e-3]) + frame + bin_words([2e-3]))
    _wait_until(lambda: monitor.fault is not None)
    assert words in monitor.fault.message
    transport.expect((b"stop\r\n", b"PowerShield > Acquisition completed\r\n" + ack("stop")))
    with pytest.raises(DeviceError, match=words.split(":")[0]):
        monitor.stop()
    # The frame's bytes are neither samples nor edges: 0xF1 "AD" would be a D7 edge, "C " data.
    gpio = np.concatenate([c.gpio for c in chunks])
    assert monitor.stats.samples == 2 and gpio.tolist() == [1, 1]
    transport.expect(*CLOSE)
    monitor.close()
    assert transport.errors == []


def test_a_bin_hexa_status_frame_ahead_of_the_samples_counts_the_loss():
    monitor, transport = connected(CONFIGURE_BIN)
    monitor.configure(1.8, 100_000)
    transport.expect((b"start\r\n", ack("start")))
    monitor.start(lambda chunk: None)
    transport.feed(bin_words(np.full(99_000, 1e-3)) + encode_timestamp_frame(1000, 80))
    transport.expect((b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"))
    monitor.stop()
    assert monitor.stats.samples == 99_000 and monitor.stats.dropped == 1000
    assert any("buffer 80%" in n for n in monitor.stats.notes)
    transport.expect(*CLOSE)
    monitor.close()


def test_an_error_reply_during_a_bin_hexa_acquisition_names_the_command():
    monitor, transport = connected([*CONFIGURE_BIN, (b"start\r\n", ack("start"))])
    monitor.configure(1.8, 100_000)
    monitor.start(lambda chunk: None)
    transport.expect((b"lcd 1 x\r\n", bin_words([1e-3]) + b"PowerShield > error lcd 1 x\r\n"
                      + bin_words([1e-3]) + b"PowerShield > Error detail: busy\r\n"))
    with pytest.raises(InstrumentError) as info:
        monitor._command("lcd 1 x")
    assert info.value.command == "lcd 1 x" and "busy" in info.value.message
    transport.expect((b"stop\r\n", ack("stop") + b"PowerShield > Acquisition completed\r\n"),
                     *CLOSE)
    monitor.close()
    assert transport.errors == [] and monitor.stats.samples == 2


def test_driver_at_100_khz_bin_hexa_against_the_simulated_board_sample_exact_without_edges():
    fs = 100_000
    period = NS // fs
    world = World(PARAMS, speed=4)
    with SimLpm01a(world) as sim:
        monitor = Lpm01a.open(sim.path, voltage_limit_v=3.3, simulated=True)
        try:
            monitor.configure(VOLTS, fs)
            assert sim.settings["format"] == "bin_hexa" and sim.freq_hz == fs
            monitor.power_on()
            chunks: list[Chunk] = []
            monitor.start(chunks.append)
            t0 = sim.acquisition_t0_ns
            with world.lock:
                base = world.clock.now_ns() + 10 * period
                activity = (base + 1_234, base + 300_000_000)
                world.add_activity(*activity)
                # Edges at arbitrary ns, one on a sample boundary, two a sample apart.
                boundary = t0 + (-(-(base - t0) // period) + 50_000) * period
                pulses = [base + 1_234, base + 300_000_000, base + 300_000_000 + period,
                          boundary, base + 1_100_000_007]
                for p in sorted(pulses):
                    world.add_pulse(p)
            world.sleep_until(base + 1_200_000_000)
            monitor.stop()
            # Back to ascii_dec: the rate goes down before the format, or the board refuses.
            monitor.configure(VOLTS, 1000)
            assert sim.settings["format"] == "ascii_dec" and sim.freq_hz == 1000
        finally:
            monitor.close()
    ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in chunks])
    current = np.concatenate([c.current for c in chunks])
    gpio = np.concatenate([c.gpio for c in chunks])
    n = len(current)
    assert n >= 120_000 and t0 + n * period > max(pulses)
    np.testing.assert_array_equal(ids, np.arange(n))
    start = t0 + np.arange(n, dtype=np.int64) * period
    a, b = activity
    overlap = np.clip(np.minimum(start + period, b) - np.maximum(start, a), 0, None)
    watts = PARAMS.idle_w + (PARAMS.active_w - PARAMS.idle_w) * overlap / period
    np.testing.assert_allclose(current, watts / VOLTS, rtol=BIN_HEXA_RTOL)
    # D7 events are neither asked for nor decoded in bin_hexa (their framing is not public):
    # the pulses mark nothing, rather than marking samples from a guessed framing.
    assert not (gpio == 0).any()
    assert monitor.stats.dropped == 0 and monitor.stats.samples == n
    assert monitor.stats.notes == [] and sim.dropped_bytes == 0


def test_driver_against_the_simulated_board_fails_on_a_lost_event_and_reads_the_voltage():
    """The board loses event 2 of 3 on the link: the driver's fault names it, and stop raises it
    (the simulated board sends `Acquisition completed` before the ack of stop)."""
    world = World(PARAMS, speed=200)
    with SimLpm01a(world) as sim:
        monitor = Lpm01a.open(sim.path, voltage_limit_v=3.3, simulated=True)
        try:
            monitor.configure(VOLTS, FS)
            assert monitor.read_voltage() == VOLTS  # "ack volt get 1800-03"
            monitor.power_on()
            sim.lose_event(2)
            monitor.start(lambda chunk: None)
            with world.lock:
                base = world.clock.now_ns() + NS // FS
                for k in range(3):
                    world.add_pulse(base + k * 100_000_000)
            world.sleep_until(base + 300_000_000)
            with pytest.raises(DeviceError, match="event 2 never arrived"):
                monitor.stop()
            assert monitor.stats.samples >= 300
        finally:
            monitor.close()
    assert not world.powered
