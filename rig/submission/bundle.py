"""`rig bundle`: seal run folders, a report and their ledger span into one signed file.

The bundle is a zip (entries stored as they are: traces do not compress) laid out as

```
statement.dsse.json      the signed in-toto statement (DSSE envelope), see `statement`
signer.pub               the signing key's public half (who signed is checked against a key
                         the reviewer got elsewhere: `rig verify --key`)
runs/<run folder>/...    every file of each run folder, as it is
report/...               the report folder, when one is given
ledger/<n>.jsonl         each runs folder's ledger, from the first bundled run's first entry to
                         the last one's last entry (left-out runs in between stay visible)
test_sets/<sha256>.json  the labels of each ASC run's test set, as the bench loads it now, when
                         it is the one the run recorded (its digest equals the manifest's)
```

The statement's subjects are every file but the first two, with its SHA-256; its predicate
holds the rig's version and the digest of its own source files, each run's bench snapshot,
instrument identities, the digests its manifest records (the DUT image, the test set), and
where each run sits in its ledger.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rig.errors import ConfigError
from rig.run.ledger import (
    ENDED,
    LEDGER,
    STARTED,
    Ledger,
    LedgerError,
    run_digests,
    sha256_file,
)
from rig.run.store import MANIFEST, load_run
from rig.submission.statement import (
    load_private_key,
    public_pem,
    refuse_to_overwrite,
    sign,
    statement,
)

ENVELOPE = "statement.dsse.json"
SIGNER = "signer.pub"
RUNS, REPORT, LEDGERS, TEST_SETS = "runs", "report", "ledger", "test_sets"
#: The packages whose source files the predicate digests (the rig as installed).
PACKAGES = ("rig", "drivers", "protocols", "virtual_bench")


@dataclass(frozen=True)
class Sealed:
    """What `make_bundle` wrote."""

    path: Path
    files: int
    runs: list[str]
    left_out: list[str]
    key_id: str


def source_digest() -> dict[str, Any]:
    """SHA-256 over the rig's own installed source files: each ``*.py`` of `PACKAGES`, as
    "relative path NUL sha256 LF" lines in path order; and how many files that is."""
    import importlib

    lines = []
    for name in PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        root = Path(module.__file__ or "").parent
        for p in sorted(root.rglob("*.py")):
            if "__pycache__" in p.parts:
                continue
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
            lines.append(f"{name}/{p.relative_to(root).as_posix()}\0{digest}\n")
    return {"sha256": hashlib.sha256("".join(lines).encode()).hexdigest(),
            "files": len(lines), "packages": list(PACKAGES)}


def recorded_digests(manifest: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Every SHA-256 the manifest records (the DUT image, the test set, ...) by its JSON path."""
    out: dict[str, str] = {}
    for key, value in manifest.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            out.update(recorded_digests(value, path))
        elif isinstance(value, str) and "sha256" in str(key) and len(value) == 64:
            out[path] = value
    return out


