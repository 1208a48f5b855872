"""Overnight QUBO sweeps: SUTs x nodes x densities x timeouts x seeds, one run folder, resumable.

A sweep file (TOML) lists the axes; the points are enumerated in a fixed order
(sut, nodes, density, timeout, seed) and each has a stable key. Every finished point is one
`sweep_point` event appended and fsynced to the run folder's events.jsonl: that line is the
checkpoint. `resume_sweep` reads the folder back, skips every point whose event is on disk (a torn
last line is ignored), runs the rest and appends to the same file; the manifest records each
resume. A point that was running when the process died has no event and is simply run again.

The function that measures one point is injectable (`PointFunction`): the real one generates the
workload, finds its target and runs the fixed-timeout procedure on the SUT; `stand_in_point` is a
closed-form stand-in that lets the checkpoint logic be tested quickly and deterministically.

A `PointDispatch` (rig/cluster: a Dask cluster) measures the points elsewhere instead of in this
process: it yields each finished point's event, which this process checkpoints exactly as its own
(it stays the folder's only writer), so resume, `rig show` and `rig report` do not change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import itertools
import json
import os
import socket
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np

from drivers.file_lock import FileLock, held_elsewhere
from protocols.errors import ActionableError, quoted
from rig.bench.config import read_toml
from rig.bench.numbers import Span, at_least, number, positive, refuse_non_finite
from rig.errors import BENCH_ERRORS, ConfigError, RigError, RunInterrupted
from rig.qubo.uncertainty import row_budgets
from rig.run.events import Event, EventBus, RunFinished, RunStarted
from rig.run.stopping import StopRequest
from rig.run.store import EVENTS, INCOMPLETE, MANIFEST, RunStore, load_run, read_manifest
from rig.traces.analysis.uncertainty import Budget, beyond_bound

#: `procedure` of a sweep's run folder (manifest.json and run_started).
PROCEDURE = "qubo-sweep"
KNOWN_SUTS = ("cpu-tabu", "cpu-sa", "loihi2")
TARGET_MODES = ("table", "compute")
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
#: Which point function a run folder was measured with, so that resume uses the same one.
REAL, STAND_IN, CUSTOM = "qubo", "stand-in", "custom"
#: Status of a sweep another rig process is measuring right now.
RUNNING = "running"
#: The stand-in hangs at this point index (tests kill the process there); unset: never.
STAND_IN_HANG_ENV = "RIG_SWEEP_STAND_IN_HANG_AT"
#: How long the hanging stand-in waits before giving up (a deadline, never reached in tests).
STAND_IN_HANG_S = 600.0
#: Where each number of a [sweep] table may lie (`rig.bench.numbers.number`).
SEED_SPAN = at_least(0, 2**32 - 1)
NUMBER_SPANS: dict[str, Span] = {
    "nodes": at_least(1, 1_000_000),
    "densities": Span(0.0, 1.0, low_open=True),
    "timeouts": positive(86_400.0, "s"),
    "seeds": SEED_SPAN,
    "solver_seed": SEED_SPAN,
    "max_relative_uncertainty": Span(0.0, 1.0, low_open=True),
}
#: Keys of the [sweep] table (`tuning_file` and `tuning_sha256` are written by the rig into a
#: run folder's snapshot), and the words its text keys take.
SWEEP_KEYS = ("suts", "nodes", "densities", "seeds", "timeouts", "solver_seed", "targets",
              "sut_options", "name", "tuning", "tuning_file", "tuning_sha256",
              "max_relative_uncertainty")
CHOICES: dict[str, tuple[str, ...]] = {"suts": KNOWN_SUTS, "targets": TARGET_MODES}


# -- the sweep file ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepPoint:
    """One measurement: a SUT solving workload (nodes, density, seed) for `timeout_s`."""

    index: int
    sut: str
    nodes: int
    density: float
    timeout_s: float
    seed: int

    @property
    def key(self) -> str:
        """Stable across runs and resumes: repr() of a float round-trips exactly through JSON."""
        return f"{self.sut}/n{self.nodes}/d{self.density!r}/t{self.timeout_s!r}/s{self.seed}"

    @property
    def workload(self) -> tuple[int, float, int]:
        """(nodes, density, seed): what identifies the graph and its target."""
        return (self.nodes, self.density, self.seed)


@dataclass(frozen=True)
class SweepSpec:
    """A validated sweep file."""

    suts: tuple[str, ...]
    nodes: tuple[int, ...]
    densities: tuple[float, ...]
    timeouts: tuple[float, ...]
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    solver_seed: int = 0
    targets: str = "table"
    #: Options handed to `open_sut(name, **options)`, per SUT.
    sut_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    name: str = "sweep"
    #: A `rig qubo tune` file's content (rig/qubo/tuning.py): its SUT's points get the
    #: hyperparameters of the nearest (nodes, density) entry; recorded in the manifest.
    tuning: dict[str, Any] | None = None
    tuning_file: str | None = None
    tuning_sha256: str | None = None
    #: The largest relative expanded uncertainty (U over the figure, ~95 %) a row's mean
    #: power or energy may have; None: no bound (the `uncertainty within bound` check).
    max_relative_uncertainty: float | None = None

    def hyperparameters(self, point: SweepPoint) -> dict[str, Any] | None:
        """The tuned parameters for `point`, or None (no tuning, or another SUT)."""
        if self.tuning is None or point.sut != self.tuning["sut"]:
            return None
        from rig.qubo.tuning import parameters_for

        return parameters_for(self.tuning, point.nodes, point.density)

    def points(self) -> list[SweepPoint]:
        """Every point, in the fixed order (sut, nodes, density, timeout, seed)."""
        grid = itertools.product(self.suts, self.nodes, self.densities, self.timeouts, self.seeds)
        return [SweepPoint(i, s, n, d, t, seed) for i, (s, n, d, t, seed) in enumerate(grid)]

    def snapshot(self) -> dict[str, Any]:
        """Plain data for manifest.json; `from_snapshot` reads it back."""
        data = asdict(self)
        for key in ("suts", "nodes", "densities", "timeouts", "seeds"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], where: str) -> SweepSpec:
        """The spec stored in a run folder (validated again: the file may have been edited)."""
        return parse_sweep({"sweep": data}, Path(where), name=str(data.get("name", "sweep")))


def load_sweep(path: Path) -> SweepSpec:
    """Read and validate a SWEEP.toml; every problem is a ConfigError naming file and key."""
    raw = read_toml(path, "sweep file not found",
                    "pass an existing TOML file, e.g. sweeps/example.toml")
    return parse_sweep(raw, path, name=path.stem)


def parse_sweep(raw: dict[str, Any], path: Path, *, name: str = "sweep") -> SweepSpec:
    """Validate an already-parsed sweep table."""
    _no_unknown(raw, {"sweep"}, path, "")
    if "sweep" not in raw:
        raise ConfigError(f"{path}: [sweep] table is missing",
                          hint="see sweeps/example.toml for the keys a sweep needs")
    table = raw["sweep"]
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: sweep: expected a table, found {type(table).__name__}",
                          hint="write it as a [sweep] section")
    _no_unknown(table, set(SWEEP_KEYS), path, "sweep")
    suts = _list(table, "suts", path, str, "SUT names", lambda v: v in CHOICES["suts"],
                 f"one of {', '.join(CHOICES['suts'])}")
    nodes = _list(table, "nodes", path, int, "integers >= 1")
    densities = _list(table, "densities", path, float, "numbers in (0, 1]")
    timeouts = _list(table, "timeouts", path, float, "numbers of seconds > 0")
    seeds = (_list(table, "seeds", path, int, "integers >= 0")
             if "seeds" in table else DEFAULT_SEEDS)
    solver_seed = number(table.get("solver_seed", 0), path=path, table="sweep",
                         key="solver_seed", kind=int, span=NUMBER_SPANS["solver_seed"])
    targets = table.get("targets", "table")
    if targets not in CHOICES["targets"]:
        raise ConfigError(f"{path}: [sweep] targets: expected one of "
                          f"{', '.join(CHOICES['targets'])}; found {quoted(targets)}",
                          hint='"table": the NeuroBench table, computed where it has none; '
                               '"compute": always computed')
    options = table.get("sut_options", {})
    if not isinstance(options, dict):
        raise ConfigError(f"{path}: [sweep] sut_options: expected a table, "
                          f"found {type(options).__name__}",
                          hint='write it as [sweep.sut_options.loihi2] and so on')
    for sut, opts in options.items():
        if sut not in suts:
            raise ConfigError(f"{path}: [sweep.sut_options] {quoted(sut)}: expected one of the "
                              f"sweep's suts ({', '.join(suts)}); found {quoted(sut)}")
        if not isinstance(opts, dict):
            raise ConfigError(f"{path}: [sweep.sut_options] {sut}: expected a table, "
                              f"found {quoted(opts)}")
    tuning, tuning_file = _tuning(table, suts, path)
    bound = table.get("max_relative_uncertainty")  # None only in a run folder's snapshot
    if bound is not None:
        bound = number(bound, path=path, table="sweep", key="max_relative_uncertainty",
                       span=NUMBER_SPANS["max_relative_uncertainty"])
    refuse_non_finite(raw, path)  # the backstop: sut_options too (the SUT gets them as given)
    return SweepSpec(
        suts=tuple(suts), nodes=tuple(nodes), densities=tuple(densities),
        timeouts=tuple(timeouts), seeds=tuple(seeds), solver_seed=int(solver_seed),
        targets=targets, sut_options={k: dict(v) for k, v in options.items()},
        name=str(table.get("name", name)), tuning=tuning, tuning_file=tuning_file,
        tuning_sha256=None if tuning is None else _tuning_digest(tuning),
        max_relative_uncertainty=bound,
    )


def _tuning(table: dict[str, Any], suts: list[str], path: Path
            ) -> tuple[dict[str, Any] | None, str | None]:
    """[sweep] tuning: a file name (relative to the sweep file's folder unless it exists as
    given), or the content itself (as a run folder's manifest records it)."""
    from rig.qubo.tuning import load_tuning, validate

    value = table.get("tuning")
    if value is None:
        return None, None
    where: str | None
    if isinstance(value, str):
        file = Path(value)
        if not file.exists() and not file.is_absolute():
            file = path.parent / value
        content, where = load_tuning(file), str(file)
    else:
        content, where = validate(value, f"{path}: [sweep] tuning"), table.get("tuning_file")
    if content["sut"] not in suts:
        raise ConfigError(f"{path}: [sweep] tuning is for {quoted(content['sut'])}, which is not "
                          f"one of the sweep's suts ({', '.join(suts)})")
    return content, None if where is None else str(where)


def with_tuning(spec: SweepSpec, path: Path) -> SweepSpec:
    """`spec` with the tuning file at `path` (`rig sweep qubo --tuning FILE`; validated)."""
    from dataclasses import replace

    content, where = _tuning({"tuning": str(path)}, list(spec.suts), Path(spec.name))
    assert content is not None  # a tuning was given
    return replace(spec, tuning=content, tuning_file=where, tuning_sha256=_tuning_digest(content))


def _tuning_digest(content: dict[str, Any]) -> str:
    from rig.qubo.tuning import digest

    return digest(content)


def _is(value: Any, expected: type) -> bool:
    """TOML booleans are ints to Python; a bool is never a number here."""
    if isinstance(value, bool):
        return expected is bool
    if expected is float:
        return isinstance(value, int | float)
    return isinstance(value, expected)


def _list(table: dict[str, Any], key: str, path: Path, kind: type, what: str,
          ok: Callable[[Any], bool] | None = None, each: str = "") -> list[Any]:
    """A non-empty list of distinct values: numbers through `rig.bench.numbers.number` with
    their span in `NUMBER_SPANS`, text checked by `ok`."""
    if key not in table:
        raise ConfigError(f"{path}: [sweep] {key} is missing",
                          hint=f"give a list of {what}, e.g. see sweeps/example.toml")
    values = table[key]
    if not isinstance(values, list) or not values:
        raise ConfigError(f"{path}: [sweep] {key}: expected a non-empty list of {what}, "
                          f"found {quoted(values)}")
    out = []
    for i, value in enumerate(values):
        if kind in (int, float):
            out.append(number(value, path=path, table="sweep", key=f"{key}[{i}]", kind=kind,
                              span=NUMBER_SPANS[key]))
            continue
        if not _is(value, kind) or (ok is not None and not ok(value)):
            raise ConfigError(f"{path}: [sweep] {key}: expected each value {each}, "
                              f"found {quoted(value)}")
        out.append(value)
    dupes = sorted({v for v in out if out.count(v) > 1}, key=str)
    if dupes:
        raise ConfigError(f"{path}: [sweep] {key}: expected distinct values, "
                          f"found {quoted(dupes[0])} more than once",
                          hint="a repeated value would measure the same points twice")
    return out


def _no_unknown(table: dict[str, Any], known: set[str], path: Path, section: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        where = f"[{section}] " if section else ""
        raise ConfigError(f"{path}: {where}unknown key {quoted(unknown[0])}",
                          hint=f"known keys here: {', '.join(sorted(known))}")


# -- events ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SweepPointDone(Event):
    """One point finished (ok or failed): on disk, this line is the point's checkpoint."""

    kind: ClassVar[str] = "sweep_point"
    index: int = 0
    key: str = ""
    sut: str = ""
    nodes: int = 0
    density: float = 0.0
    timeout_s: float = 0.0
    seed: int = 0
    #: "ok", or "failed" (then `error` says why and `result` is empty).
    status: str = "ok"
    #: What the point function returned (gap, cost, target, power_w, power_status, ...).
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    #: Host time the whole point took: only for the ETA, never a measurement.
    wall_s: float = 0.0
    #: Measured on a cluster worker: its host, name, resources (the hardware it owns), software
    #: versions and host start/end times of the point; None when measured by this process.
    worker: dict[str, Any] | None = None


@dataclass(frozen=True)
class SweepResumed(Event):
    """`rig sweep resume` picked the run up with `done` of `total` points on disk."""

    kind: ClassVar[str] = "sweep_resumed"
    done: int = 0
    total: int = 0
    bad_lines: int = 0
    host: str = ""
    #: The run being resumed (its RunStarted's id), so subscribers that join now know it.
    run_id: str = ""
    #: Where the points went (`--cluster`: the scheduler and retries, as `start_sweep` records
    #: them); None: measured here.
    cluster: dict[str, Any] | None = None


# -- the run folder ----------------------------------------------------------------------------
class SweepStore(RunStore):
    """RunStore plus the sweep's manifest entries and its results table (one row per point)."""

    def __call__(self, event: Event) -> None:
        if isinstance(event, SweepPointDone):
            self._rows.append(point_row(event))
        elif isinstance(event, SweepResumed):
            self.manifest["status"] = "running"
            self.manifest["finished_at"] = None
            self.manifest.pop("error", None)
            self.manifest.setdefault("resumes", []).append({
                "at": dt.datetime.fromtimestamp(event.at).astimezone().isoformat(
                    timespec="seconds"),
                "points_done": event.done, "points_total": event.total,
                "bad_lines": event.bad_lines, "host": event.host,
                **({"cluster": event.cluster} if event.cluster else {}),
            })
            try:
                self._write_manifest()
            except OSError as exc:  # a full disk: a StorageError, as every write of the store
                self.failed(exc)
        super().__call__(event)
        try:
            if isinstance(event, SweepPointDone) and event.worker:
                self._note_worker(event.worker)
            if isinstance(event, SweepPointDone) and event.result.get("power_source"):
                self._note_power_source(str(event.result["power_source"]))
        except OSError as exc:
            self.failed(exc)

    def _note_power_source(self, source: str) -> None:
        """The manifest lists every power source the points used ("loihi-profiler (SIMULATED)"
        says a stand-in measured them), written when one is first seen."""
        sources = self.manifest.setdefault("power_sources", [])
        if source not in sources:
            sources.append(source)
            self._write_manifest()

    def _note_worker(self, worker: dict[str, Any]) -> None:
        """The manifest lists each cluster worker that measured points (host, resources,
        software versions), written when one is first seen (after its point's checkpoint)."""
        workers = self.manifest.setdefault("workers", {})
        name = f"{worker.get('name')}@{worker.get('host')}"
        if name not in workers:
            workers[name] = {k: worker.get(k) for k in ("name", "host", "address", "resources",
                                                         "versions")}
            self._write_manifest()


#: Result keys not copied into the results table: the solution (its nodes) stays in the event.
POINT_ROW_LEFT_OUT = frozenset({"solution"})


def point_row(event: SweepPointDone) -> dict[str, Any]:
    """The results-table row of a point: its coordinates plus the scalars of its result."""
    row: dict[str, Any] = {"kind": "sweep_point"}
    for key in ("index", "key", "sut", "nodes", "density", "timeout_s", "seed", "status",
                "error", "wall_s"):
        row[key] = getattr(event, key)
    if event.worker:  # measured on a cluster worker: which one (the event keeps the rest)
        row["worker"] = event.worker.get("name")
        row["worker_host"] = event.worker.get("host")
    for key, value in event.result.items():
        if key not in row and key not in POINT_ROW_LEFT_OUT:
            row[key] = json.dumps(value) if isinstance(value, list | dict) else value
    return row


@dataclass
class SweepRecord:
    """A sweep's run folder read back."""

    path: Path
    spec: SweepSpec
    manifest: dict[str, Any]
    #: The last event of every point on disk, by key (only keys of this sweep).
    done: dict[str, SweepPointDone]
    status: str
    bad_lines: int
    sessions: int

    @property
    def total(self) -> int:
        """How many points the sweep has."""
        return len(self.spec.points())

    @property
    def failed(self) -> int:
        """Points recorded as failed."""
        return sum(p.status != "ok" for p in self.done.values())


def is_sweep(manifest: dict[str, Any]) -> bool:
    """Whether a run folder's manifest is a sweep's."""
    return manifest.get("procedure") == PROCEDURE


def read_sweep(path: str | Path, *, check_running: bool = True) -> SweepRecord:
    """Read a sweep's run folder, also one killed in the middle of a point.

    Status: complete, interrupted, failed, incomplete (killed), or running (another process
    holds the folder's lock right now; `check_running=False` skips that check).
    """
    record = load_run(path)
    if not is_sweep(record.manifest) or "sweep" not in record.manifest:
        raise ConfigError(f"{record.path} is not a sweep run folder "
                          f"(procedure {record.manifest.get('procedure')!r})",
                          hint="pass a folder that `rig sweep qubo` created")
    spec = SweepSpec.from_snapshot(record.manifest["sweep"], str(record.path / "manifest.json"))
    keys = {p.key for p in spec.points()}
    done: dict[str, SweepPointDone] = {}
    sessions, session_open, last_status = 0, False, None
    for event in record.events:
        if isinstance(event, RunStarted | SweepResumed):
            sessions, session_open = sessions + 1, True
        elif isinstance(event, RunFinished):
            session_open, last_status = False, event.status
        elif isinstance(event, SweepPointDone) and event.key in keys:
            done[event.key] = event
    # A session without run_finished was killed (kill -9, power cut): incomplete, whatever an
    # earlier session said. "complete" also needs every point on disk.
    status = INCOMPLETE if session_open or last_status is None else last_status
    if status == "complete" and len(done) < len(keys):
        status = INCOMPLETE
    if session_open and check_running and _locked(record.path):
        status = RUNNING
    return SweepRecord(record.path, spec, record.manifest, done, status, record.bad_lines,
                       sessions)


#: Below this share of its solve on the CPU, a CPU SUT's point is flagged as contended: the host
#: was busy (other workers, other programs), so the point understates the SUT.
CONTENDED_CPU_SHARE = 0.9


def cpu_share(point: dict[str, Any]) -> float | None:
    """The share of a point's solve its solver had the CPU for (`solver_cpu_s` over
    `elapsed_s`); None where not measured (SUTs other than the CPU ones, older runs)."""
    cpu_s, elapsed = point.get("solver_cpu_s"), point.get("elapsed_s")
    if cpu_s is None or not elapsed:
        return None
    return float(cpu_s) / float(elapsed)


def contended(point: dict[str, Any]) -> bool:
    """Whether the point's solver had the CPU for under `CONTENDED_CPU_SHARE` of its solve."""
    share = cpu_share(point)
    return share is not None and share < CONTENDED_CPU_SHARE


def summarize(spec: SweepSpec, done: dict[str, SweepPointDone]) -> dict[str, Any]:
    """Mean gap and mean power over seeds, per (sut, nodes, density, timeout).

    Per row, `power_seeds` counts the seeds with power and `power_status` says why the others
    have none (None when every measured seed has it); `energy_j_mean` is the mean energy of the
    seeds with power and `power_source` what measured it (sources joined by "; "); `contended`
    counts the seeds whose solver had the CPU for under `CONTENDED_CPU_SHARE` of the solve (a
    busy host: they understate the SUT). `power` sums it up over the sweep: how many measured
    points had power, from which sources, and each reason with the points it applies to.
    """
    rows = []
    row_budget_list: list[Budget] = []
    for sut, nodes, density, timeout in itertools.product(
        spec.suts, spec.nodes, spec.densities, spec.timeouts
    ):
        keys = [SweepPoint(0, sut, nodes, density, timeout, s).key for s in spec.seeds]
        points = [done[k] for k in keys if k in done]
        ok = [p for p in points if p.status == "ok"]
        gaps = [float(g) for p in ok if (g := p.result.get("gap")) is not None]
        powers = [float(w) for p in ok if (w := p.result.get("power_w")) is not None]
        energies = [float(e) for p in ok if p.result.get("power_w") is not None
                    and (e := p.result.get("energy_j")) is not None]
        sources = sorted({_power_source(p) for p in ok if p.result.get("power_w") is not None})
        statuses = sorted({_no_power_reason(p) for p in ok if p.result.get("power_w") is None})
        rows.append({
            "sut": sut, "nodes": nodes, "density": density, "timeout_s": timeout,
            "seeds": len(ok), "seeds_expected": len(spec.seeds),
            "failed": len(points) - len(ok),
            "contended": sum(contended(p.result) for p in ok),
            "gap_mean": float(np.mean(gaps)) if gaps else None,
            # The spec averages power over the seeds; seeds without power are left out and
            # counted, never taken as zero.
            "power_w_mean": float(np.mean(powers)) if powers else None,
            "power_seeds": len(powers),
            "power_status": "; ".join(statuses) if statuses else None,
            "energy_j_mean": float(np.mean(energies)) if energies else None,
            "power_source": "; ".join(sources) if sources else None,
            "tts": _tts_over_seeds(ok),
        })
        budgets = row_budgets(powers, energies, sources)
        if budgets:  # the GUM budget of the row's mean power and energy (rig.qubo.uncertainty)
            rows[-1]["uncertainty"] = {k: b.to_json() for k, b in budgets.items()}
            row_budget_list.extend(
                dataclasses.replace(b, figure=f"{sut} n{nodes} d{density:g} t{timeout:g}s "
                                              f"{b.figure}")
                for b in budgets.values())
    checks = []
    if spec.max_relative_uncertainty is not None:
        checks.append(bound_check(row_budget_list, spec.max_relative_uncertainty))
    return {
        "points_total": len(spec.points()),
        "points_done": len(done),
        "points_failed": sum(p.status != "ok" for p in done.values()),
        "points_contended": sum(p.status == "ok" and contended(p.result)
                                for p in done.values()),
        "rows": rows,
        "largest_solved": _largest_solved(spec, done),
        "power": power_overview(done),
        "checks": checks,
    }


def bound_check(budgets: list[Budget], bound: float) -> dict[str, Any]:
    """`uncertainty within bound`: every row's mean power and energy within U/|x| <= `bound`
    ([sweep] max_relative_uncertainty); an incomplete budget never passes; not applicable
    (ok None) where no row has power."""
    name = "uncertainty within bound"
    if not budgets:
        return {"name": name, "ok": None,
                "detail": f"not applicable: no row has power (bound {bound:.3g})"}
    beyond = beyond_bound(budgets, bound)
    if beyond:
        return {"name": name, "ok": False,
                "detail": f"{len(beyond)} of {len(budgets)} figures beyond U/|value| <= "
                          f"{bound:.3g} (95 %): " + "; ".join(beyond)}
    return {"name": name, "ok": True,
            "detail": f"all {len(budgets)} figures within U/|value| <= {bound:.3g} (95 %)"}


def sweep_summary(path: str | Path) -> dict[str, Any]:
    """A sweep folder: status, points done, and gap, power and time to solution per point."""
    record = read_sweep(path)
    summary = summarize(record.spec, record.done)
    manifest = record.manifest
    data: dict[str, Any] = {
        "run": str(record.path),
        "status": record.status,
        "procedure": manifest.get("procedure"),
        "simulated": bool(manifest.get("simulated")),
        "started_at": manifest.get("started_at"),
        "finished_at": manifest.get("finished_at"),
        "resumes": len(manifest.get("resumes", [])),
        "rig_version": (manifest.get("software") or {}).get("neurobench-rig"),
        "points_done": summary["points_done"],
        "points_total": summary["points_total"],
        "points_failed": summary["points_failed"],
        "points_contended": summary["points_contended"],
        "bad_lines": record.bad_lines,
        "sweep": record.spec.snapshot(),
        "summary": summary["rows"],
        "largest_solved": summary["largest_solved"],
        "power": summary["power"],
        # `uncertainty within bound` when the sweep sets max_relative_uncertainty
        "checks": summary["checks"],
    }
    if manifest.get("error"):
        data["error"] = manifest["error"]
    _, damaged = read_manifest(record.path / MANIFEST)
    if damaged is not None:
        data["manifest_error"] = damaged
    return data


def _no_power_reason(point: SweepPointDone) -> str:
    """Why a measured point has no power (its power_status), never empty."""
    return str(point.result.get("power_status") or "power unavailable: no reason recorded")


def _power_source(point: SweepPointDone) -> str:
    """What measured a point's power (recorded since the Loihi profiler was added; before,
    the source is only in the power status: "measured (rapl)")."""
    source = point.result.get("power_source")
    if source:
        return str(source)
    status = str(point.result.get("power_status") or "")
    return status[len("measured ("):-1] if status.startswith("measured (") else "not recorded"


def power_overview(done: dict[str, SweepPointDone]) -> dict[str, Any]:
    """Which measured points had power: {"points", "with_power", "sources": {source: count},
    "without": {reason: count}}."""
    ok = [p for p in done.values() if p.status == "ok"]
    without: dict[str, int] = {}
    sources: dict[str, int] = {}
    for p in ok:
        if p.result.get("power_w") is None:
            reason = _no_power_reason(p)
            without[reason] = without.get(reason, 0) + 1
        else:
            source = _power_source(p)
            sources[source] = sources.get(source, 0) + 1
    return {"points": len(ok), "with_power": len(ok) - sum(without.values()),
            "sources": dict(sorted(sources.items())), "without": dict(sorted(without.items()))}


def power_line(power: dict[str, Any], *, reasons: bool = True) -> str:
    """One line for people: "power: measured for 8 of 10 points; 2 without: <why>"."""
    if not power["points"]:
        return "power: no point measured yet"
    line = f"power: measured for {power['with_power']} of {power['points']} points"
    if power.get("sources"):
        line += " by " + ", ".join(power["sources"])
    if power["without"] and reasons:
        line += "; " + "; ".join(f"{n} without: {why}" for why, n in power["without"].items())
    return line


def _tts_over_seeds(ok: list[SweepPointDone]) -> dict[str, dict[str, Any]]:
    """Per gap threshold: how many seeds reached it, and the mean latency (and energy) of those.

    QUBO.md reports nothing for a seed that did not reach a threshold: such seeds are counted,
    never averaged in.
    """
    out: dict[str, dict[str, Any]] = {}
    for p in ok:
        for threshold, hit in (p.result.get("tts") or {}).items():
            entry = out.setdefault(threshold, {"latencies": [], "energies": []})
            if isinstance(hit, dict) and hit.get("latency_s") is not None:
                entry["latencies"].append(float(hit["latency_s"]))
                if hit.get("energy_j") is not None:
                    entry["energies"].append(float(hit["energy_j"]))
    return {
        threshold: {
            "reached": len(e["latencies"]),
            "latency_s_mean": float(np.mean(e["latencies"])) if e["latencies"] else None,
            "energy_j_mean": float(np.mean(e["energies"])) if e["energies"] else None,
            "energy_seeds": len(e["energies"]),
        }
        for threshold, e in out.items()
    }


def _largest_solved(spec: SweepSpec, done: dict[str, SweepPointDone]) -> list[dict[str, Any]]:
    """Per (sut, density): the largest `nodes` of the sweep whose every measured seed, at the
    sweep's longest timeout, found a cost better than the trivial 0 (QUBO.md's criterion for
    the maximum workload size, over the sizes this sweep tried)."""
    timeout = max(spec.timeouts)
    out = []
    for sut, density in itertools.product(spec.suts, spec.densities):
        largest = None
        for nodes in sorted(spec.nodes):
            points = [p for s in spec.seeds
                      if (p := done.get(SweepPoint(0, sut, nodes, density, timeout, s).key))
                      is not None]
            if not points:
                continue
            solved = all(p.status == "ok" and isinstance(p.result.get("cost"), int | float)
                         and p.result["cost"] < 0 for p in points)
            if not solved:
                break
            largest = nodes
        out.append({"sut": sut, "density": density, "timeout_s": timeout, "nodes": largest})
    return out


# -- point functions ---------------------------------------------------------------------------
PointFunction = Callable[[SweepPoint], dict[str, Any]]


def stand_in_point(point: SweepPoint) -> dict[str, Any]:
    """A closed-form stand-in for a fixed-timeout point (tests of the checkpoint logic).

    target = -(nodes // 3) - 1; cost = target + seed % 2; power 1 W + 10 mW per node (none for
    loihi2, to exercise "unavailable"). With `RIG_SWEEP_STAND_IN_HANG_AT=k` it hangs at point
    index k, so a test can kill the process at a known point.
    """
    hang_at = os.environ.get(STAND_IN_HANG_ENV)
    if hang_at is not None and point.index == int(hang_at):
        deadline = time.monotonic() + STAND_IN_HANG_S
        while time.monotonic() < deadline:
            time.sleep(0.05)
        raise RigError(f"stand-in point {point.key} hung for {STAND_IN_HANG_S:.0f} s")
    target = -(point.nodes // 3) - 1
    cost = target + point.seed % 2
    power = None if point.sut == "loihi2" else 1.0 + 0.01 * point.nodes
    return {
        "cost": cost, "target": target, "target_method": "stand-in",
        "gap": (cost - target) / abs(target), "elapsed_s": point.timeout_s,
        "power_w": power,
        "power_status": "stand-in" if power is not None else "power unavailable: stand-in",
        **({"energy_j": power * point.timeout_s, "power_source": "stand-in"}
           if power is not None else {}),
    }


class QuboPointFunction:
    """The real point: generate the workload, find its target, run the fixed-timeout procedure.

    SUTs stay open while consecutive points use them (the order keeps one SUT's points
    together); workloads and targets are cached per workload. Targets already recorded in the run
    folder are reused on resume instead of computed again.
    """

    def __init__(self, spec: SweepSpec, known_targets: dict[tuple, tuple[int, str]] | None = None
                 ) -> None:
        self.spec = spec
        self._targets: dict[tuple, Any] = {}
        self._known = dict(known_targets or {})
        self._workloads: dict[tuple, Any] = {}
        self._sut: Any = None
        self._power: Any = None
        self._sut_name = ""

    def instruments(self) -> dict[str, Any]:
        """The open SUT and power meter: name, what the SUT said it is (a shim's name%/profile%
        replies), the power source; {} before the first point."""
        if self._sut is None:
            return {}
        info = getattr(self._sut, "info", None)
        return {"sut": self._sut.name, "sut_info": None if info is None else plain(info),
                "power_source": getattr(self._power, "source", None)}

    def remember_target(self, workload: tuple, cost: int, method: str) -> None:
        """A target recorded earlier for `workload` (nodes, density, seed): used, not computed."""
        self._known[tuple(workload)] = (int(cost), str(method))

    def __call__(self, point: SweepPoint) -> dict[str, Any]:
        try:
            from rig.qubo.procedure import fixed_timeout_point
        except ImportError as exc:
            raise ConfigError(f"the QUBO procedures cannot be loaded: {exc}",
                              hint="install the qubo extra: pip install -e '.[qubo]'") from exc
        workload = self._workload(point)
        target = self._target(point)
        hyper = self.spec.hyperparameters(point)
        sut, power = self._open(point.sut, hyper)
        result = fixed_timeout_point(sut, workload, point.timeout_s, self.spec.solver_seed,
                                     target, power)
        if hyper is not None:
            result["hyperparameters"] = hyper
        # The SolveResult holds the best state (n booleans); the sweep keeps it as the nodes
        # set to 1 (`solution`, ascending: a few hundred numbers where n booleans would be
        # 100000), so `rig verify` re-evaluates the cost from it against the regenerated graph.
        solve = result.pop("result", None)
        if solve is not None:
            result["solution"] = np.flatnonzero(solve.best_state).tolist()
        return plain(result)

    def _open(self, name: str, hyper: dict[str, Any] | None = None) -> tuple[Any, Any]:
        key = name if hyper is None else f"{name} {json.dumps(hyper, sort_keys=True)}"
        if self._sut is not None and self._sut_name == key:
            return self._sut, self._power
        self.close()
        from rig.qubo.procedure import open_power_meter
        from rig.qubo.suts import open_sut

        options = dict(self.spec.sut_options.get(name, {}))
        if hyper is not None:
            options["hyperparameters"] = hyper
        try:
            self._sut = open_sut(name, **options)
        except TypeError as exc:
            if hyper is None or "hyperparameters" not in str(exc):
                raise
            raise RigError(f"{name} takes no hyperparameters yet, but the sweep's tuning file "
                           f"gives it {hyper}",
                           hint="run the sweep without the tuning file") from exc
        self._sut_name = key
        self._power = open_power_meter(self._sut.power_source)
        return self._sut, self._power

    def _workload(self, point: SweepPoint) -> Any:
        from rig.qubo.workloads import generate

        key = point.workload
        if key not in self._workloads:
            # Keep only the current (nodes, density): big graphs are not held all night.
            if any(k[:2] != key[:2] for k in self._workloads):
                self._workloads.clear()
            self._workloads[key] = generate(*key)
        return self._workloads[key]

    def _target(self, point: SweepPoint) -> Any:
        from rig.qubo.targets import Target, bks

        key = point.workload
        if key not in self._targets:
            if key in self._known:
                cost, method = self._known[key]
                self._targets[key] = Target(cost=int(cost), method=method, state=None)
            else:
                self._targets[key] = bks(*key, use_table=self.spec.targets == "table")
        return self._targets[key]

    def close(self) -> None:
        """Close the open SUT and its power meter (safe to call twice)."""
        sut, power, self._sut, self._power, self._sut_name = self._sut, self._power, None, None, ""
        try:
            if power is not None:
                power.close()
        finally:
            if sut is not None:
                sut.close()


def plain(value: Any) -> Any:
    """JSON-able data: numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if hasattr(value, "__dataclass_fields__"):
        return plain(asdict(value))
    return value


def known_targets(done: dict[str, SweepPointDone]) -> dict[tuple, tuple[int, str]]:
    """Targets recorded by earlier points, by workload (nodes, density, seed)."""
    known: dict[tuple, tuple[int, str]] = {}
    for p in done.values():
        target = p.result.get("target")
        if p.status == "ok" and isinstance(target, int):
            known[(p.nodes, p.density, p.seed)] = (target, str(p.result.get("target_method")))
    return known


# -- running -----------------------------------------------------------------------------------
class PointDispatch(Protocol):
    """Measures points somewhere else (rig/cluster) and hands back their events.

    `run` yields a `SweepPointDone` per finished point (in the order they finish, each point
    once) and other events (notes) to publish; it checks `stop` while it waits and cleans up
    when the generator is closed. `manifest` is what the run folder records about it.
    """

    def run(self, spec: SweepSpec, todo: list[SweepPoint], *, stand_in: bool,
            known: dict[tuple, tuple[int, str]], stop: StopRequest | None
            ) -> Generator[Event, None, None]:
        """Measure `todo`; stand-in points when `stand_in`; `known` targets by workload."""

    def manifest(self) -> dict[str, Any]:
        """Plain data about where the points went (the scheduler's address)."""


@dataclass
class SweepOutcome:
    """How a sweep session ended."""

    run_path: Path
    status: str
    summary: dict[str, Any]
    ran: int
    error: ActionableError | None = None
    #: Measured by the stand-in point function: every number is made up.
    simulated: bool = False


def start_sweep(
    spec: SweepSpec,
    *,
    runs_root: Path,
    point_function: PointFunction | None = None,
    stand_in: bool = False,
    subscribers: Sequence[Callable[[Event], None]] = (),
    stop: StopRequest | None = None,
    dispatch: PointDispatch | None = None,
) -> SweepOutcome:
    """Create a run folder for `spec` and run every point; `stop` (set from another thread)
    ends it like Ctrl-C after the point being measured. With `dispatch` the points are
    measured by it (a cluster) and checkpointed here."""
    if point_function is not None:
        if dispatch is not None:
            raise ConfigError("a custom point function cannot be dispatched to a cluster",
                              hint="use the real or the stand-in point function")
        kind = CUSTOM
    elif stand_in:
        kind, point_function = STAND_IN, stand_in_point
    else:
        kind = REAL
        point_function = None if dispatch is not None else QuboPointFunction(spec)
    store = SweepStore.create(runs_root, "sweep", spec.name)
    total = len(spec.points())
    with _exclusive(store.path):
        bus = _bus(store, subscribers)
        bus.publish(RunStarted(
            run_id=uuid.uuid4().hex, procedure=PROCEDURE, device=", ".join(spec.suts),
            simulated=kind == STAND_IN,
            manifest={"sweep": spec.snapshot(), "points_total": total,
                      "point_function": kind, "run_folder": store.path.name,
                      **({"cluster": dispatch.manifest()} if dispatch is not None else {})},
        ))
        return _run(store, bus, spec, spec.points(), point_function, stop=stop,
                    dispatch=dispatch, stand_in=kind == STAND_IN)


def resume_sweep(
    run_path: str | Path,
    *,
    point_function: PointFunction | None = None,
    retry_failed: bool = False,
    subscribers: Sequence[Callable[[Event], None]] = (),
    stop: StopRequest | None = None,
    dispatch: PointDispatch | None = None,
    warn: Callable[[str], None] | None = None,
) -> SweepOutcome:
    """Run the points of a sweep folder that are not on disk yet, appending to its events;
    with `dispatch` they are measured by it (a cluster), whoever measured the others.

    A damaged manifest.json (unreadable, or without the keys a sweep needs) is rewritten from
    the run_started event of events.jsonl; `warn` is told so, in one line, before it is."""
    run_path = Path(run_path)
    with _exclusive(run_path):
        _terminate_torn_line(run_path / EVENTS)
        _repair_manifest(run_path, warn)
        record = read_sweep(run_path, check_running=False)
        kind = record.manifest.get("point_function", REAL)
        if dispatch is not None and (point_function is not None or kind == CUSTOM):
            raise ConfigError(f"{run_path} was measured with a custom point function, which "
                              "cannot be dispatched to a cluster",
                              hint="resume it from the code that started it")
        if point_function is None and dispatch is None:
            if kind == STAND_IN:
                point_function = stand_in_point
            elif kind == REAL:
                point_function = QuboPointFunction(record.spec, known_targets(record.done))
            else:
                raise ConfigError(f"{run_path} was measured with a custom point function",
                                  hint="resume it from the code that started it")
        done = {k for k, p in record.done.items() if p.status == "ok" or not retry_failed}
        todo = [p for p in record.spec.points() if p.key not in done]
        store = SweepStore(run_path)
        store.manifest = dict(record.manifest)
        store._rows = [point_row(p) for k, p in record.done.items() if k in done]
        bus = _bus(store, subscribers)
        bus.publish(SweepResumed(
            done=len(done), total=record.total, bad_lines=record.bad_lines,
            host=socket.gethostname(), run_id=str(record.manifest.get("run_id") or ""),
            cluster=None if dispatch is None else dispatch.manifest(),
        ))
        return _run(store, bus, record.spec, todo, point_function, already=record.done,
                    stop=stop, dispatch=dispatch, stand_in=kind == STAND_IN,
                    known=known_targets(record.done))


#: What a sweep's manifest.json must hold for `resume_sweep` to use it as it is.
MANIFEST_KEYS: dict[str, type] = {"procedure": str, "sweep": dict}
#: Keys a resume adds to: kept from a damaged manifest only when of their type.
_APPENDED_KEYS: dict[str, type] = {"resumes": list, "workers": dict, "instruments": dict,
                                   "telemetry": dict, "traces": list, "power_sources": list}


def _repair_manifest(run_path: Path, warn: Callable[[str], None] | None) -> None:
    """Rewrite a damaged manifest.json from events.jsonl's run_started (what the run started
    with; the keys the damaged file still holds are kept), after telling `warn`; refuse, with
    the folder untouched, when events.jsonl cannot rebuild it."""
    raw, why = read_manifest(run_path / MANIFEST)  # the file itself, never a rebuilt one
    kept: dict[str, Any] = {}
    if why is None:
        missing = [k for k, kind in MANIFEST_KEYS.items() if not isinstance(raw.get(k), kind)]
        if not missing:
            return
        why = (f"{MANIFEST} is missing" if not (run_path / MANIFEST).exists() else
               f"{MANIFEST} lacks {', '.join(missing)} (or holds the wrong type)")
        kept = {k: v for k, v in raw.items() if isinstance(v, _APPENDED_KEYS.get(k, object))}
    started = next((e for e in load_run(run_path).events if isinstance(e, RunStarted)), None)
    if started is None or started.procedure != PROCEDURE or "sweep" not in started.manifest:
        raise ConfigError(f"{run_path}: {why}, and {EVENTS} holds no sweep run_started to "
                          "rebuild it from; nothing was changed",
                          hint=f"restore {MANIFEST} from a copy of the folder, then resume")
    if warn is not None:
        warn(f"{run_path}: {why}; rewriting it from the run_started event of {EVENTS}")
    when = dt.datetime.fromtimestamp(started.at).astimezone().isoformat(timespec="seconds")
    manifest = {**kept, "run_id": started.run_id, "procedure": started.procedure,
                "device": started.device, "simulated": started.simulated,
                "started_at": when, **started.manifest}
    tmp = run_path / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, run_path / MANIFEST)


def _bus(store: SweepStore, subscribers: Sequence[Callable[[Event], None]]) -> EventBus:
    bus = EventBus()
    bus.subscribe(store)  # first: the checkpoint is on disk before anyone else hears of it
    for sub in subscribers:
        bus.subscribe(sub)
    return bus


def _run(
    store: SweepStore,
    bus: EventBus,
    spec: SweepSpec,
    todo: list[SweepPoint],
    point_function: PointFunction | None,
    already: dict[str, SweepPointDone] | None = None,
    stop: StopRequest | None = None,
    dispatch: PointDispatch | None = None,
    stand_in: bool = False,
    known: dict[tuple, tuple[int, str]] | None = None,
) -> SweepOutcome:
    """Measure `todo` (here in order, or by `dispatch`), one checkpoint per point; finish the
    session however it ends."""
    from rig.run.measure import sigterm_as_interrupt  # the ASC runner's SIGTERM-as-Ctrl-C

    done = dict(already or {})
    status, error, interrupted, ran = "failed", None, False, 0
    if dispatch is not None:
        events = dispatch.run(spec, todo, stand_in=stand_in, known=dict(known or {}), stop=stop)
    else:
        assert point_function is not None
        events = _measure_here(todo, point_function, stop)
    recorded: set[str] = set()
    try:
        with sigterm_as_interrupt():
            for event in events:
                if isinstance(event, SweepPointDone):
                    if event.key in recorded:
                        continue  # a point handed back twice (a cluster) is recorded once
                    recorded.add(event.key)
                bus.publish(event)
                if isinstance(event, SweepPointDone):
                    done[event.key] = event
                    ran += 1
        status = "complete"
    except KeyboardInterrupt:
        status, interrupted = "interrupted", True
    except BENCH_ERRORS as exc:
        status, error = "failed", exc
    except Exception as exc:  # a bug: still close the session so the folder says what happened
        status, error = "failed", RigError(f"{type(exc).__name__}: {exc}")
        raise
    finally:
        with contextlib.suppress(Exception):
            events.close()  # a dispatcher cancels what is still out and disconnects
        close = getattr(point_function, "close", None)
        if close is not None:
            with contextlib.suppress(Exception):
                close()
        summary = summarize(spec, done)
        bus.publish(RunFinished(status=status, summary=summary,
                                error=str(error) if error else None))
    if interrupted:
        raise RunInterrupted(
            f"sweep interrupted after {summary['points_done']} of {summary['points_total']} "
            f"points; resume with: rig sweep resume {store.path}"
        )
    return SweepOutcome(store.path, status, summary, ran, error,
                        simulated=bool(store.manifest.get("simulated")))


def _measure_here(todo: list[SweepPoint], point_function: PointFunction,
                  stop: StopRequest | None) -> Generator[SweepPointDone, None, None]:
    """Measure `todo` in this process, in order: one event per point."""
    for point in todo:
        if stop is not None:
            stop.check()
        started = time.monotonic()
        result, state, why = {}, "ok", None
        try:
            result = plain(point_function(point))
        except ConfigError:
            raise  # bad setup fails every point: stop the sweep
        except BENCH_ERRORS as exc:  # one point failed: record it, the night goes on
            state, why = "failed", str(exc)
        yield point_event(point, status=state, result=result, error=why,
                          wall_s=time.monotonic() - started)


def point_event(point: SweepPoint, *, status: str, result: dict[str, Any], error: str | None,
                wall_s: float, worker: dict[str, Any] | None = None) -> SweepPointDone:
    """The checkpoint event of `point`: its coordinates and how it ended (and, measured on a
    cluster worker, which one)."""
    return SweepPointDone(
        index=point.index, key=point.key, sut=point.sut, nodes=point.nodes,
        density=point.density, timeout_s=point.timeout_s, seed=point.seed,
        status=status, result=result, error=error, wall_s=wall_s, worker=worker,
    )


@contextlib.contextmanager
def _exclusive(run_path: Path) -> Iterator[None]:
    """One rig per sweep folder: two resumes at once would measure points twice.

    flock is released by the kernel when the process dies, so kill -9 never leaves it stale.
    """
    lock = FileLock(run_path / EVENTS)
    try:
        taken = lock.acquire()
    except OSError as exc:
        raise ConfigError(f"{run_path} is not a sweep run folder: {exc}",
                          hint="pass a folder that `rig sweep qubo` created") from exc
    if not taken:
        raise ConfigError(f"{run_path} is being measured by another rig process",
                          hint="wait for it to finish, or stop it first")
    try:
        yield
    finally:
        lock.release()


def _locked(run_path: Path) -> bool:
    """Whether another process holds the folder's lock (it is measuring right now)."""
    return held_elsewhere(run_path / EVENTS)


def _terminate_torn_line(path: Path) -> None:
    """End a torn last line with a newline so appended events start on a line of their own.

    The torn bytes stay (and are counted as a bad line when read); a complete record that only
    missed its newline stays a valid point.
    """
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")
            f.flush()
            os.fsync(f.fileno())
