"""The LPM01A codec: table tests for every line kind, property tests on split/corrupt streams."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import ProtocolError
from protocols.lpm01a.codec import (
    BIN_HEXA_RTOL,
    FRAME_ERROR,
    FRAME_INFO,
    MAX_LINE,
    MAX_TEXT_FRAME,
    Ack,
    AcquisitionCompleted,
    AcquisitionEnd,
    BoardError,
    BoardInfo,
    EdgeEvent,
    ErrorDetail,
    ErrorReply,
    Garbled,
    Lpm01aDecoder,
    MetaFrame,
    Overcurrent,
    Samples,
    Text,
    TimeStamp,
    decode_bin_hexa,
    encode,
    encode_acquisition_end_frame,
    encode_bin_hexa,
    encode_overcurrent_frame,
    encode_text_frame,
    encode_timestamp_frame,
    format_millivolts,
    format_samples,
    freq_token,
    parse_number,
    parse_sample,
)

# -- host -> board -------------------------------------------------------------------------------


def test_encode_ends_the_line_with_cr_lf_as_every_public_host_does():
    # mlcommons/tiny serial_device.py write_line("\r\n"); zephyr SerialHandler.send_cmd.
    assert encode("volt 1800m") == b"volt 1800m\r\n"
    assert encode("htc") == b"htc\r\n"


@pytest.mark.parametrize("bad", ["htc\nstart", "htc\r", "volt 1,8 V \u00b5"])
def test_encode_refuses_line_breaks_and_non_ascii(bad):
    with pytest.raises(ProtocolError):
        encode(bad)


@pytest.mark.parametrize(
    ("volts", "text"), [(1.8, "1800m"), (3.3, "3300m"), (2.5004, "2500m"), (2.0006, "2001m")]
)
def test_format_millivolts(volts, text):
    assert format_millivolts(volts) == text


@pytest.mark.parametrize("bad", [math.nan, -1.0, math.inf])
def test_format_millivolts_refuses_nonsense(bad):
    with pytest.raises(ProtocolError):
        format_millivolts(bad)


@pytest.mark.parametrize(
    ("hz", "token"),
    [(100_000, "100k"), (50_000, "50k"), (5000, "5k"), (1000.0, "1k"), (500, "500"), (1, "1")],
)
def test_freq_token(hz, token):
    assert freq_token(hz) == token


@pytest.mark.parametrize("bad", [3000, 999.5, 0, 200_000, math.nan])
def test_freq_token_refuses_other_rates_and_lists_the_allowed_ones(bad):
    with pytest.raises(ProtocolError) as info:
        freq_token(bad)
    assert "100000" in str(info.value.hint) and "5000" in str(info.value.hint)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2m", 0.002),
        ("2-3", 0.002),
        ("100u", 100e-6),
        ("5k", 5000.0),
        ("1800m", 1.8),
        ("0", 0.0),
        ("6409-07", 6.409e-4),
        ("3+2", 300.0),
        ("1.5m", 1.5e-3),
        ("inf", math.inf),
    ],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("bad", ["", "m", "2x", "1e-3", "--3", "2 m"])
def test_parse_number_refuses_garbage(bad):
    with pytest.raises(ProtocolError):
        parse_number(bad)


@pytest.mark.parametrize(
    ("text", "value"),
    [("6409-07", 6.409e-4), ("0000+00", 0.0), ("1000+00", 1000.0), ("9999-99", 9999e-99),
     ("1234+05", 1.234e8)],
)
def test_parse_sample(text, value):
    assert parse_sample(text) == value


@pytest.mark.parametrize("bad", ["6409-7", "64090-07", "6409*07", "64a9-07", ""])
def test_parse_sample_refuses_other_shapes(bad):
    with pytest.raises(ProtocolError):
        parse_sample(bad)


def test_decode_bin_hexa_example_from_the_manual():
    amps = decode_bin_hexa(bytes([0x52, 0xA0, 0x0F, 0xFF, 0x10, 0x01]))
    np.testing.assert_allclose(amps, [0x2A0 * 16.0**-5, 4095.0, 1 / 16])
    assert amps[0] == pytest.approx(640.87e-6, abs=0.01e-6)
    with pytest.raises(ProtocolError):
        decode_bin_hexa(b"\x52")


def test_format_samples_rounds_to_four_digits():
    values = np.array([6.409e-4, 6.4094e-4, 6.40951e-4, 9.99951e-4, 1e-3, 0.0, -1.0, 1.2, 5e-12])
    text = format_samples(values)
    assert text.split(b"\r\n")[:-1] == [
        b"6409-07", b"6409-07", b"6410-07", b"1000-06", b"1000-06", b"0000+00", b"0000+00",
        b"1200-03", b"5000-15",
    ]


@given(st.lists(st.floats(min_value=1e-12, max_value=10.0), min_size=1, max_size=50))
def test_format_then_decode_is_within_the_4_digit_quantisation(values):
    decoder = Lpm01aDecoder()
    (samples,) = decoder.feed(format_samples(np.array(values)))
    np.testing.assert_allclose(samples.values, values, rtol=5.0001e-4, atol=0)


# -- board -> host table -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "event"),
    [
        (b"PowerShield > ack volt 1800m", Ack("volt", "1800m")),
        (b"PowerShield > ack htc", Ack("htc", "")),
        (b"PowerShield > ack eventsrc d7 fal", Ack("eventsrc", "d7 fal")),
        (b"PowerShield > error volt 9000m", ErrorReply("volt 9000m")),
        (b"PowerShield > Error detail: voltage out of range", ErrorDetail("voltage out of range")),
        (b"PowerShield > Acquisition completed", AcquisitionCompleted()),
        (b"PowerShield > 1.0.5-sim", Text("1.0.5-sim")),
        (b"PowerShield > PowerShield present", Text("PowerShield present")),
        (b"event 3 ris", EdgeEvent(0, 3, "ris")),
        (b"PowerShield > event 4 ris", EdgeEvent(0, 4, "ris")),
        (b"TimeStamp: 12s 345ms, buff 03%", TimeStamp(12.345, 3, 0)),
        # The three forms the MLPerf Tiny runner's ^TimeStamp:[ ><]... accepts.
        (b"TimeStamp:>001s 000ms, buff 00%", TimeStamp(1.0, 0, 0)),
        (b"TimeStamp:<012s 345ms, buff 03%", TimeStamp(12.345, 3, 0)),
        (b"TimeStamp: 002s 500ms, buff 99%", TimeStamp(2.5, 99, 0)),
        (b"PowerShield > ack volt get 3292-03", Ack("volt", "get 3292-03")),
        (b"6409-07", Samples(np.array([6.409e-4]), 0)),
        (b"6409-7", Garbled(b"6409-7")),
        (b"hello", Garbled(b"hello")),
        (b"\xff\xfe\x80", Garbled(b"\xff\xfe\x80")),
    ],
)
def test_each_line_kind(line, event):
    assert Lpm01aDecoder().feed(line + b"\r\n") == [event]


def test_ack_echoed_gives_the_whole_command():
    assert Ack("volt", "1800m").echoed == "volt 1800m"
    assert Ack("htc").echoed == "htc"


@pytest.mark.parametrize(
    ("line", "cmd", "value"),
    [
        # zephyr power_monitor_stm32l562e_dk/PowerShield.py reads parts[5] of these lines.
        (b"PowerShield > ack volt get 3292-03", "volt get", "3292-03"),
        (b"PowerShield > ack volt get 3300m", "volt get", "3300m"),
        (b"PowerShield > ack temp degc 28.0", "temp degc", "28.0"),
        (b"PowerShield > ack version 1.0.7", "version", "1.0.7"),
        (b"PowerShield > ack status ok", "status", "ok"),
        (b"PowerShield > ack version", "version", None),  # the value may come on the next line
        (b"PowerShield > ack volt 1800m", "volt get", None),  # not this command's ack
    ],
)
def test_a_query_value_is_read_from_its_ack_line(line, cmd, value):
    (ack,) = Lpm01aDecoder().feed(line + b"\r\n")
    assert ack.value(cmd) == value
    assert parse_number("3292-03") == 3.292 and parse_number("3300m") == 3.3


def test_nul_bytes_are_dropped_and_bare_newlines_accepted():
    decoder = Lpm01aDecoder()
    events = decoder.feed(b"\x00Power\x00Shield > ack htc\n\x001234-05\x00\r\n")
    assert events == [Ack("htc", ""), Samples(np.array([1.234e-2]), 0)]


def test_empty_lines_give_nothing():
    assert Lpm01aDecoder().feed(b"\r\n\n\r\n") == []


def test_sample_indices_run_on_across_feeds_and_edges_mark_the_next_sample():
    decoder = Lpm01aDecoder()
    first = decoder.feed(b"1000-06\r\n2000-06\r\nevent 1 ris\r\n3000-06\r\n")
    second = decoder.feed(b"4000-06\r\nTimeStamp: 1s 000ms, buff 00%\r\nevent 2 ris\r\n")
    third = decoder.feed(b"5000-06\r\n")
    assert first == [
        Samples(np.array([1e-3, 2e-3]), 0),
        EdgeEvent(2, 1, "ris"),
        Samples(np.array([3e-3]), 2),
    ]
    assert second == [
        Samples(np.array([4e-3]), 3),
        TimeStamp(1.0, 0, 4),
        EdgeEvent(4, 2, "ris"),
    ]
    assert third == [Samples(np.array([5e-3]), 4)]
    assert decoder.sample_count == 5
    decoder.reset_count()
    assert decoder.feed(b"6000-06\r\n") == [Samples(np.array([6e-3]), 0)]


def test_partial_lines_wait_for_their_end():
    decoder = Lpm01aDecoder()
    assert decoder.feed(b"PowerShield > ac") == []
    assert decoder.feed(b"k start\r") == []
    assert decoder.feed(b"\n12") == [Ack("start", "")]
    assert decoder.feed(b"34-07\r\n") == [Samples(np.array([1.234e-4]), 0)]


def test_an_endless_line_is_reported_once_and_memory_stays_bounded():
    decoder = Lpm01aDecoder()
    events = []
    for _ in range(10):
        events += decoder.feed(b"x" * 1000)
    events += decoder.feed(b"yyy\r\nPowerShield > ack htc\r\n")
    assert events == [Garbled(b"x" * MAX_LINE), Ack("htc", "")]
    assert len(decoder._partial) == 0


def test_bulk_decoding_matches_pythons_float_parser_exactly():
    rng = np.random.default_rng(1)
    mant = rng.integers(0, 10_000, 5000)
    exp = rng.integers(-22, 23, 5000)
    lines = [f"{m:04d}{e:+03d}" for m, e in zip(mant, exp, strict=True)]
    (samples,) = Lpm01aDecoder().feed("\r\n".join(lines).encode() + b"\r\n")
    expected = [float(f"{line[:4]}e{line[4:]}") for line in lines]
    assert samples.values.tolist() == expected


# -- property tests ------------------------------------------------------------------------------

_LINES = [
    b"PowerShield > ack volt 1800m\r\n",
    b"PowerShield > error freq 3k\r\n",
    b"PowerShield > Error detail: frequency not allowed\r\n",
    b"PowerShield > Acquisition completed\r\n",
    b"PowerShield > 1.0.5-sim\r\n",
    b"event 7 ris\r\n",
    b"TimeStamp: 3s 001ms, buff 12%\r\n",
    b"6409-07\r\n",
    b"0001+03\r\n",
    b"9999-12\n",
    b"garbage!\r\n",
    b"\r\n",
]

streams = st.lists(
    st.one_of(st.sampled_from(_LINES), st.sampled_from([b"1234-05\r\n"] * 3)), max_size=40
).map(b"".join)


def _normalise(events):
    """Merge consecutive sample blocks (a split stream may cut one block into several)."""
    out = []
    values: list[float] = []
    first = None
    for event in events:
        if isinstance(event, Samples):
            if first is None:
                first = event.first_index
            assert event.first_index == first + len(values)
            values += event.values.tolist()
        else:
            if values:
                out.append(("samples", first, tuple(values)))
                values, first = [], None
            out.append(event)
    if values:
        out.append(("samples", first, tuple(values)))
    return out


@settings(max_examples=60, deadline=None)
@given(streams)
def test_a_stream_split_at_every_boundary_decodes_the_same(stream):
    whole = _normalise(Lpm01aDecoder().feed(stream))
    for cut in range(len(stream) + 1):
        decoder = Lpm01aDecoder()
        assert _normalise(decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])) == whole


@settings(max_examples=30, deadline=None)
@given(streams)
def test_a_stream_fed_byte_by_byte_decodes_the_same(stream):
    whole = _normalise(Lpm01aDecoder().feed(stream))
    decoder = Lpm01aDecoder()
    events = []
    for i in range(len(stream)):
        events += decoder.feed(stream[i : i + 1])
    assert _normalise(events) == whole


@settings(max_examples=60, deadline=None)
@given(streams, st.integers(0, 10_000))
def test_nul_laced_stream_decodes_like_the_clean_one(stream, seed):
    rng = np.random.default_rng(seed)
    laced = bytearray()
    for byte in stream:
        laced += b"\x00" * int(rng.integers(0, 2)) + bytes([byte])
    assert _normalise(Lpm01aDecoder().feed(bytes(laced))) == _normalise(
        Lpm01aDecoder().feed(stream)
    )


_EVENT_TYPES = (
    Ack, ErrorReply, ErrorDetail, Samples, EdgeEvent, TimeStamp, AcquisitionCompleted, Text,
    Garbled, BoardError, BoardInfo, AcquisitionEnd, Overcurrent,
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_garbage_gives_only_typed_events(chunks):
    decoder = Lpm01aDecoder()
    for chunk in chunks:
        for event in decoder.feed(chunk):
            assert isinstance(event, _EVENT_TYPES)


@settings(max_examples=80, deadline=None)
@given(streams, st.data())
def test_truncated_and_corrupted_streams_give_only_typed_events(stream, data):
    cut = data.draw(st.integers(0, len(stream)))
    corrupt = bytearray(stream[:cut])
    for _ in range(data.draw(st.integers(0, 5))):
        if corrupt:
            i = data.draw(st.integers(0, len(corrupt) - 1))
            corrupt[i] = data.draw(st.integers(0, 255))
    decoder = Lpm01aDecoder()
    count = 0
    for event in decoder.feed(bytes(corrupt)) + decoder.feed(b"\r\n"):
        assert isinstance(event, _EVENT_TYPES)
        if isinstance(event, Samples):
            assert event.first_index == count
            assert np.all(np.isfinite(event.values)) and np.all(event.values >= 0)
            count += len(event)


# -- bin_hexa ------------------------------------------------------------------------------------

_ALL_TYPES = (*_EVENT_TYPES, MetaFrame)
ACK_BIN = b"PowerShield > ack format bin_hexa\r\n"
ACK_START = b"PowerShield > ack start\r\n"
ACK_STOP = b"PowerShield > ack stop\r\n"
DONE = b"PowerShield > Acquisition completed\r\n"


def words(values) -> bytes:
    return encode_bin_hexa(np.asarray(values, dtype=np.float64))


def test_encode_bin_hexa_example_from_the_manual_and_edge_values():
    assert words([640.87e-6]) == bytes([0x52, 0xA0])
    assert words([0.0, -1.0, math.nan, math.inf]) == bytes(8)
    assert words([5000.0]) == bytes([0x0F, 0xFF])  # saturates at the largest word
    # The largest exponent that keeps the mantissa <= 4095: 1/16 = 256 * 16**-3.
    assert words([4095.0, 1 / 16]) == bytes([0x0F, 0xFF, 0x31, 0x00])


@given(st.lists(st.floats(min_value=1e-14, max_value=4000.0), min_size=1, max_size=60))
def test_bin_hexa_round_trip_is_within_the_12_bit_quantisation(values):
    data = words(values)
    assert not any(data[i] >= 0xF0 for i in range(0, len(data), 2))  # never a frame start
    np.testing.assert_allclose(decode_bin_hexa(data), values, rtol=BIN_HEXA_RTOL, atol=0)


def test_frame_encoders_match_the_documented_layout():
    # zephyr power_monitor_stm32l562e_dk/PowerShield.py: F0, type, payload, FF FF.
    assert encode_timestamp_frame(12_345, 3) == bytes.fromhex("f0f300003039" "03ffff")
    assert encode_text_frame(FRAME_ERROR, "bad") == b"\xf0\xf1bad\xff\xff"
    assert encode_text_frame(FRAME_INFO, "ok") == b"\xf0\xf2ok\xff\xff"
    assert encode_acquisition_end_frame() == bytes.fromhex("f0f4ffff")
    assert encode_overcurrent_frame() == bytes.fromhex("f0f5ffff")
    with pytest.raises(ProtocolError):
        encode_text_frame(0xF3, "x")


def test_metadata_frames_decode_as_zephyrs_host_reads_them():
    """0xF1 is an error MESSAGE (not a D7 edge), 0xF2 info, 0xF3 time stamp, 0xF5 overcurrent:
    none of them becomes samples or edges."""
    stream = (
        ACK_BIN + ACK_START + words([1e-3])
        + encode_text_frame(FRAME_ERROR, "acquisition error: buffer full")
        + words([2e-3]) + encode_text_frame(FRAME_INFO, "target power on")
        + encode_timestamp_frame(1_500, 42) + encode_overcurrent_frame() + words([3e-3])
        + ACK_STOP + DONE
    )
    events = Lpm01aDecoder().feed(stream)
    assert events[2:] == [
        Samples(events[2].values, 0),
        BoardError("acquisition error: buffer full"),
        Samples(events[4].values, 1),
        BoardInfo("target power on"),
        TimeStamp(1.5, 42, 2),
        Overcurrent(b""),
        Samples(events[8].values, 2),
        Ack("stop", ""),
        AcquisitionCompleted(),
    ]
    assert not any(isinstance(e, EdgeEvent | Garbled) for e in events)
    values = np.concatenate([e.values for e in events if isinstance(e, Samples)])
    np.testing.assert_allclose(values, [1e-3, 2e-3, 3e-3], rtol=BIN_HEXA_RTOL)


def test_the_end_of_acquisition_frame_returns_to_text():
    """After F0 F4 FF FF Zephyr's host reads ASCII: a summary, then text replies and data."""
    decoder = Lpm01aDecoder()
    events = decoder.feed(
        ACK_BIN + ACK_START + words([1e-3, 2e-3]) + encode_acquisition_end_frame()
        + b"PowerShield > Acquisition completed\r\nPowerShield > ack stop\r\n"
    )
    assert [type(e) for e in events] == [Ack, Ack, Samples, AcquisitionEnd,
                                         AcquisitionCompleted, Ack]
    assert not decoder.in_binary and decoder.sample_count == 2
    # Text again: an ascii_dec value is a sample, not a pair of binary words.
    assert decoder.feed(b"1234-05\r\n") == [Samples(np.array([1.234e-2]), 2)]


