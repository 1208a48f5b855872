"""What the report says: every section report.md asks for, filled from the run folders.

Numbers are only formatted here, never computed: each comes from a run's `rig show --json`
data (`ReportRun.show`). Descriptions come from the run's manifest (bench, instruments, host,
software) and notes. What only the submitter can say comes from system.toml; an unfilled
required field becomes a visible "to be completed by the submitter" box.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rig import __version__
from rig.qubo.sweep import CONTENDED_CPU_SHARE
from rig.report.document import Box, Bullets, Document, Figure, Heading, Para, Table
from rig.report.runs import ASC, QUBO, ReportRun, System
from rig.report.system import SUBMISSION_FIELDS, SYSTEM_FIELDS, SystemInfo
from rig.run.asc import HDK_TIMING, execution_time_source_text
from rig.run.summary import ASC_FIGURES, figure_budget
from rig.traces.analysis.uncertainty import (
    COVERAGE_TEXT,
    SHOWN_NOTE,
    incomplete_terms,
    unknown_terms,
    with_uncertainty,
)
from rig.units import pct, si

#: The NeuroBench time-to-solution gap thresholds (QUBO.md).
TTS_THRESHOLDS = ("0.1", "0.05", "0.01")
#: The section headings report.md requires, in order (tests look for each).
REQUIRED_SECTIONS = ("System architecture", "Algorithm", "Workflow", "Latency measurement",
                     "Power measurement", "Results")

def gap_text(value: float | None) -> str:
    """A BKS-gap as a signed percentage (negative: better than the target)."""
    return "—" if value is None else f"{value * 100:+.2f}%"


# -- the whole document ------------------------------------------------------------------------
FigureMaker = Callable[[System, Path], list[Any]]
WorkflowMaker = Callable[[System, list[Any], Path], Path]


def build_document(
    systems: list[System],
    info: SystemInfo,
    figures_dir: Path,
    *,
    make_figures: FigureMaker | None = None,
    make_workflow: WorkflowMaker | None = None,
) -> Document:
    """The report's blocks: title, summary, one section per system, appendix."""
    title = info.submission_value("title") or "NeuroBench system-track report"
    any_sim = [s for s in systems if s.simulation]
    any_emu = [s for s in systems if s.emulation and not s.simulation]
    doc = Document(title=title, subtitle=(
        f"Made by neurobench-rig {__version__} on {dt.date.today().isoformat()} from "
        f"{len(_unique([r for s in systems for r in s.runs]))} run folder(s)"))

    doc.add(Heading(1, "Submission", "submission",
                    running="Contains SIMULATED results (marked)" if any_sim
                    else "Contains EMULATED results (marked)" if any_emu else ""))
    doc.add(*_submission(info))
    if any_sim:
        names = "; ".join(f"{s.name} ({s.simulation})" for s in any_sim)
        doc.add(Box("simulated", "Some results in this report are simulated",
                    f"The numbers of {names} come from a simulation, not from hardware. They are "
                    "marked SIMULATED in every table, figure and page header where they appear."))
    if any_emu:
        names = "; ".join(f"{s.name} ({s.emulation})" for s in any_emu)
        doc.add(Box("note", "Some results in this report are emulated",
                    f"The numbers of {names} were measured on an emulator, not on hardware: the "
                    "firmware ran unchanged on an emulated board whose time counts guest "
                    "instructions. They are marked EMULATED in every table, figure and page "
                    "header where they appear."))
    incomplete = [r for s in systems for r in s.runs if not r.complete]
    if incomplete:
        doc.add(Box("incomplete", "Some runs did not finish cleanly",
                    "Reported with --allow-incomplete: " + "; ".join(
                        f"`{r.name}` ({r.status})" for r in _unique(incomplete))
                    + ". Their numbers are what they had measured; each is marked where shown."))
    damaged = [r for r in _unique([r for s in systems for r in s.runs]) if r.trace_damaged]
    if damaged:
        doc.add(Box("incomplete", "Some figures cannot be re-derived from their traces",
                    "Reported with --allow-damaged-traces: " + "; ".join(
                        f"`{r.name}` ({r.trace_damaged})" for r in damaged)
                    + ". Their figures are what the run stated when it ended; `rig analyze` "
                    "cannot check them against the samples. Each is marked where shown."))
    doc.add(*_overview(systems))
    doc.add(*_differences(systems))

    for number, system in enumerate(systems, start=1):
        doc.add(*_system_section(number, system, info, figures_dir, make_figures,
                                 make_workflow))
    doc.add(*_appendix(systems))
    return doc


def _unique(runs: list[ReportRun]) -> list[ReportRun]:
    seen, out = set(), []
    for r in runs:
        if r.path not in seen:
            seen.add(r.path)
            out.append(r)
    return out


def _submission(info: SystemInfo) -> list[Any]:
    rows = []
    for key, label in (("submitter", "Submitter"), ("contact", "Contact")):
        value = info.submission_value(key)
        rows.append((label, value or "—"))
    blocks: list[Any] = [Table(("", ""), tuple(rows), align="ll")]
    for key in ("title", "submitter"):
        if not info.submission_value(key):
            blocks.append(_todo(f"submission.{key}",
                                next(f.asks for f in SUBMISSION_FIELDS if f.key == key)))
    if info.submission_value("introduction"):
        blocks.append(Para(info.submission_value("introduction")))
    return blocks


def _todo(field_name: str, asks: str) -> Box:
    table, _, key = field_name.rpartition(".")
    return Box("todo", asks[0].upper() + asks[1:],
               f"Fill in `{key}` under `[{table}]` in system.toml "
               "(`rig report --template RUN...` prints one).")


def _overview(systems: list[System]) -> list[Any]:
    rows = []
    for n, s in enumerate(systems, start=1):
        for run in s.runs:
            rows.append((f"{n}. {s.name}", s.task, f"`{run.name}`", _headline(s, run),
                         _status_mark(run, s)))
    return [Heading(2, "Results at a glance", "overview"),
            Table(("System", "Task", "Run", "Headline results", "Status"), tuple(rows),
                  caption="Every run in this report", align="lllll")]


def _status_mark(run: ReportRun, system: System) -> str:
    marks = [run.status]
    if run.trace_damaged:
        marks.append("figures not re-derivable (trace damaged)")
    if run.simulation:
        marks.append(f"SIMULATED ({run.simulation})")
    elif run.emulation:
        marks.append(f"EMULATED ({run.emulation.removeprefix('emulated: ')})")
    return ", ".join(marks)


