"""DutClient conversations against a scripted transport: exact bytes out, canned replies in."""

from __future__ import annotations

import struct
import zlib

import numpy as np
import pytest

from drivers.dut.client import (
    DownloadError,
    DutClient,
    DutInfo,
    DutStats,
    GarbledReply,
    LoadResult,
)
from drivers.errors import DeviceError, DeviceTimeout, DutError
from protocols.errors import ProtocolError

from .scripted import ScriptedTransport

BANNER_ENERGY = b"m-timestamp-mode-energy\r\nm-init-done\r\nm-ready\r\n"
BANNER_PERF = b"m-timestamp-mode-performance\r\nm-init-done\r\nm-ready\r\n"


def booted(script: list[tuple[bytes, bytes]], banner: bytes = BANNER_ENERGY):
    transport = ScriptedTransport(script, initial=banner)
    client = DutClient(transport)
    client.wait_for_boot(timeout_s=1.0)
    return client, transport


def test_boot_banner_gives_the_mode() -> None:
    transport = ScriptedTransport([], initial=b"\x00garbage\r\n" + BANNER_PERF)
    client = DutClient(transport)
    assert client.timestamp_mode is None
    assert client.wait_for_boot(timeout_s=1.0) == "performance"
    assert client.timestamp_mode == "performance"
    client.require_mode("performance")
    with pytest.raises(DeviceError, match=r"performance timestamp mode.*needs energy") as exc:
        client.require_mode("energy")
    assert "rebuild the firmware for energy" in exc.value.hint


def test_ready_without_banner_is_not_a_boot() -> None:
    client = DutClient(ScriptedTransport([], initial=b"m-ready\r\n"))
    # m-ready came: the message names the banner line that did not (tests/drivers/
    # test_dut_banner.py), not "never said m-ready" (issue 39)
    with pytest.raises(DeviceTimeout, match=r"said m-ready, but its boot banner had no "
                       r"m-timestamp-mode line \(within 0.05 s\)") as exc:
        client.wait_for_boot(timeout_s=0.05)
    assert "baud rate" in exc.value.hint


def test_require_mode_before_banner() -> None:
    with pytest.raises(DeviceError, match="timestamp mode unknown"):
        DutClient(ScriptedTransport([])).require_mode("energy")


def test_identify() -> None:
    client, transport = booted(
        [
            (b"name%", b"m-name-dut-[Acme Corp]\r\nm-ready\r\n"),
            (
                b"profile%",
                b"m-profile-[ULPMark for tinyML Firmware V0.0.1]\r\nm-model-[kws01]\r\nm-ready\r\n",
            ),
        ]
    )
    info = client.identify()
    assert info == DutInfo("dut", "Acme Corp", "ULPMark for tinyML Firmware V0.0.1", "kws01")
    assert client.info == info
    assert transport.done()


def test_e_line_raises_dut_error_and_stream_stays_in_sync() -> None:
    client, transport = booted(
        [
            (b"bogus%", b"e-[Unknown command: bogus]\r\nm-ready\r\n"),
            (b"name%", b"m-name-dut-[x]\r\nm-ready\r\n"),
        ]
    )
    with pytest.raises(DutError, match=r"DUT refused 'bogus': Unknown command: bogus") as exc:
        client.command("bogus")
    assert exc.value.command == "bogus"
    events = client.command("name")
    assert [type(e).__name__ for e in events] == ["Name", "Ready"]
    assert transport.done()


def test_silent_dut_times_out_naming_the_command() -> None:
    client, transport = booted([(b"name%", b"")])
    with pytest.raises(DeviceTimeout, match=r"did not finish 'name' within 0.05 s"):
        client.command("name", timeout_s=0.05)
    assert transport.written == [b"name%"]


def test_after_a_timeout_late_replies_are_dropped() -> None:
    client, transport = booted(
        [
            (b"results%", b"m-results-"),  # half a reply, the rest arrives too late
            (b"name%", b"m-name-dut-[x]\r\nm-ready\r\n"),
        ]
    )
    with pytest.raises(DeviceTimeout):
        client.command("results", timeout_s=0.05)
    transport.inbox += b"[0.5]\r\nm-ready\r\n"  # the late rest of the abandoned reply
    events = client.command("name")
    assert transport.resets == 1
    assert [type(e).__name__ for e in events] == ["Name", "Ready"]


