"""Download efficiency of a 16 kB input: legacy hex (``db``) against binary (``bload``).

Over a real pty to the simulated DUT (virtual_bench.dut.SimDut), the client downloads the same input
three ways, each verified as the rig always does: hex checked by a ``db print`` read-back (plain
firmware), hex checked by ``db crc`` (a DUT offering dbcrc, behind an IO manager), binary by its
CRC-32.
A transport wrapper counts the bytes on the wire in each direction. Prints
`wire_efficiency_hex` and `wire_efficiency_binary` (payload bytes / host->DUT bytes; goal for
binary >= 0.95, the MLPerf Tiny hex path is about 0.47), the reply bytes, the efficiency over
both directions, the download time over the pty (best of a few) and the time the same bytes
take on a 115200-baud UART (10 bits per byte).
"""

from __future__ import annotations

import time

import numpy as np

from drivers.dut.client import DutClient
from drivers.transport import SerialTransport
from virtual_bench.dut import SimDut
from virtual_bench.world import World

N_BYTES = 16_000
UART_BAUD = 115_200
REPEATS = 3


class CountingTransport:
    """A SerialTransport that counts the bytes written and read."""

    def __init__(self, inner: SerialTransport) -> None:
        self.inner = inner
        self.baudrate = inner.baudrate
        self.sent = 0
        self.received = 0

    def write(self, data: bytes) -> None:
        self.sent += len(data)
        self.inner.write(data)

    def read(self) -> bytes:
        data = self.inner.read()
        self.received += len(data)
        return data

    def reset_input(self) -> None:
        self.inner.reset_input()

    def close(self) -> None:
        self.inner.close()


class ChecksumModel:
    """A stand-in network: any input size, two scores."""

    input_size = N_BYTES
    model_id = "asc01"

    def __call__(self, data: bytes) -> np.ndarray:
        x = np.frombuffer(data, dtype=np.uint8)
        return np.array([x.mean() / 255.0, x[0] / 255.0])


def measure(extensions: bool, data: bytes, *, hex_crc: bool = False
            ) -> tuple[str, int, int, float]:
    """Method, host->DUT bytes, DUT->host bytes of one download, and its best time [s];
    `hex_crc`: the hex path with ``db crc`` (as through an IO manager, which carries no
    binary)."""
    world = World(speed=1000.0)
    with SimDut(world, ChecksumModel(), extensions=extensions) as dut:
        counter = CountingTransport(SerialTransport(dut.path, UART_BAUD, name="DUT"))
        with DutClient(counter) as client:
            world.power(True)
            client.wait_for_boot(5.0)
            client.negotiate()
            if hex_crc:
                client.capabilities = (client.capabilities or frozenset()) - {"bload"}
            best = float("inf")
            for _ in range(REPEATS):
                counter.sent = counter.received = 0
                t0 = time.perf_counter()
                result = client.load(data)
                best = min(best, time.perf_counter() - t0)
            assert result.attempts == 1 and client.stats.retries == 0
            name = result.method + ("_crc" if result.method == "hex" and
                                    result.check == "crc" else "")
            return name, counter.sent, counter.received, best


def main() -> None:
    data = np.random.default_rng(0).integers(0, 256, N_BYTES, dtype=np.uint8).tobytes()
    print(f"payload_bytes {N_BYTES}")
    for extensions, hex_crc in ((False, False), (True, True), (True, False)):
        method, sent, received, seconds = measure(extensions, data, hex_crc=hex_crc)
        print(f"wire_efficiency_{method} {N_BYTES / sent:.4f}")
        print(f"wire_bytes_host_to_dut_{method} {sent}")
        print(f"wire_bytes_dut_to_host_{method} {received}")
        print(f"wire_efficiency_both_directions_{method} {N_BYTES / (sent + received):.4f}")
        print(f"download_s_pty_{method} {seconds:.4f}")
        # Each command waits for its reply, so the two directions' times add up.
        uart_s = (sent + received) * 10 / UART_BAUD
        print(f"download_s_uart_{UART_BAUD}_{method} {uart_s:.3f}")


if __name__ == "__main__":
    main()
