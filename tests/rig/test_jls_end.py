"""A trace's last samples read back whatever its length (found by the 1 h soak, issue 39).

pyjls 0.17.0 finds a signal's length through its summary index; a level's index chunk is
written only with a whole entry of that level, so the samples after a summary chunk boundary
that make no whole entry are out of reach: with the rig's layout, a trace of 327,680 + 1 to
255 samples read back as 327,680 (the soak's Otii run lost its last 94 samples and failed, its
disk blamed). The writer now goes on past such an end with filler and names the true end;
the rig's readers keep to it. Checked here against pyjls itself, not a model of it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.emon.base import Chunk
from rig.run.recording import EmonRecorder
from rig.traces.files import (
    JLS_SIGNAL_OPTIONS,
    TRACE_END_KEY,
    TraceWriter,
    _rig_user_data,
    jls_end,
    jls_layout,
    read_trace,
)
from rig.traces.view import JlsSource

FS = 4000.0
#: The rig's layout: a level-1 summary chunk every 256 x 1280 samples, level 2 x20 that.
LEVEL1, LEVEL2 = 256 * 1280, 256 * 1280 * 20
NAMES = ("1 mA", "100 mA")


def pyjls_length(path: Path, name: str = "current") -> int:
    import pyjls

    with pyjls.Reader(str(path)) as r:
        return int(next(s.length for s in r.signals.values() if s.name == name))


def write(path: Path, total: int, *, chunk: int = 3000, ranges_from: int | None = 1000,
          set_voltage: tuple[float, str] | None = None) -> None:
    """`total` samples whose values tell their ids (current = id x 1e-9 A, GPIO toggling every
    1000 samples, range = id // 7 % 2 from `ranges_from` on), in `chunk`-sample appends."""
    with TraceWriter(path, FS, set_voltage=set_voltage) as w:
        for lo in range(0, total, chunk):
            ids = np.arange(lo, min(total, lo + chunk))
            ranges = None
            if ranges_from is not None and lo >= ranges_from:
                ranges = (ids // 7 % 2).astype(np.uint8)
            w.append(lo, (ids * 1e-9).astype(np.float32), np.full(len(ids), 1.8, np.float32),
                     (ids // 1000 % 2).astype(np.uint8), current_range=ranges,
                     range_names=NAMES if ranges is not None else ())


def plain_pyjls(path: Path, total: int) -> int:
    """The length pyjls gives back for a current signal of `total` samples in the rig's
    layout, written with pyjls alone (no filler)."""
    import pyjls

    with pyjls.Writer(str(path)) as w:
        w.source_def(1, name="s", vendor="v", model="m", version="1", serial_number="")
        w.signal_def(1, 1, pyjls.SignalType.FSR, pyjls.DataType.F32, int(FS), name="current",
                     units="A", **JLS_SIGNAL_OPTIONS)
        for lo in range(0, total, 65536):
            w.fsr(1, lo, np.zeros(min(65536, total - lo), dtype=np.float32))
    return pyjls_length(path)


def test_the_rule_is_pyjls_own(tmp_path: Path) -> None:
    # Where pyjls alone loses a trace's end, jls_end moves it; where it does not, it does not.
    layout = [(0, jls_layout(JLS_SIGNAL_OPTIONS, 32))]
    totals = [LEVEL1 - 1, LEVEL1, LEVEL1 + 1, LEVEL1 + 94, LEVEL1 + 255, LEVEL1 + 256,
              2 * LEVEL1 + 17, 3 * LEVEL1 + 300, 100_000, 654_321]
    for total in totals:
        kept = plain_pyjls(tmp_path / f"{total}.jls", total)
        assert (kept == total) == (jls_end(total, layout) == total), total
    assert plain_pyjls(tmp_path / "94.jls", LEVEL1 + 94) == LEVEL1  # the soak's loss
    # The level above: 1 to 5,119 samples past each 6,553,600 (no whole level-2 entry).
    assert jls_end(LEVEL2 + 5119, layout) == LEVEL2 + 5120
    assert jls_end(LEVEL2 + 5120, layout) == LEVEL2 + 5120
    assert jls_end(LEVEL2 + 1, layout) == LEVEL2 + 5120
    # A signal that starts later (the range signal) is judged on its own samples.
    assert jls_end(LEVEL1 + 1000 + 5, [(1000, layout[0][1])]) == LEVEL1 + 1000 + 256


@pytest.mark.parametrize("total", [LEVEL1 + 94, LEVEL1 + 1, 2 * LEVEL1 + 255, LEVEL1 + 256,
                                   LEVEL1 + 1000 + 3])
def test_every_sample_of_a_trace_reads_back(tmp_path: Path, total: int) -> None:
    path = tmp_path / "t.jls"
    write(path, total)
    trace = read_trace(path)
    assert len(trace) == total
    ids = np.arange(total)
    assert np.array_equal(trace.current, (ids * 1e-9).astype(np.float32).astype(np.float64))
    assert np.array_equal(trace.gpio, ids // 1000 % 2)
    assert trace.current_range is not None
    assert int(trace.current_range.at(np.array([total - 1]))[0]) == (total - 1) // 7 % 2
    assert set(trace.meta["samples_by_signal"].values()) == {total}
    # The viewer shows the trace, not the filler.
    source = JlsSource(path)
    assert source.length == total
    # What pyjls itself sees: the filler, NaN, named in the rig's user data.
    import pyjls

    with pyjls.Reader(str(path)) as r:
        cur = next(s for s in r.signals.values() if s.name == "current")
        filler = int(cur.length) - total
        assert filler == trace.meta.get("end_filler", 0)
        if filler:
            tail = r.fsr(cur.signal_id, total, filler)
            assert np.isnan(tail).all()
            assert _rig_user_data(r)[TRACE_END_KEY] == total
        else:
            assert TRACE_END_KEY not in _rig_user_data(r)


def test_a_set_voltage_trace_and_one_at_the_level_above(tmp_path: Path) -> None:
    write(tmp_path / "v.jls", LEVEL1 + 94, set_voltage=(3.3, "supply"), ranges_from=None)
    assert len(read_trace(tmp_path / "v.jls")) == LEVEL1 + 94
    total = LEVEL2 + 4000  # no whole level-2 entry after the boundary: all 4000 out of reach
    write(tmp_path / "l2.jls", total, chunk=1 << 18, ranges_from=None)
    trace = read_trace(tmp_path / "l2.jls")
    assert len(trace) == total and trace.current[-1] == np.float32((total - 1) * 1e-9)


def test_a_recording_that_ends_there_loses_nothing(tmp_path: Path) -> None:
    # The soak's run: an Otii stream of 327,774 samples; the read-back found 94 lost.
    rec = EmonRecorder(FS, tmp_path / "t.jls")
    total, size = LEVEL1 + 94, 4000
    for lo in range(0, total, size):
        n = min(size, total - lo)
        rec.on_chunk(Chunk(lo, np.full(n, 1e-3, np.float32), np.full(n, 1.8, np.float32),
                           np.ones(n, np.uint8)))
    rec.close()
    assert rec.lost_in_trace() == (0, None)
    assert len(read_trace(tmp_path / "t.jls")) == total