def test_restart_during_a_command_is_reported() -> None:
    client, _ = booted([(b"results%", BANNER_PERF)])
    with pytest.raises(DeviceError, match="restarted while running 'results'"):
        client.command("results")
    assert client.timestamp_mode == "performance"


CAPS_PLAIN = (b"caps%", b"e-[Unknown command: caps]\r\nm-ready\r\n")
CAPS_BLOAD = (b"caps%", b"m-timestamp-mode-energy\r\nm-caps-[bload]\r\nm-ready\r\n")
CAPS_QUBO = (b"caps%", b"m-timestamp-mode-performance\r\nm-caps-[bload,qubo]\r\nm-ready\r\n")
#: A DUT offering db crc with bload (which an IO manager's pass-through cannot carry), and one
#: offering db crc alone (firmware without the binary download).
CAPS_DBCRC = (b"caps%", b"m-timestamp-mode-energy\r\nm-caps-[bload,dbcrc,rcrc]\r\nm-ready\r\n")
CAPS_DBCRC_ONLY = (b"caps%", b"m-timestamp-mode-energy\r\nm-caps-[dbcrc]\r\nm-ready\r\n")
RESYNC = (b"name%", b"m-name-dut-[x]\r\nm-ready\r\n")


def dump(data: bytes) -> bytes:
    """A db print reply (16 bytes per line, like the simulator), ending m-ready."""
    rows = [data[i : i + 16] for i in range(0, len(data), 16)] or [b""]
    return b"".join(b"m-buffer-" + row.hex("-").encode() + b"\r\n" for row in rows) + b"m-ready\r\n"


def hex_load(data: bytes, per_command: int = 31, readback: bytes | None = None, *,
             crc: bool = False) -> list:
    """The hex download of `data` as a plain firmware answers it, with its read-back (or,
    with `crc`, the ``db crc`` of a DUT offering dbcrc; `readback` is then what it holds)."""
    script = [(b"db load %d%%" % len(data), b"m-[Expecting %d bytes]\r\nm-ready\r\n" % len(data))]
    chunks = [data[i : i + per_command] for i in range(0, len(data), per_command)]
    for k, chunk in enumerate(chunks, start=1):
        done = b"m-load-done\r\n" if k == len(chunks) else b""
        script.append((b"db " + chunk.hex().encode() + b"%", done + b"m-ready\r\n"))
    held = data if readback is None else readback
    if crc:
        script.append((b"db crc%", b"m-db-crc-%d-%08x\r\nm-ready\r\n" % (len(held),
                                                                          zlib.crc32(held))))
    else:
        script.append((b"db print%", dump(held)))
    return script


def bload(data: bytes, reply: bytes | None = None) -> list:
    """The binary download of `data`; `reply` replaces the DUT's m-bload-done line."""
    crc = zlib.crc32(data)
    done = b"m-bload-done-%08x\r\n" % crc if reply is None else reply
    return [
        (b"bload %d %08x%%" % (len(data), crc), b"m-bload-ready-%d\r\n" % len(data)),
        (data, done + b"m-ready\r\n"),
    ]


def test_negotiate_reads_capabilities_and_the_mode_without_a_reboot() -> None:
    transport = ScriptedTransport([CAPS_QUBO])
    client = DutClient(transport)
    assert client.capabilities is None and client.timestamp_mode is None
    assert client.negotiate() == frozenset({"bload", "qubo"})
    assert client.capabilities == frozenset({"bload", "qubo"})
    assert client.timestamp_mode == "performance"
    client.require_mode("performance")


def test_negotiate_with_plain_firmware_gives_no_capabilities() -> None:
    client, transport = booted([CAPS_PLAIN])
    assert client.negotiate() == frozenset()
    assert client.timestamp_mode == "energy"  # still the banner's
    assert transport.done()


def test_negotiate_other_refusal_is_an_error() -> None:
    # said twice alike: not a refusal garbled on the line (tests/drivers/
    # test_dut_client_garbled_caps.py)
    client, _ = booted([(b"caps%", b"e-[caps disabled]\r\nm-ready\r\n")] * 2)
    with pytest.raises(DutError, match="caps disabled"):
        client.negotiate()


