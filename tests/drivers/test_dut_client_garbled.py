"""Replies garbled on the DUT->host line (issue 39): with 0.4 % of the DUT's bytes flipped every
run ended with exit 2 ("never said m-ready", "printed 1 m-lap-us lines ... expected 2",
"expected InferStart line", "did not finish 'caps'"), and a lost line feed cost a 30 s wait.

An idempotent exchange that comes back garbled is asked again, at most `ASK_AGAIN` more times,
each counted (`DutStats.asked_again`) and said (`on_retry`); an ``infer`` is never sent twice
by the client: a reply that shows the DUT ran it but cannot be read is a typed `GarbledReply`
(its caller re-runs the timed run). A lost line end or a corrupted prompt ends the reply where
the protocol says, not at the deadline."""

from __future__ import annotations

import time
import zlib

import numpy as np
import pytest

from drivers.dut.client import ASK_AGAIN, DutClient, GarbledReply, LoadResult, ResultError
from drivers.errors import DeviceError, DutError
from protocols.dut.codec import result_line_with_crc

from .scripted import ScriptedTransport
from .test_dut_client import (
    BANNER_ENERGY,
    BANNER_PERF,
    CAPS_BLOAD,
    CAPS_DBCRC,
    CAPS_DBCRC_ONLY,
    bload,
    booted,
    hex_load,
)

NAME = (b"name%", b"m-name-dut-[x]\r\nm-ready\r\n")
PROFILE = (b"profile%", b"m-profile-[ULPMark for tinyML Firmware V0.0.1]\r\nm-model-[ic01]\r\n"
           b"m-ready\r\n")
CAPS_RCRC = (b"caps%", b"m-timestamp-mode-performance\r\nm-caps-[bload,rcrc]\r\nm-ready\r\n")
CAPS_ELAP = (b"caps%", b"m-timestamp-mode-energy\r\nm-caps-[bload,dbcrc,rcrc,elap]\r\n"
             b"m-ready\r\n")
GOOD = result_line_with_crc("m-results-[0.012,0.980,0.008]").encode()
CORRUPTED = GOOD.replace(b"0.980", b"0.986")
HEAD = (b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-1\r\nm-lap-us-100\r\n"
        b"m-lap-us-12600\r\nm-infer-done\r\n")


def infer_reply(head: bytes = HEAD, result: bytes = GOOD, end: bytes = b"\r\nm-ready\r\n"
                ) -> bytes:
    return head + result + end


# -- name, profile: asked again ---------------------------------------------------------------
@pytest.mark.parametrize("garbled", [
    b"m-nameMdut-[x]\r\nm-ready\r\n",  # a flipped '-': an m- line the rig does not know
    b"e-name-dut-[x]\r\nm-ready\r\n",  # 'm' -> 'e': no refusal, an e- line without brackets
    b"m-name-dut-[x\xdd\r\nm-ready\r\n",  # a bracket flipped into invalid UTF-8
])
def test_a_garbled_name_is_asked_again_and_said(garbled: bytes) -> None:
    client, transport = booted([(b"name%", garbled), NAME, PROFILE])
    said: list[str] = []
    client.on_retry = said.append
    assert client.identify().name == "dut"
    assert client.stats.asked_again == {"name": 1}
    assert len(said) == 1 and "'name'" in said[0] and "garbled" in said[0]
    assert transport.done()


def test_a_garbled_profile_is_asked_again() -> None:
    garbled = (b"profile%", PROFILE[1].replace(b"m-model-", b"m-mode\xec-"))
    client, transport = booted([NAME, garbled, PROFILE])
    assert client.identify().model == "ic01"
    assert client.stats.asked_again == {"profile": 1}
    assert transport.done()


def test_a_reply_garbled_every_time_ends_naming_the_command_and_the_count() -> None:
    garbled = (b"name%", b"m-nameMdut-[x]\r\nm-ready\r\n")
    client, transport = booted([garbled] * (ASK_AGAIN + 1))
    with pytest.raises(DeviceError, match=rf"'name' came back garbled {ASK_AGAIN + 1} times"):
        client.identify()
    assert transport.done()


def test_an_intact_reply_without_the_line_is_not_asked_again() -> None:
    # Nothing garbled: the firmware does not speak the protocol; an error at once, as before.
    client, transport = booted([(b"name%", b"m-ready\r\n")])
    with pytest.raises(DeviceError, match="expected Name line"):
        client.identify()
    assert transport.done()


# -- a lost line end, a corrupted prompt: no deadline waited -----------------------------------
@pytest.mark.parametrize("reply", [
    b"m-name-dut-[x]\r\nm-ready\r\x0b",  # the prompt's line feed flipped
    b"m-name-dut-[x]\r\x4am-ready\r\n",  # the name line's line feed flipped
    b"m-name-dut-[x]\r\nm-reaDy\r\n",  # the prompt itself
    b"m-name-dut-[x]\r\nm-ready-\n",  # the prompt's CR
])
def test_a_lost_line_end_or_a_garbled_prompt_ends_the_reply_at_once(reply: bytes) -> None:
    client, transport = booted([(b"name%", reply), PROFILE])
    start = time.monotonic()
    assert client.identify().name == "dut"
    assert time.monotonic() - start < 1.0  # the deadline is 5 s
    assert transport.done()


