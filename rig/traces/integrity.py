"""Whether a JLS trace can be read whole: what `rig report` checks before it states a run's
figures as re-derivable (`rig analyze RUN` reads the same file whole, with `read_trace`).

A file cut short is refused by `check_jls_length` before pyjls opens it (pyjls would "repair" it,
in place, into the samples it still holds); one pyjls refuses on open, or whose chunks fail their
CRC when read, is refused with pyjls's own words (`jls_error`). Memory stays bounded: samples and
summaries are read in blocks and dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rig.traces.files import captured_c_output, check_jls_length, jls_error, open_jls_reader

#: Samples (or summary entries) read per pyjls call.
_BLOCK = 1 << 20


def check_jls_intact(path: Path) -> None:
    """Raise AnalysisError, as `read_trace` would, when the JLS file at `path` cannot be read
    whole: cut short, refused on open, or a chunk failing its CRC. Every sample of every
    signal is read, every summary level a figure or the viewer may read instead of samples,
    the user data and the annotations; none of it is kept."""
    import pyjls  # heavy C extension: only when a JLS file is actually read

    check_jls_length(path)
    reader, _ = open_jls_reader(path)
    reading: list[str] = []
    try:
        with captured_c_output() as reading:
            reader.user_data(lambda *_: False)
            for sig in reader.signals.values():
                if sig.signal_type == pyjls.SignalType.FSR and sig.signal_id != 0:
                    _read_signal(reader, sig)
    except (RuntimeError, OSError, ValueError) as exc:  # pyjls on a damaged chunk
        raise jls_error(path, exc, reading) from None
    finally:
        reader.close()


def _read_signal(reader: Any, sig: Any) -> None:
    """Every sample, every summary level and the annotations of one FSR signal."""
    reader.annotations(sig.signal_id, 0, lambda *_: False)
    n = int(sig.length)
    for lo in range(0, n, _BLOCK):
        reader.fsr(sig.signal_id, lo, min(_BLOCK, n - lo))
    step = int(sig.sample_decimate_factor or 0)
    per = max(2, int(sig.summary_decimate_factor or 0))
    while step and n // step >= 1:
        entries = n // step
        for lo in range(0, entries, _BLOCK):
            reader.fsr_statistics(sig.signal_id, lo * step, step, min(_BLOCK, entries - lo))
        step *= per
