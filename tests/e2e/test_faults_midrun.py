"""Faults in the middle of a run (issue 13.11), made to happen on the virtual bench.

The rig runs against a `VirtualBench` served from this process on real ptys, through the CLI
(`main`, or the `rig` script in a subprocess). The faults are the bench's own: a DUT or monitor
port that goes away (its pty closed, the shim process killed), the simulated LPM01A losing samples
and saying so in its stream, a disk that fills up while the trace is written. Each must give one
typed line (exit 2, or 1 for a measurement that failed its check), the DUT powered off, what was
measured kept and the run folder marked.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import rig.commands.measure
from rig.cli import main
from rig.run.events import Event, LatencyRun
from rig.run.store import load_run
from rig.traces.files import read_trace
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description

from .runs import REPO, RIG, events, only_run, processes, wait_for_event
from .test_faults import hardware_bench, one_line_error

pytestmark = pytest.mark.slow

#: The timed run during which each fault happens (after two runs were measured and kept).
AFTER_RUNS = 2


@contextlib.contextmanager
def virtual_bench(speed: float | None = None) -> Iterator[VirtualBench]:
    """benches/sim.toml's DUT and LPM01A on ptys, served from this process (`speed`: simulated
    seconds per host second, 50 by default; slower leaves a run more host time to fail in)."""
    with VirtualBench(load_description(REPO / "benches" / "sim.toml"), speed=speed) as vb:
        yield vb


def on_latency_run(n: int, action: Callable[[], None], *, delay_s: float = 0.0):
    """A subscriber that does `action` once the n-th timed run is published: at once, or
    `delay_s` later from another thread (then the next run is under way)."""
    seen = 0

    def subscriber(event: Event) -> None:
        nonlocal seen
        if isinstance(event, LatencyRun):
            seen += 1
            if seen == n:
                if delay_s:
                    threading.Timer(delay_s, action).start()
                else:
                    action()
    return subscriber


def measure(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, bench: Path,
            runs: Path, subscriber: Callable[[Event], None]) -> tuple[int, str]:
    """`rig measure asc` as the CLI runs it, with `subscriber` on the run's event bus (it times
    the fault); returns the exit code and stderr."""
    real = rig.commands.measure.measure_asc

    def with_subscriber(*args, subscribers=(), **kwargs):
        return real(*args, subscribers=[*subscribers, subscriber], **kwargs)

    monkeypatch.setattr(rig.commands.measure, "measure_asc", with_subscriber)
    capsys.readouterr()
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(runs)])
    return code, capsys.readouterr().err


def error_line(code: int, err: str, exit_code: int = 2) -> str:
    """The one `rig: error:` line, last on stderr, with the exit code; no traceback."""
    assert code == exit_code, err
    assert "Traceback" not in err
    errors = [x for x in err.splitlines() if x.startswith("rig: error: ")]
    assert len(errors) == 1 and err.strip().splitlines()[-1] == errors[0], err
    return errors[0]


def kinds(run: Path) -> list[str]:
    """The kinds of the result rows the run folder kept."""
    return [r["kind"] for r in load_run(run).rows]


# -- (a) the DUT's port goes away ------------------------------------------------------------
def test_dut_unplugged_mid_run(tmp_path: Path, monkeypatch, capsys) -> None:
    """The DUT's USB serial goes away during a timed run: its pty closes under the rig (the C
    shim serving it is killed). The rig stops at once, and the LPM01A switches the DUT off."""
    with virtual_bench() as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs",
                            on_latency_run(AFTER_RUNS, vb.dut.close, delay_s=0.005))
        line = error_line(code, err)
        assert vb.world.powered is False
    assert line.startswith("rig: error: DUT: ") and vb.ports["dut"] in line
    assert "failed" in line and "unplugged" in line
    # ended by the port error, not by the 30 s reply deadline ("did not finish ... within")
    assert "within" not in line and "in time" not in line
    run = only_run(tmp_path / "runs")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["error"] in line
    assert kinds(run).count("latency_run") >= AFTER_RUNS
    assert kinds(run).count("window") >= AFTER_RUNS
    assert events(run)[-1]["event"] == "run_finished"


# -- (b) the monitor's port goes away --------------------------------------------------------
def test_monitor_unplugged_mid_run(tmp_path: Path, monkeypatch, capsys) -> None:
    """The LPM01A's USB goes away during a timed run: the failure happens on the driver's reader
    thread, and the run must end with it at once (before: a 30 s wait for timestamp edges that
    could never come, then a misleading timeout). The PowerShield, powered over USB, takes the
    DUT's supply down with it: the rig cannot send `pwr off`, and says so."""
    with virtual_bench() as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs",
                            on_latency_run(AFTER_RUNS, vb.emon.unplug, delay_s=0.005))
        line = error_line(code, err)
        assert vb.world.powered is False
    assert line.startswith("rig: error: LPM01A: read from ") and vb.ports["emon"] in line
    assert "stream stopped after" in line and "could not switch the DUT off" in line
    assert "could not stop the energy monitor" not in err  # said once, not again at shutdown
    # ended by the reader's fault, not by the recorder's 30 s edge wait ("waited 30 s for")
    assert "waited" not in err
    run = only_run(tmp_path / "runs")
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "LPM01A: read from" in manifest["error"]
    assert kinds(run).count("latency_run") >= AFTER_RUNS
    assert kinds(run).count("window") >= AFTER_RUNS


