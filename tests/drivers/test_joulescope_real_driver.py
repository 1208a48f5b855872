"""The rig's Joulescope subscription handling, metadata queries and open against the REAL
pyjoulescope_driver Driver (its pub/sub runs without a device; see real_jsdrv_scenarios.py).
Each scenario runs in a subprocess: a wrong unsubscribe once crashed the process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyjoulescope_driver")

REPO = Path(__file__).resolve().parents[2]
JS220, JS110 = "u/js220/000415", "u/js110/001234"


def run(name: str, device: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "tests.drivers.real_jsdrv_scenarios", name,
                          device], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stdout}\n{out.stderr}"
    # The binding logs a callback it could not call (a released object) on stderr.
    assert "_on_cmd_publish_cbk" not in out.stderr, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("device", [JS220, JS110])
def test_stop_unsubscribes_the_very_callback_it_subscribed(device: str) -> None:
    got = run("unsubscribe", device)
    assert got == {"stop_errors": [], "data_calls_after_stop": 0}


def test_rates_come_from_the_metadata_request_topic() -> None:
    got = run("metadata", JS220)
    # 2 MHz is in the metadata but a JS220's current and voltage stop at 1 MHz.
    assert got["refused"] == ("Joulescope js220: sample rate 10000 Hz is not available | "
                              "choose one of 1000, 2000, 1e+06 Hz")
    assert got["h/fs"] == [2_000]


@pytest.mark.parametrize(("device", "range_topic"), [(JS220, "s/i/range/mode"),
                                                     (JS110, "s/i/range/select")])
def test_open_leaves_the_instrument_as_it_is_and_disconnects_first(device: str,
                                                                   range_topic: str) -> None:
    seen = run("open_state", device)["seen"]
    # Open mode 1 is restore (binding.pyx _DEVICE_OPEN_MODES); the first setting is "off",
    # and nothing connects the DUT before power_on.
    assert seen == [["@/!open", 1], [range_topic, "off"], ["h/fs", 1000], [range_topic, "auto"]]
