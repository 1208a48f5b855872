"""The run folder: the unit of truth that `rig show`, reports, the viewer and resume read back.

```
runs/<started>_<procedure>_<device>/
  manifest.json    config snapshot, software versions, instrument settings, host, status
  events.jsonl     every event, appended and flushed as it happens (crash-safe)
  results.parquet  one row per measured run / window / idle span / sample (also results.csv)
  traces/*.jls     raw energy-monitor traces
```

`RunStore` is a subscriber of the event bus. `events.jsonl` is written first and synced, so a run
killed at any point can still be shown with everything it had measured.

A write that fails (a full disk) raises `StorageError` once, which ends the run; later events are
still written if they can be, so the folder keeps everything that reached the disk, and reads
back as incomplete when even `run_finished` could not be written. A run folder keeps some room
(`.reserve`, preallocated) until its run ends and gives it back at the first write that fails:
a disk another program filled to the last block still takes the run's end, naming the disk.
events.jsonl keeps room allocated past its own end too, which nothing else can take: its last
lines, run_finished among them, reach a disk that another program keeps full. A run killed
outright cannot give that room back: each live run holds its `.reserve` locked, and the next run
made in the same runs folder frees the rooms whose lock is gone (`reclaim_room`).
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import datetime as dt
import errno
import fcntl
import functools
import json
import os
import platform
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from rig.errors import ConfigError, NonFiniteError, StorageError
from rig.run.events import (
    Event,
    IdleMeasured,
    InstrumentInfo,
    LatencyRun,
    LedgerAppended,
    QuboMaxSizeMeasured,
    QuboPointMeasured,
    RunFinished,
    RunStarted,
    SampleClassified,
    TelemetryReport,
    TestSetLoaded,
    TraceSaved,
    WindowMeasured,
)
from rig.run.finite import NonFiniteWatch, finite_json, first_non_finite, spelled
from rig.run.ledger import (
    ENDED,
    LEDGER,
    RESUMED,
    STARTED,
    Ledger,
    LedgerHead,
    figures_of,
    run_digests,
)
from rig.traces.space import write_failure

MANIFEST = "manifest.json"
EVENTS = "events.jsonl"
RESULTS_PARQUET = "results.parquet"
RESULTS_CSV = "results.csv"
TRACES = "traces"

#: Room a run folder keeps while its run is going, preallocated, given back when the run ends or
#: at the first write that fails: what the run's end writes (manifest, run_finished, results,
#: ledger entry) then fits on a disk another program filled to the last block.
RESERVE = ".reserve"
RESERVE_BYTES = 1 << 20
#: Room kept allocated past the end of events.jsonl, the file's size unchanged, so that only its
#: own appends use it: the run's last lines, run_finished among them, reach it even on a disk
#: another program keeps full, taking the room the folder gave back (Linux: fallocate with
#: FALLOC_FL_KEEP_SIZE; released when the run ends).
EVENTS_ROOM = 256 << 10

#: Status of a run whose process ended without writing `run_finished` (killed, crashed, power cut).
INCOMPLETE = "incomplete"
#: How `list_runs` lists a folder whose manifest.json cannot be read.
DAMAGED = "damaged"
#: Status of a run the instrument refused once opened (the bench's settings do not fit the
#: instrument found): nothing was powered or measured. What the bench alone shows is refused
#: before a folder exists.
REFUSED = "refused"

_ROW_EVENTS = {
    LatencyRun: "latency_run",
    WindowMeasured: "window",
    IdleMeasured: "idle",
    SampleClassified: "sample",
    QuboPointMeasured: "qubo_point",
    QuboMaxSizeMeasured: "qubo_max_size",
}


def software_versions() -> dict[str, str]:
    """Versions of Python and of every package a measurement depends on."""
    from importlib import metadata  # ~50 ms to import: only a new run needs it

    from rig import rig_version  # the exact build: a checkout's current commit, not its install's

    versions = {"python": sys.version.split()[0], "neurobench-rig": rig_version()}
    for dist in ("numpy", "pyserial", "pyjls", "pyarrow", "rich"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def host_info() -> dict[str, str]:
    """The machine the rig ran on."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or "unknown",
    }


