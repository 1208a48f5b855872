"""What the energy-trace viewer shows of a run folder: its trace with the run's idle span and
energy windows on top, as `rig show --json` lists them. `open_view` opens a trace file or a run
folder; the trace itself is read by `rig.traces.view`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rig.errors import ConfigError
from rig.run.store import load_run
from rig.run.summary import measurements
from rig.traces.view import JlsSource, Mark, TraceView, open_trace


def open_view(path: str | Path, sample_rate: float | None = None) -> TraceView:
    """Open a .jls or .csv trace, or a run folder (its trace plus its windows and idle span)."""
    path = Path(path)
    if path.is_dir():
        return _open_run(path)
    return open_trace(path, sample_rate)


def _open_run(path: Path) -> TraceView:
    record = load_run(path)  # raises "not a run folder" for anything else
    traces = [t for t in record.manifest.get("traces", []) if (path / t["path"]).is_file()]
    trace = path / traces[0]["path"] if traces else path / "traces" / "emon.jls"
    if not trace.is_file():
        raise ConfigError(f"{path} is a run folder without a trace",
                          hint="only runs with an energy monitor record one (traces/emon.jls); "
                               "`rig show` summarises this run")
    source = JlsSource(trace)
    try:
        show = {"measurements": measurements(record)}  # the windows as `rig show` lists them
        view = TraceView(source, f"{path.name} (traces/{trace.name})",
                         notes=list(source.missing), run=path)
        view.marks = run_marks(show, source.sample_rate, source.first_sample_id)
        edges = sorted({m.start_s for m in view.marks} | {m.end_s for m in view.marks})
        view.edges_s = np.asarray(edges, dtype=np.float64)
    except BaseException:
        source.close()
        raise
    return view


def run_marks(show: dict[str, Any], sample_rate: float, first_sample_id: int = 0) -> list[Mark]:
    """The idle span and energy windows of a run (`rig show --json` data) as marks."""
    meas = show.get("measurements") or {}

    def t(sample: int) -> float:
        return (sample - first_sample_id) / sample_rate

    marks = [
        Mark("idle", k, t(i["start_sample"]), t(i["end_sample"]), i["duration_s"],
             i["power_w"], i["power_w"] * i["duration_s"])
        for k, i in enumerate(meas.get("idle_spans", [])) if i["end_sample"] > i["start_sample"]
    ]
    marks += [
        Mark("window", w["index"], t(w["start_sample"]), t(w["end_sample"]), w["duration_s"],
             w["mean_power_w"], w["energy_j"], w["energy_per_inference_j"])
        for w in meas.get("energy_windows", []) if w["end_sample"] > w["start_sample"]
    ]
    return marks
