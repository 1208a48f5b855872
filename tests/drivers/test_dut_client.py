"""DutClient conversations against a scripted transport: exact bytes out, canned replies in."""

from __future__ import annotations

import time

import numpy as np
import pytest

from drivers.dut.client import DutClient, DutInfo
from drivers.errors import DeviceError, DeviceTimeout, DutError
from protocols.errors import ProtocolError

BANNER_ENERGY = b"m-timestamp-mode-energy\r\nm-init-done\r\nm-ready\r\n"
BANNER_PERF = b"m-timestamp-mode-performance\r\nm-init-done\r\nm-ready\r\n"


class ScriptedTransport:
    """Plays a conversation: each write must equal the next expected one; its reply is queued.

    Replies are handed out a few bytes at a time so that the client must reassemble lines.
    """

    def __init__(self, script: list[tuple[bytes, bytes]], *, initial: bytes = b"") -> None:
        self.script = list(script)
        self.written: list[bytes] = []
        self.inbox = bytearray(initial)
        self.closed = False
        self.resets = 0

    def write(self, data: bytes) -> None:
        assert self.script, f"unexpected write {data!r}"
        expected, reply = self.script.pop(0)
        assert data == expected
        self.written.append(data)
        self.inbox += reply

    def read(self) -> bytes:
        if not self.inbox:
            time.sleep(0.001)  # like a port with nothing to say: a short wait, then nothing
            return b""
        out = bytes(self.inbox[:7])
        del self.inbox[:7]
        return out

    def reset_input(self) -> None:
        self.resets += 1
        self.inbox.clear()

    def close(self) -> None:
        self.closed = True

    def done(self) -> bool:
        return not self.script


def booted(script: list[tuple[bytes, bytes]], banner: bytes = BANNER_ENERGY):
    transport = ScriptedTransport(script, initial=banner)
    client = DutClient(transport)
    client.wait_for_boot(timeout_s=1.0)
    return client, transport


def test_boot_banner_gives_the_mode() -> None:
    transport = ScriptedTransport([], initial=b"\x00garbage\r\n" + BANNER_PERF)
    client = DutClient(transport)
    assert client.timestamp_mode is None
    assert client.wait_for_boot(timeout_s=1.0) == "performance"
    assert client.timestamp_mode == "performance"
    client.require_mode("performance")
    with pytest.raises(DeviceError, match=r"performance timestamp mode.*needs energy") as exc:
        client.require_mode("energy")
    assert "rebuild the firmware for energy" in exc.value.hint


def test_ready_without_banner_is_not_a_boot() -> None:
    client = DutClient(ScriptedTransport([], initial=b"m-ready\r\n"))
    with pytest.raises(DeviceTimeout, match=r"never said m-ready within 0.05 s") as exc:
        client.wait_for_boot(timeout_s=0.05)
    assert "baud rate" in exc.value.hint


def test_require_mode_before_banner() -> None:
    with pytest.raises(DeviceError, match="timestamp mode unknown"):
        DutClient(ScriptedTransport([])).require_mode("energy")


def test_identify() -> None:
    client, transport = booted(
        [
            (b"name%", b"m-name-dut-[Acme Corp]\r\nm-ready\r\n"),
            (
                b"profile%",
                b"m-profile-[ULPMark for tinyML Firmware V0.0.1]\r\nm-model-[kws01]\r\nm-ready\r\n",
            ),
        ]
    )
    info = client.identify()
    assert info == DutInfo("dut", "Acme Corp", "ULPMark for tinyML Firmware V0.0.1", "kws01")
    assert client.info == info
    assert transport.done()


def test_e_line_raises_dut_error_and_stream_stays_in_sync() -> None:
    client, transport = booted(
        [
            (b"bogus%", b"e-[Unknown command: bogus]\r\nm-ready\r\n"),
            (b"name%", b"m-name-dut-[x]\r\nm-ready\r\n"),
        ]
    )
    with pytest.raises(DutError, match=r"DUT refused 'bogus': Unknown command: bogus") as exc:
        client.command("bogus")
    assert exc.value.command == "bogus"
    events = client.command("name")
    assert [type(e).__name__ for e in events] == ["Name", "Ready"]
    assert transport.done()


def test_silent_dut_times_out_naming_the_command() -> None:
    client, transport = booted([(b"name%", b"")])
    with pytest.raises(DeviceTimeout, match=r"did not finish 'name' within 0.05 s"):
        client.command("name", timeout_s=0.05)
    assert transport.written == [b"name%"]


def test_after_a_timeout_late_replies_are_dropped() -> None:
    client, transport = booted(
        [
            (b"results%", b"m-results-"),  # half a reply, the rest arrives too late
            (b"name%", b"m-name-dut-[x]\r\nm-ready\r\n"),
        ]
    )
    with pytest.raises(DeviceTimeout):
        client.command("results", timeout_s=0.05)
    transport.inbox += b"[0.5]\r\nm-ready\r\n"  # the late rest of the abandoned reply
    events = client.command("name")
    assert transport.resets == 1
    assert [type(e).__name__ for e in events] == ["Name", "Ready"]


def test_restart_during_a_command_is_reported() -> None:
    client, _ = booted([(b"results%", BANNER_PERF)])
    with pytest.raises(DeviceError, match="restarted while running 'results'"):
        client.command("results")
    assert client.timestamp_mode == "performance"


