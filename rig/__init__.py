"""The domain, in rooms by concern, each importing only the rooms below it:
bench < traces < datasets < run < qubo < report / mqtt / cluster / model < commands.

Loose at the top: `cli` (the `rig` command), `errors`, `units`. `rig` imports `drivers` and
`protocols`, never `gui`.

`rig.__version__` names the exact build (design.md, "Distribution"): in a git work tree (a
checkout, editable install or not) it is the current commit's, asked of git when first read,
with a `.d<date>` local part when tracked files have changes; in an installed copy it is what
setuptools-scm wrote at build time (rig/_version.txt).
"""

from __future__ import annotations

import datetime as _dt
import re as _re
import subprocess as _subprocess
from pathlib import Path as _Path

#: The folder above rig/: the repository in a checkout, site-packages in an installed copy.
_ROOT = _Path(__file__).resolve().parents[1]
#: What a tree without git and without a build's version file says (never a bare release number).
UNKNOWN_VERSION = "0.1.dev0+unknown"
_TAG = _re.compile(r"^v?(\d+(?:\.\d+)*)$")
_cached: str | None = None


def _git(*args: str) -> str:
    done = _subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True,
                           timeout=10, check=True)
    return done.stdout.strip()


def _next_dev(tag: str, distance: int) -> str:
    """setuptools-scm's default scheme (guess-next-dev): v0.1.0 + 3 commits -> 0.1.1.dev3."""
    parts = tag.split(".")
    parts[-1] = str(int(parts[-1]) + 1)
    return f"{'.'.join(parts)}.dev{distance}"


def version_from_git() -> str | None:
    """The version of the commit checked out at `_ROOT`, in setuptools-scm's default scheme, or
    None where `_ROOT` is not the top of a git work tree (an installed copy) or git fails.

    Tagged and clean: `0.2.0`; N commits after tag v0.1.0: `0.1.1.devN+g<hash>`; no tag
    reachable (an untagged or shallow clone): `0.1.dev<commits>+g<hash>`; tracked files changed:
    `+g<hash>.d<YYYYMMDD>` (setuptools-scm's mark of a dirty tree).
    """
    if not (_ROOT / ".git").exists():
        return None
    try:
        node = _git("rev-parse", "HEAD")[:9]  # setuptools-scm's length (g + 9 hex digits)
        dirty = bool(_git("status", "--porcelain", "--untracked-files=no"))
        try:
            described = _git("describe", "--tags", "--long", "--match", "*[0-9]*")
        except _subprocess.CalledProcessError:
            described = ""
    except (OSError, _subprocess.SubprocessError):
        return None
    m = _re.match(r"^(.*)-(\d+)-g[0-9a-f]+$", described)  # v0.1.0-3-gabc1234
    found = _TAG.match(m.group(1)) if m else None
    if m and found:
        tag, distance = found.group(1), int(m.group(2))
        if distance == 0 and not dirty:
            return tag
        public = _next_dev(tag, distance)
    else:
        try:
            distance = int(_git("rev-list", "--count", "HEAD"))
        except (OSError, _subprocess.SubprocessError, ValueError):
            return None
        public = f"0.1.dev{distance}"
    local = f"g{node}"
    if dirty:
        local += f".d{_dt.datetime.now(_dt.UTC):%Y%m%d}"
    return f"{public}+{local}"


def version_installed() -> str | None:
    """What the build wrote (rig/_version.txt), else the installed distribution's metadata."""
    try:
        return (_Path(__file__).parent / "_version.txt").read_text(encoding="utf-8").strip()
    except OSError:
        pass
    from importlib import metadata  # ~50 ms to import: only where the build wrote no file

    try:
        return metadata.version("neurobench-rig")
    except metadata.PackageNotFoundError:
        return None


def rig_version() -> str:
    """The rig's version (computed once per process; see the module's docstring)."""
    global _cached
    if _cached is None:
        _cached = version_from_git() or version_installed() or UNKNOWN_VERSION
    return _cached


def __getattr__(name: str) -> str:
    # `from rig import __version__` computes it on first use, not when rig is imported.
    if name == "__version__":
        return rig_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