def _headline(system: System, run: ReportRun) -> str:
    if system.task == ASC:
        s = run.show["summary"]
        parts = []
        if "accuracy" in s:
            parts.append(f"accuracy {pct(s['accuracy'])}")
        if "inferences_per_s" in s:
            parts.append(f"{s['inferences_per_s']:#.4g} inferences/s")
        if "energy_per_inference_j" in s:
            parts.append(f"{si(s['energy_per_inference_j'], 'J')}/inference")
        elif "power" in s:
            parts.append(f"power {s['power']}")
        return "; ".join(parts) or "nothing measured"
    longest = max(run.show["sweep"]["timeouts"])
    rows = [r for r in _sut_rows(run, system.sut) if r["timeout_s"] == longest]
    gaps = [r["gap_mean"] for r in rows if r["gap_mean"] is not None]
    worst = f"worst {gap_text(max(gaps))}" if gaps else "no gap measured"
    return (f"BKS-gap at the longest timeout ({si(longest, 's', 3)}), mean over seeds: "
            f"{worst} over {len(gaps)} workload(s); {run.show['points_done']}/"
            f"{run.show['points_total']} sweep points")


def _sut_rows(run: ReportRun, sut: str | None) -> list[dict[str, Any]]:
    return [r for r in run.show.get("summary", []) if r.get("sut") == sut]


def _differences(systems: list[System]) -> list[Any]:
    """Which differences between the ASC systems are distinguishable: each pair's first runs
    compared figure by figure as `rig compare` does (`rig.run.compare`), Δ = later − earlier
    system. Nothing with fewer than two ASC systems with budgets."""
    from rig.run.compare import delta_and_u, run_figures
    from rig.traces.analysis.difference import compare_budgets

    asc = [(n, s, run_figures(s.runs[0].name, s.runs[0].manifest, s.runs[0].show))
           for n, s in enumerate(systems, start=1) if s.task == ASC and s.runs]
    asc = [(n, s, f) for n, s, f in asc if f.budgets]
    rows, incomplete, marks = [], False, set()
    for i, (na, sa, fa) in enumerate(asc):
        for nb, sb, fb in asc[i + 1:]:
            marks |= {m for m in (sa.label, sb.label) if m}
            for key in (k for k in fa.budgets if k in fb.budgets):
                c = compare_budgets(key, fa.budgets[key], fb.budgets[key], fa.instruments,
                                    fb.instruments)
                incomplete = incomplete or not c.delta.complete
                delta, u = delta_and_u(c)
                number = tuple(x.replace(" ", "\u00a0")  # a number and its unit on one line
                               for x in (si(c.a, c.unit), si(c.b, c.unit), delta, u))
                rows.append((f"{nb} − {na}", c.figure, *number, c.verdict_text))
    if not rows:
        return []
    said = ("Whether each difference between the systems is distinguishable, system B − system "
            "A (numbered as above), each system's first run: Δ and its expanded uncertainty "
            "U(Δ) from both runs' GUM budgets (terms of one instrument serial and range "
            "correlated between the runs, everything else independent). A figure **differs** "
            "only when every term of both budgets is known and |Δ| > U.")
    if incomplete:
        said += (" Where a term is not published, U is 2·u_c of the known terms, the least it "
                 "can be: a difference within it is not distinguishable, one beyond it "
                 "**undecided**, never said to differ.")
    mark = f" — {'; '.join(sorted(marks))}" if marks else ""
    return [Heading(2, "Differences between the systems", "differences"), Para(said),
            Table(("Systems", "Figure", "A", "B", "Δ", "U(Δ)", "Verdict"), tuple(rows),
                  caption=f"Differences between the systems{mark}", align="llrrrrl")]


# -- one system ----------------------------------------------------------------------------------
def _system_section(number: int, system: System, info: SystemInfo, figures_dir: Path,
                    make_figures: FigureMaker | None,
                    make_workflow: WorkflowMaker | None) -> list[Any]:
    name = info.system_value(system.id, "name") or system.name
    label = system.label
    title = f"{number}. {name}" + (f" — {label}" if label else "")
    out: list[Any] = [Heading(1, title, f"system-{system.id}", running=label or "")]
    out.append(Para(f"Task: **{system.task}**. System id in system.toml: `{system.id}`. "
                    f"Runs: {', '.join(f'`{r.name}`' for r in system.runs)}."))
    if system.simulation:
        out.append(Box("simulated", "Every number in this section",
                       _simulation_text(system)))
    elif system.emulation:
        out.append(Box("note", "Every number in this section is EMULATED",
                       f"{system.emulation}: the benchmark firmware ran on QEMU, whose guest "
                       "time counts instructions (2^shift ns each), not a chip's cycles. Times "
                       "and rates are the firmware's own timer on that clock: deterministic, "
                       "but not a hardware figure; there is no power measurement."))
    for run in system.runs:
        if not run.complete:
            out.append(Box("incomplete", f"Run `{run.name}`: {run.status}",
                           _incomplete_text(run)))
        if run.trace_damaged:
            out.append(Box("incomplete", f"Run `{run.name}`: figures not re-derivable",
                           f"Its trace {run.trace_damaged}. The run's figures below are what "
                           "it stated when it ended; they cannot be re-derived from the "
                           "samples, and no trace figure is drawn from it."))
    figures = make_figures(system, figures_dir) if make_figures else []
    stages = workflow_stages(system)
    sub = _Numbering(number)
    out += [Heading(2, sub("System architecture"), f"s{number}-architecture")]
    out += _architecture(system, info)
    out += [Heading(2, sub("Algorithm"), f"s{number}-algorithm")]
    out += _algorithm(system, info)
    out += [Heading(2, sub("Workflow"), f"s{number}-workflow")]
    out += _workflow(system, stages, figures_dir, make_workflow)
    out += [Heading(2, sub("Latency measurement"), f"s{number}-latency")]
    out += _latency(system)
    out += [Heading(2, sub("Power measurement"), f"s{number}-power")]
    out += _power(system, info)
    out += [Heading(2, sub("Results"), f"s{number}-results")]
    out += _asc_results(system) if system.task == ASC else _qubo_results(system)
    for fig in figures:
        out.append(Figure(fig.path, fig.caption, label=label or ""))
    notes = info.system_value(system.id, "notes")
    if notes:
        out += [Heading(2, sub("Notes from the submitter"), f"s{number}-notes"), Para(notes)]
    return out


