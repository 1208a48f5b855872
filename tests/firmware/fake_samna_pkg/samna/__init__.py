"""``samna`` for a process whose PYTHONPATH starts with tests/firmware/fake_samna_pkg: the fake
board of tests/firmware/fake_samna.py on the host's clock (`serve_as_package`), configured by the
FAKE_SAMNA_BOARD environment variable. Lets the Xylo shim, started by the rig as a subprocess,
run Rockpool's own XyloSamna over a board that is not there (tests/e2e/test_xylo_hdk_fake_board.py).

fake_samna.py is loaded by its path, under a private name: the processes that import this (the
rig, the shim) need not have the repository's `tests` package on their path.
"""

import importlib.util
import sys
from pathlib import Path

_NAME = "_fake_samna_board"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _NAME, Path(__file__).resolve().parents[2] / "fake_samna.py")
    _board = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _board  # before it runs: its dataclasses look their module up
    _spec.loader.exec_module(_board)
sys.modules[_NAME].serve_as_package(sys.modules[__name__])
