"""Trace files: JLS v2 (what the Joulescope UI opens) and plain CSV.

A trace is current [A], voltage [V] and GPIO bits (bit 0 = the DUT's timestamp line) at one
sample rate. `TraceWriter` streams chunks into a JLS file as they arrive (bounded memory);
`read_trace` loads either format for analysis.

Power is not stored: it is current x voltage, derivable on read, and a third f32 channel would
make a 1 MS/s hour ~48 GB instead of ~33 GB. Older rig files carry a `power` signal (id 3);
readers ignore it or use it when present, so those files still load.

Voltage is stored only where the instrument measures it (a Joulescope, an N6705 sensing its
output, an Otii recording mv). Where the monitor sets it (an LPM01A, a PPK2) the file holds no
voltage signal: its user data names the set value and where it came from (`voltage_set_v`,
`voltage_source`), and `read_trace` gives a constant voltage array of that value, so every
reader takes both kinds (4 + 1 raw bytes per sample instead of 9).

Where the instrument tells each sample's current range (a PPK2, an auto-ranging Joulescope),
the file also holds a u4 signal `JLS_RANGE` (half a raw byte per sample): an index into the
names its user data lists (`RANGE_NAMES_KEY`), so that `rig analyze` re-derives how a window's
samples spread over the ranges. Files without it (other monitors, older rigs) read as before.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import logging
import math
import os
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import numpy as np

from rig import __version__
from rig.errors import AnalysisError
from rig.traces.analysis.dot import BLOCK, Crew, helper_pool, usable_cpus
from rig.traces.analysis.edges import falling_edges
from rig.traces.analysis.range_signal import RANGE_NOT_TOLD, RangeSignal
from rig.traces.writer_process import WriterProcess

log = logging.getLogger(__name__)

#: CSV columns, by header name.
CSV_COLUMNS = ("current_a", "voltage_v", "gpio")
_CSV_HINT = ("every data line needs a finite number in each of the columns "
             f"{', '.join(CSV_COLUMNS)}: fix or delete that line")
#: JLS signal names: current and voltage, and the GPIO bit field. `JLS_POWER` is no longer
#: written (power = current x voltage); older files may still hold it, as an optional signal.
JLS_CURRENT, JLS_VOLTAGE, JLS_POWER, JLS_GPIO = "current", "voltage", "power", "gpi0"
#: The current range of each sample, where the instrument tells it (u4: an index into the user
#: data's `RANGE_NAMES_KEY` list; `RANGE_NOT_TOLD` where a sample's range is not known).
JLS_RANGE = "current_range"
RANGE_NAMES_KEY = "current_range_names"
#: The Joulescope UI names its first general-purpose input this way (1-bit samples).
_JLS_GPIO_ALIASES = (JLS_GPIO, "gpi[0]")
#: Samples moved per pyjls call when reading and when filling gaps (bounds memory).
_BLOCK = 1 << 20
#: Monitor settings not copied into a trace's user data (see `TraceWriter.instrument`).
TRACE_SETTINGS_LEFT_OUT = frozenset({"accuracy"})
#: user_data chunk tag for the rig's JSON description of the recording.
_USER_DATA_META = 1
#: A JLS v2 file starts with this signature, in a file header of `_JLS_HEADER` bytes.
_JLS_SIGNATURE = b"jlsfmt"
_JLS_HEADER = 32

_SOURCE_ID = 1
# Signal 3 was power in files written before power was dropped; new files leave it unused so
# the ids of current, voltage and gpi0 stay the same in old and new files.
_SIG_CURRENT, _SIG_VOLTAGE, _SIG_GPIO = 1, 2, 4
#: The range signal, defined when the first chunk that tells its ranges comes (files without it
#: still read: a monitor that does not tell, or a rig before it was recorded).
_SIG_RANGE = 5
#: pyjls `signal_def` layout options of every rig trace: a summary entry per 256 samples (pyjls:
#: 128), x20 per level above, 8192-sample data blocks. Picked by `benchmarks/trace_size.py`:
#: 9.22 bytes/sample with voltage (9.30 at 128) and 5.14 without (5.16), zoom as fast; per
#: 1024 would save more but make a zoom below 1024 samples per pixel read raw samples.
JLS_SIGNAL_OPTIONS: dict[str, int] = {"sample_decimate_factor": 256, "entries_per_summary": 1280}

#: User-data key of a trace's true sample count, where its signals go on past it (`jls_end`).
TRACE_END_KEY = "trace_samples"

#: pyjls 0.17.0's `signal_def` defaults and floors (jls src/core.c), by sample size in bits:
#: (sample_decimate_factor, entries_per_summary, summary_decimate_factor).
_JLS_DEFAULTS = {32: (128, 640, 20), 8: (1024, 640, 20), 4: (1024, 1280, 20), 1: (1024, 1280, 20)}
_JLS_FACTOR_MIN = 10


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def jls_layout(options: dict[str, int], bits: int) -> tuple[int, int, int]:
    """(samples per level-1 summary entry, entries per summary chunk, summary entries per entry
    of the level above) that pyjls 0.17.0 writes for `signal_def(**options)` of a `bits`-bit
    signal: its defaults for what is missing, aligned as its `jls_core_signal_def_align` does."""
    dec0, entries0, factor0 = _JLS_DEFAULTS[bits]
    dec = _round_up(max(options.get("sample_decimate_factor") or dec0, _JLS_FACTOR_MIN),
                    256 // bits)  # whole multiples of 32 bytes of samples
    factor = max(options.get("summary_decimate_factor") or factor0, _JLS_FACTOR_MIN)
    entries = _round_up(max(options.get("entries_per_summary") or entries0, _JLS_FACTOR_MIN),
                        factor)
    return dec, entries, factor


def jls_end(n: int, signals: Iterable[tuple[int, tuple[int, int, int]]]) -> int:
    """The fewest sample ids, n or more, through which pyjls 0.17.0 gives back whole every
    signal of `signals`: (its first sample id, its layout as `jls_layout` gives it).

    pyjls finds a signal's length through its summary index, level by level; a level's index
    chunk is written only with at least one whole entry of that level. So samples after a
    level-L summary chunk boundary (every dec x entries x factor^(L-1) samples of the signal)
    that make no whole level-L entry (dec x factor^(L-1) samples) are in the file but out of
    reach: the reader says the signal ends at that boundary and refuses a read past it. With
    the rig's layout that is 1 to 255 samples past each multiple of 327,680 (a soak found a
    run whose Otii trace lost its last 94 of 327,774), 1 to 5,119 past each multiple of
    6,553,600, and so on up. A trace ending there gets filler up to the next safe end."""
    signals = list(signals)
    end, moved = n, True
    while moved:  # one signal's safe end may fall in another's gap: until none moves it
        moved = False
        for first, (dec, entries, factor) in signals:
            length = end - first
            period, whole = dec * entries, dec
            while 0 < period <= length:
                past = length % period
                if 0 < past < whole:
                    end += whole - past
                    length = end - first
                    moved = True
                period, whole = period * factor, whole * factor
    return end


@dataclass
class Trace:
    """Samples of one capture: current [A] and voltage [V] as float64, GPIO bits as uint8;
    the current range of each sample where the instrument told it (uint8 indices into
    `range_names`, `RANGE_NOT_TOLD` for a sample whose range is not known), else None: from a
    JLS file, a `RangeSignal` (the values as stored, read like a uint8 array)."""

    sample_rate: float
    current: np.ndarray
    voltage: np.ndarray
    gpio: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)
    current_range: np.ndarray | RangeSignal | None = None
    range_names: tuple[str, ...] = ()
    _edges: np.ndarray | None = field(default=None, init=False, repr=False, compare=False)
    _piece_dots: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.current)

    def falling_edges(self) -> np.ndarray:
        """`falling_edges(self.gpio)` (bit 0, the line high before the trace began): found
        once, then kept (the reader may have found them while another signal came in)."""
        if self._edges is None:
            self._edges = falling_edges(self.gpio)
        return self._edges

    @property
    def piece_dots(self) -> tuple[np.ndarray, np.ndarray] | None:
        """(pieces, their current x voltage sums) found while the trace was read, for
        `span_figures(..., known=)`: `read_trace`'s `spans`; None where none were."""
        return self._piece_dots

    @property
    def duration_s(self) -> float:
        """Length of the trace in seconds (sample count / sample rate)."""
        return len(self.current) / self.sample_rate

    @property
    def simulated(self) -> bool:
        """True when the file says it was recorded from the virtual bench."""
        return bool(self.meta.get("simulated", False))

    @property
    def voltage_set(self) -> dict[str, Any] | None:
        """{"volts", "source"} when the file stores no voltage (the monitor set it), else None."""
        return self.meta.get("voltage_set")


