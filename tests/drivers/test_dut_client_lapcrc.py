"""DutClient and CRC-checked lap lines (rig extension ``lapcrc``, issue 39): a lap line that
fails its CRC, is missing or comes unchecked is read again with ``laps%`` (idempotent: the last
``infer``'s two lap lines), never taken; the ``infer`` is not sent again. Firmware that does not
list ``lapcrc`` is driven as before (its lap lines unchecked; a garbled one re-runs the timed
run, `GarbledReply`)."""

from __future__ import annotations

import pytest

from drivers.dut.client import ASK_AGAIN, GarbledReply
from drivers.errors import DeviceError
from protocols.dut.codec import result_line_with_crc

from .test_dut_client import BANNER_ENERGY, BANNER_PERF, booted

CAPS_PERF = (b"caps%", b"m-timestamp-mode-performance\r\nm-caps-[bload,dbcrc,rcrc,lapcrc]\r\n"
             b"m-ready\r\n")
CAPS_ENERGY = (b"caps%", b"m-timestamp-mode-energy\r\nm-caps-[bload,dbcrc,rcrc,lapcrc,elap]"
               b"\r\nm-ready\r\n")
CAPS_OLD = (b"caps%", b"m-timestamp-mode-performance\r\nm-caps-[bload,dbcrc,rcrc]\r\nm-ready\r\n")
RESULT = result_line_with_crc("m-results-[0.012,0.980,0.008]").encode()


def lap(us: int) -> bytes:
    return result_line_with_crc(f"m-lap-us-{us}").encode() + b"\r\n"


#: The lap line at the window's start, its digit hit on the line: +400 us (issue 39).
HIT = lap(100).replace(b"m-lap-us-100", b"m-lap-us-500")
LAPS = (b"laps%", lap(100) + lap(12600) + b"m-ready\r\n")


def reply(first: bytes = lap(100), second: bytes = lap(12600), *, head: bytes = b"") -> bytes:
    head = head or b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-1\r\n"
    return head + first + second + b"m-infer-done\r\n" + RESULT + b"\r\nm-ready\r\n"


@pytest.mark.parametrize("first", [
    HIT,  # a digit changed: the CRC tells
    b"m-lap-us-1\xb00-crc-00000000\r\n",  # unreadable
    b"m-lap-us-100\r\n",  # without its CRC (the DUT forgot caps: a reboot unseen)
])
def test_a_lap_line_that_is_not_whole_is_read_again_with_laps(first: bytes) -> None:
    client, transport = booted([CAPS_PERF, (b"infer 1 0%", reply(first)), LAPS],
                               banner=BANNER_PERF)
    said: list[str] = []
    client.on_retry = said.append
    assert client.negotiate() >= {"lapcrc", "rcrc"}
    result = client.infer(1)
    assert result.lap_us == (100, 12600) and result.elapsed_us == 12_500
    assert client.stats.asked_again == {"laps": 1}
    assert len(said) == 1 and "'laps'" in said[0]
    assert transport.done()  # infer sent once


def test_an_energy_mode_dut_s_elap_lines_are_checked_alike() -> None:
    client, transport = booted([CAPS_ENERGY, (b"infer 1 0%", reply(second=lap(12200)
                                .replace(b"12200", b"12210"))), LAPS], banner=BANNER_ENERGY)
    client.negotiate()
    assert client.infer(1).elapsed_us == 12_500
    assert transport.done()


def test_laps_garbled_every_time_is_a_typed_error_and_infer_is_not_sent_again() -> None:
    client, transport = booted([
        CAPS_PERF, (b"infer 1 0%", reply(HIT)),
        *[(b"laps%", HIT + lap(12600) + b"m-ready\r\n")] * (ASK_AGAIN + 1),
    ], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(GarbledReply, match=rf"'laps' came back garbled {ASK_AGAIN + 1} times"):
        client.infer(1)
    assert transport.done()


def test_a_garbled_echo_is_taken_when_every_measured_line_carries_its_crc() -> None:
    # m-warmup-start and m-infer-done say nothing measured; the laps and the result carry their
    # CRC. m-infer-start says how many inferences the laps time: not taken garbled.
    head = b"m-warmup-stXrt-0\r\nm-warmup-done\r\nm-infer-start-1\r\n"
    client, transport = booted([CAPS_PERF, (b"infer 1 0%", reply(head=head))],
                               banner=BANNER_PERF)
    said: list[str] = []
    client.on_retry = said.append
    client.negotiate()
    assert client.infer(1).elapsed_us == 12_500
    assert client.stats.lines_unread == 1 and len(said) == 1
    assert "m-warmup-start" in said[0] and "taken" in said[0]
    assert transport.done()
    head = b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-stXrt-1\r\n"
    client, _ = booted([CAPS_PERF, (b"infer 1 0%", reply(head=head))], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(GarbledReply, match="m-infer-start"):
        client.infer(1)


def test_firmware_without_lapcrc_is_driven_as_before() -> None:
    plain = reply(b"m-lap-us-100\r\n", b"m-lap-us-12600\r\n")
    client, transport = booted([CAPS_OLD, (b"infer 1 0%", plain)], banner=BANNER_PERF)
    client.negotiate()
    assert client.infer(1).elapsed_us == 12_500  # unchecked, as before
    assert transport.done()
    garbled = reply(b"m-lap-us-1\xb00\r\n", b"m-lap-us-12600\r\n")
    client, transport = booted([CAPS_OLD, (b"infer 1 0%", garbled)], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(GarbledReply, match="m-lap-us"):
        client.infer(1)  # no way to read them again: the caller re-runs
    assert transport.done()


def test_a_timestamp_lap_line_is_checked_and_asked_again() -> None:
    client, transport = booted([
        CAPS_PERF,
        (b"timestamp%", HIT + b"m-ready\r\n"),
        (b"timestamp%", lap(777) + b"m-ready\r\n"),
    ], banner=BANNER_PERF)
    client.negotiate()
    assert client.timestamp() == 777
    assert client.stats.asked_again == {"timestamp": 1}
    assert transport.done()


def test_an_intact_reply_without_laps_from_a_lapcrc_dut_is_an_error() -> None:
    no_laps = (b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-1\r\nm-infer-done\r\n"
               + RESULT + b"\r\nm-ready\r\n")
    client, _ = booted([CAPS_PERF, (b"infer 1 0%", no_laps)], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(DeviceError, match="0 m-lap-us lines"):
        client.infer(1)