class _Numbering:
    def __init__(self, number: int) -> None:
        self.number, self.count = number, 0

    def __call__(self, text: str) -> str:
        self.count += 1
        return f"{self.number}.{self.count} {text}"


def _simulation_text(system: System) -> str:
    sim = system.simulation or ""
    parts = []
    if "virtual bench" in sim:
        parts.append("The virtual bench simulates the DUT's timing and power and the energy "
                     "monitor on one simulated clock; the rig drives them through the same code "
                     "paths as hardware, but no chip was measured.")
    if "XyloSim" in sim:
        parts.append("XyloSim simulates Xylo's SNN core: outputs are bit-exact, but its "
                     "inference time is the input's length in Xylo time steps (time steps x dt), "
                     "not a time anyone measured, and there are no power rails.")
    if "stand-in Loihi profiler" in sim:
        parts.append("Lava's CPU backend runs the Loihi 2 solver's processes on the host CPU, "
                     "and the shim's stand-in for the Loihi power profiler reports a fixed, "
                     "made-up power: gaps are the algorithm's, times are the CPU simulation's, "
                     "and power and energy (source loihi-profiler (SIMULATED)) test the rig's "
                     "path from the profiler to this report, not a chip.")
    elif "Lava CPU" in sim:
        parts.append("Lava's CPU backend runs the Loihi 2 solver's processes on the host CPU: "
                     "gaps are the algorithm's, times are the CPU simulation's, and there is "
                     "no Loihi power profile.")
    if "stand-in" in sim:
        parts.append("Stand-in points are closed-form numbers used to test the rig, not "
                     "measurements of any solver.")
    return " ".join(parts) or "These numbers were not measured on hardware."


def _checks(run: ReportRun) -> list[dict[str, Any]]:
    summary = run.show.get("summary")
    return summary.get("checks", []) if isinstance(summary, dict) else []


def _incomplete_text(run: ReportRun) -> str:
    text = {
        "interrupted": "The run was stopped before it finished.",
        "refused": "The instrument refused the bench's settings; nothing was measured.",
        "incomplete": "The run ended without finishing (killed or crashed).",
        "failed-checks": "The run finished but failed checks: " + ", ".join(
            c["name"] for c in _checks(run) if c.get("ok") is False) + ".",
        "failed": f"The run failed: {run.show.get('error', '')}.",
        "running": "The sweep was still being measured when this report was made.",
    }.get(run.status, f"Status {run.status}.")
    return text + " Its numbers below are what it had measured; they are not a valid result."


# -- architecture --------------------------------------------------------------------------------
def _architecture(system: System, info: SystemInfo) -> list[Any]:
    run = system.runs[0]
    m = run.manifest
    rows: list[tuple[str, str]] = []
    if system.task == ASC:
        dut = m.get("instruments", {}).get("dut", {})
        bench = m.get("bench", {})
        rows += [
            ("Device under test", f"{dut.get('name', m.get('device'))} "
                                  f"({dut.get('vendor', 'vendor not reported')})"),
            ("Firmware", f"{dut.get('profile', 'not reported')}; model id "
                         f"`{dut.get('model', '?')}`"),
            ("Timestamp mode", str(dut.get("timestamp_mode", bench.get("dut", {}).get(
                "timestamp_mode", "?")))),
            ("Firmware extensions", ", ".join(dut.get("capabilities", [])) or
             "none (plain MLPerf Tiny commands)"),
            ("DUT link", _dut_link(m)),
            ("Energy monitor", _instrument_identity(m)),
            ("Bench", f"{bench.get('name', '?')}; supply limit "
                      f"{bench.get('voltage_limit_v', '?')} V"),
        ]
        vb = m.get("instruments", {}).get("virtual_bench")
        if vb:
            rows.append(("Virtual bench", f"DUT program {vb.get('dut')}"))
    else:
        sweep = run.show["sweep"]
        rows += [
            ("System under test", f"`{system.sut}`: {system.name}"),
            ("Where it runs", _sut_where(system.sut)),
            ("SUT options", _options(sweep.get("sut_options", {}).get(system.sut, {}))),
        ]
    host = m.get("host", {})
    sw = m.get("software", {})
    rows += [
        ("Host", f"{host.get('hostname', '?')}: {host.get('platform', '?')} "
                 f"({host.get('machine', '?')})"),
        ("Software", ", ".join(f"{k} {v}" for k, v in sw.items()) or "not recorded"),
    ]
    out: list[Any] = [Table(("", ""), tuple(rows), caption="What the rig recorded", align="ll")]
    extra = info.system_value(system.id, "architecture")
    if extra:
        out.append(Para(extra))
    else:
        out.append(Para("The submitter may add what the rig cannot see (chip, board, memory, "
                        "clocks) as `architecture` in system.toml."))
    return out


def _dut_link(m: dict[str, Any]) -> str:
    dut = m.get("bench", {}).get("dut", {})
    io = m.get("bench", {}).get("io_manager")
    port = dut.get("port", "?")
    if port == "virtual":  # the pty the virtual bench served the DUT on
        pty = m.get("instruments", {}).get("virtual_bench", {}).get("ports", {}).get("dut")
        port = f"the virtual bench's pty {pty}" if pty else "the virtual bench"
    link = f"{dut.get('kind', '?')} shim on {port}"
    if dut.get("port") not in ("stdio", "virtual"):
        link += f" at {dut.get('baud', '?')} baud"
    if io:
        link += "; through an Arduino UNO IO manager (level-shifted, powered apart)"
    return link


