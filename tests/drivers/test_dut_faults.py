"""Fault injection between the DutClient and a simulated DUT on a real pty.

`FaultyTransport` wraps the `SerialTransport` to a `SimDut`: it drops, corrupts and delays bytes
the host sends, holds back what the DUT says, and power-cycles the DUT in the middle of a
command. The client must raise the right typed error or recover by retrying the one idempotent
step it retries (a download), and every wait ends at one of the client's (short) deadlines.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from drivers.dut.client import DownloadError, DutClient, LoadResult
from drivers.dut.qemu import STALL_S, QemuBoard
from drivers.errors import DeviceError, DeviceTimeout, DutError
from drivers.transport import SerialTransport
from tests.m4_image import build_m4_elf
from virtual_bench.dut import SimDut
from virtual_bench.world import World

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

SPEED = 1000.0
#: Three binary writes of 1024, 1024 and 952 bytes.
INPUT_SIZE = 3000
#: The DUT's inter-byte timeout in these tests (the spec's 1 s would only make them slower).
BLOAD_TIMEOUT_S = 0.1
#: The client's deadline for a command that does no real work.
COMMAND_TIMEOUT_S = 1.0

# Random bytes without '%', so that bytes arriving after the DUT gave up on a download stay in
# its command buffer as junk instead of ending commands of their own.
_rng = np.random.default_rng(3)
DATA = bytes(np.where((d := _rng.integers(0, 256, INPUT_SIZE)) == 0x25, 0x24, d).astype(np.uint8))
assert b"%" not in DATA


class SumModel:
    """Scores: the sum of the input bytes and the first byte (any change to the input shows)."""

    input_size = INPUT_SIZE
    model_id = "ic01"

    def __call__(self, data: bytes) -> np.ndarray:
        x = np.frombuffer(data, dtype=np.uint8)
        return np.array([x.sum(), x[0]], dtype=np.float64)


Damage = Callable[[bytes, Callable[[bytes], None]], None]


@dataclass
class Fault:
    """Apply `damage` to the next `times` host writes that `match`."""

    match: Callable[[bytes], bool]
    damage: Damage
    times: int = 1


def corrupt(offset: int, value: int) -> Damage:
    """Byte `offset` of the write becomes `value`."""
    return lambda data, write: write(data[:offset] + bytes([value]) + data[offset + 1 :])


def drop(offset: int, n: int = 1) -> Damage:
    """`n` bytes from `offset` on are lost."""
    return lambda data, write: write(data[:offset] + data[offset + n :])


def stall(offset: int, seconds: float) -> Damage:
    """The bytes from `offset` on are delayed by `seconds` (host time: a fault, not a figure)."""

    def damage(data: bytes, write: Callable[[bytes], None]) -> None:
        write(data[:offset])
        time.sleep(seconds)
        write(data[offset:])

    return damage


class FaultyTransport:
    """A transport wrapper that damages the line as `faults` say."""

    def __init__(self, inner: SerialTransport) -> None:
        self.inner = inner
        self.faults: list[Fault] = []
        self.sent: list[bytes] = []
        #: Reads return nothing before this host time (replies delayed on the line).
        self.hold_until = 0.0
        self._threads: list[threading.Thread] = []

    @property
    def baudrate(self) -> int:
        return self.inner.baudrate

    def add(self, match: Callable[[bytes], bool], damage: Damage, times: int = 1) -> None:
        self.faults.append(Fault(match, damage, times))

    def power_cycle_when(self, match: Callable[[bytes], bool], world: World,
                         ready: Callable[[], bool]) -> None:
        """After a write that matches, reset the DUT (power off and on) once `ready()`."""

        def cycle() -> None:
            deadline = time.monotonic() + 5.0
            while not ready() and time.monotonic() < deadline:
                time.sleep(0.001)
            world.power(False)
            world.power(True)

        def damage(data: bytes, write: Callable[[bytes], None]) -> None:
            write(data)
            thread = threading.Thread(target=cycle)
            self._threads.append(thread)
            thread.start()

        self.add(match, damage)

    def write(self, data: bytes) -> None:
        self.sent.append(data)
        for fault in self.faults:
            if fault.times > 0 and fault.match(data):
                fault.times -= 1
                fault.damage(data, self._write)
                return
        self._write(data)

    def _write(self, data: bytes) -> None:
        if data:
            self.inner.write(data)

    def read(self) -> bytes:
        if time.monotonic() < self.hold_until:
            time.sleep(0.005)
            return b""
        return self.inner.read()

    def reset_input(self) -> None:
        self.inner.reset_input()

    def close(self) -> None:
        for thread in self._threads:
            thread.join(timeout=5.0)
        self.inner.close()


@dataclass
class Line:
    world: World
    dut: SimDut
    faulty: FaultyTransport
    client: DutClient


@pytest.fixture
def make_line() -> Iterator[Callable[..., Line]]:
    opened: list[Line] = []

    def make(mode: str = "energy", *, extensions: bool = True) -> Line:
        world = World(speed=SPEED)
        dut = SimDut(world, SumModel(), timestamp_mode=mode, extensions=extensions,
                     bload_timeout_s=BLOAD_TIMEOUT_S)
        dut.start()
        faulty = FaultyTransport(SerialTransport(dut.path, 921600, name="DUT"))
        client = DutClient(faulty, command_timeout_s=COMMAND_TIMEOUT_S)
        line = Line(world, dut, faulty, client)
        opened.append(line)
        world.power(True)
        assert client.wait_for_boot(timeout_s=5.0) == mode
        return line

    yield make
    for line in opened:
        line.client.close()
        line.dut.close()


def first_chunk(data: bytes) -> bool:
    return data == DATA[:1024]


def expected_scores() -> np.ndarray:
    return SumModel()(DATA)


def assert_loaded(line: Line) -> None:
    """The DUT holds DATA: its read-back and an inference on it say so."""
    assert line.client.read_buffer() == DATA
    np.testing.assert_array_equal(line.client.infer(1).results, expected_scores())


# -- binary download --------------------------------------------------------------------------


def test_clean_line_needs_no_retry(make_line) -> None:
    line = make_line()
    assert line.client.load(DATA) == LoadResult(INPUT_SIZE, "binary", 1, "crc")
    assert line.client.stats.retries == 0
    assert DATA[:1024] in line.faulty.sent


def test_corrupted_byte_fails_the_crc_and_the_retry_recovers(make_line) -> None:
    line = make_line()
    line.faulty.add(first_chunk, corrupt(500, DATA[500] ^ 0x40))
    assert line.client.load(DATA) == LoadResult(INPUT_SIZE, "binary", 2, "crc")
    assert line.client.stats.retries == 1
    assert_loaded(line)


def test_corruption_on_both_attempts_is_a_download_error_naming_the_offset(make_line) -> None:
    line = make_line()
    line.faulty.add(first_chunk, corrupt(700, DATA[700] ^ 0x01), times=2)
    with pytest.raises(DownloadError, match="crc mismatch") as exc:
        line.client.load(DATA)
    err = exc.value
    assert (err.n_bytes, err.method, err.offset) == (INPUT_SIZE, "binary", 700)
    assert "first difference at byte 700" in err.message and err.hint
    # The DUT is still usable: a clean download goes through.
    assert line.client.load(DATA).attempts == 1
    assert_loaded(line)


def test_dropped_bytes_end_in_the_duts_timeout_and_the_retry_recovers(make_line) -> None:
    line = make_line()
    line.faulty.add(first_chunk, drop(100, 5))
    assert line.client.load(DATA) == LoadResult(INPUT_SIZE, "binary", 2, "crc")
    assert_loaded(line)


def test_short_delay_inside_the_payload_is_harmless(make_line) -> None:
    line = make_line()
    line.faulty.add(first_chunk, stall(512, BLOAD_TIMEOUT_S / 5))
    assert line.client.load(DATA).attempts == 1
    assert_loaded(line)


def test_long_delay_then_late_bytes_as_junk_the_client_resyncs_and_retries(make_line) -> None:
    line = make_line()
    # The DUT gives up after BLOAD_TIMEOUT_S; the rest of the payload then lands in its command
    # buffer. The retry first ends that junk with a harmless command.
    line.faulty.add(first_chunk, stall(512, 4 * BLOAD_TIMEOUT_S))
    assert line.client.load(DATA).attempts == 2
    assert any(s == b"name%" for s in line.faulty.sent)
    assert_loaded(line)


@pytest.mark.parametrize("seed", range(4))
def test_one_random_fault_per_download_always_recovers(make_line, seed: int) -> None:
    rng = np.random.default_rng(seed)
    line = make_line()
    offset = int(rng.integers(0, 1024))
    damage = (
        corrupt(offset, (DATA[offset] + int(rng.integers(1, 256))) % 256 or 1)
        if rng.integers(2) else drop(offset, int(rng.integers(1, 4)))
    )
    line.faulty.add(first_chunk, damage)
    assert line.client.load(DATA).attempts == 2
    assert_loaded(line)


def test_power_cut_during_a_download_times_out_then_a_reboot_recovers(make_line) -> None:
    line = make_line()

    def cut(data: bytes, write: Callable[[bytes], None]) -> None:
        write(data[:300])
        line.world.power(False)  # the rest goes to a dead DUT, which says nothing
        write(data[300:])

    line.faulty.add(first_chunk, cut)
    line.client.command_timeout_s = 0.2
    with pytest.raises(DeviceTimeout, match="did not finish 'bload 3000"):
        line.client.load(DATA)
    line.world.power(True)
    line.client.wait_for_boot(timeout_s=5.0)
    line.client.command_timeout_s = COMMAND_TIMEOUT_S
    assert line.client.load(DATA).attempts == 1
    assert_loaded(line)


# -- legacy hex download ----------------------------------------------------------------------


def first_db_data(data: bytes) -> bool:
    return data == b"db " + DATA[:31].hex().encode() + b"%"


def other_digit(byte: int) -> tuple[int, int]:
    """Offset in the first db command of byte `byte`'s first hex digit, and another digit."""
    k = len(b"db ") + 2 * byte
    return k, ord("0") if DATA[:31].hex()[2 * byte] != "0" else ord("1")


