"""A ``caps`` reply garbled on the line never downgrades the run (issue 39): one flipped bit
turned ``rcrc`` into ``scrc`` and the run went on with a hex download read back and its results
unchecked, as if the firmware were plain MLPerf Tiny. ``caps`` is idempotent: a reply that does
not parse, names a word the rig does not know (unless the DUT says it twice alike), or whose
mode disagrees with the boot banner's is asked again, a bounded number of times, and each
re-ask is counted and said."""

from __future__ import annotations

import pytest

from drivers.dut.client import ASK_AGAIN
from drivers.errors import DeviceError, DutError

from .test_dut_client import BANNER_ENERGY, CAPS_PLAIN, booted

CAPS = b"m-timestamp-mode-energy\r\nm-caps-[bload,dbcrc,rcrc,elap]\r\nm-ready\r\n"
WORDS = {"bload", "dbcrc", "rcrc", "elap"}


def caps(reply: bytes) -> tuple[bytes, bytes]:
    return (b"caps%", reply)


def test_a_capability_word_garbled_on_the_line_is_asked_again() -> None:
    client, transport = booted([caps(CAPS.replace(b"rcrc", b"scrc")), caps(CAPS)],
                               banner=BANNER_ENERGY)
    said: list[str] = []
    client.on_retry = said.append
    assert client.negotiate() == WORDS
    assert client.results_checked  # not downgraded to "results unchecked"
    assert client.stats.asked_again == {"caps": 1}
    assert len(said) == 1 and "'caps'" in said[0] and "scrc" in said[0]
    assert transport.done()


@pytest.mark.parametrize("garbled", [
    CAPS.replace(b"m-caps-[", b"m-caqs-["),  # no caps line at all: that is not plain firmware
    CAPS.replace(b"m-caps-", b"e-caps-"),  # 'm' -> 'e': an e- line without brackets
    CAPS.replace(b"energy", b"enerfy"),  # the mode line unreadable
    CAPS.replace(b",rcrc", b".rcrc"),  # two words run together
    CAPS.replace(b"caps-[bload", b"caps-[bl\xefad"),  # not even ASCII
    # a mode that disagrees with the boot banner's
    b"m-timestamp-mode-performance\r\nm-caps-[bload,dbcrc,rcrc]\r\nm-ready\r\n",
])
def test_a_caps_reply_that_does_not_parse_or_disagrees_with_the_banner_is_asked_again(
        garbled: bytes) -> None:
    client, transport = booted([caps(garbled), caps(CAPS)], banner=BANNER_ENERGY)
    assert client.negotiate() == WORDS
    assert client.timestamp_mode == "energy"
    assert client.stats.asked_again == {"caps": 1}
    assert transport.done()


def test_a_garbled_refusal_of_plain_firmware_is_asked_again() -> None:
    client, transport = booted([caps(b"e-[Unknown commanf: caps]\r\nm-ready\r\n"), CAPS_PLAIN])
    assert client.negotiate() == frozenset()
    assert client.stats.asked_again == {"caps": 1}
    assert transport.done()


def test_plain_firmware_and_an_intact_reply_are_asked_once() -> None:
    client, transport = booted([CAPS_PLAIN])
    assert client.negotiate() == frozenset() and client.stats.asked_again == {}
    client, transport = booted([caps(CAPS)])
    assert client.negotiate() == WORDS and client.stats.asked_again == {}
    assert transport.done()


def test_a_word_the_rig_does_not_know_said_twice_alike_is_taken() -> None:
    newer = CAPS.replace(b"elap]", b"elap,zzz]")
    client, transport = booted([caps(newer), caps(newer)])
    assert client.negotiate() == WORDS | {"zzz"}
    assert client.stats.asked_again == {"caps": 1}
    assert transport.done()


def test_a_caps_reply_garbled_every_time_ends_with_an_error_naming_it() -> None:
    # each time another word the rig does not know: never twice alike
    garbles = [(b"rcrc", b"rcx" + bytes([ord("a") + k])) for k in range(ASK_AGAIN + 1)]
    client, transport = booted([caps(CAPS.replace(a, b)) for a, b in garbles])
    with pytest.raises(DeviceError, match=rf"'caps' came back garbled {ASK_AGAIN + 1} times"):
        client.negotiate()
    assert client.capabilities is None  # nothing guessed
    assert transport.done()


def test_a_mode_that_keeps_disagreeing_with_the_banner_is_an_error() -> None:
    perf = caps(b"m-timestamp-mode-performance\r\nm-caps-[bload]\r\nm-ready\r\n")
    client, transport = booted([perf] * (ASK_AGAIN + 1), banner=BANNER_ENERGY)
    with pytest.raises(DeviceError, match="boot banner said energy"):
        client.negotiate()
    assert transport.done()


def test_a_refusal_said_twice_alike_is_the_dut_s_word() -> None:
    # "Unknown command" garbled in its text is asked again; a refusal said twice alike is not
    # garbled: an error, as before.
    refusal = caps(b"e-[caps disabled]\r\nm-ready\r\n")
    client, transport = booted([refusal, refusal])
    with pytest.raises(DutError, match="caps disabled"):
        client.negotiate()
    assert transport.done()