def _instrument_identity(m: dict[str, Any]) -> str:
    emon = m.get("instruments", {}).get("emon")
    bench_emon = m.get("bench", {}).get("emon", {})
    if not emon:
        dut = m.get("bench", {}).get("dut", {})
        if dut.get("kind") == "xylo" and dut.get("hdk"):
            return (f"the Xylo HDK's on-board power rails, sampled at "
                    f"{dut.get('power_frequency_hz', '?')} Hz")
        return "none"
    driver = emon.get("driver", bench_emon.get("driver", "?"))
    model = {"lpm01a": "ST X-NUCLEO-LPM01A (PowerShield)", "joulescope": "Joulescope",
             "n6705": "Keysight N6705", "34465a": "Keysight 34465A",
             "otii": "Qoitech Otii", "ppk2": "Nordic Power Profiler Kit II (PPK2)"}.get(
                 driver, driver)
    parts = [model]
    if emon.get("model"):
        parts.append(f"model {emon['model']}")
    identity = emon.get("identity")
    if identity:  # SCPI *IDN?: maker, model, serial, firmware
        fields = [f.strip() for f in str(identity).split(",")]
        if len(fields) >= 4:
            parts.append(f"model {fields[1]}, serial {fields[2]}, firmware {fields[3]}")
        else:
            parts.append(f"identity {identity}")
    if emon.get("serial"):
        parts.append(f"serial {emon['serial']}")
    if emon.get("version"):
        parts.append(f"firmware {emon['version']}")
    if not (identity or emon.get("serial")):
        parts.append("serial not reported by the instrument")
    if emon.get("simulated"):
        parts.append("SIMULATED")
    return ", ".join(parts)


def _sut_where(sut: str | None) -> str:
    return {
        "cpu-tabu": "a worker process on the host CPU, killed at a hard deadline",
        "cpu-sa": "a worker process on the host CPU, killed at a hard deadline",
        "loihi2": "the Lava shim (firmware/loihi2) in its own Python 3.10 process, driven over "
                  "the DUT protocol's QUBO commands; Loihi 2 backend on a host with lava-loihi, "
                  "else Lava's CPU backend",
    }.get(sut or "", "unknown")


def _options(options: dict[str, Any]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in options.items()) or "defaults"


# -- algorithm -----------------------------------------------------------------------------------
def _algorithm(system: System, info: SystemInfo) -> list[Any]:
    out: list[Any] = []
    if system.task == ASC:
        out += _asc_model(system.runs[0])
    else:
        out += _qubo_solver(system)
    out += _submitter_field(system, info, "tuning", "Tuning")
    return out


def _submitter_field(system: System, info: SystemInfo, key: str, lead: str) -> list[Any]:
    value = info.system_value(system.id, key)
    f = next(f for f in SYSTEM_FIELDS if f.key == key)
    if value:
        return [Para(f"**{lead}** (from the submitter): {value}")]
    if f.required:
        return [_todo(f"systems.{system.id}.{key}", f.asks)]
    return []


def _asc_model(run: ReportRun) -> list[Any]:
    from rig.report.models import describe_asc_model

    model = describe_asc_model(run.manifest)
    rows = tuple((k, v) for k, v in model.items())
    return [Table(("", ""), rows, caption="Model (from the network the DUT ran)", align="ll")]


def _qubo_solver(system: System) -> list[Any]:
    sut = system.sut
    text = {
        "cpu-tabu": "D-Wave's multi-start tabu search (dwave-samplers) on the dense QUBO matrix, "
                    "run in slices that double in length up to the timeout; every improvement "
                    "of the best cost is time-stamped by the worker's clock (the cost-tracking "
                    "module is part of the measured system, QUBO.md).",
        "cpu-sa": "D-Wave's simulated annealing (dwave-samplers): independent anneals on a "
                  "geometric inverse-temperature schedule, each twice as long as the last, "
                  "until the timeout; the best cost and its time are tracked in the worker.",
        "loihi2": "Lava's QUBO solver (lava-optimization 0.4.0): a network of NEBM neurons "
                  "with a cost-tracking process; hyperparameters as given in the SUT options "
                  "(default neuron_model nebm, temperature 1, refract 1).",
    }.get(sut or "", "unknown solver")
    sweeps = system.runs
    rows = [("Solver", text)]
    for run in sweeps:
        sw = run.show["sweep"]
        rows.append((f"Sweep `{sw['name']}`",
                     f"solver seed {sw['solver_seed']}; targets: {sw['targets']} "
                     "(NeuroBench table; exact optimum below 50 nodes, else tabu 100 reads x 50 "
                     "restarts where the table has none); options: "
                     f"{_options(sw.get('sut_options', {}).get(sut, {}))}"))
    return [Table(("", ""), tuple(rows), caption="Solver and settings", align="ll")]


# -- workflow ------------------------------------------------------------------------------------
def workflow_stages(system: System) -> list[Any]:
    """The six stages of report.md's workflow, as this system's first run did them."""
    from rig.report.workflow import Stage

    run = system.runs[0]
    m = run.manifest
    if system.task == QUBO:
        on_loihi = system.sut == "loihi2"
        power = _qubo_power_measured(system)
        return [
            Stage("Data initialisation", "host", "NeuroBench MIS graph G(n, m) from its seed",
                  False),
            Stage("Host pre-processing", "host", "QUBO matrix: -1 on the diagonal, 4 per edge",
                  False),
            Stage("Data loading", "link",
                  "qload to the Lava shim" if on_loihi else "graph to the solver worker",
                  False),
            Stage("On-device pre-processing", "dut" if on_loihi else "none",
                  "Lava network build" if on_loihi else "none", False),
            Stage("Inference", "dut", "solve for the fixed timeout, tracking the best cost",
                  power, True),
            Stage("Post-processing", "host", "BKS-gap against the target", False),
        ]
    bench = m.get("bench", {})
    kind = bench.get("dut", {}).get("kind")
    dut = m.get("instruments", {}).get("dut", {})
    measured = bool(run.show["measurements"]["energy_windows"])
    test_set = _note(run, "test set: ") or bench.get("dataset", {}).get("name", "test set")
    download = _note(run, "inputs are downloaded ") or "input download"
    rate = bench.get("dataset", {}).get("rate_hz")
    if kind == "xylo":
        return [
            Stage("Data initialisation", "host", test_set.split(":")[0], False),
            Stage("Host pre-processing", "host", f"resample audio to {rate} Hz", False),
            Stage("Data loading", "link", f"spike raster, {download}", False),
            Stage("On-device pre-processing", "host" if not bench["dut"].get("hdk") else "dut",
                  "AFE: simulated on the host (on chip in hardware)", False),
            Stage("Inference", "dut", "Xylo SNN core" + ("" if bench["dut"].get("hdk")
                                                          else " (XyloSim)"), measured, True),
            Stage("Post-processing", "host", "top-1 of the output scores", False),
        ]
    own_model = dut.get("model") == "asc01" and "neurobench-rig" in str(dut.get("vendor", ""))
    return [
        Stage("Data initialisation", "host", test_set, False),
        Stage("Host pre-processing", "host", f"audio as int16 at {rate} Hz (not measured)",
              False),
        Stage("Data loading", "link", download, False),
        Stage("On-device pre-processing", "dut",
              "log-mel band energies inside infer" if own_model
              else "inside infer, as the firmware does it", measured, True),
        Stage("Inference", "dut", f"model {dut.get('model', '?')}", measured, True),
        Stage("Post-processing", "host", "top-1 of the score vector", False),
    ]


