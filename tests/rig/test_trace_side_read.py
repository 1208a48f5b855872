"""A large trace's current read on a reader and thread of its own (`rig.traces.files._SideRead`)
while the caller's reader reads the other signals: the same samples as one reader gives, a
damaged chunk refused alike, no thread left behind, and one reader per trace where the caller
keeps every CPU busy already (runs re-derived together); and, given the spans the analysis will
integrate, the current streamed in and their pieces dotted as it comes."""

from __future__ import annotations

import itertools
import math
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


# -- the current streamed in, its pieces dotted as it comes (`files._StreamedCurrent`) --------
SPANS = np.array([[1000, 30_000], [1200, 4000], [31_000, 39_500]])


@pytest.fixture
def small_blocks(monkeypatch) -> None:
    """The current read 4096 samples at a time: ten blocks for the sums to wait on; pieces
    of this small trace taken one by one (ranges change every 5000 samples)."""
    from rig.traces.analysis import energy

    monkeypatch.setattr(files, "_STREAM_BLOCK", 4096)
    monkeypatch.setattr(energy, "_LONG_RUN", 1000)


def figures(trace: files.Trace, known: bool) -> object:
    from rig.traces.analysis.energy import span_figures

    return span_figures(trace.current, trace.voltage, SPANS, trace.current_range,
                        trace.range_names, whole=True, known=trace.piece_dots if known else None)


@pytest.mark.parametrize("voltage", [True, False], ids=["measured", "set"])
def test_the_pieces_are_dotted_while_the_current_streams_in(
        tmp_path: Path, side_threads: list[str], small_blocks: None, voltage: bool) -> None:
    from rig.traces.analysis.dot import span_dots

    path = tmp_path / "t.jls"
    written = write(path, voltage=voltage)
    streamed = read_trace(path, dtype=np.float32, spans=SPANS)
    plain = read_trace(path, dtype=np.float32)
    assert side_threads == ["rig-trace-read"]  # only the plain read used _SideRead's thread
    assert streamed.piece_dots is not None and plain.piece_dots is None
    same(streamed, plain)
    assert streamed.falling_edges().tolist() == [1000, 30_000]
    pieces, dots = streamed.piece_dots
    # Cut at every span boundary and range change (every 5000 samples), over the whole trace.
    cuts = sorted({0, N, *SPANS.ravel().tolist(), *range(5000, N, 5000)})
    assert pieces.tolist() == [list(p) for p in itertools.pairwise(cuts)]
    assert np.array_equal(dots, span_dots(plain.current, plain.voltage, pieces))
    volts = written["voltage"].astype(np.float64) if voltage else np.full(N, 1.8)
    total = float(np.sum(written["current"].astype(np.float64) * volts))
    assert math.isclose(float(dots.sum()), total, rel_tol=1e-12)
    from rig.traces.analysis import energy

    dotted: list[int] = []
    real = energy.span_dots
    energy.span_dots = lambda *args, **kw: dotted.append(1) or real(*args, **kw)
    try:
        a = figures(streamed, known=True)
        assert dotted == []  # the pieces' dots were taken as found, not made again
        b = figures(plain, known=False)
        assert dotted == [1]
    finally:
        energy.span_dots = real
    assert np.array_equal(a.dots, b.dots) and a.shares == b.shares and a.finite is b.finite


def test_the_sums_wait_for_each_block_and_take_them_in_order(
        tmp_path: Path, side_threads: list[str], small_blocks: None, monkeypatch) -> None:
    path = tmp_path / "t.jls"
    write(path)
    asked: list[tuple[int, int]] = []  # (sample waited for, samples in when it was asked)
    wait = files._Arrival.wait

    def spy(self: files._Arrival, upto: int) -> None:
        asked.append((upto, self._upto))
        wait(self, upto)
        assert self._upto >= upto

    monkeypatch.setattr(files._Arrival, "wait", spy)
    trace = read_trace(path, dtype=np.float32, spans=SPANS)
    assert trace.piece_dots is not None
    ends = [k for k, _ in asked]
    assert ends == sorted(ends) and ends[-1] == N  # every piece, up to the trace's end


def test_a_stream_that_stops_midway_is_read_again_on_the_callers_reader(
        tmp_path: Path, side_threads: list[str], small_blocks: None, monkeypatch) -> None:
    """Our reader refusing the third block (as on a damaged chunk it would): the sums waiting
    for it are let go, the current comes from the caller's reader, nothing found ahead."""
    path = tmp_path / "t.jls"
    written = write(path)
    lib = files._jls_c()
    calls = {"n": 0}

    class Stopping:
        jls_rd_open, jls_rd_close = lib.jls_rd_open, lib.jls_rd_close

        @staticmethod
        def jls_rd_fsr(*args: object) -> int:
            calls["n"] += 1
            return 9 if calls["n"] == 3 else lib.jls_rd_fsr(*args)

    monkeypatch.setattr(files, "_jls_c", lambda: Stopping)
    trace = read_trace(path, dtype=np.float32, spans=SPANS)
    assert calls["n"] == 3 and trace.piece_dots is None
    assert np.array_equal(trace.current, written["current"])
    assert trace.falling_edges().tolist() == [1000, 30_000]
    assert not [t for t in threading.enumerate() if t.name == "rig-trace-read"]


