"""Lap lines with a CRC-32 (rig extension ``lapcrc``, issue 39): one digit of an ``m-lap-us``
line changed on the line (+400 us in one sample's lap) passed every check. With ``lapcrc`` the
DUT ends each lap line, once ``caps`` was asked, with ``-crc-<8 hex>`` like a result line, and
``laps%`` prints the last ``infer``'s two lap lines again. Every single-bit error of a checked
lap line is decoded: none gives a lap counter value other than the one sent."""

from __future__ import annotations

import zlib

import pytest

from protocols.dut.codec import (
    CAP_LAP_CRC,
    CAPABILITY_WORDS,
    DutDecoder,
    LapUs,
    ResultCrcMismatch,
    cmd_laps,
    encode_command,
    parse_line,
    result_line_with_crc,
)

LAP = "m-lap-us-4294954796"


def test_a_lap_line_with_its_crc_is_a_checked_lap() -> None:
    line = result_line_with_crc(LAP)
    assert line == f"{LAP}-crc-{zlib.crc32(LAP.encode()):08x}"
    assert parse_line(line) == LapUs(4294954796, checked=True)
    assert parse_line(LAP) == LapUs(4294954796, checked=False)  # plain firmware: unchecked
    assert CAP_LAP_CRC == "lapcrc" and CAP_LAP_CRC in CAPABILITY_WORDS
    assert encode_command(cmd_laps()) == b"laps%"


def test_the_digit_that_passed_every_check_is_a_mismatch_now() -> None:
    sent = result_line_with_crc("m-lap-us-12100")
    garbled = sent.replace("m-lap-us-12100", "m-lap-us-12500")  # '1' -> '5': +400 us
    event = parse_line(garbled)
    assert isinstance(event, ResultCrcMismatch) and event.line == "m-lap-us-12500"


@pytest.mark.parametrize("bit", range(8))
def test_no_single_bit_error_of_a_checked_lap_line_is_a_wrong_lap(bit: int) -> None:
    sent = (result_line_with_crc(LAP) + "\r\n").encode()
    for i in range(len(sent)):
        garbled = bytearray(sent)
        garbled[i] ^= 1 << bit
        events = DutDecoder().feed(bytes(garbled) + b"\r\n")
        laps = [e for e in events if isinstance(e, LapUs)]
        assert all(e.us == 4294954796 or not e.checked for e in laps), (i, bit, events)
        assert all(e.us == 4294954796 for e in laps if e.checked)
