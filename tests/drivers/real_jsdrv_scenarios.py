"""Scenarios that run the rig's Joulescope driver against the REAL `pyjoulescope_driver.Driver`
with no device attached; run as ``python -m tests.drivers.real_jsdrv_scenarios NAME DEVICE``.

Each runs in its own process (`test_joulescope_real_driver.py` starts it): a wrong unsubscribe
leaves the C side calling a callback the binding has released, which once crashed the process.

The driver's pub/sub runs without a device; what a device would add is its return code for each
publish (without one, a publish with a timeout waits and fails). `DeviceEndpoint` subscribes to
the device's topics on the real pub/sub, records each publish and answers it with return code 0.
It publishes the code as 4 bytes: the binding sends a Python int as u32, and the driver reads a
return code from an i32 or from the first 4 bytes of a binary value (``on_return_code`` in
joulescope_driver 2.2.12 ``src/jsdrv.c``). Prints one JSON line with what it saw.
"""

from __future__ import annotations

import gc
import json
import sys
import threading
from typing import Any

from drivers.emon.joulescope import Joulescope
from drivers.errors import DeviceError

#: Every stream an auto-ranging acquisition subscribes (the range stream last).
DATA = ["s/i/!data", "s/v/!data", "s/gpi/0/!data", "s/gpi/1/!data", "s/i/range/!data"]


class DeviceEndpoint:
    """Answers publishes to `device` on the real pub/sub as the device would (rc 0)."""

    def __init__(self, jsdrv: Any, device: str) -> None:
        self.jsdrv = jsdrv
        self.seen: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self._cbk = self._on_publish  # one object for subscribe and unsubscribe
        jsdrv.subscribe(device, ["pub"], self._cbk)

    def _on_publish(self, topic: str, value: Any) -> None:
        with self._lock:
            self.seen.append((topic, value if isinstance(value, str | int | float) else
                              type(value).__name__))
        self.jsdrv.publish(topic + "#", b"\0\0\0\0", timeout=0)  # pub/sub thread: never wait


class CountingJoulescope(Joulescope):
    """Counts the stream callbacks it gets (and ignores their payloads)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.data_calls = 0
        super().__init__(*args, **kwargs)

    def _on_data(self, topic: str, value: Any) -> None:
        self.data_calls += 1


def _open(jsdrv: Any, device: str) -> tuple[CountingJoulescope, DeviceEndpoint]:
    endpoint = DeviceEndpoint(jsdrv, device)
    js = CountingJoulescope(jsdrv, device, voltage_limit_v=3.6, own_driver=False)
    js.connect()
    return js, endpoint


def unsubscribe(jsdrv: Any, device: str) -> dict[str, Any]:
    """start/stop twice; then a publish on every data topic must reach no rig callback."""
    js, _ = _open(jsdrv, device)
    js.configure(3.3, 1000)
    errors = []
    for _ in range(2):
        js.start(lambda chunk: None)
        try:
            js.stop()
        except Exception as exc:
            errors.append(str(exc))
    gc.collect()  # a released callback object is freed now, not later
    for suffix in DATA:
        jsdrv.publish(f"{device}/{suffix}", b"\0" * 8, timeout=0)
    jsdrv.query(f"{device}/h/fs")  # the pub/sub thread handled the publishes before this
    return {"stop_errors": errors, "data_calls_after_stop": js.data_calls}


def metadata(jsdrv: Any, device: str) -> dict[str, Any]:
    """The device's h/fs metadata (as the device publishes it on open) limits configure()."""
    js, endpoint = _open(jsdrv, device)
    meta = {"dtype": "u32", "brief": "The sampling frequency.", "default": 2_000_000,
            "options": [[2_000_000, "2 MHz"], [1_000_000, "1 MHz"], [2_000, "2 kHz"],
                        [1_000, "1 kHz"]]}
    jsdrv.publish(f"{device}/h/fs$", json.dumps(meta), timeout=0)
    jsdrv.query(f"{device}/h/fs%")  # after the metadata publish: the queue is in order
    refused = ""
    try:
        js.configure(3.3, 10_000)  # in the model's table, not in this metadata
    except DeviceError as exc:
        refused = f"{exc.message} | {exc.hint}"
    js.configure(3.3, 2_000)
    return {"refused": refused, "h/fs": [v for t, v in endpoint.seen if t.endswith("/h/fs")]}


def open_state(jsdrv: Any, device: str) -> dict[str, Any]:
    """What reaches the device from open() to the first power_on()."""
    js, endpoint = _open(jsdrv, device)
    js.configure(3.3, 1000)
    js.power_on()
    return {"seen": [[t[len(device) + 1 :], v] for t, v in endpoint.seen]}


SCENARIOS = {"unsubscribe": unsubscribe, "metadata": metadata, "open_state": open_state}


def main(name: str, device: str) -> int:
    from pyjoulescope_driver import Driver

    jsdrv = Driver()
    try:
        print(json.dumps(SCENARIOS[name](jsdrv, device)), flush=True)
    finally:
        jsdrv.finalize()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
