"""`rig compare` of two QUBO sweeps (issue 37): rows matched by (sut, nodes, density, timeout),
each matched row's mean power and energy compared; a row only one sweep has is listed as such
(in --json and under the table), never compared, and does not decide --expect-same."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from drivers.emon.accuracy import MonitorAccuracy, NotPublished, RangeAccuracy, Spec
from rig.cli import main
from rig.qubo import uncertainty
from rig.qubo.sweep import PROCEDURE, SweepPoint, SweepSpec, stand_in_point, start_sweep

#: A power source with a published gain (0.1 % of reading), so a power budget is complete.
DECLARED = MonitorAccuracy(
    current_ranges=(RangeAccuracy("power", None, Spec(0.001, 0.0, "test sheet")),),
    voltage=None, voltage_set=None, clock=NotPublished("clock", "the test"))


def powered(shift: float) -> Callable[[SweepPoint], dict[str, Any]]:
    """The stand-in with power 1 W + 10 mW per node + 1 mW x (seed - 1) + `shift`, from the
    'meter' source."""
    def point(p: SweepPoint) -> dict[str, Any]:
        result = stand_in_point(p)
        power = 1.0 + 0.01 * p.nodes + 0.001 * (p.seed - 1) + shift
        result.update(power_w=power, energy_j=power * p.timeout_s, power_source="meter")
        return result
    return point


def sweep(root: Path, nodes: tuple[int, ...], shift: float) -> str:
    spec = SweepSpec(suts=("cpu-sa",), nodes=nodes, densities=(0.1,), timeouts=(1.0,),
                     seeds=(0, 1, 2), name=f"n{'-'.join(map(str, nodes))}")
    return str(start_sweep(spec, runs_root=root, point_function=powered(shift)).run_path)


@pytest.fixture
def sweeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    monkeypatch.setattr(uncertainty, "source_accuracy", lambda source: DECLARED)
    return {"a": sweep(tmp_path / "a", (10, 25), 0.0),
            "same": sweep(tmp_path / "same", (10, 40), 0.0001),
            "hotter": sweep(tmp_path / "hotter", (10, 40), 0.05)}


def compare(capsys: pytest.CaptureFixture[str], *argv: str, code: int) -> dict[str, Any]:
    assert main(["compare", *argv, "--json"]) == code
    return json.loads(capsys.readouterr().out)


ROW10 = "(sut cpu-sa, nodes 10, density 0.1, timeout_s 1.0)"


def test_matched_rows_get_a_verdict_each(sweeps: dict[str, str], capsys) -> None:
    data = compare(capsys, sweeps["a"], sweeps["hotter"], code=0)
    assert data["procedure"] == PROCEDURE
    verdicts = {f["key"]: f["verdict"] for f in data["figures"]}
    # Only the row both have (nodes 10); power complete (Type A over 3 seeds + the gain):
    # 50 mW apart differs; energy keeps the host clock unknown: never "differs".
    assert verdicts == {f"power_w_mean {ROW10}": "differs",
                        f"energy_j_mean {ROW10}": "undecided"}
    power = next(f for f in data["figures"] if f["key"].startswith("power_w_mean"))
    assert power["difference"] == pytest.approx(0.05)
    same = compare(capsys, sweeps["a"], sweeps["same"], code=0)
    assert {f["verdict"] for f in same["figures"]} == {"not distinguishable"}


def test_a_row_in_one_sweep_only_is_listed_not_compared(sweeps: dict[str, str], capsys) -> None:
    data = compare(capsys, sweeps["a"], sweeps["same"], code=0)
    assert data["only_a"] == ["power_w_mean (sut cpu-sa, nodes 25, density 0.1, timeout_s 1.0)",
                              "energy_j_mean (sut cpu-sa, nodes 25, density 0.1, timeout_s 1.0)"]
    assert data["only_b"] == ["power_w_mean (sut cpu-sa, nodes 40, density 0.1, timeout_s 1.0)",
                              "energy_j_mean (sut cpu-sa, nodes 40, density 0.1, timeout_s 1.0)"]
    assert main(["compare", sweeps["a"], sweeps["same"]]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "only in A (not compared): power_w_mean (sut cpu-sa, nodes 25" in out
    assert "only in B (not compared): power_w_mean (sut cpu-sa, nodes 40" in out


def test_expect_same_exit_codes(sweeps: dict[str, str], capsys) -> None:
    assert compare(capsys, sweeps["a"], sweeps["same"], "--expect-same", code=0)["expect_same"]
    assert main(["compare", sweeps["a"], sweeps["hotter"], "--expect-same", "--json"]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["expect_same"] is False
    err = captured.err
    assert f"power_w_mean {ROW10}: differs" in " ".join(err.split())
    assert f"energy_j_mean {ROW10}: undecided" in " ".join(err.split())
    assert "nodes 40" not in err  # a row only B has does not decide --expect-same
