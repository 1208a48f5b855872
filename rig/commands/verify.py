"""`rig verify FILE [--key NAME.pub] [--json]`: check a submission bundle, offline: the
signature, every digest, the ledger chain, the left-out runs, every figure re-derived from the
raw samples, the method, and the report regenerated (rig/submission/verify.py).

Exit codes: 0 every check holds; 1 a check failed (each named); 2 not a bundle or unreadable.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rig.commands.common import print_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify", help="check a submission bundle: signature, digests, ledger, re-derived "
                       "figures, method, report",
        description="Verify a bundle from `rig bundle` on any machine with the rig installed, "
                    "offline. A signature shows the bundle is unchanged since it was sealed "
                    "with that key, not that the measurement was honest: the ledger (and its "
                    "head on the lab's broker) and the re-derivation from raw samples narrow "
                    "what an insider can fake. Exit 0: all hold; 1: a check failed; 2: not a "
                    "bundle.")
    p.add_argument("bundle", type=Path, metavar="FILE", help="the bundle")
    p.add_argument("--key", type=Path, metavar="NAME.pub",
                   help="the lab's public key, got from the lab (without it, the bundle's own "
                        "signer.pub is used: integrity only, not who signed)")
    p.add_argument("--head", metavar="SEQ:DIGEST",
                   help="the ledger head the lab's broker holds (retained on "
                        "neurobench/<rig>/ledger): the bundle's ledger must agree with it")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from rig.submission.verify import verify_bundle
    from rig.traces.files import terminal_write

    # Progress from the threads re-deriving runs: past another thread's capture of pyjls's
    # output (`captured_c_output`), which holds stderr while it reads a trace.
    result = verify_bundle(args.bundle, key=args.key, head=args.head,
                           progress=None if args.json else
                           (lambda t: terminal_write(f"rig: {t}\n")))
    if args.json:
        print_json(result.to_json())
    else:
        console = Console(highlight=False, soft_wrap=True)
        table = Table(title=f"{args.bundle}", title_justify="left")
        for col in ("run", "check", "result", "detail"):
            table.add_column(col, overflow="fold")
        for c in result.checks:
            table.add_row(escape(c.run or "(bundle)"), escape(c.item),
                          "ok" if c.ok else "n/a" if c.ok is None else "[bold red]FAILED[/]",
                          escape(c.detail))
        console.print(table)
        for lo in result.left_out:
            figures = ", ".join(f"{k} {v:.6g}" for k, v in list(lo["figures"].items())[:4])
            console.print(escape(f"left out: {lo['run']} ({lo.get('procedure') or '?'}, "
                                 f"{lo['status']}){': ' + figures if figures else ''}"))
        if not result.key_given:
            console.print("no --key: the signature was checked with the bundle's own "
                          "signer.pub (integrity only, not who signed)")
    if not result.ok:
        print("rig: verification failed: " + "; ".join(
            f"{c.run + ': ' if c.run else ''}{c.item}" for c in result.failed), file=sys.stderr)
        return 1
    return 0
