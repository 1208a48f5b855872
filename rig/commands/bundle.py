"""`rig bundle RUN... [--report DIR] --key NAME.key --out FILE`: seal runs, their report and
their ledger span into one signed file (rig/submission/bundle.py says what it holds).

Exit codes: 0 written; 2 bad input (a run unfinished, unknown to its ledger or changed since it
ended, a bad key, --out exists): one line, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bundle", help="seal run folders, a report and their ledger span into one signed file",
        description="Write one zip holding the run folders, the report, the ledger span from "
                    "the first to the last bundled run, each ASC run's test-set labels and an "
                    "in-toto statement of every file's SHA-256, signed (DSSE, Ed25519). A "
                    "reviewer checks it with `rig verify FILE --key NAME.pub`.")
    p.add_argument("runs", type=Path, nargs="+", metavar="RUN", help="run folders to seal")
    p.add_argument("--report", type=Path, metavar="DIR",
                   help="a `rig report --out` folder made from these runs")
    p.add_argument("--key", type=Path, required=True, metavar="NAME.key",
                   help="the signing key (`rig keys new`)")
    p.add_argument("--out", type=Path, required=True, metavar="FILE",
                   help="the bundle to write (never overwritten)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rig.submission.bundle import make_bundle

    sealed = make_bundle(args.runs, args.key, args.out, report=args.report,
                         progress=lambda t: print(f"rig: {t}", file=sys.stderr))
    print(f"{sealed.path}: {len(sealed.runs)} run(s), {sealed.files} files, signed by key "
          f"{sealed.key_id[:16]}…")
    if sealed.left_out:
        print(f"left out (the ledger shows them to a reviewer): {', '.join(sealed.left_out)}")
    return 0
