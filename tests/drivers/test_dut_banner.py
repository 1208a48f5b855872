"""A boot banner garbled on the line is named for what was wrong with it (issue 39): one flipped
bit in ``m-timestamp-mode-energy`` made `wait_for_boot` say "never said m-ready" though
``m-ready`` arrived. It now says that m-ready came, which banner line was missing or unreadable,
and quotes what came instead (shortened)."""

from __future__ import annotations

import pytest

from drivers.dut.client import DutClient
from drivers.errors import DeviceTimeout
from tests.drivers.scripted import ScriptedTransport


def boot(data: bytes, timeout_s: float = 0.05) -> DeviceTimeout:
    with pytest.raises(DeviceTimeout) as err:
        DutClient(ScriptedTransport([], initial=data)).wait_for_boot(timeout_s=timeout_s)
    return err.value


def test_a_garbled_banner_is_named_not_a_missing_ready() -> None:
    # Both lines beyond what is recovered (one garbled line is: test_dut_client_garbled.py).
    err = boot(b"m-timestamp-mode-enerfy\r\nm-init-dxxx\r\nm-ready\r\n")
    assert "never said m-ready" not in err.message
    assert "said m-ready, but its boot banner had no m-timestamp-mode line" in err.message
    assert "'m-timestamp-mode-enerfy', 'm-init-dxxx'" in err.message
    assert "garbled" in err.hint and "baud" in err.hint


def test_a_missing_init_done_is_named() -> None:
    err = boot(b"m-timestamp-mode-energy\r\nm-ready\r\n")
    assert "said m-ready, but its boot banner had no m-init-done after " \
           "m-timestamp-mode-energy" in err.message
    assert "unreadable" not in err.message  # nothing else came


def test_a_lone_ready_is_named() -> None:
    err = boot(b"m-ready\r\n")
    assert "said m-ready, but its boot banner had no m-timestamp-mode line" in err.message


def test_a_garbled_ready_is_still_a_missing_ready_and_says_what_came() -> None:
    err = boot(b"m-timestamp-mode-energy\r\nm-init-done\r\nm-rxafz\r\n")
    assert "never said m-ready within 0.05 s" in err.message
    assert "unreadable instead: 'm-rxafz'" in err.message


def test_silence_is_a_missing_ready_as_before() -> None:
    err = boot(b"")
    assert err.message == "DUT never said m-ready within 0.05 s"


def test_a_long_garbled_line_is_quoted_short() -> None:
    err = boot(b"m-timestamp-mode-" + b"z" * 5000 + b"\r\nm-init-dxxx\r\nm-ready\r\n")
    assert len(err.message) < 400 and "characters)" in err.message


def test_a_garbled_banner_then_a_good_one_boots() -> None:
    client = DutClient(ScriptedTransport([], initial=(
        b"m-timestamp-mode-enerfy\r\nm-init-dxxx\r\nm-ready\r\n"
        b"m-timestamp-mode-energy\r\nm-init-done\r\nm-ready\r\n")))
    assert client.wait_for_boot(timeout_s=1.0) == "energy"
