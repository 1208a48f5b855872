"""`DutClient.qubo_result` with the optional lines: load, steps, and the DUT's own energy and
power of the solve (SPEC.md, caps `power`)."""

from __future__ import annotations

import pytest

from drivers.errors import DeviceError

from .test_dut_client import BANNER_PERF, CAPS_QUBO, QRESULT, QUBO_TERMS, booted, qload

EXTRA = b"m-qload-us-215301\r\nm-qsteps-66\r\nm-qenergy-uj-62500\r\nm-qpower-uw-1250000\r\n"


def with_lines(lines: bytes) -> bytes:
    return QRESULT.replace(b"m-ready\r\n", lines + b"m-ready\r\n")


def test_qubo_result_carries_load_steps_energy_and_power() -> None:
    client, _ = booted([CAPS_QUBO, *qload(), (b"qresult%", with_lines(EXTRA))],
                       banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    result = client.qubo_result()
    assert (result.load_us, result.steps, result.energy_uj, result.power_uw) == (
        215301, 66, 62500, 1250000)
    assert result.messages == ()  # typed now, not left to be parsed from messages


def test_a_dut_without_the_lines_reports_none() -> None:
    client, _ = booted([CAPS_QUBO, *qload(), (b"qresult%", QRESULT)], banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    result = client.qubo_result()
    assert (result.load_us, result.steps, result.energy_uj, result.power_uw) == (None,) * 4


@pytest.mark.parametrize(("lines", "match"), [
    (b"m-qenergy-uj-62500\r\n", "energy without power"),
    (b"m-qpower-uw-1250000\r\n", "power without energy"),
])
def test_energy_and_power_come_together(lines: bytes, match: str) -> None:
    client, _ = booted([CAPS_QUBO, *qload(), (b"qresult%", with_lines(lines))],
                       banner=BANNER_PERF)
    client.qubo_load(5, QUBO_TERMS)
    with pytest.raises(DeviceError, match=match):
        client.qubo_result()
