"""A trace that lost samples while it was written (found by the short soak, issue 39).

pyjls loses data it cannot write without telling its caller: on a full disk it prints to stderr
and the file reads back NaN there. The recorder looks at the free space between chunks, but a
disk that fills and empties between two looks slipped through: the run ended "complete" and
`rig analyze` of it then crashed on a NaN uncertainty. Now the recorder reads its trace back at
the end (`lost_in_trace`), the run fails naming the file and the first lost sample, and an
analysis of such a trace names the windows and idle spans that hold lost samples.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from drivers.emon.base import Chunk
from rig.cli import main
from rig.errors import AnalysisError
from rig.run import recording
from rig.run import reproduce as reproduce_module
from rig.run.events import IdleMeasured, TraceSaved, WindowMeasured
from rig.run.recording import EmonRecorder
from rig.run.reproduce import reproduce_run
from rig.run.store import load_run
from rig.traces.files import read_trace
from tests.e2e.runs import bench_variant, fast_energy_run, only_run
from tests.e2e.test_analyze_run import FAST

FS, N = 10_000.0, 10_000  # samples per second; samples per chunk


def chunk(k: int, value: float = 1e-3) -> Chunk:
    current = np.full(N, value, dtype=np.float32)
    return Chunk(k * N, current, np.full(N, 1.8, dtype=np.float32), np.zeros(N, dtype=np.uint8))


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs of its own (needs root: the soak's runs volume is made the same way)."""
    if os.geteuid() != 0:
        pytest.skip("a filesystem of its own needs root (mount -t tmpfs)")
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True,
                   timeout=30)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)


def fill(disk: Path) -> Path:
    """Fill `disk` to its last byte; the filler file (unlink it to free the disk)."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def test_samples_lost_on_a_full_disk_are_counted_from_the_file(
        small_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The free-space look happens once (the first chunk): the disk then fills and empties
    # between two looks, as it did in the soak.
    monkeypatch.setattr(recording, "SPACE_CHECK_S", 3600.0)
    rec = EmonRecorder(FS, small_disk / "t.jls")
    rec.on_chunk(chunk(0))
    # pyjls writes in a process of its own, which opens the file once it has started: let it
    # hold chunk 0 before the disk fills.
    rec._writer._writer.flush()
    filler = fill(small_disk)
    for k in range(1, 6):
        rec.on_chunk(chunk(k))
    rec._writer._writer.flush()  # pyjls writes on its own thread: let it meet the full disk
    filler.unlink()
    for k in range(6, 9):
        rec.on_chunk(chunk(k))
    rec.close()
    lost, first = rec.lost_in_trace()
    # What pyjls lost is exactly what reads back NaN: what came while the disk was full, and
    # what pyjls still held in its buffers then (its blocks are 8192 samples: chunk 0's tail).
    current = read_trace(small_disk / "t.jls").current
    assert len(current) == 9 * N
    assert lost == int(np.isnan(current).sum()) > 0
    assert first == int(np.flatnonzero(np.isnan(current))[0])
    assert first < 6 * N and not np.isnan(current[6 * N + 8192:]).any()


def test_a_whole_trace_and_the_streams_own_lost_samples_are_not_lost(tmp_path: Path) -> None:
    rec = EmonRecorder(FS, tmp_path / "t.jls")
    rec.on_chunk(chunk(0))
    rec.on_chunk(chunk(1, value=float("nan")))  # the instrument could not measure these
    rec.on_chunk(chunk(3))  # a gap: chunk 2 never came (written as NaN, marked)
    rec.close()
    current = read_trace(tmp_path / "t.jls").current
    assert int(np.isnan(current).sum()) == 2 * N  # the file does hold NaN: the stream's own
    assert rec.lost_in_trace() == (0, None)
    # A file shorter than what its writer was given: the missing end counts, from the file's
    # end.
    rec2 = EmonRecorder(FS, tmp_path / "u.jls")
    rec2.on_chunk(chunk(0))
    rec2.close()
    rec2._trace_end = N + 5  # five samples written that the file does not hold
    assert rec2.lost_in_trace() == (5, N)
    (tmp_path / "u.jls").write_bytes(b"not a JLS file")
    assert rec2.lost_in_trace() == (N + 5, 0)  # unreadable: it holds none of them


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fast_energy_run(tmp_path_factory.mktemp("lost"), **FAST)


@pytest.mark.parametrize("where", ["window", "idle"])
def test_analysis_of_a_trace_with_lost_samples_names_the_span(
        run: Path, where: str, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    record = load_run(run)
    kind = WindowMeasured if where == "window" else IdleMeasured
    span = [e for e in record.events if isinstance(e, kind)][-1]
    trace = read_trace(run / "traces" / "emon.jls", dtype=np.float32)
    current = np.array(trace.current)
    current[span.start_sample + 7: span.start_sample + 10] = np.nan
    damaged = dataclasses.replace(trace, current=current)
    with pytest.raises(AnalysisError) as caught:
        reproduce_run(run, trace=damaged)
    name = f"window {span.index}" if where == "window" else "idle span"
    assert (f"{name} [{span.start_sample}, {span.end_sample}): 3 of "
            f"{span.end_sample - span.start_sample:,} samples") in caught.value.message
    # `rig analyze RUN` says it in one line and exits 2 (no traceback, no ValueError).
    monkeypatch.setattr(reproduce_module, "read_trace", lambda *a, **k: damaged)
    assert main(["analyze", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds lost (not finite) samples inside" in err


def test_a_run_whose_trace_lost_samples_fails_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    # The read-back as it finds a full disk's loss (the test above makes that loss for real).
    monkeypatch.setattr(EmonRecorder, "lost_in_trace", lambda self: (5, 1234))
    bench = bench_variant(tmp_path, **FAST)
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "runs")])
    assert code != 0
    folder = only_run(tmp_path / "runs")
    record = load_run(folder)
    assert record.finished is not None and record.finished.status == "failed"
    assert "lost 5 samples while it was written (the first at sample 1,234)" in (
        record.finished.error or "")
    saved = [e for e in record.events if isinstance(e, TraceSaved)]
    assert len(saved) == 1 and saved[0].dropped >= 5
    # Nothing measured is lost: every timed window is in the folder.
    assert sum(isinstance(e, WindowMeasured) for e in record.events) >= 2
    assert "lost 5 samples" in capsys.readouterr().err


def test_a_chunk_counted_as_the_trace_closes_is_not_a_lost_sample(tmp_path: Path) -> None:
    """The monitor's reader may hand over a last chunk as the run's end closes the trace (it
    is counted, then finds the writer gone): the file never held it, so the trace says it ends
    before it and nothing is lost (CI saw a PPK2 run failed for "163 lost samples" this way)."""
    rec = EmonRecorder(FS, tmp_path / "t.jls")
    rec.on_chunk(chunk(0))
    rec.close()
    rec.on_chunk(chunk(1))  # after the close: counted live, not written
    assert rec.samples == 2 * N
    assert rec.trace_samples == N == len(read_trace(tmp_path / "t.jls").current)
    assert rec.lost_in_trace() == (0, None)


def _unclosed(tmp_path: Path, chunks: int = 3) -> tuple[EmonRecorder, Path]:
    """A recorder whose trace file is left as a writer that never closed it leaves it (header
    length 0): copied while it was being written, then put in the closed file's place."""
    rec = EmonRecorder(FS, tmp_path / "t.jls")
    for k in range(chunks):
        rec.on_chunk(chunk(k))
    rec._writer._writer.flush()  # pyjls writes on its own thread
    copy = tmp_path / "open.jls"
    copy.write_bytes((tmp_path / "t.jls").read_bytes())
    rec.close()
    (tmp_path / "t.jls").write_bytes(copy.read_bytes())
    assert recording.check_jls_length(tmp_path / "t.jls")  # unclosed, as meant
    return rec, copy


