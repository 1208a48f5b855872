"""`rig emon record` end to end against the virtual bench's LPM01A, then `rig analyze` on it."""

from __future__ import annotations

import json
import select
from pathlib import Path

import pytest

from rig.cli import main
from rig.run.recording import EmonRecorder
from rig.traces.files import read_trace
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description
from virtual_bench.pty import Pty
from virtual_bench.world import NS

from .runs import REPO, window_scheduled

pytestmark = pytest.mark.slow

FS = 1000
#: Simulated seconds per host second: slow enough that the test's scheduler thread registers
#: the DUT's activity long before simulated time reaches it.
SPEED = 4.0
#: The window the "DUT" computes in, in samples of the capture: [K1, K2).
K1, K2 = 1200, 2000


def record(tmp_path: Path, capsys, *extra: str) -> tuple[int, dict, VirtualBench]:
    out = tmp_path / "capture.jls"
    with VirtualBench(load_description(REPO / "benches" / "sim.toml"), speed=SPEED) as vb:
        with window_scheduled(vb.world, K1, K2, FS, lambda: vb.emon.acquisition_t0_ns) as errors:
            code = main(["emon", "record", "--driver", "lpm01a", "--port", vb.ports["emon"],
                         "--duration", "3", "--voltage", "1.8", "--rate", str(FS),
                         "--out", str(out), *extra])
        assert not errors, errors
        assert vb.world.powered is False  # switched off after the capture
    captured = capsys.readouterr()
    return code, captured, vb


def test_record_then_analyze(tmp_path: Path, capsys) -> None:
    code, captured, vb = record(tmp_path, capsys, "--json")
    assert code == 0, captured.err
    report = json.loads(captured.out)
    idle_w, active_w = 1.2e-3, 3.6e-3  # benches/sim.toml
    n = 3 * FS
    assert report["samples"] == n and report["requested_samples"] == n
    assert report["duration_s"] == 3.0 and report["edges"] == 2 and report["dropped"] == 0
    assert report["simulated"] is True
    # Closed form: unpowered until the rig's `pwr on` (the capture starts first), idle after
    # it, active inside [K1, K2). The board prints 4 digits: 0.6667 mA for 1.2 mW at 1.8 V.
    t0, t_on = vb.emon.acquisition_t0_ns, vb.world.power_on_ns
    idle_s = (t0 + n * NS // FS - t_on) / NS - (K2 - K1) / FS
    expected = (idle_w * idle_s + active_w * (K2 - K1) / FS) / (n / FS)
    assert report["mean_power_w"] == pytest.approx(expected, rel=1e-4)
    assert report["energy_j"] == pytest.approx(expected * n / FS, rel=1e-4)

    trace = read_trace(tmp_path / "capture.jls")
    assert len(trace) == n and trace.simulated
    assert trace.gpio.tolist().count(0) >= 2
    # What the live pipeline integrated is what the file holds (float32 there).
    file_power = float((trace.current.astype(float) * trace.voltage).mean())
    assert report["mean_power_w"] == pytest.approx(file_power, rel=1e-6)

    assert main(["analyze", str(tmp_path / "capture.jls"), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["simulated"] is True
    [window] = result["windows"]
    assert window["start_s"] == K1 / FS and window["end_s"] == K2 / FS
    # The file stores float32 samples.
    assert window["energy_j"] == pytest.approx(active_w * (K2 - K1) / FS, rel=1e-6)
    assert window["mean_power_w"] == pytest.approx(active_w, rel=1e-6)


def test_record_prints_a_summary(tmp_path: Path, capsys) -> None:
    code, captured, _ = record(tmp_path, capsys)
    assert code == 0, captured.err
    lines = captured.out.splitlines()
    assert "(SIMULATED)" in lines[0]
    assert "samples      3000 at 1000 Hz" in lines
    assert "edges        2 (falling, GPIO bit 0)" in lines
    assert "dropped      0 samples" in lines


def test_voltage_above_the_bench_limit_touches_nothing(capsys, tmp_path: Path) -> None:
    pty = Pty()
    try:
        code = main(["emon", "record", "--driver", "lpm01a", "--port", pty.path, "--duration",
                     "1", "--voltage", "3.6", "--rate", "1000", "--out",
                     str(tmp_path / "x.jls")])
        err = capsys.readouterr().err
        assert code == 2
        assert "3.6 V is above the bench voltage limit of 3.3 V" in err
        ready, _, _ = select.select([pty.master], [], [], 0)
        assert not ready  # not one byte reached the instrument's side
        assert not (tmp_path / "x.jls").exists()
    finally:
        pty.close()


def test_bad_arguments_are_refused_before_opening(capsys, tmp_path: Path) -> None:
    base = ["emon", "record", "--driver", "lpm01a", "--port", "/dev/nonexistent-rig-port",
            "--voltage", "1.8"]
    cases = [
        (["--duration", "0", "--rate", "1000", "--out", str(tmp_path / "a.jls")], "--duration"),
        (["--duration", "1", "--rate", "999.5", "--out", str(tmp_path / "a.jls")], "whole"),
        (["--duration", "1", "--rate", "1000", "--out", str(tmp_path / "a.csv")], ".jls"),
        (["--duration", "0.0001", "--rate", "1000", "--out", str(tmp_path / "a.jls")],
         "less than one sample"),
    ]
    for extra, words in cases:
        assert main([*base, *extra]) == 2
        assert words in capsys.readouterr().err


def test_ctrl_c_powers_off_and_keeps_the_file(tmp_path: Path, capsys, monkeypatch) -> None:
    real_wait = EmonRecorder.wait_for_samples

    def interrupted(self: EmonRecorder, count: int, timeout_s: float) -> None:
        real_wait(self, 100, timeout_s)  # some samples first, then the user presses Ctrl-C
        raise KeyboardInterrupt

    monkeypatch.setattr(EmonRecorder, "wait_for_samples", interrupted)
    code, captured, _ = record(tmp_path, capsys)
    assert code == 130 and "interrupted" in captured.err
    trace = read_trace(tmp_path / "capture.jls")  # finished, readable
    assert 100 <= len(trace) <= 3000
