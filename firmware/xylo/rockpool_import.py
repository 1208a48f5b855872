"""The one place that imports Rockpool's Xylo packages, and samna, SynSense's HDK library.

Why a workaround: ``import rockpool.devices.xylo`` imports every Xylo family, and two modules
of other families (``syns65302.afe_samna_pdm``, ``syns63300.power_cycles_model``) import samna
unconditionally, so without samna the whole package fails to import, XyloSim included. samna
must not be installed from PyPI either: the ``samna`` there is only an installer stub that
tries to download the real package at import time (and fails, slowly, on every import). So for
the simulator we register empty stand-ins for those two modules before the import; samna itself
is imported only when an HDK is asked for, and then before Rockpool, so that Rockpool's own
HDK classes (``XyloSamna``) see it.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any

from protocols.errors import ActionableError

#: Modules of other Xylo families that import samna unconditionally (rockpool 3.1.0).
_SAMNA_ONLY_MODULES = (
    "rockpool.devices.xylo.syns65302.afe_samna_pdm",
    "rockpool.devices.xylo.syns63300.power_cycles_model",
)
#: Rockpool's Xylo Audio 2 package.
XYLO_AUDIO2 = "rockpool.devices.xylo.syns61201"


class XyloUnavailable(ActionableError):
    """Rockpool's Xylo support, samna or an HDK is missing."""


def load_samna() -> types.ModuleType:
    """Import samna (only for an HDK); `XyloUnavailable` with install advice when it fails."""
    try:
        return importlib.import_module("samna")
    except Exception as exc:  # the PyPI stub fails in odd ways (a download at import time)
        raise XyloUnavailable(
            f"samna, SynSense's library for Xylo HDKs, cannot be imported ({exc})",
            hint="install the real samna from SynSense (see SynSense's Rockpool/samna "
            "installation docs) into this Python; the `samna` package on PyPI is only an "
            "installer stub. Without an HDK run the shim without --hdk (XyloSim).",
        ) from exc


def xylo_audio2(*, hdk: bool = False) -> types.ModuleType:
    """Rockpool's ``syns61201`` package (Xylo Audio 2): mapper, XyloSim, and with `hdk` the
    samna classes (``XyloSamna``, ``config_from_specification``).

    Decide `hdk` on the first call of a process: after a simulator-only import Rockpool has
    already replaced its HDK classes by stubs.
    """
    if hdk:
        load_samna()
    elif "samna" not in sys.modules:
        for name in _SAMNA_ONLY_MODULES:
            sys.modules.setdefault(name, types.ModuleType(name))
    try:
        return importlib.import_module(XYLO_AUDIO2)
    except ImportError as exc:
        raise XyloUnavailable(
            f"Rockpool's Xylo Audio 2 support cannot be imported ({exc})",
            hint="install the rig's xylo extra: pip install -e '.[xylo]' "
            "(rockpool 3.1.0, xylosim, bitstruct, packaging, jax; not rockpool[xylo])",
        ) from exc


def channel_quantize(**spec: Any) -> dict[str, Any]:
    """Rockpool's per-channel quantisation of a mapped (float) specification."""
    xylo_audio2()
    from rockpool.transform.quantize_methods import channel_quantize as quantize

    return quantize(**spec)


def find_xylo_audio2_hdk() -> Any:
    """The first Xylo Audio 2 HDK attached (samna device); `XyloUnavailable` when none is."""
    xylo_audio2(hdk=True)
    from rockpool.devices.xylo import find_xylo_hdks

    try:
        hdks, _modules, versions = find_xylo_hdks()
    except ValueError as exc:
        # Rockpool 3.1.0 (rockpool/devices/xylo/helper.py, find_xylo_hdks) raises ValueError for
        # a board whose firmware is older than its minimum (check_firmware_versions: FX3
        # "fxtree" 0.11.5 and FPGA "unifirm" 1.1.3 for Xylo Audio 2 and IMU, 0.12.2 and 1.6.0
        # for Xylo Audio 3) instead of listing it.
        raise XyloUnavailable(
            f"samna found a Xylo HDK that Rockpool cannot use ({exc})",
            hint="upgrade the HDK's firmware with SynSense's tools (Rockpool 3.1.0 needs FX3 "
            "firmware >= 0.11.5 and unifirm >= 1.1.3 on a Xylo Audio 2 HDK), "
            "or run without --hdk (XyloSim)",
        ) from exc
    for device, version in zip(hdks, versions, strict=False):
        if version == "syns61201":
            return device
    raise XyloUnavailable(
        "no Xylo Audio 2 (syns61201) HDK found"
        + (f"; attached: {', '.join(versions)}" if versions else ""),
        hint="plug in the Xylo Audio 2 HDK by USB and check that samna sees it, "
        "or run without --hdk (XyloSim)",
    )
