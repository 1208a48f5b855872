"""The rig-side stand-in for the Joulescope vendor library (drivers/emon/joulescope_socket.py)
is loaded in the rig's process: it needs only drivers and the shared wire format in protocols,
never the virtual bench (which owns the simulated world on the other side of the socket)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_stand_in_driver_loads_without_the_virtual_bench() -> None:
    code = ("import sys; import drivers.emon.joulescope_socket as m; "
            "print(sorted({n.split('.')[0] for n in sys.modules} "
            "& {'rig', 'gui', 'virtual_bench', 'drivers', 'protocols'})); "
            "print(m.FakeJoulescopeDriver.__module__, m.SocketSource.__module__, "
            "m.SampleBlock.__module__, m.BASE_RATES)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    layers, where = out.stdout.strip().splitlines()
    assert layers == "['drivers', 'protocols']"
    assert where == ("drivers.emon.joulescope_socket drivers.emon.joulescope_socket "
                     "protocols.joulescope_bridge {'js110': 2000000, 'js220': 1000000}")
