"""Refusals leave no debris (issue 22.9): what the bench alone shows is refused before a run
folder exists or a port is opened (exit 2, one line); what needs the instrument marks the
folder "refused", and `rig show` and `list_runs` (the runner's earlier-runs list) say so.

Most commands run in this process (`rig_in_process`): a new interpreter's start-up and imports
were most of their CPU. One of each command still runs as a user runs it (the console script):
one bench-only refusal (exit 2, nothing else on stderr), one `rig show`, one `rig report`."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from rig.run.store import REFUSED, list_runs, load_run
from tests.e2e.runs import REPO, only_run, rig_in_process, run_rig
from tests.rig.test_file_numbers import toml_document

BENCH_ONLY = {
    # --emon n6705 on the LPM01A bench: its timestamp line is a trigger pin, not the aux input.
    "n6705 without aux": (("sim", "--emon", "n6705-sim"), "timestamp_input"),
    "LPM01A supply below 1.8 V": (("sim", "--voltage", "1.2"), "LPM01A: can only supply"),
    "LPM01A rate it does not know": (("sim", "--sample-rate", "1500"), "LPM01A cannot sample"),
    "PPK2 rate not 100 kHz / N": (("sim-ppk2", "--sample-rate", "30000"), "100 kHz divided"),
    "N6705 Elog faster than 409.6 us": (("sim-n6705", "--sample-rate", "5000"), "out of range"),
}


@pytest.mark.parametrize("case", sorted(BENCH_ONLY))
def test_what_the_bench_shows_is_refused_before_a_folder(tmp_path: Path, case: str) -> None:
    (device, *flags), words = BENCH_ONLY[case]
    runs = tmp_path / "runs"
    # one case as a user runs it (the console script prints nothing but its line)
    rig = run_rig if case == min(BENCH_ONLY) else rig_in_process
    done = rig("measure", "asc", "--device", device, *flags, "--runs-dir", str(runs))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    bench = REPO / "benches" / f"{device}.toml"
    assert len(lines) == 1 and lines[0].startswith(f"rig: error: {bench}: [emon] "), lines
    assert words in lines[0]
    assert not runs.exists()


def test_a_supply_outside_the_monitor_range_touches_no_instrument(tmp_path: Path) -> None:
    """On a running virtual bench (its ptys as the bench's ports): the simulated LPM01A never
    got host control and the DUT was never powered."""
    from virtual_bench.bench import VirtualBench
    from virtual_bench.description import load_description

    raw = tomllib.loads((REPO / "benches" / "sim.toml").read_text())
    with VirtualBench(load_description(REPO / "benches" / "sim.toml")) as vb:
        raw["dut"]["port"], raw["emon"]["port"] = vb.ports["dut"], vb.ports["emon"]
        raw["emon"]["supply_voltage_v"] = 1.2
        del raw["sim"]
        raw["bench"]["simulated"] = True
        bench = tmp_path / "bench.toml"
        bench.write_text(toml_document(raw))
        runs = tmp_path / "runs"
        done = rig_in_process("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs))
        assert done.returncode == 2 and "1.8..3.3 V, not 1.2 V" in done.stderr, done.stderr
        assert not runs.exists()
        assert vb.emon.host_control is False and vb.world.generation == 0


def refused_run(tmp_path: Path) -> tuple[Path, str]:
    """An Otii bench at 1000 Hz: only the instrument says it is an Arc (4 kS/s, fixed)."""
    runs = tmp_path / "runs"
    done = rig_in_process("measure", "asc", "--device", "sim-otii", "--sample-rate", "1000",
                          "--runs-dir", str(runs))
    assert done.returncode == 2, done.stderr
    return only_run(runs), done.stderr


def test_what_needs_the_instrument_marks_the_folder_refused(tmp_path: Path) -> None:
    run, err = refused_run(tmp_path)
    assert f"run folder: {run} (refused)" in err
    assert "an Otii Arc samples at 4000 Hz, not 1000 Hz" in err
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == REFUSED
    record = load_run(run)
    assert record.status == REFUSED and record.rows == []
    assert [r["status"] for r in list_runs(run.parent)] == [REFUSED]
    show = run_rig("show", str(run))
    assert show.returncode == 0, show.stderr
    assert "status: refused" in show.stdout and "nothing was measured" in show.stdout
    data = json.loads(rig_in_process("show", str(run), "--json").stdout)
    assert data["status"] == REFUSED and data["measured"] == {}


def test_a_report_of_a_refused_run_says_refused(tmp_path: Path) -> None:
    run, _ = refused_run(tmp_path)
    done = rig_in_process("report", str(run), "--out", str(tmp_path / "report"))
    assert done.returncode == 2
    assert "was refused by the instrument before anything was measured" in done.stderr
    done = run_rig("report", str(run), "--out", str(tmp_path / "report"), "--allow-incomplete")
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert "The instrument refused the bench's settings; nothing was measured." in text
