"""Fuzz of every decoder in `protocols/` (and the encoders' checks of values a user supplies).

Random input and mutated valid frames (bits flipped, bytes inserted, deleted, duplicated or cut,
digit runs stretched past Python's int-conversion limit, non-ASCII digits such as ``²``): a
codec may refuse them only with its typed error, `ProtocolError` (with a message), never with
ValueError, IndexError, OverflowError, RecursionError, ... The line decoders that promise never
to raise (DUT, IO manager, LPM01A) may not raise at all. Incremental decoders are also fed the
same bytes split at hypothesis-chosen boundaries, and each valid frame split at every boundary
must decode as it does whole. The inputs these fuzzers found are pinned as table tests at the end.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols import otii, ppk2, scpi
from protocols.dut import codec as dut
from protocols.errors import ProtocolError
from protocols.io_manager import codec as io
from protocols.lpm01a import codec as lpm

#: Small enough that the whole module runs in under 20 s on a loaded 2-core machine (about 8 s
#: of CPU); the inputs these settings found, and those a run of 600 examples found, are pinned
#: in the table at the end.
FUZZ = settings(max_examples=30, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])

#: Bytes the mutator inserts: framing characters, non-ASCII digits (``str.isdigit`` and ``int``
#: accept ``²``/``٣``/``５``, byte regexes do not), invalid UTF-8, and a digit run longer than
#: the 4300 digits ``int()`` converts.
_SPECIAL = [
    b"\xb2", "²".encode(), "٣".encode(), "５".encode(), b"\x00", b"\xff", b"\xf0", b"\x80",
    b"\r\n", b"\n", b"%", b"#", b"-", b"+", b"[", b"]", b",", b":", b"(@", b")", b'"', b"{", b"}",
    b"9" * 5000, b"e999", b"nan", b"[" * 3000,
]


@st.composite
def _mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    """A valid frame from `seeds` with one to four random mutations."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "special", "delete", "cut", "dup"]))
        pos = draw(st.integers(0, len(data)))
        end = draw(st.integers(pos, min(len(data), pos + 16)))
        if op == "flip" and pos < len(data):
            data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif op == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == "special":
            data[pos:end] = draw(st.sampled_from(_SPECIAL))
        elif op == "delete":
            del data[pos:end]
        elif op == "cut":
            del data[pos:]
        elif op == "dup":
            data[pos:pos] = data[pos:end]
    return bytes(data)


def _text(data: bytes) -> str:
    return data.decode("utf-8", "replace")


def _lines(*lines: str) -> list[bytes]:
    return [f"{line}\r\n".encode() for line in lines]


# -- valid frames, from the codecs' own encoders and the protocol tables -------------------------
SCPI_BLOCKS = [
    scpi.encode_block(b""), scpi.encode_block(b"abc") + b"\n", scpi.encode_block(bytes(range(40))),
    scpi.encode_reals(np.array([1.5, -2.0, 3e-9]), scpi.real_dtype(32)) + b"\n",
    scpi.encode_reals(np.arange(4.0), scpi.real_dtype(64, big_endian=False)),
    b"#0free text\n", b"#15hello\n",
]
SCPI_ERRORS = ['-113,"Undefined header"', '+0,"No error"', '-222,"Data ""out"" of range"',
               scpi.format_error(-350, "Queue overflow")]
SCPI_COMMANDS = ["SENS:CURR:RANG 0.1,(@1)", ":MEAS:CURR? (@1,2)", "SYST:ERR?",
                 'DISP:TEXT "a,b",(@1:3)', "*IDN?"]
SCPI_CHANNELS = ["(@1)", "(@1,3:4)", "(@ 1, 2 )", scpi.channel_list([1, 2, 4])]
SCPI_NUMBERS = ["1E-3", "+3.3", "MAX", scpi.format_number(5.12e-6), "-0.5"]
SCPI_PATTERNS = ["[SENSe]:SWEep:TINTerval", "SENSe:CURRent[:DC]:RANGe", "SYSTem:ERRor[:NEXT]"]

