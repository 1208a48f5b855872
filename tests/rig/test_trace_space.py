"""Disk space for traces: the size projection, refuse and warn, and both commands checking first."""

from __future__ import annotations

import json
import math
from collections import namedtuple
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from drivers.dut.client import LoadResult
from rig.bench.config import load_bench
from rig.cli import main
from rig.errors import ConfigError, RigError
from rig.run import measure as runner
from rig.run.events import Event, Note
from rig.traces import space as trace_space
from rig.traces.files import TraceWriter
from rig.traces.space import (
    BYTES_PER_SAMPLE,
    FIXED_BYTES,
    RAW_BYTES_PER_SAMPLE,
    RAW_BYTES_PER_SAMPLE_SET_VOLTAGE,
    check_trace_space,
    projected_trace_bytes,
)

REPO = Path(__file__).resolve().parents[2]
GiB, MiB = 1 << 30, 1 << 20
Usage = namedtuple("Usage", "total used free")


def fake_disk(monkeypatch: pytest.MonkeyPatch, free: int, total: int = 500 * GiB) -> list[Path]:
    """Make the module's `shutil.disk_usage` report `free` bytes; returns the paths asked."""
    asked: list[Path] = []

    def disk_usage(path: Path) -> Usage:
        asked.append(Path(path))
        return Usage(total, total - free, free)

    monkeypatch.setattr(trace_space.shutil, "disk_usage", disk_usage)
    return asked


# ---- projection ----------------------------------------------------------------------------


def test_projection_is_the_fixed_part_plus_samples_times_the_bytes_per_sample() -> None:
    assert RAW_BYTES_PER_SAMPLE == 4 + 4 + 1  # f32 current, f32 voltage, u8 gpi0
    assert RAW_BYTES_PER_SAMPLE_SET_VOLTAGE == 4 + 1  # f32 current, u8 gpi0
    assert projected_trace_bytes(2.5, 1000) == math.ceil(FIXED_BYTES + 2500 * BYTES_PER_SAMPLE)
    hour = projected_trace_bytes(3600, 1e6)
    assert 33e9 < hour <= 3.6e9 * 9.3 + FIXED_BYTES  # ~33.2 GB; with the power channel ~48 GB
    set_hour = projected_trace_bytes(3600, 1e6, voltage_measured=False)
    assert 18e9 < set_hour <= 3.6e9 * 5.3 + FIXED_BYTES  # an LPM01A's or a PPK2's: ~18.5 GB
    assert projected_trace_bytes(0, 1000) == FIXED_BYTES
    with pytest.raises(ValueError, match="positive"):
        projected_trace_bytes(1, 0)
    with pytest.raises(ValueError, match="duration"):
        projected_trace_bytes(math.nan, 1000)


@pytest.mark.parametrize("set_voltage", [None, (1.8, "set: LPM01A volt 1800m")])
def test_the_projection_matches_a_real_file(tmp_path: Path, set_voltage) -> None:
    n, chunk = 1_000_000, 50_000
    current, voltage = np.full(chunk, 1e-3), np.full(chunk, 1.8)
    gpio = np.ones(chunk, dtype=np.uint8)
    path = tmp_path / "t.jls"
    with TraceWriter(path, 1_000_000, set_voltage=set_voltage) as w:
        for k in range(0, n, chunk):
            w.append(k, current, voltage, gpio)
    size = path.stat().st_size
    projected = projected_trace_bytes(1.0, 1e6, voltage_measured=set_voltage is None)
    assert size <= projected < 1.005 * size  # a slight over-estimate, never an under-estimate


# ---- refuse, warn, pass --------------------------------------------------------------------


def test_refuses_a_trace_that_does_not_fit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake_disk(monkeypatch, free=10 * GiB)
    with pytest.raises(ConfigError) as info:
        check_trace_space(tmp_path, 3600, 1e6)
    msg = info.value.message
    assert "30.9 GiB" in msg and "10.0 GiB free" in msg and str(tmp_path) in msg
    assert "a trace of 3600 s at 1e+06 Hz" in msg and "1.0 GiB kept in reserve" in msg
    assert "sample rate" in info.value.hint and info.value.exit_code == 2


