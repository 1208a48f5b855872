"""The rig's version names the exact build (issue 36 part 4): from git in a work tree, in
setuptools-scm's default scheme, so that a checkout and a wheel built from it say the same."""

from __future__ import annotations

import datetime as dt
import re
import subprocess
import sys
from pathlib import Path

import pytest

import rig
from rig.run.store import software_versions

REPO = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git work tree with two commits, standing where rig's parent folder would."""
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@example.org")
    git(tmp_path, "config", "user.name", "t")
    for n in (1, 2):
        (tmp_path / "f.txt").write_text(f"{n}\n")
        git(tmp_path, "add", "f.txt")
        git(tmp_path, "commit", "-q", "-m", f"c{n}")
    monkeypatch.setattr(rig, "_ROOT", tmp_path)
    return tmp_path


def scm_version(repo: Path) -> str | None:
    """What setuptools-scm (the build's) says for the same tree, where it is installed."""
    try:
        import setuptools_scm
    except ImportError:
        return None
    return setuptools_scm.get_version(root=str(repo))


def test_untagged_tree_names_its_commit(repo: Path) -> None:
    node = git(repo, "rev-parse", "HEAD")[:9]
    assert rig.version_from_git() == f"0.1.dev2+g{node}"
    assert scm_version(repo) in (None, rig.version_from_git())


def test_commits_after_a_tag_and_the_tag_itself(repo: Path) -> None:
    git(repo, "tag", "v0.1.0", "HEAD~1")
    node = git(repo, "rev-parse", "HEAD")[:9]
    assert rig.version_from_git() == f"0.1.1.dev1+g{node}"
    assert scm_version(repo) in (None, rig.version_from_git())
    git(repo, "tag", "v0.2.0")
    assert rig.version_from_git() == "0.2.0"
    assert scm_version(repo) in (None, "0.2.0")


def test_changed_tracked_files_mark_the_version(repo: Path) -> None:
    git(repo, "tag", "v0.2.0")
    (repo / "untracked.txt").write_text("not part of the build\n")
    assert rig.version_from_git() == "0.2.0"  # untracked files do not make a tree dirty
    (repo / "f.txt").write_text("changed\n")
    today = dt.datetime.now(dt.UTC).strftime("%Y%m%d")
    node = git(repo, "rev-parse", "HEAD")[:9]
    assert rig.version_from_git() == f"0.2.1.dev0+g{node}.d{today}"
    assert scm_version(repo) in (None, rig.version_from_git())


def test_no_git_tree_is_not_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rig, "_ROOT", tmp_path)  # an installed copy: site-packages has no .git
    assert rig.version_from_git() is None


def test_checkout_reports_its_current_commit() -> None:
    """`rig --version` and a run's manifest name HEAD, not what was current at install time."""
    head = git(REPO, "rev-parse", "HEAD")[:9]
    out = subprocess.run([sys.executable, "-m", "rig.cli", "--version"], capture_output=True,
                         text=True, cwd=REPO, check=True).stdout
    assert re.fullmatch(rf"neurobench-rig \d+(\.\d+)*(\.dev\d+)?\+g{head}(\.d\d{{8}})?\n", out), out
    assert software_versions()["neurobench-rig"] == rig.rig_version() == rig.__version__
    assert f"+g{head}" in rig.__version__