def test_an_end_frame_split_from_the_text_after_it_decodes_the_same():
    stream = ACK_BIN + ACK_START + words([1e-3]) + encode_acquisition_end_frame() + b"1234-05\r\n"
    whole = _normalise(Lpm01aDecoder().feed(stream))
    assert whole[-2:] == [AcquisitionEnd(), ("samples", 1, (1.234e-2,))]
    for cut in range(len(stream) + 1):
        decoder = Lpm01aDecoder()
        assert _normalise(decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])) == whole


def test_a_text_frame_without_its_end_tag_is_garbage_not_data_forever():
    decoder = Lpm01aDecoder(bin_hexa=True)
    events = decoder.feed(ACK_START + b"\xf0\xf1" + b"x" * (MAX_TEXT_FRAME + 10))
    assert Garbled(b"\xf0\xf1") in events


def test_a_bin_hexa_acquisition_decodes_words_frames_and_replies_in_order():
    stream = (
        ACK_BIN + ACK_START
        + words([1e-3, 2e-3]) + encode_text_frame(FRAME_INFO, "i") + words([3e-3])
        + encode_timestamp_frame(1_002, 7) + bytes.fromhex("f0990102ffff") + words([4e-3])
        + ACK_STOP + words([5e-3]) + DONE + b"1234-05\r\n"
    )
    decoder = Lpm01aDecoder()
    events = decoder.feed(stream)
    assert [type(e) for e in events] == [
        Ack, Ack, Samples, BoardInfo, Samples, TimeStamp, MetaFrame, Samples, Ack, Samples,
        AcquisitionCompleted, Samples,
    ]
    samples = [e for e in events if isinstance(e, Samples)]
    assert [s.first_index for s in samples] == [0, 2, 3, 4, 5]
    np.testing.assert_allclose(
        np.concatenate([s.values for s in samples[:4]]), [1e-3, 2e-3, 3e-3, 4e-3, 5e-3],
        rtol=BIN_HEXA_RTOL,
    )
    assert samples[4].values.tolist() == [1.234e-2]  # text again after the completion
    assert events[3] == BoardInfo("i")
    assert events[5] == TimeStamp(1.002, 7, 3)
    assert events[6] == MetaFrame(0x99, b"\x01\x02")
    assert events[8] == Ack("stop", "")
    assert decoder.bin_hexa and not decoder.in_binary


