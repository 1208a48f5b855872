"""The simulated devices' pty: a slow reader loses nothing, a reader that stops loses the rest."""

from __future__ import annotations

import os
import threading
import time

from virtual_bench.pty import Pty

#: Far more than the pty holds (~16 KB), so the write must wait on its reader.
DATA = bytes(range(256)) * 1024  # 256 KB


#: The simulated instruments' patience (virtual_bench WRITE_PATIENCE_S): a loaded CI host has
#: left a reader thread unscheduled for more than 0.2 s.
PATIENCE_S = 1.0


def read_slowly(fd: int, got: bytearray, stop_after: int | None = None) -> None:
    """Read 4 KB every 50 ms (~80 KB/s: DATA in ~3.2 s), stopping for good after `stop_after`
    bytes (or 20 s)."""
    deadline = time.monotonic() + 20.0
    while (stop_after is None or len(got) < stop_after) and time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            got += os.read(fd, 4096)
        except BlockingIOError:
            continue
        if len(got) >= len(DATA):
            return


def test_a_reader_slower_than_the_patience_but_reading_gets_every_byte() -> None:
    pty = Pty()
    os.set_blocking(pty.master, False)
    os.set_blocking(pty.slave, False)
    got = bytearray()
    reader = threading.Thread(target=read_slowly, args=(pty.slave, got))
    reader.start()
    try:
        # The whole write takes ~3.2 s, three times the patience: none of it is lost.
        assert pty.write(DATA, patience_s=PATIENCE_S) == 0
        reader.join(30)
        assert bytes(got) == DATA
    finally:
        reader.join(30)
        pty.close()


def test_a_reader_that_stops_loses_what_it_did_not_read() -> None:
    pty = Pty()
    os.set_blocking(pty.master, False)
    os.set_blocking(pty.slave, False)
    got = bytearray()
    reader = threading.Thread(target=read_slowly, args=(pty.slave, got, 64 * 1024))
    reader.start()
    try:
        dropped = pty.write(DATA, patience_s=PATIENCE_S)
        reader.join(30)
        # What was written reached the reader or sits in the pty; the rest was dropped.
        assert len(got) >= 64 * 1024 and dropped > 0
        left = bytearray()
        while True:
            try:
                left += os.read(pty.slave, 65536)
            except BlockingIOError:
                break
        assert bytes(got + left) == DATA[: len(DATA) - dropped]
    finally:
        reader.join(30)
        pty.close()
