"""`python -m rig.sim --bench FILE`: serve a virtual bench for a parent rig process."""

import argparse
import sys
from pathlib import Path

from rig.sim.bench import serve

parser = argparse.ArgumentParser(prog="python -m rig.sim")
parser.add_argument("--bench", type=Path, required=True)
parser.add_argument("--speed", type=float, default=None)
parser.add_argument("--for", dest="label", default="",
                    help="the bench file the parent loaded (shown in ps; not read)")
args = parser.parse_args()
sys.exit(serve(args.bench, speed=args.speed))
