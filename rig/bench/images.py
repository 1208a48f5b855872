"""The images a bench runs on its DUT, by digest: two runs on images that differ by one model
weight report the same vendor and model, so a path alone cannot tell them apart.

`bench_images` gives those the bench file names (`[qemu] firmware`, the ELF QEMU runs; `[dut]
spec`, the network a Xylo DUT is loaded with), `file_digest` any file: its path, SHA-256 and
size. The run manifest keeps them under `images`; the virtual bench's own (the host build of the
DUT firmware, the UNO's AVR build on simavr) are in `instruments.virtual_bench.images`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rig.bench.config import Bench

#: Bytes hashed per read (bounds memory whatever the image's size).
_CHUNK = 1 << 20


def file_digest(path: str | Path) -> dict[str, Any]:
    """{"path", "sha256", "size_bytes"} of a file; for one that cannot be read, both None and
    "error" saying why (the run goes on: the image was checked, or will fail, elsewhere)."""
    path = Path(path)
    digest = hashlib.sha256()
    size = 0
    try:
        with path.open("rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        return {"path": str(path), "sha256": None, "size_bytes": None, "error": "no such file"}
    except OSError as exc:
        return {"path": str(path), "sha256": None, "size_bytes": None,
                "error": exc.strerror or str(exc)}
    return {"path": str(path), "sha256": digest.hexdigest(), "size_bytes": size}


def bench_images(bench: Bench) -> dict[str, dict[str, Any]]:
    """The images the bench file names for its DUT, by role ("qemu firmware", "xylo network
    spec"), each as `file_digest` gives it; {} for a bench that names none (a board flashed
    beforehand, a virtual bench)."""
    images: dict[str, dict[str, Any]] = {}
    if bench.qemu is not None and bench.qemu.firmware:
        images["qemu firmware"] = file_digest(bench.qemu.firmware)
    if bench.dut.kind == "xylo" and bench.dut.spec:
        images["xylo network spec"] = file_digest(bench.dut.spec)
    return images
