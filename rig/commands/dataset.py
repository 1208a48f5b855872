"""`rig dataset synth|info`: make the SYNTHETIC ASC set, or summarise an ASC dataset folder
(DCASE 2020 layout): clips and 1-second slices per split and scene, audio rates, caches."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rig.commands.common import print_json
from rig.datasets import dcase


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("dataset", help="make or inspect an ASC dataset (DCASE 2020 layout)")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    s = actions.add_parser("synth", help="write a small SYNTHETIC scene set in the DCASE layout")
    s.add_argument("--out", type=Path, default=Path(dcase.SYNTHETIC_DIRNAME),
                   help=f"folder to write (default ./{dcase.SYNTHETIC_DIRNAME})")
    s.add_argument("--clips-per-class", type=int, default=10, metavar="N",
                   help="10-second clips per scene in each split (default 10)")
    s.add_argument("--seed", type=int, default=0, help="generator seed (default 0)")
    s.set_defaults(run=run_synth)
    i = actions.add_parser("info", help="clips and slices per split and scene, rates, caches")
    i.add_argument("root", type=Path, metavar="DIR", help="the dataset folder")
    i.add_argument("--cache-dir", type=Path,
                   help=f"cache folder (default DIR/{dcase.CACHE_DIRNAME})")
    i.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    i.set_defaults(run=run_info)


def run_synth(args: argparse.Namespace) -> int:
    root = dcase.make_synthetic_dcase(args.out, args.clips_per_class, args.seed)
    n = args.clips_per_class
    Console().print(f"wrote a SYNTHETIC ASC set to {root}: {n} clips x 10 s per scene per split "
                    f"({n * len(dcase.SCENES) * 10} one-second slices per split)", soft_wrap=True)
    return 0


def run_info(args: argparse.Namespace) -> int:
    info = dcase.dataset_info(args.root, args.cache_dir)
    if args.json:
        print_json(info)
        return 0
    out = Console()
    kind = "[yellow]SYNTHETIC[/]" if info["synthetic"] else "DCASE 2020 layout"
    out.print(f"[bold]{info['root']}[/] ({kind})", soft_wrap=True)
    table = Table(title="Clips / 1-second slices")
    table.add_column("scene")
    for split in info["splits"]:
        table.add_column(split, justify="right")
    for scene in dcase.SCENES:
        cells = [f"{s['per_scene'][scene]['clips']} / {s['per_scene'][scene]['slices']}"
                 for s in info["splits"].values()]
        table.add_row(scene, *cells)
    table.add_row("total", *[f"{s['clips']} / {s['slices']}" for s in info["splits"].values()])
    out.print(table)
    for split, s in info["splits"].items():
        rates = ", ".join(f"{r} Hz" for r in s["audio_rates_hz"])
        caches = ", ".join(f"{r}: {state}" for r, state in s["cache"].items()) or "none"
        out.print(f"{split}: audio at {rates}; cache ({info['cache_dir']}): {caches}",
                  soft_wrap=True)
    return 0
