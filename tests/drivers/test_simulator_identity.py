"""`identifies_as_simulator`: an energy monitor is labelled simulated from what it says about
itself (the virtual bench's instruments say so in their identity replies); real identities of
the same instruments never match."""

from __future__ import annotations

import pytest

from drivers.emon.base import identifies_as_simulator


@pytest.mark.parametrize("identity", [
    "1.0.5-sim",                                                  # virtual_bench LPM01A `version`
    "MY00000001-SIM",                                             # virtual_bench N6705 *IDN? serial
    "Arc (simulated)",                                            # virtual_bench Otii hw_version
    "sim",                                                        # virtual_bench PPK2 metadata line
])
def test_the_virtual_benchs_identities_say_simulated(identity: str) -> None:
    assert identifies_as_simulator(identity)


@pytest.mark.parametrize("identity", [
    "1.0.5", "MY56001234", "Arc 1.1", "Ace", "simple", "SIMONE", "USB-SIMCARD", "9173", "ia",
    "Keysight Technologies,N6705C,MY56001234,D.03.01", None, "",
])
def test_real_identities_do_not(identity: str | None) -> None:
    assert not identifies_as_simulator(identity)


def test_any_of_several_fields() -> None:
    assert identifies_as_simulator("calibrated", "hw", "ia", "sim")
    assert not identifies_as_simulator("calibrated", "hw", "ia")
