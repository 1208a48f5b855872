"""The optional `qresult` lines of SPEC.md: the load before the clock, the steps run, and the
DUT's own energy and power of a solve (the Loihi 2 profiler; caps `power`/`simpower`)."""

from __future__ import annotations

import pytest

from protocols.dut.codec import (
    CAP_POWER,
    CAP_SIMPOWER,
    DutDecoder,
    Message,
    Qenergy,
    QloadDone,
    QloadReady,
    QloadUs,
    Qpower,
    Qsteps,
)


@pytest.mark.parametrize(("line", "event"), [
    (b"m-qload-us-215301", QloadUs(215301)),
    (b"m-qsteps-66", Qsteps(66)),
    (b"m-qenergy-uj-62500", Qenergy(62500)),
    (b"m-qpower-uw-1250000", Qpower(1250000)),
    (b"m-qpower-uw-0", Qpower(0)),
    # The load line shares its head with the transfer's lines: each keeps its own event.
    (b"m-qload-ready-44", QloadReady(44)),
    (b"m-qload-done-100-250", QloadDone(100, 250)),
    # Not numbers (negative, fractional, too long): plain messages, never a crash.
    (b"m-qpower-uw--5", Message("qpower-uw--5")),
    (b"m-qenergy-uj-1.5", Message("qenergy-uj-1.5")),
    (b"m-qsteps-" + b"9" * 21, Message("qsteps-" + "9" * 21)),
])
def test_optional_qresult_lines(line: bytes, event: object) -> None:
    assert DutDecoder().feed(line + b"\r\n") == [event]


def test_power_capability_words() -> None:
    assert (CAP_POWER, CAP_SIMPOWER) == ("power", "simpower")