def test_hex_digit_changed_on_the_line_is_caught_by_the_read_back(make_line) -> None:
    line = make_line(extensions=False)
    line.faulty.add(first_db_data, corrupt(*other_digit(10)))
    assert line.client.load(DATA) == LoadResult(INPUT_SIZE, "hex", 2, "read-back")
    assert_loaded(line)


def test_hex_digit_changed_on_the_line_is_caught_by_the_duts_crc(make_line) -> None:
    line = make_line()
    line.client.negotiate()
    line.client.capabilities -= {"bload"}  # the hex path, as behind an IO manager
    line.faulty.add(first_db_data, corrupt(*other_digit(10)))
    assert line.client.load(DATA) == LoadResult(INPUT_SIZE, "hex", 2, "crc")
    assert b"db crc%" in line.faulty.sent and b"db print%" not in line.faulty.sent
    assert_loaded(line)


def test_hex_digit_changed_twice_names_the_byte(make_line) -> None:
    line = make_line(extensions=False)
    line.faulty.add(first_db_data, corrupt(*other_digit(10)), times=2)
    with pytest.raises(DownloadError, match="differs from the data at byte 10") as exc:
        line.client.load(DATA)
    assert (exc.value.method, exc.value.offset) == ("hex", 10)


def test_invalid_hex_character_is_refused_by_the_dut_and_retried(make_line) -> None:
    line = make_line(extensions=False)
    line.faulty.add(first_db_data, corrupt(5, ord("z")))
    assert line.client.load(DATA).attempts == 2
    assert_loaded(line)


