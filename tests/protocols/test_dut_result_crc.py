"""Result lines with a CRC-32 (rig extension ``rcrc``): a corrupted line is never a result.

Every single-bit error of a result line and thousands of seeded multi-byte corruptions are
decoded; none may give a result whose values differ from the ones sent. The same corruptions of
the plain line (what MLPerf Tiny firmware sends) do give wrong results: that is what the CRC is
for, and it shows that the corruption model can produce them.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from protocols.dut.codec import (
    CAP_RESULT_CRC,
    DutDecoder,
    Message,
    QbestCost,
    QbestTime,
    Qenergy,
    Qimprove,
    QloadUs,
    Qpower,
    QstateChunk,
    Qsteps,
    ResultCrcMismatch,
    Results,
    parse_line,
    result_line_with_crc,
)

SCORES = "m-results-[0.012,0.980,0.008,0.000]"
RESULT_KINDS = (Results, QbestCost, QbestTime, QstateChunk, Qimprove, QloadUs, Qsteps, Qenergy,
                Qpower)


def test_a_result_line_with_its_crc_is_a_checked_result() -> None:
    line = result_line_with_crc(SCORES)
    assert line == SCORES + "-crc-" + f"{zlib.crc32(SCORES.encode()):08x}"
    assert parse_line(line) == Results((0.012, 0.98, 0.008, 0.0), checked=True)
    # the plain line is still a result, marked unchecked (plain MLPerf Tiny firmware)
    assert parse_line(SCORES) == Results((0.012, 0.98, 0.008, 0.0), checked=False)
    assert parse_line(result_line_with_crc("m-results-[]")) == Results((), checked=True)
    assert CAP_RESULT_CRC == "rcrc"


@pytest.mark.parametrize(("plain", "event"), [
    ("m-qbest-cost--42", QbestCost(-42, checked=True)),
    ("m-qbest-time-us-420", QbestTime(420, checked=True)),
    ("m-qstate-32-[15ff]", QstateChunk(32, b"\x15\xff", checked=True)),
    ("m-qimprove-10--1", Qimprove(10, -1, checked=True)),
    ("m-qload-us-215301", QloadUs(215301, checked=True)),
    ("m-qsteps-66", Qsteps(66, checked=True)),
    ("m-qenergy-uj-62500", Qenergy(62500, checked=True)),
    ("m-qpower-uw-1250000", Qpower(1250000, checked=True)),
])
def test_qubo_result_lines_are_checked_too(plain: str, event: object) -> None:
    assert parse_line(result_line_with_crc(plain)) == event


def test_a_wrong_crc_is_a_mismatch_never_a_result() -> None:
    line = result_line_with_crc(SCORES)
    bad = line.replace("0.980", "0.986")
    event = parse_line(bad)
    assert event == ResultCrcMismatch(bad[: -len("-crc-00000000")],
                                      int(line[-8:], 16), zlib.crc32(bad[:-13].encode()))
    # invalid UTF-8 on the line is replaced on decoding: still a mismatch, not a result
    raw = line.encode().replace(b"0.980", b"0.9\xff0")
    assert isinstance(DutDecoder().feed(raw + b"\r\n")[0], ResultCrcMismatch)
    # a suffix that is not one (not 8 lowercase hex digits) leaves a message
    assert isinstance(parse_line(SCORES + "-crc-1234567"), Message)
    # only result lines carry a CRC: on another line the suffix is text
    named = result_line_with_crc("m-name-dut-[x]")
    assert parse_line(named) == Message(named[2:])


def _decoded(raw: bytes) -> list:
    return DutDecoder().feed(raw + b"\r\n")


def _wrong_results(raw_lines: list[bytes], truth: object, *, checked: bool) -> int:
    """How many corrupted lines decode to a result event (a `checked` one if asked) that
    differs from `truth`."""
    wrong = 0
    for raw in raw_lines:
        events = [e for e in _decoded(raw) if isinstance(e, RESULT_KINDS)]
        wrong += any(e != truth for e in events if e.checked or not checked)
    return wrong


def _single_bit_errors(line: str) -> list[bytes]:
    data = np.frombuffer(line.encode(), dtype=np.uint8)
    out = []
    for k in range(data.size * 8):
        flipped = data.copy()
        flipped[k // 8] ^= np.uint8(1 << (k % 8))
        out.append(flipped.tobytes())
    return out


def _seeded_corruptions(line: str, n: int, seed: int) -> list[bytes]:
    """`n` copies of `line` with 1 to 4 bytes each replaced by a random byte."""
    rng = np.random.default_rng(seed)
    data = np.frombuffer(line.encode(), dtype=np.uint8)
    out = []
    for _ in range(n):
        copy = data.copy()
        where = rng.choice(data.size, size=rng.integers(1, 5), replace=False)
        copy[where] = (copy[where] + rng.integers(1, 256, where.size)).astype(np.uint8)
        out.append(copy.tobytes())
    return out


@pytest.mark.parametrize("plain", [SCORES, "m-qbest-cost--42", "m-qstate-0-[15ff07]",
                                   "m-qimprove-95--2", "m-qbest-time-us-420",
                                   "m-qpower-uw-1250000", "m-qenergy-uj-62500"])
def test_no_corruption_of_a_checked_line_is_taken_as_a_result(plain: str) -> None:
    truth = parse_line(result_line_with_crc(plain))
    unchecked = parse_line(plain)
    checked = result_line_with_crc(plain)
    corrupted = _single_bit_errors(checked) + _seeded_corruptions(checked, 3000, seed=5)
    assert _wrong_results(corrupted, truth, checked=True) == 0
    # A byte turned into a line break can leave a plain-looking, unchecked start of the line
    # ("m-qbest-cost--4"): that is why a client that negotiated rcrc takes checked ones only.
    # The same errors on the plain line: some decode to a wrong value, taken as sent.
    plain_corrupted = _single_bit_errors(plain) + _seeded_corruptions(plain, 3000, seed=5)
    assert _wrong_results(plain_corrupted, unchecked, checked=False) > 0
