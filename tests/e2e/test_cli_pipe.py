"""`rig ... | head`: a reader that stops reading early is not an error of the rig's."""

from __future__ import annotations

import subprocess

from tests.e2e.runs import RIG


def test_a_closed_stdout_pipe_ends_quietly():
    # the read end is closed before the rig writes a byte, so its first write fails
    proc = subprocess.Popen([*RIG, "devices", "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(60) == 0, err
    assert "Traceback" not in err and "BrokenPipeError" not in err
