"""`rig analyze` through rig.cli.main and through the installed console script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rig.cli import main
from rig.traces.files import TraceWriter, write_csv_trace

FS, V, P_IDLE, P_ACTIVE = 1000, 1.8, 1.2e-3, 3.6e-3
WINDOWS = [(1000, 3000), (4000, 6000)]


def arrays() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = 7000
    current = np.full(n, P_IDLE / V)
    gpio = np.ones(n, dtype=np.uint8)
    for start, end in WINDOWS:
        current[start:end] = P_ACTIVE / V
        gpio[start : start + 2] = 0
        gpio[end : end + 2] = 0
    return current, np.full(n, V), gpio


@pytest.fixture
def csv_trace(tmp_path: Path) -> Path:
    path = tmp_path / "run.csv"
    write_csv_trace(path, *arrays())
    return path


@pytest.fixture
def sim_jls(tmp_path: Path) -> Path:
    path = tmp_path / "run.jls"
    current, voltage, gpio = arrays()
    with TraceWriter(path, FS, simulated=True) as w:
        w.append(0, current, voltage, gpio)
    return path


def assert_one_error(err: str, message: str, hint: str) -> None:
    """rig.cli prints `rig: error: <message>` and the hint (on that line or one more)."""
    lines = err.splitlines()
    assert 1 <= len(lines) <= 2, err
    assert lines[0].startswith("rig: error: ") and message in lines[0]
    assert hint in err
    assert "Traceback" not in err


def test_json_matches_closed_form(csv_trace: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "analyze",
            str(csv_trace),
            "--sample-rate",
            "1000",
            "--iterations",
            "10",
            "--idle",
            "0:0.9",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert len(out.strip().splitlines()) == 1
    d = json.loads(out)
    for key in (
        "sample_rate_hz",
        "windows",
        "active_power_w",
        "energy_per_inference_j",
        "idle_power_w",
        "dynamic_power_w",
        "dynamic_energy_per_inference_j",
    ):
        assert key in d
    assert d["sample_rate_hz"] == 1000.0
    assert d["simulated"] is False
    assert len(d["windows"]) == 2
    for w, (s, e) in zip(d["windows"], WINDOWS, strict=True):
        assert set(w) == {"start_s", "end_s", "duration_s", "energy_j", "mean_power_w"}
        assert (w["start_s"], w["end_s"], w["duration_s"]) == (s / FS, e / FS, 2.0)
        assert w["energy_j"] == pytest.approx(P_ACTIVE * 2.0, rel=1e-12)
        assert w["mean_power_w"] == pytest.approx(P_ACTIVE, rel=1e-12)
    assert d["active_power_w"] == pytest.approx(P_ACTIVE, rel=1e-12)
    assert d["energy_per_inference_j"] == pytest.approx(P_ACTIVE * 0.2, rel=1e-12)
    assert d["idle_power_w"] == pytest.approx(P_IDLE, rel=1e-12)
    assert d["dynamic_power_w"] == pytest.approx(P_ACTIVE - P_IDLE, rel=1e-12)
    assert d["dynamic_energy_per_inference_j"] == pytest.approx(
        (P_ACTIVE - P_IDLE) * 0.2, rel=1e-12
    )


def test_json_without_idle_has_no_idle_keys(
    sim_jls: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(sim_jls), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert "idle_power_w" not in d and "dynamic_power_w" not in d
    assert d["simulated"] is True
    assert d["energy_per_inference_j"] == pytest.approx(P_ACTIVE * 2.0, rel=1e-6)


def test_table_shows_windows_units_and_simulated_label(
    sim_jls: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(sim_jls), "--iterations", "10", "--idle", "6:7"]) == 0
    out = capsys.readouterr().out
    assert "SIMULATED" in out
    assert "7200.0" in out  # window energy 7.2 mJ in µJ
    assert "3.6000 mW" in out and "1.2000 mW" in out and "2.4000 mW" in out
    assert "720.0" in out and "480.0" in out  # µJ per inference, dynamic µJ per inference
    assert "µJ" in out and "replicability" in out


@pytest.mark.parametrize(
    ("argv_tail", "message", "hint"),
    [
        (["--idle", "0-2"], "bad --idle '0-2'", "use START:END in seconds, e.g. --idle 0:2"),
        (["--idle", "2:1"], "START must be before END", "use START:END in seconds"),
        (["--idle", "0:100"], "outside the trace", "START:END in seconds"),
        (["--iterations", "0"], "--iterations must be at least 1", "inferences"),
    ],
)
def test_bad_arguments_exit_2_with_one_line_and_a_hint(
    csv_trace: Path,
    capsys: pytest.CaptureFixture[str],
    argv_tail: list[str],
    message: str,
    hint: str,
) -> None:
    code = main(["analyze", str(csv_trace), "--sample-rate", "1000", *argv_tail])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert_one_error(err, message, hint)


def test_csv_without_sample_rate_asks_for_it(
    csv_trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(csv_trace)]) == 2
    assert_one_error(capsys.readouterr().err, "has no sample rate", "pass --sample-rate HZ")


def test_no_edges_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "flat.csv"
    write_csv_trace(path, np.ones(10), np.ones(10), np.ones(10, dtype=np.uint8))
    assert main(["analyze", str(path), "--sample-rate", "10"]) == 2
    assert_one_error(
        capsys.readouterr().err, "no falling edges on the timestamp line", "GPIO wiring"
    )


def test_console_script_runs_and_fails_cleanly(csv_trace: Path, tmp_path: Path) -> None:
    rig = Path(sys.executable).parent / "rig"
    ok = subprocess.run(
        [str(rig), "analyze", str(csv_trace), "--sample-rate", "1000", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["active_power_w"] == pytest.approx(P_ACTIVE, rel=1e-12)
    bad = subprocess.run(
        [str(rig), "analyze", str(tmp_path / "missing.jls")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2
    assert_one_error(bad.stderr, "trace file not found: ", "check the path")


def test_a_failed_replicability_check_exits_1(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The second window draws twice the power of the first: energy per inference 3.6 mW x 2 s
    against 7.2 mW x 2 s, 33% from their mean, beyond the 5% limit. The table prints FAILED
    and the exit code says so (README: 1, a measurement that failed its own checks)."""
    current, voltage, gpio = arrays()
    start, end = WINDOWS[1]
    current[start:end] = 2 * P_ACTIVE / V
    path = tmp_path / "unequal.csv"
    write_csv_trace(path, current, voltage, gpio)
    assert main(["analyze", str(path), "--sample-rate", str(FS)]) == 1
    assert "replicability           FAILED" in capsys.readouterr().out
    assert main(["analyze", str(path), "--sample-rate", str(FS), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["replicability"]["ok"] is False
    assert result["replicability"]["max_rel_dev"] == pytest.approx(1 / 3, rel=1e-9)