def test_ascii_dec_stays_text_and_format_acks_are_followed():
    decoder = Lpm01aDecoder(bin_hexa=True)
    events = decoder.feed(b"PowerShield > ack format ascii_dec\r\n" + ACK_START + b"1000-06\r\n")
    assert events[-1] == Samples(np.array([1e-3]), 0) and not decoder.bin_hexa
    decoder.set_format("bin_hexa")
    assert decoder.bin_hexa
    with pytest.raises(ProtocolError):
        decoder.set_format("hex")


def test_zero_words_are_data_in_binary_and_nuls_inside_a_reply_are_tolerated():
    decoder = Lpm01aDecoder(bin_hexa=True)
    events = decoder.feed(ACK_START + bytes(4) + b"Power\x00Shield > ack\x00 stop\r\n")
    assert events == [Ack("start", ""), Samples(np.zeros(2), 0), Ack("stop", "")]


def test_a_reply_split_inside_its_prompt_is_not_taken_for_data():
    decoder = Lpm01aDecoder(bin_hexa=True)
    events = decoder.feed(ACK_START + words([1e-3]) + b"Power")
    events += decoder.feed(b"Shield > Acquisition completed\r\n")
    assert [type(e) for e in events] == [Ack, Samples, AcquisitionCompleted]
    assert decoder.sample_count == 1