def test_load_sends_hex_chunks_and_requires_load_done() -> None:
    data = bytes(range(40))
    client, transport = booted(
        [
            (b"db load 40%", b"m-[Expecting 40 bytes]\r\nm-ready\r\n"),
            (b"db " + data[:31].hex().encode() + b"%", b"m-ready\r\n"),
            (b"db " + data[31:].hex().encode() + b"%", b"m-load-done\r\nm-ready\r\n"),
        ]
    )
    client.load(data)
    assert transport.done()


def test_load_without_load_done_is_incomplete() -> None:
    data = bytes(10)
    client, _ = booted(
        [
            (b"db load 10%", b"m-[Expecting 10 bytes]\r\nm-ready\r\n"),
            (b"db 00000000000000000000%", b"m-ready\r\n"),
        ]
    )
    with pytest.raises(DeviceError, match="download incomplete: sent 10 bytes in 1 db commands"):
        client.load(data)


def test_load_checks_the_announced_count() -> None:
    client, _ = booted([(b"db load 10%", b"m-[Expecting 8 bytes]\r\nm-ready\r\n")])
    with pytest.raises(DeviceError, match="expects 8 bytes"):
        client.load(bytes(10))


def test_load_refused_chunk_raises() -> None:
    client, _ = booted(
        [
            (b"db load 2%", b"m-[Expecting 2 bytes]\r\nm-ready\r\n"),
            (b"db 0102%", b"e-[Invalid hex digit '01']\r\nm-ready\r\n"),
        ]
    )
    with pytest.raises(DutError, match="Invalid hex digit"):
        client.load(b"\x01\x02")


def test_load_done_too_early_is_an_error() -> None:
    client, _ = booted(
        [
            (b"db load 4%", b"m-[Expecting 4 bytes]\r\nm-ready\r\n"),
            (b"db 0102%", b"m-load-done\r\nm-ready\r\n"),
        ]
    )
    with pytest.raises(DeviceError, match="m-load-done after 1 of 2"):
        client.load(b"\x01\x02\x03\x04", per_command=2)


def test_read_buffer_joins_dump_lines() -> None:
    client, _ = booted(
        [(b"db print%", b"m-buffer-00-01\r\nm-buffer-02\r\nm-ready\r\n")],
    )
    assert client.read_buffer() == b"\x00\x01\x02"


INFER_PERF = (
    b"m-warmup-start-2\r\nm-warmup-done\r\nm-infer-start-5\r\nm-lap-us-4294967000\r\n"
    b"m-lap-us-704\r\nm-infer-done\r\nm-results-[0.012,0.980,0.008]\r\nm-ready\r\n"
)


def test_infer_performance_mode_lap_counter_wraps() -> None:
    client, transport = booted([(b"infer 5 2%", INFER_PERF)], banner=BANNER_PERF)
    result = client.infer(5, 2)
    assert result.iterations == 5 and result.warmup == 2
    assert result.lap_us == (4294967000, 704)
    assert result.elapsed_us == 1000
    np.testing.assert_array_equal(result.results, [0.012, 0.980, 0.008])
    assert transport.done()


def test_infer_energy_mode_has_no_elapsed_time() -> None:
    reply = (
        b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-3\r\nm-infer-done\r\n"
        b"m-results-[0.5,0.5]\r\nm-ready\r\n"
    )
    client, _ = booted([(b"infer 3 0%", reply)])
    result = client.infer(3)
    assert result.elapsed_us is None and result.lap_us == ()
    np.testing.assert_array_equal(result.results, [0.5, 0.5])


def test_infer_count_mismatch_is_an_error() -> None:
    reply = INFER_PERF.replace(b"infer-start-5", b"infer-start-1")
    client, _ = booted([(b"infer 5 2%", reply)], banner=BANNER_PERF)
    with pytest.raises(DeviceError, match="started 1 inferences"):
        client.infer(5, 2)


def test_infer_missing_lap_in_performance_mode_is_an_error() -> None:
    reply = INFER_PERF.replace(b"m-lap-us-704\r\n", b"")
    client, _ = booted([(b"infer 5 2%", reply)], banner=BANNER_PERF)
    with pytest.raises(DeviceError, match="1 m-lap-us lines"):
        client.infer(5, 2)


def test_infer_refused_by_the_dut() -> None:
    client, _ = booted([(b"infer 1 0%", b"e-[Inference iterations must be >0]\r\nm-ready\r\n")])
    with pytest.raises(DutError, match="must be >0"):
        client.infer(1)


@pytest.mark.parametrize(("n", "w"), [(0, 0), (-1, 0), (1, -1)])
def test_infer_arguments_checked_before_sending(n: int, w: int) -> None:
    client, transport = booted([])
    with pytest.raises(ProtocolError):
        client.infer(n, w)
    assert transport.written == []


def test_results_and_timestamp() -> None:
    client, transport = booted(
        [
            (b"results%", b"m-results-[0.250,0.750]\r\nm-ready\r\n"),
            (b"timestamp%", b"m-lap-us-123456\r\nm-ready\r\n"),
        ],
        banner=BANNER_PERF,
    )
    np.testing.assert_array_equal(client.results(), [0.25, 0.75])
    assert client.timestamp() == 123456
    assert transport.done()


def test_timestamp_in_energy_mode_is_a_pulse() -> None:
    client, _ = booted([(b"timestamp%", b"m-ready\r\n")])
    assert client.timestamp() is None


def test_close_closes_the_transport() -> None:
    client, transport = booted([])
    client.close()
    assert transport.closed
