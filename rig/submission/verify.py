"""`rig verify`: check a bundle on any machine with the rig installed, offline.

In order: the envelope's signature (by the given key, else by the bundle's own signer.pub,
which proves integrity only); every subject's digest, and no file that is not a subject; each
ledger span's chain; each bundled run against its ledger entries (its files' digests as they
were when it ended); the runs the ledger has between the bundled ones that the bundle lacks
(named with status and figures: visible, not forbidden); each run re-derived from its raw
samples (`rig.submission.rederive`); the report regenerated from the bundled runs and its
results.json compared number by number.

`BundleError` (exit 2): not a bundle, unreadable. Every other finding is a `Check`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from rig.errors import RigError
from rig.run.ledger import ENDED, STARTED, Entry, LedgerError, read_entries, verify_chain
from rig.submission.bundle import ENVELOPE, LEDGERS, REPORT, RUNS, SIGNER, TEST_SETS
from rig.submission.checks import Check
from rig.submission.statement import load_public_key, open_envelope

#: Relative difference under which a regenerated report number equals the bundled one.
REPORT_TOLERANCE = 1e-9
#: results.json keys that say when and where a report was made, not what it found.
_CIRCUMSTANTIAL = {"generated_at", "rig_version", "system_file", "path"}


class BundleError(RigError):
    """Not a bundle, or one that cannot be read (exit 2)."""

    exit_code = 2


@dataclass
class Verification:
    """Everything `verify_bundle` found."""

    path: Path
    checks: list[Check] = field(default_factory=list)
    #: Runs the ledger spans hold that the bundle lacks: folder, status, figures.
    left_out: list[dict[str, Any]] = field(default_factory=list)
    key_id: str = ""
    key_given: bool = False
    runs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok is not False for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]

    def to_json(self) -> dict[str, Any]:
        return {"bundle": str(self.path), "ok": self.ok, "key_id": self.key_id,
                "key_given": self.key_given, "runs": self.runs,
                "failed": [c.item if c.run is None else f"{c.run}: {c.item}"
                           for c in self.failed],
                "left_out": self.left_out, "checks": [c.to_json() for c in self.checks]}


def verify_bundle(path: Path, *, key: Path | None = None, head: str | None = None,
                  progress: Callable[[str], None] | None = None) -> Verification:
    """Verify the bundle at `path` (module docstring). `head`: a ledger head as the rig's
    broker holds it ("SEQ:DIGEST"), which the bundle's span must agree with."""
    say = progress or (lambda _t: None)
    out = Verification(Path(path), key_given=key is not None)
    try:
        z = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise BundleError(f"{path} is not a bundle: {exc}",
                          hint="give the file `rig bundle --out` wrote") from None
    with z, tempfile.TemporaryDirectory(prefix="rig-verify-") as tmp:
        names = set(z.namelist())
        if ENVELOPE not in names:
            raise BundleError(f"{path} is not a bundle: it holds no {ENVELOPE}",
                              hint="give the file `rig bundle --out` wrote")
        try:
            envelope = json.loads(z.read(ENVELOPE))
        except (ValueError, zipfile.BadZipFile, OSError) as exc:
            raise BundleError(f"{path}: {ENVELOPE} cannot be read ({exc})") from None

        say("checking the signature")
        statement = _signature(out, z, envelope, key)
        if statement is None:
            return out  # nothing the statement says can be trusted
        subjects = {s.get("name"): (s.get("digest") or {}).get("sha256")
                    for s in statement.get("subject", []) if isinstance(s, dict)}
        predicate = statement.get("predicate") or {}

        say("checking every file's digest")
        root = Path(tmp)
        _digests(out, z, names, subjects, root)

        say("checking the ledger")
        runs = sorted({PurePosixPath(n).parts[1] for n in subjects
                       if n and n.startswith(f"{RUNS}/") and len(PurePosixPath(n).parts) > 2})
        out.runs = runs
        entries = _ledgers(out, root, predicate, runs)
        if head is not None:
            out.checks.append(_head(entries, head))

        labels = _labels(root)
        for checks in rederive_runs([root / RUNS / run for run in runs], labels, say):
            out.checks += checks

        if (root / REPORT / "results.json").is_file():
            say("regenerating the report from the bundled runs")
            out.checks += _report(root, runs)
        elif any(n.startswith(f"{REPORT}/") for n in subjects if n):
            out.checks.append(Check("report regenerated", False,
                                    f"the bundle's {REPORT}/ holds no results.json"))
    return out


