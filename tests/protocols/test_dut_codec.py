"""The DUT protocol codec: command bytes, reply events, and a decoder that never raises."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.dut.codec import (
    EVENT_TYPES,
    MAX_COMMAND,
    MAX_HEX_PER_COMMAND,
    MAX_LINE,
    BloadDone,
    BloadReady,
    BufferCrc,
    BufferDump,
    Capabilities,
    DutDecoder,
    DutErrorLine,
    ExpectingBytes,
    InferDone,
    InferStart,
    InitDone,
    LapUs,
    LoadDone,
    Message,
    Model,
    Name,
    Profile,
    QbestCost,
    QbestTime,
    Qimprove,
    QloadDone,
    QloadReady,
    QsolveDone,
    QsolveStart,
    QstateChunk,
    Ready,
    Results,
    TimestampMode,
    Unparsed,
    WarmupDone,
    WarmupStart,
    cmd_bload,
    cmd_caps,
    cmd_db_crc,
    cmd_db_hex,
    cmd_db_load,
    cmd_db_print,
    cmd_infer,
    cmd_name,
    cmd_profile,
    cmd_qload,
    cmd_qresult,
    cmd_qsolve,
    cmd_results,
    cmd_timestamp,
    decode_qubo,
    encode_command,
    encode_qubo,
    hex_chunks,
    payload_crc,
    qubo_cost,
)
from protocols.errors import ProtocolError

# -- commands ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        (cmd_name(), b"name%"),
        (cmd_profile(), b"profile%"),
        (cmd_db_load(490), b"db load 490%"),
        (cmd_db_hex(bytes([0x00, 0xAB, 0x7F, 0xFF])), b"db 00ab7fff%"),
        (cmd_db_print(), b"db print%"),
        (cmd_db_crc(), b"db crc%"),
        (cmd_infer(100, 10), b"infer 100 10%"),
        (cmd_infer(1, 0), b"infer 1 0%"),
        (cmd_results(), b"results%"),
        (cmd_timestamp(), b"timestamp%"),
        (cmd_caps(), b"caps%"),
        (cmd_bload(16000, 0x0A1B2C3D), b"bload 16000 0a1b2c3d%"),
        (cmd_bload(1, 0), b"bload 1 00000000%"),
        (cmd_qload(44, 0xFFFFFFFF), b"qload 44 ffffffff%"),
        (cmd_qsolve(1_000_000, 7), b"qsolve 1000000 7%"),
        (cmd_qresult(), b"qresult%"),
    ],
)
def test_command_bytes(text: str, wire: bytes) -> None:
    assert encode_command(text) == wire


def test_80_character_limit_counts_the_percent() -> None:
    assert len(encode_command("x" * (MAX_COMMAND - 1))) == MAX_COMMAND
    with pytest.raises(ProtocolError, match="80-character"):
        encode_command("x" * MAX_COMMAND)


@pytest.mark.parametrize("bad", ["", "name%", "name\r", "na\nme", "nämé"])
def test_malformed_commands_are_refused(bad: str) -> None:
    with pytest.raises(ProtocolError):
        encode_command(bad)


def test_largest_db_command_fits_and_one_more_byte_does_not() -> None:
    assert MAX_HEX_PER_COMMAND == 38
    assert len(encode_command(cmd_db_hex(bytes(38)))) == MAX_COMMAND
    with pytest.raises(ProtocolError, match="do not fit"):
        cmd_db_hex(bytes(39))


def test_hex_chunks_split_31_bytes_per_command() -> None:
    data = bytes(range(70))
    chunks = hex_chunks(data)
    assert chunks == ["db " + data[0:31].hex(), "db " + data[31:62].hex(), "db " + data[62:].hex()]
    assert hex_chunks(data, per_command=26)[0] == "db " + data[:26].hex()
    assert hex_chunks(b"") == []


@pytest.mark.parametrize("per_command", [0, 39, -1])
def test_hex_chunks_refuse_sizes_that_cannot_be_sent(per_command: int) -> None:
    with pytest.raises(ProtocolError):
        hex_chunks(b"abc", per_command)


@pytest.mark.parametrize(("n", "warmup"), [(0, 0), (-1, 5), (1, -1), (True, 0)])
def test_infer_arguments_are_checked(n: int, warmup: int) -> None:
    with pytest.raises(ProtocolError):
        cmd_infer(n, warmup)


@pytest.mark.parametrize("n", [0, -3])
def test_db_load_needs_a_positive_count(n: int) -> None:
    with pytest.raises(ProtocolError):
        cmd_db_load(n)


@pytest.mark.parametrize(
    "build",
    [
        lambda: cmd_bload(0, 1),
        lambda: cmd_bload(10, -1),
        lambda: cmd_bload(10, 2**32),
        lambda: cmd_bload(True, 1),
        lambda: cmd_qload(7, 0),  # shorter than the 8-byte header
        lambda: cmd_qsolve(0, 1),
        lambda: cmd_qsolve(10, -1),
        lambda: cmd_qsolve(10, 2**32),
    ],
)
def test_extension_arguments_are_checked(build) -> None:
    with pytest.raises(ProtocolError):
        build()


def test_payload_crc_is_zlib_crc32() -> None:
    assert payload_crc(b"123456789") == 0xCBF43926  # the CRC-32/IEEE check value
    assert payload_crc(b"") == 0
    data = bytes(range(256)) * 3
    assert payload_crc(data) == zlib.crc32(data)


# -- the QUBO payload -------------------------------------------------------------------------


def test_encode_qubo_layout_is_little_endian_u32_u32_then_u32_u32_i32() -> None:
    payload = encode_qubo(3, [(0, 0, -1), (0, 2, 4), (2, 2, -1)])
    expected = struct.pack("<II", 3, 3) + b"".join(
        struct.pack("<IIi", i, j, w) for i, j, w in [(0, 0, -1), (0, 2, 4), (2, 2, -1)]
    )
    assert payload == expected
    n_vars, terms = decode_qubo(payload)
    assert n_vars == 3
    np.testing.assert_array_equal(terms, [[0, 0, -1], [0, 2, 4], [2, 2, -1]])


def test_encode_qubo_accepts_an_array_and_no_terms() -> None:
    arr = np.array([[1, 1, -(2**31)], [0, 1, 2**31 - 1]])
    assert decode_qubo(encode_qubo(2, arr))[1].tolist() == arr.tolist()
    assert encode_qubo(5, []) == struct.pack("<II", 5, 0)


@pytest.mark.parametrize(
    ("n_vars", "terms"),
    [
        (3, [(1, 0, 1)]),  # i > j
        (3, [(0, 3, 1)]),  # j out of range
        (3, [(-1, 0, 1)]),
        (3, [(0, 1, 2**31)]),  # weight beyond i32
        (3, [(0, 1, 1.5)]),  # not an integer
        (3, [(0, 1)]),  # not a triple
        (0, []),
    ],
)
def test_encode_qubo_refuses_invalid_graphs(n_vars: int, terms: list) -> None:
    with pytest.raises(ProtocolError):
        encode_qubo(n_vars, terms)


@pytest.mark.parametrize(
    "payload",
    [
        b"\x01\x00\x00",
        struct.pack("<II", 2, 2) + struct.pack("<IIi", 0, 1, 4),  # one term short
        struct.pack("<II", 2, 1) + struct.pack("<IIi", 1, 0, 4),  # i > j
        struct.pack("<II", 0, 0),
    ],
)
def test_decode_qubo_refuses_malformed_payloads(payload: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_qubo(payload)


def test_qubo_cost_matches_x_transpose_q_x() -> None:
    # Path 0-1-2 as a maximum-independent-set QUBO: -1 on the diagonal, Q_ij + Q_ji = 4.
    terms = np.array([[0, 0, -1], [1, 1, -1], [2, 2, -1], [0, 1, 4], [1, 2, 4]])
    assert qubo_cost(terms, [1, 0, 1]) == -2
    assert qubo_cost(terms, [1, 1, 0]) == 2
    assert qubo_cost(terms, [0, 0, 0]) == 0


# -- replies ----------------------------------------------------------------------------------

REPLIES = [
    (b"m-timestamp-mode-energy", TimestampMode("energy")),
    (b"m-timestamp-mode-performance", TimestampMode("performance")),
    (b"m-init-done", InitDone()),
    (b"m-ready", Ready()),
    (b"m-name-dut-[unspecified]", Name("dut", "unspecified")),
    (b"m-name-dut-[neurobench-rig virtual bench]", Name("dut", "neurobench-rig virtual bench")),
    (
        b"m-profile-[ULPMark for tinyML Firmware V0.0.1]",
        Profile("ULPMark for tinyML Firmware V0.0.1"),
    ),
    (b"m-model-[kws01]", Model("kws01")),
    (b"m-[Expecting 490 bytes]", ExpectingBytes(490)),
    (b"m-load-done", LoadDone()),
    (b"m-buffer-00-01-ff-7a", BufferDump(b"\x00\x01\xff\x7a")),
    (b"m-buffer-0x00,0x01,0xFF", BufferDump(b"\x00\x01\xff")),
    (b"m-buffer-0001ff", BufferDump(b"\x00\x01\xff")),
    (b"m-buffer-", BufferDump(b"")),
    (b"m-buffer-zz", Message("buffer-zz")),
    (b"m-warmup-start-10", WarmupStart(10)),
    (b"m-warmup-done", WarmupDone()),
    (b"m-infer-start-100", InferStart(100)),
    (b"m-infer-done", InferDone()),
    (b"m-lap-us-4294967000", LapUs(4294967000)),
    (b"m-results-[0.012,0.980,0.008]", Results((0.012, 0.980, 0.008))),
    (b"m-results-[]", Results(())),
    (b"m-results-[0.1,abc]", Message("results-[0.1,abc]")),
    (b"e-[Inference iterations must be >0]", DutErrorLine("Inference iterations must be >0")),
    (b"e-[Invalid hex digit 'zz']", DutErrorLine("Invalid hex digit 'zz'")),
    (b"e-oops", DutErrorLine("oops")),
    (b"m-timestamp-mode-turbo", Message("timestamp-mode-turbo")),
    # Rig extensions.
    (b"m-caps-[bload]", Capabilities(("bload",))),
    (b"m-caps-[bload,qubo]", Capabilities(("bload", "qubo"))),
    (b"m-caps-[ bload , qubo ,]", Capabilities(("bload", "qubo"))),
    (b"m-caps-[]", Capabilities(())),
    (b"m-bload-ready-16000", BloadReady(16000)),
    (b"m-bload-done-cbf43926", BloadDone(0xCBF43926)),
    (b"m-bload-done-CBF43926", BloadDone(0xCBF43926)),
    (b"m-bload-done-cbf4392", Message("bload-done-cbf4392")),
    (b"m-db-crc-16000-3c9e51a2", BufferCrc(16000, 0x3C9E51A2)),
    (b"m-db-crc-0-00000000", BufferCrc(0, 0)),
    (b"m-db-crc-5-3C9E51A2", BufferCrc(5, 0x3C9E51A2)),
    (b"m-db-crc-5-3c9e51a", Message("db-crc-5-3c9e51a")),
    (b"m-db-crc-3c9e51a2", Message("db-crc-3c9e51a2")),
    (b"e-[bload crc mismatch: expected cbf43926 got 00000000]",
     DutErrorLine("bload crc mismatch: expected cbf43926 got 00000000")),
    (b"e-[bload timeout: got 10 of 16000 bytes]",
     DutErrorLine("bload timeout: got 10 of 16000 bytes")),
    (b"m-qload-ready-44", QloadReady(44)),
    (b"m-qload-done-100-250", QloadDone(100, 250)),
    (b"m-qsolve-start", QsolveStart()),
    (b"m-qsolve-done-1000123", QsolveDone(1000123)),
    (b"m-qbest-cost--42", QbestCost(-42)),
    (b"m-qbest-cost-0", QbestCost(0)),
    (b"m-qbest-time-us-517", QbestTime(517)),
    (b"m-qstate-0-[0f80]", QstateChunk(0, b"\x0f\x80")),
    (b"m-qstate-32-[]", QstateChunk(32, b"")),
    (b"m-qstate-0-[" + b"ab" * 32 + b"]", QstateChunk(0, b"\xab" * 32)),
    (b"m-qstate-0-[" + b"ab" * 33 + b"]", Message("qstate-0-[" + "ab" * 33 + "]")),
    (b"m-qstate-0-[abc]", Message("qstate-0-[abc]")),
    (b"m-qimprove-12-5", Qimprove(12, 5)),
    (b"m-qimprove-12--5", Qimprove(12, -5)),
    # Numbers too long for any counter are not numbers (and must not crash the decoder).
    (b"m-lap-us-" + b"9" * 21, Message("lap-us-" + "9" * 21)),
    (b"m-lap-us-" + b"9" * 5000, Message("lap-us-" + "9" * 5000)),
    (b"m-something-new", Message("something-new")),
    (b"hello from main()", Unparsed("hello from main()")),
]


@pytest.mark.parametrize(("line", "event"), REPLIES)
def test_reply_lines(line: bytes, event: object) -> None:
    assert DutDecoder().feed(line + b"\r\n") == [event]


def test_bare_newline_nul_bytes_blank_lines_and_partials() -> None:
    dec = DutDecoder()
    assert dec.feed(b"\x00m-rea") == []
    assert dec.feed(b"dy\n\r\n\r\nm-init-") == [Ready()]
    assert dec.feed(b"done\r") == []
    assert dec.feed(b"\n") == [InitDone()]


def test_invalid_utf8_is_unparsed_not_an_exception() -> None:
    (event,) = DutDecoder().feed(b"\xff\xfe\x80garbage\r\n")
    assert isinstance(event, Unparsed)
    assert event.text.endswith("garbage")


def test_overlong_line_gives_one_event_and_decoding_continues() -> None:
    dec = DutDecoder()
    events = []
    for _ in range(5):
        events += dec.feed(b"x" * (MAX_LINE // 2))
    events += dec.feed(b"\r\nm-ready\r\n")
    assert len(events) == 2
    assert isinstance(events[0], Unparsed) and "longer than" in events[0].text
    assert events[1] == Ready()


def test_overlong_line_in_one_piece_matches_the_split_one() -> None:
    stream = b"y" * (MAX_LINE + 10) + b"\r\nm-ready\r\n"
    whole = DutDecoder().feed(stream)
    dec = DutDecoder()
    split = dec.feed(stream[: MAX_LINE + 3]) + dec.feed(stream[MAX_LINE + 3 :])
    assert whole == split
    assert whole[1] == Ready()


# -- properties -------------------------------------------------------------------------------

_word = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="[]"))
_events = st.one_of(
    st.sampled_from(
        [
            TimestampMode("energy"),
            TimestampMode("performance"),
            InitDone(),
            Ready(),
            LoadDone(),
            WarmupDone(),
            InferDone(),
        ]
    ),
    st.builds(Name, _word.filter(lambda s: s and "-[" not in s), _word),
    st.builds(Profile, _word),
    st.builds(Model, _word),
    st.builds(ExpectingBytes, st.integers(0, 10**6)),
    st.builds(BufferDump, st.binary(max_size=16)),
    st.builds(WarmupStart, st.integers(0, 10**6)),
    st.builds(InferStart, st.integers(0, 10**6)),
    st.builds(LapUs, st.integers(0, 2**32 - 1)),
    st.builds(
        Results,
        st.lists(st.integers(-1000, 1000).map(lambda k: k / 1000), max_size=6).map(tuple),
    ),
    st.builds(DutErrorLine, _word),
    # Rig extensions.
    st.sampled_from([QsolveStart()]),
    st.builds(
        Capabilities,
        st.lists(st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1), max_size=4)
        .map(tuple),
    ),
    st.builds(BloadReady, st.integers(0, 2**32)),
    st.builds(BloadDone, st.integers(0, 2**32 - 1)),
    st.builds(BufferCrc, st.integers(0, 2**32), st.integers(0, 2**32 - 1)),
    st.builds(QloadReady, st.integers(0, 2**32)),
    st.builds(QloadDone, st.integers(0, 2**32), st.integers(0, 2**32)),
    st.builds(QsolveDone, st.integers(0, 2**40)),
    st.builds(QbestCost, st.integers(-(2**40), 2**40)),
    st.builds(QbestTime, st.integers(0, 2**40)),
    st.builds(QstateChunk, st.integers(0, 2**20), st.binary(max_size=32)),
    st.builds(Qimprove, st.integers(0, 2**40), st.integers(-(2**40), 2**40)),
)


def _render(event: object) -> bytes:
    """The line a DUT prints for `event` (the test's own formatter, independent of the codec)."""
    match event:
        case TimestampMode(mode):
            line = f"m-timestamp-mode-{mode}"
        case InitDone():
            line = "m-init-done"
        case Ready():
            line = "m-ready"
        case LoadDone():
            line = "m-load-done"
        case WarmupDone():
            line = "m-warmup-done"
        case InferDone():
            line = "m-infer-done"
        case Name(name, vendor):
            line = f"m-name-{name}-[{vendor}]"
        case Profile(text):
            line = f"m-profile-[{text}]"
        case Model(model_id):
            line = f"m-model-[{model_id}]"
        case ExpectingBytes(n):
            line = f"m-[Expecting {n} bytes]"
        case BufferDump(data):
            line = "m-buffer-" + "-".join(f"{b:02x}" for b in data)
        case WarmupStart(n):
            line = f"m-warmup-start-{n}"
        case InferStart(n):
            line = f"m-infer-start-{n}"
        case LapUs(us):
            line = f"m-lap-us-{us}"
        case Results(values):
            line = "m-results-[" + ",".join(f"{v:.3f}" for v in values) + "]"
        case DutErrorLine(text):
            line = f"e-[{text}]"
        case QsolveStart():
            line = "m-qsolve-start"
        case Capabilities(words):
            line = "m-caps-[" + ",".join(words) + "]"
        case BloadReady(n):
            line = f"m-bload-ready-{n}"
        case BloadDone(crc):
            line = f"m-bload-done-{crc:08x}"
        case BufferCrc(n, crc):
            line = f"m-db-crc-{n}-{crc:08x}"
        case QloadReady(n):
            line = f"m-qload-ready-{n}"
        case QloadDone(n_vars, n_terms):
            line = f"m-qload-done-{n_vars}-{n_terms}"
        case QsolveDone(us):
            line = f"m-qsolve-done-{us}"
        case QbestCost(cost):
            line = f"m-qbest-cost-{cost}"
        case QbestTime(us):
            line = f"m-qbest-time-us-{us}"
        case QstateChunk(offset, data):
            line = f"m-qstate-{offset}-[" + "".join(f"{b:02x}" for b in data) + "]"
        case Qimprove(t_us, cost):
            line = f"m-qimprove-{t_us}-{cost}"
        case _:
            raise AssertionError(event)
    return line.encode() + b"\r\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(_events, max_size=12))
def test_stream_split_at_every_boundary_gives_the_same_events(events: list) -> None:
    stream = b"".join(_render(e) for e in events)
    assert DutDecoder().feed(stream) == events
    for cut in range(len(stream) + 1):
        dec = DutDecoder()
        assert dec.feed(stream[:cut]) + dec.feed(stream[cut:]) == events
    dec = DutDecoder()
    assert [e for i in range(len(stream)) for e in dec.feed(stream[i : i + 1])] == events


@settings(max_examples=200, deadline=None)
@given(st.lists(_events, min_size=1, max_size=8), st.data())
def test_truncated_or_corrupted_streams_give_only_typed_events(events: list, data) -> None:
    stream = bytearray(b"".join(_render(e) for e in events))
    cut = data.draw(st.integers(0, len(stream)))
    corrupted = bytearray(stream[:cut])
    for _ in range(data.draw(st.integers(0, 5))):
        if corrupted:
            i = data.draw(st.integers(0, len(corrupted) - 1))
            corrupted[i] = data.draw(st.integers(0, 255))
    dec = DutDecoder()
    out = dec.feed(bytes(corrupted)) + dec.feed(b"\r\n")
    assert all(isinstance(e, EVENT_TYPES) for e in out)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_random_bytes_never_raise(pieces: list[bytes]) -> None:
    dec = DutDecoder()
    for piece in pieces:
        assert all(isinstance(e, EVENT_TYPES) for e in dec.feed(piece))
