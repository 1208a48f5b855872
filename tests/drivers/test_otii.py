"""The Otii: its wire format (table tests, framing split at every boundary), the driver in
conversation with a scripted server socket (the exact JSON requests out, canned answers in), the
GPI events-to-bits mapping, and the driver against the simulated Otii server on 127.0.0.1 sharing
a `World` (closed-form windows, Sense+, a dropped connection, a refused login)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from drivers.emon import open_monitor
from drivers.emon.base import Chunk
from drivers.emon.otii import ARC_RATE_HZ, GpiLine, Otii, OtiiConnection, parse_address
from drivers.errors import DeviceError, PortError, VoltageLimitError
from protocols import otii as wire
from protocols.errors import ProtocolError
from tests.deadline import wait_until
from virtual_bench.otii import SimOtii, quantise_current
from virtual_bench.world import NS, PowerParams, World

DEV = "Arc512031204843494E3130393033313036"
HELLO = {"type": "information", "info": "connected",
         "data": {"otii_version": "3.5.5", "protocol_version": "0.1", "server": "otii-server"}}

# -- wire format ----------------------------------------------------------------------------------


def test_a_request_is_one_json_line_ending_crlf() -> None:
    raw = wire.encode(wire.request("arc_set_main", "7", {"device_id": DEV, "enable": True}))
    assert raw.endswith(b"\r\n") and raw.count(b"\r\n") == 1
    assert json.loads(raw) == {"type": "request", "cmd": "arc_set_main", "trans_id": "7",
                               "data": {"device_id": DEV, "enable": True}}
    assert "data" not in json.loads(wire.encode(wire.request("otii_logout", "8")))


def test_messages_split_at_every_boundary_come_out_whole() -> None:
    msgs = [HELLO, wire.response("otii_get_devices", "1", {"devices": []}),
            wire.error("otii_login", "2", wire.COULD_NOT_LOGIN)]
    stream = b"".join(wire.encode(m) for m in msgs)
    for cut in range(len(stream) + 1):
        splitter = wire.MessageSplitter()
        out = splitter.feed(stream[:cut]) + splitter.feed(stream[cut:])
        assert out == msgs, cut
        assert splitter.pending == 0


@pytest.mark.parametrize("raw", [b"{not json}\r\n", b"[1, 2]\r\n", b'{"cmd": "x"}\r\n',
                                 b"\xff\xfe\r\n"])
def test_a_message_that_is_not_a_typed_json_object_is_refused(raw: bytes) -> None:
    with pytest.raises(ProtocolError, match="otii: "):
        wire.MessageSplitter().feed(raw)


def test_a_stream_without_terminators_is_refused_before_it_eats_memory() -> None:
    splitter = wire.MessageSplitter(max_bytes=1000)
    with pytest.raises(ProtocolError, match="without"):
        splitter.feed(b"x" * 1001)


def test_channel_data_decode() -> None:
    block = wire.analog_block({"data_type": "analog", "timestamp": 0.5, "interval": 0.00025,
                               "values": [1e-3, 2e-3, 0]})
    assert block.timestamp == 0.5 and block.interval == 0.00025
    assert block.values.dtype == np.float64 and block.values.tolist() == [1e-3, 2e-3, 0.0]
    times, levels = wire.digital_events({"data_type": "digital", "values": [
        {"timestamp": 0.0, "value": False}, {"timestamp": 0.1, "value": True}]})
    assert times.tolist() == [0.0, 0.1] and levels.tolist() == [0, 1]


@pytest.mark.parametrize("data", [
    {"data_type": "digital", "values": []},
    {"data_type": "analog", "timestamp": 0, "interval": 0, "values": [1.0]},
    {"data_type": "analog", "timestamp": 0, "interval": 0.1, "values": ["a"]},
    {"data_type": "analog", "timestamp": 0, "values": [1.0]},
    {"data_type": "analog", "timestamp": 0, "interval": 0.1, "values": [[1.0]]},
])
def test_bad_analog_data_is_refused(data: dict) -> None:
    with pytest.raises(ProtocolError, match="analog"):
        wire.analog_block(data)


@pytest.mark.parametrize("data", [
    {"data_type": "analog", "values": []},
    {"data_type": "digital"},
    {"data_type": "digital", "values": [{"value": True}]},
    {"data_type": "digital", "values": [{"timestamp": 1.0, "value": True},
                                        {"timestamp": 0.5, "value": False}]},
])
def test_bad_digital_data_is_refused(data: dict) -> None:
    with pytest.raises(ProtocolError, match="digital"):
        wire.digital_events(data)


@pytest.mark.parametrize(("address", "expected"), [
    ("127.0.0.1:1905", ("127.0.0.1", 1905, None)),
    ("lab-pc", ("lab-pc", 1905, None)),
    ("10.0.0.2:2000/Arc I", ("10.0.0.2", 2000, "Arc I")),
])
def test_addresses(address: str, expected: tuple) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["", ":1905", "host:x", "host:70000"])
def test_bad_addresses_are_refused(address: str) -> None:
    with pytest.raises(DeviceError, match="host\\[:port\\]\\[/device\\]"):
        parse_address(address)


# -- the driver in conversation with a scripted server --------------------------------------------
Step = tuple[str, dict[str, Any] | None, dict[str, Any] | str | None]


class ScriptedSocket:
    """Stands in for the TCP socket: each request must be the next scripted (cmd, data); the
    scripted answer (a data dict, None for none, or an errorcode string after "!") comes back."""

    def __init__(self, script: list[Step]) -> None:
        self.script = list(script)
        self.sent: list[dict[str, Any]] = []
        self.out = bytearray(wire.encode(HELLO))
        self.closed = False

    def settimeout(self, _timeout: float | None) -> None:
        pass

    def sendall(self, data: bytes) -> None:
        msg = json.loads(data)
        assert data.endswith(b"\r\n")
        self.sent.append(msg)
        assert self.script, f"unexpected request {msg}"
        cmd, want, answer = self.script.pop(0)
        assert (msg["cmd"], msg.get("data")) == (cmd, want), f"sent {msg}, expected {cmd} {want}"
        if isinstance(answer, str):
            reply = wire.error(cmd, msg["trans_id"], answer.lstrip("!"))
        else:
            reply = wire.response(cmd, msg["trans_id"], answer)
        self.out += wire.encode(reply)

    def recv(self, _size: int) -> bytes:
        if self.closed:
            return b""
        if not self.out:
            raise TimeoutError
        data, self.out[:] = bytes(self.out[:7]), self.out[7:]  # a few bytes at a time
        return data

    def close(self) -> None:
        self.closed = True


def arc(**data: Any) -> dict[str, Any]:
    return {"device_id": DEV, **data}


LOGGED_IN: list[Step] = [
    ("otii_is_logged_in", None, {"logged_in": True}),
    ("otii_has_license", {"license_type": "Automation"}, {"has_license": True}),
]
DEVICE: list[Step] = [
    ("otii_get_devices", {"timeout": 3},
     {"devices": [{"device_id": DEV, "name": "Arc I", "type": "Arc"}]}),
    ("arc_set_main", arc(enable=False), None),  # off first: a crashed session
    ("arc_get_version", arc(), {"hw_version": "Arc 1.1", "fw_version": "1.1.7"}),
    ("otii_get_active_project", None, {"project_id": 4}),
    ("arc_add_to_project", arc(), None),
]
CONFIGURE: list[Step] = [
    ("arc_set_main_voltage", arc(value=1.8), None),
    ("arc_get_main_voltage", arc(), {"value": 1.8}),
    ("arc_set_max_current", arc(value=0.1), None),
    ("arc_set_range", arc(range="low"), None),
    ("arc_enable_exp_port", arc(enable=True), None),
    ("arc_set_exp_voltage", arc(value=1.8), None),
    ("arc_enable_channel", arc(channel="mc", enable=True), None),
    ("arc_enable_channel", arc(channel="mv", enable=True), None),
    ("arc_enable_channel", arc(channel="i1", enable=True), None),
    ("arc_get_channel_samplerate", arc(channel="mc"), {"value": 4000}),
    ("arc_get_channel_samplerate", arc(channel="mv"), {"value": 4000}),
]
CLOSE_OFF: list[Step] = [("arc_set_main", arc(enable=False), None)]


def scripted(script: list[Step], **options: Any) -> tuple[Otii, ScriptedSocket]:
    sock = ScriptedSocket(script)
    conn = OtiiConnection("127.0.0.1", 1905, sock=sock)  # type: ignore[arg-type]
    return Otii(conn, voltage_limit_v=3.3, address="127.0.0.1:1905", **options), sock


def test_connect_logs_in_reserves_a_license_picks_the_arc_and_creates_a_project() -> None:
    otii, sock = scripted([
        ("otii_is_logged_in", None, {"logged_in": False}),
        ("otii_login", {"username": "lab@example.com", "password": "pw"}, None),
        ("otii_has_license", {"license_type": "Automation"}, {"has_license": False}),
        ("otii_get_licenses", None, {"licenses": [
            {"id": 3, "type": "Battery", "available": True, "reserved_to": "", "hostname": ""},
            {"id": 5, "type": "Automation", "available": True, "reserved_to": "bob",
             "hostname": "pc2"},
            {"id": 7, "type": "Automation", "available": True, "reserved_to": "",
             "hostname": ""}]}),
        ("otii_reserve_license", {"license_id": 7}, None),
        ("otii_get_devices", {"timeout": 3}, {"devices": [
            {"device_id": "X1", "name": "Battery box", "type": "Unknown"},
            {"device_id": DEV, "name": "Arc I", "type": "Arc"}]}),
        ("arc_set_main", arc(enable=False), None),  # off first: a crashed session
        ("arc_get_version", arc(), {"hw_version": "Arc 1.1", "fw_version": "1.1.7"}),
        ("otii_get_active_project", None, {"project_id": -1}),
        ("otii_create_project", None, {"project_id": 1}),
        ("arc_add_to_project", arc(), None),
        # close(): output off, the license back, logged out again
        ("arc_set_main", arc(enable=False), None),
        ("otii_return_license", {"license_id": 7}, None),
        ("otii_logout", None, None),
    ], credentials=("lab@example.com", "pw"))
    otii.connect()
    assert otii.device_id == DEV and otii.project_id == 1
    settings = otii.settings()
    assert settings["device_type"] == "Arc" and settings["server"]["otii_version"] == "3.5.5"
    otii.close()
    assert sock.script == [] and sock.closed
    assert [m["trans_id"] for m in sock.sent] == [str(i) for i in range(1, 15)]


def test_configure_sends_the_settings_in_order_and_reads_the_voltage_back() -> None:
    otii, sock = scripted([*LOGGED_IN, *DEVICE, *CONFIGURE, *CLOSE_OFF])
    otii.connect()
    otii.configure(1.8, 4000)
    assert otii.sample_rate == 4000
    s = otii.settings()
    assert s["main_voltage_v"] == 1.8 and s["channels"] == ["mc", "mv", "i1"]
    assert s["timestamp_channel"] == "GPI1 (expansion port)" and s["current_range"] == "auto"
    otii.close()
    assert sock.script == []


def test_the_sense_input_instead_of_gpi1() -> None:
    configure = [step for step in CONFIGURE if "exp" not in step[0]]
    configure[6] = ("arc_enable_channel", arc(channel="sp", enable=True), None)
    configure.append(("arc_get_channel_samplerate", arc(channel="sp"), {"value": 4000}))
    otii, sock = scripted([*LOGGED_IN, *DEVICE, *configure, *CLOSE_OFF],
                          timestamp_input="aux")
    otii.connect()
    otii.configure(1.8, 4000)
    assert otii.settings()["timestamp_channel"] == "Sense+ (analog, thresholded)"
    otii.close()
    assert sock.script == []


def test_a_voltage_channel_off_the_current_grid_is_replaced_by_the_read_back_voltage() -> None:
    configure = [*CONFIGURE[:-1],
                 ("arc_get_channel_samplerate", arc(channel="mv"), {"value": 1000}),
                 ("arc_enable_channel", arc(channel="mv", enable=False), None)]
    otii, sock = scripted([*LOGGED_IN, *DEVICE, *configure, *CLOSE_OFF])
    otii.connect()
    otii.configure(1.8, 4000)
    s = otii.settings()
    assert s["channels"] == ["mc", "i1"] and otii.measure_voltage is False
    assert s["voltage_source"] == ("main voltage read back (mv samples at 1000 Hz, off the "
                                   "current's grid)")
    otii.close()
    assert sock.script == []


def test_sense_off_the_current_grid_is_refused() -> None:
    configure = [step for step in CONFIGURE if "exp" not in step[0]]
    configure[6] = ("arc_enable_channel", arc(channel="sp", enable=True), None)
    configure.append(("arc_get_channel_samplerate", arc(channel="sp"), {"value": 1000}))
    otii, _ = scripted([*LOGGED_IN, *DEVICE, *configure], timestamp_input="aux")
    otii.connect()
    with pytest.raises(DeviceError, match="Sense\\+ samples at 1000 Hz, main current at 4000"):
        otii.configure(1.8, 4000)


@pytest.mark.parametrize("volts", [3.4, 5.0])
def test_a_voltage_above_the_bench_limit_sends_nothing(volts: float) -> None:
    otii, sock = scripted([*LOGGED_IN, *DEVICE, *CLOSE_OFF])
    otii.connect()
    sent = len(sock.sent)
    with pytest.raises(VoltageLimitError, match=r"above the bench voltage limit of 3\.3 V"):
        otii.configure(volts, 4000)
    assert len(sock.sent) == sent
    otii.close()


def test_a_read_back_voltage_above_the_limit_is_refused() -> None:
    otii, sock = scripted([*LOGGED_IN, *DEVICE, CONFIGURE[0],
                           ("arc_get_main_voltage", arc(), {"value": 3.5}), *CLOSE_OFF])
    otii.connect()
    with pytest.raises(VoltageLimitError, match=r"read back: 3\.5 V is above"):
        otii.configure(1.8, 4000)
    # the voltage is set already: the output goes off at once, not at close()
    assert sock.sent[-1]["cmd"] == "arc_set_main" and sock.sent[-1]["data"]["enable"] is False
    assert sock.script == []
    with pytest.raises(DeviceError, match="before a successful configure"):
        otii.power_on()  # nothing is sent: the voltage the app holds was refused
    assert sock.sent[-1]["cmd"] == "arc_set_main" and sock.sent[-1]["data"]["enable"] is False
    sock.script.extend(CLOSE_OFF)
    otii.close()
    assert sock.script == []


def test_power_on_before_configure_is_refused() -> None:
    otii, sock = scripted([*LOGGED_IN, *DEVICE, *CLOSE_OFF])
    otii.connect()
    sent = len(sock.sent)
    with pytest.raises(DeviceError, match="before a successful configure"):
        otii.power_on()
    assert len(sock.sent) == sent
    otii.close()


def test_gpi1_io_level_above_a_low_bench_limit_is_refused_before_anything_is_sent() -> None:
    """GPI1's expansion port runs at 1.2 V at least: on a 1.1 V bench that is above the limit,
    however low the supply (Sense+ as the timestamp line has no such level)."""
    sock = ScriptedSocket([*LOGGED_IN, *DEVICE, *CLOSE_OFF])
    conn = OtiiConnection("127.0.0.1", 1905, sock=sock)  # type: ignore[arg-type]
    otii = Otii(conn, voltage_limit_v=1.1, address="127.0.0.1:1905")
    otii.connect()
    sent = len(sock.sent)
    with pytest.raises(VoltageLimitError, match="expansion port I/O level"):
        otii.configure(1.0, 4000)
    assert len(sock.sent) == sent
    otii.close()


def test_an_arc_takes_only_its_own_rate_and_nothing_is_sent() -> None:
    otii, sock = scripted([*LOGGED_IN, *DEVICE, *CLOSE_OFF])
    otii.connect()
    sent = len(sock.sent)
    with pytest.raises(DeviceError, match=f"an Otii Arc samples at {ARC_RATE_HZ} Hz, not 1000"):
        otii.configure(1.8, 1000)
    assert len(sock.sent) == sent
    otii.close()


def test_a_refused_login_names_the_user_and_the_server() -> None:
    otii, _ = scripted([("otii_is_logged_in", None, {"logged_in": False}),
                        ("otii_login", {"username": "u", "password": "bad"}, "!Could not login")],
                       credentials=("u", "bad"))
    with pytest.raises(DeviceError) as info:
        otii.connect()
    assert "refused the login of 'u': Could not login" in info.value.message
    assert "127.0.0.1:1905" in info.value.message and "OTII_USERNAME" in info.value.hint


def test_not_logged_in_without_credentials(monkeypatch) -> None:
    monkeypatch.delenv("OTII_USERNAME", raising=False)
    monkeypatch.delenv("OTII_PASSWORD", raising=False)
    otii, sock = scripted([("otii_is_logged_in", None, {"logged_in": False})])
    with pytest.raises(DeviceError, match="is not logged in") as info:
        otii.connect()
    assert "OTII_USERNAME and OTII_PASSWORD" in info.value.hint
    assert [m["cmd"] for m in sock.sent] == ["otii_is_logged_in"]


def test_no_free_automation_license() -> None:
    otii, _ = scripted([*LOGGED_IN[:1],
                        ("otii_has_license", {"license_type": "Automation"},
                         {"has_license": False}),
                        ("otii_get_licenses", None, {"licenses": [
                            {"id": 5, "type": "Automation", "available": True,
                             "reserved_to": "bob", "hostname": "pc2"}]})])
    with pytest.raises(DeviceError, match="no free license with Automation"):
        otii.connect()


def test_two_devices_need_a_name_in_the_address() -> None:
    two = {"devices": [{"device_id": DEV, "name": "Arc I", "type": "Arc"},
                       {"device_id": "Ace9", "name": "Ace I", "type": "Ace"}]}
    otii, _ = scripted([*LOGGED_IN, ("otii_get_devices", {"timeout": 3}, two)])
    with pytest.raises(DeviceError, match="2 devices") as info:
        otii.connect()
    assert "host:port/<device id or name>" in info.value.hint
    otii, _ = scripted([*LOGGED_IN, ("otii_get_devices", {"timeout": 3}, two),
                        ("arc_set_main", {"device_id": "Ace9", "enable": False}, None),
                        ("arc_get_version", {"device_id": "Ace9"}, {}),
                        ("otii_get_active_project", None, {"project_id": 2}),
                        ("arc_add_to_project", {"device_id": "Ace9"}, None)], device="Ace I")
    otii.connect()
    assert otii.device_id == "Ace9"


def test_a_server_error_names_the_command_and_its_errorcode() -> None:
    otii, _ = scripted([*LOGGED_IN, *DEVICE, CONFIGURE[0], CONFIGURE[1],
                        ("arc_set_max_current", arc(value=0.1), "!Invalid key value")])
    otii.connect()
    with pytest.raises(DeviceError, match="refused arc_set_max_current: Invalid key value"):
        otii.configure(1.8, 4000)


def test_a_closed_connection_is_a_clear_error() -> None:
    otii, sock = scripted([*LOGGED_IN])
    sock.closed = True
    sock.out.clear()
    with pytest.raises(DeviceError, match="closed the connection during otii_is_logged_in"):
        otii.connect()


def test_progress_messages_between_a_request_and_its_answer_are_skipped() -> None:
    sock = ScriptedSocket([("otii_is_logged_in", None, {"logged_in": True})])
    conn = OtiiConnection("127.0.0.1", 1905, sock=sock)  # type: ignore[arg-type]
    sock.out += wire.encode({"type": "progress", "cmd": "project_save", "data": {"value": 50}})
    assert conn.request("otii_is_logged_in") == {"logged_in": True}


def test_an_answer_to_another_transaction_is_refused() -> None:
    sock = ScriptedSocket([])
    conn = OtiiConnection("127.0.0.1", 1905, sock=sock)  # type: ignore[arg-type]
    sock.script.append(("otii_logout", None, None))
    sock.out += wire.encode(wire.response("otii_logout", "99"))
    with pytest.raises(ProtocolError, match="transaction '99' while waiting for otii_logout"):
        conn.request("otii_logout")


def test_no_server_at_the_address() -> None:
    with pytest.raises(PortError, match=r"cannot connect to the Otii TCP server at 127\.0\.0\.1:"):
        Otii.open("127.0.0.1:1", voltage_limit_v=3.3)


def test_a_fixed_current_range_is_refused_before_connecting() -> None:
    with pytest.raises(DeviceError, match="auto-ranges"):
        open_monitor("otii", "127.0.0.1:1", voltage_limit_v=3.3, current_range="18 mA")
    with pytest.raises(DeviceError, match="auto-ranges"):  # the driver itself, not only the
        Otii.open("127.0.0.1:1", voltage_limit_v=3.3, current_range="18 mA")  # registry


def test_bench_files_with_the_otii(tmp_path) -> None:
    from rig.bench.config import load_bench
    from rig.errors import ConfigError

    shipped = Path(__file__).resolve().parents[2] / "benches" / "sim-otii.toml"
    bench = load_bench(shipped)
    assert (bench.emon.driver, bench.emon.port, bench.simulated) == ("otii", "virtual", True)
    aux = load_bench(shipped, {"emon": {"timestamp_input": "aux"}})
    assert aux.emon.timestamp_input == "aux"  # Sense+
    with pytest.raises(ConfigError, match="auto-ranges"):
        load_bench(shipped, {"emon": {"current_range": "18 mA"}})


# -- GPI events -> bits ---------------------------------------------------------------------------
def test_a_pulse_shorter_than_a_sample_marks_the_sample_that_holds_it() -> None:
    line = GpiLine(t0=0.0, dt=0.001)
    line.add(np.array([0.0, 0.0105, 0.01051]), np.array([1, 0, 1], dtype=np.uint8))
    bits = line.bits(0, 20)
    assert np.flatnonzero(bits == 0).tolist() == [10]


def test_a_pulse_across_chunks_and_an_event_pair_at_one_time() -> None:
    line = GpiLine(t0=0.5, dt=0.001)
    line.add(np.array([0.5, 0.5095, 0.5125, 0.520, 0.520]),
             np.array([1, 0, 1, 0, 1], dtype=np.uint8))
    first, second = line.bits(0, 11), line.bits(11, 20)
    bits = np.concatenate((first, second))
    assert np.flatnonzero(bits == 0).tolist() == [9, 10, 11, 12, 20]
    assert line.times.size == 0


def test_lows_before_the_line_was_ever_high_do_not_count() -> None:
    line = GpiLine(t0=0.0, dt=0.001)
    line.add(np.array([0.0]), np.array([0], dtype=np.uint8))  # the DUT is not powered yet
    assert line.bits(0, 10).tolist() == [1] * 10
    line.add(np.array([0.012, 0.0155, 0.016]), np.array([1, 0, 1], dtype=np.uint8))
    assert np.flatnonzero(line.bits(10, 10) == 0).tolist() == [5]


# -- against the simulated Otii server ------------------------------------------------------------
@pytest.fixture
def world() -> World:
    return World(PowerParams(), speed=5.0)


@pytest.fixture
def sim(world: World) -> Iterator[SimOtii]:
    server = SimOtii(world)
    server.start()
    try:
        yield server
    finally:
        server.close()


def collect() -> tuple[list[Chunk], Any]:
    chunks: list[Chunk] = []
    return chunks, chunks.append


def joined(chunks: list[Chunk]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return (np.concatenate([c.current for c in chunks]),
            np.concatenate([c.voltage for c in chunks]),
            np.concatenate([c.gpio for c in chunks]))


def schedule(world: World, sim: SimOtii, k1: int, k2: int, rate: int = ARC_RATE_HZ) -> None:
    """Activity over samples [k1, k2) of the running recording and a pulse at both starts."""
    t0 = sim.recordings[-1].t0_ns
    t1, t2 = t0 + k1 * NS // rate, t0 + k2 * NS // rate
    with world.lock:
        assert world.clock.now_ns() < t1, "too late to schedule"
        world.add_activity(t1, t2)
        world.add_pulse(t1)
        world.add_pulse(t2)


def test_a_window_in_closed_form(world: World, sim: SimOtii) -> None:
    otii = Otii.open(sim.address, voltage_limit_v=3.3, simulated=True)
    try:
        otii.configure(1.8, 4000)
        chunks, on_chunk = collect()
        otii.start(on_chunk)
        otii.power_on()
        k1, k2 = 12000, 14000  # 3 s and 3.5 s into the recording
        schedule(world, sim, k1, k2)
        wait_until(lambda: sum(len(c) for c in chunks) > k2 + 400)
        otii.power_off()
        otii.stop()
    finally:
        otii.close()
    current, voltage, gpio = joined(chunks)
    ids = np.concatenate([np.arange(c.first_sample_id, c.end_sample_id) for c in chunks])
    assert ids.tolist() == list(range(len(current)))  # contiguous from 0
    falls = (np.flatnonzero(np.diff(gpio.astype(int)) == -1) + 1).tolist()
    assert falls[:2] == [k1, k2]  # then the fall of the line when the output went off
    assert otii.stats.dropped == 0 and otii.stats.samples == len(current)
    power = current * voltage
    # The Arc's 5 nA steps: 1.2 mW at 1.8 V = 0.6666... mA reads 0.666665 mA.
    assert power[k1:k2].mean() == pytest.approx(3.6e-3, rel=1e-5)
    assert power[k2 + 10 : k2 + 300].mean() == pytest.approx(1.2e-3, rel=1e-5)
    assert np.all(voltage[k1:k2] == 1.8)
    assert sim.license_reserved_to == ""  # given back at close
    assert world.powered is False


def test_the_sense_input_with_pulses_two_samples_long() -> None:
    world = World(PowerParams(pulse_s=0.6e-3), speed=5.0)
    with SimOtii(world) as sim:
        otii = Otii.open(sim.address, voltage_limit_v=3.3, simulated=True,
                         timestamp_input="aux")
        try:
            otii.configure(1.8, 4000)
            chunks, on_chunk = collect()
            otii.start(on_chunk)
            otii.power_on()
            schedule(world, sim, 12000, 13000)
            wait_until(lambda: sum(len(c) for c in chunks) > 13400)
            otii.stop()
        finally:
            otii.close()
    _, _, gpio = joined(chunks)
    falls = (np.flatnonzero(np.diff(gpio.astype(int)) == -1) + 1).tolist()
    # 0.6 ms pulses from the starts of samples 12000 and 13000: Sense+ averages each sample's
    # 0.25 ms, so samples 12000 and 12001 read 0 V, 12002 (40 % low) 1.08 V, between the
    # thresholds (30 % and 70 % of 1.8 V): it keeps the low level; 12003 reads high again.
    assert falls == [12000, 13000]
    assert gpio[11999:12004].tolist() == [1, 0, 0, 0, 1]


def test_a_dropped_connection_ends_the_recording_and_the_output_is_still_switched_off(
        world: World, sim: SimOtii) -> None:
    otii = Otii.open(sim.address, voltage_limit_v=3.3, simulated=True)
    try:
        otii.configure(1.8, 4000)
        chunks, on_chunk = collect()
        otii.start(on_chunk)
        otii.power_on()
        wait_until(lambda: sum(len(c) for c in chunks) > 1000)
        sim.drop_connections()
        wait_until(lambda: otii.fault is not None)
        assert "closed the connection" in str(otii.fault)
        assert world.powered is True  # the app keeps the output on when a client goes away
        otii.power_off()  # over a new connection
        assert world.powered is False
        assert sim.recordings[-1].stop_ns is not None  # and the recording stopped
        with pytest.raises(DeviceError, match="closed the connection"):
            otii.stop()
    finally:
        otii.close()
    assert otii.settings()["main"] == "off"


def test_a_refused_login_against_the_simulator(world: World, monkeypatch) -> None:
    monkeypatch.setenv("OTII_USERNAME", "lab@example.com")
    monkeypatch.setenv("OTII_PASSWORD", "wrong")
    with SimOtii(world, logged_in=False, accounts={"lab@example.com": "right"}) as sim:
        with pytest.raises(DeviceError, match=r"refused the login of 'lab@example\.com'"):
            Otii.open(sim.address, voltage_limit_v=3.3, simulated=True)
        monkeypatch.setenv("OTII_PASSWORD", "right")
        otii = Otii.open(sim.address, voltage_limit_v=3.3, simulated=True)
        assert sim.logged_in and sim.license_reserved_to == "lab@example.com"
        otii.close()
        assert not sim.logged_in  # logged in by the driver: logged out again


def test_the_simulator_refuses_what_the_app_refuses(world: World, sim: SimOtii) -> None:
    conn = OtiiConnection("127.0.0.1", sim.port)
    try:
        with pytest.raises(DeviceError, match="No license"):
            conn.request("otii_get_devices", {"timeout": 1})
        conn.request("otii_reserve_license", {"license_id": 1})
        with pytest.raises(DeviceError, match="Invalid command"):
            conn.request("otii_make_coffee")
        with pytest.raises(DeviceError, match="Missing key in request"):
            conn.request("arc_set_main", {"device_id": DEV})
        with pytest.raises(DeviceError, match="Invalid key value"):
            conn.request("arc_set_main_voltage", {"device_id": DEV, "value": 9.0})
        with pytest.raises(DeviceError, match="Command failure"):
            conn.request("arc_set_channel_samplerate", {"device_id": DEV, "channel": "mc",
                                                        "value": 1000})
        with pytest.raises(DeviceError, match="Device not connected"):
            conn.request("arc_get_main", {"device_id": "Arc0"})
    finally:
        conn.close()


def test_quantisation_follows_the_arcs_ranges() -> None:
    got = quantise_current(np.array([0.6666667e-3, 0.5, 3.0]))
    assert got[0] == pytest.approx(0.666665e-3, abs=1e-12)
    assert got[1] == pytest.approx(round(0.5 / 82e-6) * 82e-6)
    assert got[2] == pytest.approx(3.0)


def test_an_ace_at_its_set_rate(world: World) -> None:
    with SimOtii(world, device_type="Ace") as sim:
        otii = Otii.open(sim.address, voltage_limit_v=3.3, simulated=True)
        try:
            otii.configure(1.8, 20000)
            assert otii.sample_rate == 20000
            chunks, on_chunk = collect()
            otii.start(on_chunk)
            otii.power_on()
            schedule(world, sim, 60000, 62000, rate=20000)
            wait_until(lambda: sum(len(c) for c in chunks) > 62500)
            otii.stop()
        finally:
            otii.close()
    current, voltage, gpio = joined(chunks)
    falls = (np.flatnonzero(np.diff(gpio.astype(int)) == -1) + 1).tolist()
    assert falls == [60000, 62000]
    assert (current * voltage)[60000:62000].mean() == pytest.approx(3.6e-3, rel=1e-5)


def test_threads_end(world: World, sim: SimOtii) -> None:
    before = threading.active_count()
    otii = Otii.open(sim.address, voltage_limit_v=3.3, simulated=True)
    otii.configure(1.8, 4000)
    otii.start(lambda chunk: None)
    otii.stop()
    otii.close()
    assert threading.active_count() <= before + 1  # the sim's finished client thread at most


def test_a_pulse_at_the_dut_s_horizon_is_an_event_even_when_declared_after_a_poll() -> None:
    """An out-of-process DUT (the C shim on the sim bus) begins work at its horizon and may
    declare its pulse at exactly that time only after a poll has read GPI1 up to it. The server
    reports events over [previous poll, horizon), so the pulse is still ahead of what was read
    (CI: the Otii recovery run lost its calibration window's first edge this way)."""
    world = World(PowerParams(), speed=5.0)
    sim = SimOtii(world)  # no socket: requests go straight to `handle`

    def ask(cmd: str, **data: Any) -> dict[str, Any]:
        answer = sim.handle({"type": "request", "cmd": cmd, "trans_id": "1", "data": data})
        assert answer["type"] == "response", answer
        return answer.get("data") or {}

    ask("otii_reserve_license", license_id=1)
    ask("arc_add_to_project", device_id=DEV)
    project = ask("otii_create_project")["project_id"]
    ask("arc_enable_exp_port", device_id=DEV, enable=True)
    for channel in ("mc", "i1"):
        ask("arc_enable_channel", device_id=DEV, channel=channel, enable=True)
    ask("arc_set_main", device_id=DEV, enable=True)
    ask("project_start_recording", project_id=project)
    rec = {"recording_id": ask("project_get_last_recording", project_id=project)["recording_id"],
           "device_id": DEV, "channel": "i1"}
    begin = world.hold()  # `begin`: nothing past `begin` is observable until declared
    wait_until(lambda: world.clock.now_ns() > begin + 1_000_000, "time past the horizon")
    assert ask("recording_get_channel_data_count", **rec)["count"] == 1  # the level at start
    with world.lock:  # `pulse <begin>`, then `end`
        world.add_pulse(begin)
        world.extend_horizon(begin)
    world.release()
    wait_until(lambda: world.clock.now_ns() > begin + 1_000_000, "time past the pulse")
    count = ask("recording_get_channel_data_count", **rec)["count"]
    values = ask("recording_get_channel_data", **rec, index=0, count=count)["values"]
    t0 = sim.recordings[-1].t0_ns
    assert [(round(v["timestamp"] * NS) + t0, v["value"]) for v in values] == [
        (t0, True), (begin, False), (begin + round(world.params.pulse_s * NS), True)]
