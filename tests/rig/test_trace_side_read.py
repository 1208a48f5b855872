"""A large trace's current read on a reader and thread of its own (`rig.traces.files._SideRead`)
while the caller's reader reads the other signals: the same samples as one reader gives, a
damaged chunk refused alike, no thread left behind, and one reader per trace where the caller
keeps every CPU busy already (runs re-derived together)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from rig.errors import AnalysisError
from rig.submission import verify
from rig.traces import files
from rig.traces.files import TraceWriter, one_reader_per_trace, read_trace

FS = 10_000.0
N = 40_000
NAMES = ("R0", "R1")


def write(path: Path, *, voltage: bool = True) -> dict[str, np.ndarray]:
    """A trace of N samples: a current ramp (each value distinct), a voltage, a GPIO with two
    falling edges and a range signal; what was written, by signal."""
    current = (np.arange(N, dtype=np.float32) + 1) * np.float32(1e-7)
    volts = np.linspace(1.7, 1.9, N, dtype=np.float32)
    gpio = np.ones(N, np.uint8)
    gpio[[1000, 30_000]] = 0
    ranges = (np.arange(N) // 5000 % 2).astype(np.uint8)
    with TraceWriter(path, FS, set_voltage=None if voltage else (1.8, "set")) as w:
        for lo in range(0, N, 7000):
            hi = min(lo + 7000, N)
            w.append(lo, current[lo:hi], volts[lo:hi], gpio[lo:hi],
                     current_range=ranges[lo:hi], range_names=NAMES)
    return {"current": current, "voltage": volts, "gpio": gpio, "ranges": ranges}


@pytest.fixture
def side_threads(monkeypatch) -> list[str]:
    """Below the threshold for this small trace, on a host said to have two CPUs; the names
    of the threads each side read ran on."""
    monkeypatch.setattr(files, "SIDE_READ_SAMPLES", 1000)
    monkeypatch.setattr(files, "usable_cpus", lambda: 2)
    ran: list[str] = []
    run = files._SideRead._run

    def spy(self: files._SideRead, path: Path) -> None:
        ran.append(threading.current_thread().name)
        run(self, path)

    monkeypatch.setattr(files._SideRead, "_run", spy)
    return ran


def same(a: files.Trace, b: files.Trace) -> None:
    for name in ("current", "voltage", "gpio"):
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and np.array_equal(x, y), name
    assert a.current_range is not None and b.current_range is not None
    assert np.array_equal(a.current_range.at(np.arange(N)), b.current_range.at(np.arange(N)))
    assert a.meta["samples_by_signal"] == b.meta["samples_by_signal"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("voltage", [True, False], ids=["measured", "set"])
def test_the_side_read_gives_what_one_reader_gives(tmp_path: Path, side_threads: list[str],
                                                   dtype: type, voltage: bool) -> None:
    path = tmp_path / "t.jls"
    written = write(path, voltage=voltage)
    beside = read_trace(path, dtype=dtype)
    assert side_threads == ["rig-trace-read"]  # the current came in on its own thread
    with one_reader_per_trace():
        alone = read_trace(path, dtype=dtype)
    assert side_threads == ["rig-trace-read"]  # not again inside the block
    same(beside, alone)
    assert np.array_equal(beside.current, written["current"].astype(dtype))
    assert np.array_equal(beside.gpio, written["gpio"])
    if voltage:
        assert np.array_equal(beside.voltage, written["voltage"].astype(dtype))
    else:
        assert beside.voltage.strides == (0,) and float(beside.voltage[0]) == 1.8


def test_small_traces_and_one_cpu_read_on_one_reader(tmp_path: Path, side_threads: list[str],
                                                     monkeypatch) -> None:
    path = tmp_path / "t.jls"
    write(path)
    monkeypatch.setattr(files, "SIDE_READ_SAMPLES", N + 1)
    read_trace(path)
    monkeypatch.setattr(files, "SIDE_READ_SAMPLES", 1000)
    monkeypatch.setattr(files, "usable_cpus", lambda: 1)
    read_trace(path)
    assert side_threads == []


def test_a_damaged_current_chunk_read_beside_is_refused_as_on_one_reader(
        tmp_path: Path, side_threads: list[str]) -> None:
    path = tmp_path / "t.jls"
    written = write(path)
    data = bytearray(path.read_bytes())
    at = data.find(written["current"][20_000:20_004].tobytes())
    assert at > 0
    data[at + 1] ^= 0xFF  # inside a current data chunk: its CRC no longer holds
    path.write_bytes(bytes(data))
    with pytest.raises(AnalysisError) as beside:
        read_trace(path)
    assert side_threads == ["rig-trace-read"]
    with one_reader_per_trace(), pytest.raises(AnalysisError) as alone:
        read_trace(path)
    assert beside.value.message == alone.value.message
    assert beside.value.message.startswith(f"cannot read JLS file {path}: ")
    assert not [t for t in threading.enumerate() if t.name == "rig-trace-read"]


def test_runs_re_derived_together_read_each_trace_on_one_reader(
        tmp_path: Path, side_threads: list[str], monkeypatch) -> None:
    folders = []
    for k in range(3):
        folder = tmp_path / f"run{k}"
        (folder / "traces").mkdir(parents=True)
        write(folder / "traces" / "emon.jls")
        folders.append(folder)
    monkeypatch.setattr(verify, "_rederive",
                        lambda folder, _labels: [read_trace(folder / "traces" / "emon.jls")])
    for workers, expected in ((2, []), (1, ["rig-trace-read"] * 3)):
        monkeypatch.setattr(verify, "rederive_workers", lambda _f, w=workers: w)
        side_threads.clear()
        traces = verify.rederive_runs(folders, {})
        assert side_threads == expected, workers
        assert all(np.array_equal(t[0].current, traces[0][0].current) for t in traces)


@pytest.mark.parametrize("mode", ["beside", "one reader", "helpers busy"])
def test_the_edges_and_range_changes_are_found_while_the_current_comes_in(
        tmp_path: Path, side_threads: list[str], mode: str) -> None:
    """While a large trace's current is read (beside on its own thread, or on the one reader
    with a helper thread finding them), its GPIO edges and range changes are found and kept
    for the analysis: the same as found afterwards; helpers all busy, found here instead."""
    from rig.traces.analysis import dot
    from rig.traces.analysis.edges import change_points, falling_edges

    path = tmp_path / "t.jls"
    written = write(path)
    pool = dot.helper_pool()
    release = threading.Event()
    blockers = ([pool.submit(release.wait, 10) for _ in range(pool._max_workers)]
                if mode == "helpers busy" else [])
    try:
        if mode == "beside":
            trace = read_trace(path)
        else:
            with one_reader_per_trace():
                trace = read_trace(path)
    finally:
        release.set()
    # Each helper was let go by us, not by its timeout: the read never waited for them.
    assert all(b.result(timeout=10) for b in blockers)
    assert trace._edges is not None  # kept by the reader
    assert trace.falling_edges().tolist() == [1000, 30_000]
    assert np.array_equal(trace.falling_edges(), falling_edges(written["gpio"]))
    assert trace.current_range is not None and trace.current_range._changes is not None
    assert np.array_equal(trace.current_range.changes(0, N), change_points(written["ranges"]))
    assert np.array_equal(trace.current_range.changes(4000, 20_000),
                          change_points(written["ranges"][4000:20_000]) + 4000)


def test_small_traces_leave_the_edges_to_whoever_asks(tmp_path: Path, side_threads: list[str],
                                                      monkeypatch) -> None:
    path = tmp_path / "t.jls"
    write(path)
    monkeypatch.setattr(files, "SIDE_READ_SAMPLES", N + 1)
    trace = read_trace(path)
    assert trace._edges is None and trace.current_range._changes is None
    assert trace.falling_edges().tolist() == [1000, 30_000] and trace._edges is not None