DUT_LINES = _lines(
    "m-timestamp-mode-energy", "m-init-done", "m-ready", "m-name-dut-[vendor]",
    "m-profile-[1.0]", "m-model-[kws01]", "m-[Expecting 10 bytes]", "m-load-done",
    "m-buffer-00-01-ff-7a", "m-buffer-0x0a,0x0b", "m-warmup-start-3", "m-warmup-done",
    "m-infer-start-10", "m-infer-done", "m-lap-us-123456", "m-results-[0.1,0.9,1e-3]",
    "m-caps-[bload,qubo,elap]", "m-bload-ready-10", "m-bload-done-deadbeef",
    "m-qload-ready-20", "m-qload-done-3-2", "m-qsolve-start", "m-qsolve-done-100",
    "m-qbest-cost--5", "m-qbest-time-us-7", "m-qstate-0-[0a0b]", "m-qimprove-5--3",
    "e-[unknown command]", "e-oops", "m-whatever",
)
DUT_STREAMS = [b"".join(DUT_LINES[:3]), b"".join(DUT_LINES), *DUT_LINES]
QUBO_PAYLOADS = [dut.encode_qubo(3, [(0, 1, -2), (2, 2, 5)]), dut.encode_qubo(1, []),
                 dut.encode_qubo(40, [(i, 39, i - 20) for i in range(40)])]

IO_LINES = _lines(
    "[dut]: m-ready", "[dut]: m-lap-us-77", "m-dut-passthrough(name)", "m-name-[io-manager]",
    "m-version-[1.0.0]", "m-help-[res 0|1]", "m-res-1", "m-timer-enabled", "m-timer-disabled",
    "m-tm-0", "m-lap-us-12345", "m-ready", "e-[too long]", "m-other",
)
IO_STREAMS = [b"".join(IO_LINES), *IO_LINES]
IO_WRITES = [io.encode_command(c) for c in ("name", "db load 10", "infer 10 1", "db " + "ab" * 26)]

_ACQUISITION = (
    b"PowerShield > ack format bin_hexa\r\nPowerShield > ack start\r\n"
    + lpm.encode_bin_hexa(np.array([1e-3, 2e-3, 640.87e-6]))
    + lpm.encode_text_frame(lpm.FRAME_ERROR, "error text")
    + lpm.encode_bin_hexa(np.array([3e-3])) + lpm.encode_timestamp_frame(1_002, 7)
    + lpm.encode_text_frame(lpm.FRAME_INFO, "info") + lpm.encode_overcurrent_frame()
    + bytes.fromhex("f0990102ffff") + b"PowerShield > ack stop\r\n"
    + lpm.encode_bin_hexa(np.array([5e-3])) + lpm.encode_acquisition_end_frame()
    + b"PowerShield > Acquisition completed\r\n1234-05\r\n"
)
LPM_LINES = _lines(
    "PowerShield > ack volt 1800m", "PowerShield > error volt 9000m",
    "PowerShield > Error detail: voltage out of range", "PowerShield > 1.0.5-sim",
    "event 3 ris", "PowerShield > event 4 ris", "TimeStamp: 12s 345ms, buff 03%",
    "TimeStamp:>001s 000ms, buff 00%", "PowerShield > ack volt get 3292-03", "6409-07",
    "PowerShield > Acquisition completed",
)
LPM_STREAMS = [
    b"".join(LPM_LINES), lpm.format_samples(np.array([6.409e-4, 1e-3, 0.0, 12.5])),
    lpm.encode_overrun(12), _ACQUISITION, *LPM_LINES,
]
LPM_NUMBERS = ["2m", "2-3", "5k", "inf", "1.5u", ".5", "3300m"]
LPM_SAMPLES = ["6409-07", "0000+00", "9999+99"]
LPM_DETAILS = ["12 samples lost (buffer overflow)", "acquisition overrun", "1 sample lost"]