def test_load_binary_when_offered() -> None:
    data = bytes(range(200))
    client, transport = booted([CAPS_BLOAD, *bload(data)])
    result = client.load(data)
    assert result == LoadResult(200, "binary", 1, "crc")
    assert transport.written[2] == data  # raw, no framing
    assert client.stats == DutStats(downloads=1, retries=0, bytes_loaded=200)
    assert transport.done()


def test_binary_payload_goes_out_in_pieces() -> None:
    data = bytes(i % 251 for i in range(2500))
    crc = zlib.crc32(data)
    client, transport = booted(
        [
            CAPS_BLOAD,
            (b"bload 2500 %08x%%" % crc, b"m-bload-ready-2500\r\n"),
            (data[:1024], b""),
            (data[1024:2048], b""),
            (data[2048:], b"m-bload-done-%08x\r\nm-ready\r\n" % crc),
        ]
    )
    assert client.load(data).method == "binary"
    assert transport.done()


def test_binary_crc_mismatch_is_retried_once_after_a_resync() -> None:
    data = b"\x01\x02\x03\x04" * 10
    crc = zlib.crc32(data)
    mismatch = b"e-[bload crc mismatch: expected %08x got 12345678]\r\n" % crc
    client, transport = booted([CAPS_BLOAD, *bload(data, mismatch), RESYNC, *bload(data)])
    assert client.load(data) == LoadResult(40, "binary", 2, "crc")
    assert client.stats.retries == 1 and client.stats.downloads == 1
    assert transport.done()


def test_binary_wrong_acknowledged_crc_is_retried() -> None:
    data = b"abc" * 5
    client, transport = booted(
        [CAPS_BLOAD, *bload(data, b"m-bload-done-00000000\r\n"), RESYNC, *bload(data)]
    )
    assert client.load(data).attempts == 2
    assert transport.done()


def test_binary_failing_twice_names_bytes_reason_and_first_difference() -> None:
    data = bytes(range(50))
    got = bytearray(data)
    got[37] ^= 0xFF
    crc = zlib.crc32(data)
    mismatch = b"e-[bload crc mismatch: expected %08x got %08x]\r\n" % (crc, zlib.crc32(got))
    client, transport = booted(
        [CAPS_BLOAD, *bload(data, mismatch), RESYNC, *bload(data, mismatch),
         (b"db print%", dump(bytes(got)))]
    )
    with pytest.raises(DownloadError) as exc:
        client.load(data)
    err = exc.value
    assert (err.n_bytes, err.method, err.offset) == (50, "binary", 37)
    assert "binary download of 50 bytes" in err.message and "failed twice" in err.message
    assert "first difference at byte 37" in err.message and "crc mismatch" in err.reason
    assert "cable" in err.hint
    assert isinstance(err, DeviceError)
    assert client.stats == DutStats(downloads=0, retries=1, bytes_loaded=0)
    assert transport.done()


def test_binary_too_large_says_what_to_check() -> None:
    data = bytes(30)
    crc = zlib.crc32(data)
    refuse = (b"bload 30 %08x%%" % crc, b"e-[bload too large: 30 > 20]\r\nm-ready\r\n")
    client, _ = booted([CAPS_BLOAD, refuse, RESYNC, refuse, (b"db print%", dump(b""))])
    with pytest.raises(DownloadError, match="too large: 30 > 20") as exc:
        client.load(data)
    assert "input buffer" in exc.value.hint
    assert exc.value.offset == 0  # nothing arrived


def test_binary_payload_is_not_sent_when_the_dut_expects_another_length() -> None:
    data = bytes(10)
    crc = zlib.crc32(data)
    client, transport = booted(
        [
            CAPS_BLOAD,
            # Noise turned 10 into 19: the DUT waits for 19 bytes, then gives up by itself.
            (b"bload 10 %08x%%" % crc, b"m-bload-ready-19\r\ne-[bload timeout: got 0 of 19 "
             b"bytes]\r\nm-ready\r\n"),
            RESYNC,
            *bload(data),
        ]
    )
    assert client.load(data).attempts == 2
    assert data not in transport.written[:3]
    assert transport.done()


