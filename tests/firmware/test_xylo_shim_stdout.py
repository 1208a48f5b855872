"""The Xylo shim's stdout carries the DUT protocol only, from its first byte: what Rockpool or
samna print while the HDK backend opens (Rockpool 3.1.0's ``find_xylo_hdks`` prints which board
it found) goes to stderr. Run as the rig runs it, a subprocess, over the fake samna package
(tests/firmware/fake_samna.py, `PACKAGE_ROOT`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.requires import needs

from .fake_samna import BOARD_ENV, PACKAGE_ROOT

pytestmark = needs("rockpool", "xylosim")

REPO = Path(__file__).resolve().parents[2]
SHIM = REPO / "firmware" / "xylo" / "shim.py"
MODEL = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"


def test_what_rockpool_prints_while_opening_the_board_stays_off_the_protocol() -> None:
    env = {k: v for k, v in os.environ.items() if k != "RIG_XYLO_STAND_IN_RAILS"}
    env["PYTHONPATH"] = str(PACKAGE_ROOT)
    env[BOARD_ENV] = json.dumps({"latency_s": 0.0625})
    done = subprocess.run([sys.executable, str(SHIM), "--spec", str(MODEL), "--hdk"],
                          input=b"name%", capture_output=True, env=env, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().split("\r\n") == [
        "m-timestamp-mode-performance", "m-init-done", "m-ready",
        "m-name-xylo-[SynSense Xylo Audio 2 (HDK)]", "m-ready", ""]
    assert "The connected Xylo HDK contains a XyloAudio v2" in done.stderr.decode()