def test_an_unclosed_trace_is_read_back_in_a_child_as_pyjls_recovers_it(tmp_path: Path) -> None:
    rec, copy = _unclosed(tmp_path)
    lost, first = rec.lost_in_trace()
    assert rec.read_back_problem is None
    # The same pass in this process over a copy (pyjls repairs the file it opens, in place).
    held_lost, held_first, length = recording.read_back_lost(
        copy, np.empty((0, 2), dtype=np.int64), 3 * N)
    assert 0 < length <= 3 * N
    assert lost == held_lost + 3 * N - length
    assert first == (held_first if held_first is not None else
                     (length if length < 3 * N else None))


def test_pyjls_dying_on_an_unclosed_trace_ends_its_child_not_the_rig(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI (issue 39's short soak, Python 3.13): after write errors on a full disk, pyjls
    printed "not properly closed ... jls_raw_rd_header" and `rig serve` was gone, no traceback.
    Here pyjls dies the same way (SIGSEGV as it opens the file) in every process but this
    one: the run's process must live on and say what happened."""
    rec, _ = _unclosed(tmp_path)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import os, signal\n"
        "import pyjls\n"
        "def _die(*args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n"
        "pyjls.Reader = _die\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]))
    assert rec.lost_in_trace() == (3 * N, 0)  # it holds none that can be counted
    assert rec.read_back_problem is not None
    assert "pyjls died reading it back (SIGSEGV)" in rec.read_back_problem
    # A closed trace is still read here (no child): the same file, closed, reads whole.
    rec2 = EmonRecorder(FS, tmp_path / "closed.jls")
    rec2.on_chunk(chunk(0))
    rec2.close()
    assert rec2.lost_in_trace() == (0, None) and rec2.read_back_problem is None


def test_a_run_whose_trace_cannot_be_read_back_fails_saying_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    def unreadable(self: EmonRecorder) -> tuple[int, int | None]:
        self.read_back_problem = "pyjls died reading it back (SIGSEGV)"
        return 4321, 0

    monkeypatch.setattr(EmonRecorder, "lost_in_trace", unreadable)
    bench = bench_variant(tmp_path, **FAST)
    code = main(["measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "runs")])
    assert code != 0
    record = load_run(only_run(tmp_path / "runs"))
    assert record.finished is not None and record.finished.status == "failed"
    assert ("was left unreadable: pyjls died reading it back (SIGSEGV); none of its 4,321 "
            "samples can be counted as kept") in (record.finished.error or "")
    assert sum(isinstance(e, WindowMeasured) for e in record.events) >= 2
    assert "left unreadable" in capsys.readouterr().err
