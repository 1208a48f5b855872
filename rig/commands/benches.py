"""`rig benches`: every bench file `--device NAME` can take, where it is and where it comes from
(./benches, the lab folder, the installed package); the one a name takes is marked."""

from __future__ import annotations

import argparse

from rig.bench.config import LAB_ENV, LAB_MARKER, bench_entries, lab_folder
from rig.commands.common import print_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("benches", help="list the benches --device NAME finds, and from where")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    entries = bench_entries()
    taken = {e.name: e for e in reversed(entries)}  # the first of each name
    lab = lab_folder()
    if args.json:
        print_json({"lab": str(lab) if lab else None, "benches": [
            {"name": e.name, "path": str(e.path), "origin": e.origin,
             "taken": taken[e.name] is e} for e in entries]})
        return 0
    print(f"lab folder: {lab}" if lab else
          f"lab folder: none (no {LAB_MARKER} from here upwards, {LAB_ENV} not set; "
          "`rig init DIR` makes one)")
    if not entries:
        print("no benches found")
        return 0
    width = max(len(e.name) for e in entries)
    doubled = {e.name for e in entries if taken[e.name] is not e}
    for e in entries:
        mark = "*" if e.name in doubled and taken[e.name] is e else " "
        print(f"{mark} {e.name:<{width}}  {e.origin:<9}  {e.path}")
    if doubled:
        print("* the one --device NAME takes where a name is in several places "
              "(./benches, then the lab folder, then the package)")
    return 0
