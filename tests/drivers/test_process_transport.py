"""ProcessTransport: stdio of a child process as a byte transport; the watchdog kills its group."""

from __future__ import annotations

import select
import sys
import textwrap
import time
from pathlib import Path

import pytest

import drivers.process as process_module
from drivers.dut.client import DutClient
from drivers.errors import DeviceError, PortError
from drivers.process import ProcessTransport, group_members

PY = sys.executable


def _script(code: str) -> list[str]:
    return [PY, "-u", "-c", textwrap.dedent(code)]


#: A minimal DUT on stdio: the banner, then `name%` and `caps%` (enough for DutClient).
FAKE_DUT = """
    import sys
    out = sys.stdout
    out.write("m-timestamp-mode-performance\\r\\nm-init-done\\r\\nm-ready\\r\\n"); out.flush()
    buf = b""
    while True:
        c = sys.stdin.buffer.read(1)
        if not c:
            break
        if c != b"%":
            buf += c
            continue
        cmd, buf = buf.decode(), b""
        if cmd == "name":
            out.write("m-name-fake-[stdio]\\r\\n")
        elif cmd == "caps":
            out.write("m-timestamp-mode-performance\\r\\nm-caps-[qubo]\\r\\n")
        else:
            out.write("e-[Unknown command: " + cmd + "]\\r\\n")
        out.write("m-ready\\r\\n"); out.flush()
"""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not count: it has ended, only its entry is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_bytes_go_both_ways_and_read_until_collects_them() -> None:
    with ProcessTransport(["cat"], name="echo") as t:
        t.write(b"hello%" * 3)
        got = t.read_until(time.monotonic() + 5.0, lambda b: b.count(b"%") == 3)
        assert got == b"hello%" * 3
        assert t.read() == b""  # nothing more: returns empty after the short poll


def test_reset_input_drops_what_is_waiting() -> None:
    with ProcessTransport(["cat"], name="echo") as t:
        t.write(b"stale")
        # Wait (bounded) until the echo is there, without consuming it.
        select.select([t._stdout], [], [], 5.0)
        t.reset_input()
        t.write(b"fresh")
        assert t.read_until(time.monotonic() + 5.0, lambda b: len(b) >= 5) == b"fresh"


def test_dut_client_works_unchanged_over_a_process() -> None:
    client = DutClient(ProcessTransport(_script(FAKE_DUT), name="fake"), name="fake DUT")
    try:
        assert client.wait_for_boot(timeout_s=10) == "performance"
        assert client.negotiate() == frozenset({"qubo"})
        name = client.command("name")
        assert any(getattr(e, "name", None) == "fake" for e in name)
    finally:
        client.close()


def test_a_missing_program_is_a_port_error() -> None:
    with pytest.raises(PortError, match="no such program"):
        ProcessTransport(["/nonexistent/loihi-shim"], name="shim")


def test_a_dead_child_reports_exit_code_and_last_stderr_lines() -> None:
    t = ProcessTransport(
        _script("import sys; print('loading model', file=sys.stderr); "
                "print('scif crashed', file=sys.stderr); sys.exit(3)"),
        name="shim",
    )
    try:
        with pytest.raises(DeviceError, match=r"exited with code 3.*scif crashed") as info:
            t.read_until(time.monotonic() + 10.0, lambda b: False)
        assert "loading model" in str(info.value)
        assert t.returncode == 3
    finally:
        t.close()


def test_the_watchdog_kills_a_hanging_child_and_its_whole_group() -> None:
    # The child starts a grandchild (as Lava starts its model processes), then hangs silently.
    hang = """
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
    """
    t = ProcessTransport(_script(hang), name="hung shim")
    try:
        line = t.read_until(time.monotonic() + 10.0, lambda b: b.endswith(b"\n"))
        grandchild = int(line)
        assert _alive(grandchild) and sorted(group_members(t.pgid)) == sorted([t.pid, grandchild])
        client = DutClient(t, name="hung shim")
        # The client would wait 60 s; the watchdog ends the wait with the group's death.
        killed = r"killed by the watchdog after 0\.3 s"
        with t.watchdog(0.3), pytest.raises(DeviceError, match=killed):
            client.wait_for_boot(timeout_s=60)
        assert t.killed_by_watchdog
        assert t.returncode == -9
        assert group_members(t.pgid) == []
        assert not _alive(grandchild)
    finally:
        t.close()


def test_a_disarmed_watchdog_does_not_fire() -> None:
    # The deadline leaves `cat` time to echo on a loaded machine (0.05 s did not, once).
    with ProcessTransport(["cat"], name="echo") as t:
        with t.watchdog(1.0):
            t.write(b"x")
            assert t.read_until(time.monotonic() + 5.0, lambda b: b == b"x") == b"x"
        # Past the old deadline (a bounded wait, not a measurement): still alive.
        time.sleep(1.1)
        assert t.returncode is None and not t.killed_by_watchdog


def test_close_kills_a_child_that_ignores_sigterm(monkeypatch) -> None:
    monkeypatch.setattr(process_module, "TERMINATE_GRACE_S", 0.2)
    stubborn = """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    """
    t = ProcessTransport(_script(stubborn), name="stubborn")
    t.read_until(time.monotonic() + 10.0, lambda b: b.endswith(b"\n"))
    t.close()
    assert t.returncode == -9
    assert group_members(t.pgid) == []
    with pytest.raises(PortError, match="closed"):
        t.read()
    t.close()  # twice is fine


def test_close_with_grace_lets_a_child_finish_its_shutdown_before_any_signal() -> None:
    """A child that stops at the end of its input (the virtual bench powering its devices off)
    gets `grace_s` to do so: it exits 0 with its last words written, instead of by SIGTERM."""
    tidy = """
        import sys
        print("ready", flush=True)
        sys.stdin.read()  # until the rig closes our stdin
        print("powered off", file=sys.stderr, flush=True)
    """
    t = ProcessTransport(_script(tidy), name="tidy")
    t.read_until(time.monotonic() + 10.0, lambda b: b.endswith(b"\n"))
    t.close(grace_s=10.0)
    assert t.returncode == 0 and t.stderr_tail == ["powered off"]


def test_a_watchdog_timeout_must_be_positive() -> None:
    with ProcessTransport(["cat"], name="echo") as t, pytest.raises(ValueError):
        t.arm_watchdog(0)
