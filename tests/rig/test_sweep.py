"""QUBO sweeps: the sweep file, the point order, checkpoints, resume, the summary and `rig show`."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from rich.console import Console

from rig.cli import main
from rig.commands.sweep import SweepProgressView, sweep_table
from rig.errors import ConfigError, RigError, RunInterrupted
from rig.qubo.sweep import (
    SweepPoint,
    SweepPointDone,
    SweepSpec,
    _exclusive,
    load_sweep,
    parse_sweep,
    plain,
    read_sweep,
    resume_sweep,
    stand_in_point,
    start_sweep,
    summarize,
)
from rig.run.events import RunFinished, RunStarted
from rig.run.store import EVENTS, INCOMPLETE

REPO = Path(__file__).resolve().parents[2]

SMALL = """
[sweep]
suts = ["cpu-sa", "loihi2"]
nodes = [10, 25]
densities = [0.05, 0.25]
seeds = [0, 1, 2]
timeouts = [0.01, 1]
"""


def small_spec(tmp_path: Path) -> SweepSpec:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    return load_sweep(path)


def point_events(run: Path) -> list[dict[str, Any]]:
    out = []
    for line in (run / EVENTS).read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record["event"] == "sweep_point":
            out.append(record)
    return out


class Counting:
    """The stand-in point, counting calls; raises `fail` at the given point indices."""

    def __init__(self, fail: dict[int, BaseException] | None = None) -> None:
        self.calls: list[str] = []
        self.fail = fail or {}

    def __call__(self, point: SweepPoint) -> dict[str, Any]:
        if point.index in self.fail:
            raise self.fail[point.index]
        self.calls.append(point.key)
        return stand_in_point(point)


# -- the sweep file ----------------------------------------------------------------------------
def test_example_file_loads_and_enumerates_in_fixed_order() -> None:
    spec = load_sweep(REPO / "sweeps" / "example.toml")
    points = spec.points()
    assert len(points) == (len(spec.suts) * len(spec.nodes) * len(spec.densities)
                           * len(spec.timeouts) * len(spec.seeds))
    assert [p.index for p in points] == list(range(len(points)))
    assert len({p.key for p in points}) == len(points)
    # seed varies fastest, then timeout, density, nodes, sut
    first = points[:len(spec.seeds) + 1]
    assert [p.seed for p in first] == [*spec.seeds, spec.seeds[0]]
    assert first[-1].timeout_s == spec.timeouts[1]
    assert points[-1].sut == spec.suts[-1]


def test_defaults_and_types(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[sweep]\nsuts = ["cpu-tabu"]\nnodes = [10]\ndensities = [1]\n'
                    "timeouts = [1, 0.5]\n")
    spec = load_sweep(path)
    assert spec.seeds == (0, 1, 2, 3, 4) and spec.solver_seed == 0 and spec.targets == "table"
    assert spec.densities == (1.0,) and spec.timeouts == (1.0, 0.5)
    assert spec.name == "s"
    assert spec.points()[0].key == "cpu-tabu/n10/d1.0/t1.0/s0"


def test_keys_survive_the_manifest_round_trip(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    again = SweepSpec.from_snapshot(json.loads(json.dumps(spec.snapshot())), "m.json")
    assert again == spec
    assert [p.key for p in again.points()] == [p.key for p in spec.points()]


@pytest.mark.parametrize(("body", "words"), [
    ('suts = ["cpu-sa"]\nnodes = [10]\ndensities = [0.1]\n', ["timeouts is missing"]),
    ('suts = ["gpu"]\nnodes = [10]\ndensities = [0.1]\ntimeouts = [1]\n',
     ["suts", "expected each value one of cpu-tabu", "found 'gpu'"]),
    ('suts = ["cpu-sa"]\nnodes = [0]\ndensities = [0.1]\ntimeouts = [1]\n',
     ["nodes", "integer in [1, ", "found 0"]),
    ('suts = ["cpu-sa"]\nnodes = [true]\ndensities = [0.1]\ntimeouts = [1]\n',
     ["nodes", "found True"]),
    ('suts = ["cpu-sa"]\nnodes = [10]\ndensities = [1.5]\ntimeouts = [1]\n',
     ["densities", "(0, 1]", "found 1.5"]),
    ('suts = ["cpu-sa"]\nnodes = [10]\ndensities = [0.1]\ntimeouts = [0]\n',
     ["timeouts", "in (0, ", "found 0"]),
    ('suts = ["cpu-sa"]\nnodes = [10, 10]\ndensities = [0.1]\ntimeouts = [1]\n',
     ["nodes", "distinct", "found 10 more than once"]),
    ('suts = []\nnodes = [10]\ndensities = [0.1]\ntimeouts = [1]\n',
     ["suts", "non-empty list", "found []"]),
    ('suts = "cpu-sa"\nnodes = [10]\ndensities = [0.1]\ntimeouts = [1]\n',
     ["suts", "non-empty list", "found 'cpu-sa'"]),
    ('suts = ["cpu-sa"]\nnodes = [10]\ndensities = [0.1]\ntimeouts = [1]\ntargets = "x"\n',
     ["targets", "expected one of table, compute", "found 'x'"]),
    ('suts = ["cpu-sa"]\nnodes = [10]\ndensities = [0.1]\ntimeouts = [1]\nsolver_seed = -1\n',
     ["solver_seed", "integer in [0, ", "found -1"]),
    ('suts = ["cpu-sa"]\nnodes = [10]\ndensities = [0.1]\ntimeouts = [1]\nseed = [1]\n',
     ["unknown key 'seed'", "seeds"]),
    ('suts = ["cpu-sa"]\nnodes = [10]\ndensities = [0.1]\ntimeouts = [1]\n'
     '[sweep.sut_options.loihi2]\nx = 1\n', ["sut_options", "found 'loihi2'"]),
])
def test_bad_sweep_files_name_file_key_expected_found(
    tmp_path: Path, body: str, words: list[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[sweep]\n" + body)
    with pytest.raises(ConfigError) as info:
        load_sweep(path)
    text = str(info.value)
    assert str(path) in text
    for word in words:
        assert word in text, text


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sweep file not found"):
        load_sweep(tmp_path / "nope.toml")
    (tmp_path / "b.toml").write_text("[sweep\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_sweep(tmp_path / "b.toml")
    with pytest.raises(ConfigError, match=r"\[sweep\] table is missing"):
        parse_sweep({}, tmp_path / "e.toml")


# -- running and checkpoints -------------------------------------------------------------------
def test_full_sweep_writes_one_checkpoint_per_point(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    fn = Counting()
    outcome = start_sweep(spec, runs_root=tmp_path / "runs", point_function=fn)
    points = spec.points()
    assert outcome.status == "complete" and outcome.ran == len(points) == 48
    assert fn.calls == [p.key for p in points]
    on_disk = point_events(outcome.run_path)
    assert [e["key"] for e in on_disk] == [p.key for p in points]
    for event, point in zip(on_disk, points, strict=True):
        assert event["result"] == stand_in_point(point)
    record = read_sweep(outcome.run_path)
    assert record.status == "complete" and len(record.done) == 48 and record.sessions == 1
    assert record.manifest["status"] == "complete"
    assert record.manifest["points_total"] == 48
    rows = pq.read_table(outcome.run_path / "results.parquet").to_pylist()
    assert [r["key"] for r in rows] == [p.key for p in points]
    assert rows[0]["gap"] == stand_in_point(points[0])["gap"]


def test_summary_means_over_seeds_against_closed_form(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    outcome = start_sweep(spec, runs_root=tmp_path / "runs", point_function=Counting())
    rows = {(r["sut"], r["nodes"], r["density"], r["timeout_s"]): r
            for r in outcome.summary["rows"]}
    assert len(rows) == 2 * 2 * 2 * 2
    # nodes 25: target -(25 // 3) - 1 = -9; seeds 0, 1, 2 cost -9, -8, -9: gaps 0, 1/9, 0
    row = rows[("cpu-sa", 25, 0.25, 1.0)]
    assert row["gap_mean"] == pytest.approx((1 / 9) / 3)
    assert row["power_w_mean"] == pytest.approx(1.25) and row["power_seeds"] == 3
    assert row["seeds"] == 3 and row["failed"] == 0
    # no power: None and the reason, never zero
    loihi = rows[("loihi2", 10, 0.05, 0.01)]
    assert loihi["power_w_mean"] is None and loihi["power_seeds"] == 0
    assert "unavailable" in loihi["power_status"]


def test_partial_power_is_averaged_over_the_seeds_that_have_it() -> None:
    spec = SweepSpec(suts=("cpu-sa",), nodes=(10,), densities=(0.1,), timeouts=(1.0,),
                     seeds=(0, 1, 2))
    done = {}
    for p, power in zip(spec.points(), (2.0, None, 4.0), strict=True):
        done[p.key] = SweepPointDone(key=p.key, result={"gap": 0.5, "power_w": power,
                                                         "power_status": "rapl"})
    (row,) = summarize(spec, done)["rows"]
    assert row["power_w_mean"] == 3.0 and row["power_seeds"] == 2 and row["seeds"] == 3
    assert row["gap_mean"] == 0.5


def test_interrupt_then_resume_keeps_every_point_once(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    first = Counting(fail={17: KeyboardInterrupt()})
    with pytest.raises(RunInterrupted, match="rig sweep resume"):
        start_sweep(spec, runs_root=tmp_path / "runs", point_function=first)
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    record = read_sweep(run)
    assert record.status == "interrupted" and len(record.done) == 17
    assert record.manifest["status"] == "interrupted"
    second = Counting()
    outcome = resume_sweep(run, point_function=second)
    keys = [p.key for p in spec.points()]
    assert second.calls == keys[17:]
    assert [e["key"] for e in point_events(run)] == keys
    record = read_sweep(run)
    assert record.status == "complete" and record.sessions == 2
    assert outcome.summary["points_done"] == 48
    (resume,) = record.manifest["resumes"]
    assert resume["points_done"] == 17 and resume["points_total"] == 48
    assert len(pq.read_table(run / "results.parquet")) == 48


def kill_minus_9(run: Path, keep_points: int, torn: str) -> None:
    """Leave `run` as a kill -9 would: the first points on disk, then a torn line, no finish."""
    lines = (run / EVENTS).read_text().splitlines(keepends=True)
    kept, points = [], 0
    for line in lines:
        kind = json.loads(line)["event"]
        if kind == "sweep_point":
            if points == keep_points:
                break
            points += 1
        if kind != "run_finished":
            kept.append(line)
    (run / EVENTS).write_text("".join(kept) + torn)


@pytest.mark.parametrize("torn", ['{"event": "sweep_point", "index": 9, "ke', ""])
def test_resume_after_kill_skips_done_points_and_ignores_torn_line(
    tmp_path: Path, torn: str
) -> None:
    spec = small_spec(tmp_path)
    run = start_sweep(spec, runs_root=tmp_path / "runs", point_function=Counting()).run_path
    kill_minus_9(run, keep_points=9, torn=torn)
    record = read_sweep(run)
    assert record.status == INCOMPLETE and len(record.done) == 9
    assert record.bad_lines == (1 if torn else 0)
    fn = Counting()
    resume_sweep(run, point_function=fn)
    keys = [p.key for p in spec.points()]
    assert fn.calls == keys[9:]
    assert [e["key"] for e in point_events(run)] == keys
    record = read_sweep(run)
    assert record.status == "complete" and record.bad_lines == (1 if torn else 0)
    assert record.manifest["resumes"][0]["bad_lines"] == (1 if torn else 0)


def test_complete_record_missing_only_its_newline_counts(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    run = start_sweep(spec, runs_root=tmp_path / "runs", point_function=Counting()).run_path
    kill_minus_9(run, keep_points=5, torn="")
    text = (run / EVENTS).read_text()
    (run / EVENTS).write_text(text.rstrip("\n"))  # the 5th point lost only its "\n"
    fn = Counting()
    resume_sweep(run, point_function=fn)
    assert fn.calls == [p.key for p in spec.points()][5:]
    assert read_sweep(run).bad_lines == 0


def test_resume_after_a_resume_was_killed(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    first = Counting(fail={10: KeyboardInterrupt()})
    with pytest.raises(RunInterrupted):
        start_sweep(spec, runs_root=tmp_path / "runs", point_function=first)
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    resume_sweep(run, point_function=Counting())
    kill_minus_9(run, keep_points=30, torn="")  # the resumed session "died" after point 30
    record = read_sweep(run)
    assert record.status == INCOMPLETE  # not the first session's "interrupted"
    fn = Counting()
    resume_sweep(run, point_function=fn)
    assert fn.calls == [p.key for p in spec.points()][30:]
    assert len(point_events(run)) == 48 and read_sweep(run).status == "complete"


def test_resuming_a_complete_sweep_runs_nothing(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    run = start_sweep(spec, runs_root=tmp_path / "runs", point_function=Counting()).run_path
    fn = Counting()
    outcome = resume_sweep(run, point_function=fn)
    assert fn.calls == [] and outcome.ran == 0 and outcome.status == "complete"
    assert len(point_events(run)) == 48


def test_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    fn = Counting(fail={3: RigError("solver died", hint="check the worker")})
    outcome = start_sweep(spec, runs_root=tmp_path / "runs", point_function=fn)
    assert outcome.status == "complete" and outcome.summary["points_failed"] == 1
    failed = point_events(outcome.run_path)[3]
    assert failed["status"] == "failed" and "solver died" in failed["error"]
    assert failed["result"] == {}
    row = outcome.summary["rows"][1]  # cpu-sa, 10, 0.05, 1 s: seeds 0-2 hold index 3
    assert row["failed"] == 1 and row["seeds"] == 2
    # a plain resume does not measure it again; --retry-failed does
    again = Counting()
    resume_sweep(outcome.run_path, point_function=again)
    assert again.calls == []
    retry = Counting()
    resume_sweep(outcome.run_path, point_function=retry, retry_failed=True)
    assert retry.calls == [spec.points()[3].key]
    record = read_sweep(outcome.run_path)
    assert record.failed == 0 and record.status == "complete"


def test_bad_setup_stops_the_sweep_as_failed(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    fn = Counting(fail={2: ConfigError("no qubo extra", hint="pip install")})
    outcome = start_sweep(spec, runs_root=tmp_path / "runs", point_function=fn)
    assert outcome.status == "failed" and isinstance(outcome.error, ConfigError)
    assert len(point_events(outcome.run_path)) == 2
    record = read_sweep(outcome.run_path)
    assert record.status == "failed" and "no qubo extra" in record.manifest["error"]


def test_one_rig_per_sweep_folder(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    fn = Counting(fail={1: KeyboardInterrupt()})
    with pytest.raises(RunInterrupted):
        start_sweep(spec, runs_root=tmp_path / "runs", point_function=fn)
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    with _exclusive(run):
        with pytest.raises(ConfigError, match="another rig process"):
            resume_sweep(run, point_function=Counting())
        assert read_sweep(run).status == "interrupted"  # finished session: not running
    assert len(point_events(run)) == 1


def test_a_sweep_being_measured_shows_as_running(tmp_path: Path) -> None:
    spec = small_spec(tmp_path)
    seen: list[str] = []

    def peek(point: SweepPoint) -> dict[str, Any]:
        if point.index == 3:
            seen.append(read_sweep(run_of(tmp_path)).status)
        return stand_in_point(point)

    start_sweep(spec, runs_root=tmp_path / "runs", point_function=peek)
    assert seen == ["running"]
    assert read_sweep(run_of(tmp_path)).status == "complete"


def run_of(tmp_path: Path) -> Path:
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    return run


def test_not_a_sweep_folder(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"procedure": "asc"}))
    with pytest.raises(ConfigError, match="not a sweep run folder"):
        read_sweep(tmp_path)


def test_plain_makes_numpy_json_able() -> None:
    data = plain({"cost": np.int64(-4), "state": np.array([True, False]),
                  "gap": np.float32(0.5), "improvements": [(np.float64(0.1), np.int32(-3))]})
    assert json.loads(json.dumps(data)) == {"cost": -4, "state": [True, False], "gap": 0.5,
                                            "improvements": [[0.1, -3]]}


# -- the console and `rig show` ----------------------------------------------------------------
def test_progress_eta_is_mean_point_time_times_points_left() -> None:
    view = SweepProgressView(Console(file=io.StringIO(), force_terminal=False))
    view(RunStarted(procedure="qubo-sweep", device="cpu-sa", manifest={"points_total": 10}))
    for wall in (1.0, 3.0):
        view(SweepPointDone(key="k", wall_s=wall))
    (task,) = view._progress.tasks
    assert task.completed == 2 and task.total == 10
    assert task.fields["eta_s"] == pytest.approx(2.0 * 8)
    view(RunFinished(status="complete"))


def test_show_json_for_a_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = small_spec(tmp_path)
    with pytest.raises(RunInterrupted):
        start_sweep(spec, runs_root=tmp_path / "runs",
                    point_function=Counting(fail={20: KeyboardInterrupt()}))
    (run,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    capsys.readouterr()
    assert main(["show", str(run), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "interrupted" and data["procedure"] == "qubo-sweep"
    assert data["points_done"] == 20 and data["points_total"] == 48
    assert len(data["summary"]) == 16
    first = data["summary"][0]
    assert (first["sut"], first["nodes"], first["density"], first["timeout_s"]) == (
        "cpu-sa", 10, 0.05, 0.01)
    assert first["gap_mean"] == pytest.approx((1 / 4) / 3)  # target -4; costs -4, -3, -4
    assert main(["show", str(run)]) == 0
    text = capsys.readouterr().out
    assert "interrupted" in text and "20/48" in text and "rig sweep resume" in text
    assert "cpu-sa" in text and "1.100 W" in text


def test_points_whose_solver_lacked_the_cpu_are_flagged_contended(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CPU SUT's point whose solver had the CPU for under 90% of its solve (a busy host, e.g.
    workers sharing it) is counted per row and over the sweep, marked in the table, in `rig
    show` and in the progress view: it understates the SUT."""
    spec = small_spec(tmp_path)
    shares = {0: 0.5, 1: 0.95, 3: 0.89}  # point index -> the solver's share of the CPU

    def fn(point: SweepPoint) -> dict[str, Any]:
        result = stand_in_point(point)
        if point.index in shares:
            result["solver_cpu_s"] = shares[point.index] * result["elapsed_s"]
        return result

    shown = io.StringIO()
    view = SweepProgressView(Console(file=shown, force_terminal=False, width=200))
    outcome = start_sweep(spec, runs_root=tmp_path / "runs", point_function=fn,
                          subscribers=[view])
    view.close()
    summary = outcome.summary
    assert summary["points_contended"] == 2  # 0.5 and 0.89; 0.95 is not, nor the rest
    first, second = summary["rows"][:2]  # seeds 0-2 of the first timeout, then the next
    assert (first["contended"], second["contended"]) == (1, 1)
    assert sum(r["contended"] for r in summary["rows"]) == 2
    progress = " ".join(shown.getvalue().split())
    points = spec.points()
    assert f"point {points[0].key}: the solver had the CPU for 50% of its solve" in progress
    assert f"point {points[3].key}: the solver had the CPU for 89%" in progress
    assert points[1].key + ":" not in progress
    assert main(["show", str(outcome.run_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "2 point(s) contended: the solver had the CPU for under 90% of its solve" in out
    assert main(["show", str(outcome.run_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["points_contended"] == 2
    assert main(["report", str(outcome.run_path), "--out", str(tmp_path / "report"),
                 "--format", "md"]) == 0
    capsys.readouterr()
    assert ("2 point(s) of this sweep were contended: the solver had the CPU for under 90% of "
            "its solve (a busy host), so they understate the SUT.") in \
        (tmp_path / "report" / "report.md").read_text()
    table = io.StringIO()
    Console(file=table, width=200).print(sweep_table(summary["rows"], title="t"))
    text = table.getvalue()
    assert text.count("3/3 [c]") == 2
    assert "[c] contended: 2 seed(s) whose solver had the CPU for under 90% of its solve" in \
        " ".join(text.split())