def set_voltage_of(user_data: dict[str, Any]) -> tuple[float, str] | None:
    """(volts, source) from a rig JLS file's user data when it stores no voltage signal."""
    volts = user_data.get("voltage_set_v")
    if isinstance(volts, int | float) and not isinstance(volts, bool) and math.isfinite(volts):
        return float(volts), str(user_data.get("voltage_source", ""))
    return None


def read_trace(path: str | Path, sample_rate: float | None = None, *,
               dtype: type = np.float64, spans: np.ndarray | None = None) -> Trace:
    """Load a `.jls` or `.csv` trace. CSV carries no sample rate: pass `sample_rate` [Hz].
    `dtype` np.float32: a JLS file's current and voltage as it stores them (float32: exact,
    half the memory, each signal read in one call; sums of them belong in float64,
    `rig.traces.analysis.dot`); a CSV's stay float64 (parsed from decimal text).
    `spans`: the [start, stop) rows the caller will give `span_figures(..., whole=True)`:
    a large trace's pieces are then dotted while its current comes in (`Trace.piece_dots`)."""
    path = Path(path)
    if not path.is_file():
        raise AnalysisError(f"trace file not found: {path}", hint="check the path")
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return _read_csv(path, sample_rate)
    if suffix == ".jls":
        return _read_jls(path, sample_rate, as_stored=np.dtype(dtype) == np.float32,
                         spans=spans)
    raise AnalysisError(
        f"unknown trace format {suffix or '(no suffix)'!r}: {path}",
        hint="give a .jls file (JLS v2) or a .csv file with columns current_a,voltage_v,gpio",
    )


def _check_rate(sample_rate: float) -> float:
    rate = float(sample_rate)
    if not (math.isfinite(rate) and rate > 0):
        raise AnalysisError(
            f"sample rate must be a positive number of Hz, got {sample_rate}",
            hint="pass --sample-rate HZ, e.g. --sample-rate 1000",
        )
    return rate


def _read_csv(path: Path, sample_rate: float | None) -> Trace:
    if sample_rate is None:
        raise AnalysisError(f"a CSV trace has no sample rate: {path}", hint="pass --sample-rate HZ")
    rate = _check_rate(sample_rate)
    header_index, header = _csv_header(path)
    missing = [c for c in CSV_COLUMNS if c not in header]
    if missing:
        raise AnalysisError(
            f"{path}: missing column(s) {', '.join(missing)}; header found: {','.join(header)}",
            hint="the header must name the columns current_a,voltage_v,gpio (any order)",
        )
    cols = [header.index(c) for c in CSV_COLUMNS]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # empty file: handled below
            data = np.loadtxt(
                path,
                delimiter=",",
                skiprows=header_index + 1,
                usecols=cols,
                ndmin=2,
                dtype=np.float64,
            )
    except ValueError as exc:
        # Find the line again to name it (the file's line number) and its column by name.
        _raise_bad_csv_field(path, header_index, cols)
        raise AnalysisError(f"{path}: {exc}", hint=_CSV_HINT) from None
    if len(data) == 0:
        raise AnalysisError(f"{path}: no samples after the header")
    finite = np.isfinite(data)
    if not finite.all():  # NaN or inf: numpy reads them as numbers, energy cannot use them
        _raise_bad_csv_field(path, header_index, cols)
    gpio_f = data[:, 2]
    bad = np.flatnonzero((gpio_f != np.round(gpio_f)) | (gpio_f < 0) | (gpio_f > 255))
    if bad.size:
        line = _csv_line_of_row(path, header_index, int(bad[0]))
        raise AnalysisError(
            f"{path} line {line}, column gpio: {float(gpio_f[bad[0]]):g} is not an integer bit "
            "field 0..255", hint="gpio holds the GPIO levels as an integer (bit 0: timestamp)"
        )
    return Trace(
        sample_rate=rate,
        current=np.ascontiguousarray(data[:, 0]),
        voltage=np.ascontiguousarray(data[:, 1]),
        gpio=gpio_f.astype(np.uint8),
        meta={"format": "csv", "path": str(path), "simulated": False},
    )


def _csv_data_lines(path: Path, header_index: int) -> Iterator[tuple[int, str]]:
    """(1-based line number, text without comment) of each data line, as np.loadtxt sees
    them: after the header, skipping blank and '#' comment lines."""
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for index, line in enumerate(f):
            if index <= header_index:
                continue
            text = line.split("#", 1)[0].strip()
            if text:
                yield index + 1, text


def _csv_line_of_row(path: Path, header_index: int, row: int) -> int:
    """The file's line number of data row `row` (0-based)."""
    for k, (number, _) in enumerate(_csv_data_lines(path, header_index)):
        if k == row:
            return number
    return header_index + 2 + row  # not reached: numpy read that many rows


def _raise_bad_csv_field(path: Path, header_index: int, cols: list[int]) -> None:
    """Raise AnalysisError naming the first line and column that is not a finite number
    (empty, text, NaN or inf, or a missing field); return if every field is fine."""
    for number, text in _csv_data_lines(path, header_index):
        fields = text.split(",")
        for name, col in zip(CSV_COLUMNS, cols, strict=True):
            where = f"{path} line {number}, column {name}"
            if col >= len(fields):
                raise AnalysisError(f"{where}: missing (the line has {len(fields)} field(s))",
                                    hint=_CSV_HINT)
            value = fields[col].strip()
            if not value:
                raise AnalysisError(f"{where}: empty field", hint=_CSV_HINT)
            try:
                number_value = float(value)
            except ValueError:
                raise AnalysisError(f"{where}: {value!r} is not a number",
                                    hint=_CSV_HINT) from None
            if not math.isfinite(number_value):
                raise AnalysisError(f"{where}: {value} is not a finite number",
                                    hint=_CSV_HINT + " (a CSV cannot mark dropped samples)")