def _note(run: ReportRun, prefix: str) -> str:
    return next((n[len(prefix):] for n in run.notes if n.startswith(prefix)), "")


def _qubo_power_measured(system: System) -> bool:
    return any(r.get("power_w_mean") is not None
               for run in system.runs for r in _sut_rows(run, system.sut))


def _workflow(system: System, stages: list[Any], figures_dir: Path,
              make_workflow: WorkflowMaker | None) -> list[Any]:
    out: list[Any] = []
    if make_workflow is not None:
        path = make_workflow(system, stages, figures_dir)
        out.append(Figure(path, "Workflow of this system as the run did it: which stage runs "
                          "on the host and which on the device, and which lie inside the power "
                          "measurement and the timed window.", label=system.label or "",
                          wide=True))
    rows = tuple((s.name, {"host": "host", "dut": "device", "link": "host → device",
                           "none": "n/a"}[s.where], s.detail,
                  "yes" if s.timed else "no", "yes" if s.measured else "no") for s in stages)
    out.append(Table(("Stage", "Where", "What", "Timed", "In power measurement"), rows,
                     caption="Workflow stages", align="lllll"))
    return out


# -- latency -------------------------------------------------------------------------------------
def _latency(system: System) -> list[Any]:
    if system.task == QUBO:
        return [Para(
            "Fixed timeout (QUBO.md): the clock starts after the graph is loaded into the SUT and "
            "runs for the timeout; the SUT's own clock time-stamps every improvement of its "
            "best cost, so one fixed-timeout run also gives the time to reach the BKS-gap "
            "thresholds 0.1, 0.05 and 0.01 (time-to-solution). Each workload is solved for "
            "5 problem seeds (as listed per sweep), and gap and power are averaged over them; "
            "a seed that did not reach a threshold reports no time-to-solution and is counted, "
            "never averaged in.")]
    out = []
    for run in system.runs:
        m = run.manifest
        asc = m.get("bench", {}).get("asc", {})
        s = run.show["summary"]
        lat = run.show["measurements"]["latency_runs"]
        timer = s.get("latency_timer")
        iters = sorted({r["iterations"] for r in lat})
        rate = m.get("bench", {}).get("emon", {}).get("sample_rate_hz")
        if timer == "emon":
            how = ("energy timestamp mode: the DUT pulls its timestamp GPIO low at the start and "
                   "end of each timed run and the energy monitor times the window by counting "
                   f"samples between the falling edges ({si(rate, 'Hz')}, so "
                   f"{si(1 / rate if rate else None, 's')} resolution)")
            if any(r.get("dut_elapsed_s") is not None for r in lat):
                how += ("; the firmware also reports its microsecond lap counter for each "
                        "window, and the two clocks are compared (check `timer agreement`)")
        elif m.get("bench", {}).get("dut", {}).get("kind") == "xylo":
            how = ("Xylo's own time base: time steps x dt of the network"
                   if str(s.get("timing", "")).startswith("simulated") or "timing" not in s
                   else "the Xylo HDK")
            how += f" ({s.get('timing', 'simulated: XyloSim timesteps x dt')})"
        else:
            how = "performance timestamp mode: the DUT's microsecond timer (`m-lap-us`)"
        host = ("The HDK's times are the host clock's, from the input write to the readout "
                "of the last time step; nothing else comes from the host clock"
                if s.get("timing", "").startswith(HDK_TIMING)
                # Runs recorded when Rockpool's inf_duration timed the HDK.
                else "Rockpool measures the HDK's inf_duration with the host clock; nothing "
                "else comes from the host clock"
                if s.get("timing", "").startswith("measured: samna")
                else "Times never come from the host clock")
        out.append(Bullets((
            f"Run `{run.name}`: {len(lat)} timed runs (the spec asks for 5), each of "
            f"{', '.join(map(str, iters))} inferences on one loaded input after "
            f"{asc.get('warmup', '?')} warm-up inference(s); every run at least "
            f"{asc.get('min_run_s', '?')} s and {asc.get('min_iterations', '?')} iterations.",
            f"Timer: {how}. {host}.",
            "Throughput score: inferences per second per run; the reported value is the median "
            "of the runs, checked for replicability.",
            _execution_time_text(s),
            f"Accuracy: every test sample ({s.get('samples', 0)}) through the DUT itself, top-1.",
            f"Replicability: each run within {asc.get('replicability_tolerance', 0.05):.0%} of "
            "the mean of the runs (rules.md), checked and shown below.",
        )))
    return out


def _execution_time_text(s: dict[str, Any]) -> str:
    """How the run's execution time per inference was measured, from its summary."""
    if s.get("execution_time_source") == "test_set":
        timer = {"dut": "the DUT's own timer (`m-lap-us`, 1 µs)",
                 "emon": "the energy monitor's samples between its timestamp edges"}.get(
            s.get("execution_time_timer", ""), "the DUT's timestamps")
        return ("Execution time per inference (ASC.md): mean and standard error over all "
                f"{s.get('execution_time_samples')} test samples, each timed by {timer} as it "
                "went through the DUT; the timed runs give the throughput above and, where an "
                "energy monitor sees them, the energy per inference.")
    if s.get("execution_time_source") == "timed_runs":
        return (f"Execution time per inference: {s.get('execution_time_note', '')}. A run that "
                "includes the test set reports the mean over every test sample (ASC.md).")
    return ("Execution time per inference: mean and standard error over the timed runs (a run "
            "recorded before the rig measured it over the test set).")


