"""Property tests of the PPK2 codec: sample streams split anywhere decode to the same words, and
no metadata text, however damaged, raises anything but `ProtocolError`."""

from __future__ import annotations

import contextlib

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import ProtocolError
from protocols.ppk2 import (
    ADC_MAX,
    RANGES,
    Calibration,
    WordAssembler,
    counter_gaps,
    encode_words,
    parse_metadata,
    split_words,
)

CALIBRATION = Calibration(o=(60.5, 70.25, 65.0, 72.0, 68.0), gi=(0.98, 1.01, 0.99, 1.0, 1.0),
                          extra={"calibrated": "1", "hw": "9173"})

samples = st.lists(st.tuples(st.integers(0, ADC_MAX), st.integers(0, RANGES - 1),
                             st.integers(0, 255)), min_size=1, max_size=200)


@given(samples, st.lists(st.integers(0, 1000), max_size=10))
def test_a_stream_split_anywhere_decodes_to_the_same_words(values, cuts) -> None:
    adc, rng, logic = (np.array(col) for col in zip(*values, strict=True))
    counter = np.arange(len(adc)) % 64
    raw = encode_words(adc, rng, counter, logic)
    points = sorted({min(c, len(raw)) for c in cuts})
    assembler, whole = WordAssembler(), b""
    for a, b in zip([0, *points], [*points, len(raw)], strict=True):
        whole += assembler.feed(raw[a:b])
    assert assembler.pending == 0
    w = split_words(whole)
    assert w.adc.tolist() == adc.tolist() and w.rng.tolist() == rng.tolist()
    assert w.logic.tolist() == logic.tolist()
    assert counter_gaps(w.counter, None).sum() == 0


@given(st.integers(1, 63), st.integers(0, 63), st.integers(2, 50))
def test_a_loss_shorter_than_64_is_counted_exactly(lost, start, n) -> None:
    counter = (start + np.r_[np.arange(n), n + lost + np.arange(n)]) % 64
    gaps = counter_gaps(counter, None)
    assert gaps.sum() == lost and gaps[n] == lost


@given(st.text(max_size=400))
def test_damaged_metadata_is_a_protocol_error_or_a_calibration(text) -> None:
    with contextlib.suppress(ProtocolError):
        parse_metadata(text)


@given(st.integers(1, len(CALIBRATION.to_metadata()) - 1))
def test_metadata_cut_short_is_refused(cut) -> None:
    text = CALIBRATION.to_metadata()[:cut].decode()
    if "END" in text:
        return  # cut after END: complete
    try:
        parse_metadata(text)
    except ProtocolError as exc:
        assert "END" in exc.message
    else:
        raise AssertionError("metadata without END was taken")
