"""The run folders a report is made from: read (never written), checked, grouped into systems.

Every number a report states comes from `run_summary` (here), the function behind
`rig show --json`; this module adds only what describes a run (its manifest, its trace file, and
whether it was simulated) and decides which runs belong to which system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocols.dut.codec import CAP_SIMTIME
from rig.errors import ConfigError
from rig.qubo.sweep import PROCEDURE as SWEEP_PROCEDURE
from rig.qubo.sweep import is_sweep, sweep_summary
from rig.run.events import Note
from rig.run.store import EVENTS, MANIFEST, load_run, read_manifest
from rig.run.summary import asc_summary

ASC, QUBO = "ASC", "QUBO"
#: Display names of the QUBO systems under test the rig drives.
SUT_NAMES = {
    "cpu-tabu": "CPU baseline: D-Wave tabu search",
    "cpu-sa": "CPU baseline: D-Wave simulated annealing",
    "loihi2": "Intel Loihi 2 (Lava QUBO solver)",
}


@dataclass
class ReportRun:
    """One run folder as the report sees it."""

    path: Path
    task: str
    manifest: dict[str, Any]
    #: What `rig show RUN --json` prints for it.
    show: dict[str, Any]
    #: Why its numbers are simulated ("virtual bench", "XyloSim", ...), or None for hardware.
    simulation: str | None
    trace: Path | None = None
    #: The run's notes (test set, download method, calibration...), as the procedure said them.
    notes: list[str] = field(default_factory=list)
    #: Why its numbers are emulated ("emulated: QEMU mps2-an386, ..."), or None.
    emulation: str | None = None
    #: What is wrong with a trace the run recorded ("traces/emon.jls is truncated: ..."), so
    #: that its figures cannot be re-derived (`check_traces`); None when every trace reads.
    trace_damaged: str | None = None

    @property
    def name(self) -> str:
        """The folder's name: how tables and legends refer to the run."""
        return self.path.name

    @property
    def status(self) -> str:
        """complete, failed-checks, failed, interrupted, incomplete or running."""
        return str(self.show.get("status"))

    @property
    def complete(self) -> bool:
        """Finished, with every check passed."""
        return self.status == "complete"


@dataclass
class System:
    """One system under test: one section of the report."""

    id: str
    task: str
    name: str
    runs: list[ReportRun] = field(default_factory=list)
    #: For QUBO: the SUT's name in the sweeps (their rows are filtered by it).
    sut: str | None = None

    @property
    def simulation(self) -> str | None:
        """The simulated label of the system's numbers (None when all are from hardware)."""
        labels = sorted({r.simulation for r in self.runs if r.simulation})
        return ", ".join(labels) if labels else None

    @property
    def emulation(self) -> str | None:
        """The emulated label of the system's numbers (QEMU), or None."""
        labels = sorted({r.emulation for r in self.runs if r.emulation})
        return ", ".join(labels) if labels else None

    @property
    def label(self) -> str | None:
        """The mark printed on every table, figure and page of its section, or None."""
        if self.simulation:
            return f"SIMULATED ({self.simulation})"
        return f"EMULATED ({self.emulation.removeprefix('emulated: ')})" if self.emulation \
            else None


def run_summary(path: str | Path) -> dict[str, Any]:
    """The summary of an ASC run folder or a QUBO sweep folder, as `rig show --json` prints it.

    A folder whose manifest.json is damaged is summarised from its events alone, and the
    summary's `manifest_error` says what is wrong with the manifest."""
    record = load_run(path)
    if is_sweep(record.manifest):
        return sweep_summary(path)
    return asc_summary(record)


def read_run(path: Path) -> ReportRun:
    """Read one run folder; a folder that cannot be reported raises ConfigError (exit 2)."""
    path = Path(path).resolve()
    if not path.is_dir():
        raise ConfigError(f"{path} is not a run folder (no such folder)",
                          hint="pass folders under runs/ that rig measure or rig sweep printed")
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        what = "has events.jsonl but no manifest.json" if (path / EVENTS).is_file() else \
            f"has no {MANIFEST} or {EVENTS}"
        raise ConfigError(f"{path} is not a run folder a report can use: it {what}",
                          hint="pass folders under runs/ that rig measure or rig sweep printed")
    manifest, damaged = read_manifest(manifest_path)
    if damaged is not None:  # truncated, not JSON, not an object, unreadable
        raise ConfigError(
            f"{path}/{damaged}",
            hint="the report needs the run's manifest (instruments, bench, software); "
                 f"`rig show {path}` still reads what the run measured from its events",
        )
    procedure = manifest.get("procedure")
    if procedure not in ("asc", SWEEP_PROCEDURE):
        raise ConfigError(f"{path}: a report covers ASC runs and QUBO sweeps; this folder's "
                          f"procedure is {procedure!r}")
    show = run_summary(path)
    notes = [e.text for e in load_run(path).events if isinstance(e, Note)]
    if procedure == "asc":
        trace = next((path / t["path"] for t in manifest.get("traces", [])
                      if (path / t.get("path", "")).is_file()), None)
        return ReportRun(path, ASC, manifest, show, _asc_simulation(manifest, show), trace,
                         notes, emulation=manifest.get("emulated") or None)
    return ReportRun(path, QUBO, manifest, show, None, None, notes)