# -- power ---------------------------------------------------------------------------------------
#: What each QUBO point's power source is, in the report's words (rig.qubo.suts power_source).
_POWER_SOURCES = {
    "rapl": "the host CPU's RAPL package counters",
    "nvml": "the GPU's NVML power readings",
    "loihi-profiler (unverified on hardware)": "the Loihi 2 chip's own power profiler (its "
                                               "units as public scripts read them, unverified "
                                               "on hardware)",
    # Runs recorded before the label was added.
    "loihi-profiler": "the Loihi 2 chip's own power profiler (unverified on hardware)",
    "loihi-profiler (SIMULATED)": "a stand-in for the Loihi 2 profiler (SIMULATED: a fixed "
                                  "power, not a chip's)",
}


def _power(system: System, info: SystemInfo) -> list[Any]:
    out: list[Any] = []
    if system.task == QUBO:
        rows = [r for run in system.runs for r in _sut_rows(run, system.sut)]
        statuses = sorted({r["power_status"] for r in rows if r.get("power_status")})
        measured = [r for r in rows if r.get("power_w_mean") is not None]
        if measured:
            sources = sorted({r["power_source"] for r in measured if r.get("power_source")})
            said = "; ".join(_POWER_SOURCES.get(s, s) for s in sources) or "the SUT's power "
            out.append(Para(f"Average power over the runtime of each point from {said}, "
                            "averaged over the seeds."))
        if statuses:
            out.append(Box("note", "Power not measured for some points",
                           "; ".join(statuses) + ". Such points report power as unavailable, "
                           "never as zero."))
    else:
        for run in system.runs:
            out.append(Bullets(tuple(_asc_power_lines(run))))
    out += _submitter_field(system, info, "power_tap", "Tap point")
    out += _submitter_field(system, info, "components_included", "Also on the measured supply")
    out += _submitter_field(system, info, "components_omitted", "Components omitted")
    return out


def _asc_power_lines(run: ReportRun) -> list[str]:
    m = run.manifest
    bench = m.get("bench", {})
    emon = bench.get("emon", {})
    s = run.show["summary"]
    meas = run.show["measurements"]
    driver = emon.get("driver")
    lines = [f"Run `{run.name}`."]
    if not meas["energy_windows"]:
        lines.append(f"Power: {s.get('power', 'not measured')}. Energy and power are reported "
                     "as unavailable, never as zero.")
        return lines
    if driver == "none":  # a Xylo HDK's rails
        lines += [
            "Device used: the on-board power instruments of the Xylo HDK (its rails io, "
            f"snn_core, afe_core, afe_ldo), sampled at "
            f"{bench.get('dut', {}).get('power_frequency_hz', '?')} Hz; time resolution "
            f"{si(1 / bench['dut']['power_frequency_hz'], 's')}.",
            "Active power: the rails' mean over each timed run of at least "
            f"{bench.get('asc', {}).get('min_run_s', '?')} s (configuration amortised, ASC.md).",
        ]
    else:
        tap = {
            "lpm01a": "an external analyzer that sources the DUT's supply and measures the "
                      "current it delivers",
            "joulescope": "an external analyzer in series with the DUT's supply, measuring "
                          "current and voltage",
            "n6705": "a DC power analyzer that sources the DUT's supply and digitises its "
                     "current",
            "34465a": "a digital multimeter in series with the DUT's supply",
            "otii": "a supply and current meter (Otii Arc/Ace) that sources the DUT's supply "
                    "and measures its current and voltage",
            "ppk2": "a source meter that supplies the DUT from its regulator (or, in ampere "
                    "mode, an ammeter in series with the bench's supply) and measures the "
                    "current at 100 kS/s",
        }.get(str(driver), "an external analyzer")
        rate = emon.get("sample_rate_hz")
        lines += [
            f"Device used: {_instrument_identity(m)}: {tap}, at "
            f"{emon.get('supply_voltage_v', '?')} V.",
            f"Time resolution: {si(rate, 'Hz')} sample rate ({si(1 / rate, 's')} per sample); "
            "the timestamp GPIO is recorded on the same samples.",
            "Included: everything on the measured supply rail (the DUT as wired on this bench)."
            + (" The IO manager and its level shifters are powered from a rail that is not "
               "measured." if bench.get("io_manager") else ""),
        ]
    idle = meas["idle_spans"]
    if idle:
        lines.append(
            "Idle power: the DUT configured and ready (model loaded, not asleep) and left "
            f"untouched for {si(idle[0]['duration_s'], 's')}"
            + (", between two timestamp pulses." if driver != "none" else ", fed no input."))
    lines.append("Active power: mean power inside each timed window; dynamic power = active - "
                 "idle; energy per inference = window energy / inferences (median of the "
                 "windows); dynamic energy per inference = dynamic power x mean execution time "
                 f"({execution_time_source_text(s)}).")
    if s.get("dropped_samples") is not None:
        lines.append(f"Samples lost by the instrument: {s['dropped_samples']}.")
    return lines