# -- signature and digests --------------------------------------------------------------------
def _signature(out: Verification, z: zipfile.ZipFile, envelope: Any, key: Path | None
               ) -> dict[str, Any] | None:
    try:
        if key is not None:
            try:
                data = Path(key).read_bytes()
            except OSError as exc:
                raise BundleError(f"cannot read the key {key}: {exc.strerror or exc}",
                                  hint="give the NAME.pub of the key the lab published") \
                    from None
            public = load_public_key(data, str(key))
            whose = f"the given key {key}"
        else:
            if SIGNER not in z.namelist():
                raise ValueError(f"the bundle holds no {SIGNER} and no --key was given")
            public = load_public_key(z.read(SIGNER), f"the bundle's {SIGNER}")
            whose = f"the bundle's own {SIGNER} (no --key: this shows the bundle is "\
                    "unchanged since it was sealed, not who sealed it)"
        opened = open_envelope(envelope, public)
    except ValueError as exc:
        out.checks.append(Check("signature", False, str(exc)))
        return None
    out.key_id = opened.key_id
    out.checks.append(Check("signature", True, f"signed by key {opened.key_id[:16]}…, "
                            f"checked with {whose}"))
    return opened.statement


def _digests(out: Verification, z: zipfile.ZipFile, names: set[str],
             subjects: dict[Any, Any], root: Path) -> None:
    """Every subject present with its digest; every other file (but the envelope and the
    signer's key) named; extract the good ones under `root`."""
    bad, missing = [], []
    for name, want in sorted(subjects.items(), key=lambda kv: str(kv[0])):
        if not isinstance(name, str) or not _safe(name):
            bad.append(f"{name!r} (not a plain relative path)")
            continue
        if name not in names:
            missing.append(name)
            continue
        h = hashlib.sha256()
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        with z.open(name) as src, open(target, "wb") as dst:
            while block := src.read(1 << 20):
                h.update(block)
                dst.write(block)
        if h.hexdigest() != want:
            bad.append(name)
    extra = sorted(names - set(subjects) - {ENVELOPE, SIGNER})
    problems = ([f"{n}: digest differs from the statement's" for n in bad]
                + [f"{n}: listed in the statement, missing from the bundle" for n in missing]
                + [f"{n}: in the bundle, not in the statement" for n in extra])
    out.checks.append(Check(
        "file digests", not problems,
        "; ".join(problems) if problems else f"all {len(subjects)} files match the statement"))


def _safe(name: str) -> bool:
    p = PurePosixPath(name)
    return not p.is_absolute() and ".." not in p.parts and bool(p.parts)


# -- the ledger -----------------------------------------------------------------------------
def _ledgers(out: Verification, root: Path, predicate: dict[str, Any], runs: list[str]
             ) -> list[Entry]:
    files = sorted((root / LEDGERS).glob("*.jsonl")) if (root / LEDGERS).is_dir() else []
    if not files:
        out.checks.append(Check("ledger chain", False, "the bundle holds no ledger span"))
        return []
    entries: list[Entry] = []
    for f in files:
        try:
            span = list(read_entries(f.read_bytes(), f"{LEDGERS}/{f.name}"))
        except LedgerError as exc:
            out.checks.append(Check("ledger chain", False, str(exc)))
            return entries
        problems = verify_chain(span)
        out.checks.append(Check(
            "ledger chain", not problems,
            "; ".join(problems) if problems else
            f"{LEDGERS}/{f.name}: entries {span[0].seq}-{span[-1].seq} chained "
            f"(last digest {span[-1].digest[:16]}…; compare with the rig's retained "
            f"neurobench/<rig>/ledger on its broker)" if span else f"{f.name} is empty"))
        entries += span
    for run in runs:
        out.checks.append(_run_in_ledger(root / RUNS / run, run, entries))
    bundled = set(runs)
    ended = {e.run: e for e in entries if e.event == ENDED}
    for name in sorted({e.run for e in entries} - bundled):
        end = ended.get(name)
        out.left_out.append({
            "run": name, "status": end.data.get("status") if end else "interrupted (no end "
            "entry: killed or still running)",
            "figures": end.data.get("figures", {}) if end else {},
            "procedure": (end.data if end else next(e.data for e in entries if e.run == name)
                          ).get("procedure")})
    return entries


def _head(entries: list[Entry], head: str) -> Check:
    """The bundle's span against a head the broker holds: the entry of that sequence number
    must have that digest (a ledger rewritten after the head was published does not)."""
    seq_text, _, digest = head.partition(":")
    try:
        seq = int(seq_text)
    except ValueError:
        raise BundleError(f"--head {head!r} is not SEQ:DIGEST",
                          hint="copy seq and digest from the rig's retained "
                               "neurobench/<rig>/ledger message") from None
    found = [e for e in entries if e.seq == seq]
    if not found:
        seqs = sorted(e.seq for e in entries)
        return Check("ledger head from the broker", None,
                     f"entry {seq} is outside the bundle's span "
                     f"({seqs[0] if seqs else '-'}..{seqs[-1] if seqs else '-'}): not compared")
    ok = found[0].digest == digest.strip().lower()
    return Check("ledger head from the broker", ok,
                 f"entry {seq} has digest {found[0].digest[:16]}…"
                 + ("" if ok else f", the broker holds {digest[:16]}…: the ledger was "
                    "rewritten after that head was published"))


