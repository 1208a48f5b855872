"""The IO manager codec: command bytes, reply events, and a decoder that never raises."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import ProtocolError
from protocols.io_manager.codec import (
    EDGE_CHANGE,
    EDGE_FALL,
    EVENT_TYPES,
    HEX_PER_COMMAND,
    MAX_COMMAND,
    MAX_LINE,
    MAX_PASSTHROUGH,
    DutLine,
    Error,
    Help,
    IoManagerDecoder,
    LapUs,
    Message,
    Name,
    Passthrough,
    Ready,
    Res,
    Timer,
    Tm,
    Unparsed,
    Version,
    cmd_disable_timer,
    cmd_dut,
    cmd_enable_timer,
    cmd_help,
    cmd_name,
    cmd_res,
    cmd_tm,
    cmd_version,
    dut_command_from_wire,
    encode_command,
)

# -- commands ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "wire"),
    [
        (cmd_name(), b"name%"),
        (cmd_version(), b"version%"),
        (cmd_help(), b"help%"),
        (cmd_res(0), b"res 0%"),
        (cmd_res(1), b"res 1%"),
        (cmd_enable_timer(), b"enable-timer%"),
        (cmd_disable_timer(), b"disable-timer%"),
        (cmd_tm(EDGE_FALL), b"tm 0%"),
        (cmd_tm(EDGE_CHANGE), b"tm 1%"),
        (cmd_dut("name"), b"dut name%"),
        (cmd_dut("db load 490"), b"dut db load 490%"),
    ],
)
def test_command_bytes(text: str, wire: bytes) -> None:
    assert encode_command(text) == wire


@pytest.mark.parametrize("bad", [2, -1, True, "1", None])
def test_res_and_tm_take_only_0_or_1(bad: object) -> None:
    with pytest.raises(ProtocolError, match="must be 0 or 1"):
        cmd_res(bad)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="must be 0 or 1"):
        cmd_tm(bad)  # type: ignore[arg-type]


def test_own_buffer_is_80_characters_with_the_percent() -> None:
    assert len(encode_command("x" * 79)) == MAX_COMMAND == 80
    with pytest.raises(ProtocolError, match="80-character buffer"):
        encode_command("x" * 80)


def test_passthrough_leaves_76_characters_for_the_dut_command() -> None:
    assert MAX_PASSTHROUGH == 76
    longest = "x" * 75  # + '%' = 76
    assert len(encode_command(cmd_dut(longest))) == 80
    with pytest.raises(ProtocolError, match=r"77 characters .* at most 76 fit") as exc:
        cmd_dut("x" * 76)
    assert "26 bytes per command" in exc.value.hint


def test_26_byte_db_chunk_fits_the_unos_64_byte_receive_ring() -> None:
    wire = encode_command(cmd_dut("db " + bytes(HEX_PER_COMMAND).hex()))
    assert len(wire) == 60 < 64


@pytest.mark.parametrize("bad", ["", "na%me", "a\r", "b\n", "nämé"])
def test_malformed_commands_are_refused(bad: str) -> None:
    with pytest.raises(ProtocolError):
        encode_command(bad)
    with pytest.raises(ProtocolError):
        cmd_dut(bad)


def test_dut_command_from_wire() -> None:
    assert dut_command_from_wire(b"name%") == "name"
    assert dut_command_from_wire(b"db " + b"ab" * 36 + b"%") == "db " + "ab" * 36


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"\x01\x02\xff\x00", "binary data cannot pass through"),
        (b"name", "binary data cannot pass through"),  # no '%': not a command
        (b"\x00\x01%", "binary data cannot pass through"),
        (b"name%profile%", "2 DUT commands in one write"),
        (b"db " + b"ab" * 37 + b"%", "does not fit"),
        (b"%", "empty DUT command"),
        (b"", "empty write"),
    ],
)
def test_what_cannot_pass_through_is_refused(data: bytes, match: str) -> None:
    with pytest.raises(ProtocolError, match=match):
        dut_command_from_wire(data)


# -- replies ----------------------------------------------------------------------------------

REPLIES = [
    (b"m-ready", Ready()),
    (b"m-dut-passthrough(name)", Passthrough("name")),
    (b"m-dut-passthrough(db load 490)", Passthrough("db load 490")),
    (b"m-dut-passthrough(f(x))", Passthrough("f(x)")),
    (b"m-name-[neurobench-rig IO manager]", Name("neurobench-rig IO manager")),
    (b"m-version-[1.0.0]", Version("1.0.0")),
    (b"m-help-[tm <0|1>: timer edges]", Help("tm <0|1>: timer edges")),
    (b"m-res-0", Res(0)),
    (b"m-res-1", Res(1)),
    (b"m-res-2", Message("res-2")),
    (b"m-timer-enabled", Timer(True)),
    (b"m-timer-disabled", Timer(False)),
    (b"m-tm-1", Tm(1)),
    (b"m-lap-us-4294967292", LapUs(4294967292)),
    (b"m-lap-us-", Message("lap-us-")),
    (b"e-[Unknown command: frob]", Error("Unknown command: frob")),
    (b"e-oops", Error("oops")),
    (b"m-lap-lost-3", Message("lap-lost-3")),
    (b"[dut]: m-ready", DutLine("m-ready")),
    (b"[dut]: m-name-dut-[unspecified]", DutLine("m-name-dut-[unspecified]")),
    (b"[dut]:m-init-done", DutLine("m-init-done")),
    (b"[dut]: e-[Unknown command: x]", DutLine("e-[Unknown command: x]")),
    (b"tinyML Enhanced Interface Board", Unparsed("tinyML Enhanced Interface Board")),
]


@pytest.mark.parametrize(("line", "event"), REPLIES)
def test_reply_lines(line: bytes, event: object) -> None:
    assert IoManagerDecoder().feed(line + b"\r\n") == [event]


def test_the_reference_pass_through_exchange() -> None:
    stream = (
        b"m-dut-passthrough(name)\r\nm-ready\r\n"
        b"[dut]: m-name-dut-[unspecified]\r\n[dut]: m-ready\r\n"
    )
    assert IoManagerDecoder().feed(stream) == [
        Passthrough("name"),
        Ready(),
        DutLine("m-name-dut-[unspecified]"),
        DutLine("m-ready"),
    ]


def test_blank_lines_nul_bytes_bare_newlines_and_partials() -> None:
    dec = IoManagerDecoder()
    assert dec.feed(b"\x00[dut]: m-rea") == []
    assert dec.feed(b"dy\n\r\n[dut]: \r\n[dut]:\r\nm-tm-") == [DutLine("m-ready")]
    assert dec.feed(b"0\r") == []
    assert dec.feed(b"\n") == [Tm(0)]


def test_reset_drops_a_partial_line() -> None:
    dec = IoManagerDecoder()
    dec.feed(b"[dut]: m-resu")
    dec.reset()
    assert dec.feed(b"m-ready\r\n") == [Ready()]


def test_invalid_utf8_is_unparsed_not_an_exception() -> None:
    (event,) = IoManagerDecoder().feed(b"\xff\xfe\x80garbage\r\n")
    assert isinstance(event, Unparsed) and event.text.endswith("garbage")


def test_overlong_line_gives_one_event_and_decoding_continues() -> None:
    dec = IoManagerDecoder()
    events = []
    for _ in range(5):
        events += dec.feed(b"[dut]: " + b"x" * (MAX_LINE // 2))
    events += dec.feed(b"\r\nm-ready\r\n")
    assert len(events) == 2
    assert isinstance(events[0], Unparsed) and "longer than" in events[0].text
    assert events[1] == Ready()


# -- properties -------------------------------------------------------------------------------

_word = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="[]()"))
_events = st.one_of(
    st.sampled_from([Ready(), Timer(True), Timer(False), Res(0), Res(1), Tm(0), Tm(1)]),
    st.builds(Passthrough, _word),
    st.builds(Name, _word),
    st.builds(Version, _word),
    st.builds(Help, _word),
    st.builds(LapUs, st.integers(0, 2**32 - 1)),
    st.builds(Error, _word),
    st.builds(DutLine, _word.filter(bool)),
)


def _render(event: object) -> bytes:
    """The line an IO manager prints for `event` (the test's own formatter)."""
    match event:
        case Ready():
            line = "m-ready"
        case Timer(enabled):
            line = "m-timer-enabled" if enabled else "m-timer-disabled"
        case Res(level):
            line = f"m-res-{level}"
        case Tm(mode):
            line = f"m-tm-{mode}"
        case Passthrough(command):
            line = f"m-dut-passthrough({command})"
        case Name(text):
            line = f"m-name-[{text}]"
        case Version(text):
            line = f"m-version-[{text}]"
        case Help(text):
            line = f"m-help-[{text}]"
        case LapUs(us):
            line = f"m-lap-us-{us}"
        case Error(text):
            line = f"e-[{text}]"
        case DutLine(text):
            line = f"[dut]: {text}"
        case _:
            raise AssertionError(event)
    return line.encode() + b"\r\n"


@settings(max_examples=200, deadline=None)
@given(st.lists(_events, max_size=12))
def test_stream_split_at_every_boundary_gives_the_same_events(events: list) -> None:
    stream = b"".join(_render(e) for e in events)
    assert IoManagerDecoder().feed(stream) == events
    for cut in range(len(stream) + 1):
        dec = IoManagerDecoder()
        assert dec.feed(stream[:cut]) + dec.feed(stream[cut:]) == events
    dec = IoManagerDecoder()
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
    dec = IoManagerDecoder()
    out = dec.feed(bytes(corrupted)) + dec.feed(b"\r\n")
    assert all(isinstance(e, EVENT_TYPES) for e in out)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=10))
def test_random_bytes_never_raise(pieces: list[bytes]) -> None:
    dec = IoManagerDecoder()
    for piece in pieces:
        assert all(isinstance(e, EVENT_TYPES) for e in dec.feed(piece))