def instrument_identities(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each instrument's model, serial and firmware as the manifest recorded them."""
    out = {}
    for role, info in (manifest.get("instruments") or {}).items():
        if isinstance(info, dict):
            out[role] = {k: info.get(k) for k in ("driver", "model", "serial", "firmware")
                         if info.get(k) is not None}
    return out


def make_bundle(runs: list[Path], key_path: Path, out: Path, *, report: Path | None = None,
                progress: Callable[[str], None] | None = None) -> Sealed:
    """Seal `runs` (and `report`) into `out`, signed with `key_path`; `ConfigError` (nothing
    written) for a run that is unfinished, unknown to its ledger or changed since it ended."""
    say = progress or (lambda _t: None)
    key = load_private_key(key_path)  # before anything is read: a bad key costs nothing
    if not runs:
        raise ConfigError("no run folders given", hint="rig bundle RUN... --key K --out FILE")
    refuse_to_overwrite((out,), "a bundle", "give --out a new file name")
    folders = [Path(r).resolve() for r in runs]
    names = [f.name for f in folders]
    if len(set(names)) != len(names):
        raise ConfigError("two run folders have the same name",
                          hint="name each run folder once; folders of one name cannot sit "
                               "side by side in a bundle")
    if report is not None and not (report / "results.json").is_file():
        raise ConfigError(f"{report} holds no results.json: not a report folder",
                          hint="give the --out folder of `rig report`")

    say(f"checking {len(folders)} run folder(s) against their ledgers")
    records = {}
    by_root: dict[Path, list[Path]] = {}
    for folder in folders:
        record = load_run(folder)
        if record.finished is None:
            raise ConfigError(f"{folder}: the run is unfinished (status {record.status}): "
                              "only ended runs can be sealed", hint="bundle finished runs")
        records[folder] = record
        by_root.setdefault(folder.parent, []).append(folder)

    ledgers: list[dict[str, Any]] = []
    spans: dict[str, bytes] = {}
    where: dict[str, dict[str, Any]] = {}
    for index, (root, members) in enumerate(sorted(by_root.items())):
        try:
            entries = Ledger(root).entries()
        except LedgerError as exc:
            raise ConfigError(f"{root / LEDGER}: {exc}", hint="the ledger is damaged: "
                              "nothing can be sealed from this runs folder") from None
        raw_lines = (root / LEDGER).read_bytes().split(b"\n") if entries else []
        member_names = {m.name for m in members}
        first = last = None
        for m in members:
            started = [e for e in entries if e.run == m.name and e.event == STARTED]
            ended = [e for e in entries if e.run == m.name and e.event == ENDED]
            if not started or not ended:
                raise ConfigError(
                    f"{m}: not in the ledger of {root} ({'no' if not started else 'no ended'} "
                    "entry): a run made before the ledger existed, or moved from another "
                    "runs folder, cannot be sealed", hint="bundle runs from their own runs "
                    "folder, recorded by a rig that keeps a ledger")
            end = ended[-1]
            now = run_digests(m)
            changed = sorted(k for k in set(now) | set(end.data.get("digests", {}))
                             if now.get(k) != end.data.get("digests", {}).get(k))
            if changed:
                raise ConfigError(f"{m}: {', '.join(changed)} changed since the run ended "
                                  f"(ledger entry {end.seq})", hint="a run folder is sealed "
                                  "as it ended; restore the files from a copy")
            first = started[0].line if first is None else min(first, started[0].line)
            last = end.line if last is None else max(last, end.line)
            where[m.name] = {"ledger": f"{LEDGERS}/{index}.jsonl", "started": started[0].seq,
                             "ended": end.seq}
        assert first is not None and last is not None
        span = [e for e in entries if first <= e.line <= last]
        spans[f"{LEDGERS}/{index}.jsonl"] = b"".join(raw_lines[e.line - 1] + b"\n"
                                                     for e in span)
        left = sorted({e.run for e in span} - member_names)
        ledgers.append({"file": f"{LEDGERS}/{index}.jsonl", "runs_folder": root.name,
                        "first_seq": span[0].seq, "last_seq": span[-1].seq,
                        "last_digest": span[-1].digest, "left_out": left})

    say("loading each ASC run's test set labels")
    test_sets = _test_set_labels(records)

    say("hashing files")
    members_: list[tuple[str, Path | bytes]] = []
    for folder in folders:
        for p in sorted(q for q in folder.rglob("*") if q.is_file()):
            members_.append((f"{RUNS}/{folder.name}/{p.relative_to(folder).as_posix()}", p))
    if report is not None:
        for p in sorted(q for q in report.rglob("*") if q.is_file()):
            members_.append((f"{REPORT}/{p.relative_to(report).as_posix()}", p))
    for name, data in spans.items():
        members_.append((name, data))
    for digest, labels in test_sets.items():
        members_.append((f"{TEST_SETS}/{digest}.json", json.dumps(labels).encode() + b"\n"))
    subjects = {name: _sha256(src) for name, src in members_}

    from rig import rig_version

    predicate = {
        "rig": {"version": rig_version(), "source": source_digest()},
        "sealed_at": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "runs": [
            {"folder": f.name, "run_id": records[f].manifest.get("run_id"),
             "procedure": records[f].manifest.get("procedure"),
             "status": records[f].status,
             "bench": records[f].manifest.get("bench"),
             "instruments": instrument_identities(records[f].manifest),
             "recorded_digests": recorded_digests(records[f].manifest),
             **where[f.name]}
            for f in folders
        ],
        "report": REPORT if report is not None else None,
        "ledgers": ledgers,
        "test_sets": sorted(test_sets),
    }
    envelope = sign(statement(subjects, predicate), key)
    say(f"writing {out}")
    tmp = out.with_name(out.name + ".part")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr(ENVELOPE, json.dumps(envelope, indent=1) + "\n")
            z.writestr(SIGNER, public_pem(key.public_key()))
            for name, src in members_:
                if isinstance(src, bytes):
                    z.writestr(name, src)
                else:
                    z.write(src, name)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return Sealed(out, len(members_) + 2, [f.name for f in folders],
                  sorted({r for led in ledgers for r in led["left_out"]}),
                  envelope["signatures"][0]["keyid"])


def _sha256(src: Path | bytes) -> str:
    return hashlib.sha256(src).hexdigest() if isinstance(src, bytes) else sha256_file(src)


def _test_set_labels(records: dict[Path, Any]) -> dict[str, list[int]]:
    """The labels of each ASC run's test set by their SHA-256: the set its bench loads now,
    refused when it is not the one the run recorded (`manifest.test_set`)."""
    out: dict[str, list[int]] = {}
    for folder, record in records.items():
        recorded = record.manifest.get("test_set")
        if record.manifest.get("procedure") != "asc" or not isinstance(recorded, dict):
            continue
        want = str(recorded.get("sha256_labels") or "")
        if want in out:
            continue
        labels = _load_labels(folder, record.manifest)
        got = hashlib.sha256(_label_bytes(labels)).hexdigest()
        if got != want:
            raise ConfigError(f"{folder}: the test set its bench loads now (labels sha256 "
                              f"{got[:16]}…) is not the one the run used ({want[:16]}…)",
                              hint="bundle on a machine with the run's dataset")
        out[want] = labels
    return out


def _label_bytes(labels: list[int]) -> bytes:
    """The labels as `rig.datasets.testsets.test_set_digest` hashes them (int64 LE)."""
    import numpy as np

    return np.asarray(labels, dtype="<i8").tobytes()


def _load_labels(folder: Path, manifest: dict[str, Any]) -> list[int]:
    """The labels of the test set the run's bench snapshot names (its ``dataset`` table: the
    loader reads nothing else of the bench but its path, for messages)."""
    import types
    from typing import cast

    from rig.bench.config import Bench, DatasetConfig
    from rig.datasets.testsets import load_test_set

    try:
        fields = dict((manifest.get("bench") or {}).get("dataset") or {})
        bench = types.SimpleNamespace(dataset=DatasetConfig(**fields), path=folder / MANIFEST)
        test = load_test_set(cast(Bench, bench))
    except Exception as exc:  # any reason the dataset cannot be loaded here, said by name
        raise ConfigError(f"{folder}: cannot load the run's test set from its bench snapshot "
                          f"({exc})", hint="bundle on the machine that has the run's "
                          "dataset") from None
    return [int(x) for x in test.labels]