# -- results -------------------------------------------------------------------------------------
def _asc_results(system: System) -> list[Any]:
    runs = system.runs
    label = f" — {system.label}" if system.label else ""
    header = ("Metric", *[f"`{r.name}`" for r in runs])
    rows = []
    for key, name, fmt in ASC_FIGURES:
        if any(key in r.show["summary"] for r in runs):
            rows.append((name, *[fmt(r.show["summary"]) if key in r.show["summary"] else "—"
                                 for r in runs]))
    out: list[Any] = [Table(header, tuple(rows), caption=f"Results{label}",
                            align="l" + "r" * len(runs))]
    if any(figure_budget(r.show["summary"], key) for r in runs for key, _, _ in ASC_FIGURES):
        terms = incomplete_terms(figure_budget(r.show["summary"], key) for r in runs
                                 for key, _, _ in ASC_FIGURES)
        out.append(Para(f"{SHOWN_NOTE}" + (f" (here: {', '.join(terms)})" if terms else "")
                        + ". Every budget is in the appendix \"Uncertainty budgets\"."))
    # Pre-processing and inference apart (ASC.md).
    pre_rows = []
    for r in runs:
        s = r.show["summary"]
        infer_energy = (si(s["energy_per_inference_j"], "J") if "energy_per_inference_j" in s
                        else "unavailable")
        if "preprocess_time_mean_s" in s:
            pre = (f"{si(s['preprocess_time_mean_s'], 's')} ± "
                   f"{si(s['preprocess_time_stderr_s'], 's', 2)}")
            pre_energy = "not measured here (" + s.get("preprocess_note", "") + ")"
        else:
            pre = "inside inference (the DUT extracts its features within `infer`)"
            pre_energy = "inside inference"
        infer = (f"{si(s.get('execution_time_mean_s'), 's')} ± "
                 f"{si(s.get('execution_time_stderr_s'), 's', 2)}")
        pre_rows += [(f"`{r.name}`", "Pre-processing", pre, pre_energy),
                     (f"`{r.name}`", "Inference", infer, infer_energy)]
    out.append(Table(("Run", "Stage", "Time per sample", "Energy per sample"), tuple(pre_rows),
                     caption=f"Pre-processing and inference apart{label}", align="llrl"))
    check_rows = []
    for r in runs:
        for c in r.show["summary"].get("checks", []):
            # ok None: the check does not apply to this run; neither a pass nor a failure.
            mark = {True: "pass", False: "**FAIL**"}.get(c["ok"], "n/a")
            check_rows.append((f"`{r.name}`", c["name"], mark, c["detail"]))
    if check_rows:
        out.append(Table(("Run", "Check", "Result", "Detail"), tuple(check_rows),
                         caption=f"Replicability and measurement checks{label}",
                         align="llll"))
    per_run = []
    for r in runs:
        windows = {w["index"]: w for w in r.show["measurements"]["energy_windows"]}
        for lat in r.show["measurements"]["latency_runs"]:
            w = windows.get(lat["index"])
            per_run.append((f"`{r.name}`", str(lat["index"] + 1), str(lat["iterations"]),
                            si(lat["elapsed_s"], "s"), f"{lat['inferences_per_s']:#.4g} /s",
                            si(w["energy_per_inference_j"], "J") if w else "—",
                            si(w["mean_power_w"], "W") if w else "—"))
    out.append(Table(("Run", "Timed run", "Inferences", "Duration", "Inferences/s",
                      "Energy/inference", "Mean power"), tuple(per_run),
                     caption=f"Every timed run{label}", align="lrrrrrr"))
    return out


def _qubo_results(system: System) -> list[Any]:
    label = f" — {system.label}" if system.label else ""
    out: list[Any] = []
    for run in system.runs:
        rows = _sut_rows(run, system.sut)
        sw = run.show["sweep"]
        timeouts = sw["timeouts"]
        head = ("Nodes", "Density", *[si(t, "s", 3) for t in timeouts])
        out.append(Para(f"Sweep `{sw['name']}` (`{run.name}`): {run.show['points_done']} of "
                        f"{run.show['points_total']} points, {run.show['points_failed']} "
                        f"failed; seeds {', '.join(map(str, sw['seeds']))}."))
        if run.show.get("points_contended"):
            out.append(Para(f"{run.show['points_contended']} point(s) of this sweep were "
                            f"contended: the solver had the CPU for under "
                            f"{CONTENDED_CPU_SHARE:.0%} of its solve "
                            "(a busy host), so they understate the SUT."))
        cell = {(r["nodes"], r["density"], r["timeout_s"]): r for r in rows}
        gap_rows, power_rows, energy_rows = [], [], []
        for n in sw["nodes"]:
            for d in sw["densities"]:
                cells = [cell.get((n, d, t)) for t in timeouts]
                gap_rows.append((str(n), pct(d, 0), *[_gap_cell(c) for c in cells]))
                power_rows.append((str(n), pct(d, 0), *[_power_cell(c) for c in cells]))
                energy_rows.append((str(n), pct(d, 0), *[_energy_cell(c) for c in cells]))
        align = "rr" + "r" * len(timeouts)
        out.append(Table(head, tuple(gap_rows), align=align,
                         caption=f"Fixed timeout: BKS-gap, mean over seeds, by timeout{label}"))
        if any(r.get("power_w_mean") is not None for r in rows):
            out.append(Table(head, tuple(power_rows), align=align,
                             caption=f"Fixed timeout: average power, mean over seeds{label}"))
        if any(r.get("energy_j_mean") is not None for r in rows):
            out.append(Table(head, tuple(energy_rows), align=align,
                             caption="Fixed timeout: energy of a solve (average power x solve "
                                     f"time), mean over seeds{label}"))
        sources = sorted({r["power_source"] for r in rows if r.get("power_source")})
        if sources:
            out.append(Para(f"Power source: {'; '.join(sources)}."))
        coverage = _power_coverage(rows)
        if coverage:
            out.append(Para(coverage))
        longest = max(timeouts)
        tts_rows = []
        for n in sw["nodes"]:
            for d in sw["densities"]:
                c = cell.get((n, d, longest))
                tts_rows.append((str(n), pct(d, 0), *[_tts_cell(c, t) for t in TTS_THRESHOLDS]))
        if any((c.get("tts") or {}) for c in rows):
            out.append(Table(("Nodes", "Density", *[f"gap ≤ {t}" for t in TTS_THRESHOLDS]),
                             tuple(tts_rows), align="rrrrr",
                             caption=f"Time to solution within the {si(longest, 's', 3)} runs "
                                     f"(mean over the seeds that reached it){label}"))
        largest = [r for r in run.show.get("largest_solved", []) if r["sut"] == system.sut]
        if largest:
            out.append(Table(("Density", "Largest workload solved", "At timeout"),
                             tuple((pct(r["density"], 0), "none" if r["nodes"] is None
                                    else f"{r['nodes']} nodes", si(r["timeout_s"], "s", 3))
                                   for r in largest), align="lrr",
                             caption=f"Largest workload of this sweep solved better than cost 0 "
                                     f"by every seed{label}"))
    out.append(Para("The maximum supported workload size that QUBO.md asks for (seed 0 at 1% and "
                    "100% density, beyond the sizes of a sweep) is measured by "
                    "`rig qubo max-size`."))
    return out


def _gap_cell(row: dict[str, Any] | None) -> str:
    if row is None or row["gap_mean"] is None:
        return "—"
    seeds = "" if row["seeds"] == row["seeds_expected"] else \
        f" ({row['seeds']}/{row['seeds_expected']})"
    return gap_text(row["gap_mean"]) + seeds


def _power_cell(row: dict[str, Any] | None) -> str:
    if row is None or row.get("power_w_mean") is None:
        return "unavailable" if row and row["seeds"] else "—"
    seeds = "" if row.get("power_seeds", row["seeds"]) >= row["seeds"] else \
        f" ({row['power_seeds']}/{row['seeds']} seeds)"
    return with_uncertainty(row["power_w_mean"], "W", _row_budget(row, "power_w_mean")) + seeds