def test_junk_in_front_of_a_prompt_in_text_mode_is_dropped():
    assert Lpm01aDecoder().feed(b"\x52\xa0\x13PowerShield > ack htc\r\n") == [Ack("htc", "")]


def test_an_odd_byte_before_a_reply_and_a_bad_frame_are_garbled_and_skipped():
    decoder = Lpm01aDecoder(bin_hexa=True)
    events = decoder.feed(
        ACK_START + words([1e-3]) + b"\x12" + ACK_STOP  # a byte of a lost word
        + bytes.fromhex("f0f3aabbccddeeff01") + words([2e-3])  # a time stamp with a bad end
        + encode_timestamp_frame(9, 1)
        + b"\xf7\x01"  # nibble F but not a frame start
        + words([3e-3]) + DONE
    )
    kinds = [type(e).__name__ for e in events]
    assert kinds[:4] == ["Ack", "Samples", "Garbled", "Ack"]
    assert kinds[4] == "Garbled" and events[4].raw == bytes.fromhex("f0f3aabbccddeeff01")
    assert TimeStamp(0.009, 1, 2) in events  # the bad frame skipped by its known length only
    assert Garbled(b"\xf7") in events
    assert isinstance(events[-1], AcquisitionCompleted)
    assert all(isinstance(e, _ALL_TYPES) for e in events)