def _csv_header(path: Path) -> tuple[int, list[str]]:
    """Index and names of the first line that is neither blank nor a '#' comment."""
    with path.open("r", encoding="utf-8", errors="replace") as f:
        for index, line in enumerate(f):
            text = line.strip()
            if text and not text.startswith("#"):
                return index, [name.strip() for name in text.split(",")]
    raise AnalysisError(f"{path}: empty CSV file, no header line")


#: The pyjls logger's state and fds 1 and 2 belong to the whole process: captures that overlap
#: (traces read on several threads, `rig verify`) share one redirection, made by the first to
#: begin and undone by the last to end (`_Redirect`).
_CAPTURE_LOCK = threading.Lock()
#: The logger pyjls forwards its C library's messages to (as "pyjls.c").
_PYJLS_LOGGER = "pyjls"
#: How many of the lines pyjls printed an error message quotes.
_JLS_LINES = 4


@dataclass
class _Redirect:
    """fds 1 and 2 pointed at `sink` for `depth` open captures; `saved`: (fd, copy of what it
    was); `propagate`: the pyjls logger's own setting, given back at the end."""

    sink: IO[bytes]
    saved: list[tuple[int, int]]
    propagate: bool
    depth: int = 0


_redirect: _Redirect | None = None


@contextlib.contextmanager
def captured_c_output() -> Iterator[list[str]]:
    """Catch what pyjls's C library says while the block runs, so none of it reaches the
    terminal; the yielded list holds its lines once the block has ended (also when it raised).

    The library's log ("could not read file header", "write mismatch 16 != 32", "not properly
    closed") is forwarded by pyjls to Python's logger ``pyjls.c``; with no handler configured,
    logging's last resort prints it bare on stderr. During the block the ``pyjls`` loggers keep
    their records to a collecting handler, and fds 1 and 2 point at an in-memory file, for
    anything C code writes to them directly. Python's own output is flushed first, so nothing
    of ours lands in the capture (`terminal_write` writes past it). Blocks on several threads
    may overlap (each keeps what was said while it ran, the others' words too where they
    overlap).
    """
    global _redirect
    lines: list[str] = []
    collector = _Collector(lines)
    jls_log = logging.getLogger(_PYJLS_LOGGER)
    with _CAPTURE_LOCK:
        if _redirect is None:
            _flush_output()
            sink = _sink()
            redirect = _Redirect(sink, [], jls_log.propagate)
            for fd in (1, 2):
                try:
                    copy = os.dup(fd)
                except OSError:  # closed (a daemon): nothing there to protect
                    continue
                redirect.saved.append((fd, copy))
                os.dup2(sink.fileno(), fd)
            jls_log.propagate = False
            _redirect = redirect
        redirect = _redirect
        redirect.depth += 1
        start = os.lseek(redirect.sink.fileno(), 0, os.SEEK_END)
        jls_log.addHandler(collector)
    try:
        yield lines
    finally:
        with _CAPTURE_LOCK:
            _flush_output()
            jls_log.removeHandler(collector)
            fd = redirect.sink.fileno()
            text = os.pread(fd, os.lseek(fd, 0, os.SEEK_END) - start, start)
            redirect.depth -= 1
            if redirect.depth == 0:
                for target, copy in redirect.saved:
                    os.dup2(copy, target)
                    os.close(copy)
                jls_log.propagate = redirect.propagate
                redirect.sink.close()
                _redirect = None
        lines.extend(line.strip() for line in text.decode("utf-8", "replace").splitlines()
                     if line.strip())
        if lines:
            log.debug("pyjls said: %s", "; ".join(lines))


def terminal_write(text: str) -> None:
    """Write `text` to the process's stderr as it was before any capture: progress lines from
    one thread while another reads a trace under `captured_c_output` (else they would land
    in its capture, as if pyjls had said them)."""
    with _CAPTURE_LOCK:
        saved = dict(_redirect.saved) if _redirect is not None else {}
        if 2 not in saved:
            with contextlib.suppress(OSError, ValueError, AttributeError):  # no stderr (a daemon)
                sys.stderr.write(text)
                sys.stderr.flush()
            return
        data = text.encode("utf-8", "replace")
        while data:  # os.write may take part of it
            data = data[os.write(saved[2], data):]


def _sink() -> IO[bytes]:
    """A file for what C code writes on fds 1 and 2: in memory where Linux offers one
    (`memfd_create`: ~10x quicker to make than a temporary file on disk, and it never touches
    a disk that may be full), else a temporary file."""
    if hasattr(os, "memfd_create"):
        with contextlib.suppress(OSError):
            return open(os.memfd_create("rig-pyjls-said", os.MFD_CLOEXEC), "w+b")
    return tempfile.TemporaryFile()


