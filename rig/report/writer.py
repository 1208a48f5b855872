"""`write_report`: run folders in, report.md (figures beside it), a self-contained report.html,
report.pdf and results.json out. The run folders are only read.

The PDF is WeasyPrint's rendering of the same HTML (print stylesheet: A4, page numbers, and a
page header that carries a section's SIMULATED label on every page of that section).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rig import __version__
from rig.errors import ConfigError
from rig.report.content import build_document
from rig.report.document import Document, to_html, to_markdown
from rig.report.runs import (
    ASC,
    ReportRun,
    System,
    check_complete,
    check_traces,
    group_systems,
    read_run,
)
from rig.report.system import SystemInfo, load_system
from rig.run.finite import finite_json

FORMATS = ("md", "html", "pdf")
CSS = Path(__file__).with_name("style.css")


@dataclass
class ReportOutcome:
    """What was written, and what the submitter still has to fill in."""

    out_dir: Path
    files: dict[str, Path]
    systems: list[System]
    missing: list[str] = field(default_factory=list)


def write_report(
    paths: list[Path],
    out_dir: Path,
    *,
    system_file: Path | None = None,
    formats: tuple[str, ...] = FORMATS,
    allow_incomplete: bool = False,
    allow_damaged_traces: bool = False,
    strict: bool = False,
    progress: Callable[[str], None] | None = None,
    figures: bool = True,
) -> ReportOutcome:
    """Check everything first, then write the report files into `out_dir`. Every trace of the
    runs is read whole first: a damaged one is refused by name (`check_traces`) unless
    `allow_damaged_traces`, which reports its run marked. `figures` False draws none (their
    pages lack them; results.json is the same): `rig verify` compares only that."""
    say = progress or (lambda _text: None)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ConfigError(f"unknown report format {bad[0] if bad else '(none)'!r}",
                          hint=f"--format takes a comma-separated list of {', '.join(FORMATS)}")
    if not paths:
        raise ConfigError("no run folders given", hint="rig report RUN... --out DIR")
    say(f"reading {len(paths)} run folder(s)")
    runs = [read_run(p) for p in paths]
    seen: set[Path] = set()
    for run in runs:
        if run.path in seen:
            raise ConfigError(f"{run.path} is given twice", hint="name each run folder once")
        seen.add(run.path)
    check_complete(runs, allow_incomplete)
    say("reading the runs' traces")
    check_traces(runs, allow_damaged_traces)
    systems = group_systems(runs)
    ids = [s.id for s in systems]
    info = load_system(system_file, ids) if system_file is not None else SystemInfo()
    missing = info.missing(ids)
    if strict and missing:
        raise ConfigError(
            f"--strict: {len(missing)} required field(s) of system.toml are empty: "
            + ", ".join(missing),
            hint="fill them in (rig report --template RUN... prints the file to start from)",
        )
    out_dir = out_dir.resolve()
    for run in runs:
        if out_dir == run.path or run.path in out_dir.parents:
            raise ConfigError(f"--out {out_dir} is inside the run folder {run.path}",
                              hint="write the report elsewhere: run folders are never modified")
    engine = _pdf_engine() if "pdf" in formats else None

    figures_dir = out_dir / "figures"
    try:
        figures_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create {figures_dir}: {exc}",
                          hint="choose an --out folder you can write to") from exc
    if figures:
        say("drawing figures")
    doc = build_document(systems, info, figures_dir, make_figures=_figures if figures else None,
                         make_workflow=_workflow if figures else None)
    # Before any file: a NaN or an infinity is refused by name (JSON has neither).
    results_json = finite_json(results(doc, systems, info, missing), "results.json", indent=2,
                               default=str) + "\n"
    files: dict[str, Path] = {}
    css = CSS.read_text(encoding="utf-8")
    footer = (f"Made by neurobench-rig {__version__} from the run folders listed in the "
              "appendix; numbers as `rig show RUN --json` gives them.")
    if "md" in formats:
        files["md"] = _write_text(out_dir / "report.md", to_markdown(doc, out_dir))
    page = to_html(doc, css=css, embed=True, footer=footer)
    if "html" in formats:
        files["html"] = _write_text(out_dir / "report.html", page)
    if engine is not None:
        say("rendering the PDF")
        files["pdf"] = _write_pdf(engine, page, out_dir / "report.pdf")
    files["json"] = _write_text(out_dir / "results.json", results_json)
    return ReportOutcome(out_dir, files, systems, missing)


def results(doc: Document, systems: list[System], info: SystemInfo,
            missing: list[str]) -> dict[str, Any]:
    """results.json: every run's `rig show --json` data, the systems, and what is unfilled."""
    runs: dict[Path, ReportRun] = {}
    for s in systems:
        for r in s.runs:
            runs.setdefault(r.path, r)
    return {
        "report": {
            "title": doc.title,
            "generated_at": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
            "rig_version": __version__,
            "system_file": str(info.path) if info.path else None,
            "submitter_fields_missing": missing,
        },
        "systems": [
            {"id": s.id, "task": s.task, "name": info.system_value(s.id, "name") or s.name,
             "simulated": s.simulation, "runs": [str(r.path) for r in s.runs],
             **({"sut": s.sut} if s.sut else {}),
             **({"emulated": s.emulation} if s.emulation else {})}
            for s in systems
        ],
        "runs": [
            {"path": str(path), "task": r.task, "status": r.status,
             "simulated": r.simulation if r.task == ASC else None,
             **({"emulated": r.emulation} if r.emulation else {}),
             **({"trace_damaged": r.trace_damaged} if r.trace_damaged else {}),
             "settings": _settings(r), "show": r.show}
            for path, r in runs.items()
        ],
    }