def test_a_damaged_current_chunk_streamed_is_refused_as_on_one_reader(
        tmp_path: Path, side_threads: list[str], small_blocks: None) -> None:
    path = tmp_path / "t.jls"
    written = write(path)
    data = bytearray(path.read_bytes())
    at = data.find(written["current"][20_000:20_004].tobytes())
    data[at + 1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(AnalysisError) as streamed:
        read_trace(path, dtype=np.float32, spans=SPANS)
    with one_reader_per_trace(), pytest.raises(AnalysisError) as alone:
        read_trace(path, dtype=np.float32, spans=SPANS)
    assert streamed.value.message == alone.value.message
    assert not [t for t in threading.enumerate() if t.name == "rig-trace-read"]


@pytest.mark.parametrize("case", ["no C reader", "float64", "spans outside"])
def test_where_nothing_streams_the_trace_is_read_as_before(
        tmp_path: Path, side_threads: list[str], small_blocks: None, monkeypatch,
        case: str) -> None:
    path = tmp_path / "t.jls"
    write(path)
    spans, dtype = SPANS, np.float32
    if case == "no C reader":
        monkeypatch.setattr(files, "_jls_c", lambda: None)
    elif case == "float64":
        dtype = np.float64
    elif case == "spans outside":
        spans = np.array([[1000, N + 5]])
    trace = read_trace(path, dtype=dtype, spans=spans)
    assert side_threads == ["rig-trace-read"]  # read beside, in one call
    assert trace.falling_edges().tolist() == [1000, 30_000]
    if case == "spans outside":
        assert trace.piece_dots is None
    else:  # dotted after the read where it was over before the other signals'
        plain = read_trace(path, dtype=dtype)
        a, b = figures(trace, known=True), figures(plain, known=False)
        assert np.array_equal(a.dots, b.dots) and a.shares == b.shares


@pytest.mark.parametrize("busy", [False, True], ids=["helper free", "helpers busy"])
def test_one_reader_dots_the_pieces_on_a_helper_while_it_reads_the_gpio(
        tmp_path: Path, side_threads: list[str], small_blocks: None, busy: bool) -> None:
    """With one reader per trace (runs re-derived together) nothing streams: the current is
    read first, then a helper dots the pieces while this thread reads the GPIO line (all
    helpers busy: dotted here after); the same dots as `span_figures` makes."""
    from rig.traces.analysis import dot

    path = tmp_path / "t.jls"
    write(path)
    pool = dot.helper_pool()
    release = threading.Event()
    blockers = [pool.submit(release.wait, 10) for _ in range(pool._max_workers)] if busy else []
    try:
        with one_reader_per_trace():
            trace = read_trace(path, dtype=np.float32, spans=SPANS)
    finally:
        release.set()
    assert all(b.result(timeout=10) for b in blockers)
    assert side_threads == [] and trace.piece_dots is not None
    plain = read_trace(path, dtype=np.float32)
    same(trace, plain)
    assert trace.falling_edges().tolist() == [1000, 30_000]
    a, b = figures(trace, known=True), figures(plain, known=False)
    assert np.array_equal(a.dots, b.dots) and a.shares == b.shares and a.finite is b.finite


def test_span_dots_taken_as_the_samples_come_in_equal_those_taken_after() -> None:
    from rig.traces.analysis import dot

    rng = np.random.default_rng(7)
    a = rng.standard_normal(3 * dot.BLOCK + 123).astype(np.float32)
    b = rng.standard_normal(len(a)).astype(np.float32)
    spans = np.array([[0, len(a)], [5, 2 * dot.BLOCK + 9], [dot.BLOCK, dot.BLOCK + 1]])
    asked: list[int] = []
    assert np.array_equal(dot.span_dots(a, b, spans, ready=asked.append),
                          dot.span_dots(a, b, spans))
    assert asked == sorted(asked) and asked[-1] == len(a) and len(asked) == 4 + 3 + 1
    set_v = np.broadcast_to(np.float32(1.5), a.shape)
    assert np.array_equal(dot.span_dots(a, set_v, spans, ready=lambda _k: None),
                          dot.span_dots(a, set_v, spans))

    def refuse(_k: int) -> None:
        raise files._ReadFailed

    with pytest.raises(files._ReadFailed):
        dot.span_dots(a, b, spans, ready=refuse)
