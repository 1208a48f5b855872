"""DutClient and CRC-checked result lines (rig extension ``rcrc``), against a scripted DUT:
a corrupted result is asked again (at most `ASK_AGAIN` times), then a typed error; plain
firmware as before."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.dut.client import ASK_AGAIN, ResultError
from drivers.errors import DeviceError
from protocols.dut.codec import result_line_with_crc

from .test_dut_client import (
    BANNER_PERF,
    CAPS_PLAIN,
    CAPS_QUBO,
    QRESULT,
    QUBO_TERMS,
    booted,
    qload,
)

CAPS_RCRC = (b"caps%", b"m-timestamp-mode-performance\r\nm-caps-[bload,rcrc]\r\nm-ready\r\n")
CAPS_BLOAD = (b"caps%", b"m-timestamp-mode-performance\r\nm-caps-[bload]\r\nm-ready\r\n")
SCORES = "m-results-[0.012,0.980,0.008]"
GOOD = result_line_with_crc(SCORES).encode()
#: One digit changed on the line: 0.980 -> 0.986, the CRC is the one sent.
CORRUPTED = GOOD.replace(b"0.980", b"0.986")
INFER_HEAD = (b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-1\r\nm-lap-us-100\r\n"
              b"m-lap-us-12600\r\nm-infer-done\r\n")


def infer_reply(result_line: bytes) -> bytes:
    return INFER_HEAD + result_line + b"\r\nm-ready\r\n"


def results_reply(result_line: bytes) -> bytes:
    return result_line + b"\r\nm-ready\r\n"


def test_a_corrupted_result_is_asked_again_and_the_intact_one_taken() -> None:
    client, transport = booted([
        CAPS_RCRC,
        (b"infer 1 0%", infer_reply(CORRUPTED)),
        (b"results%", results_reply(GOOD)),
    ], banner=BANNER_PERF)
    assert client.negotiate() == {"bload", "rcrc"} and client.results_checked
    result = client.infer(1)
    np.testing.assert_array_equal(result.results, [0.012, 0.980, 0.008])
    assert result.checked and result.elapsed_us == 12_500
    assert client.stats.result_retries == 1
    assert transport.done()


def test_a_result_corrupted_every_time_is_a_typed_error_naming_the_command() -> None:
    client, transport = booted([
        CAPS_RCRC,
        (b"infer 1 0%", infer_reply(CORRUPTED)),
        *[(b"results%", results_reply(GOOD.replace(b"0.012", b"0.017")))] * ASK_AGAIN,
    ], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(ResultError, match=rf"result of 'infer 1 0' failed verification "
                       rf"{ASK_AGAIN + 1} times: CRC mismatch.*then, asked again with 'results': "
                       r"CRC mismatch") as exc:
        client.infer(1)
    assert isinstance(exc.value, DeviceError) and exc.value.command == "infer 1 0"
    assert "cable" in exc.value.hint
    assert transport.done()  # exactly ASK_AGAIN re-asks


@pytest.mark.parametrize("first", [
    SCORES.encode(),  # plain: the DUT forgot rcrc (a reboot unseen), or a line split by noise
    GOOD.replace(b"-crc-", b"-crX-"),  # the suffix corrupted: no result line at all
    b"m-resul\xf4s-[0.012,0.980,0.008]-crc-" + GOOD[-8:],
])
def test_a_missing_or_unchecked_result_is_asked_again(first: bytes) -> None:
    client, transport = booted([
        CAPS_RCRC, (b"infer 1 0%", infer_reply(first)), (b"results%", results_reply(GOOD)),
    ], banner=BANNER_PERF)
    client.negotiate()
    assert client.infer(1).checked
    assert transport.done()


def test_results_command_is_checked_too() -> None:
    client, _ = booted([
        CAPS_RCRC, (b"results%", results_reply(CORRUPTED)),
        *[(b"results%", results_reply(SCORES.encode()))] * ASK_AGAIN,
    ], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(ResultError, match="without its CRC"):
        client.results()


@pytest.mark.parametrize("caps", [CAPS_PLAIN, CAPS_BLOAD])
def test_a_dut_without_rcrc_is_driven_as_before_results_unchecked(caps) -> None:
    client, transport = booted([
        caps, (b"infer 1 0%", infer_reply(SCORES.encode())),
        (b"results%", results_reply(SCORES.replace("0.980", "0.986").encode())),
    ], banner=BANNER_PERF)
    client.negotiate()
    assert not client.results_checked
    result = client.infer(1)
    np.testing.assert_array_equal(result.results, [0.012, 0.980, 0.008])
    assert result.checked is False and client.stats.result_retries == 0
    # a corrupted digit from plain firmware cannot be seen: taken as sent (results unchecked)
    np.testing.assert_array_equal(client.results(), [0.012, 0.986, 0.008])
    assert transport.done()


def test_a_crc_line_that_fails_is_asked_again_even_when_caps_was_garbled() -> None:
    # The caps reply lost `rcrc` on the line, but the DUT does send CRCs: a mismatch is still
    # never a result.
    client, transport = booted([
        CAPS_BLOAD, (b"infer 1 0%", infer_reply(CORRUPTED)), (b"results%", results_reply(GOOD)),
    ], banner=BANNER_PERF)
    client.negotiate()
    assert client.infer(1).checked
    assert transport.done()


CAPS_QUBO_RCRC = (b"caps%",
                  b"m-timestamp-mode-performance\r\nm-caps-[bload,qubo,rcrc]\r\nm-ready\r\n")


def checked_qresult(reply: bytes = QRESULT) -> bytes:
    lines = reply.decode().split("\r\n")
    return "\r\n".join(result_line_with_crc(x) if x.startswith("m-q") else x
                       for x in lines).encode()


@pytest.mark.parametrize("first", [
    checked_qresult().replace(b"m-qstate-0-[15]", b"m-qstate-0-[17]"),  # the state's bit 1
    checked_qresult().replace(b"m-qbest-cost--3-", b"m-qbest-cost--2-"),
    checked_qresult().replace(b"m-qimprove-95--2-", b"m-qimprove-96--2-"),
    QRESULT,  # lines without their CRC
])
def test_a_corrupted_qubo_result_is_asked_again(first: bytes) -> None:
    client, transport = booted([
        CAPS_QUBO_RCRC, *qload(), (b"qresult%", first), (b"qresult%", checked_qresult()),
    ], banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    result = client.qubo_result()
    assert result.best_cost == -3 and result.best_time_us == 420
    np.testing.assert_array_equal(result.state, [True, False, True, False, True])
    assert result.improvements == [(10, -1), (95, -2), (420, -3)]
    assert client.stats.result_retries == 1 and transport.done()


def test_a_lost_state_line_is_asked_again_then_a_typed_error() -> None:
    lost = checked_qresult().replace(checked_qresult().split(b"\r\n")[2] + b"\r\n", b"")
    client, _ = booted([CAPS_QUBO_RCRC, *qload(), *[(b"qresult%", lost)] * (ASK_AGAIN + 1)],
                       banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    with pytest.raises(ResultError, match="state lines lost"):
        client.qubo_result()


def test_a_qubo_dut_without_rcrc_is_driven_as_before() -> None:
    client, transport = booted([CAPS_QUBO, *qload(), (b"qresult%", QRESULT)],
                               banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    assert client.qubo_result().best_cost == -3
    assert transport.done()


CAPS_QUBO_POWER_RCRC = (
    b"caps%", b"m-timestamp-mode-performance\r\nm-caps-[bload,qubo,rcrc,power]\r\nm-ready\r\n")
POWER_LINES = b"m-qload-us-215301\r\nm-qsteps-66\r\nm-qenergy-uj-62500\r\nm-qpower-uw-1250000\r\n"
QRESULT_POWER = QRESULT.replace(b"m-ready\r\n", POWER_LINES + b"m-ready\r\n")


@pytest.mark.parametrize("first", [
    checked_qresult(QRESULT_POWER).replace(b"m-qpower-uw-1250000-", b"m-qpower-uw-1750000-"),
    checked_qresult(QRESULT_POWER).replace(b"m-qenergy-uj-62500-", b"m-qenergy-uj-92500-"),
    checked_qresult(QRESULT_POWER).replace(b"m-qsteps-66-", b"m-qsteps-67-"),
    # a power line whose prefix was hit is a plain message: lost, and a power DUT must send it
    checked_qresult(QRESULT_POWER).replace(b"m-qpower-uw-", b"m-qpowe\xf2-uw-"),
    QRESULT_POWER,  # lines without their CRC
])
def test_the_dut_s_power_and_steps_are_checked_results_too(first: bytes) -> None:
    """A Loihi 2 solve's own power and energy are results the rig records: a corrupted or lost
    line is asked again, never taken."""
    client, transport = booted([
        CAPS_QUBO_POWER_RCRC, *qload(), (b"qresult%", first),
        (b"qresult%", checked_qresult(QRESULT_POWER)),
    ], banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    result = client.qubo_result()
    assert (result.load_us, result.steps, result.energy_uj, result.power_uw) == (
        215301, 66, 62500, 1250000)
    assert client.stats.result_retries == 1 and transport.done()