def _settings(run: ReportRun) -> dict[str, Any]:
    """The configured values the report's descriptions quote (from the manifest)."""
    bench = run.manifest.get("bench", {})
    if run.task != ASC:
        return {"sweep": run.show.get("sweep")}
    return {"asc": bench.get("asc"), "emon": bench.get("emon"), "dut": bench.get("dut"),
            "dataset": bench.get("dataset")}


# -- figures -------------------------------------------------------------------------------------
def _figures(system: System, figures_dir: Path) -> list[Any]:
    from rig.report import figures

    prefix = system.id
    if system.task == ASC:
        tolerance = float(system.runs[0].manifest.get("bench", {}).get("asc", {})
                          .get("replicability_tolerance", 0.05))
        inputs = [figures.AscRunInput(r.name, r.show, r.trace) for r in system.runs]
        return figures.asc_figures(inputs, figures_dir, prefix, label=system.label,
                                   tolerance=tolerance)
    sweeps = [figures.SweepInput(r.show["sweep"]["name"], r.show) for r in system.runs]
    return figures.qubo_figures(system.sut or "", sweeps, figures_dir, prefix,
                                label=system.label)


def _workflow(system: System, stages: list[Any], figures_dir: Path) -> Path:
    from rig.report.workflow import draw_workflow

    run = system.runs[0]
    return draw_workflow(stages, figures_dir / f"{system.id}-workflow.png",
                         title=f"Workflow: {system.name}", label=system.label,
                         measurement_note=_measurement_note(run))


def _measurement_note(run: ReportRun) -> str:
    if run.task != ASC:
        return "power: the SUT's power instrument, where one exists; times: the SUT's clock"
    emon = run.manifest.get("bench", {}).get("emon", {})
    dut = run.manifest.get("bench", {}).get("dut", {})
    if emon.get("driver") not in (None, "none"):
        return (f"power: {emon['driver']} at {emon.get('sample_rate_hz', '?'):g} Hz on the DUT "
                f"supply ({emon.get('supply_voltage_v', '?')} V); times: "
                f"{run.show['summary'].get('latency_timer', '?')} timer")
    if dut.get("kind") == "xylo" and dut.get("hdk"):
        return "power: the Xylo HDK's rails; times: Xylo's time base"
    return f"power: not measured; times: {run.show['summary'].get('latency_timer', '?')} timer"


# -- output ----------------------------------------------------------------------------------------
def _write_text(path: Path, text: str) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)  # a report is either the old one or the new one, never half
    return path


def _pdf_engine() -> Any:
    try:
        import weasyprint
    except (ImportError, OSError) as exc:  # OSError: pango missing from the system
        raise ConfigError(
            f"the PDF engine (WeasyPrint) cannot be loaded: {exc}",
            hint="install the report extra (pip install -e '.[report]'; WeasyPrint needs the "
                 "pango library), or leave pdf out: --format md,html",
        ) from None
    return weasyprint


def _write_pdf(engine: Any, page: str, path: Path) -> Path:
    tmp = path.with_name(path.name + ".tmp")
    engine.HTML(string=page, base_url=str(path.parent)).write_pdf(str(tmp))
    os.replace(tmp, path)
    return path
