"""The virtual bench's C shim without a checkout (issue 36 part 3): an installed rig builds it
from its packaged sources into the user's cache, one folder per rig version, on first use; with
no C compiler the bench runs the Python DUT and says why."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from virtual_bench import host_dut
from virtual_bench.bench import VirtualBench
from virtual_bench.description import load_description

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """site-packages as the wheel lays it out: firmware sources and rig/_version.txt, no .git;
    and a cache of its own."""
    site = tmp_path / "site"
    for part in ("core", "host"):
        shutil.copytree(REPO / "firmware" / "dut" / part, site / "firmware" / "dut" / part,
                        ignore=shutil.ignore_patterns("build"))
    (site / "rig").mkdir()
    (site / "rig" / "_version.txt").write_text("0.1.dev7+gabcdef123\n")
    monkeypatch.setattr(host_dut, "REPO", site)
    monkeypatch.setattr(host_dut, "SOURCES", site / "firmware" / "dut" / "host")
    monkeypatch.setenv("RIG_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RIG_DUT_HOST", raising=False)
    return tmp_path


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                    reason="needs gcc and make (the C shim's build)")
def test_built_once_into_the_cache_per_rig_version(installed: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CC", raising=False)
    expected = installed / "cache" / "dut-host" / "0.1.dev7+gabcdef123" / "dut-host"
    assert host_dut.find_host_shim(build=False) == (None, "the C shim is not built")
    binary, why_not = host_dut.find_host_shim(build=True)
    assert (binary, why_not) == (expected, "")
    assert sorted(p.name for p in expected.parent.iterdir()) == ["dut-host"]  # no build debris
    # It is the shim: it boots, says its timestamp mode and that it is ready, and ends at EOF.
    ran = subprocess.run([str(binary), "--mode", "energy"], capture_output=True, text=True,
                         timeout=10, stdin=subprocess.DEVNULL, check=False)
    assert ran.returncode == 0 and ran.stdout.split() == [
        "m-timestamp-mode-energy", "m-init-done", "m-ready"], ran
    stamp = binary.stat().st_mtime_ns
    assert host_dut.find_host_shim(build=True) == (expected, "")
    assert binary.stat().st_mtime_ns == stamp  # found, not built again
    # Another rig version builds its own.
    (installed / "site" / "rig" / "_version.txt").write_text("0.2.0\n")
    assert host_dut.find_host_shim(build=True)[0] == \
        installed / "cache" / "dut-host" / "0.2.0" / "dut-host"


def test_no_compiler_runs_the_python_dut_and_says_why(installed: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "no-such-cc")
    assert host_dut.find_host_shim(build=True) == (None, "no C compiler: no-such-cc not found")
    bench = load_description(REPO / "benches" / "sim.toml")
    vb = VirtualBench(bench)
    try:
        assert vb.dut_impl == "python (no C compiler: no-such-cc not found)"
    finally:
        vb.close()
    assert not (installed / "cache" / "dut-host").exists()


def test_a_build_that_fails_says_so(installed: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("make") is None:
        pytest.skip("needs make")
    monkeypatch.setenv("CC", "false")  # a "compiler" that fails every file
    binary, why_not = host_dut.find_host_shim(build=True)
    assert binary is None and why_not.startswith("the C shim did not build: ")
    folder = installed / "cache" / "dut-host" / "0.1.dev7+gabcdef123"
    assert not any(folder.iterdir())  # no half-built binary, no build folder left