class _Collector(logging.Handler):
    """A logging handler that appends each record's message to a list."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__()
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        """Keep the message (never raises: a log record must not break a read)."""
        with contextlib.suppress(Exception):
            self.lines.append(record.getMessage().strip())


def _flush_output() -> None:
    """Flush Python's stdout/stderr and C's stdio buffers (so a capture starts and ends clean)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(Exception):
        _libc().fflush(None)


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library (loaded once: each `ctypes.CDLL` makes a class and a dlopen call)."""
    return ctypes.CDLL(None)


def jls_error(
    path: Path, exc: BaseException, said: list[str], doing: str = "read"
) -> AnalysisError:
    """Our typed error for a JLS file pyjls refused, with what its C library printed."""
    printed = list(dict.fromkeys(said))[:_JLS_LINES]
    detail = f" (pyjls: {'; '.join(printed)})" if printed else ""
    return AnalysisError(f"cannot {doing} JLS file {path}: {exc}{detail}",
                         hint="is it a complete JLS v2 file? copy it again from where it was "
                              "recorded")


def open_jls_reader(path: Path) -> tuple[Any, list[str]]:
    """`pyjls.Reader(path)` with what its C library printed caught (never on the terminal);
    a file it refuses raises AnalysisError quoting it. Returns the reader and those lines."""
    import pyjls  # heavy C extension: only when a JLS file is actually read

    with captured_c_output() as said:
        try:
            reader, error = pyjls.Reader(str(path)), None
        except Exception as exc:  # pyjls raises RuntimeError with its own code text
            reader, error = None, exc
    if error is not None:
        raise jls_error(path, error, said) from None
    return reader, said


def _read_jls(path: Path, sample_rate: float | None, *, as_stored: bool = False,
              spans: np.ndarray | None = None) -> Trace:
    import pyjls  # heavy C extension: only when a JLS file is actually read

    check_jls_length(path)
    reader: Any = None
    failure: BaseException | None = None
    # One capture over opening, reading and closing (each capture makes a sink and moves
    # fds 1 and 2 twice); its lines are complete once the block has ended.
    with captured_c_output() as said:
        try:
            try:
                reader = pyjls.Reader(str(path))
            except Exception as exc:  # pyjls raises RuntimeError with its own code text
                failure = exc
            else:
                trace = _read_jls_signals(pyjls, reader, path, sample_rate, as_stored, spans)
        except (RuntimeError, OSError, ValueError) as exc:  # pyjls on a damaged chunk
            failure = exc
        finally:
            if reader is not None:
                reader.close()
    if failure is not None:
        raise jls_error(path, failure, said) from None
    if said:  # e.g. a recording cut off before it was closed, which pyjls recovered
        trace.meta["reader_messages"] = list(said)
    return trace


def _read_jls_signals(
    pyjls: Any, reader: Any, path: Path, sample_rate: float | None, as_stored: bool = False,
    spans: np.ndarray | None = None,
) -> Trace:
    """The trace from an open reader (`as_stored`: current and voltage in the file's own
    dtype; `spans`: see `read_trace`)."""
    by_name = {
        s.name: s
        for s in reader.signals.values()
        if s.signal_type == pyjls.SignalType.FSR and s.signal_id != 0
    }
    gpio_name = next((n for n in _JLS_GPIO_ALIASES if n in by_name), None)
    user = _rig_user_data(reader)  # read once: the set voltage and the meta both need it
    set_v = None if JLS_VOLTAGE in by_name else set_voltage_of(user)
    missing = [n for n in (JLS_CURRENT, *(() if set_v else (JLS_VOLTAGE,))) if n not in by_name]
    if gpio_name is None:
        missing.append(JLS_GPIO)
    if missing:
        raise AnalysisError(
            f"{path}: missing signal(s) {', '.join(missing)}; signals present: "
            f"{', '.join(sorted(by_name)) or 'none'}",
            hint="record current, voltage and the GPIO timestamp input gpi0",
        )
    cur, gpi = by_name[JLS_CURRENT], by_name[gpio_name]
    vol = by_name.get(JLS_VOLTAGE)
    rates = {s.sample_rate for s in (cur, vol, gpi) if s is not None}
    if len(rates) != 1:
        raise AnalysisError(
            f"{path}: signals differ in sample rate ({sorted(rates)} Hz)",
            hint="current, voltage and gpio must be recorded at one rate",
        )
    rate = float(cur.sample_rate)
    meta = _jls_meta(reader, cur, path, user)
    exact = meta["user_data"].get("sample_rate_hz")
    if isinstance(exact, int | float) and exact > 0 and round(exact) == rate:
        rate = float(exact)  # written by the rig: the instrument's true, fractional rate
    if sample_rate is not None and float(sample_rate) != rate:
        raise AnalysisError(
            f"{path} was recorded at {rate:g} Hz but --sample-rate {sample_rate:g} was given",
            hint="drop --sample-rate for JLS traces: the file knows its rate",
        )
    n = min(s.length for s in (cur, vol, gpi) if s is not None)
    end = trace_end(user, n)
    if end < n:  # filler after the trace's end (`TraceWriter.close`): not the trace's
        meta["end_filler"] = n - end
        n = end
    read = _read_whole if as_stored else _read_fsr
    names = meta["user_data"].get(RANGE_NAMES_KEY)
    rng = by_name.get(JLS_RANGE)
    told = rng is not None and isinstance(names, list) and bool(names)
    range_names = tuple(str(x) for x in names) if told else ()
    stream = (_StreamedCurrent.make(path, cur, n, spans)
              if as_stored and spans is not None else None)
    # The current, the largest signal, on a reader of its own while this one reads the rest
    # (streamed in, where its pieces' dots are found as it comes; else in one call).
    with stream or _SideRead(path, cur.signal_id, n, read) as current_read:
        if vol is not None:
            voltage = read(reader, vol.signal_id, n, np.float64)
        else:  # set, not measured: one value for every sample, a read-only view (no memory)
            assert set_v is not None
            voltage = np.broadcast_to(np.float64(set_v[0]), (n,))
            meta["voltage_set"] = {"volts": set_v[0], "source": set_v[1]}
        current_range = None
        if told:
            assert rng is not None
            current_range = _read_range(reader, rng, cur, n)
        edges, piece_dots = None, None
        if isinstance(current_read, _StreamedCurrent):
            gpio = _read_gpio(reader, gpi, n, path)
            current, edges, piece_dots = current_read.finish(reader, voltage, gpio,
                                                             current_range, range_names)
        elif current_read.reading():
            gpio = _read_gpio(reader, gpi, n, path)
            # Time this thread would spend waiting: find what every analysis of the trace
            # asks for first (the timestamp edges, where the ranges change), kept for it.
            edges = _find_marks(gpio, current_range, n)
            current = current_read.result(reader)
        elif n >= SIDE_READ_SAMPLES and usable_cpus() > 1:
            # One reader, here: the current first; then, while the GPIO line is read and
            # its edges found, a helper finds the range changes and dots the pieces of the
            # caller's spans (the sums leave the end of the work; ~3 ms for the PPK2 trace).
            current = current_read.result(reader)
            rows = _valid_spans(spans, n)
            crew = Crew()
            job = helper_pool().submit(_dot_pieces, current, voltage, current_range,
                                       range_names, rows, n, crew=crew)
            gpio = _read_gpio(reader, gpi, n, path)
            edges = falling_edges(gpio)
            # Then this thread takes the blocks the helper has not come to yet.
            piece_dots = (_dot_pieces(current, voltage, current_range, range_names, rows, n)
                          if job.cancel() else crew.join(job))
        else:
            gpio = _read_gpio(reader, gpi, n, path)
            current = current_read.result(reader)
    filler = int(meta.get("end_filler", 0))
    meta["samples_by_signal"] = {  # the trace's samples each holds (filler not counted)
        JLS_CURRENT: cur.length - filler,
        **({JLS_VOLTAGE: vol.length - filler} if vol is not None else {}),
        gpio_name: gpi.length - filler,
        **({JLS_RANGE: _range_covers(rng, cur) - filler} if current_range is not None
           and rng is not None else {}),
    }
    trace = Trace(sample_rate=rate, current=current, voltage=voltage, gpio=gpio, meta=meta,
                  current_range=current_range, range_names=range_names)
    trace._edges = edges
    trace._piece_dots = piece_dots
    return trace


def _valid_spans(spans: np.ndarray | None, n: int) -> np.ndarray | None:
    """`spans` as int64 [start, stop) rows where each is a non-empty span inside `n` samples;
    else None (`span_figures` will refuse them, by name)."""
    if spans is None:
        return None
    rows = np.asarray(spans)
    if rows.ndim != 2 or rows.shape[1:] != (2,) or not np.issubdtype(rows.dtype, np.integer):
        return None
    from rig.traces.analysis.energy import check_spans

    rows = rows.astype(np.int64)
    try:
        check_spans(rows, n, "trace")
    except AnalysisError:
        return None
    return rows


def _dot_pieces(current: np.ndarray, voltage: np.ndarray, current_range: RangeSignal | None,
                range_names: tuple[str, ...], spans: np.ndarray | None, n: int, *,
                ready: Callable[[int], None] | None = None, crew: Crew | None = None
                ) -> tuple[np.ndarray, np.ndarray] | None:
    """(pieces, their dots) of `spans` over the whole trace, as `span_figures(..., whole=True)`
    takes them (`span_pieces`; the range changes found and kept on the way); None without
    spans, or where the ranges change too often to take piece by piece."""
    from rig.traces.analysis.dot import span_dots
    from rig.traces.analysis.energy import span_pieces

    if current_range is not None:
        current_range.changes(0, n)
    if spans is None:
        return None
    cut = span_pieces(spans, n, current_range, range_names, whole=True)
    if cut is None:
        return None
    return cut[0], span_dots(current, voltage, cut[0], ready=ready, crew=crew)


def _find_marks(gpio: np.ndarray, current_range: RangeSignal | None, n: int) -> np.ndarray:
    """The GPIO line's falling edges (returned) and where the ranges change (kept in
    `current_range`): what every analysis of a trace asks for first."""
    if current_range is not None:
        current_range.changes(0, n)
    return falling_edges(gpio)


#: Samples from which `_SideRead` reads the current on a thread of its own: below it a second
#: reader's opening (~0.3-0.7 ms: it reads the file's index) and a thread cost about as
#: much as they save.
SIDE_READ_SAMPLES = 1_000_000


class _SideRead:
    """One signal of a JLS file read on a thread with a reader of its own, where that pays:
    pyjls reads without holding the GIL, so the signal comes in while the caller reads the
    others (a trace of the PPK2's 5.6 M samples: ~12 ms instead of ~15 on two CPUs, for ~2 ms
    more CPU time: the second reader's opening; no copies). Small traces, or one CPU: read
    in `result` on the caller's reader. Leaving the block waits for the thread (no reader is
    left reading)."""

    def __init__(self, path: Path, signal_id: int, n: int,
                 read: Callable[[Any, int, int, type], np.ndarray]) -> None:
        self._args = (signal_id, n, np.float64)
        self._read = read
        self._out: np.ndarray | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if n >= SIDE_READ_SAMPLES and usable_cpus() > 1 and not getattr(_one_reader, "on", False):
            self._thread = threading.Thread(target=self._run, args=(path,),
                                            name="rig-trace-read", daemon=True)

    def _run(self, path: Path) -> None:
        import pyjls

        try:
            with pyjls.Reader(str(path)) as own:
                self._out = self._read(own, *self._args)
        except BaseException as exc:  # handed to the caller by `result`
            self._error = exc

    def __enter__(self) -> _SideRead:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._thread.join()

    def reading(self) -> bool:
        """Whether the signal is still coming in on the thread (the caller would wait)."""
        return self._thread is not None and self._thread.is_alive()

    def result(self, reader: Any) -> np.ndarray:
        """The signal's samples (read on `reader` here where no thread read them)."""
        if self._thread is None:
            return self._read(reader, *self._args)
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._out is not None
        return self._out