def _energy_cell(row: dict[str, Any] | None) -> str:
    if row is None or row.get("energy_j_mean") is None:
        return "unavailable" if row and row["seeds"] else "—"
    return with_uncertainty(row["energy_j_mean"], "J", _row_budget(row, "energy_j_mean"))


def _row_budget(row: dict[str, Any], figure: str) -> dict[str, Any] | None:
    """The GUM budget a sweep row holds for `figure` (rig.qubo.uncertainty), if any."""
    return (row.get("uncertainty") or {}).get(figure)


def _power_coverage(rows: list[dict[str, Any]]) -> str | None:
    """Which points (seeds) of these rows had power, and why the others have none."""
    points = sum(r["seeds"] for r in rows)
    with_power = sum(r.get("power_seeds", 0) for r in rows)
    if not points:
        return None
    text = f"Power was measured for {with_power} of {points} points."
    why: dict[str, int] = {}
    for r in rows:
        missing = r["seeds"] - r.get("power_seeds", 0)
        if missing > 0:
            reason = r.get("power_status") or "power unavailable: no reason recorded"
            why[reason] = why.get(reason, 0) + missing
    if why:
        text += " Without power: " + "; ".join(f"{n} point(s): {reason}"
                                               for reason, n in why.items())
        text += ". Such points report power as unavailable, never as zero."
    return text


def _tts_cell(row: dict[str, Any] | None, threshold: str) -> str:
    if row is None:
        return "—"
    hit = (row.get("tts") or {}).get(threshold)
    if not hit or not hit["reached"]:
        return "not reached"
    text = si(hit["latency_s_mean"], "s")
    if hit.get("energy_j_mean") is not None:
        text += f", {si(hit['energy_j_mean'], 'J')}"
    if hit["reached"] < row["seeds"]:
        text += f" ({hit['reached']}/{row['seeds']} seeds)"
    return text


# -- appendix ------------------------------------------------------------------------------------
def _appendix(systems: list[System]) -> list[Any]:
    return [*_run_folders(systems), *_budgets(systems)]


def _run_folders(systems: list[System]) -> list[Any]:
    rows = []
    for run in _unique([r for s in systems for r in s.runs]):
        m = run.manifest
        rows.append((f"`{run.name}`", str(m.get("run_id", "?"))[:12], run.status,
                     str(m.get("started_at", "?")), str(m.get("finished_at") or "—"),
                     f"SIMULATED ({run.simulation})" if run.simulation
                     else run.emulation or "hardware"))
    return [
        Heading(1, "Appendix: the run folders", "appendix", running=""),
        Para("Every number in this report is the one `rig show RUN --json` gives for its run "
             "folder; `results.json` beside this report holds them all. The run folders were "
             "read, never modified."),
        Table(("Run folder", "Run id", "Status", "Started", "Finished", "Source"), tuple(rows),
              caption="Run folders", align="llllll"),
    ]


def _budgets(systems: list[System]) -> list[Any]:
    """Appendix "Uncertainty budgets": per system, run and figure, the GUM budget as the run's
    summary holds it (`rig.run.asc_uncertainty`): every component, u_c, ν_eff, k, U and the
    coverage, and what an incomplete budget misses."""
    out: list[Any] = []
    for system in systems:
        label = f" — {system.label}" if system.label else ""
        for run in system.runs:
            summary = run.show.get("summary", {})
            for key, name, _ in ASC_FIGURES:
                budget = figure_budget(summary, key) if key in summary else None
                if budget is not None:
                    out += _budget_blocks(budget, f"{name}, `{run.name}`{label}")
    if not out:
        return []
    return [Heading(1, "Appendix: uncertainty budgets", "uncertainty-budgets", running=""),
            Para("Each figure's uncertainty after the GUM (JCGM 100:2008): every component as a "
                 "standard uncertainty in the figure's unit (Type A from repeated values, Type "
                 "B from a published accuracy or a resolution), combined in quadrature (terms "
                 "of one correlation group linearly), ν_eff by Welch–Satterthwaite, U = k·u_c. "
                 "A term whose figure is not published or not evaluated is listed as unknown: "
                 "its budget is incomplete and U, from the known terms only, a lower bound. "
                 f"Coverage: {COVERAGE_TEXT}."),
            *out]


def _budget_blocks(b: dict[str, Any], caption: str) -> list[Any]:
    unit = "/s" if b.get("unit") == "1/s" else str(b.get("unit", ""))
    value = b.get("value")
    figure = str(b.get("figure", ""))

    def u(x: Any) -> str:
        return "unknown" if x is None else si(float(x), unit, 3)

    rows = tuple((str(c.get("name", "")).removeprefix(f"{figure}: "), str(c.get("type", "")),
                  u(c.get("value")), _dof(c.get("dof")) if c.get("value") is not None else "—",
                  str(c.get("source", "")) + (f" (correlated: {c['correlation_group']})"
                                              if c.get("correlation_group") else ""),
                  _known(c))
                 for c in b.get("components", []))
    total = (f"{with_uncertainty(value, unit, b)}: u_c = {u(b.get('u_c'))}, "
             f"ν_eff = {_dof(b.get('dof_eff'))}, k = {float(b.get('k', 0)):.3g}, "
             f"U = {u(b.get('U'))}.")
    if not b.get("complete", True):
        total += (" **Incomplete**: unknown " + ", ".join(unknown_terms(b))
                  + "; U is a lower bound.")
    return [Table(("Component", "Type", "Standard uncertainty", "ν", "Source", "Known"),
                  rows, caption=caption, align="llrrll"),
            Para(total)]


def _known(c: dict[str, Any]) -> str:
    """The "Known" cell: "yes", or why a term has no figure: a Type A term is evaluated from
    repeated values, never published, so it is "not evaluated" (one value tells no spread); a
    Type B term is "not published" (an accuracy nobody declares). JSON's ``published`` is the
    component's `known`."""
    if c.get("published"):
        return "yes"
    return "**no**: not evaluated" if c.get("type") == "A" else "**no**: not published"


def _dof(dof: Any) -> str:
    if dof is None:
        return "—"
    if dof == "inf" or (isinstance(dof, float) and math.isinf(dof)):
        return "∞"
    return f"{float(dof):.0f}" if float(dof) < 1e6 else "> 10⁶"