# -- commands -------------------------------------------------------------------------------


def test_lost_percent_times_out_then_the_merged_command_is_refused(make_line) -> None:
    line = make_line()
    line.faulty.add(lambda d: d == b"name%", drop(4))
    with pytest.raises(DeviceTimeout, match=r"did not finish 'name' within 0\.2 s"):
        line.client.command("name", timeout_s=0.2)
    # The DUT still holds "name": the next command reaches it as "namename".
    with pytest.raises(DutError, match="Unknown command: namename"):
        line.client.command("name")
    assert line.client.identify().model == "ic01"


def test_delayed_replies_time_out_and_are_not_taken_for_the_next_reply(make_line) -> None:
    line = make_line()
    line.faulty.hold_until = time.monotonic() + 0.5
    with pytest.raises(DeviceTimeout, match="did not finish 'name'"):
        line.client.command("name", timeout_s=0.1)
    # The late name reply is dropped; profile gets its own reply.
    info = line.client.identify()
    assert (info.name, info.model) == ("dut", "ic01")


def test_reset_mid_inference_is_reported_and_the_client_carries_on(make_line) -> None:
    line = make_line("energy")
    line.client.load(DATA)
    edges = len(line.world.falling_edges_between(0, 2**62))
    line.faulty.power_cycle_when(
        lambda d: d.startswith(b"infer"), line.world,
        # Both window edges are registered when the run starts: it is under way.
        lambda: len(line.world.falling_edges_between(0, 2**62)) >= edges + 2,
    )
    # 10^7 inferences would take about 35 h of simulated time.
    with pytest.raises(DeviceError, match="restarted while running 'infer 10000000 0'"):
        line.client.infer(10_000_000, 0, timeout_s=5.0)
    assert line.client.timestamp_mode == "energy"
    # RAM was cleared by the reset: the input must be loaded again.
    np.testing.assert_array_equal(line.client.infer(1).results, [0.0, 0.0])
    line.client.load(DATA)
    assert_loaded(line)


