"""What `rig show --json` prints for an ASC run folder (`asc_summary`), and how its figures read:
one place, so that `rig show`, `rig report`, the runner GUI and anything else that states a run's
numbers read them the same way (never recomputed apart).

An ASC run's figures come from its stored summary (or, for a run killed before it finished, from
its events). Per-window and per-run measurements are listed as the events recorded them. A QUBO
sweep's summary is `rig.qubo.sweep.sweep_summary`; `rig.report.runs.run_summary` summarises either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from protocols.dut.codec import CAP_SIMTIME
from rig.run import asc
from rig.run.events import IdleMeasured, InstrumentInfo, LatencyRun, WindowMeasured
from rig.run.store import RunRecord
from rig.traces.analysis.uncertainty import incomplete_note, with_uncertainty
from rig.units import pct, si

#: What a run folder marked refused (`rig.run.store.REFUSED`) means, for `rig show` and the runner.
REFUSED_TEXT = ("refused: the instrument did not take the bench's settings; the DUT was never "
                "powered and nothing was measured")

#: The headline figures of an ASC summary as people read them: (key, label, text of summary).
#: The report's results table and the runner GUI's show exactly these; a measured figure reads
#: with its expanded uncertainty where the summary holds its budget (`figure_text`).
ASC_FIGURES: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
    ("accuracy", "Accuracy (top-1)", lambda s: f"{pct(s['accuracy'])} ({s['correct']}/"
                                               f"{s['samples']})"),
    ("inferences_per_s", "Inferences per second (median of runs)",
     lambda s: figure_text(s, "inferences_per_s", "/s")),
    ("execution_time_mean_s", "Execution time per inference (mean)",
     lambda s: _execution_time_text(s)),
    ("idle_power_w", "Idle power", lambda s: figure_text(s, "idle_power_w", "W")),
    ("active_power_w", "Active power", lambda s: figure_text(s, "active_power_w", "W")),
    ("dynamic_power_w", "Dynamic power", lambda s: figure_text(s, "dynamic_power_w", "W")),
    ("energy_per_inference_j", "Energy per inference (median of windows)",
     lambda s: figure_text(s, "energy_per_inference_j", "J")),
    ("dynamic_energy_per_inference_j",
     "Dynamic energy per inference (dynamic power x mean execution time)",
     lambda s: figure_text(s, "dynamic_energy_per_inference_j", "J")),
    ("power", "Power", lambda s: str(s["power"])),
    ("timing", "Timing", lambda s: str(s["timing"])),
]


def figure_budget(summary: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The GUM budget the summary holds for figure `key` (None: a summary from before
    budgets, or a figure without one)."""
    found = summary.get("uncertainty")
    budget = found.get(key) if isinstance(found, dict) else None
    return budget if isinstance(budget, dict) else None


def figure_text(summary: dict[str, Any], key: str, unit: str) -> str:
    """Figure `key` of the summary with its expanded uncertainty (`with_uncertainty`)."""
    return with_uncertainty(summary[key], unit, figure_budget(summary, key))


def figures_note(summary: dict[str, Any]) -> str | None:
    """The line under a table of the summary's figures when some budget is incomplete
    (`incomplete_note`), else None."""
    return incomplete_note(figure_budget(summary, key) for key, _, _ in ASC_FIGURES
                           if key in summary)


def _execution_time_text(s: dict[str, Any]) -> str:
    """The mean execution time ± U, and where it came from; a summary from before budgets
    gives the standard error of the mean instead."""
    source = asc.execution_time_source_text(s)
    if figure_budget(s, "execution_time_mean_s") is not None:
        return f"{figure_text(s, 'execution_time_mean_s', 's')} ({source})"
    return (f"{si(s['execution_time_mean_s'], 's')}, standard error "
            f"{si(s.get('execution_time_stderr_s'), 's', 2)} ({source})")


