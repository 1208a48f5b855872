"""`rig measure asc --device qemu-m4` end to end: the Cortex-M4 build of the DUT shim under QEMU
(firmware/dut/mps2-an386), reached over QEMU's pty; latency from the firmware's own timer,
accuracy over the test set, every figure labelled emulated; QEMU ended on every exit path."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
import signal
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.m4_image import LOCKUP_CODE, arm_elf, build_m4_elf

from .runs import REPO, RIG, bench_variant, events, only_run, run_rig, wait_for_event

pytestmark = pytest.mark.slow

LABEL = "emulated: QEMU mps2-an386, -icount shift=5, 32 ns per instruction"


@pytest.fixture(scope="module")
def m4_elf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """firmware/dut/mps2-an386 built once (skipped, reason printed, without the toolchain)."""
    return build_m4_elf(tmp_path_factory)


def m4_bench(tmp_path: Path, elf: Path, **replace: tuple[str, str]) -> Path:
    """benches/qemu-m4.toml on `elf`, cut to 2 timed runs of 2 s and 1 test sample per class."""
    return bench_variant(
        tmp_path, "qemu-m4", base="qemu-m4",
        elf=('firmware = "../build/firmware/arm/dut-mps2-an386.elf"', f'firmware = "{elf}"'),
        spc=("samples_per_class = 3", "samples_per_class = 1"),
        runs=("runs = 5", "runs = 2"), run_s=("min_run_s = 10.0", "min_run_s = 2.0"), **replace)


def qemu_processes(elf: Path) -> list[int]:
    """Pids of QEMUs running `elf`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"qemu-system-arm") and str(elf).encode() in cmd:
                pids.append(int(entry.name))
    return pids


