"""Helpers shared by the Xylo HDK tests (timing, power): a shim on Rockpool's own HDK path over
the fake samna board (`fake_samna`), with a raster already loaded, and its lap lines."""

from __future__ import annotations

from typing import Any

import numpy as np

from firmware.xylo.shim import HdkBackend, XyloShim, encode_raster
from firmware.xylo.spec import XyloSpec

from .fake_samna import Harness


def open_hdk_shim(harness: Harness, spec: XyloSpec, raster: np.ndarray, power_hz: float,
                  **board: Any) -> tuple[XyloShim, Any]:
    """A shim on HdkBackend.open (the real path: find_xylo_hdks, config_from_specification,
    XyloSamna) sampling the rails at `power_hz`, one fake board attached with `board`'s
    settings, `raster` loaded as if downloaded."""
    harness.reset()
    hdk = harness.samna.attach(**board)
    backend = HdkBackend.open(spec, power_hz, clock=harness.clock.time,
                              sleep=harness.clock.sleep)
    shim = XyloShim(spec, backend, port=None)
    data = encode_raster(raster)
    shim._buffer[: len(data)] = data
    shim._expected = shim._loaded = len(data)
    return shim, hdk


def laps(lines: list[str]) -> list[int]:
    """The values of the ``m-lap-us-<n>`` lines among a reply's lines (with ``lapcrc``'s
    ``-crc-`` suffix or without)."""
    return [int(line[len("m-lap-us-"):].partition("-")[0]) for line in lines
            if line.startswith("m-lap-us-")]