def test_load_hex_with_plain_firmware_is_verified_by_read_back() -> None:
    data = bytes(range(40))
    client, transport = booted([CAPS_PLAIN, *hex_load(data)])
    assert client.load(data) == LoadResult(40, "hex", 1, "read-back")
    assert transport.written[1:4] == [
        b"db load 40%",
        b"db " + data[:31].hex().encode() + b"%",
        b"db " + data[31:].hex().encode() + b"%",
    ]
    assert transport.done()


def test_hex_read_back_difference_is_retried_then_named() -> None:
    data = bytes(range(40))
    bad = data[:33] + b"\xee" + data[34:]
    client, transport = booted(
        [CAPS_PLAIN, *hex_load(data, readback=bad), RESYNC, *hex_load(data, readback=bad)]
    )
    with pytest.raises(DownloadError, match=r"hex download of 40 bytes") as exc:
        client.load(data)
    assert exc.value.offset == 33
    assert "read-back differs from the data at byte 33" in exc.value.message
    assert transport.done()


def test_hex_short_read_back_is_a_difference() -> None:
    data = bytes(range(20))
    client, transport = booted(
        [CAPS_PLAIN, *hex_load(data, readback=data[:16]), RESYNC, *hex_load(data)]
    )
    assert client.load(data).attempts == 2
    assert transport.done()


def test_hex_missing_load_done_is_retried() -> None:
    data = bytes(10)
    first = hex_load(data)[:2]
    first[1] = (first[1][0], b"m-ready\r\n")  # the last db command without m-load-done
    client, transport = booted([CAPS_PLAIN, *first, RESYNC, *hex_load(data)])
    assert client.load(data) == LoadResult(10, "hex", 2, "read-back")
    assert client.stats.retries == 1
    assert transport.done()


def test_hex_missing_load_done_twice_is_a_download_error() -> None:
    data = bytes(10)
    first = hex_load(data)[:2]
    first[1] = (first[1][0], b"m-ready\r\n")
    client, _ = booted([CAPS_PLAIN, *first, RESYNC, *first])
    with pytest.raises(DownloadError, match="never said m-load-done") as exc:
        client.load(data)
    assert "per_command" in exc.value.hint


def test_hex_announced_count_mismatch() -> None:
    wrong = (b"db load 10%", b"m-[Expecting 8 bytes]\r\nm-ready\r\n")
    client, _ = booted([CAPS_PLAIN, wrong, RESYNC, wrong])
    with pytest.raises(DownloadError, match="with 8 bytes") as exc:
        client.load(bytes(10))
    assert "input size" in exc.value.hint


def test_hex_refused_chunk_is_retried() -> None:
    data = b"\x01\x02"
    refused = [hex_load(data)[0], (b"db 0102%", b"e-[Invalid hex digit '01']\r\nm-ready\r\n")]
    client, transport = booted([CAPS_PLAIN, *refused, RESYNC, *hex_load(data)])
    assert client.load(data).attempts == 2
    assert transport.done()


def test_hex_load_done_too_early_is_a_failure() -> None:
    data = b"\x01\x02\x03\x04"
    early = [hex_load(data, 2)[0], (b"db 0102%", b"m-load-done\r\nm-ready\r\n")]
    client, _ = booted([CAPS_PLAIN, *early, RESYNC, *early])
    with pytest.raises(DownloadError, match="m-load-done after 1 of 2"):
        client.load(data, per_command=2)


class PassThroughTransport(ScriptedTransport):
    """Like an IO manager's pass-through: no raw bytes, 26 bytes per db command."""

    binary_ok = False
    hex_per_command = 26


def test_a_transport_without_binary_uses_hex_checked_by_the_duts_crc() -> None:
    data = bytes(range(30))
    transport = PassThroughTransport([CAPS_DBCRC, *hex_load(data, 26, crc=True)],
                                     initial=BANNER_ENERGY)
    client = DutClient(transport)
    client.wait_for_boot(1.0)
    # bload is offered but cannot pass; db crc can, and replaces the read-back.
    assert client.load(data) == LoadResult(30, "hex", 1, "crc")
    assert transport.written[2] == b"db " + data[:26].hex().encode() + b"%"
    assert transport.written[-1] == b"db crc%"
    assert client.capabilities == {"bload", "dbcrc", "rcrc"}
    assert transport.done()


