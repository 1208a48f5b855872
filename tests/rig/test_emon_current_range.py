"""`[emon] current_range`: checked per driver when a bench loads (file, key and what the driver
takes), normalised, written back by the bench writer, and honoured by the simulated instruments
(Keysight ranges read back, a fixed Joulescope range that clips)."""

from __future__ import annotations

import socket
import time
import tomllib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.joulescope_socket import FakeJoulescopeDriver
from protocols.joulescope_bridge import SampleBlock
from rig.bench.config import (
    current_range_choices,
    current_range_help,
    load_bench,
    normalize_current_range,
)
from rig.bench.saving import bench_to_toml, save_bench
from rig.cli import main
from rig.errors import ConfigError
from virtual_bench.keysight import Sim34465A, SimN6705
from virtual_bench.world import World

REPO = Path(__file__).resolve().parents[2]
EMON = 'driver = "lpm01a"\nport = "virtual"'


def bench_with(tmp_path: Path, text: str, driver: str, extra: str) -> Path:
    """benches/sim.toml with another simulated monitor and extra [emon] lines."""
    assert EMON in text
    path = tmp_path / "bench.toml"
    path.write_text(text.replace(EMON, f'driver = "{driver}"\n{extra}'))
    return path


@pytest.mark.parametrize(("driver", "value", "stored"), [
    ("lpm01a-sim", '"auto"', "auto"),
    ("joulescope-sim", '"18mA"', "18 mA"),
    ("joulescope-sim", '"0.018"', "18 mA"),
    ("joulescope-sim", "0.18", "180 mA"),  # a TOML number is read as its text
    ("joulescope-sim", '"180 uA"', "180 µA"),
    ("n6705-sim", '"1e-3"', "0.001"),
    ("n6705-sim", "0.1", "0.1"),
    ("34465a-sim", '"100 mA"', "0.1"),
    ("34465a-sim", '"AUTO"', "auto"),
])
def test_accepted_ranges_are_normalised(tmp_path: Path, sim_bench_text: str, driver: str,
                                        value: str, stored: str) -> None:
    bench = load_bench(bench_with(tmp_path, sim_bench_text, driver, f"current_range = {value}"))
    assert bench.emon.current_range == stored
    assert bench.snapshot()["emon"]["current_range"] == stored


def test_default_is_auto(sim_bench_text: str, tmp_path: Path) -> None:
    for name in ("sim", "sim-joulescope", "sim-io-manager", "arduino"):
        assert load_bench(REPO / "benches" / f"{name}.toml").emon.current_range == "auto"


@pytest.mark.parametrize(("driver", "value", "in_message", "in_hint"), [
    ("lpm01a-sim", '"18 mA"', "lpm01a takes only \"auto\"",
     "auto-ranges by itself in its dynamic acquisition mode"),
    ("joulescope-sim", '"20 mA"', "'20 mA' is not a Joulescope range",
     "10 A, 2 A (JS110 only), 180 mA, 18 mA, 1.8 mA, 180 µA, 18 µA"),
    ("n6705-sim", '"5"', "outside the n6705's current ranges", "amps up to 3.06"),
    ("34465a-sim", '"10"', "outside the 34465a's current ranges", "amps up to 3,"),
    ("34465a-sim", '"lots"', "'lots' is not a current range of the 34465a", "e.g. \"0.1\""),
    ("none", '"0.1"', "none takes only", "no energy monitor"),
])
def test_refused_ranges_name_file_key_and_what_the_driver_takes(
        tmp_path: Path, sim_bench_text: str, driver: str, value: str, in_message: str,
        in_hint: str) -> None:
    path = bench_with(tmp_path, sim_bench_text, driver, f"current_range = {value}")
    with pytest.raises(ConfigError) as err:
        load_bench(path)
    message = err.value.message
    assert message.startswith(f"{path}: [emon] current_range: ") and in_message in message
    assert in_hint in err.value.hint


def test_a_boolean_is_not_a_range(tmp_path: Path, sim_bench_text: str) -> None:
    path = bench_with(tmp_path, sim_bench_text, "joulescope-sim", "current_range = true")
    with pytest.raises(ConfigError, match=r"\[emon\] current_range: expected a string"):
        load_bench(path)


def test_helpers_for_a_form() -> None:
    assert current_range_choices("joulescope-sim") == (
        "auto", "10 A", "2 A", "180 mA", "18 mA", "1.8 mA", "180 µA", "18 µA")
    assert current_range_choices("lpm01a") == ("auto",)
    assert current_range_choices("n6705") is None  # amps in a span
    assert "amps up to 3.06" in current_range_help("n6705-sim")
    assert normalize_current_range("joulescope", "1.8mA") == "1.8 mA"
    with pytest.raises(ConfigError, match="lpm01a takes only"):
        normalize_current_range("lpm01a-sim", "1 A")


def test_emon_record_refuses_a_range_before_touching_the_port(tmp_path: Path, capsys) -> None:
    code = main(["emon", "record", "--driver", "lpm01a", "--port", "/dev/nonexistent-rig-port",
                 "--duration", "1", "--voltage", "1.8", "--rate", "1000",
                 "--out", str(tmp_path / "t.jls"), "--range", "18 mA"])
    err = capsys.readouterr().err
    assert code == 2 and "lpm01a takes only" in err and "auto-ranges by itself" in err
    assert "nonexistent" not in err and list(tmp_path.iterdir()) == []


# -- the bench writer ---------------------------------------------------------------------------
def test_a_fixed_range_round_trips(tmp_path: Path) -> None:
    base = load_bench(REPO / "benches" / "sim-joulescope.toml")
    bench = replace(base, emon=replace(base.emon, current_range="18 mA"))
    raw = tomllib.loads(bench_to_toml(bench))
    assert raw["emon"]["current_range"] == "18 mA"
    again = load_bench(save_bench(bench, tmp_path / "js.toml"))
    assert again.emon.current_range == "18 mA" and replace(again, path=bench.path) == bench