def test_reset_mid_download_is_reported(make_line) -> None:
    line = make_line()

    def reset(data: bytes, write: Callable[[bytes], None]) -> None:
        write(data[:300])
        line.world.power(False)
        line.world.power(True)  # the DUT reboots and prints its banner

    line.faulty.add(first_chunk, reset)
    with pytest.raises(DeviceError, match="restarted while running 'bload 3000"):
        line.client.load(DATA)
    # The client's last payload writes may have reached the rebooted DUT as junk in its command
    # buffer (then the next download needs its retry) or its boot (then they were ignored).
    assert line.client.load(DATA).attempts in (1, 2)
    assert_loaded(line)


# -- the same line faults against the Cortex-M4 build under QEMU ----------------------------------
@pytest.fixture(scope="module")
def m4_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """firmware/dut/mps2-an386 built once (skipped, reason printed, without the toolchain)."""
    return build_m4_elf(tmp_path_factory)


def test_m4_corrupted_and_dropped_bytes_are_caught_and_the_retry_recovers(m4_elf: Path) -> None:
    # The emulated firmware's own CRC check and 1 s inter-byte timeout, as on the SimDut above.
    data = bytes(np.random.default_rng(8).integers(0, 256, 16000, dtype=np.uint8))
    with QemuBoard(m4_elf) as board:
        faulty = FaultyTransport(board.transport())
        client = DutClient(faulty, command_timeout_s=STALL_S)
        try:
            board.power_on()
            assert client.wait_for_boot(5.0) == "performance"
            faulty.add(lambda d: d == data[:1024], corrupt(500, data[500] ^ 0x40))
            assert client.load(data) == LoadResult(16000, "binary", 2, "crc")
            faulty.add(lambda d: d == data[:1024], drop(100, 1))
            assert client.load(data) == LoadResult(16000, "binary", 2, "crc")
            assert client.stats.retries == 2
            assert client.read_buffer() == data
        finally:
            client.close()
