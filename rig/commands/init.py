"""`rig init DIR`: make a lab folder: editable copies of the shipped benches and sweeps, a
`runs/` folder, a README saying what to change for a real bench, and the marker file
(`rig-lab.toml`) by which the rig finds the lab (rig/bench/config.py, `lab_folder`).

It writes nothing unless it can write everything: a file it would write that is already there,
a DIR that is a file, or a folder it cannot write is one line and exit 2.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from rig.bench.config import LAB_ENV, LAB_MARKER, SHIPPED_ROOT
from rig.errors import ConfigError

#: The shipped folders a lab gets editable copies of.
COPIED = ("benches", "sweeps")

README = """\
# A neurobench-rig lab folder

Made by `rig init` with neurobench-rig {version}. Work from this folder (`cd {name}`): the rig
then takes `--device NAME` from `benches/NAME.toml` here, and `rig measure` puts its run folders
in `runs/`.

## How the rig finds this folder

`--device NAME` looks for `NAME.toml` in `./benches` (the working folder's), then in this lab
folder's `benches/`, then among the benches installed with the rig. The lab folder is the one
named by the environment variable `{env}`, else the nearest folder from the working folder
upwards that holds `{marker}` (this one has it), so the lab's benches are found from any folder
inside it. Where a name is in two places, the rig takes the first and says so on stderr;
`rig benches` lists every bench it sees, where it is and which one a name takes.

## Making a bench file describe your bench

The files in `benches/` are copies you may edit (the installed ones stay as shipped). Start from
the one closest to your setup (`arduino.toml`: a board with MLPerf Tiny firmware and an ST
LPM01A; `arduino-ppk2.toml`: a Nordic PPK2; `sim*.toml`: the virtual bench) and change:

- **ports**: `[dut] port` and `[emon] port` (or `resource` for a VISA instrument) to what
  `rig devices` lists on this PC (`/dev/ttyACM0`, `COM3`, ...); `[io_manager] port` if an
  Arduino UNO IO manager sits between the rig and the DUT;
- **the voltage limit**: `[bench] voltage_limit_v` to the highest supply your DUT takes, and
  `[emon] supply_voltage_v` to the voltage it runs at (the rig refuses a supply above the limit
  before it touches an instrument);
- **the energy monitor**: `[emon] driver` (lpm01a, joulescope, n6705, 34465a, ppk2, otii, ...)
  and its sample rate;
- `[bench] name`, which every run's manifest and the report carry.

Paths in a bench file (`[dut] spec`, `[qemu] firmware`) are relative to the file's folder; where
nothing is there, the rig looks beside its own installed benches, so `../firmware/...` in these
copies still names the firmware files installed with the rig.

## Checking it

    rig devices                       # the serial ports on this PC
    rig devices --check --device NAME # handshake the bench's DUT and energy monitor
    rig measure asc --device sim      # a whole run on the virtual bench (SIMULATED)
    rig show runs/<folder>            # what a run measured, and which rig version measured it

`sweeps/` holds the QUBO sweep files (`rig sweep qubo sweeps/example.toml`).
"""

MARKER = """\
# This folder is a neurobench-rig lab folder (`rig init`, neurobench-rig {version}): from here
# and every folder below it, `--device NAME` finds benches/NAME.toml after ./benches and before
# the benches installed with the rig. Delete this file and the rig no longer treats it as a lab.
[lab]
made_by = "neurobench-rig {version}"
"""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="make a lab folder: editable benches and sweeps, runs/")
    p.add_argument("dir", type=Path, metavar="DIR", help="the lab folder (new, or one without "
                   "the files it would write)")
    p.set_defaults(run=run)


def planned(target: Path, version: str) -> dict[Path, Path | str]:
    """Every file `rig init` writes, by its path in the lab: a shipped file to copy, or text."""
    files: dict[Path, Path | str] = {}
    for folder in COPIED:
        source = SHIPPED_ROOT / folder
        for path in sorted(source.rglob("*.toml")):
            files[target / folder / path.relative_to(source)] = path
    files[target / "README.md"] = README.format(version=version, name=target.name, env=LAB_ENV,
                                                marker=LAB_MARKER)
    files[target / LAB_MARKER] = MARKER.format(version=version)
    return files


def _refuse_unwritable(target: Path) -> None:
    """DIR a file, or its nearest existing folder not writable: one ConfigError."""
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{target}: is a file, not a folder",
                          hint="name a new folder, or an existing one, for the lab")
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{existing}: is a file, so {target} cannot be made",
                          hint="name a folder that is not inside a file's path")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"{existing}: not writable, so the lab folder {target} cannot be made",
                          hint="pick a folder you can write, e.g. one in your home folder")


def _conflicts(target: Path, files: dict[Path, Path | str]) -> list[Path]:
    """What is already there: a file (or folder) where a file goes, a file where a folder goes."""
    found: set[Path] = set()
    for path in files:
        for parent in path.relative_to(target).parents:
            folder = target / parent
            if folder != target and (folder.exists() or folder.is_symlink()) \
                    and not folder.is_dir():
                found.add(folder)
        if path.exists() or path.is_symlink():
            found.add(path)
    runs = target / "runs"
    if (runs.exists() or runs.is_symlink()) and not runs.is_dir():
        found.add(runs)
    return sorted(found)


def make_lab(target: Path, version: str) -> list[Path]:
    """Write the lab folder; all of it, or (on an error) nothing: what it made is removed again.
    Returns the files written."""
    files = planned(target, version)
    _refuse_unwritable(target)
    clash = _conflicts(target, files)
    if clash:
        names = ", ".join(str(p.relative_to(target)) for p in clash)
        raise ConfigError(f"{target}: {len(clash)} file(s) already there, not overwritten: "
                          f"{names}", hint="move them away, or run `rig init` on another folder")
    made: list[Path] = []  # files and folders this call created, in order
    try:
        for path in [target, target / "runs", *(p.parent for p in files)]:
            for folder in reversed((path, *path.parents)):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
        for path, content in files.items():
            with path.open("x", encoding="utf-8") as f:  # never over a file that appeared since
                made.append(path)
                f.write(content.read_text(encoding="utf-8") if isinstance(content, Path)
                        else content)
    except OSError as exc:
        for p in reversed(made):
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        raise ConfigError(f"{target}: cannot write the lab folder: {exc.strerror or exc} "
                          f"({exc.filename or target}); nothing was left behind",
                          hint="pick a folder you can write") from exc
    return list(files)


def run(args: argparse.Namespace) -> int:
    from rig import rig_version

    target = Path(os.path.abspath(args.dir))
    written = make_lab(target, rig_version())
    benches = sorted(p.stem for p in written if p.parent == target / "benches")
    print(f"lab folder {target}: {len(written)} files")
    print(f"  benches/  {', '.join(benches)} (editable copies; workers/ for the sweep cluster)")
    print("  sweeps/   QUBO sweep files")
    print("  runs/     run folders go here")
    print(f"  README.md what to change for a real bench, and how to check it; {LAB_MARKER} marks "
          "the lab")
    print(f"next: cd {args.dir} && rig benches && rig devices --check --device NAME")
    return 0
