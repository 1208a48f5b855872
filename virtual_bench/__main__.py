"""`python -m virtual_bench BENCH.toml`: serve a virtual bench as a process of its own.

Prints one JSON line on stdout, ``{"ports": {"dut": ..., "emon": ..., "io_manager": ...},
"speed": ..., "dut": ..., "emon": ..., "powered": ..., "images": {"dut": PATH, ...},
"simulated": true}`` (images: the firmware files it runs, by role; the rig records their
digests) (or
``{"error": ..., "hint": ...}`` and exit code 2), then serves until its stdin closes, SIGTERM or
Ctrl-C. The rig starts it this way (`rig sim`, a run on a virtual bench) and knows it only so.
"""

import argparse
import sys
from pathlib import Path

from virtual_bench.bench import serve

parser = argparse.ArgumentParser(prog="python -m virtual_bench",
                                 description="serve a virtual bench; print its ports as JSON")
parser.add_argument("bench", type=Path, metavar="BENCH.toml", help="a bench file with [sim]")
parser.add_argument("--speed", type=float, default=None,
                    help="simulated seconds per host second (default: the bench file's)")
parser.add_argument("--power-on", action="store_true",
                    help="switch the DUT's supply on at once (to talk to it without a monitor)")
parser.add_argument("--for", dest="label", default="",
                    help="the bench file the parent loaded (shown in ps; not read)")
args = parser.parse_args()
sys.exit(serve(args.bench, speed=args.speed, power_on=args.power_on))
