"""The driver-thread pieces the energy monitors share (drivers/emon/base.py): a chunk callback
that raises is kept for stop() while the stream keeps draining (LPM01A, PPK2, Joulescope), and
an acquisition thread keeps what ended it (Keysight, Otii)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from drivers.emon.base import AcquisitionThread, CallbackErrors, Chunk
from drivers.errors import DeviceError, DeviceTimeout


def chunk(first: int, n: int = 4) -> Chunk:
    return Chunk(first, np.zeros(n), np.full(n, 1.8), np.ones(n, np.uint8))


def test_a_raising_callback_is_kept_and_the_stream_drains_on() -> None:
    seen: list[int] = []

    def recorder(c: Chunk) -> None:
        seen.append(c.first_sample_id)
        if c.first_sample_id in (4, 8):
            raise ValueError(f"recorder broke at {c.first_sample_id}")

    errors = CallbackErrors("test")
    for first in (0, 4, 8, 12):
        errors.call(recorder, chunk(first))  # never raises on the driver's thread
    assert seen == [0, 4, 8, 12]
    with pytest.raises(ValueError, match="broke at 4"):  # the first one
        errors.raise_kept()
    errors.raise_kept()  # raised once, then forgotten
    errors.keep(DeviceError("stream stopped"))
    errors.clear()
    errors.raise_kept()


def test_an_acquisition_that_fails_keeps_its_error() -> None:
    def body() -> None:
        raise DeviceError("port gone")

    thread = AcquisitionThread("test")
    thread.reset()
    thread.start(body, name="t-acq")
    error = thread.stop(30.0, lambda: DeviceTimeout("late"))
    assert isinstance(error, DeviceError) and error.message == "port gone"
    assert thread.error is error  # the driver's `fault`
    thread.reset()
    assert thread.error is None and not thread.stop_wanted.is_set()


def test_an_acquisition_ends_when_asked() -> None:
    thread = AcquisitionThread("test")
    thread.reset()
    thread.start(thread.stop_wanted.wait, name="t-acq")  # polls nothing else: ends when asked
    assert thread.stop(30.0, lambda: DeviceTimeout("late")) is None


def test_an_acquisition_that_does_not_end_is_late() -> None:
    thread, release = AcquisitionThread("test"), threading.Event()
    thread.reset()
    thread.start(release.wait, name="t-acq")  # ignores stop_wanted until released
    try:
        error = thread.stop(0.01, lambda: DeviceTimeout("did not end in time"))
        assert isinstance(error, DeviceTimeout) and thread.error is error
    finally:
        release.set()