# -- (c) the monitor loses samples mid-window ------------------------------------------------
def test_monitor_overrun_mid_window_fails_that_window(tmp_path: Path, monkeypatch,
                                                      capsys) -> None:
    """The LPM01A's buffer overflows inside the third timed run's window: 200 samples go
    missing and the board says so in its stream. The samples after keep their true ids (a gap),
    so the window over the gap has no energy, and the procedure fails it by name."""
    with virtual_bench() as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        overrun = on_latency_run(AFTER_RUNS, lambda: vb.emon.inject_overrun(200, after_edge=100))
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs", overrun)
        line = error_line(code, err, exit_code=1)
        assert vb.world.powered is False
    assert f"rig: error: window {AFTER_RUNS} (samples " in line and "lost samples" in line
    run = only_run(tmp_path / "runs")
    record = load_run(run)
    assert record.status == "failed" and f"window {AFTER_RUNS} " in record.manifest["error"]
    windows = [r for r in record.rows if r["kind"] == "window"]
    assert len(windows) == AFTER_RUNS  # the two before it, kept
    runs_ = [r for r in record.rows if r["kind"] == "latency_run"]
    assert len(runs_) == AFTER_RUNS + 1
    # Its duration is still right: the lost samples are a gap in the ids, not a shorter window.
    assert runs_[-1]["elapsed_s"] == pytest.approx(runs_[0]["elapsed_s"], rel=2e-3)
    summary = record.manifest["summary"]
    assert summary["dropped_samples"] == 200
    assert {"name": "no lost samples", "ok": False, "detail": "200 samples dropped"} in summary[
        "checks"]
    trace = read_trace(run / "traces" / "emon.jls")
    assert int(np.isnan(trace.current).sum()) == 200  # the gap, as NaN
    assert any("200 samples dropped" in text for _, text in trace.meta["annotations"])


def test_monitor_drops_samples_silently(tmp_path: Path, monkeypatch, capsys) -> None:
    """Samples lost on the way (USB) without the board saying where: only its next TimeStamp
    line shows the shortfall. The run goes on, and fails its "no lost samples" check."""
    with virtual_bench() as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        lose = on_latency_run(
            AFTER_RUNS, lambda: vb.emon.inject_overrun(200, after_edge=100, report=False))
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs", lose)
        assert vb.world.powered is False
    assert code == 1, err
    assert "Traceback" not in err
    record = load_run(only_run(tmp_path / "runs"))
    assert record.status == "failed-checks"
    lost = next(c for c in record.manifest["summary"]["checks"] if c["name"] == "no lost samples")
    assert lost == {"name": "no lost samples", "ok": False, "detail": "200 samples dropped"}
    assert [r["kind"] for r in record.rows].count("window") == 5


