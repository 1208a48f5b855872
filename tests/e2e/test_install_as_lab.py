"""The rig installed as a lab installs it (issue 36 part 5): the wheel built from this working
tree, installed into a fresh venv outside the repository, then in an empty folder `rig init lab`
and, in the lab, `rig measure asc --device sim`, `rig analyze RUN`, `rig report RUN --out r`,
with nothing of ours imported from the checkout.

Cost, kept low for `make test` on two cores: the wheel is built without build isolation and
without dependencies (setuptools and setuptools-scm come with the test extra), the venv is made
without pip and gets the wheel from this venv's pip (`--python`), and the third-party packages
the rig needs are this venv's, reached through one .pth line (a path, so none of that folder's
own .pth files, among them the editable install's finder, is run). Only our code is new.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import rig

REPO = Path(__file__).resolve().parents[2]
#: What the wheel is built from: pyproject's packages (and package data) and its readme.
SOURCES = ("protocols", "drivers", "rig", "gui", "firmware", "virtual_bench", "benches",
           "sweeps", "pyproject.toml", "README.md")
#: Our top-level packages (namespace ones included): each must come from the new venv.
OURS = ("rig", "drivers", "protocols", "gui", "firmware", "firmware.xylo", "virtual_bench",
        "benches", "sweeps")

PROBE = """
import importlib, json, sys
out = {"path": sys.path, "executable": sys.executable, "modules": {}}
for name in sys.argv[1:]:
    m = importlib.import_module(name)
    out["modules"][name] = [getattr(m, "__file__", None) or "", *list(getattr(m, "__path__", []))]
import rig
out["version"] = rig.__version__
print(json.dumps(out))
"""

pytestmark = pytest.mark.slow


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 180) -> str:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{done.stdout}\n" \
                                 f"{done.stderr}"
    return done.stdout + done.stderr


def source_copy(dest: Path) -> None:
    """The working tree's files (tracked, and new ones git does not ignore) that the build
    reads, without .git: the version is passed in, as the checkout's."""
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-co", "--exclude-standard"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for name in listed:
        if name.split("/")[0] in SOURCES and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)


def under(path: str, folder: Path) -> bool:
    return Path(path).resolve().is_relative_to(folder.resolve())


def test_the_wheel_installed_in_a_fresh_venv_measures_analyzes_and_reports(
        tmp_path: Path) -> None:
    for module in ("setuptools", "setuptools_scm", "wheel"):
        assert shutil.which("git") and __import__("importlib").util.find_spec(module), \
            f"{module} is missing: `make test` installs the test extra, which has it"
    assert not under(str(tmp_path), REPO)
    version = rig.rig_version()  # the checkout's, which the wheel must carry

    # Build the wheel from a copy of the working tree (the repository's build/ is untouched).
    src, dist, venv = tmp_path / "src", tmp_path / "dist", tmp_path / "venv"
    source_copy(src)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RIG_LAB", "RIG_DUT_HOST", "PYTHONHOME")}
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(src)], tmp_path, {**env, "SETUPTOOLS_SCM_PRETEND_VERSION": version})
    (wheel,) = dist.glob("neurobench_rig-*.whl")
    assert wheel.name.startswith(f"neurobench_rig-{version}-")

    # A fresh venv with the wheel; the dependencies through a path line (see the docstring).
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    python = venv / "bin" / "python"
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
         "--no-index", "--no-compile", str(wheel)], tmp_path, env)
    site = Path(run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                     "['purelib'])"], tmp_path, env).strip()).resolve()
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_rig_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))

    env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    work = tmp_path / "work"
    work.mkdir()

    # rig and every package of ours come from the new venv; the checkout is on no path.
    assert (venv / "bin" / "rig").read_text().splitlines()[0] == f"#!{python}"
    probe = json.loads(run([str(python), "-c", PROBE, *OURS], work, env))
    # No other path entry holds a package of ours: neither the checkout nor the editable
    # install's folder (this venv's site-packages, whose finder .pth is not run).
    tops = {name.split(".")[0] for name in OURS}
    others = [Path(p or work) for p in probe["path"] if Path(p or work).resolve() != site]
    assert not [(p, t) for p in others for t in tops if (p / t).exists()], probe["path"]
    assert str(REPO) not in probe["path"] and not any(under(p, REPO / "rig") for p in others)
    for name, files in probe["modules"].items():
        assert files and all(under(f, site) for f in files if f), (name, files)
    assert probe["version"] == version  # read from the wheel's rig/_version.txt

    out = run(["rig", "--version"], work, env)
    assert out == f"neurobench-rig {version}\n"
    out = run(["rig", "benches", "--json"], work, env)
    assert {b["origin"] for b in json.loads(out)["benches"]} == {"package"}

    # The lab, and a run measured, analysed and reported in it.
    run(["rig", "init", "lab"], work, env)
    lab = work / "lab"
    assert (lab / "benches" / "sim.toml").is_file() and (lab / "runs").is_dir()
    out = run(["rig", "measure", "asc", "--device", "sim"], lab, env)
    assert f"note: bench 'sim' found in 2 places; using {lab / 'benches' / 'sim.toml'} (lab)" \
        in out
    (folder,) = [p for p in (lab / "runs").iterdir() if p.is_dir()]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["software"]["neurobench-rig"] == version
    dut = manifest["instruments"]["virtual_bench"]["dut"]
    if shutil.which("gcc") and shutil.which("make"):
        # The C shim, built from the wheel's sources into the user's cache for this version.
        shim = Path(os.environ["RIG_CACHE"]) / "dut-host" / version / "dut-host"
        assert dut == f"c-shim ({shim})"
    else:
        assert dut.startswith("python (")
    out = run(["rig", "show", str(folder)], lab, env)
    assert f"measured by: neurobench-rig {version}" in out
    run(["rig", "analyze", str(folder)], lab, env)
    run(["rig", "report", str(folder), "--out", "r"], lab, env)
    report = (lab / "r" / "report.md").read_text()
    assert f"neurobench-rig {version}" in report
    assert (lab / "r" / "report.pdf").stat().st_size > 0