class _ReadFailed(Exception):
    """The streamed current's reader stopped (`_Arrival.fail`)."""


class _Arrival:
    """How many of a signal's first samples are in, for threads that wait on them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._upto = 0
        self._failed = False

    def advance(self, upto: int) -> None:
        with self._cond:
            self._upto = upto
            self._cond.notify_all()

    def fail(self) -> None:
        with self._cond:
            self._failed = True
            self._cond.notify_all()

    def wait(self, upto: int) -> None:
        """Return once the first `upto` samples are in; `_ReadFailed` if they never will."""
        with self._cond:
            while self._upto < upto:
                if self._failed:
                    raise _ReadFailed
                self._cond.wait()


@functools.cache
def _jls_c() -> Any:
    """pyjls's C library (its extension exports the JLS reader's C API), for reading a signal
    block by block into one array of ours, which pyjls's `fsr` cannot (each call returns a new
    array: copying each into place cost as much as streaming gained). None where the
    functions are not there."""
    try:
        from pyjls import binding

        lib = ctypes.CDLL(binding.__file__)
        lib.jls_rd_open.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
        lib.jls_rd_open.restype = ctypes.c_int32
        lib.jls_rd_fsr.argtypes = [ctypes.c_void_p, ctypes.c_uint16, ctypes.c_int64,
                                   ctypes.c_void_p, ctypes.c_int64]
        lib.jls_rd_fsr.restype = ctypes.c_int32
        lib.jls_rd_close.argtypes = [ctypes.c_void_p]
        lib.jls_rd_close.restype = None
    except (ImportError, OSError, AttributeError):
        return None
    return lib


#: Samples read at a time where the current streams in: the sums' block (each waits for one).
_STREAM_BLOCK = BLOCK


class _StreamedCurrent:
    """A large trace's float32 current read block by block into one array, on a reader of
    our own (pyjls's C library), and the dots of the pieces `span_figures` will take (the
    caller's `spans`, cut at every range change, the whole trace: `span_pieces`) found as
    the blocks come in, block for block as `span_dots` finds them after a read (the same
    sums): the blocks come in on a thread of their own while the caller reads the other
    signals, then finds the edges and the dots, so that the read and the sums overlap instead
    of following each other (the PPK2 trace: ~3 ms less). Not with one reader per trace
    (`one_reader_per_trace`): there the other CPUs are busy already, and a helper summing
    as the blocks came in slowed the runs re-derived together (~3 ms more). Where our
    reader stops (a damaged chunk), the current is read again on the caller's reader, which
    refuses it as it would have, and nothing was found ahead."""

    def __init__(self, path: Path, signal_id: int, n: int, spans: np.ndarray) -> None:
        self._path, self._signal_id, self._n, self._spans = path, signal_id, n, spans
        self.out = np.empty(n, dtype=np.float32)
        self.arrival = _Arrival()
        self.ok = False
        self._thread = threading.Thread(target=self._read_blocks, name="rig-trace-read",
                                        daemon=True)

    @classmethod
    def make(cls, path: Path, cur: Any, n: int, spans: np.ndarray) -> _StreamedCurrent | None:
        """One for a large float32 current and valid spans on a host with CPUs to spare,
        outside `one_reader_per_trace`; else None (read as `_SideRead` reads)."""
        import pyjls

        rows = _valid_spans(spans, n)
        if (rows is None or n < SIDE_READ_SAMPLES or usable_cpus() < 2
                or getattr(_one_reader, "on", False) or cur.data_type != pyjls.DataType.F32
                or _jls_c() is None):
            return None
        return cls(path, int(cur.signal_id), n, rows)

    def __enter__(self) -> _StreamedCurrent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.join()  # no reader left reading, whatever happened

    def _read_blocks(self) -> None:
        lib, rd = _jls_c(), ctypes.c_void_p()
        try:
            if lib.jls_rd_open(ctypes.byref(rd), os.fsencode(self._path)) != 0:
                return
            try:
                at = self.out.ctypes.data
                for lo in range(0, self._n, _STREAM_BLOCK):
                    length = min(_STREAM_BLOCK, self._n - lo)
                    if lib.jls_rd_fsr(rd, self._signal_id, lo, at + 4 * lo, length) != 0:
                        return
                    self.arrival.advance(lo + length)
                self.ok = True
            finally:
                lib.jls_rd_close(rd)
        finally:
            if not self.ok:
                self.arrival.fail()

    def _find(self, voltage: np.ndarray, gpio: np.ndarray, current_range: RangeSignal | None,
              range_names: tuple[str, ...]
              ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """The edges (and range changes), then the pieces' dots as their blocks come in."""
        edges = _find_marks(gpio, current_range, self._n)
        try:
            return edges, _dot_pieces(self.out, voltage, current_range, range_names,
                                      self._spans, self._n, ready=self.arrival.wait)
        except _ReadFailed:
            return edges, None

    def finish(self, reader: Any, voltage: np.ndarray, gpio: np.ndarray,
               current_range: RangeSignal | None, range_names: tuple[str, ...]
               ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """(current, edges, piece dots or None), the caller's own reads done: found here
        while the blocks come in."""
        edges, dots = self._find(voltage, gpio, current_range, range_names)
        self._thread.join()
        if not self.ok:  # our reader stopped: the caller's reader says why (or reads it)
            return _read_whole(reader, self._signal_id, self._n, np.float32), edges, None
        return self.out, edges, dots


_one_reader = threading.local()


@contextlib.contextmanager
def one_reader_per_trace() -> Iterator[None]:
    """Traces read on this thread during the block read every signal on one reader, on this
    thread (`_SideRead` off): for callers that already keep every CPU busy, e.g. runs
    re-derived together (`rig.submission.verify.rederive_runs`), where a second reader per
    trace only shares the same CPUs. (A large trace's range changes and pieces are still
    found and dotted on a helper thread while its GPIO line is read: numpy, not a second
    read.)"""
    before = getattr(_one_reader, "on", False)
    _one_reader.on = True
    try:
        yield
    finally:
        _one_reader.on = before


def trace_end(user: dict[str, Any], n: int) -> int:
    """Where the trace of a file whose signals hold `n` samples ends: `n`, or the true end its
    user data names where filler follows (`TraceWriter.close`)."""
    end = user.get(TRACE_END_KEY)
    if isinstance(end, int) and not isinstance(end, bool) and 0 <= end < n:
        return end
    return n


def _range_covers(sig: Any, cur: Any) -> int:
    """How many of the trace's samples the range signal covers: from the first sample (it may
    start later, with the first chunk that told its ranges) to its last value, not counting the
    pad value that ends an odd count (u4 values go two to a byte: `_write_range`)."""
    covers = int(sig.sample_id_offset or 0) - int(cur.sample_id_offset or 0) + int(sig.length)
    return covers - 1 if covers == int(cur.length) + 1 else covers


def _read_range(reader: Any, sig: Any, cur: Any, n: int) -> RangeSignal:
    """The range signal (u4, two a byte, low nibble first) for the current's `n` samples, as
    stored (it may start later than the current): one read, nothing unpacked."""
    shift = int(sig.sample_id_offset or 0) - int(cur.sample_id_offset or 0)
    begin, end = max(0, shift), min(n, shift + int(sig.length))
    if end <= begin:
        return RangeSignal(np.empty(0, dtype=np.uint8), shift, 0, n)
    first = begin - shift  # the signal's value at trace sample `begin`
    start = first - first % 2  # from a whole byte
    packed = np.asarray(reader.fsr(sig.signal_id, start, end - shift - start), dtype=np.uint8)
    return RangeSignal(packed, shift + start, end - shift - start, n)


def check_jls_length(path: Path) -> bool:
    """Refuse a JLS copy cut short: pyjls would "repair" it into a few samples without a word.

    The file header's bytes 16..24 hold the file length, written on close (0 while recording).
    A closed file whose length differs from its size on disk lost its end; an unclosed one is
    left to pyjls, which recovers what the crashed recording holds: returns True for those.
    An empty file, one shorter than the header or one without the JLS signature is refused
    here, in words, before pyjls prints its own C-level complaints about it.
    """
    with open(path, "rb") as f:
        header = f.read(_JLS_HEADER)
    size = path.stat().st_size
    if not header:
        raise AnalysisError(f"JLS file {path} is empty (0 bytes)",
                            hint="copy it again from where it was recorded")
    if not header.startswith(_JLS_SIGNATURE[: len(header)]):
        raise AnalysisError(f"{path} is not a JLS v2 file: it does not start with the JLS "
                            "file signature",
                            hint="give a .jls that the rig or the Joulescope UI recorded, or a "
                                 ".csv trace with --sample-rate")
    if len(header) < _JLS_HEADER:
        raise AnalysisError(f"JLS file {path} is truncated: {size} bytes, shorter than its "
                            f"{_JLS_HEADER}-byte file header",
                            hint="copy it again from where it was recorded")
    length = int.from_bytes(header[16:24], "little")
    if length and length != size:
        raise AnalysisError(f"JLS file {path} is truncated: it holds {size:,} of its "
                            f"{length:,} bytes",
                            hint="copy it again from where it was recorded")
    return length == 0


def _read_whole(reader: Any, signal_id: int, n: int, dtype: type) -> np.ndarray:
    """The first `n` raw samples in the dtype the file stores (`dtype`: for an empty read),
    in one call: no block copies, no conversion."""
    if n == 0:
        return np.empty(0, dtype=dtype)
    out: np.ndarray = np.asarray(reader.fsr(signal_id, 0, n))
    return out


def _read_fsr(reader: Any, signal_id: int, n: int, dtype: type) -> np.ndarray:
    # Raw samples, never the summaries: their means are exact only at whole summary steps.
    out: np.ndarray = np.empty(n, dtype=dtype)
    for lo in range(0, n, _BLOCK):
        length = min(_BLOCK, n - lo)
        out[lo : lo + length] = reader.fsr(signal_id, lo, length)
    return out


def _read_gpio(reader: Any, sig: Any, n: int, path: Path) -> np.ndarray:
    import pyjls

    if sig.data_type == pyjls.DataType.U8:  # stored as it is returned: one call, no copies
        return np.asarray(_read_whole(reader, sig.signal_id, n, np.uint8), dtype=np.uint8)
    if sig.data_type == pyjls.DataType.U1:
        out = np.empty(n, dtype=np.uint8)
        for lo in range(0, n, _BLOCK):  # _BLOCK is a multiple of 8: blocks start on a byte
            length = min(_BLOCK, n - lo)
            packed = reader.fsr(sig.signal_id, lo, length)
            out[lo : lo + length] = np.unpackbits(packed, bitorder="little")[:length]
        return out
    raise AnalysisError(
        f"{path}: GPIO signal {sig.name!r} has data type {pyjls.data_type_as_str(sig.data_type)}; "
        "expected u8 or u1"
    )


def _rig_user_data(reader: Any) -> dict[str, Any]:
    """The rig's JSON description of the recording (empty for other writers' files)."""
    user: dict[str, Any] = {}

    def on_user_data(chunk_meta: int, data: Any) -> bool:
        if chunk_meta == _USER_DATA_META and isinstance(data, dict):
            user.update(data)
        return False

    reader.user_data(on_user_data)
    return user


def _jls_meta(reader: Any, cur: Any, path: Path, user: dict[str, Any] | None = None
              ) -> dict[str, Any]:
    source = reader.sources.get(cur.source_id)
    if user is None:
        user = _rig_user_data(reader)
    annotations: list[tuple[int, str]] = []

    def on_annotation(timestamp: int, _y: Any, _kind: int, _group: int, data: Any) -> bool:
        # The reader gives sample positions relative to the first stored sample: array indices.
        annotations.append((int(timestamp), str(data)))
        return False

    reader.annotations(cur.signal_id, 0, on_annotation)
    source_info = {
        key: getattr(source, key, None)
        for key in ("name", "vendor", "model", "version", "serial_number")
    }
    simulated = bool(user.get("simulated")) or "SIMULATED" in str(source_info.get("model", ""))
    return {
        "format": "jls",
        "path": str(path),
        "simulated": simulated,
        "source": source_info,
        "first_sample_id": int(cur.sample_id_offset or 0),
        "annotations": annotations,
        "user_data": user,
    }


class TraceWriter:
    """Stream EMON chunks into a JLS v2 file: current [A] and voltage [V] (f32), gpi0 (u8).

    No power signal: it is current x voltage, so readers derive it (9 bytes per sample instead
    of 13). With `set_voltage` = (volts, source), the supply the monitor sets rather than
    measures, no voltage signal either (5 bytes per sample): the user data records the value
    and its source, and `append` ignores the chunks' voltage.
    Chunks must come in sample-id order. A gap (dropped samples) is written as NaN current (and
    voltage) with the GPIO level held, and marked by an annotation, so it can never
    fake a timestamp edge or a zero-energy stretch. Chunks that tell each sample's current
    range add the u4 range signal (`JLS_RANGE`, from the first such chunk on; `RANGE_NOT_TOLD`
    in a gap).
    `own_process`: pyjls writes in a child process (`rig.traces.writer_process`); its errors,
    a crash included, come as `RuntimeError` from a later call or `close`.
    """

    def __init__(
        self,
        path: str | Path,
        sample_rate: float,
        *,
        source: str = "neurobench-rig",
        simulated: bool = False,
        set_voltage: tuple[float, str] | None = None,
        jls_options: dict[str, int] | None = None,
        instrument: dict[str, Any] | None = None,
        own_process: bool = False,
    ) -> None:
        import pyjls

        rate = float(sample_rate)
        if not (math.isfinite(rate) and rate > 0):
            raise ValueError(f"sample rate must be a positive number of Hz, got {sample_rate}")
        self.path = Path(path)
        #: The instrument's true rate (e.g. an N6705's 1/(k x 20.48 µs) is never whole hertz).
        self.exact_sample_rate = rate
        # JLS stores whole hertz (it would truncate silently): the signal header gets the
        # nearest one, the exact rate goes into the rig's user data, and read_trace prefers it.
        self.sample_rate = max(1, round(rate))
        self.simulated = simulated
        if set_voltage is not None and not math.isfinite(set_voltage[0]):
            raise ValueError(f"set voltage must be a finite number of volts, got {set_voltage}")
        #: (volts, source) when the file stores no voltage signal; None when it does.
        self.set_voltage = set_voltage
        self._jls_options = JLS_SIGNAL_OPTIONS if jls_options is None else jls_options
        #: The monitor's settings snapshot (its `settings()`), kept with the samples so that a
        #: trace read without its run folder still says how they were taken (e.g. a PPK2's
        #: spike filter, a Joulescope's range). Its accuracy declaration stays in the run's
        #: manifest only: with a source per range it is kilobytes, which the disk preflight's
        #: fixed allowance per trace (rig.traces.space) does not hold.
        self.instrument = None if instrument is None else json.loads(json.dumps(
            {k: v for k, v in instrument.items() if k not in TRACE_SETTINGS_LEFT_OUT},
            default=lambda v: v.item() if hasattr(v, "item") else str(v)))
        #: Samples appended (not counting filled gaps) and samples missing in gaps.
        self.samples_written = 0
        self.dropped_samples = 0
        self._next_id: int | None = None
        self._first_id = 0  # the first sample id written (each signal's first)
        self._last_gpio = 0
        #: The range signal (`JLS_RANGE`), once a chunk told its ranges: the names its values
        #: index, the next sample id it holds, and a value waiting for its byte's other half.
        self.range_names: tuple[str, ...] = ()
        self._range_next: int | None = None
        self._range_first: int | None = None  # the range signal's first sample id
        self._range_half: int | None = None
        self._jls = pyjls
        # A live recording's writer in a child process (`own_process`): pyjls's C code can
        # crash on a disk that fills under it, which must not take the rig down with it.
        self._writer: Any = (WriterProcess(str(self.path)) if own_process
                             else pyjls.Writer(str(self.path)))
        try:
            self._define(source)
        except BaseException:
            self._writer.close()
            self._writer = None
            raise

    def _define(self, source: str) -> None:
        jls, w = self._jls, self._writer
        label = f"{source} [SIMULATED]" if self.simulated else source
        w.source_def(
            _SOURCE_ID,
            name=label,
            vendor="neurobench-rig",
            model="SIMULATED" if self.simulated else "measured",
            version=__version__,
            serial_number="",
        )
        for sig, name, dtype, units in (
            (_SIG_CURRENT, JLS_CURRENT, jls.DataType.F32, "A"),
            *(() if self.set_voltage else ((_SIG_VOLTAGE, JLS_VOLTAGE, jls.DataType.F32, "V"),)),
            (_SIG_GPIO, JLS_GPIO, jls.DataType.U8, ""),
        ):
            w.signal_def(
                sig,
                _SOURCE_ID,
                jls.SignalType.FSR,
                dtype,
                self.sample_rate,
                name=name,
                units=units,
                **self._jls_options,
            )
        w.user_data(
            _USER_DATA_META,
            {
                "simulated": self.simulated,
                "source": source,
                "writer": f"neurobench-rig {__version__}",
                "sample_rate_hz": self.exact_sample_rate,
                "gpio": "gpi0 holds the GPIO bit field; bit 0 is the DUT timestamp line",
                **({"voltage_set_v": self.set_voltage[0],
                    "voltage_source": self.set_voltage[1]} if self.set_voltage else {}),
                **({"instrument": self.instrument} if self.instrument is not None else {}),
            },
        )

    def append(
        self, first_sample_id: int, current: np.ndarray, voltage: np.ndarray | None,
        gpio: np.ndarray, *, current_range: np.ndarray | None = None,
        range_names: tuple[str, ...] = (),
    ) -> None:
        """Write consecutive samples starting at `first_sample_id` (`voltage` is not stored,
        and may be None, when the writer has a `set_voltage`); with `current_range`, each
        sample's current range (indices into `range_names`, which may only grow)."""
        if self._writer is None:
            raise ValueError(f"trace writer for {self.path} is closed")
        i = np.ascontiguousarray(current, dtype=np.float32)
        g = np.ascontiguousarray(gpio, dtype=np.uint8)
        v = None if self.set_voltage else np.ascontiguousarray(voltage, dtype=np.float32)
        if not (len(i) == len(g) and (v is None or len(v) == len(i))):
            raise ValueError("current, voltage and gpio differ in length")
        if len(i) == 0:
            return
        first = int(first_sample_id)
        if self._next_id is not None and first < self._next_id:
            raise ValueError(
                f"chunk starts at sample {first} but sample {self._next_id} is next: "
                "chunks overlap or came out of order"
            )
        if self._next_id is not None and first > self._next_id:
            self._fill_gap(self._next_id, first)
        if self._next_id is None:
            self._first_id = first
        w = self._writer
        w.fsr(_SIG_CURRENT, first, i)
        if v is not None:
            w.fsr(_SIG_VOLTAGE, first, v)
        w.fsr(_SIG_GPIO, first, g)
        if current_range is not None or self._range_next is not None:
            self._append_range(first, len(i), current_range, range_names)
        self._last_gpio = int(g[-1])
        self._next_id = first + len(i)
        self.samples_written += len(i)

    def _append_range(self, first: int, n: int, current_range: np.ndarray | None,
                      range_names: tuple[str, ...]) -> None:
        """The range signal's next samples (u4, two a byte, the earlier in the low nibble, as
        pyjls packs them): defined with the first chunk that tells its ranges, names in the
        user data; samples before it, in a gap or in a chunk that tells none read
        `RANGE_NOT_TOLD`."""
        if current_range is not None and (self._range_next is None
                                          or range_names != self.range_names):
            grows = range_names[: len(self.range_names)] == self.range_names
            if not range_names or len(range_names) > RANGE_NOT_TOLD or not grows:
                raise ValueError(f"range names {range_names} do not extend "
                                 f"{self.range_names} within {RANGE_NOT_TOLD} names")
            if self._range_next is None:
                self._writer.signal_def(_SIG_RANGE, _SOURCE_ID, self._jls.SignalType.FSR,
                                        self._jls.DataType.U4, self.sample_rate,
                                        name=JLS_RANGE, units="", **self._jls_options)
                self._range_next = self._range_first = first
            self.range_names = tuple(range_names)
            self._writer.user_data(_USER_DATA_META, {RANGE_NAMES_KEY: list(range_names)})
        assert self._range_next is not None
        values = (np.full(n, RANGE_NOT_TOLD, dtype=np.uint8) if current_range is None
                  else np.asarray(current_range, dtype=np.uint8))
        if first > self._range_next:  # a gap (filled in the other signals too)
            values = np.concatenate((np.full(first - self._range_next, RANGE_NOT_TOLD,
                                             dtype=np.uint8), values))
        self._write_range(values)

    def _write_range(self, values: np.ndarray, *, final: bool = False) -> None:
        """Pack `values` (after a held half byte) and write the whole bytes; an odd last value
        waits for the next call (`final`: written with `RANGE_NOT_TOLD` beside it)."""
        assert self._range_next is not None
        if self._range_half is not None:
            values = np.concatenate(([self._range_half], values)).astype(np.uint8)
            self._range_next -= 1
            self._range_half = None
        if len(values) % 2:
            if final:
                values = np.append(values, np.uint8(RANGE_NOT_TOLD))
            else:
                self._range_half = int(values[-1])
                values = values[:-1]
        if len(values):
            packed = (values[0::2] & 0x0F) | ((values[1::2] & 0x0F) << 4)
            self._writer.fsr(_SIG_RANGE, self._range_next, packed.astype(np.uint8))
        self._range_next += len(values) + (self._range_half is not None)

    def _fill_gap(self, start: int, stop: int) -> None:
        count = stop - start
        self.annotate(start, f"gap: {count} samples dropped by the instrument")
        for lo in range(start, stop, _BLOCK):
            n = min(_BLOCK, stop - lo)
            nan = np.full(n, np.nan, dtype=np.float32)
            for sig in (_SIG_CURRENT,) if self.set_voltage else (_SIG_CURRENT, _SIG_VOLTAGE):
                self._writer.fsr(sig, lo, nan)
            self._writer.fsr(_SIG_GPIO, lo, np.full(n, self._last_gpio, dtype=np.uint8))
        self.dropped_samples += count

    def _pad_end(self) -> None:
        """Filler from the trace's end to `jls_end` (see `close`), and the true end noted."""
        n = self._next_id
        if not n:
            return
        signals = [(self._first_id, jls_layout(self._jls_options, bits)) for bits in (32, 8)]
        if self._range_first is not None:
            signals.append((self._range_first, jls_layout(self._jls_options, 4)))
        end = jls_end(n, signals)
        if end == n:
            return
        count = end - n
        nan = np.full(count, np.nan, dtype=np.float32)
        for sig in (_SIG_CURRENT,) if self.set_voltage else (_SIG_CURRENT, _SIG_VOLTAGE):
            self._writer.fsr(sig, n, nan)
        self._writer.fsr(_SIG_GPIO, n, np.full(count, self._last_gpio, dtype=np.uint8))
        if self._range_next is not None:
            self._append_range(n, count, None, self.range_names)
        self._writer.user_data(_USER_DATA_META, {
            TRACE_END_KEY: n,
            "trace_end_note": f"the trace ends at sample {n}: the {count} samples after it are "
                              "filler, so that pyjls reads its last samples back",
        })

    def annotate(self, sample_id: int, text: str) -> None:
        """A text note on the current signal at `sample_id` (visible in the Joulescope UI)."""
        if self._writer is None:
            raise ValueError(f"trace writer for {self.path} is closed")
        self._writer.annotation(
            _SIG_CURRENT, int(sample_id), math.nan, self._jls.AnnotationType.TEXT, 0, text
        )

    def close(self) -> None:
        """Finish the file (writes its summaries and index). Safe to call twice.

        Where pyjls would not give back the last samples (`jls_end`), every signal goes on
        past the trace's end with filler (NaN current and voltage, the GPIO level held, range
        not told) to where it would, and the user data names the true end (`TRACE_END_KEY`),
        which `read_trace` and the viewer keep to."""
        if self._writer is not None:
            try:
                self._pad_end()
                if self._range_half is not None:  # the range's last value, half a byte
                    self._write_range(np.zeros(0, dtype=np.uint8), final=True)
            finally:
                writer, self._writer = self._writer, None
                writer.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def write_csv_trace(
    path: str | Path, current: np.ndarray, voltage: np.ndarray, gpio: np.ndarray
) -> None:
    """Write a CSV trace with header current_a,voltage_v,gpio (floats exact to float64)."""
    current = np.asarray(current, dtype=np.float64)
    voltage = np.asarray(voltage, dtype=np.float64)
    gpio = np.asarray(gpio)
    if not (len(current) == len(voltage) == len(gpio)):
        raise ValueError("current, voltage and gpio differ in length")
    table = np.column_stack((current, voltage, gpio.astype(np.float64)))
    # %.17g round-trips every float64 exactly.
    np.savetxt(
        path,
        table,
        delimiter=",",
        fmt=("%.17g", "%.17g", "%d"),
        header=",".join(CSV_COLUMNS),
        comments="",
    )
