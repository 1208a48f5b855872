"""Disk space for a trace: project a JLS file's size and check it against the target disk.

A recording that fills the disk dies mid-run (and takes the rest of the run folder with it),
so callers check before any instrument is opened: refuse when the trace cannot fit with a
reserve left over, warn when it would take more than half of what is free. While it runs, a
recording stops its trace once less than a smaller reserve is left (`space_left`), so that the
run folder can still be finished when something else fills the disk.
"""

from __future__ import annotations

import errno
import math
import shutil
from pathlib import Path

from rig.errors import ConfigError

#: Raw bytes per sample as `TraceWriter` stores them: f32 current + u8 gpi0, and f32 voltage
#: where the monitor measures it (a set supply is stored once, in the user data).
RAW_BYTES_PER_SAMPLE = 9
RAW_BYTES_PER_SAMPLE_SET_VOLTAGE = 5
#: Bytes per sample on disk with the JLS summaries (one per 256 samples, then x20 per level)
#: and index, measured by `benchmarks/trace_size.py` (the size's slope between 1 M and 8 M
#: samples at 1 MS/s in 10 k-sample chunks; JLS does not compress): 9.216 with voltage, 5.142
#: without. Rounded up.
BYTES_PER_SAMPLE = 9.22
BYTES_PER_SAMPLE_SET_VOLTAGE = 5.15
#: What the u4 current-range signal adds where the monitor tells each sample's range (a PPK2,
#: an auto-ranging Joulescope): half a raw byte and its summaries, 0.567 in the same benchmark
#: (5.709 - 5.142 without voltage, 9.783 - 9.216 with). Rounded up.
RANGE_BYTES_PER_SAMPLE = 0.57
#: A trace's fixed part (file header, source and signal definitions, user data, annotations,
#: index, end): 3.3-4.4 KiB in the benchmark, 4.2-5.1 KB (up to ~5.2 KiB with a Joulescope's
#: annotations) in short virtual-bench runs. Rounded up.
FIXED_BYTES = 8 << 10
#: Free space kept in reserve for the rest of the run folder, the report and the system...
RESERVE_BYTES = 1 << 30
#: ...but never more than this fraction of the whole disk (a small SD card or tmpfs).
RESERVE_FRACTION = 0.05
#: Free space a recording keeps while it runs, for finishing the run folder (the trace's last
#: blocks and index, events.jsonl, the results, the manifest): below it the trace stops...
FINISH_RESERVE_BYTES = 64 << 20
#: ...but never more than this fraction of the whole disk (under the start reserve above)...
FINISH_RESERVE_FRACTION = 0.0125
#: ...nor less than this (closing a JLS file writes 50-75 KiB; the rest of the folder less).
FINISH_RESERVE_MIN = 1 << 20
#: Warn when the trace would take more than this fraction of the free space.
WARN_FRACTION = 0.5
#: What to do when the trace does not fit, unless the caller names its own options.
DEFAULT_HINT = "lower the sample rate, record for a shorter time, or write to another disk"


def bytes_per_sample(voltage_measured: bool = True, range_recorded: bool = False) -> float:
    """Bytes per sample on disk of a trace with (or without) a voltage signal, and with (or
    without) a current-range signal."""
    base = BYTES_PER_SAMPLE if voltage_measured else BYTES_PER_SAMPLE_SET_VOLTAGE
    return base + (RANGE_BYTES_PER_SAMPLE if range_recorded else 0.0)


def projected_trace_bytes(duration_s: float, sample_rate_hz: float, *,
                          voltage_measured: bool = True, range_recorded: bool = False) -> int:
    """Size [bytes] of a JLS trace of `duration_s` seconds at `sample_rate_hz`, with a voltage
    signal when the monitor measures the voltage (`EnergyMonitor.measures_voltage_with`) and a
    range signal when it tells each sample's range (`EnergyMonitor.records_range_with`)."""
    if not (math.isfinite(duration_s) and duration_s >= 0):
        raise ValueError(f"duration must be a finite number of seconds >= 0, got {duration_s}")
    if not (math.isfinite(sample_rate_hz) and sample_rate_hz > 0):
        raise ValueError(f"sample rate must be a positive number of Hz, got {sample_rate_hz}")
    samples = math.ceil(duration_s * sample_rate_hz)
    return math.ceil(FIXED_BYTES + samples * bytes_per_sample(voltage_measured, range_recorded))


def check_trace_space(
    folder: str | Path,
    duration_s: float,
    sample_rate_hz: float,
    *,
    hint: str = DEFAULT_HINT,
    what: str = "",
    voltage_measured: bool = True,
    range_recorded: bool = False,
) -> str | None:
    """Refuse (ConfigError) a trace that will not fit in `folder`'s disk with the reserve kept;
    return a warning text when it would take more than half of the free space, else None.

    `folder` need not exist yet: the nearest existing parent's disk is the one it will use.
    `what` names the recording in the messages (default: 'a trace of D s at R Hz').
    """
    projected = projected_trace_bytes(duration_s, sample_rate_hz,
                                      voltage_measured=voltage_measured,
                                      range_recorded=range_recorded)
    where = _existing(Path(folder))
    usage = shutil.disk_usage(where)
    reserve = int(min(RESERVE_BYTES, RESERVE_FRACTION * usage.total))
    what = what or f"a trace of {duration_s:.6g} s at {sample_rate_hz:g} Hz"
    if projected > usage.free - reserve:
        raise ConfigError(
            f"not enough disk space: {what} needs about {binary_size(projected)} but {where} has "
            f"{binary_size(usage.free)} free ({binary_size(reserve)} kept in reserve)",
            hint=hint,
        )
    if projected > WARN_FRACTION * usage.free:
        return (
            f"{what} will take about {binary_size(projected)} of the "
            f"{binary_size(usage.free)} free in {where}"
        )
    return None


def space_left(folder: str | Path) -> tuple[int, int]:
    """Free bytes on `folder`'s disk, and the reserve a running recording must leave there."""
    usage = shutil.disk_usage(folder)
    fraction = max(FINISH_RESERVE_MIN, FINISH_RESERVE_FRACTION * usage.total)
    return usage.free, int(min(FINISH_RESERVE_BYTES, fraction))


def write_failure(exc: OSError) -> str:
    """Why a write failed, in a person's words: 'the disk is full', 'the file size limit ...'."""
    if exc.errno == errno.ENOSPC:
        return "the disk is full"
    if exc.errno == errno.EDQUOT:
        return "the disk quota is used up"
    if exc.errno == errno.EFBIG:
        return "the file size limit (ulimit -f) is reached"
    return exc.strerror or str(exc)


def _existing(path: Path) -> Path:
    """`path` or its nearest existing parent (a runs folder may be created later)."""
    path = path.expanduser().absolute()
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return path  # unreachable: the root always exists


def binary_size(n: float) -> str:
    """Bytes in binary units with one decimal: '1.5 GiB' ('999.9 MiB' before '1.0 GiB')."""
    if n < 1000:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if round(n, 1) < 1000:
            return f"{n:.1f} {unit}"
    return f"{n / 1024:.1f} TiB"