def check_complete(runs: list[ReportRun], allow_incomplete: bool) -> None:
    """Refuse runs that did not finish cleanly, unless the user allows them (then marked)."""
    if allow_incomplete:
        return
    for run in runs:
        if run.complete:
            continue
        summary = run.show.get("summary")
        checks = summary.get("checks", []) if isinstance(summary, dict) else []
        failed = [c["name"] for c in checks if c.get("ok") is False]  # None: not applicable
        why = {
            "failed-checks": f"failed its checks ({', '.join(failed) or 'see rig show'})",
            "interrupted": "was interrupted before it finished",
            "refused": "was refused by the instrument before anything was measured",
            "incomplete": "ended without finishing (killed or crashed)",
            "failed": f"failed: {run.show.get('error', 'see rig show')}",
            "running": "is still being measured by another rig process",
        }.get(run.status, f"has status {run.status!r}")
        raise ConfigError(
            f"{run.path} {why}; a report states finished, replicable results",
            hint="measure it again, or pass --allow-incomplete to report it marked as such",
        )


def check_traces(runs: list[ReportRun], allow_damaged: bool) -> None:
    """Read every trace an ASC run's manifest lists, whole, as `rig analyze RUN` would: one
    that is missing, cut short or fails its CRC means the run's figures cannot be re-derived.
    Refused by name (ConfigError, exit 2) unless `allow_damaged`; then the run is marked
    (`trace_damaged`) and no figure is drawn from its trace. Runs are only read: the length
    check comes before pyjls opens a file (it would repair a cut-short copy in place)."""
    from rig.errors import AnalysisError
    from rig.traces.integrity import check_jls_intact

    for run in runs:
        if run.task != ASC:
            continue
        for entry in run.manifest.get("traces") or []:
            rel = str(entry.get("path", "")) if isinstance(entry, dict) else ""
            if not rel:
                continue
            path = run.path / rel
            if not path.is_file():
                damage = f"{rel} is missing"
            else:
                try:
                    check_jls_intact(path)
                    continue
                except AnalysisError as exc:
                    damage = _damage_text(exc.message, path, rel)
            if not allow_damaged:
                raise ConfigError(
                    f"{run.path}: {damage}; the run's figures cannot be re-derived from it",
                    hint="copy the run folder again from where it was recorded, leave the run "
                         "out, or pass --allow-damaged-traces to report it marked as such")
            run.trace_damaged = damage
            run.trace = None
            break


def _damage_text(message: str, path: Path, rel: str) -> str:
    """`check_jls_intact`'s message with the trace named by its path in the run folder."""
    text = message.replace(f"JLS file {path}", rel).replace(str(path), rel)
    prefix = f"cannot read {rel}: "
    return f"{rel} is damaged: {text.removeprefix(prefix)}" if text.startswith(prefix) else text


def group_systems(runs: list[ReportRun]) -> list[System]:
    """One system per DUT (ASC: name, vendor and model) or per SUT (QUBO), in the order seen."""
    systems: dict[str, System] = {}
    for run in runs:
        if run.task == ASC:
            sid, name = _asc_identity(run.manifest)
            systems.setdefault(sid, System(sid, ASC, name)).runs.append(run)
            continue
        for sut in run.show["sweep"]["suts"]:
            sid = _slug(sut)
            system = systems.setdefault(sid, System(sid, QUBO, SUT_NAMES.get(sut, sut), sut=sut))
            system.runs.append(_sut_view(run, sut))
    return list(systems.values())


def _sut_view(run: ReportRun, sut: str) -> ReportRun:
    """The sweep as seen by one of its SUTs: same folder and numbers, the SUT's own label."""
    return ReportRun(run.path, run.task, run.manifest, run.show,
                     _sweep_simulation(run.manifest, run.show, sut), run.trace, run.notes)


def _asc_identity(manifest: dict[str, Any]) -> tuple[str, str]:
    dut = manifest.get("instruments", {}).get("dut") or {}
    if not dut.get("name"):
        device = str(manifest.get("device", "dut"))
        return _slug(device), device
    sid = _slug(f"{dut['name']}-{dut.get('model') or 'model'}")
    vendor = dut.get("vendor") or "unknown vendor"
    return sid, f"{vendor}: {dut['name']}, model {dut.get('model') or 'not reported'}"


def _asc_simulation(manifest: dict[str, Any], show: dict[str, Any]) -> str | None:
    """Why the run's numbers are simulated (`rig show`'s word, from the manifest and what the
    instruments said), or None."""
    if not show.get("simulated"):
        return None
    instruments = manifest.get("instruments", {})
    dut = instruments.get("dut") or {}
    if CAP_SIMTIME in (dut.get("capabilities") or []):
        # The DUT said it is a simulator; Xylo's is XyloSim (timing and outputs, not a chip).
        return "XyloSim" if dut.get("name") == "xylo" else "simulated DUT"
    return "virtual bench" if "virtual_bench" in instruments else "simulated bench"


def _sweep_simulation(manifest: dict[str, Any], show: dict[str, Any], sut: str) -> str | None:
    if manifest.get("point_function") == "stand-in":
        return "stand-in points"
    if manifest.get("simulated"):
        return "simulated sweep"
    if sut == "loihi2":
        # Lava's CPU backend unless the Loihi profiler measured power (only on Loihi hardware);
        # the shim's stand-in profiler runs on the CPU backend and its power is SIMULATED.
        rows = [r for r in show.get("summary", []) if r.get("sut") == sut]
        sources = " ".join(str(r.get("power_source") or "") for r in rows)
        if "SIMULATED" in sources:
            return "Lava CPU backend, stand-in Loihi profiler"
        if not any(r.get("power_w_mean") is not None for r in rows):
            return "Lava CPU backend"
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "system"