def _run_in_ledger(folder: Path, run: str, entries: list[Entry]) -> Check:
    from rig.run.ledger import run_digests

    started = [e for e in entries if e.run == run and e.event == STARTED]
    ended = [e for e in entries if e.run == run and e.event == ENDED]
    if not started or not ended:
        return Check("run in the ledger", False, f"the ledger span has no "
                     f"{'started' if not started else 'ended'} entry for it", run)
    recorded = ended[-1].data.get("digests") or {}
    now = run_digests(folder)
    changed = sorted(k for k in set(now) | set(recorded) if now.get(k) != recorded.get(k))
    if changed:
        return Check("run in the ledger", False,
                     f"{', '.join(changed)} differ from the digests of ledger entry "
                     f"{ended[-1].seq} (written when the run ended)", run)
    return Check("run in the ledger", True, f"entries {started[0].seq} and {ended[-1].seq}; "
                 f"its {len(now)} result files are as they were when it ended", run)


# -- re-derivation ----------------------------------------------------------------------------
def _labels(root: Path) -> dict[str, Any]:
    import numpy as np

    out = {}
    folder = root / TEST_SETS
    for f in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            out[f.stem] = np.asarray(json.loads(f.read_text()), dtype=np.int64)
        except (ValueError, TypeError):
            continue  # its digest matched the statement: said by the run's own check
    return out


#: Runs re-derived at once, at most: each thread reads its run's trace with pyjls and sums it
#: with numpy, both of which let the others run meanwhile (they release the GIL).
MAX_WORKERS = 4
#: The GIL's switch interval while runs are re-derived together (`rederive_runs`).
SWITCH_INTERVAL_S = 0.0005
#: A trace read for re-deriving takes about its file's size in memory (float32 samples as
#: stored), and its sums some more: this many times the file's size, to be safe.
_TRACE_IN_MEMORY = 2.0


def rederive_runs(folders: list[Path], labels: dict[str, Any],
                  progress: Callable[[str], None] | None = None) -> list[list[Check]]:
    """Each run folder re-derived from its raw samples (`_rederive`), in `folders`' order,
    `rederive_workers(folders)` at a time on threads. `labels`: test-set labels by their
    digest. `progress` is called from those threads as each run begins."""
    from rig.traces.files import one_reader_per_trace

    say = progress or (lambda _t: None)

    workers = rederive_workers(folders)

    go = threading.Event()

    def one(folder: Path) -> list[Check]:
        go.wait()
        say(f"re-deriving {folder.name} from its raw samples")
        if workers == 1:  # the trace's signals may come in on two threads
            return _rederive(folder, labels)
        with one_reader_per_trace():  # the runs keep the CPUs busy already
            return _rederive(folder, labels)

    if workers == 1:
        go.set()
        return [one(folder) for folder in folders]
    # A thread back from pyjls or numpy (which ran without the GIL) waits for the GIL until
    # the thread running Python gives it up, at the latest after the switch interval: 5 ms
    # by default, about one small run's whole re-derivation. Shorter while runs share it.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(min(interval, SWITCH_INTERVAL_S))
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="rig-verify") as pool:
            # The largest traces first, so that a long one does not start last.
            order = sorted(range(len(folders)), key=lambda k: -_trace_bytes(folders[k]))
            # All submitted before any starts: the first to start would hold the GIL while
            # the next thread is made (one CPU idle for the first few ms).
            try:
                futures = {k: pool.submit(one, folders[k]) for k in order}
            finally:
                go.set()  # never leaves a submitted run waiting
            return [futures[k].result() for k in range(len(folders))]
    finally:
        sys.setswitchinterval(interval)


def rederive_workers(folders: list[Path]) -> int:
    """How many runs `rederive_runs` re-derives at once: one per CPU (up to `MAX_WORKERS`),
    fewer where the largest traces read together would take over half the memory available
    (one at a time where that is not known)."""
    from rig.traces.analysis.dot import usable_cpus

    n = min(MAX_WORKERS, usable_cpus(), len(folders))
    if n <= 1:
        return 1
    available = _available_memory()
    if available is None:
        return 1
    largest = sorted((_trace_bytes(f) for f in folders), reverse=True)
    while n > 1 and _TRACE_IN_MEMORY * sum(largest[:n]) > available / 2:
        n -= 1
    return n


