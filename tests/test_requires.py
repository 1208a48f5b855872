"""tests/requires.py: `LazyModule` imports its module at the first use of a name, never at
collection, and collecting the test files that use it (or import networkx in their helpers)
imports none of matplotlib, pyqtgraph and networkx."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requires import LazyModule

REPO = Path(__file__).resolve().parent.parent


def test_a_lazy_module_is_imported_at_the_first_use_of_a_name(tmp_path, monkeypatch) -> None:
    (tmp_path / "rig_lazy_probe.py").write_text("VALUE = 42\n_private = 'p'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "rig_lazy_probe", raising=False)
    module = LazyModule("rig_lazy_probe")
    # pytest's probes of a test module's names, answered without importing
    for probe in ("_mock_name", "__wrapped__", "__test__"):
        assert getattr(module, probe, None) is None, probe
    assert "rig_lazy_probe" not in sys.modules
    assert module.VALUE == 42 and module._private == "p"
    assert "rig_lazy_probe" in sys.modules
    with pytest.raises(AttributeError):
        _ = module.MISSING
    with pytest.raises(ModuleNotFoundError, match="rig_no_such_module"):
        LazyModule("rig_no_such_module")


def test_collecting_the_heavy_files_imports_none_of_the_heavy_packages() -> None:
    files = ["tests/rig/test_report_figures.py", "tests/rig/test_qubo_targets.py",
             "tests/rig/test_qubo_workloads.py", "tests/firmware/test_loihi2_shim.py",
             "tests/gui/test_runner.py", "tests/gui/test_runner_xvfb.py",
             "tests/gui/test_viewer.py", "tests/gui/test_viewer_xvfb.py"]
    script = ("import json, sys, pytest\n"
              "code = pytest.main(['--co', '-q', '-p', 'no:cacheprovider', *sys.argv[1:]])\n"
              "print(json.dumps([int(code), [m for m in ('matplotlib', 'pyqtgraph', 'networkx')"
              " if m in sys.modules]]))\n")
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-c", script, *files], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    code, heavy = json.loads(done.stdout.strip().splitlines()[-1])
    assert code == 0, done.stdout[-2000:]
    assert heavy == [], heavy
