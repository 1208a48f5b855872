"""QUBO power on a host without RAPL/NVML (issue 13.5): the reason a point has no power says why
and what to enable, and the sweep summary (`summarize`, `rig show` of a sweep, the report's
QUBO results) says which points had power and why the others have none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import drivers.emon.host_power as host_power
from rig.cli import main
from rig.qubo.suts import LOIHI_PROFILER
from rig.qubo.sweep import SweepPoint, SweepSpec, stand_in_point, start_sweep, summarize
from rig.report.content import _power, _qubo_results
from rig.report.document import Para, Table
from rig.report.runs import group_systems, read_run
from rig.report.system import SystemInfo

#: What a point without power says (as the host monitors word it).
REASON = ("power unavailable: no /sys/class/powercap/intel-rapl (a VM) (enable RAPL "
          "passthrough in the hypervisor or run on bare metal)")
SPEC = SweepSpec(suts=("cpu-sa",), nodes=(10, 25), densities=(0.1,), timeouts=(1.0,),
                 seeds=(0, 1))


def partly_powered(point: SweepPoint) -> dict:
    """The stand-in, with power for every point but (nodes 25, seed 1)."""
    result = stand_in_point(point)
    if point.nodes == 25 and point.seed == 1:
        result["power_w"], result["power_status"] = None, REASON
    else:
        result["power_status"], result["power_source"] = "measured (rapl)", "rapl"
    return result


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    return start_sweep(SPEC, runs_root=tmp_path / "runs", point_function=partly_powered).run_path


def test_summary_says_which_points_had_power_and_why_not(sweep: Path, capsys) -> None:
    assert main(["show", str(sweep), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["power"] == {"points": 4, "with_power": 3, "sources": {"rapl": 3},
                             "without": {REASON: 1}}
    rows = {r["nodes"]: r for r in data["summary"]}
    assert rows[10]["power_seeds"] == 2 and rows[10]["power_status"] is None
    assert rows[25]["power_seeds"] == 1 and rows[25]["power_status"] == REASON
    assert rows[25]["power_w_mean"] == pytest.approx(1.25)  # seed 0 only, never a zero


def test_rig_show_of_a_sweep_gives_the_reason_under_the_table(sweep: Path, capsys) -> None:
    assert main(["show", str(sweep)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "1.250 W (1/2 seeds) [1]" in out
    assert f"[1] {REASON}" in out
    assert "power: measured for 3 of 4 points by rapl" in out


def test_report_qubo_results_say_which_points_had_power(sweep: Path) -> None:
    (system,) = group_systems([read_run(sweep)])
    blocks = _qubo_results(system)
    text = " ".join(b.text for b in blocks if isinstance(b, Para))
    assert "Power was measured for 3 of 4 points." in text
    assert f"1 point(s): {REASON}" in text and "never as zero" in text
    power = next(b for b in blocks if isinstance(b, Table) and "average power" in b.caption)
    # The one seed with power gives no Type A and RAPL publishes no accuracy: U is unknown.
    assert power.rows[1][2] == "1.250 W ± U unknown (incomplete) (1/2 seeds)"


def test_a_host_without_rapl_says_why_and_what_to_enable(tmp_path: Path, monkeypatch) -> None:
    """Real cpu-sa points with the powercap tree pointed somewhere empty (as on a VM)."""
    monkeypatch.setattr(host_power, "POWERCAP_ROOT", tmp_path / "no-powercap")
    spec = SweepSpec(suts=("cpu-sa",), nodes=(10,), densities=(0.1,), timeouts=(0.01,),
                     seeds=(0, 1))
    outcome = start_sweep(spec, runs_root=tmp_path / "runs")
    (row,) = outcome.summary["rows"]
    assert row["seeds"] == 2 and row["power_seeds"] == 0 and row["power_w_mean"] is None
    why = row["power_status"]
    assert why.startswith(f"power unavailable: no {tmp_path / 'no-powercap'}/intel-rapl"), why
    assert "VM" in why and "RAPL passthrough" in why and "bare metal" in why
    assert outcome.summary["power"] == {"points": 2, "with_power": 0, "sources": {},
                                        "without": {why: 2}}


def test_summarize_counts_points_without_a_recorded_reason() -> None:
    from rig.qubo.sweep import SweepPointDone

    (point,) = SweepSpec(suts=("cpu-sa",), nodes=(10,), densities=(0.1,), timeouts=(1.0,),
                         seeds=(0,)).points()
    done = {point.key: SweepPointDone(key=point.key, result={"gap": 0.0, "power_w": None})}
    summary = summarize(SweepSpec(suts=("cpu-sa",), nodes=(10,), densities=(0.1,),
                                  timeouts=(1.0,), seeds=(0,)), done)
    assert summary["rows"][0]["power_status"] == "power unavailable: no reason recorded"
    assert summary["power"]["without"] == {"power unavailable: no reason recorded": 1}


@pytest.mark.parametrize("recorded", [LOIHI_PROFILER, "loihi-profiler"])
def test_loihi_profiler_power_is_labelled_unverified_on_hardware(
        recorded: str, tmp_path: Path, capsys) -> None:
    """The Loihi 2 profiler's units are read as public scripts read them, never checked on a chip
    (issue 35.18): `rig show` and the report say so, for runs recorded before the label too."""
    def profiled(point: SweepPoint) -> dict:
        result = stand_in_point(point)
        result["power_status"], result["power_source"] = f"measured ({recorded})", recorded
        return result

    run = start_sweep(SPEC, runs_root=tmp_path / "runs", point_function=profiled).run_path
    assert main(["show", str(run)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"power: measured for 4 of 4 points by {recorded}" in out
    if recorded == LOIHI_PROFILER:  # an older run shows the source it recorded
        assert "loihi-profiler (unverified on hardware)" in out
    (system,) = group_systems([read_run(run)])
    (described,) = [b.text for b in _power(system, SystemInfo()) if isinstance(b, Para)]
    assert "Loihi 2 chip's own power profiler" in described
    assert "unverified on hardware" in described
