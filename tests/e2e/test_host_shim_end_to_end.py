"""The compiled C shim on the virtual bench, through the rig's own client: directly and through
the IO manager, both download paths, both timestamp modes, results equal to the reference model."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.dut.client import DutClient
from drivers.io_manager import IoManager, IoManagerTransport
from drivers.transport import SerialTransport
from firmware.dut.asc_model import LinearAscModel
from rig.datasets.synthetic import make_split
from virtual_bench.host_dut import HostShimDut, host_shim_binary
from virtual_bench.io_manager import SimIoManager
from virtual_bench.world import NS, PowerParams, World

pytestmark = pytest.mark.slow

T = 0.0125  # simulated seconds per inference


@pytest.fixture(scope="module")
def binary():
    path = host_shim_binary(build=True)
    if path is None:
        pytest.skip("no C compiler: the host shim cannot be built here")
    return path


@pytest.fixture
def audio() -> bytes:
    return make_split(1, seed=3, name="test").inputs[2].tobytes()


def booted(binary, mode: str, *, speed: float = 200.0):
    world = World(PowerParams(inference_s=T), speed=speed)
    dut = HostShimDut(world, binary, timestamp_mode=mode).start()
    client = DutClient(SerialTransport(dut.path, 115200, name="DUT"))
    world.power(True)
    assert client.wait_for_boot(10.0) == mode
    return world, dut, client


def expected_scores(data: bytes) -> np.ndarray:
    return np.round(LinearAscModel.load()(data), 3)


@pytest.mark.parametrize("mode", ["performance", "energy"])
def test_direct_binary_download_and_infer(binary, audio, mode) -> None:
    world, dut, client = booted(binary, mode)
    try:
        # Energy-mode firmware also offers `elap`: its lap counter around the window.
        assert client.negotiate() == ({"bload", "dbcrc", "rcrc", "lapcrc"}
                                     if mode == "performance"
                                     else {"bload", "dbcrc", "rcrc", "lapcrc", "elap"})
        info = client.identify()
        assert (info.model, info.vendor) == ("asc01", "neurobench-rig host shim")
        loaded = client.load(audio)
        assert (loaded.method, loaded.n_bytes, loaded.attempts) == ("binary", 16000, 1)
        assert client.read_buffer() == audio
        edges_before = len(world.falling_edges_between(0, 2**62))
        result = client.infer(40, 2)
        np.testing.assert_allclose(result.results, expected_scores(audio), atol=1.5e-3)
        if mode == "performance":
            assert result.elapsed_us == round(40 * T * 1e6)  # the DUT timer, exact
        else:
            edges = world.falling_edges_between(0, 2**62)[edges_before:]
            assert len(edges) == 2 and edges[1] - edges[0] == round(40 * T * NS)
            # Both clocks of the same window: the lap counter sits on the edges (µs).
            on = world.power_on_ns
            assert result.lap_us == tuple((t - on) // 1000 for t in edges)
        np.testing.assert_allclose(client.results(), result.results)
    finally:
        world.power(False)
        client.close()
        dut.close()


def test_legacy_hex_download_is_read_back(binary, audio) -> None:
    world, dut, client = booted(binary, "performance")
    try:
        client.capabilities = frozenset()  # drive it as plain MLPerf Tiny firmware
        loaded = client.load(audio)
        assert (loaded.method, loaded.attempts, loaded.check) == ("hex", 1, "read-back")
        assert client.infer(1, 0).results.argmax() == LinearAscModel.load().predict(audio)
    finally:
        world.power(False)
        client.close()
        dut.close()


def test_power_cycle_reboots_the_firmware(binary) -> None:
    world, dut, client = booted(binary, "energy")
    try:
        world.power(False)
        world.power(True)
        assert client.wait_for_boot(10.0) == "energy"
        assert dut.boots == 2
    finally:
        world.power(False)
        client.close()
        dut.close()


def test_through_the_io_manager_same_api(binary, audio) -> None:
    world = World(PowerParams(inference_s=T), speed=200.0)
    dut = HostShimDut(world, binary, timestamp_mode="energy").start()
    uno = SimIoManager(dut.path, world=world)
    uno.start()
    io = IoManager(SerialTransport(uno.path, 115200, name="IO manager"))
    client = DutClient(IoManagerTransport(io))
    try:
        io.handshake()
        world.power(True)
        assert client.wait_for_boot(10.0) == "energy"
        # The DUT could download binary, the path cannot:
        assert client.negotiate() == frozenset({"bload", "dbcrc", "rcrc", "lapcrc", "elap"})
        loaded = client.load(audio)
        assert loaded.method == "hex"  # so the client used hex, 26 bytes a command...
        assert loaded.check == "crc"  # ...and the DUT's db crc, which passes through
        edges_before = len(world.falling_edges_between(0, 2**62))
        result = client.infer(8, 1)
        np.testing.assert_allclose(result.results, expected_scores(audio), atol=1.5e-3)
        edges = world.falling_edges_between(0, 2**62)[edges_before:]
        assert len(edges) == 2 and edges[1] - edges[0] == round(8 * T * NS)
        assert result.elapsed_us == round(8 * T * 1e6)  # elap lines pass through it too
        # The result line's CRC-32 (rcrc) still verifies after the "[dut]: " relay.
        assert result.checked and client.stats.result_retries == 0
        np.testing.assert_array_equal(client.results(), result.results)
    finally:
        world.power(False)
        client.close()
        uno.close()
        dut.close()