PPK2_COMMANDS = [ppk2.regulator_set(3300), ppk2.device_running(True), ppk2.set_power_mode(True),
                 ppk2.encode(ppk2.Cmd.AVERAGE_START), ppk2.encode(ppk2.Cmd.SET_USER_GAINS, 1, 0, 0,
                                                                  128, 63)]
PPK2_METADATA = [
    ppk2.Calibration().to_metadata(),
    ppk2.Calibration(o=(60.5, 70.25, 65.0, 72.0, 68.0),
                     extra={"calibrated": "1", "vdd": "3300", "hw": "9173"}).to_metadata(),
    b"Calibrated: 0\nR0: -nan\nGS1: 1e-3\nEND\n",
]
PPK2_WORDS = [ppk2.encode_words(np.arange(8) * 1000, np.arange(8) % 5, np.arange(8),
                                np.arange(8) * 31)]

OTII_MESSAGES = [otii.encode(m) for m in (
    {"type": "information", "info": "connected",
     "data": {"otii_version": "3.5.1", "protocol_version": "1.0", "server": "Otii"}},
    otii.request("arc_enable_channel", "3", {"device_id": "x", "channel": "mc", "enable": True}),
    otii.response("recording_get_channel_data", "7",
                  {"data_type": "analog", "timestamp": 0.5, "interval": 1e-3,
                   "values": [1e-3, 2.5e-3, 0, 12]}),
    otii.response("recording_get_channel_data", "8",
                  {"data_type": "digital",
                   "values": [{"timestamp": 0.1, "value": True}, {"timestamp": 0.2, "value": 0}]}),
    otii.error("login", "1", otii.COULD_NOT_LOGIN),
)]


# -- the decoding entry points ---------------------------------------------------------------------
def _decode_reals(data: bytes) -> None:
    for dtype in (scpi.real_dtype(32), scpi.real_dtype(64, big_endian=False)):
        scpi.decode_reals(data, dtype)


def _header_matches(data: bytes) -> None:
    for pattern in SCPI_PATTERNS:
        scpi.header_matches(_text(data), pattern)


def _ppk2_commands(data: bytes) -> None:
    while data:
        parsed, used = ppk2.parse_command(data)
        if parsed is None:
            return
        data = data[used:]


