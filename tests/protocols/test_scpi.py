"""SCPI codec: binary blocks (whole, split at every boundary, truncated, corrupt), error replies,
headers, channel lists."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import ProtocolError
from protocols.scpi import (
    BlockDecoder,
    ScpiError,
    channel_list,
    decode_block,
    decode_reals,
    encode_block,
    encode_reals,
    format_error,
    header_matches,
    parse_channel_list,
    parse_command,
    parse_error,
    real_dtype,
)


def test_encode_block_exact_bytes() -> None:
    assert encode_block(b"") == b"#10"
    assert encode_block(b"abc") == b"#13abc"
    assert encode_block(bytes(1234)) == b"#41234" + bytes(1234)


def test_decode_block_returns_payload_and_rest() -> None:
    assert decode_block(b"#15hello\n") == (b"hello", b"\n")
    assert decode_block(b"#0free text\n") == (b"free text", b"\n")


@given(st.binary(max_size=300), st.data())
def test_block_split_at_any_boundaries(payload: bytes, data: st.DataObject) -> None:
    wire = encode_block(payload) + b"\n"
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=6)))
    decoder = BlockDecoder()
    pieces = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    for piece in pieces:
        decoder.feed(piece)
    assert decoder.done
    assert decoder.payload == payload
    assert decoder.rest == b"\n"


@given(st.binary(max_size=200))
def test_asking_for_needed_bytes_reads_exactly_the_block(payload: bytes) -> None:
    wire = encode_block(payload) + b"\nNEXT"
    decoder = BlockDecoder()
    pos = 0
    while not decoder.done:
        n = decoder.needed
        assert n > 0
        decoder.feed(wire[pos : pos + n])
        pos += n
    assert decoder.payload == payload
    assert wire[pos:] == b"\nNEXT"  # never read past the block


@pytest.mark.parametrize("wire", [b"#", b"#2", b"#21", b"#15abc"])
def test_truncated_block_is_refused(wire: bytes) -> None:
    with pytest.raises(ProtocolError, match="truncated"):
        decode_block(wire)


@pytest.mark.parametrize("wire", [b"x15hello", b"#x5hello", b"#2a5hello"])
def test_corrupt_block_header_is_refused(wire: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_block(wire)


def test_block_over_the_size_limit_is_refused() -> None:
    with pytest.raises(ProtocolError, match="limit"):
        BlockDecoder(max_bytes=10).feed(b"#211")


def test_payload_before_done_is_an_error() -> None:
    decoder = BlockDecoder()
    decoder.feed(b"#13a")
    assert decoder.needed == 2
    with pytest.raises(ProtocolError):
        _ = decoder.payload


@pytest.mark.parametrize("bits,big", [(32, True), (64, True), (32, False), (64, False)])
def test_reals_round_trip_in_both_byte_orders(bits: int, big: bool) -> None:
    values = np.array([0.25, -2.25, 0.0, 1e6])  # exact in float32 too
    dtype = real_dtype(bits, big_endian=big)
    payload, _ = decode_block(encode_reals(values, dtype))
    assert len(payload) == 4 * bits // 8
    np.testing.assert_array_equal(decode_reals(payload, dtype), values)


def test_big_endian_float32_bytes_are_exact() -> None:
    # 1.0 as IEEE-754 single, big-endian = 3F 80 00 00
    assert encode_reals(np.array([1.0]), real_dtype(32)) == b"#14\x3f\x80\x00\x00"


def test_partial_values_are_refused() -> None:
    with pytest.raises(ProtocolError, match="whole number"):
        decode_reals(b"\x00" * 6, real_dtype(32))
    with pytest.raises(ProtocolError):
        real_dtype(16)


def test_parse_error_replies() -> None:
    assert parse_error('-113,"Undefined header"') == ScpiError(-113, "Undefined header")
    assert parse_error('+0,"No error"').is_error is False
    assert parse_error('-222,"Data out of range;VOLT"').text == "Data out of range;VOLT"
    assert parse_error('-100,"say ""hi"""').text == 'say "hi"'
    assert str(ScpiError(-113, "Undefined header")) == '-113,"Undefined header"'
    with pytest.raises(ProtocolError):
        parse_error("garbage")


def test_format_error_round_trips() -> None:
    assert format_error(0, "") == '+0,"No error"'
    assert parse_error(format_error(-224, "Illegal parameter value")).code == -224


def test_parse_command_keeps_channel_lists_whole() -> None:
    cmd = parse_command("SENS:CURR:RANG 0.1,(@1,2)")
    assert (cmd.header, cmd.query, cmd.args) == ("SENS:CURR:RANG", False, ("0.1", "(@1,2)"))
    cmd = parse_command("FETC:ARR:CURR? (@1)")
    assert (cmd.header, cmd.query, cmd.args) == ("FETC:ARR:CURR", True, ("(@1)",))
    assert parse_command("*IDN?").args == ()
    assert parse_command('DISP:TEXT "a,b"').args == ('"a,b"',)


@pytest.mark.parametrize("header,pattern,ok", [
    ("SENS:SWE:TINT", "[SENSe]:SWEep:TINTerval", True),
    ("sense:sweep:tinterval", "[SENSe]:SWEep:TINTerval", True),
    ("SWE:TINT", "[SENSe]:SWEep:TINTerval", True),
    ("SWE:TIN", "[SENSe]:SWEep:TINTerval", False),
    ("SYST:ERR", "SYSTem:ERRor[:NEXT]", True),
    ("SYST:ERR:NEXT", "SYSTem:ERRor[:NEXT]", True),
    ("INIT:ACQ", "INITiate[:IMMediate]:ACQuire", True),
    ("INIT", "INITiate[:IMMediate]:ACQuire", False),
    ("VOLT", "[SOURce]:VOLTage[:LEVel][:IMMediate][:AMPLitude]", True),
])
def test_header_matches(header: str, pattern: str, ok: bool) -> None:
    assert header_matches(header, pattern) is ok


def test_channel_lists() -> None:
    assert channel_list(1) == "(@1)"
    assert channel_list([1, 3]) == "(@1,3)"
    assert parse_channel_list("(@1,3:4)") == [1, 3, 4]
    with pytest.raises(ProtocolError):
        parse_channel_list("1")
