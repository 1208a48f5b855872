"""The images a bench names for its DUT (issue 38): the manifest named a QEMU firmware image by
path only, so a run on an ELF with one model weight changed could not be told apart from one on
the original. `bench_images` records each image's SHA-256 and size (and says why it could not
when the file cannot be read)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rig.bench.config import load_bench
from rig.bench.images import bench_images, file_digest

REPO = Path(__file__).resolve().parents[2]


def qemu_bench(tmp_path: Path, elf: Path) -> Path:
    text = (REPO / "benches" / "qemu-m4.toml").read_text()
    old = 'firmware = "../build/firmware/arm/dut-mps2-an386.elf"'
    assert old in text
    path = tmp_path / f"{elf.stem}.toml"
    path.write_text(text.replace(old, f'firmware = "{elf}"'))
    return path


def test_a_qemu_bench_records_its_firmware_image_by_digest(tmp_path: Path) -> None:
    one, other = tmp_path / "a.elf", tmp_path / "b.elf"
    one.write_bytes(b"\x7fELF" + bytes(1000))
    other.write_bytes(b"\x7fELF" + bytes(999) + b"\x01")  # one "weight" changed
    images = [bench_images(load_bench(qemu_bench(tmp_path, elf))) for elf in (one, other)]
    assert [list(i) for i in images] == [["qemu firmware"], ["qemu firmware"]]
    a, b = images[0]["qemu firmware"], images[1]["qemu firmware"]
    assert a == {"path": str(one), "sha256": hashlib.sha256(one.read_bytes()).hexdigest(),
                 "size_bytes": 1004}
    assert b["sha256"] != a["sha256"] and b["size_bytes"] == a["size_bytes"]


def test_a_xylo_bench_records_its_network_spec(tmp_path: Path) -> None:
    bench = load_bench(REPO / "benches" / "xylo.toml")
    spec = Path(bench.dut.spec)
    assert bench_images(bench) == {"xylo network spec": {
        "path": str(spec), "sha256": hashlib.sha256(spec.read_bytes()).hexdigest(),
        "size_bytes": spec.stat().st_size}}


def test_a_bench_that_names_no_image_records_none() -> None:
    assert bench_images(load_bench(REPO / "benches" / "sim.toml")) == {}


def test_an_unreadable_image_says_why(tmp_path: Path) -> None:
    gone = tmp_path / "gone.elf"
    assert file_digest(gone) == {"path": str(gone), "sha256": None, "size_bytes": None,
                                 "error": "no such file"}
