"""Bad input and faults: one-line errors with the fix, exit codes, nothing lost, DUT off.

Most refusals run in this process (`rig_in_process`): a new interpreter's start-up and imports
were nearly all of their CPU. Still run as a user runs them: one refusal (nothing else on
stderr), `--debug`'s traceback, Ctrl-C and kill -9 (signals to a process), one `rig show`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import serial

from rig.bench.config import load_bench
from rig.cli import main
from rig.run.events import LatencyRun
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description
from virtual_bench.pty import Pty

from .runs import (
    REPO,
    RIG,
    bench_variant,
    events,
    only_run,
    rig_in_process,
    run_rig,
    wait_for_event,
    wait_gone,
)

pytestmark = pytest.mark.slow


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    # Progress lines may precede it; the error itself is one line, and the last.
    errors = [x for x in proc.stderr.splitlines() if x.startswith("rig: error: ")]
    assert len(errors) == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == errors[0]
    return errors[0]


def hardware_bench(tmp_path: Path, dut_port: str, emon_port: str | None, **extra: str) -> Path:
    """A bench file pointing at explicit ports (a virtual bench we started in this process)."""
    emon = (f'driver = "lpm01a"\nport = "{emon_port}"\nsample_rate_hz = 1000\n'
            f"supply_voltage_v = 1.8\n") if emon_port else 'driver = "none"\n'
    text = (
        f'[bench]\nname = "attached"\nvoltage_limit_v = 3.3\nsimulated = true\n\n'
        f'[dut]\nport = "{dut_port}"\ntimestamp_mode = "energy"\n'
        f'boot_timeout_s = {extra.get("boot_timeout_s", "5.0")}\n\n'
        f"[emon]\n{emon}\n[procedure.asc]\nmin_run_s = 1.0\n"
    )
    path = tmp_path / "attached.toml"
    path.write_text(text)
    return path


def test_missing_bench_file(tmp_path: Path) -> None:
    # the file's one refusal as a user runs it: the console script prints nothing else
    line = one_line_error(run_rig("measure", "asc", "--bench", str(tmp_path / "nope.toml")))
    assert "does not exist" in line


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    proc = run_rig("--debug", "measure", "asc", "--bench", str(tmp_path / "nope.toml"))
    assert proc.returncode != 0
    assert "Traceback" in proc.stderr and "ConfigError" in proc.stderr


def test_malformed_bench_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[dut\nport = 3\n")
    assert "not valid TOML" in one_line_error(rig_in_process("measure", "asc", "--bench",
                                                             str(bad)))


def test_unknown_device_lists_the_known_ones() -> None:
    line = one_line_error(rig_in_process("measure", "asc", "--device", "xylo-nano"))
    assert "unknown device 'xylo-nano'" in line and "sim" in line


def test_port_that_does_not_exist(tmp_path: Path) -> None:
    bench = hardware_bench(tmp_path, "/dev/ttyRIG_NOPE0", None)
    line = one_line_error(rig_in_process("measure", "asc", "--bench", str(bench),
                                         "--runs-dir", str(tmp_path / "runs")))
    assert "[dut] port '/dev/ttyRIG_NOPE0' does not exist" in line and "rig devices" in line
    # Refused from the bench alone, before anything is written (issue 39: it left a `failed`
    # run folder): tests/e2e/test_bench_refusals.py
    assert not (tmp_path / "runs").exists()


def test_busy_port(tmp_path: Path) -> None:
    pty = Pty()
    holder = serial.Serial(pty.path, exclusive=True)  # another program has the DUT's port
    try:
        bench = hardware_bench(tmp_path, pty.path, None)
        # (its flock holds against a second open in this process too)
        line = one_line_error(rig_in_process("measure", "asc", "--bench", str(bench),
                                             "--runs-dir", str(tmp_path / "runs")))
        assert "is busy" in line and "close it" in line
    finally:
        holder.close()
        pty.close()


def test_dut_that_never_says_ready_is_powered_off(tmp_path: Path, capsys) -> None:
    """A silent DUT port behind a working LPM01A: deadline, exit 2, supply switched off."""
    silent = Pty()
    with VirtualBench(load_description(REPO / "benches" / "sim.toml")) as vb:
        bench = hardware_bench(tmp_path, silent.path, vb.ports["emon"], boot_timeout_s="0.5")
        code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r")])
        err = capsys.readouterr().err
        assert code == 2
        assert "never said m-ready" in err and "Traceback" not in err
        assert vb.world.powered is False  # the rig switched the DUT's supply off again
    silent.close()
    manifest = json.loads((only_run(tmp_path / "r") / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "m-ready" in manifest["error"]


class _InterruptOn:
    """A subscriber that presses Ctrl-C when the n-th event of a kind is published."""

    def __init__(self, kind: type, n: int) -> None:
        self.kind, self.n, self.seen = kind, n, 0

    def __call__(self, event) -> None:
        if isinstance(event, self.kind):
            self.seen += 1
            if self.seen == self.n:
                raise KeyboardInterrupt


def test_interrupt_powers_off_and_keeps_what_was_measured(tmp_path: Path) -> None:
    from rig.errors import RunInterrupted
    from rig.run.measure import measure_asc
    from rig.run.store import load_run

    with VirtualBench(load_description(REPO / "benches" / "sim.toml")) as vb:
        bench = load_bench(hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"]))
        with pytest.raises(RunInterrupted) as err:
            measure_asc(bench, device="attached", runs_root=tmp_path / "r",
                        subscribers=[_InterruptOn(LatencyRun, 2)])
        assert vb.world.powered is False
    assert "powered off" in err.value.message and err.value.exit_code == 130
    record = load_run(only_run(tmp_path / "r"))
    assert record.status == "interrupted"
    assert [r["kind"] for r in record.rows].count("latency_run") == 2
    assert record.manifest["summary"]["latency_runs"] == 2


def test_ctrl_c_from_the_terminal(tmp_path: Path) -> None:
    bench = bench_variant(tmp_path)
    runs = tmp_path / "runs"
    cmd = [*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir", str(runs)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    run = wait_for_event(runs, "latency_run", 1, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert events(run)[-1]["event"] == "run_finished"
    assert events(run)[-1]["status"] == "interrupted"
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"
    assert wait_gone(bench) == []  # the virtual bench went away with the run


def test_kill_9_leaves_an_incomplete_run_that_show_reads(tmp_path: Path) -> None:
    bench = bench_variant(tmp_path)
    runs = tmp_path / "runs"
    cmd = [*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir", str(runs)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    run = wait_for_event(runs, "latency_run", 2, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert wait_gone(bench) == []  # its virtual bench saw stdin close and stopped
    shown = rig_in_process("show", str(run), "--json")
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["status"] == "incomplete"
    assert data["measured"]["latency_run"] >= 2
    assert data["summary"]["inferences_per_s"] == pytest.approx(80.0, rel=1e-3)
    text = " ".join(run_rig("show", str(run)).stdout.split())
    assert "status: incomplete" in text and "everything it had measured" in text
    assert str(run) in text  # the path is printed whole, never wrapped
