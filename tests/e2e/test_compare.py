"""`rig compare` on two virtual-bench runs: the same bench twice is not distinguishable; a DUT
with another active power is not the same; refusals in one line, exit 2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from .runs import TRUTH, bench_variant, only_run, run_rig

pytestmark = pytest.mark.slow

#: benches/sim.toml cut short: 2 timed runs of 1 s, one test sample per class.
SHORT = {"spc": ("samples_per_class = 10", "samples_per_class = 1"),
         "runs": ("runs = 5", "runs = 2"), "run_s": ("min_run_s = 10.0", "min_run_s = 1.0")}
POWER_FIGURES = {"active_power_w", "dynamic_power_w", "energy_per_inference_j",
                 "dynamic_energy_per_inference_j"}


def _measure(tmp: Path, name: str, **replace: tuple[str, str]) -> Path:
    bench = bench_variant(tmp, name, **SHORT, **replace)
    runs = tmp / f"runs-{name}"
    proc = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs))
    assert proc.returncode == 0, proc.stderr
    return only_run(runs)


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    tmp = tmp_path_factory.mktemp("compare")
    a = _measure(tmp, "a")
    again = _measure(tmp, "again")
    hotter = _measure(tmp, "hotter", power=("active_power_mw = 3.60", "active_power_mw = 3.90"))
    return a, again, hotter


def test_the_same_bench_twice_is_not_distinguishable(three_runs) -> None:
    a, again, _ = three_runs
    proc = run_rig("compare", str(a), str(again), "--json", "--expect-same")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {f["key"] for f in out["figures"]} == set(TRUTH)
    assert all(f["verdict"] == "not distinguishable" for f in out["figures"])
    assert out["expect_same"] is True and out["counts"]["not distinguishable"] == len(TRUTH)
    # the LPM01A publishes no supply setting: incomplete, U = 2 u_c of the known terms
    active = next(f for f in out["figures"] if f["key"] == "active_power_w")
    assert active["lower_bound"] and active["k"] == 2 and active["U"] == 2 * active["u_c"]
    human = run_rig("compare", str(a), str(again))
    assert human.returncode == 0 and "0 differ, 7 not distinguishable" in human.stdout


def test_another_active_power_is_not_shown_to_be_the_same(three_runs) -> None:
    """0.3 mW more active power: far beyond the known terms' U, but the budgets are incomplete
    (supply setting not published), so the power figures are undecided, never 'differs';
    --expect-same fails on them, one line each."""
    a, _, hotter = three_runs
    proc = run_rig("compare", str(a), str(hotter), "--json")
    assert proc.returncode == 0, proc.stderr
    figures = {f["key"]: f for f in json.loads(proc.stdout)["figures"]}
    for key in POWER_FIGURES:
        assert figures[key]["verdict"] == "undecided", figures[key]
        assert abs(figures[key]["difference"]) > figures[key]["U"]
    assert figures["active_power_w"]["difference"] == pytest.approx(0.3e-3, rel=0.01)
    for key in set(TRUTH) - POWER_FIGURES:
        assert figures[key]["verdict"] == "not distinguishable", figures[key]
    assert not any(f["verdict"] == "differs" for f in figures.values())
    strict = run_rig("compare", str(a), str(hotter), "--expect-same")
    assert strict.returncode == 1
    lines = strict.stderr.strip().splitlines()
    assert len(lines) == len(POWER_FIGURES)
    assert all(line.startswith("rig compare: ") and "undecided" in line for line in lines)


def test_refusals_are_one_line_exit_2(three_runs, tmp_path: Path) -> None:
    a = three_runs[0]
    other = tmp_path / "other"
    shutil.copytree(a, other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["procedure"] = "xylo-something"
    (other / "manifest.json").write_text(json.dumps(manifest))
    bare = tmp_path / "bare"
    shutil.copytree(a, bare)
    lines = (bare / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    for e in events:
        if e["event"] == "run_finished":
            e["summary"].pop("uncertainty")  # a run from before budgets
    (bare / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    before = sorted(p.name for p in tmp_path.rglob("*"))
    for args, says in (((str(a), str(other)), "different procedures"),
                       ((str(a), str(bare)), "no figures"),
                       ((str(a), str(tmp_path / "nothing")), "is not a run folder")):
        proc = run_rig("compare", *args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == ""
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith("rig: error: ") and says in line
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
