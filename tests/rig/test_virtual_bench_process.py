"""The rig knows the virtual bench only as a process: it starts `python -m virtual_bench FILE`
with the bench as the rig holds it, reads the ports (or a typed error) from the one JSON line
the process prints, and stops it by closing its stdin."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from drivers.dut.client import DutClient
from drivers.transport import SerialTransport
from rig.bench.config import load_bench
from rig.bench.virtual import VIRTUAL_BENCH_MODULE, VirtualBenchProcess
from rig.commands.dut import dut_info
from rig.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "benches" / "sim.toml"


def test_the_process_serves_the_bench_as_the_rig_holds_it() -> None:
    bench = load_bench(SIM)
    bench = dataclasses.replace(bench, sim=dataclasses.replace(bench.sim, dut="python"))
    with VirtualBenchProcess(bench, speed=7.0, power_on=True) as vb:
        assert vb.running
        assert vb.dut_impl == "python" and vb.emon_driver == "lpm01a"
        assert vb.speed == 7.0 and vb.powered is True
        assert sorted(vb.ports) == ["dut", "emon"]
        assert all(stat.S_ISCHR(os.stat(p).st_mode) for p in vb.ports.values())  # ptys
        # Powered at start: the simulated DUT booted, and answers over its pty. Its banner may
        # have gone before the port was opened, as a board's does (a loaded host): `rig dut
        # info` then takes the mode from the caps reply.
        with DutClient(SerialTransport(vb.ports["dut"], 115200, name="DUT")) as dut:
            info = dut_info(dut, boot_wait_s=10.0)
            assert (info["timestamp_mode"], info["model"]) == ("energy", "asc01")
    assert not vb.running


def test_an_error_of_the_process_is_the_rigs_typed_error_with_its_hint() -> None:
    with pytest.raises(ConfigError) as info:
        VirtualBenchProcess(load_bench(SIM), speed=-1.0)  # the process checks its own options
    assert info.value.message == "--speed: expected a positive number, found -1.0"
    assert info.value.hint == "simulated seconds per host second, e.g. --speed 50"


def test_the_rig_imports_nothing_of_the_virtual_bench() -> None:
    code = ("import sys; import rig.cli, rig.commands.sim, rig.run.measure, rig.bench.virtual; "
            "rig.cli.build_parser(); "
            f"print(sorted(n for n in sys.modules if n.split('.')[0] == {VIRTUAL_BENCH_MODULE!r}"
            " or n.startswith('firmware')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
