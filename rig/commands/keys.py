"""`rig keys new --out NAME`: an Ed25519 key pair to sign submission bundles with.

NAME.key is the private key (PKCS#8 PEM, written owner-only, never overwritten); NAME.pub the
public key to give reviewers (`rig verify --key NAME.pub`).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keys", help="make a key pair to sign submission bundles with",
                       description="Signing keys for `rig bundle` (Ed25519).")
    what = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    new = what.add_parser("new", help="make NAME.key (private, owner-only) and NAME.pub",
                          description="Write a new Ed25519 key pair: NAME.key (private, mode "
                                      "0600) and NAME.pub (give it to reviewers). Neither file "
                                      "is ever overwritten.")
    new.add_argument("--out", type=Path, required=True, metavar="NAME",
                     help="path and name of the pair, without extension")
    new.set_defaults(run=run_new)


def run_new(args: argparse.Namespace) -> int:
    from rig.submission.statement import new_key_pair

    key, pub, kid = new_key_pair(args.out)
    print(f"private key: {key} (owner-only; keep it on the rig, never in a bundle)")
    print(f"public key:  {pub} (give it to reviewers: rig verify BUNDLE --key {pub.name})")
    print(f"key id:      {kid}")
    return 0