def test_a_form_spelling_is_written_as_the_rig_reads_it(tmp_path: Path) -> None:
    base = load_bench(REPO / "benches" / "sim-joulescope.toml")
    typed = replace(base, emon=replace(base.emon, current_range="18mA"))
    saved = save_bench(typed, tmp_path / "js.toml")
    assert tomllib.loads(saved.read_text())["emon"]["current_range"] == "18 mA"
    assert load_bench(saved).emon.current_range == "18 mA"


def test_a_range_the_driver_refuses_is_never_written(tmp_path: Path) -> None:
    base = load_bench(REPO / "benches" / "sim.toml")  # an LPM01A: auto only
    bad = replace(base, emon=replace(base.emon, current_range="18 mA"))
    with pytest.raises(ConfigError, match=r"\[emon\] current_range: the lpm01a takes only"):
        save_bench(bad, tmp_path / "bad.toml")
    assert list(tmp_path.iterdir()) == []


# -- the simulated instruments ------------------------------------------------------------------
class Raw:
    """A bare TCP client speaking SCPI lines."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.buf = b""

    def send(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\n")

    def ask(self, line: str) -> bytes:
        self.send(line)
        while b"\n" not in self.buf:
            self.buf += self.sock.recv(65536)
        reply, _, self.buf = self.buf.partition(b"\n")
        return reply


@pytest.mark.parametrize(("asked", "reply"), [
    ("0.0005", b"0.001"), ("0.001", b"0.001"), ("0.05", b"0.1"), ("2", b"3.06")])
def test_sim_n6705_selects_the_smallest_range_that_holds_the_value(asked: str,
                                                                   reply: bytes) -> None:
    with SimN6705(World()) as sim:
        raw = Raw(sim.port)
        assert raw.ask("SENS:CURR:RANG? (@1)") == b"3.06"  # *RST: the top range
        raw.send(f"SENS:CURR:RANG {asked},(@1)")
        assert raw.ask("SENS:CURR:RANG? (@1)") == reply
        raw.send("SENS:CURR:RANG:AUTO ON,(@1)")  # seamless ranging is not simulated
        assert raw.ask("SYST:ERR?").startswith(b"-113")
        raw.sock.close()


def test_sim_34465a_reports_its_range() -> None:
    with Sim34465A(World()) as sim:
        raw = Raw(sim.port)
        raw.send("CONF:CURR:DC 0.0005")
        assert raw.ask("CURR:DC:RANG?") == b"+1.00000000E-03"
        assert raw.ask("SYST:ERR?") == b'+0,"No error"'
        raw.sock.close()


class _Blocks:
    """A sample source that hands out one prepared block."""

    sample_rate = 1000

    def __init__(self, current: list[float]) -> None:
        n = len(current)
        self.block: SampleBlock | None = SampleBlock(
            0, np.asarray(current, np.float32), np.full(n, 1.8, np.float32),
            np.ones(n, np.uint8), np.zeros(n, np.uint8))
        self.power: list[bool] = []

    def set_sample_rate(self, hz: int) -> None:
        self.sample_rate = hz

    def set_power(self, on: bool) -> None:
        self.power.append(on)

    def start(self) -> None: ...
    def stop(self) -> None: ...
    def close(self) -> None: ...

    def read(self, timeout_s: float) -> SampleBlock | None:
        block, self.block = self.block, None
        return block


@pytest.mark.parametrize(("path", "publishes", "powered", "clipped"), [
    ("u/js220/000415", [("s/i/range/select", "18 mA"), ("s/i/range/mode", "manual")],
     [False, True], 0.018),
    ("u/js220/000415", [("s/i/range/mode", "auto")], [False, True], None),
    ("u/js110/000001", [("s/i/range/select", "1.8 mA")], [False, True], 1.8e-3),
])
def test_fake_joulescope_clips_at_a_fixed_ranges_full_scale(path, publishes, powered,
                                                            clipped) -> None:
    source = _Blocks([0.002, 0.025, -0.03])
    fake = FakeJoulescopeDriver(source, device_path=path)
    got: list[np.ndarray] = []
    try:
        fake.open(path, "restore")  # as the rig opens it ("defaults" connects the DUT)
        fake.publish(f"{path}/{('s/i/range/mode' if 'js220' in path else 's/i/range/select')}",
                     "off")
        for topic, value in publishes:
            fake.publish(f"{path}/{topic}", value)
        fake.publish(f"{path}/h/fs", 1000)
        fake.subscribe(f"{path}/s/i/!data", ["pub"], lambda t, v: got.append(v["data"]))
        fake.publish(f"{path}/s/i/ctrl", 1)
        deadline = time.monotonic() + 5.0
        while not got and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        fake.finalize()
    assert source.power == powered
    want = [0.002, 0.025, -0.03] if clipped is None else np.clip([0.002, 0.025, -0.03],
                                                                 -clipped, clipped)
    np.testing.assert_allclose(got[0], np.float32(want), rtol=1e-7)


def test_fake_joulescope_refuses_a_range_the_model_lacks() -> None:
    fake = FakeJoulescopeDriver(_Blocks([0.0]))
    dev = fake.device_path  # a JS220
    try:
        fake.open(dev, "defaults")
        with pytest.raises(RuntimeError, match="invalid value '2 A'"):
            fake.publish(f"{dev}/s/i/range/select", "2 A")
        assert fake.query(f"{dev}/s/i/range/select") == "10 A"
    finally:
        fake.finalize()