def run_folder_name(procedure: str, device: str, started: dt.datetime) -> str:
    """`2026-11-22T10-15-03_asc_sim`: sortable, and safe on every file system."""
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in device)
    return f"{started.strftime('%Y-%m-%dT%H-%M-%S')}_{procedure}_{safe}"


class RunStore:
    """Writes one run folder from the event stream."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.manifest: dict[str, Any] = {}
        self._events = open(path / EVENTS, "a", encoding="utf-8")  # noqa: SIM115 (kept open)
        _room_past_end(self._events.fileno())
        #: The room kept for the run's end (None: the disk had not that much left).
        self._reserve, self._reserve_fd = _keep_room(path / RESERVE)
        #: An events.jsonl line may be torn (a write failed): the next one starts a line.
        self._torn = False
        #: The folder was removed: not even the run's first line reached the disk.
        self.removed = False
        self._rows: list[dict[str, Any]] = []
        #: The first write that failed (then raised once; later failures pass quietly).
        self.error: StorageError | None = None
        self._writing = EVENTS  # the file being written, for that error
        #: The runs folder's ledger, and its head once this run's last entry is in it.
        self.ledger = Ledger(path.parent)
        self.ledger_head: LedgerHead | None = None
        self._ledger_told = False

    @classmethod
    def create(cls, root: Path, procedure: str, device: str) -> Self:
        """Make a fresh run folder under `root` (never reuses an existing one)."""
        started = dt.datetime.now()
        base = run_folder_name(procedure, device, started)
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create runs folder {root}: {exc}") from exc
        for n in range(1000):
            path = root / (base if n == 0 else f"{base}-{n}")
            try:
                path.mkdir()
                break
            except FileExistsError:
                continue
        (path / TRACES).mkdir()
        reclaim_room(root)
        return cls(path)

    @property
    def traces_dir(self) -> Path:
        """Where raw traces go."""
        return self.path / TRACES

    def __call__(self, event: Event) -> None:
        if event.transient or self.removed:  # a display stream (the trace has the samples)
            return
        if isinstance(event, RunFinished):
            self._give_room_back()  # for the end's files (and not among its digests)
        try:
            self._record(event)
        except OSError as exc:
            self.failed(exc, starting=isinstance(event, RunStarted))
        finally:
            if isinstance(event, RunFinished):
                self.close()

    def failed(self, exc: OSError, *, starting: bool = False) -> None:
        """A write that failed (`exc`): the first raises `StorageError` naming the file, which
        ends the run, and gives back the room kept for the run's end; later ones pass quietly
        (the run is ending: what still fits is kept). Subclasses' own writes come here too.
        A run that could not start (`starting`: recording its run_started; or not one line of
        it on disk) leaves no folder."""
        self._give_room_back()  # the run ends now: its end must fit
        if self.error is not None:
            return
        if starting or self._nothing_on_disk():
            self._remove()
            self.error = StorageError(
                f"{write_failure(exc)}: cannot start the run folder {self.path} (cannot write "
                f"{self._writing}): the run did not start, and its folder was removed",
                hint="free space on that disk or write the runs to another one",
            )
            raise self.error from exc
        self.error = StorageError(
            f"{write_failure(exc)}: cannot write {self._writing} in the run folder "
            f"{self.path}",
            hint="free space on that disk or write the runs to another one; the run stopped "
            "and the folder keeps what reached the disk",
        )
        raise self.error from exc

    def _record(self, event: Event) -> None:
        self._writing = EVENTS
        line = ("\n" if self._torn else "") + event_line(event) + "\n"
        self._torn = True  # until the line is on disk
        self._events.write(line)
        self._events.flush()
        os.fsync(self._events.fileno())
        self._torn = False
        _room_past_end(self._events.fileno())  # what this line used, allocated again
        if isinstance(event, RunStarted):
            self.manifest = {
                "run_id": event.run_id,
                "procedure": event.procedure,
                "device": event.device,
                "simulated": event.simulated,
                **({"emulated": event.emulated} if event.emulated else {}),
                "status": "running",
                "started_at": _iso(event.at),
                "finished_at": None,
                "software": software_versions(),
                "host": host_info(),
                "instruments": {},
                **event.manifest,
            }
            self._write_manifest()
            self._writing = LEDGER
            self.ledger.append(STARTED, self.path, run_id=event.run_id,
                               procedure=event.procedure, device=event.device)
        elif event.kind == "sweep_resumed":  # rig.qubo.sweep.SweepResumed: a new session
            self._writing = LEDGER
            self.ledger.append(RESUMED, self.path,
                               run_id=str(self.manifest.get("run_id") or "") or None)
        elif isinstance(event, InstrumentInfo):
            self.manifest.setdefault("instruments", {})[event.role] = event.info
            if event.info.get("simulated"):  # an instrument said it is a simulator (XyloSim)
                self.manifest["simulated"] = True
            self._write_manifest()
        elif isinstance(event, TestSetLoaded):  # what accuracy is recounted against
            self.manifest["test_set"] = event.test_set
            self._write_manifest()
        elif isinstance(event, TelemetryReport):
            self.manifest.setdefault("telemetry", {})[event.sink] = {
                **event.target, "offered": event.offered, "published": event.published,
                "dropped": event.dropped, "pending": event.pending,
            }
            self._write_manifest()
        elif isinstance(event, TraceSaved):
            self.manifest.setdefault("traces", []).append(
                {"path": event.path, "samples": event.samples, "dropped": event.dropped}
            )
            self._write_manifest()
        elif isinstance(event, RunFinished):
            self.manifest["status"] = event.status
            self.manifest["finished_at"] = _iso(event.at)
            self.manifest["summary"] = event.summary
            if event.error:
                self.manifest["error"] = event.error
            self._writing = RESULTS_PARQUET
            write_results(self.path, self._rows, simulated=bool(self.manifest.get("simulated")),
                          emulated=bool(self.manifest.get("emulated")))
            self._write_manifest()
            self._writing = LEDGER
            self._events.flush()
            self.ledger_head = self.ledger.append(
                ENDED, self.path, run_id=str(self.manifest.get("run_id") or "") or None,
                procedure=self.manifest.get("procedure"), status=event.status,
                figures=figures_of(event.summary), digests=run_digests(self.path))
        row = result_row(event)
        if row is not None:
            self._rows.append(row)

    def _write_manifest(self) -> None:
        self._writing = MANIFEST
        tmp = self.path / (MANIFEST + ".tmp")
        try:
            # Never a NaN or an infinity (JSON has neither): refused naming the field.
            tmp.write_text(finite_json(self.manifest, str(self.path / MANIFEST), indent=2,
                                       default=_json_default) + "\n")
            os.replace(tmp, self.path / MANIFEST)
        except BaseException:
            with contextlib.suppress(OSError):
                tmp.unlink()  # no half-written copy left beside the manifest
            raise

    def _nothing_on_disk(self) -> bool:
        """Whether not one line of the run reached events.jsonl (and no manifest exists)."""
        try:
            return (os.stat(self.path / EVENTS).st_size == 0
                    and not (self.path / MANIFEST).exists())
        except OSError:
            return False

    def _remove(self) -> None:
        """Remove the folder of a run that could not start: nothing could read it back (a
        sweep's resume refused it, an ASC run read back as incomplete with no error); the user
        starts again once there is room."""
        with contextlib.suppress(OSError, ValueError):
            self._events.close()  # its buffered line cannot be written: dropped
        self._give_room_back()
        for name in (EVENTS, MANIFEST, MANIFEST + ".tmp", RESERVE):
            with contextlib.suppress(OSError):
                (self.path / name).unlink()
        with contextlib.suppress(OSError):
            (self.path / TRACES).rmdir()
            self.path.rmdir()
        self.removed = True

    def _give_room_back(self) -> None:
        """Free the room kept for the run's end (safe to call twice)."""
        reserve, self._reserve = self._reserve, None
        if reserve is not None:
            with contextlib.suppress(OSError):
                reserve.unlink()
        fd, self._reserve_fd = self._reserve_fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)  # its lock goes with it

    def finished_events(self) -> list[Event]:
        """Once the run finished: the ledger's new head, for telemetry (`EventBus`)."""
        if self.ledger_head is None or self._ledger_told:
            return []
        self._ledger_told = True
        h = self.ledger_head
        return [LedgerAppended(seq=h.seq, digest=h.digest, run=h.run)]

    def close(self) -> None:
        """Close events.jsonl; safe to call twice (and on a full disk: what fits is kept)."""
        self._give_room_back()
        if not self._events.closed:
            with contextlib.suppress(OSError):
                self._events.flush()
            _room_past_end(self._events.fileno(), release=True)
            with contextlib.suppress(OSError):
                self._events.close()


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 1, 2


