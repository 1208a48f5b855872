"""The simulated N6705 as strict as the instrument about its source settings and options (issue
35, items 12 and 13): on an N678xA SMU in voltage priority only ``CURR:LIM`` sets the current
limit, the emulation and priority a previous user left are kept until the host sets them, and
``*OPT?`` lists the options a test gives it (055: no external data logger). The driver sets them
explicitly and refuses Elog on an option-055 mainframe."""

from __future__ import annotations

import pytest

from drivers.emon.base import Chunk
from drivers.emon.keysight import N6705, ElogUnavailable
from protocols.scpi import parse_error
from tests.deadline import wait_until
from virtual_bench.keysight import SimN6705
from virtual_bench.world import PowerParams, World

from .test_sim_keysight import Raw

pytest.importorskip("pyvisa_py")

V = 1.8


def error(raw: Raw) -> int:
    return parse_error(raw.ask("SYST:ERR?").decode()).code


def test_on_an_n6781a_in_voltage_priority_plain_curr_is_not_the_limit() -> None:
    with SimN6705(World()) as sim:
        raw = Raw(sim.port)
        assert sim.current_limit_a == 0.1  # *RST
        raw.send("CURR 0.05,(@1)")  # the current-priority setting: accepted, not the limit
        assert error(raw) == 0 and sim.current_limit_a == 0.1
        raw.send("CURR:LIM 0.05,(@1)")
        assert error(raw) == 0 and sim.current_limit_a == 0.05
        raw.sock.close()


def test_a_priority_switch_turns_the_output_off_and_reverts_the_settings() -> None:
    """N6705C User's Guide, "Using the Source/Load Functions": switching between voltage and
    current priority turns the output off and the output settings revert to their *RST values."""
    world = World()
    with SimN6705(world) as sim:
        raw = Raw(sim.port)
        for cmd in ("VOLT:LEV 1.8,(@1)", "CURR:LIM 0.05,(@1)", "OUTP ON,(@1)"):
            raw.send(cmd)
        assert error(raw) == 0 and world.powered
        raw.send("FUNC CURR,(@1)")
        assert error(raw) == 0
        assert not world.powered and not sim.output
        assert (sim.volt, sim.current_limit_a) == (0.0, 0.1)
        raw.send("VOLT:LEV 1.8,(@1)")
        raw.send("OUTP ON,(@1)")  # current priority: not what the simulated DUT rail is
        assert error(raw) == -221 and not world.powered
        raw.sock.close()


@pytest.mark.parametrize(("emulation", "priority"), [("BATT", "VOLT"), ("PS2Q", "CURR")])
def test_a_previous_user_s_mode_refuses_the_output(emulation: str, priority: str) -> None:
    with SimN6705(World(), emulation=emulation, priority=priority) as sim:
        raw = Raw(sim.port)
        raw.send("VOLT:LEV 1.8,(@1)")
        raw.send("OUTP ON,(@1)")
        assert error(raw) == -221 and not sim.output
        raw.sock.close()


def test_a_module_without_priority_modes() -> None:
    """An N6731B: CURR:LEV is its current setting; EMUL, FUNC and CURR:LIM are the N678xA's."""
    with SimN6705(World(), module="N6731B") as sim:
        raw = Raw(sim.port)
        for cmd in ("EMUL PS2Q,(@1)", "FUNC VOLT,(@1)", "CURR:LIM 0.05,(@1)"):
            raw.send(cmd)
            assert error(raw) == -241, cmd
        raw.send("CURR:LEV 0.05,(@1)")
        assert error(raw) == 0 and sim.current_limit_a == 0.05
        raw.sock.close()


def test_opt_lists_the_options_and_055_has_no_elog() -> None:
    with SimN6705(World()) as sim:
        raw = Raw(sim.port)
        assert raw.ask("*OPT?") == b"0"
        raw.sock.close()
    with SimN6705(World(), options=("054", "055")) as sim:
        raw = Raw(sim.port)
        assert raw.ask("*OPT?") == b"054,055"
        raw.send("SENS:ELOG:FUNC:CURR ON,(@1)")
        assert error(raw) == -241
        raw.sock.close()


def test_the_driver_sets_emulation_priority_and_limit_whatever_was_left() -> None:
    """A previous user left the N6781A in battery emulation and current priority: the driver
    sets PS2Q and voltage priority, then CURR:LIM, and the DUT is powered at its voltage."""
    world = World(PowerParams(idle_w=1.2e-3, active_w=3.6e-3))
    with SimN6705(world, emulation="BATT", priority="CURR") as sim:
        monitor = N6705.open(sim.resource, voltage_limit_v=3.3, simulated=True,
                             current_limit_a=0.05, points=1000, pretrigger=10)
        try:
            monitor.configure(V, 10_000)
            assert (sim.emulation, sim.priority) == ("PS2Q", "VOLT")
            assert sim.current_limit_a == 0.05
            monitor.power_on()
            assert world.powered and world.supply_v == V
            s = monitor.settings()
            assert (s["module"], s["emulation"], s["priority"]) == ("N6781A", "PS2Q", "voltage")
        finally:
            monitor.close()
        assert not world.powered


def test_the_driver_in_aux_mode_refuses_elog_on_an_option_055_mainframe() -> None:
    with SimN6705(World(), options=("055",)) as sim:
        monitor = N6705.open(sim.resource, voltage_limit_v=3.3, simulated=True,
                             timestamp_input="aux")
        try:
            with pytest.raises(ElogUnavailable, match="option 055"):
                monitor.configure(V, 1000)
            # Nothing of the source or the Elog was set (connect only aborts a leftover log).
            after = sim.commands_seen[sim.commands_seen.index("*OPT?") + 1:]
            assert all(c.startswith(("SYST:ERR?", "OUTP OFF")) for c in after), after
            assert sim.elog_t0 is None and not sim.output
        finally:
            monitor.close()


def test_the_driver_in_aux_mode_logs_after_setting_the_source() -> None:
    """End to end on a mainframe without 055, from a left-over current priority: records arrive
    and the current limit is the one asked for."""
    world = World(PowerParams(idle_w=1.2e-3, active_w=3.6e-3), speed=10)
    with SimN6705(world, priority="CURR") as sim:
        monitor = N6705.open(sim.resource, voltage_limit_v=3.3, simulated=True,
                             timestamp_input="aux", current_limit_a=0.2)
        try:
            monitor.configure(V, 1000)
            monitor.power_on()
            chunks: list[Chunk] = []
            monitor.start(chunks.append)
            wait_until(lambda: sum(len(c.current) for c in list(chunks)) >= 20, "20 records",
                       timeout_s=30)
            monitor.stop()
        finally:
            monitor.close()
    assert sim.current_limit_a == 0.2 and sim.priority == "VOLT"
    assert monitor.settings()["options"] == []
