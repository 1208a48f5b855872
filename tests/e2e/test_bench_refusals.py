"""What the bench alone shows is wrong is refused before anything exists (issue 39, "refusals
that leave debris"): a `[dut] port` that is no serial device, a `[qemu] firmware` image QEMU
would lock up on. One line, exit 2, no run folder, no ledger, no QEMU started. Before: a
`failed` run folder each time (the port's open failed, or QEMU aborted with "Lockup", after
the folder was made)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from protocols.errors import quoted
from tests.m4_image import EM_X86_64, LOCKUP_CODE, arm_elf

from .runs import REPO, bench_variant, run_rig
from .test_qemu_m4 import qemu_processes

pytestmark = pytest.mark.slow

VIRTUAL_DUT = '[dut]\nkind = "mlperf-tiny"\nport = "virtual"'


def refused(tmp_path: Path, *args: str) -> str:
    """Run `rig measure asc ARGS`: its one error line, after checking nothing was written."""
    runs = tmp_path / "runs"
    done = run_rig("measure", "asc", *args, "--runs-dir", str(runs), timeout=60)
    assert done.returncode == 2, done.stderr
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("rig: error: "), done.stderr
    assert not runs.exists()  # no run folder, no ledger
    return lines[0]


@pytest.mark.parametrize("port", ["none", "abc", "12", "/dev/ttyRIG_NOPE0"])
def test_a_dut_port_that_is_no_device_is_refused_before_a_run_folder(
        tmp_path: Path, port: str) -> None:
    bench = bench_variant(tmp_path, port=(VIRTUAL_DUT, VIRTUAL_DUT.replace("virtual", port)))
    line = refused(tmp_path, "--bench", str(bench))
    assert f"{bench}: [dut] port '{port}' does not exist" in line
    assert "rig devices" in line


def test_a_dut_port_that_is_a_plain_file_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "notes.txt"
    plain.write_text("not a UART")
    bench = bench_variant(tmp_path, port=(VIRTUAL_DUT, VIRTUAL_DUT.replace("virtual",
                                                                            str(plain))))
    line = refused(tmp_path, "--bench", str(bench))
    assert f"[dut] port {quoted(str(plain))} is not a serial device (a regular file)" in line
    # the --port override is the same key
    line = refused(tmp_path, "--bench", str(REPO / "benches" / "sim.toml"), "--port", "abc")
    assert "[dut] port 'abc' does not exist" in line


@pytest.fixture
def qemu() -> None:
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm is not installed (`make system-deps` installs it)")


def qemu_bench(tmp_path: Path, image: Path) -> Path:
    return bench_variant(tmp_path, "qemu", base="qemu-m4", elf=(
        'firmware = "../build/firmware/arm/dut-mps2-an386.elf"', f'firmware = "{image}"'))


BAD_IMAGES = {
    # 1 KB of an image whose first segment's bytes start at 4 KB
    "truncated": (lambda: arm_elf([(0, LOCKUP_CODE.ljust(0x2000, b"\1"), 0x2000)])[:1024],
                  "cut short"),
    "x86": (lambda: arm_elf([(0x40_0000, b"\x90" * 16, 16)], machine=EM_X86_64, elf_class=2),
            "64-bit"),
    "random": (lambda: random.Random(39).randbytes(4096), "is not an ELF image"),
    "stm32": (lambda: arm_elf([(0x0800_0000, LOCKUP_CODE, len(LOCKUP_CODE))]),
              "outside the emulated mps2-an386's memory"),
}


@pytest.mark.parametrize("kind", sorted(BAD_IMAGES))
def test_a_corrupt_firmware_image_is_refused_before_qemu_starts(
        tmp_path: Path, qemu: None, kind: str) -> None:
    make, why = BAD_IMAGES[kind]
    image = tmp_path / f"{kind}.elf"
    image.write_bytes(make())
    bench = qemu_bench(tmp_path, image)
    line = refused(tmp_path, "--bench", str(bench))
    assert f"{bench}: [qemu] firmware: {image}" in line and why in line, line
    assert "make firmware-arm" in line
    # `rig dut --bench` checks the image as a run does, before QEMU starts
    done = run_rig("dut", "--bench", str(bench), "info", timeout=60)
    assert done.returncode == 2 and why in done.stderr, done.stderr
    assert qemu_processes(image) == []



def test_rig_dut_names_qemus_abort(tmp_path: Path, qemu: None) -> None:
    """An image the bench alone cannot fault (a vector table, then an undefined instruction):
    QEMU locks up once the guest runs. `rig dut` said "the device was unplugged, reset or
    closed; reconnect it"; it names QEMU's abort, as a run does."""
    image = tmp_path / "lockup.elf"
    image.write_bytes(arm_elf([(0, LOCKUP_CODE, len(LOCKUP_CODE))]))
    done = run_rig("dut", "--bench", str(qemu_bench(tmp_path, image)), "info", timeout=60)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("rig: error: QEMU was ended by SIGABRT: qemu: fatal: Lockup"), line
    assert "unplugged" not in line and "make firmware-arm" in line
    assert qemu_processes(image) == []