@functools.cache
def _fallocate() -> Any:
    """libc's fallocate(2) (Linux), or None."""
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return function


def _room_past_end(fd: int, *, release: bool = False) -> None:
    """Keep `EVENTS_ROOM` bytes allocated past the end of the file `fd`, its size unchanged
    (`release`: free them). Best effort: a full disk, or a system without fallocate, keeps what
    it can."""
    fallocate = _fallocate()
    if fallocate is None:
        return
    with contextlib.suppress(OSError):
        size = os.fstat(fd).st_size
        mode = _FALLOC_FL_KEEP_SIZE | (_FALLOC_FL_PUNCH_HOLE if release else 0)
        fallocate(fd, mode, size, EVENTS_ROOM)
        if release:  # ext4 punches no hole past the end, its truncation frees those blocks
            os.ftruncate(fd, size)


def _keep_room(path: Path) -> tuple[Path | None, int | None]:
    """`RESERVE_BYTES` preallocated at `path`, and the file held open under an exclusive lock
    (the kernel drops it when the run's process ends, however it ends: `reclaim_room` tells a
    killed run's room by it); (None, None), nothing left, where they do not fit."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return None, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another live store keeps this folder's room: it stays theirs
        os.close(fd)
        return None, None
    try:
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        except (OSError, AttributeError) as exc:  # a file system without fallocate: zeros
            if isinstance(exc, OSError) and exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            block = bytes(1 << 16)
            for _ in range(RESERVE_BYTES // len(block)):
                os.write(fd, block)
        return path, fd
    except OSError:
        with contextlib.suppress(OSError):
            path.unlink()
        os.close(fd)
        return None, None


def reclaim_room(root: Path) -> list[Path]:
    """Give back the room that runs killed outright (SIGKILL, a power cut) kept in their
    folders under `root`: the `.reserve` file and the allocation past events.jsonl's end (a
    run that ends, however it fails, gives them back itself). A live run holds its reserve
    locked, so only those whose process is gone are touched. The folders reclaimed."""
    done = []
    for reserve in root.glob(f"*/{RESERVE}"):
        try:
            fd = os.open(reserve, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its run is still going
            os.close(fd)
            continue
        try:
            reserve.unlink()
            with contextlib.suppress(OSError):
                events = os.open(reserve.parent / EVENTS, os.O_WRONLY)
                try:
                    _room_past_end(events, release=True)
                finally:
                    os.close(events)
            done.append(reserve.parent)
        except OSError:
            pass
        finally:
            os.close(fd)
    return done


def event_line(event: Event) -> str:
    """The events.jsonl line of `event` (no newline): telemetry publishes the same bytes."""
    return json.dumps(event.to_record(), default=_json_default)


def result_row(event: Event) -> dict[str, Any] | None:
    """The results-table row for a measurement event, or None for other events."""
    kind = _ROW_EVENTS.get(type(event))
    if kind is None:
        return None
    row: dict[str, Any] = {"kind": kind}
    # The fields as they are: `to_record()` deep-copies every value (dataclasses.asdict),
    # which costs more than reading the whole events file; only a dataclass among them needs
    # its conversion (json.dumps refuses one: TypeError).
    try:
        for key in _field_names(type(event)):
            value = getattr(event, key)
            if isinstance(value, list | tuple | dict):
                row[key] = json.dumps(value)
            elif dataclasses.is_dataclass(value):
                raise TypeError(key)
            else:
                row[key] = value
    except TypeError:
        row = {"kind": kind}
        for key, value in event.to_record().items():
            if key in ("event", "at"):
                continue
            row[key] = json.dumps(value) if isinstance(value, list | tuple | dict) else value
    return row


_ROW_FIELDS: dict[type[Event], tuple[str, ...]] = {}


def _field_names(cls: type[Event]) -> tuple[str, ...]:
    """An event class's fields in order, without `at` (a row's columns; looked up once)."""
    names = _ROW_FIELDS.get(cls)
    if names is None:
        names = _ROW_FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls)
                                         if f.name != "at")
    return names


def write_results(path: Path, rows: list[dict[str, Any]], *, simulated: bool,
                  emulated: bool = False) -> None:
    """results.parquet and results.csv: one row per measurement, union of columns, and on every
    row whether the run's numbers are `simulated` (a virtual bench, a simulator DUT) and whether
    they are `emulated` (the DUT's firmware on an emulator: QEMU), two different things."""
    # Imported here: pyarrow costs ~0.1 s of CPU to import, and most `rig` commands that read
    # run folders never write a table.
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    columns: list[str] = ["kind"]
    for row in rows:
        columns += [k for k in row if k not in columns]
    data = {c: [row.get(c) for row in rows] for c in columns}
    data["simulated"] = [simulated] * len(rows)
    data["emulated"] = [emulated] * len(rows)
    table = pa.table(data) if rows else pa.table({"kind": pa.array([], pa.string())})
    pq.write_table(table, path / RESULTS_PARQUET)
    pacsv.write_csv(table, path / RESULTS_CSV)


@dataclass
class RunRecord:
    """A run folder read back."""

    path: Path
    manifest: dict[str, Any]
    events: list[Event]
    status: str
    finished: RunFinished | None = None
    #: Lines of events.jsonl that could not be read (a torn last line after a crash).
    bad_lines: int = 0
    #: Why manifest.json could not be read (truncated, not JSON, not an object), or None. The
    #: manifest is then rebuilt from the run_started event (what events.jsonl still holds).
    manifest_error: str | None = None
    _rows: list[dict[str, Any]] | None = field(default=None, repr=False, compare=False)

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The results-table row of each measurement event (`result_row`), made on first use:
        most readers of a run (`rig verify`, `rig analyze`) never look at them."""
        if self._rows is None:
            self._rows = [r for r in (result_row(e) for e in self.events) if r is not None]
        return self._rows

    @property
    def damaged(self) -> bool:
        """Whether manifest.json is there but unreadable."""
        return self.manifest_error is not None


def load_run(path: str | Path, *,
             read: tuple[dict[str, Any], str | None] | None = None) -> RunRecord:
    """Read a run folder; a run without `run_finished` is reported as incomplete.
    `read`: `read_manifest` of its manifest.json when the caller has it already."""
    path = Path(path)
    if not (path / EVENTS).is_file() and not (path / MANIFEST).is_file():
        raise ConfigError(
            f"{path} is not a run folder (no {MANIFEST} or {EVENTS})",
            hint="pass a folder under runs/ (the measure command prints it)",
        )
    manifest, manifest_error = (read_manifest(path / MANIFEST) if read is None
                                else (dict(read[0]), read[1]))
    events: list[Event] = []
    bad = 0
    if (path / EVENTS).is_file():
        text = (path / EVENTS).read_text(encoding="utf-8", errors="replace")
        watch = NonFiniteWatch()  # only a record that read a NaN or inf is searched for it
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            watch.seen = False
            try:
                record = watch.loads(line)
                events.append(Event.from_record(record))
            except (json.JSONDecodeError, TypeError):
                bad += 1
                continue
            if watch.seen:
                _refuse_non_finite(path / EVENTS, number, record)
    started = next((e for e in events if isinstance(e, RunStarted)), None)
    finished = next((e for e in reversed(events) if isinstance(e, RunFinished)), None)
    status = finished.status if finished else INCOMPLETE
    if started is not None and not manifest:
        manifest = {"procedure": started.procedure, "device": started.device,
                    "simulated": started.simulated, "started_at": _when(started.at),
                    **({"emulated": started.emulated} if started.emulated else {}),
                    "finished_at": _when(finished.at) if finished else None,
                    **started.manifest}
    return RunRecord(path, manifest, events, status, finished, bad, manifest_error)


def read_manifest(path: Path) -> tuple[dict[str, Any], str | None]:
    """manifest.json as a dict, and why it could not be read (None when it could, or when there
    is no such file: `({}, None)`)."""
    if not path.is_file():
        return {}, None
    watch = NonFiniteWatch()
    try:
        manifest = watch.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        return {}, f"{path.name} cannot be read ({exc.strerror or exc})"
    except UnicodeDecodeError:
        return {}, f"{path.name} is not UTF-8 text (overwritten or corrupted)"
    except json.JSONDecodeError as exc:
        return {}, f"{path.name} is truncated or not JSON ({exc})"
    if not isinstance(manifest, dict):
        return {}, f"{path.name} holds a JSON {type(manifest).__name__}, not an object"
    found = first_non_finite(manifest) if watch.seen else None
    if found is not None:  # JSON has no NaN: edited or damaged (the rig never writes one)
        return {}, f"{path.name} holds {spelled(found[1])} at {found[0]}, not a finite number"
    return manifest, None


def _refuse_non_finite(path: Path, number: int, record: dict[str, Any]) -> None:
    """Raise NonFiniteError naming the line, the event and the field of the first NaN or
    infinity in one events.jsonl record (JSON has neither: the file was edited or damaged)."""
    found = first_non_finite({k: v for k, v in record.items() if k != "event"})
    if found is None:
        return
    where, value = found
    index = record.get("index")
    event = f"{record.get('event', '?')} event" + (
        f" (index {index})" if isinstance(index, int) and not isinstance(index, bool) else "")
    raise NonFiniteError(
        f"{path} line {number}: {event}: {where} is {spelled(value)}, not a finite number",
        hint="JSON has no NaN or Infinity, so the file was edited or damaged: copy the run "
             "folder again from where it was recorded, or measure again")


def _first_event(path: Path) -> dict[str, Any]:
    """The first record of events.jsonl (run_started), or {} when it cannot be read."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            record = json.loads(f.readline())
    except (OSError, json.JSONDecodeError):
        return {}
    return record if isinstance(record, dict) and record.get("event") == "run_started" else {}


def list_runs(root: str | Path) -> list[dict[str, Any]]:
    """The run folders directly under `root`, newest first, from their manifests only (cheap:
    no events are read). Status "running" is what the manifest says: the run may be going on
    in another process, or was killed (`load_run` then calls it incomplete). A folder whose
    manifest cannot be read is listed as "damaged" (`damaged` says why), with what the first
    line of its events.jsonl says."""
    root = Path(root)
    out: list[dict[str, Any]] = []
    for manifest_path in root.glob(f"*/{MANIFEST}"):
        m, why = read_manifest(manifest_path)
        if why is not None:
            first = _first_event(manifest_path.parent / EVENTS)
            m = {"procedure": first.get("procedure"), "device": first.get("device"),
                 "simulated": first.get("simulated"), "status": DAMAGED,
                 "started_at": _when(first.get("at"))}
        out.append({
            "path": manifest_path.parent,
            "started_at": str(m.get("started_at") or ""),
            "procedure": str(m.get("procedure") or "?"),
            "device": str(m.get("device") or "?"),
            "status": str(m.get("status") or INCOMPLETE),
            "simulated": bool(m.get("simulated")),
            "damaged": why,
        })
    out.sort(key=lambda r: (r["started_at"], r["path"].name), reverse=True)
    return out


def _iso(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


def _when(at: Any) -> str | None:
    """An event's time stamp as ISO text; None when it is not a usable time."""
    try:
        return _iso(float(at))
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