def test_a_hex_crc_mismatch_is_retried_then_named_by_a_read_back() -> None:
    data = bytes(range(40))
    held = data[:21] + b"\x99" + data[22:]
    # db crc is asked again until the DUT says the same twice alike (a digit may have been hit)
    once = hex_load(data, crc=True, readback=held)
    once.append(once[-1])
    client, transport = booted([CAPS_DBCRC_ONLY, *once, RESYNC, *once,
                                (b"db print%", dump(held))])
    with pytest.raises(DownloadError) as exc:
        client.load(data)
    err = exc.value
    assert (err.n_bytes, err.method, err.offset) == (40, "hex", 21)
    assert f"holds 40 bytes of CRC {zlib.crc32(held):08x}" in err.reason
    assert f"the data is 40 bytes of CRC {zlib.crc32(data):08x}" in err.reason
    assert "first difference at byte 21" in err.message
    assert client.stats == DutStats(downloads=0, retries=1, bytes_loaded=0,
                                    asked_again={"db crc": 2})
    assert transport.done()


def test_a_hex_digit_changed_on_the_line_fails_the_crc_and_the_retry_recovers() -> None:
    data = bytes(range(50))
    # '2a' became '2b' on the way: still hex, so only the CRC can tell (said twice alike).
    changed = hex_load(data, crc=True, readback=data[:42] + b"\x2b" + data[43:])
    changed.append(changed[-1])
    client, transport = booted([CAPS_DBCRC_ONLY, *changed, RESYNC, *hex_load(data, crc=True)])
    assert client.load(data) == LoadResult(50, "hex", 2, "crc")
    assert transport.done()


def test_load_refuses_empty_data_and_bad_chunk_sizes_before_sending() -> None:
    client, transport = booted([CAPS_PLAIN])
    with pytest.raises(ProtocolError, match="empty"):
        client.load(b"")
    with pytest.raises(ProtocolError, match="per_command"):
        client.load(b"abc", per_command=39)
    assert transport.written == [b"caps%"]


def test_timeout_during_a_download_is_not_retried() -> None:
    data = bytes(8)
    crc = zlib.crc32(data)
    client, _ = booted([CAPS_BLOAD, (b"bload 8 %08x%%" % crc, b"")])
    client.command_timeout_s = 0.05
    with pytest.raises(DeviceTimeout, match="did not finish 'bload 8"):
        client.load(data)
    assert client.stats.retries == 0


def test_read_buffer_joins_dump_lines() -> None:
    client, _ = booted(
        [(b"db print%", b"m-buffer-00-01\r\nm-buffer-02\r\nm-ready\r\n")],
    )
    assert client.read_buffer() == b"\x00\x01\x02"


INFER_PERF = (
    b"m-warmup-start-2\r\nm-warmup-done\r\nm-infer-start-5\r\nm-lap-us-4294967000\r\n"
    b"m-lap-us-704\r\nm-infer-done\r\nm-results-[0.012,0.980,0.008]\r\nm-ready\r\n"
)


def test_infer_performance_mode_lap_counter_wraps() -> None:
    client, transport = booted([(b"infer 5 2%", INFER_PERF)], banner=BANNER_PERF)
    result = client.infer(5, 2)
    assert result.iterations == 5 and result.warmup == 2
    assert result.lap_us == (4294967000, 704)
    assert result.elapsed_us == 1000
    np.testing.assert_array_equal(result.results, [0.012, 0.980, 0.008])
    assert transport.done()


def test_infer_energy_mode_has_no_elapsed_time() -> None:
    reply = (
        b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-3\r\nm-infer-done\r\n"
        b"m-results-[0.5,0.5]\r\nm-ready\r\n"
    )
    client, _ = booted([(b"infer 3 0%", reply)])
    result = client.infer(3)
    assert result.elapsed_us is None and result.lap_us == ()
    np.testing.assert_array_equal(result.results, [0.5, 0.5])


def test_infer_count_mismatch_is_an_error() -> None:
    reply = INFER_PERF.replace(b"infer-start-5", b"infer-start-1")
    client, _ = booted([(b"infer 5 2%", reply)], banner=BANNER_PERF)
    with pytest.raises(GarbledReply, match="m-infer-start says 1, not 5") as exc:
        client.infer(5, 2)  # a digit flipped on the line, or the firmware's parsing
    assert exc.value.ran and "parsed the command differently" in exc.value.message