def _trace_bytes(folder: Path) -> int:
    """The size of a run folder's traces on disk (0 without any)."""
    try:
        return sum(p.stat().st_size for p in (folder / "traces").glob("*.jls"))
    except OSError:
        return 0


def _available_memory() -> int | None:
    """Bytes of memory available to start new work without swapping (Linux's MemAvailable),
    else free pages where the system tells them, else None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def _rederive(folder: Path, labels: dict[str, Any]) -> list[Check]:
    from rig.run.store import load_run, read_manifest
    from rig.submission import rederive

    manifest, why = read_manifest(folder / "manifest.json")
    run = folder.name
    if why is not None:
        return [Check("manifest readable", False, why, run)]
    procedure = manifest.get("procedure")
    try:
        if procedure == "asc":
            want = str((manifest.get("test_set") or {}).get("sha256_labels") or "")
            # The manifest as read here (parsing it again cost a tenth of a small run's time).
            record = load_run(folder, read=(manifest, None))
            return rederive.asc_checks(folder, labels.get(want), record=record)
        return rederive.qubo_checks(folder)
    except RigError as exc:
        return [Check("re-derived from the raw samples", False, exc.message, run)]


# -- the report -------------------------------------------------------------------------------
def _report(root: Path, runs: list[str]) -> list[Check]:
    from rig.report.writer import write_report

    bundled = json.loads((root / REPORT / "results.json").read_text())
    named = [Path(str(r.get("path", ""))).name for r in bundled.get("runs", [])
             if isinstance(r, dict)]
    missing = sorted(set(named) - set(runs))
    if missing:
        return [Check("report regenerated", False, "the report is made from run(s) the "
                      f"bundle lacks: {', '.join(missing)}")]
    again_dir = root / "regenerated-report"
    try:
        # Only its results.json is compared: no figures drawn (~0.7 s a system).
        write_report([root / RUNS / n for n in named], again_dir, formats=("md",),
                     figures=False)
    except RigError as exc:
        return [Check("report regenerated", False, f"the report cannot be regenerated from "
                      f"the bundled runs: {exc.message}")]
    again = json.loads((again_dir / "results.json").read_text())
    shutil.rmtree(again_dir, ignore_errors=True)
    differences = list(_differences(_by_run(bundled), _by_run(again), ""))
    return [Check(
        "report regenerated", not differences,
        ("results.json differs from the one regenerated from the bundled runs: "
         + "; ".join(differences[:8]) + (f" (and {len(differences) - 8} more)"
                                          if len(differences) > 8 else ""))
        if differences else "every number of results.json equals the regenerated report's")]


def _by_run(results: dict[str, Any]) -> dict[str, Any]:
    """results.json with runs keyed by folder name (paths differ between machines)."""
    out = {k: v for k, v in results.items() if k not in ("runs", "report")}
    out["runs"] = {Path(str(r.get("path", ""))).name: r for r in results.get("runs", [])
                   if isinstance(r, dict)}
    out["systems"] = [{k: v for k, v in s.items() if k != "runs"}
                      for s in results.get("systems", []) if isinstance(s, dict)]
    return out


def _differences(a: Any, b: Any, where: str) -> Iterator[str]:
    """Where two JSON values differ: numbers beyond `REPORT_TOLERANCE`, anything else unequal;
    keys that say when and where a report was made are skipped."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if key in _CIRCUMSTANTIAL and where != ".runs":  # under .runs: folder names
                continue
            if key not in a or key not in b:
                yield f"{where}.{key}: only in the {'bundled' if key in a else 'regenerated'}"
                continue
            yield from _differences(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            yield f"{where}: {len(a)} items, regenerated {len(b)}"
            return
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _differences(x, y, f"{where}[{i}]")
    elif _number(a) and _number(b):
        x, y = float(a), float(b)
        if x != y and not (math.isfinite(x) and math.isfinite(y)
                           and abs(x - y) <= REPORT_TOLERANCE * max(abs(x), abs(y))):
            yield f"{where}: {a!r}, regenerated {b!r}"
    elif isinstance(a, str) and isinstance(b, str) and a.startswith("/") and b.startswith("/"):
        # Paths say where the report was made (the runs folder here, a temporary one there):
        # only the file or folder named is compared.
        if PurePosixPath(a).name != PurePosixPath(b).name:
            yield f"{where}: {_short(a)}, regenerated {_short(b)}"
    elif a != b:
        yield f"{where}: {_short(a)}, regenerated {_short(b)}"


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