def _ppk2_words(data: bytes) -> None:
    words = ppk2.split_words(data)
    ppk2.counter_gaps(words.counter, None)
    ppk2.counter_gaps(words.counter, 5)
    # Whatever the counters, the sequencer releases every word once the stream ends, and the
    # spike filter keeps one finite value per sample.
    sequencer = ppk2.CounterSequencer()
    raw = np.frombuffer(data, dtype="<u4")
    released = len(sequencer.feed(raw[: len(raw) // 2])) + len(sequencer.feed(raw[len(raw) // 2:]))
    assert released + len(sequencer.feed(raw[:0], final=True)) == len(raw)
    current = ppk2.Calibration().current(words.adc, words.rng, 3.3)
    assert np.isfinite(ppk2.SpikeFilter().apply(current, words.rng)).all()


def _otii_data(data: bytes) -> None:
    body = otii.decode(data.rstrip(b"\r\n")).get("data")
    for check in (otii.analog_block, otii.digital_events):
        try:
            check(body)
        except ProtocolError as exc:
            assert str(exc)


def _lpm_text(data: bytes) -> None:
    text = _text(data)
    lpm.is_overrun(text)
    lpm.lost_samples(text)


#: name -> (valid frames, function taking bytes, may it raise ProtocolError?)
DECODERS: dict[str, tuple[list[bytes], Callable[[bytes], object], bool]] = {
    "scpi.decode_block": (SCPI_BLOCKS, scpi.decode_block, True),
    "scpi.decode_reals": (SCPI_BLOCKS, _decode_reals, True),
    "scpi.parse_error": ([e.encode() for e in SCPI_ERRORS],
                         lambda b: scpi.parse_error(_text(b)), True),
    "scpi.parse_command": ([c.encode() for c in SCPI_COMMANDS],
                           lambda b: scpi.parse_command(_text(b)), True),
    "scpi.parse_channel_list": ([c.encode() for c in SCPI_CHANNELS],
                                lambda b: scpi.parse_channel_list(_text(b)), True),
    "scpi.parse_number": ([n.encode() for n in SCPI_NUMBERS],
                          lambda b: scpi.parse_number(_text(b)), True),
    "scpi.header_matches": ([b"SENS:SWE:TINT", b"sense:curr:dc:rang", b"SYST:ERR"],
                            _header_matches, True),
    "dut.parse_line": ([line.strip() for line in DUT_LINES],
                       lambda b: dut.parse_line(_text(b)), False),
    "dut.decode_qubo": (QUBO_PAYLOADS, dut.decode_qubo, True),
    "io_manager.parse_line": ([line.strip() for line in IO_LINES],
                              lambda b: io.parse_line(_text(b)), False),
    "io_manager.dut_command_from_wire": (IO_WRITES, io.dut_command_from_wire, True),
    "lpm01a.decode_bin_hexa": ([lpm.encode_bin_hexa(np.array([1e-3, 4095.0, 1e-12]))],
                               lpm.decode_bin_hexa, True),
    "lpm01a.parse_number": ([n.encode() for n in LPM_NUMBERS],
                            lambda b: lpm.parse_number(_text(b)), True),
    "lpm01a.parse_sample": ([s.encode() for s in LPM_SAMPLES],
                            lambda b: lpm.parse_sample(_text(b)), True),
    "lpm01a.lost_samples": ([d.encode() for d in LPM_DETAILS], _lpm_text, False),
    "ppk2.parse_command": (PPK2_COMMANDS, _ppk2_commands, False),
    "ppk2.parse_metadata": (PPK2_METADATA, lambda b: ppk2.parse_metadata(_text(b)), True),
    "ppk2.split_words": (PPK2_WORDS, _ppk2_words, True),
    "otii.decode": (OTII_MESSAGES, lambda b: otii.decode(b.rstrip(b"\r\n")), True),
    "otii.channel_data": (OTII_MESSAGES[2:4], _otii_data, True),
}


class _Stream:
    """An incremental decoder: `feed` bytes, then `finish` (query its state)."""

    def __init__(self, make: Callable[[], Any], finish: Callable[[Any], object] = lambda d: None
                 ) -> None:
        self.make, self.finish = make, finish


def _block_state(decoder: scpi.BlockDecoder) -> object:
    return (decoder.needed, decoder.payload if decoder.done else None, decoder.rest)


STREAMS: dict[str, tuple[list[bytes], _Stream, bool]] = {
    "scpi.BlockDecoder": (SCPI_BLOCKS, _Stream(scpi.BlockDecoder, _block_state), True),
    "dut.DutDecoder": (DUT_STREAMS, _Stream(dut.DutDecoder), False),
    "io_manager.IoManagerDecoder": (IO_STREAMS, _Stream(io.IoManagerDecoder), False),
    "lpm01a.Lpm01aDecoder": (LPM_STREAMS, _Stream(lpm.Lpm01aDecoder,
                                                  lambda d: (d.sample_count, d.in_binary)), False),
    "lpm01a.Lpm01aDecoder(bin_hexa)": (
        LPM_STREAMS, _Stream(lambda: lpm.Lpm01aDecoder(bin_hexa=True)), False),
    "ppk2.WordAssembler": (PPK2_WORDS, _Stream(ppk2.WordAssembler, lambda d: d.pending), False),
    "otii.MessageSplitter": (OTII_MESSAGES, _Stream(lambda: otii.MessageSplitter(max_bytes=4096),
                                                    lambda d: d.pending), True),
}


def _only_typed(call: Callable[[], object], typed: bool) -> None:
    """Run `call`; only a `ProtocolError` with a message may come out (none at all if not
    `typed`). Anything else propagates, and hypothesis reports the input."""
    try:
        call()
    except ProtocolError as exc:
        if not typed:
            raise AssertionError(f"a decoder that never raises raised {exc!r}") from exc
        assert str(exc), "a ProtocolError without a message"


def _feed(stream: _Stream, pieces: list[bytes]) -> list[object]:
    """Feed `pieces` one by one; the events (bytes joined, runs of samples merged) and the
    final state, so that the same stream split differently gives the same list."""
    decoder = stream.make()
    out: list[object] = []
    for piece in pieces:
        result = decoder.feed(piece)
        for item in result if isinstance(result, list) else [result]:
            if isinstance(item, bytes) and out and isinstance(out[-1], bytes):
                out[-1] += item
            elif isinstance(item, lpm.Samples) and out and isinstance(out[-1], lpm.Samples):
                out[-1] = lpm.Samples(np.concatenate([out[-1].values, item.values]),
                                      out[-1].first_index)
            elif not isinstance(item, bool):  # BlockDecoder.feed's "done yet?"
                out.append(item)
    out.append(stream.finish(decoder))
    return out


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    cuts = sorted(min(c, len(data)) for c in cuts)
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]


# (a) random input --------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(DECODERS))
@FUZZ
@given(data=st.one_of(st.binary(max_size=200), st.text(max_size=120).map(str.encode)))
def test_random_input_gives_only_typed_errors(name: str, data: bytes) -> None:
    _, decode, typed = DECODERS[name]
    _only_typed(lambda: decode(data), typed)


@pytest.mark.parametrize("name", list(STREAMS))
@FUZZ
@given(data=st.binary(max_size=300), cuts=st.lists(st.integers(0, 300), max_size=6))
def test_random_stream_gives_only_typed_errors(name: str, data: bytes, cuts: list[int]) -> None:
    _, stream, typed = STREAMS[name]
    _only_typed(lambda: _feed(stream, _split(data, cuts)), typed)


# (b) mutated valid frames ------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(DECODERS))
@FUZZ
@given(data=st.data())
def test_mutated_frames_give_only_typed_errors(name: str, data: st.DataObject) -> None:
    seeds, decode, typed = DECODERS[name]
    frame = data.draw(_mutated(seeds), label="frame")
    _only_typed(lambda: decode(frame), typed)


@pytest.mark.parametrize("name", list(STREAMS))
@FUZZ
@given(data=st.data())
def test_mutated_streams_split_anywhere_give_only_typed_errors(
    name: str, data: st.DataObject
) -> None:
    seeds, stream, typed = STREAMS[name]
    frame = data.draw(_mutated(seeds), label="frame")
    cuts = data.draw(st.lists(st.integers(0, len(frame)), max_size=6), label="cuts")
    _only_typed(lambda: _feed(stream, _split(frame, cuts)), typed)


@pytest.mark.parametrize("name", list(STREAMS))
def test_valid_frames_split_at_every_boundary_decode_as_whole(name: str) -> None:
    seeds, stream, _ = STREAMS[name]
    for frame in seeds:
        whole = _feed(stream, [frame])
        for cut in range(len(frame) + 1):
            assert _feed(stream, _split(frame, [cut])) == whole, (frame, cut)


# (c) encoders' checks of values a user or a bench file supplies ----------------------------------
_INTS = st.one_of(st.integers(-5, 300), st.integers(-(2**70), 2**70))
_FLOATS = st.one_of(st.floats(), st.floats(-1e4, 1e4), st.integers(-(2**70), 2**70))
_TEXT = st.one_of(st.text(max_size=100), st.sampled_from(["name", "db load 10", "²", "a%b"]))
_JSON = st.recursive(
    st.none() | st.booleans() | _FLOATS | st.just(10**400) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=4),
    max_leaves=12,
)

ENCODERS: dict[str, tuple[st.SearchStrategy[tuple[Any, ...]], Callable[..., object]]] = {
    "scpi.encode_block": (st.tuples(st.binary(max_size=50)), scpi.encode_block),
    "scpi.real_dtype": (st.tuples(_INTS, st.booleans()),
                         lambda bits, big: scpi.real_dtype(bits, big_endian=big)),
    "scpi.format_number": (st.tuples(_FLOATS), scpi.format_number),
    "scpi.channel_list": (st.tuples(st.lists(_INTS, max_size=4)), scpi.channel_list),
    "dut.encode_command": (st.tuples(_TEXT), dut.encode_command),
    "dut.cmd_db_load": (st.tuples(_INTS), dut.cmd_db_load),
    "dut.cmd_db_hex": (st.tuples(st.binary(max_size=60)), dut.cmd_db_hex),
    "dut.cmd_infer": (st.tuples(_INTS, _INTS), dut.cmd_infer),
    "dut.cmd_bload": (st.tuples(_INTS, _INTS), dut.cmd_bload),
    "dut.cmd_qload": (st.tuples(_INTS, _INTS), dut.cmd_qload),
    "dut.cmd_qsolve": (st.tuples(_INTS, _INTS), dut.cmd_qsolve),
    "dut.encode_qubo": (st.tuples(_INTS, st.lists(st.tuples(_INTS, _INTS, _INTS), max_size=5)),
                        dut.encode_qubo),
    "dut.hex_chunks": (st.tuples(st.binary(max_size=80), _INTS), dut.hex_chunks),
    "io_manager.encode_command": (st.tuples(_TEXT), io.encode_command),
    "io_manager.cmd_res": (st.tuples(_INTS), io.cmd_res),
    "io_manager.cmd_tm": (st.tuples(_INTS), io.cmd_tm),
    "io_manager.cmd_dut": (st.tuples(_TEXT), io.cmd_dut),
    "lpm01a.encode": (st.tuples(_TEXT), lpm.encode),
    "lpm01a.format_millivolts": (st.tuples(_FLOATS), lpm.format_millivolts),
    "lpm01a.freq_token": (st.tuples(_FLOATS), lpm.freq_token),
    "lpm01a.set_format": (st.tuples(_TEXT), lambda name: lpm.Lpm01aDecoder().set_format(name)),
    "ppk2.encode": (st.tuples(st.sampled_from(list(ppk2.Cmd)), st.lists(_INTS, max_size=5)),
                    lambda cmd, args: ppk2.encode(cmd, *args)),
    "ppk2.regulator_set": (st.tuples(_INTS), ppk2.regulator_set),
    "otii.encode": (st.tuples(st.dictionaries(st.text(max_size=5), _JSON, max_size=4)),
                    otii.encode),
}


@pytest.mark.parametrize("name", list(ENCODERS))
@FUZZ
@given(data=st.data())
def test_encoders_refuse_bad_values_with_typed_errors(name: str, data: st.DataObject) -> None:
    args_strategy, encode = ENCODERS[name]
    args = data.draw(args_strategy, label="args")
    _only_typed(lambda: encode(*args), True)


# -- JSON-level fuzz of the Otii channel data (numbers json can carry but floats cannot) ----------
@FUZZ
@given(data=_JSON, kind=st.sampled_from(["analog", "digital"]))
def test_otii_channel_data_gives_only_typed_errors(data: Any, kind: str) -> None:
    for body in (data, {"data_type": kind, "timestamp": data, "interval": 1e-3, "values": data},
                 {"data_type": kind, "values": [{"timestamp": data, "value": True}]}):
        _only_typed(lambda b=body: otii.analog_block(b), True)
        _only_typed(lambda b=body: otii.digital_events(b), True)



# -- what the fuzzers found: each raised an untyped error before its fix ---------------------------
# (the channel-list cases marked "review" were found reading that fix; the huge range would have
# built a list of 10**9 ints)
_DIGITS = "9" * 5000  # more digits than int() converts
_FOUND: dict[str, tuple[Callable[[], object], str]] = {
    "scpi.decode_block '#²' header": (lambda: scpi.decode_block(b"#\xb2ab"),
                                      r"SCPI block header: b'#\\xb2' is not '#' and a digit count"),
    "scpi.BlockDecoder '#²' header": (lambda: scpi.BlockDecoder().feed(b"#\xb210"),
                                      r"b'#\\xb2' is not '#' and a digit count"),
    "scpi.parse_channel_list 5000 digits": (
        lambda: scpi.parse_channel_list(f"(@{_DIGITS}1)"), r"is not a channel or a range"),
    "scpi.parse_channel_list empty range (review)": (lambda: scpi.parse_channel_list("(@:)"),
                                            r"':' is not a channel or a range"),
    "scpi.parse_channel_list two colons (review)": (lambda: scpi.parse_channel_list("(@1:2:3)"),
                                           r"'1:2:3' is not a channel or a range"),
    "scpi.parse_channel_list huge range (review)": (
        lambda: scpi.parse_channel_list("(@1:999999999)"), r"spans more than 10000 channels"),
    "scpi.parse_error 5000-digit code": (lambda: scpi.parse_error(f'{_DIGITS},"x"'),
                                         r"not a SCPI error-queue reply"),
    "scpi.format_number nan": (lambda: scpi.format_number(math.nan),
                               r"nan is not a number an instrument can be sent"),
    "scpi.format_number inf": (lambda: scpi.format_number(-math.inf),
                               r"-inf is not a number an instrument can be sent"),
    "ppk2.split_words 5 bytes": (lambda: ppk2.split_words(bytes(5)),
                                 r"5 bytes is not whole 4-byte words"),
    "ppk2.encode byte -1": (lambda: ppk2.encode(ppk2.Cmd.DEVICE_RUNNING_SET, -1),
                            r"DEVICE_RUNNING_SET: argument bytes must be 0..255, got \(-1,\)"),
    "ppk2.encode byte 256": (lambda: ppk2.encode(ppk2.Cmd.REGULATOR_SET, 256, 0),
                             r"REGULATOR_SET: argument bytes must be 0..255"),
    "otii.decode nested 3000 deep": (lambda: otii.decode(b"[" * 3000), r"otii: not JSON"),
    # Python 3.11's json gives up on it (RecursionError: "not JSON"); 3.13's parses it, into a
    # list (no "type"): either way the rig's typed error, never the RecursionError.
    "otii.MessageSplitter nested 3000 deep": (
        lambda: otii.MessageSplitter().feed(b"[" * 3000 + b"]" * 3000 + b"\r\n"),
        r"otii: (not JSON|a message without a type): b'\[\[\["),
    "otii.analog_block timestamp 1e400": (
        lambda: otii.analog_block(otii.decode(
            b'{"type":"response","data":{"data_type":"analog","timestamp":1' + b"0" * 400
            + b',"interval":0.001,"values":[1.0]}}')["data"]),
        r"otii: bad analog channel data \(int too large to convert to float\)"),
    "otii.analog_block value 1e400": (
        lambda: otii.analog_block({"data_type": "analog", "timestamp": 0, "interval": 1e-3,
                                   "values": [1.0, 10**400]}),
        r"otii: bad analog channel data"),
    "otii.digital_events timestamp 1e400": (
        lambda: otii.digital_events({"data_type": "digital",
                                     "values": [{"timestamp": 10**400, "value": True}]}),
        r"otii: bad digital channel data \(int too large to convert to float\)"),
    "otii.encode inf": (lambda: otii.encode(otii.request("set", "1", {"value": math.inf})),
                        r"otii: message 'set' cannot be sent \(Out of range float values"),
    "lpm01a.format_millivolts 1.8e305": (lambda: lpm.format_millivolts(1.8e305),
                                         r"LPM01A: 1.8e\+305 is not a supply voltage"),
}


@pytest.mark.parametrize("name", list(_FOUND))
def test_found_inputs_raise_the_typed_error_with_what_was_wrong(name: str) -> None:
    call, message = _FOUND[name]
    with pytest.raises(ProtocolError, match=message):
        call()