def test_a_lost_byte_realigns_by_the_next_frames():
    stream = ACK_START + words(np.full(10, 1e-3))
    stream = stream[:-5] + stream[-4:]  # one byte lost in the middle of the data
    stream += encode_timestamp_frame(1000, 0) + words([2e-3]) + encode_timestamp_frame(2000, 5)
    stream += words([3e-3, 3e-3]) + DONE
    events = Lpm01aDecoder(bin_hexa=True).feed(stream)
    assert any(isinstance(e, Garbled) for e in events)
    stamp = [e for e in events if isinstance(e, TimeStamp)][-1]
    assert stamp.seconds == 2.0
    after = [e for e in events if isinstance(e, Samples) and e.first_index >= stamp.sample_index]
    np.testing.assert_allclose(after[0].values, [3e-3, 3e-3], rtol=BIN_HEXA_RTOL)


def _bin_segment():
    rng_values = st.lists(st.floats(min_value=1e-9, max_value=1.0), min_size=1, max_size=8)
    return st.one_of(
        rng_values.map(words),
        st.sampled_from([FRAME_ERROR, FRAME_INFO]).flatmap(
            lambda kind: st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20)
            .map(lambda text: encode_text_frame(kind, text))),
        st.binary(max_size=4).map(encode_overcurrent_frame),
        st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 100)).map(
            lambda t: encode_timestamp_frame(*t)
        ),
        st.binary(max_size=6).filter(lambda b: b"\xff\xff" not in b and not b.endswith(b"\xff"))
        .map(lambda b: b"\xf0\x42" + b + b"\xff\xff"),
        st.just(b"PowerShield > error volt 9\r\n"),
        st.just(b"Power\x00Shield > ack stop\r\n"),
    )


