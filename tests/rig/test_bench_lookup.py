"""Where `--device NAME` finds its bench (issue 36 parts 1-2): ./benches, then the lab folder
(RIG_LAB, or `rig-lab.toml` from the working folder upwards), then the installed package;
`rig benches` lists them; `rig init DIR` makes a lab folder, or refuses and writes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rig import cli
from rig.bench.config import (
    LAB_MARKER,
    SHIPPED_ROOT,
    bench_entries,
    benches_dir,
    known_devices,
    load_bench,
    resolve_device,
    sweeps_dir,
)
from rig.commands.init import planned

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RIG_LAB", raising=False)


def rig(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` with its text, and every folder (as "/")."""
    return {str(p.relative_to(folder)): p.read_text() if p.is_file() else "/"
            for p in sorted(folder.rglob("*"))}


def test_the_checkout_takes_its_own_benches_without_a_note(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(REPO)
    assert SHIPPED_ROOT == REPO
    assert resolve_device("sim") == REPO / "benches" / "sim.toml"
    assert capsys.readouterr().err == ""  # ./benches and the package's are one folder here
    assert {e.origin for e in bench_entries()} == {"./benches"}


def test_an_empty_folder_sees_the_package_benches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    shipped = sorted(p.stem for p in (SHIPPED_ROOT / "benches").glob("*.toml"))
    assert known_devices() == shipped and "sim" in shipped
    assert resolve_device("sim") == SHIPPED_ROOT / "benches" / "sim.toml"
    code, out, _ = rig(capsys, "benches", "--json")
    listed = json.loads(out)
    assert code == 0 and listed["lab"] is None
    assert {(b["name"], b["origin"], b["taken"]) for b in listed["benches"]} == {
        (name, "package", True) for name in shipped}


def test_working_folder_then_lab_then_package_and_a_note_for_a_name_in_two_places(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    sim_text = (SHIPPED_ROOT / "benches" / "sim.toml").read_text()
    lab = tmp_path / "lab"
    (lab / "benches").mkdir(parents=True)
    (lab / LAB_MARKER).write_text("[lab]\n")
    (lab / "benches" / "sim.toml").write_text(sim_text)
    (lab / "benches" / "only-lab.toml").write_text(sim_text)
    work = lab / "runs" / "today"  # a folder inside the lab: found by the marker, upwards
    (work / "benches").mkdir(parents=True)
    (work / "benches" / "sim.toml").write_text(sim_text)
    monkeypatch.chdir(work)

    assert resolve_device("only-lab") == lab / "benches" / "only-lab.toml"
    assert capsys.readouterr().err == ""
    assert resolve_device("sim") == work / "benches" / "sim.toml"
    note = capsys.readouterr().err
    assert note.startswith("note: bench 'sim' found in 3 places; using ")
    assert str(work / "benches" / "sim.toml") in note and "(./benches)" in note
    assert f"lab: {lab / 'benches' / 'sim.toml'}" in note
    assert f"package: {SHIPPED_ROOT / 'benches' / 'sim.toml'}" in note

    code, out, _ = rig(capsys, "benches")
    rows = [line.split() for line in out.splitlines()[1:] if "sim.toml" in line
            and line.split()[-1].endswith("/sim.toml")]
    assert code == 0 and f"lab folder: {lab}" in out
    assert rows == [["*", "sim", "./benches", str(work / "benches" / "sim.toml")],
                    ["sim", "lab", str(lab / "benches" / "sim.toml")],
                    ["sim", "package", str(SHIPPED_ROOT / "benches" / "sim.toml")]]

    # RIG_LAB names the lab from anywhere; one that is no folder is bad input.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RIG_LAB", str(lab))
    assert resolve_device("only-lab") == lab / "benches" / "only-lab.toml"
    monkeypatch.setenv("RIG_LAB", str(tmp_path / "nowhere"))
    code, _, err = rig(capsys, "measure", "asc", "--device", "sim")
    assert code == 2 and err.startswith("rig: error: RIG_LAB=") and "not a folder" in err


def test_rig_init_makes_a_lab_the_rig_then_uses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = rig(capsys, "init", "lab")
    lab = tmp_path / "lab"
    assert (code, err) == (0, "") and str(lab) in out
    for folder in ("benches", "sweeps"):
        shipped = {str(p.relative_to(SHIPPED_ROOT / folder)): p.read_text()
                   for p in (SHIPPED_ROOT / folder).rglob("*.toml")}
        assert tree(lab / folder) == {**shipped, "workers": "/"} if folder == "benches" \
            else shipped
    assert (lab / "runs").is_dir() and not any((lab / "runs").iterdir())
    assert (lab / LAB_MARKER).is_file()
    readme = (lab / "README.md").read_text()
    for words in ("[dut] port", "[emon] port", "voltage_limit_v", "[emon] driver",
                  "rig devices --check --device NAME", "RIG_LAB", LAB_MARKER):
        assert words in readme, words

    # In the lab its copies are taken (and say so), and a copy's `../firmware/...` still
    # finds the installed model; a model the lab puts there itself wins.
    monkeypatch.chdir(lab)
    assert resolve_device("xylo") == lab / "benches" / "xylo.toml"
    assert "(lab), not package: " in capsys.readouterr().err
    shipped_spec = SHIPPED_ROOT / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
    assert load_bench(lab / "benches" / "xylo.toml").dut.spec == str(shipped_spec)
    own = lab / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
    own.parent.mkdir(parents=True)
    own.write_bytes(shipped_spec.read_bytes())
    assert load_bench(lab / "benches" / "xylo.toml").dut.spec == str(own)


def test_rig_init_overwrites_nothing_and_names_what_is_there(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    lab = tmp_path / "lab"
    (lab / "benches").mkdir(parents=True)
    (lab / "benches" / "sim.toml").write_text("# my own bench\n")
    (lab / "README.md").write_text("mine\n")
    (lab / "runs").mkdir()  # an existing runs/ folder is no clash
    (lab / "runs" / "r1").write_text("a run\n")
    before = tree(lab)
    monkeypatch.chdir(tmp_path)
    code, out, err = rig(capsys, "init", "lab")
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert "2 file(s) already there, not overwritten: README.md, benches/sim.toml" in err
    assert tree(lab) == before

    # A folder where a file goes is a clash too; with nothing in the way, the lab is made
    # around what was there.
    (lab / "README.md").unlink()
    (lab / "benches" / "sim.toml").unlink()
    (lab / "sweeps").write_text("a file where a folder goes\n")
    code, _, err = rig(capsys, "init", "lab")
    assert code == 2 and "1 file(s) already there, not overwritten: sweeps " in err
    (lab / "sweeps").unlink()
    assert rig(capsys, "init", "lab")[0] == 0
    assert (lab / "runs" / "r1").read_text() == "a run\n"


def test_rig_init_on_a_file_or_where_it_cannot_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x\n")
    code, _, err = rig(capsys, "init", "afile")
    assert code == 2 and err == f"rig: error: {tmp_path / 'afile'}: is a file, not a folder " \
        "(name a new folder, or an existing one, for the lab)\n"
    code, _, err = rig(capsys, "init", "afile/lab")
    assert code == 2 and "afile: is a file, so" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]

    if os.geteuid() == 0:  # root may write any folder: a place no one can make folders in
        target = Path("/proc/rig-init-test/lab")
        code, _, err = rig(capsys, "init", str(target))
        assert code == 2 and len(err.splitlines()) == 1 and str(target) in err
        assert "nothing was left behind" in err and not target.parent.exists()
        return
    ro = tmp_path / "read-only"
    ro.mkdir(mode=0o555)
    try:
        code, _, err = rig(capsys, "init", str(ro / "lab"))
        assert code == 2 and len(err.splitlines()) == 1
        assert f"{ro}: not writable, so the lab folder {ro / 'lab'} cannot be made" in err
        assert not any(ro.iterdir())
    finally:
        ro.chmod(0o755)


def test_a_failed_write_leaves_nothing_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A write that fails halfway (a disk full, a file appearing meanwhile) removes what it
    made: the folder is as before."""
    lab = tmp_path / "lab"
    files = list(planned(lab, "x"))
    real_open = Path.open

    def failing_open(self: Path, mode: str = "r", *args: object, **kwargs: object):
        if self == files[len(files) // 2]:
            raise OSError(28, "No space left on device", str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", failing_open)
    monkeypatch.chdir(tmp_path)
    code, _, err = rig(capsys, "init", "lab")
    assert code == 2 and "No space left on device" in err and "nothing was left behind" in err
    assert list(tmp_path.iterdir()) == []


def test_rig_serve_takes_files_from_the_lab_or_the_package_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`rig serve` starts only files from its benches and sweeps folders; by default those are
    found as `--device` finds benches (./, the lab, the package), not a bare ./benches that a
    lab's subfolder or an installed rig does not have."""
    parser = cli.build_parser()
    args = parser.parse_args(["serve", "--mqtt", "mqtt://127.0.0.1:1"])
    assert (args.benches_dir, args.sweeps_dir) == (None, None)  # resolved when it runs
    monkeypatch.chdir(tmp_path)
    assert (benches_dir(), sweeps_dir()) == (SHIPPED_ROOT / "benches", SHIPPED_ROOT / "sweeps")
    assert rig(capsys, "init", "lab")[0] == 0
    (tmp_path / "lab" / "runs" / "today").mkdir()
    monkeypatch.chdir(tmp_path / "lab" / "runs" / "today")  # the marker is found upwards
    assert (benches_dir(), sweeps_dir()) == (tmp_path / "lab" / "benches",
                                            tmp_path / "lab" / "sweeps")