def test_a_prompt_lost_beyond_recognition_is_asked_again_after_the_deadline() -> None:
    # Three bytes of m-ready hit: the deadline is the only end; the DUT answered, so it is
    # asked again rather than the run ended.
    client, transport = booted([(b"name%", b"m-name-dut-[x]\r\nm-r#a#\xe1\r\n"), NAME, PROFILE])
    client.command_timeout_s = 0.2
    assert client.identify().name == "dut"
    assert client.stats.asked_again == {"name": 1}
    assert transport.done()


def test_an_infer_whose_prompt_was_lost_after_its_reply_is_garbled_not_an_end() -> None:
    client, transport = booted([CAPS_RCRC, (b"infer 1 0%", infer_reply(end=b"\r\nm-#e#d#\r\n"))],
                               banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(GarbledReply, match="m-ready") as exc:
        client.infer(1, timeout_s=0.3)
    assert exc.value.ran  # its lines came: the procedure re-runs it
    assert transport.done()


def test_a_result_line_s_lost_line_feed_costs_no_wait() -> None:
    client, transport = booted([CAPS_RCRC, (b"infer 1 0%", infer_reply(end=b"\r*m-ready\r\n"))],
                               banner=BANNER_PERF)
    client.negotiate()
    start = time.monotonic()
    result = client.infer(1, timeout_s=30.0)
    assert time.monotonic() - start < 1.0
    assert result.checked and result.elapsed_us == 12_500
    assert transport.done()


# -- the boot banner ---------------------------------------------------------------------------
def test_a_banner_whose_mode_line_is_garbled_learns_the_mode_from_caps() -> None:
    banner = BANNER_ENERGY.replace(b"energy", b"enerfy")
    transport = ScriptedTransport([CAPS_ELAP], initial=banner)
    client = DutClient(transport)
    assert client.wait_for_boot(timeout_s=1.0) == "energy"
    assert client.timestamp_mode == "energy"
    assert client.capabilities == {"bload", "dbcrc", "rcrc", "elap"}
    assert transport.done()


def test_a_banner_whose_init_line_is_garbled_is_still_a_boot() -> None:
    transport = ScriptedTransport([], initial=BANNER_PERF.replace(b"init-done", b"init-dome"))
    assert DutClient(transport).wait_for_boot(timeout_s=1.0) == "performance"


def test_a_banner_whose_two_lines_are_both_garbled_is_still_a_boot() -> None:
    # One flip in each: the mode line unreadable, m-init-done one character off.
    banner = BANNER_ENERGY.replace(b"energy", b"ene\xf2gy").replace(b"init-done", b"init%done")
    transport = ScriptedTransport([CAPS_ELAP], initial=banner)
    assert DutClient(transport).wait_for_boot(timeout_s=1.0) == "energy"
    assert transport.done()


def test_a_garbled_banner_of_firmware_that_cannot_say_its_mode_is_named() -> None:
    banner = BANNER_ENERGY.replace(b"energy", b"enerfy")
    plain = (b"caps%", b"e-[Unknown command: caps]\r\nm-ready\r\n")
    client = DutClient(ScriptedTransport([plain], initial=banner))
    with pytest.raises(DeviceError, match=r"boot banner came back garbled.*enerfy"):
        client.wait_for_boot(timeout_s=1.0)


# -- infer: never sent twice by the client -----------------------------------------------------
@pytest.mark.parametrize(("head", "what"), [
    (HEAD.replace(b"m-infer-start-1", b"m-infer-stqrt-1"), "m-infer-start"),
    (HEAD.replace(b"m-infer-done", b"e-infer-done"), "m-infer-done"),  # not a refusal
    (HEAD.replace(b"m-warmup-start-0", b"m-warmup-start-8"), "m-warmup-start"),  # a digit
    (HEAD.replace(b"m-lap-us-100", b"m-lap-us-1\xb00"), "m-lap-us"),  # plain lap lines: no re-read
])
def test_an_infer_reply_garbled_where_it_cannot_be_asked_again_is_a_typed_error(
        head: bytes, what: str) -> None:
    client, transport = booted([CAPS_RCRC, (b"infer 1 0%", infer_reply(head))],
                               banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(GarbledReply, match=what) as exc:
        client.infer(1)
    assert exc.value.ran and exc.value.command == "infer 1 0"
    assert isinstance(exc.value, DeviceError)
    assert transport.done()  # the client did not send infer again


def test_an_infer_refusal_is_still_a_refusal() -> None:
    client, transport = booted([
        CAPS_RCRC,
        (b"infer 1 0%", b"e-[Input is 0 bytes, the model needs 1000]\r\nm-ready\r\n"),
    ], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(DutError, match="Input is 0 bytes"):
        client.infer(1)
    assert transport.done()


def test_an_infer_reply_that_shows_no_run_is_not_taken_for_one() -> None:
    client, transport = booted([CAPS_RCRC, (b"infer 1 0%", b"m-[Input is 0 bytes]\r\nm-ready\r\n")],
                               banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(GarbledReply) as exc:
        client.infer(1)
    assert not exc.value.ran
    assert transport.done()


def test_a_result_is_asked_again_up_to_the_bound() -> None:
    results = [(b"results%", CORRUPTED + b"\r\nm-ready\r\n")] * (ASK_AGAIN - 1)
    client, transport = booted([
        CAPS_RCRC, (b"infer 1 0%", infer_reply(result=CORRUPTED)), *results,
        (b"results%", GOOD + b"\r\nm-ready\r\n"),
    ], banner=BANNER_PERF)
    client.negotiate()
    result = client.infer(1)
    np.testing.assert_array_equal(result.results, [0.012, 0.980, 0.008])
    assert client.stats.result_retries == ASK_AGAIN
    assert client.stats.asked_again == {"results": ASK_AGAIN}
    assert transport.done()
    client, transport = booted([
        CAPS_RCRC, (b"infer 1 0%", infer_reply(result=CORRUPTED)),
        *[(b"results%", CORRUPTED + b"\r\nm-ready\r\n")] * ASK_AGAIN,
    ], banner=BANNER_PERF)
    client.negotiate()
    with pytest.raises(ResultError, match=rf"failed verification {ASK_AGAIN + 1} times"):
        client.infer(1)
    assert transport.done()


# -- timestamp (performance mode): a lap line is a timestamp now --------------------------------
def test_a_garbled_timestamp_lap_line_is_asked_again_in_performance_mode() -> None:
    client, transport = booted([
        (b"timestamp%", b"m-lap-us-12\xb04\r\nm-ready\r\n"),
        (b"timestamp%", b"m-lap-us-12444\r\nm-ready\r\n"),
    ], banner=BANNER_PERF)
    assert client.timestamp() == 12444
    assert client.stats.asked_again == {"timestamp": 1}
    assert transport.done()


# -- downloads: the check is asked again, not the download -------------------------------------
def test_a_garbled_bload_acknowledgement_is_checked_by_db_crc() -> None:
    data = bytes(range(200))
    crc = zlib.crc32(data)
    client, transport = booted([
        CAPS_DBCRC, *bload(data, reply=b"m-bload-dXne-%08x\r\n" % crc),
        (b"db crc%", b"m-db-crc-200-%08x\r\nm-ready\r\n" % crc),
    ])
    assert client.load(data) == LoadResult(200, "binary", 1, "crc")
    assert client.stats.retries == 0 and client.stats.asked_again == {"bload": 1}
    assert transport.done()


def test_a_garbled_db_crc_reply_is_asked_again() -> None:
    data = bytes(range(40))
    crc = zlib.crc32(data)
    script = hex_load(data, crc=True)
    good = script[-1]
    script[-1] = (b"db crc%", b"m-db-crX-40-%08x\r\nm-ready\r\n" % crc)
    client, transport = booted([CAPS_DBCRC_ONLY, *script, good])
    assert client.load(data) == LoadResult(40, "hex", 1, "crc")
    assert client.stats.asked_again == {"db crc": 1}
    assert transport.done()


def test_a_garbled_db_load_reply_is_asked_again() -> None:
    data = bytes(range(40))
    garbled = (b"db load 40%", b"m-[Expectinf 40 bytes]\r\nm-ready\r\n")
    client, transport = booted([CAPS_DBCRC_ONLY, garbled, garbled, *hex_load(data, crc=True)])
    assert client.load(data).attempts == 1
    assert client.stats.asked_again == {"db load": 2}
    assert transport.done()


def test_garbled_download_replies_redo_the_download_within_the_bound() -> None:
    # A reply that cannot be read is no failed verification: the download is done again up to
    # ASK_AGAIN more times (a verification that fails is retried once, as before). Here the
    # ready line came garbled twice: the DUT waited for data that never came and said so.
    data = bytes(range(200))
    crc = zlib.crc32(data)
    garbled = (b"bload 200 %08x%%" % crc, b"m-bload-reXdy-200\r\ne-[bload timeout: got 0 of 200 "
               b"bytes]\r\nm-ready\r\n")
    resync = (b"name%", b"m-name-dut-[x]\r\nm-ready\r\n")
    client, transport = booted([CAPS_BLOAD, garbled, resync, garbled, resync, *bload(data)])
    assert client.load(data).attempts == 3
    assert client.stats.asked_again == {"download": 2} and client.stats.retries == 0
    assert data not in transport.written[:5]  # never sent unannounced
    assert transport.done()


def test_a_db_crc_that_differs_is_asked_again_until_said_twice_alike() -> None:
    data = bytes(range(40))
    crc = zlib.crc32(data)
    script = hex_load(data, crc=True)
    good = script[-1]
    script[-1] = (b"db crc%", b"m-db-crc-40-%08x\r\nm-ready\r\n" % (crc ^ 0x10))  # a digit hit
    client, transport = booted([CAPS_DBCRC_ONLY, *script, good])
    assert client.load(data) == LoadResult(40, "hex", 1, "crc")
    assert client.stats.asked_again == {"db crc": 1} and client.stats.retries == 0
    assert transport.done()
