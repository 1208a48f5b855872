"""The simulated N6705's own over-voltage protection on an N678xA (``VOLT:PROT:REM``, N6700
Operating and Service Guide: above the level "the output is disabled and the Questionable
Condition status register OV bit is set"), and the driver that sets it to the bench's
``voltage_limit_v``: the instrument itself guards the limit, whatever the host or the front
panel does afterwards."""

from __future__ import annotations

import pytest

from drivers.emon.keysight import N6705
from drivers.errors import InstrumentError
from protocols.scpi import parse_error
from virtual_bench.keysight import SimN6705
from virtual_bench.world import World

from .test_sim_keysight import Raw

pytest.importorskip("pyvisa_py")


def error(raw: Raw) -> int:
    return parse_error(raw.ask("SYST:ERR?").decode()).code


def test_the_remote_ovp_level_is_kept_within_its_span() -> None:
    with SimN6705(World()) as sim:
        raw = Raw(sim.port)
        assert raw.ask("VOLT:PROT:REM? (@1)") == b"+2.200000E+01"  # *RST MAX
        raw.send("VOLT:PROT:REM 3.3,(@1)")
        assert error(raw) == 0 and sim.ovp_v == 3.3
        assert raw.ask("VOLT:PROT:REM? (@1)") == b"+3.300000E+00"
        raw.send("VOLT:PROT:REM 23,(@1)")
        assert error(raw) == -222 and sim.ovp_v == 3.3
        raw.send("FUNC CURR,(@1)")  # a priority switch reverts the output settings
        assert error(raw) == 0 and sim.ovp_v == 22.0
        raw.send("*RST")
        assert sim.ovp_v == 22.0
        raw.sock.close()


def test_a_module_without_the_smu_protection_refuses_it() -> None:
    with SimN6705(World(), module="N6731B") as sim:
        raw = Raw(sim.port)
        raw.send("VOLT:PROT:REM 3.3,(@1)")
        assert error(raw) == -241
        raw.sock.close()


def test_a_level_above_the_ovp_disables_the_output_and_sets_ov() -> None:
    world = World()
    with SimN6705(world) as sim:
        raw = Raw(sim.port)
        for cmd in ("VOLT 3.0,(@1)", "VOLT:PROT:REM 3.3,(@1)", "OUTP ON,(@1)"):
            raw.send(cmd)
        assert error(raw) == 0 and world.powered
        assert raw.ask("STAT:QUES:COND? (@1)") == b"0"
        raw.send("VOLT 5,(@1)")  # a host bug: the instrument takes it, and trips
        assert error(raw) == 0
        assert not world.powered and not sim.output
        assert raw.ask("STAT:QUES:COND? (@1)") == b"1"
        raw.send("VOLT 3.0,(@1)")
        raw.send("OUTP ON,(@1)")  # latched: the output stays off
        assert error(raw) == 0 and not world.powered
        assert raw.ask("STAT:QUES:COND? (@1)") == b"1"
        raw.send("*RST")
        assert raw.ask("STAT:QUES:COND? (@1)") == b"0"
        raw.sock.close()


def test_output_on_above_the_ovp_never_powers_the_dut() -> None:
    world = World()
    with SimN6705(world) as sim:
        raw = Raw(sim.port)
        for cmd in ("VOLT:PROT:REM 3.3,(@1)", "VOLT 5,(@1)", "OUTP ON,(@1)"):
            raw.send(cmd)
        assert error(raw) == 0
        assert not world.powered and all(not on for _, on in sim.output_log)
        assert raw.ask("STAT:QUES:COND? (@1)") == b"1"
        raw.sock.close()


def test_lowering_the_ovp_under_the_output_trips_it() -> None:
    world = World()
    with SimN6705(world) as sim:
        raw = Raw(sim.port)
        for cmd in ("VOLT 3.0,(@1)", "OUTP ON,(@1)", "VOLT:PROT:REM 2.5,(@1)"):
            raw.send(cmd)
        assert error(raw) == 0 and not world.powered
        assert raw.ask("STAT:QUES:COND? (@1)") == b"1"
        raw.sock.close()


def test_the_driver_s_limit_guards_a_front_panel_change() -> None:
    """The driver sets the OVP to the bench limit before OUTP ON; a user then turns the knob to
    5 V: the instrument switches the DUT off, and the driver reads why."""
    world = World()
    with SimN6705(world) as sim:
        monitor = N6705.open(sim.resource, voltage_limit_v=3.3, simulated=True,
                             points=1000, pretrigger=10)
        try:
            monitor.configure(3.0, 10_000)
            monitor.power_on()
            seen = sim.commands_seen
            assert seen.index("VOLT:PROT:REM 3.3,(@1)") < seen.index("OUTP ON,(@1)")
            assert sim.ovp_v == 3.3 and world.powered
            assert monitor.settings()["over_voltage_protection_v"] == 3.3
            sim.front_panel_voltage(5.0)
            assert not world.powered
            assert monitor.questionable() & 1
            with pytest.raises(InstrumentError, match=r"over-voltage protection at 3\.3 V"):
                monitor.power_on()
            assert not world.powered
        finally:
            monitor.close()
