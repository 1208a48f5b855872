"""DutClient and energy-mode firmware that offers `elap`: its lap counter around the window."""

from __future__ import annotations

import numpy as np
import pytest

from drivers.dut.client import DutClient
from drivers.errors import DeviceError

from .scripted import ScriptedTransport
from .test_dut_client import BANNER_ENERGY, booted

CAPS_ELAP = (b"caps%", b"m-timestamp-mode-energy\r\nm-caps-[bload,elap]\r\nm-ready\r\n")
#: `infer 3 0` from elap firmware: the two laps (wrapping) printed after the window closed.
INFER_ELAP = (
    b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-3\r\nm-lap-us-4294967000\r\n"
    b"m-lap-us-37204\r\nm-infer-done\r\nm-results-[0.5,0.5]\r\nm-ready\r\n"
)
INFER_PLAIN = (
    b"m-warmup-start-0\r\nm-warmup-done\r\nm-infer-start-3\r\nm-infer-done\r\n"
    b"m-results-[0.5,0.5]\r\nm-ready\r\n"
)


def test_energy_mode_laps_give_the_dut_timed_window() -> None:
    client, transport = booted([CAPS_ELAP, (b"infer 3 0%", INFER_ELAP)])
    assert client.negotiate() == frozenset({"bload", "elap"})
    result = client.infer(3)
    assert result.lap_us == (4294967000, 37204)
    assert result.elapsed_us == 37500  # 2^32 - 4294967000 + 37204: the counter wrapped
    np.testing.assert_array_equal(result.results, [0.5, 0.5])
    assert transport.done()


def test_elap_firmware_that_prints_no_laps_is_an_error() -> None:
    client, _ = booted([CAPS_ELAP, (b"infer 3 0%", INFER_PLAIN)])
    client.negotiate()
    with pytest.raises(DeviceError, match="0 m-lap-us lines") as exc:
        client.infer(3)
    assert "offers 'elap'" in exc.value.hint


def test_one_lap_in_energy_mode_is_an_error() -> None:
    reply = INFER_ELAP.replace(b"m-lap-us-37204\r\n", b"")
    client, _ = booted([(b"infer 3 0%", reply)])
    with pytest.raises(DeviceError, match="1 m-lap-us lines"):
        client.infer(3)


def test_plain_energy_firmware_has_one_clock_only() -> None:
    transport = ScriptedTransport(
        [(b"caps%", b"e-[Unknown command: caps]\r\nm-ready\r\n"), (b"infer 3 0%", INFER_PLAIN)],
        initial=BANNER_ENERGY,
    )
    client = DutClient(transport)
    client.wait_for_boot(timeout_s=1.0)
    assert client.negotiate() == frozenset()
    result = client.infer(3)
    assert result.elapsed_us is None and result.lap_us == ()