def test_the_reserve_counts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    need = projected_trace_bytes(3600, 1e6)
    fake_disk(monkeypatch, free=need + GiB)  # fits exactly with 1 GiB kept
    assert "will take about 30.9 GiB" in check_trace_space(tmp_path, 3600, 1e6)
    fake_disk(monkeypatch, free=need + GiB - 1)
    with pytest.raises(ConfigError):
        check_trace_space(tmp_path, 3600, 1e6)


def test_a_small_disk_keeps_five_percent_not_a_gibibyte(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_disk(monkeypatch, free=400 * MiB, total=1000 * MiB)  # reserve: 50 MiB
    seconds = (340 * MiB - FIXED_BYTES) / (BYTES_PER_SAMPLE * 1000)  # ~340 MiB at 1 kHz
    assert check_trace_space(tmp_path, seconds, 1000) is not None  # fits, but > half: warn
    with pytest.raises(ConfigError, match=r"50\.0 MiB kept in reserve"):
        check_trace_space(tmp_path, seconds * 1.05, 1000)


def test_warns_above_half_of_the_free_space(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake_disk(monkeypatch, free=50 * GiB)
    warning = check_trace_space(tmp_path, 3600, 1e6)
    assert warning is not None and "30.9 GiB of the 50.0 GiB free" in warning
    fake_disk(monkeypatch, free=80 * GiB)
    assert check_trace_space(tmp_path, 3600, 1e6) is None


def test_a_folder_still_to_be_made_is_checked_on_its_parents_disk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked = fake_disk(monkeypatch, free=80 * GiB)
    assert check_trace_space(tmp_path / "runs" / "later", 10, 1000) is None
    assert asked == [tmp_path]


# ---- rig emon record -----------------------------------------------------------------------


def emon_argv(out: Path) -> list[str]:
    return ["emon", "record", "--driver", "joulescope", "--port", "/dev/no-such-monitor",
            "--duration", "3600", "--voltage", "1.8", "--rate", "1000000", "--out", str(out)]


def no_instrument(*args: object, **kwargs: object) -> None:
    raise AssertionError("an instrument was opened")


def test_emon_record_refuses_before_opening_the_monitor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_disk(monkeypatch, free=5 * GiB)
    monkeypatch.setattr("rig.commands.emon.open_monitor", no_instrument)
    assert main(emon_argv(tmp_path / "t.jls")) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.startswith("rig: error: not enough disk space") and "5.0 GiB free" in err
    assert "--rate" in err and "--out" in err
    assert not (tmp_path / "t.jls").exists()


class Stop(RigError):
    """Stands in for whatever the first instrument step would do."""


def refuse_to_open(*args: object, **kwargs: object) -> None:
    raise Stop("stopped at the instrument")


def test_emon_record_prints_the_warning_before_opening_the_monitor(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_disk(monkeypatch, free=50 * GiB)
    monkeypatch.setattr("rig.commands.emon.open_monitor", refuse_to_open)
    assert main(emon_argv(tmp_path / "t.jls")) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("rig: warning: a trace of 3600 s") and "50.0 GiB free" in err[0]
    assert err[1] == "rig: error: stopped at the instrument"


# ---- measure_asc ---------------------------------------------------------------------------


def test_asc_estimate_covers_runs_idle_and_the_accuracy_pass() -> None:
    bench = load_bench(REPO / "benches" / "sim.toml")
    o = bench.asc
    at_least = o.runs * o.min_run_s * 1.02 + o.idle_s + 40 * bench.sim.inference_ms / 1e3
    # A measured run of this bench recorded ~71 s; the estimate is an upper one.
    assert at_least < runner.asc_trace_seconds(bench) < 4 * at_least


def test_asc_estimate_prices_the_download_method_the_dut_offers() -> None:
    """Issue 22.10 / 25.2: the estimate is built from the bench's own figures. On the virtual
    bench (sim.toml, `bload` offered) the DUT boots in 10 ms, its ptys have no baud rate (a
    download is two command exchanges of host time, like any command, x speed), and each timed
    window ends at the monitor's next delivery (5 ms of host time for the LPM01A, x speed).
    Before: 115.6 s for sim.toml (a 5 s boot timeout, downloads at 115200 baud)."""
    sim = load_bench(REPO / "benches" / "sim.toml")
    o, inference, speed = sim.asc, sim.sim.inference_ms / 1e3, sim.sim.speed
    assert runner.asc_download_method(sim) == "binary"
    exchange = 1.5e-3 * speed
    window = exchange + 5e-3 * speed
    iterations = math.ceil(o.min_run_s * 1.02 / inference)  # 817 (> min_iterations)
    expected = (0.010 + 4 * exchange  # boot banner, caps, name, profile
                + 2 * exchange + o.calibration_iterations * inference + window
                + o.idle_s + 3 * window
                + o.runs * ((iterations + o.warmup) * inference + window)
                + 40 * (2 * exchange + inference + window)
                + exchange + 5e-3 * speed)  # power-off, the monitor's last delivery
    assert runner.asc_trace_seconds(sim) == pytest.approx(expected)
    assert runner.asc_trace_seconds(sim) == pytest.approx(76.40, abs=0.01)
    # Behind an IO manager the pass-through carries no raw bytes: `db load`, one `db` command
    # per 26 bytes and `db crc` (the virtual DUT offers it), on the UNO's 9600-baud line to the
    # DUT and its 115200-baud one to the rig, whose time the virtual IO manager charges instead
    # of the host's: ~50 s per input, however fast the host or the bench's speed.
    # (test_io_manager.py checks these counts against what the virtual UNO relays.)
    io = load_bench(REPO / "benches" / "sim-io-manager.toml")
    assert runner.asc_download_method(io) == "hex-crc"
    dut_chars, host_chars = runner.hex_download_chars(16_000, 26, read_back=False)
    # db load + its reply 50, 615 x ("db " 52 hex "%" + m-ready) 65, the last 10 bytes with
    # m-load-done 46, db crc + its reply 41.
    assert dut_chars == 50 + 615 * 65 + 46 + 41
    hex_load = dut_chars * 10 / 9600 + host_chars * 10 / 115200
    assert hex_load == pytest.approx(50.41, abs=0.01)
    assert runner.asc_trace_seconds(io) - runner.asc_trace_seconds(
        replace(io, io_manager=None)) == pytest.approx(
        (1 + io.dataset.samples_per_class * 4) * (hex_load - 2 * 1.5e-3 * io.sim.speed))
    assert "charges its line's time" in runner.asc_trace_basis(io)
    # Through the simavr UNO the same lines, in the emulated UNO's time, which the bench's
    # follows while the UNO works: the same ~50 s per input, as the DUT (the C shim) checks a
    # hex download by `db crc` rather than a read-back (~3.6 characters more per byte each
    # way: ~125 s).
    avr = load_bench(REPO / "benches" / "simavr-io-manager.toml")
    assert runner.asc_trace_seconds(avr) == pytest.approx(runner.asc_trace_seconds(
        replace(avr, sim=replace(avr.sim, io_manager="python"))))
    assert "emulated UNO at 9600 baud" in runner.asc_trace_basis(avr)
    # A run of fewer parts projects only those: `--scope energy` has one download, no
    # accuracy pass.
    assert runner.asc_trace_seconds(avr, "energy") == pytest.approx(
        runner.asc_trace_seconds(avr) - avr.dataset.samples_per_class * 4
        * (hex_load + avr.sim.inference_ms / 1e3 + 1.5e-3 * 50 + 5e-3 * 50))
    # A DUT on a port whose bench declares nothing of it: plain MLPerf Tiny firmware's hex (31
    # bytes a command, checked by a read-back) at its baud rate, its boot timeout and an
    # assumed 1 s per inference; the preflight's message says so.
    shipped = load_bench(REPO / "benches" / "arduino.toml")
    board = replace(shipped, dut=replace(shipped.dut, download="", inference_time_s=0.0))
    assert runner.asc_download_method(board) == "hex-read-back"
    b = board.asc
    read_back = runner.hex_download_chars(16_000, 31, read_back=True)[0]
    # db load 50, 516 full commands of 75 characters, the last 4 bytes with m-load-done 34,
    # "db print%", 1000 lines of "m-buffer-" + 47 + CR LF, m-ready.
    assert read_back == 50 + 516 * 75 + 34 + 9 + 1000 * 58 + 9
    hex_uart = read_back * 10 / board.dut.baud

    def on_port(load_s: float, inference_s: float) -> float:
        iterations = max(b.min_iterations, math.ceil(b.min_run_s * 1.02 / inference_s))
        return (board.dut.boot_timeout_s + load_s + b.calibration_iterations * inference_s
                + 0.005 + b.idle_s + 3 * 0.005
                + b.runs * ((iterations + b.warmup) * inference_s + 0.005)
                + 40 * (load_s + inference_s + 0.005) + 0.005)

    assert runner.asc_trace_seconds(board) == pytest.approx(on_port(hex_uart, 1.0))
    basis = runner.asc_trace_basis(board)
    assert "known only after connecting" in basis and "boot_timeout_s" in basis
    assert "assumed 1 s per inference" in basis and "115200 baud" in basis
    assert "hex downloads read back (db print)" in basis and "[dut] download not set" in basis
    # The shipped file declares its firmware's: `bload` (16000 bytes at 115200 baud) and 30 ms.
    assert runner.asc_download_method(shipped) == "binary"
    assert runner.asc_trace_seconds(shipped) == pytest.approx(
        on_port(16_000 * 10 / 115200, 0.03))
    assert "binary downloads (bload) at 115200 baud, as [dut] download declares" in \
        runner.asc_trace_basis(shipped)
    # Behind a real IO manager the DUT's link is the UNO's 9600 baud, not the DUT's baud.
    behind = replace(board, io_manager=io.io_manager)
    assert "hex downloads read back (db print) at 9600 baud" in runner.asc_trace_basis(behind)
    assert runner.asc_trace_seconds(behind) > runner.asc_trace_seconds(board) + 40 * 50
    assert "[sim] timing" in runner.asc_trace_basis(sim) and "speed 50" in \
        runner.asc_trace_basis(sim)


Recorder = namedtuple("Recorder", "samples sample_rate")


def test_after_calibration_a_dut_on_a_port_is_priced_as_measured_and_the_bench_file_advised(
        tmp_path: Path) -> None:
    """The calibration's figures replace the bench file's in the projection of the rest, and
    where they differ the note says which `[dut]` lines make the next preflight right (a
    download slower than the declared one is a warning: this trace grows past the preflight's)."""
    shipped = load_bench(REPO / "benches" / "arduino.toml")  # binary, 30 ms declared
    so_far = Recorder(samples=2000, sample_rate=1000.0)
    binary, read_back = LoadResult(16_000, "binary", 1, "crc"), LoadResult(16_000, "hex", 1,
                                                                            "read-back")

    def note(bench, per_inference_s: float, loaded: LoadResult) -> Note:
        return runner._reproject(bench, tmp_path, "all", so_far, per_inference_s, loaded)

    as_declared = note(shipped, 0.033, binary)  # 10 % off the declared time: close enough
    assert as_declared.level == "info" and "set in [dut]" not in as_declared.text
    rest = runner.asc_rest_trace_seconds(shipped, "all", inference_s=0.033, loaded=binary)
    total = trace_space.projected_trace_bytes(2.0 + rest, 1000.0, voltage_measured=False)
    assert as_declared.text.startswith(
        f"trace projected after calibration: {total} B = {total / 1024:.1f} KiB (2.0 s "
        f"recorded and {rest:.1f} s to come at 1000 Hz")
    undeclared = replace(shipped, dut=replace(shipped.dut, download="", inference_time_s=0.0))
    faster = note(undeclared, 0.0125, binary)
    assert faster.level == "info"
    assert faster.text.endswith(f"set in [dut] of {shipped.path}: download = \"binary\"; "
                                "inference_time_s = 0.0125")
    slower = note(shipped, 0.1, read_back)
    assert slower.level == "warning"
    assert slower.text.endswith('download = "hex-read-back"; inference_time_s = 0.1 (the DUT '
                                "takes inputs by hex downloads read back (db print), slower "
                                "than the preflight's binary downloads (bload))")
    # Priced by what was measured: each of 40 inputs read back at 115200 baud, not bload.
    hex_s = runner.hex_download_chars(16_000, 31, read_back=True)[0] * 10 / 115200
    assert runner.asc_rest_trace_seconds(shipped, "all", inference_s=0.1, loaded=read_back) \
        == pytest.approx(runner.asc_rest_trace_seconds(shipped, "all", inference_s=0.1,
                                                       loaded=binary)
                         + 40 * (hex_s - 16_000 * 10 / 115200))
    # On the virtual bench the DUT's figures are its [sim] ones: nothing to advise.
    sim = load_bench(REPO / "benches" / "sim.toml")
    assert "set in [dut]" not in note(sim, 0.5, read_back).text


def test_the_delivery_periods_are_the_drivers_own() -> None:
    from drivers.emon import keysight, otii

    assert runner.DELIVERY_PERIOD_S["otii"] == otii.POLL_S
    assert runner.DELIVERY_PERIOD_S["n6705"] == runner.DELIVERY_PERIOD_S["34465a"] == \
        keysight.POLL_S


def test_measure_asc_refuses_before_the_run_folder_exists(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bench = load_bench(REPO / "benches" / "sim.toml")
    assert runner.records_trace(bench)
    runs = tmp_path / "runs"
    runs.mkdir()
    fake_disk(monkeypatch, free=1 * MiB, total=10 * GiB)
    monkeypatch.setattr(runner, "connect_bench", no_instrument)
    with pytest.raises(ConfigError) as info:
        runner.measure_asc(bench, device="sim", runs_root=runs)
    assert list(runs.iterdir()) == []
    msg = info.value.message
    assert msg.startswith("not enough disk space: an ASC run's trace (about")
    assert "estimated from the [sim] timing" in msg  # what the projection rests on
    assert "1.0 MiB free" in msg
    assert "--runs-dir" in info.value.hint and "sample_rate_hz" in info.value.hint


def test_measure_asc_publishes_the_warning_as_a_note(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    sim = load_bench(REPO / "benches" / "sim.toml")
    # A Joulescope's rate (an LPM01A's driver refuses 1 MHz before the trace is estimated).
    bench = replace(sim, emon=replace(sim.emon, driver="joulescope", sample_rate_hz=1e6),
                    asc=replace(sim.asc, runs=10))  # a trace over 1 GiB: tight with 1 GiB kept
    # A Joulescope measures the voltage and, auto-ranging, records each sample's range.
    need = projected_trace_bytes(runner.asc_trace_seconds(bench), bench.emon.sample_rate_hz,
                                 range_recorded=True)
    assert need == runner.asc_trace_bytes(bench) > GiB
    fake_disk(monkeypatch, free=GiB + need)  # fits with the reserve kept, but tight
    monkeypatch.setattr(runner, "connect_bench", refuse_to_open)
    events: list[Event] = []
    outcome = runner.measure_asc(
        bench, device="sim", runs_root=tmp_path, subscribers=[events.append]
    )
    assert outcome.status == "failed" and isinstance(outcome.error, Stop)
    notes = [e for e in events if isinstance(e, Note) and "free in" in e.text]
    assert len(notes) == 1 and notes[0].level == "warning"
    assert "an ASC run's trace (about" in notes[0].text
    lines = (outcome.run_path / "events.jsonl").read_text().splitlines()
    stored = [json.loads(line) for line in lines]
    assert [e["text"] for e in stored if e["event"] == "note"] == [notes[0].text]


@pytest.mark.slow
def test_a_run_whose_rest_no_longer_fits_after_calibration_ends_there(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The second check (after the calibration, from what it measured) refuses like the first,
    and the run ends as a failed one: the DUT off, its folder and the trace so far kept."""
    bench = load_bench(REPO / "benches" / "sim.toml")
    checked: list[float] = []
    real_check = runner.check_trace_space

    def check(folder, duration_s, *args, **kwargs):
        checked.append(duration_s)
        if len(checked) == 2:  # the disk filled up meanwhile: 1 MiB left
            fake_disk(monkeypatch, free=1 * MiB, total=10 * GiB)
        return real_check(folder, duration_s, *args, **kwargs)

    monkeypatch.setattr(runner, "check_trace_space", check)
    events: list[Event] = []
    outcome = runner.measure_asc(bench, device="sim", runs_root=tmp_path,
                                 subscribers=[events.append])
    assert len(checked) == 2 and checked[1] < checked[0]  # the rest, once calibrated
    assert outcome.status == "failed" and isinstance(outcome.error, ConfigError)
    assert outcome.error.message.startswith(
        "not enough disk space: the rest of this ASC run's trace (about")
    assert "projected from the calibration" in outcome.error.message
    phases = [e.phase for e in events if type(e).__name__ == "PhaseStarted"]
    assert phases == ["calibrate"]  # nothing measured after it
    assert (outcome.run_path / "traces" / "emon.jls").is_file()  # the trace so far, kept
    stored = [json.loads(line) for line in
              (outcome.run_path / "events.jsonl").read_text().splitlines()]
    (finished,) = [e for e in stored if e["event"] == "run_finished"]
    assert finished["status"] == "failed" and "not enough disk space" in finished["error"]