bin_streams = st.lists(_bin_segment(), max_size=25).map(
    lambda parts: ACK_BIN + ACK_START + b"".join(parts) + DONE + b"1000-06\r\n"
)


@settings(max_examples=25, deadline=None)
@given(bin_streams)
def test_a_bin_hexa_stream_split_at_every_boundary_decodes_the_same(stream):
    whole = _normalise(Lpm01aDecoder().feed(stream))
    assert not any(isinstance(e, Garbled) for e in whole)
    assert isinstance(whole[-2], AcquisitionCompleted)
    for cut in range(len(stream) + 1):
        decoder = Lpm01aDecoder()
        assert _normalise(decoder.feed(stream[:cut]) + decoder.feed(stream[cut:])) == whole


@settings(max_examples=12, deadline=None)
@given(bin_streams)
def test_a_bin_hexa_stream_fed_byte_by_byte_decodes_the_same(stream):
    whole = _normalise(Lpm01aDecoder().feed(stream))
    decoder = Lpm01aDecoder()
    events = []
    for i in range(len(stream)):
        events += decoder.feed(stream[i : i + 1])
    assert _normalise(events) == whole


@settings(max_examples=80, deadline=None)
@given(bin_streams, st.data())
def test_truncated_and_corrupted_bin_hexa_streams_give_only_typed_events(stream, data):
    cut = data.draw(st.integers(0, len(stream)))
    corrupt = bytearray(stream[:cut])
    for _ in range(data.draw(st.integers(0, 5))):
        if corrupt:
            i = data.draw(st.integers(0, len(corrupt) - 1))
            corrupt[i] = data.draw(st.integers(0, 255))
    decoder = Lpm01aDecoder()
    count = 0
    for event in decoder.feed(bytes(corrupt)) + decoder.feed(b"\r\n"):
        assert isinstance(event, _ALL_TYPES)
        if isinstance(event, Samples):
            assert event.first_index == count
            assert np.all(np.isfinite(event.values)) and np.all(event.values >= 0)
            count += len(event)
    assert len(decoder._partial) <= MAX_LINE + MAX_LINE  # bounded whatever came


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_binary_garbage_gives_only_typed_events_and_bounded_memory(chunks):
    decoder = Lpm01aDecoder(bin_hexa=True)
    decoder.feed(ACK_START)
    for chunk in chunks:
        for event in decoder.feed(chunk):
            assert isinstance(event, _ALL_TYPES)
        assert len(decoder._partial) <= MAX_LINE + 2


def test_bulk_bin_hexa_decoding_is_exact_against_the_formula():
    rng = np.random.default_rng(2)
    w = rng.integers(0, 0xF000, 20_000).astype(">u2")
    decoder = Lpm01aDecoder(bin_hexa=True)
    events = decoder.feed(ACK_START + w.tobytes() + DONE)
    values = np.concatenate([e.values for e in events if isinstance(e, Samples)])
    expected = [(int(x) & 0xFFF) * 16.0 ** -(int(x) >> 12) for x in w[:200]]
    assert values[:200].tolist() == expected and len(values) == 20_000