# -- (c') the monitor loses a timestamp event ------------------------------------------------
def test_monitor_loses_a_d7_event_mid_run(tmp_path: Path, monkeypatch, capsys) -> None:
    """One ``event N ris`` line of the LPM01A goes missing during the third timed run (lost on
    the link: the next event's number shows the gap). Its windows could no longer be paired, so
    the run fails at once with the lost event's number; the runs before it, the trace so far and
    the run folder are kept, and the DUT is off."""
    with virtual_bench() as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs",
                            on_latency_run(AFTER_RUNS, vb.emon.lose_next_event))
        line = error_line(code, err)
        assert vb.world.powered is False
        assert len(vb.emon.lost_events) == 1
        (lost,) = vb.emon.lost_events
    assert line.startswith("rig: error: LPM01A: D7 event ")
    assert f"event {lost} never arrived" in line and f"after event {lost - 1}" in line
    assert "cannot be paired into windows" in line
    # ended by the driver's fault, not by the recorder's 30 s edge wait ("waited 30 s for")
    assert "waited" not in err
    # said once: the monitor's `stop` raises it again, which is no failure to stop
    assert err.count(f"event {lost} never arrived") == 1, err
    assert "could not stop the energy monitor" not in err
    run = only_run(tmp_path / "runs")
    record = load_run(run)
    assert record.status == "failed"
    assert f"event {lost} never arrived" in record.manifest["error"]
    assert kinds(run).count("latency_run") == AFTER_RUNS
    assert kinds(run).count("window") == AFTER_RUNS
    assert events(run)[-1]["event"] == "run_finished"
    trace = read_trace(run / "traces" / "emon.jls")
    saved = next(e for e in events(run) if e["event"] == "trace_saved")
    assert saved["samples"] == len(trace.current) > 0
    # The trace reaches past the kept runs' windows: what was measured up to the loss.
    last_window = [r for r in record.rows if r["kind"] == "window"][-1]
    assert len(trace.current) > last_window["end_sample"]


# -- (d) the disk fills up while the trace is written ----------------------------------------
def test_disk_fills_up_while_the_trace_is_written(tmp_path: Path, monkeypatch, capsys) -> None:
    """The runs disk is all but full during a timed run. pyjls would not say (it drops what it
    cannot write and prints to stderr), so the recorder watches the free space: the trace stops
    finished and readable, with room left for the rest of the run folder.

    The disk is the one fake here, at the file-system edge: `shutil.disk_usage` reports 48 KiB
    free from the third run on (a real small disk is in `test_a_real_small_disk_fills_up`)."""
    real_usage = shutil.disk_usage
    full = threading.Event()

    def disk_usage(path: str | os.PathLike) -> tuple[int, int, int]:
        usage = real_usage(path)
        if full.is_set() and Path(path).resolve().is_relative_to(tmp_path.resolve()):
            return usage._replace(free=48 << 10)
        return usage

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    with virtual_bench(speed=10) as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        code, err = measure(monkeypatch, capsys, bench, tmp_path / "runs",
                            on_latency_run(AFTER_RUNS, full.set))
        line = error_line(code, err)
        assert vb.world.powered is False
    run = only_run(tmp_path / "runs")
    trace_path = run / "traces" / "emon.jls"
    assert line.startswith("rig: error: the disk is full (48.0 KiB left, ")
    assert f": trace file {trace_path} stopped at " in line
    record = load_run(run)
    assert record.status == "failed" and record.manifest["error"] in line
    assert [r["kind"] for r in record.rows].count("latency_run") >= AFTER_RUNS
    stopped_at = record.manifest["traces"][0]["samples"]
    assert f"stopped at {stopped_at:,} samples" in line
    assert len(read_trace(trace_path)) == stopped_at  # a finished JLS file, readable


def writer_processes(under: Path) -> list[int]:
    """The pids of pyjls writer processes (`rig.traces.writer_process`) writing under `under`."""
    return processes(lambda argv: b"-c" in argv
                     and any(a.startswith(bytes(under)) for a in argv))