def test_measure_asc_on_the_emulated_cortex_m4_is_complete_and_labelled_emulated(
        tmp_path: Path, m4_elf: Path) -> None:
    bench, runs = m4_bench(tmp_path, m4_elf), tmp_path / "runs"
    done = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(runs), "--json",
                   timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    s = out["summary"]
    assert (out["status"], out["simulated"], out["emulated"]) == ("complete", False, LABEL)
    assert s["timing"].startswith(LABEL) and "not a hardware figure" in s["timing"]
    # Latency from the DUT's own timer over 2 runs; accuracy over the 4 test samples.
    assert (s["latency_runs"], s["latency_timer"], s["samples"]) == (2, "dut", 4)
    assert s["execution_time_timer"] == "dut" and s["results_check"].startswith("CRC-32")
    # Guest time counts instructions: every inference of one input takes the same µs, so the
    # runs agree exactly and the rate is the inverse of the runs' own time per inference.
    assert s["latency_max_deviation"] < 1e-4
    assert s["inferences_per_s"] == pytest.approx(1 / s["latency_time_per_inference_mean_s"],
                                                  rel=1e-4)
    assert [c["name"] for c in s["checks"] if c["ok"] is False] == []
    run = only_run(runs)
    manifest = json.loads((run / "manifest.json").read_text())
    assert (manifest["emulated"], manifest["simulated"]) == (LABEL, False)
    assert manifest["instruments"]["emulator"]["machine"] == "mps2-an386"
    # Each row of the results table says it: emulated, not simulated (issue 38).
    rows = pq.read_table(run / "results.parquet").to_pylist()
    assert rows and all(r["emulated"] is True and r["simulated"] is False for r in rows)
    with open(run / "results.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows)
    assert {(r["emulated"], r["simulated"]) for r in table} == {("true", "false")}
    assert manifest["instruments"]["dut"]["vendor"] == "neurobench-rig mps2-an386 Cortex-M4"
    shown = run_rig("show", str(run))
    text = " ".join(shown.stdout.split())
    assert f"(EMULATED: {LABEL.removeprefix('emulated: ')})" in text and "SIMULATED" not in text
    assert json.loads(run_rig("show", str(run), "--json").stdout)["emulated"] == LABEL
    assert qemu_processes(m4_elf) == []  # QEMU ended with the run
    report = run_rig("report", str(run), "--out", str(tmp_path / "report"), "--format", "md",
                     "--json", timeout=300)
    assert report.returncode == 0, report.stderr
    md = (tmp_path / "report" / "report.md").read_text()
    assert md.count("EMULATED (QEMU mps2-an386, -icount shift=5, 32 ns per instruction)") >= 3
    assert "Some results in this report are emulated" in md and "SIMULATED" not in md
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    assert results["systems"][0]["emulated"] == results["runs"][0]["emulated"] == LABEL
    assert results["runs"][0]["simulated"] is None


def test_ctrl_c_ends_qemu_and_marks_the_run_interrupted(tmp_path: Path, m4_elf: Path) -> None:
    bench, runs = m4_bench(tmp_path, m4_elf), tmp_path / "runs"
    proc = subprocess.Popen([*RIG, "measure", "asc", "--bench", str(bench), "--runs-dir",
                             str(runs)], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    run = wait_for_event(runs, "latency_run", 1, proc, timeout_s=120)
    assert len(qemu_processes(m4_elf)) == 1
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert events(run)[-1]["status"] == "interrupted"
    assert qemu_processes(m4_elf) == []


def test_a_missing_firmware_image_is_a_one_line_error(tmp_path: Path, m4_elf: Path) -> None:
    bench = m4_bench(tmp_path, tmp_path / "nowhere.elf")
    done = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"))
    assert done.returncode == 2, done.stderr
    assert f"no firmware image at {tmp_path / 'nowhere.elf'}" in done.stderr
    assert "make firmware-arm" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()  # refused from the bench alone: no run folder (22.9)


def test_firmware_that_never_boots_is_an_error_and_qemu_is_ended(tmp_path: Path,
                                                                  m4_elf: Path) -> None:
    garbage = tmp_path / "not-the-shim.elf"
    # An ARM image that passes every check of the file (tests/e2e/test_bench_refusals.py) and
    # faults at its first instruction: a board with the wrong image
    garbage.write_bytes(arm_elf([(0, LOCKUP_CODE, len(LOCKUP_CODE))]))
    mode = 'timestamp_mode = "performance"'
    bench = m4_bench(tmp_path, garbage, boot=(mode, f"{mode}\nboot_timeout_s = 1.0"))
    done = run_rig("measure", "asc", "--bench", str(bench), "--runs-dir", str(tmp_path / "r"))
    assert done.returncode == 2, done.stderr
    # QEMU's own words: the image locked the emulated core up, and QEMU stopped.
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("rig: error: QEMU was ended by SIGABRT: qemu: fatal: Lockup")
    assert "make firmware-arm" in error and "Traceback" not in done.stderr
    assert qemu_processes(garbage) == []


def test_two_firmware_images_are_told_apart_by_their_digest(tmp_path: Path, m4_elf: Path
                                                            ) -> None:
    """Issue 38: a run on an ELF with one byte more (it runs the same: same vendor, model and
    figures) named the image by path only. Each manifest records its image's SHA-256 and
    size, and `rig show` prints them."""
    other = Path(shutil.copy(m4_elf, tmp_path / "dut-other.elf"))
    other.write_bytes(other.read_bytes() + b"\0")  # past the ELF's segments: QEMU loads the same
    seen = []
    for elf in (m4_elf, other):
        runs = tmp_path / f"runs-{elf.stem}"
        done = run_rig("measure", "asc", "--bench", str(m4_bench(tmp_path, elf)), "--runs-dir",
                       str(runs), "--scope", "performance", timeout=300)
        assert done.returncode == 0, done.stderr
        run = only_run(runs)
        manifest = json.loads((run / "manifest.json").read_text())
        image = manifest["images"]["qemu firmware"]
        assert image == {"path": str(elf), "sha256": hashlib.sha256(elf.read_bytes()).hexdigest(),
                         "size_bytes": elf.stat().st_size}
        assert manifest["instruments"]["dut"]["vendor"] == "neurobench-rig mps2-an386 Cortex-M4"
        shown = run_rig("show", str(run))
        assert shown.returncode == 0, shown.stderr
        assert f"qemu firmware: {elf}" in shown.stdout
        assert f"sha256 {image['sha256']}, {image['size_bytes']:,} bytes" in shown.stdout
        assert json.loads(run_rig("show", str(run), "--json").stdout)["images"] == \
            manifest["images"]
        seen.append(image["sha256"])
    assert seen[0] != seen[1]
