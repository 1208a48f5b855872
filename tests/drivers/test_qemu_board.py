"""drivers/dut/qemu.py: QEMU started with the board's UART on a pty, its failures as typed
errors with a hint, and QEMU ended by its pid on close and when the rig's process dies."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from drivers.dut.qemu import QemuBoard, emulated_label
from drivers.errors import PortError

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _gone_within(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def qemu() -> str:
    if shutil.which("qemu-system-arm") is None:
        pytest.skip("qemu-system-arm is not installed (`make system-deps` installs it)")
    return "qemu-system-arm"


def test_missing_emulator_and_missing_image_are_port_errors_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(PortError) as err:
        QemuBoard(tmp_path / "x.elf", qemu="qemu-system-no-such-emulator")
    assert "not installed" in err.value.message and "apt-get install" in err.value.hint
    if shutil.which("qemu-system-arm"):
        with pytest.raises(PortError) as err:
            QemuBoard(tmp_path / "missing.elf")
        assert str(tmp_path / "missing.elf") in err.value.message
        assert "make firmware-arm" in err.value.hint


def test_qemu_that_exits_at_once_is_reported_with_its_output(qemu: str, tmp_path: Path) -> None:
    image = tmp_path / "not-an-elf.elf"
    image.write_text("not an image")
    with pytest.raises(PortError) as err:
        QemuBoard(image, machine="no-such-board")
    assert "exited with status" in err.value.message and "no-such-board" in err.value.message


def test_close_ends_qemu_by_pid_and_a_killed_parent_takes_qemu_with_it(
        qemu: str, tmp_path: Path) -> None:
    # The smallest image that keeps running: a vector table (stack top, reset at 0x8 in Thumb)
    # and `b .` there. A blank one locks the core up and QEMU exits ("Lockup: can't escalate"),
    # which raced the `running` checks below.
    image = tmp_path / "spin.bin"
    image.write_bytes(struct.pack("<IIH", 0x2000_1000, 0x9, 0xE7FE).ljust(64, b"\0"))
    board = QemuBoard(image, icount_shift=5)
    assert board.port.startswith("/dev/pts/") and board.running
    board.power_on()
    assert board.running
    assert board.label == emulated_label("mps2-an386", 5)
    board.close()
    board.close()  # twice is fine
    assert _gone_within(board.pid, 5.0)
    # A rig process killed with SIGKILL cannot clean up: the kernel ends its QEMU.
    code = ("import sys, time; from drivers.dut.qemu import QemuBoard; "
            f"b = QemuBoard({str(image)!r}); print(b.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(10)
    parent.stdout.close()
    assert _gone_within(pid, 5.0)