def asc_figure_rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) for each headline figure the summary has."""
    return [(label, fmt(summary)) for key, label, fmt in ASC_FIGURES if key in summary]


def replicability_verdict(summary: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether the runs (and windows) were replicable, and one line saying why; None when the
    run measured no timed runs."""
    checks = [c for c in summary.get("checks", []) if c["name"].endswith("replicable")]
    if not checks:
        return None, "no timed runs: replicability not assessed"
    bad = [c for c in checks if not c["ok"]]
    if bad:
        return False, "not replicable: " + "; ".join(f"{c['name']}: {c['detail']}" for c in bad)
    return True, "replicable: " + "; ".join(c["detail"] for c in checks)


def asc_summary(record: RunRecord) -> dict[str, Any]:
    """An ASC run folder read back (also an incomplete one)."""
    manifest = record.manifest
    if record.finished is not None and record.finished.summary:
        summary = record.finished.summary
    else:  # killed before it finished: recompute from what it had measured
        summary = asc.summarize(record.events, bench=manifest.get("bench"),
                                scope=manifest.get("scope", "all"))
    simulated = run_simulated(record)
    summary = {**summary, "simulated": simulated}  # beside the figures, where they are read
    counts: dict[str, int] = {}
    for row in record.rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    data: dict[str, Any] = {
        "run": str(record.path),
        "status": record.status,
        "procedure": manifest.get("procedure"),
        "device": manifest.get("device"),
        "simulated": simulated,
        **({"emulated": manifest["emulated"]} if manifest.get("emulated") else {}),
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        #: the build that measured it (its git commit): runs of different code told apart
        "rig_version": (manifest.get("software") or {}).get("neurobench-rig"),
        "measured": counts,
        "summary": summary,
        "measurements": measurements(record),
    }
    images = run_images(manifest)
    if images:  # the firmware it ran, by SHA-256: runs on different images told apart
        data["images"] = images
    if record.finished is not None and record.finished.error:
        data["error"] = record.finished.error
    if record.manifest_error is not None:
        data["manifest_error"] = record.manifest_error
    return data


def run_images(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The firmware images a run ran, by role, each {"path", "sha256", "size_bytes"}: those its
    bench names (`images`: "qemu firmware", "xylo network spec") and the virtual bench's own
    ("virtual bench dut", "virtual bench io_manager"). {} for runs recorded before."""
    out = {str(k): v for k, v in (manifest.get("images") or {}).items() if isinstance(v, dict)}
    vb = (manifest.get("instruments") or {}).get("virtual_bench") or {}
    for role, image in (vb.get("images") or {}).items():
        if isinstance(image, dict):
            out[f"virtual bench {role}"] = image
    return out


def run_simulated(record: RunRecord) -> bool:
    """Whether an ASC run's numbers are simulated: its manifest says so, or an instrument said
    it is a simulator; a run stored before the rig took the DUT's word still has that word in
    its `caps` (`simtime`: XyloSim)."""
    if record.manifest.get("simulated"):
        return True
    for e in record.events:
        if isinstance(e, InstrumentInfo) and (
                e.info.get("simulated")
                or (e.role == "dut" and CAP_SIMTIME in (e.info.get("capabilities") or []))):
            return True
    return False


def measurements(record: RunRecord) -> dict[str, list[dict[str, Any]]]:
    """Every timed run, energy window and idle span, as its event recorded it."""
    keep = {
        "latency_runs": (LatencyRun, ("index", "iterations", "elapsed_s", "time_per_inference_s",
                                      "inferences_per_s", "timer", "dut_elapsed_s",
                                      "emon_elapsed_s")),
        "energy_windows": (WindowMeasured, ("index", "iterations", "start_sample", "end_sample",
                                            "start_s", "end_s", "duration_s", "energy_j",
                                            "mean_power_w", "energy_per_inference_j")),
        "idle_spans": (IdleMeasured, ("start_sample", "end_sample", "duration_s", "power_w")),
    }
    return {
        name: [{k: getattr(e, k) for k in keys} for e in record.events if isinstance(e, kind)]
        for name, (kind, keys) in keep.items()
    }