def test_infer_missing_lap_in_performance_mode_is_an_error() -> None:
    reply = INFER_PERF.replace(b"m-lap-us-704\r\n", b"")
    client, _ = booted([(b"infer 5 2%", reply)], banner=BANNER_PERF)
    with pytest.raises(DeviceError, match="1 m-lap-us lines"):
        client.infer(5, 2)


def test_infer_refused_by_the_dut() -> None:
    client, _ = booted([(b"infer 1 0%", b"e-[Inference iterations must be >0]\r\nm-ready\r\n")])
    with pytest.raises(DutError, match="must be >0"):
        client.infer(1)


@pytest.mark.parametrize(("n", "w"), [(0, 0), (-1, 0), (1, -1)])
def test_infer_arguments_checked_before_sending(n: int, w: int) -> None:
    client, transport = booted([])
    with pytest.raises(ProtocolError):
        client.infer(n, w)
    assert transport.written == []


def test_results_and_timestamp() -> None:
    client, transport = booted(
        [
            (b"results%", b"m-results-[0.250,0.750]\r\nm-ready\r\n"),
            (b"timestamp%", b"m-lap-us-123456\r\nm-ready\r\n"),
        ],
        banner=BANNER_PERF,
    )
    np.testing.assert_array_equal(client.results(), [0.25, 0.75])
    assert client.timestamp() == 123456
    assert transport.done()


def test_timestamp_in_energy_mode_is_a_pulse() -> None:
    client, _ = booted([(b"timestamp%", b"m-ready\r\n")])
    assert client.timestamp() is None


def test_close_closes_the_transport() -> None:
    client, transport = booted([])
    client.close()
    assert transport.closed


# -- QUBO (rig extension) ---------------------------------------------------------------------

#: Path 0-1-2-3-4 as a maximum-independent-set QUBO: -1 on the diagonal, 4 per edge.
QUBO_TERMS = [(k, k, -1) for k in range(5)] + [(k, k + 1, 4) for k in range(4)]
QUBO_PAYLOAD = b"".join(
    [struct.pack("<II", 5, len(QUBO_TERMS))] + [struct.pack("<IIi", *t) for t in QUBO_TERMS]
)


def qload(reply: bytes = b"m-qload-done-5-9\r\n") -> list:
    crc = zlib.crc32(QUBO_PAYLOAD)
    n = len(QUBO_PAYLOAD)
    return [
        (b"qload %d %08x%%" % (n, crc), b"m-qload-ready-%d\r\n" % n),
        (QUBO_PAYLOAD, reply + b"m-ready\r\n"),
    ]


#: Best state x = 1,0,1,0,1 (cost -3): bits 0, 2, 4 of byte 0 = 0x15.
QRESULT = (
    b"m-qbest-cost--3\r\nm-qbest-time-us-420\r\nm-qstate-0-[15]\r\n"
    b"m-qimprove-10--1\r\nm-qimprove-95--2\r\nm-qimprove-420--3\r\nm-ready\r\n"
)


def test_qubo_load_solve_result() -> None:
    client, transport = booted(
        [
            CAPS_QUBO,
            *qload(),
            (b"qsolve 1000 7%", b"m-qsolve-start\r\nm-qsolve-done-1003\r\nm-ready\r\n"),
            (b"qresult%", QRESULT),
        ],
        banner=BANNER_PERF,
    )
    client.qubo_load(5, QUBO_TERMS)
    assert transport.written[2] == QUBO_PAYLOAD
    assert client.qubo_solve(1000, 7) == 1003
    result = client.qubo_result()
    assert result.best_cost == -3 and result.best_time_us == 420
    np.testing.assert_array_equal(result.state, [True, False, True, False, True])
    assert result.state.dtype == bool
    assert result.improvements == [(10, -1), (95, -2), (420, -3)]
    assert transport.done()