def test_the_trace_writer_crashing_mid_run_ends_the_run_not_the_rig(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """pyjls's writer crashes (as it did on a full disk in the short soak: SIGSEGV) during a
    timed run. It runs in a child process, so the rig goes on: the run stops with one line
    naming how the writer ended and the disk's free space, the DUT off, what was measured
    kept."""
    runs = tmp_path / "runs"
    killed: list[int] = []

    def crash() -> None:
        for pid in writer_processes(runs):
            os.kill(pid, signal.SIGSEGV)
            killed.append(pid)

    with virtual_bench(speed=10) as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        code, err = measure(monkeypatch, capsys, bench, runs, on_latency_run(AFTER_RUNS, crash))
        line = error_line(code, err)
        assert vb.world.powered is False
    assert len(killed) == 1
    run = only_run(runs)
    assert line.startswith("rig: error: the trace cannot be written (pyjls's writer process "
                           "died (SIGSEGV); "), line
    assert "free on its disk" in line and f": trace file {run / 'traces' / 'emon.jls'}" in line
    assert "(the disk had room: see the system log" in err  # not told to free space
    record = load_run(run)
    assert record.status == "failed" and record.manifest["error"] in line
    assert [r["kind"] for r in record.rows].count("latency_run") >= AFTER_RUNS


def _user_namespaces() -> bool:
    """Whether this machine lets us mount a tmpfs in a user namespace (no root needed)."""
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-Urm", "sh", "-c", "mount -t tmpfs none /tmp"],
                           capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _user_namespaces(), reason="no unprivileged user namespaces here")
@pytest.mark.parametrize("leave", [512 << 10, 0], ids=["reserve-left", "nothing-left"])
def test_a_real_small_disk_fills_up(tmp_path: Path, leave: int) -> None:
    """A real 32 MiB tmpfs (mounted in a user namespace) as the runs disk, 8 MiB free at the
    start, filled by another writer during a timed run: the kernel's own ENOSPC, pyjls's own
    behaviour (it drops what it cannot write and prints to stderr, never raises).

    With a little room left (under the 1 MiB the recorder keeps) the trace stops and the folder
    is finished, marked failed. With none, events.jsonl or the manifest cannot be written either:
    the run stops with that error, the DUT off, and the folder keeps what reached the disk (it
    reads back as incomplete when run_finished did not fit)."""
    disk, kept = tmp_path / "disk", tmp_path / "kept"
    disk.mkdir()
    with virtual_bench(speed=10) as vb:
        bench = hardware_bench(tmp_path, vb.ports["dut"], vb.ports["emon"])
        script = ('mount -t tmpfs -o size=32m rigtest "$0" || exit 99; '
                  'dd if=/dev/zero of="$0/ballast0" bs=1M count=24 2>/dev/null; '
                  '"$@"; code=$?; cp -a "$0/runs" "$KEPT"; exit $code')
        proc = subprocess.Popen(
            ["unshare", "-Urm", "sh", "-c", script, str(disk), *RIG, "measure", "asc",
             "--bench", str(bench), "--runs-dir", str(disk / "runs")],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "KEPT": str(kept)},
        )
        # The tmpfs as the rig sees it, from outside its mount namespace.
        inside = Path(f"/proc/{proc.pid}/root") / disk.relative_to("/")
        wait_for_event(inside / "runs", "latency_run", AFTER_RUNS, proc)
        fill(inside, leave)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 99, err
        assert vb.world.powered is False
    line = one_line_error(subprocess.CompletedProcess([], proc.returncode, "", err))
    assert "the disk is full" in line
    run = only_run(kept)
    record = load_run(run)
    assert [r["kind"] for r in record.rows].count("latency_run") >= AFTER_RUNS
    if leave:
        assert "stopped at" in line and record.status == "failed"
        assert len(read_trace(run / "traces" / "emon.jls")) == record.manifest["traces"][0][
            "samples"]
    else:  # which write fails first is the file system's call (a page free in one file)
        assert "cannot write " in line or "stopped at" in line
        assert record.status in ("failed", "incomplete")


def fill(disk: Path, leave: int) -> None:
    """Another program fills `disk` until only `leave` bytes are free."""
    with open(disk / "ballast", "wb") as f:
        block = b"\0" * (1 << 20)
        while (free := shutil.disk_usage(disk).free) > leave:
            try:
                f.write(block[: max(4096, min(len(block), free - leave))])
                f.flush()
            except OSError:
                break
