"""The ASC input format is defined once (protocols/dut/asc.py): the rig's data sets and the DUT
side (the model's reference, the virtual bench) read the same numbers."""

from __future__ import annotations

import numpy as np

from protocols.dut import asc
from rig.datasets import synthetic


def test_one_input_is_one_second_of_8_khz_int16_audio() -> None:
    assert asc.SAMPLES == asc.RATE_HZ == 8000
    assert asc.CLASSES == ("airport", "street_traffic", "bus", "park")


def test_the_synthetic_set_uses_the_protocols_definition() -> None:
    assert synthetic.CLASSES is asc.CLASSES
    assert (synthetic.RATE_HZ, synthetic.SAMPLES) == (asc.RATE_HZ, asc.SAMPLES)
    split = synthetic.make_split(1, seed=0)
    assert split.inputs.shape == (len(asc.CLASSES), asc.SAMPLES)
    assert split.inputs.dtype == np.int16