def test_qubo_state_spans_several_lines() -> None:
    n = 300  # 38 bytes: one full 32-byte line and one of 6
    bits = np.zeros(n, dtype=bool)
    bits[[0, 9, 255, 256, 299]] = True
    raw = np.packbits(bits, bitorder="little").tobytes()
    reply = (
        b"m-qbest-cost-0\r\nm-qbest-time-us-0\r\n"
        + b"m-qstate-0-[" + raw[:32].hex().encode() + b"]\r\n"
        + b"m-qstate-32-[" + raw[32:].hex().encode() + b"]\r\nm-ready\r\n"
    )
    client, _ = booted([CAPS_QUBO, (b"qresult%", reply)], banner=BANNER_PERF)
    result = client.qubo_result()  # no graph loaded by this client: no cost check
    np.testing.assert_array_equal(result.state[:n], bits)
    assert result.improvements == []


def test_qubo_load_crc_mismatch_is_retried() -> None:
    client, transport = booted(
        [CAPS_QUBO, *qload(b"e-[qload crc mismatch: expected 1 got 2]\r\n"), RESYNC, *qload()],
        banner=BANNER_PERF,
    )
    client.qubo_load(5, QUBO_TERMS)
    assert client.stats.retries == 1
    assert transport.done()


def test_qubo_load_wrong_echo_fails_after_the_retry() -> None:
    bad = b"m-qload-done-5-8\r\n"
    client, _ = booted([CAPS_QUBO, *qload(bad), RESYNC, *qload(bad)], banner=BANNER_PERF)
    with pytest.raises(DownloadError, match="8 terms, not 5 and 9") as exc:
        client.qubo_load(5, QUBO_TERMS)
    assert exc.value.method == "qload"


@pytest.mark.parametrize(
    ("reply", "match"),
    [
        (QRESULT.replace(b"m-qbest-cost--3", b"m-qbest-cost--4"), "best cost -4, but its best "
         "state costs -3"),
        (QRESULT.replace(b"m-qstate-0-[15]", b"m-qstate-1-[15]"), "offset 1 .* expected offset 0"),
        (QRESULT.replace(b"m-qstate-0-[15]", b"m-qstate-0-[35]"), "state of 1 bytes for 5"),
        (QRESULT.replace(b"m-qstate-0-[15]\r\n", b""), "state of 0 bytes for 5"),
        (QRESULT.replace(b"m-qimprove-95", b"m-qimprove-9"), "out of time order"),
        (QRESULT.replace(b"m-qbest-time-us-420\r\n", b""), "expected QbestTime"),
    ],
)
def test_qubo_result_is_checked_against_the_loaded_graph(reply: bytes, match: str) -> None:
    client, _ = booted([CAPS_QUBO, *qload(), (b"qresult%", reply)], banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    with pytest.raises(DeviceError, match=match):
        client.qubo_result()


def test_qubo_needs_the_capability_and_a_binary_link() -> None:
    client, transport = booted([CAPS_BLOAD])
    with pytest.raises(DeviceError, match=r"does not speak the QUBO commands \(its capabilities: "
                       r"bload\)"):
        client.qubo_load(5, QUBO_TERMS)
    with pytest.raises(DeviceError, match="QUBO"):
        client.qubo_solve(10, 1)
    assert transport.written == [b"caps%"]
    passthrough = DutClient(PassThroughTransport([]))
    with pytest.raises(DeviceError, match="binary download") as exc:
        passthrough.qubo_load(5, QUBO_TERMS)
    assert "IO manager" in exc.value.hint


def test_qubo_invalid_graph_is_refused_before_sending() -> None:
    client, transport = booted([])
    with pytest.raises(ProtocolError):
        client.qubo_load(2, [(1, 0, 4)])
    assert transport.written == []


def test_qubo_solve_deadline_and_refusal() -> None:
    client, _ = booted(
        [
            CAPS_QUBO,
            (b"qsolve 1000000 1%", b"m-qsolve-start\r\n"),  # never finishes
        ],
        banner=BANNER_PERF,
    )
    with pytest.raises(DeviceTimeout, match=r"'qsolve 1000000 1' within 0.05 s \(got: "
                       r"QsolveStart\)"):
        client.qubo_solve(1_000_000, 1, deadline_s=0.05)
    client, _ = booted(
        [CAPS_QUBO, (b"qsolve 10 1%", b"e-[no QUBO loaded]\r\nm-ready\r\n")],
        banner=BANNER_PERF,
    )
    with pytest.raises(DutError, match="no QUBO loaded"):
        client.qubo_solve(10, 1)
