"""The shipped Xylo Audio 2 ASC model (firmware/xylo/models/asc_synthetic.npz).

The accuracy check runs XyloSim on the shipped spec, exactly as the shim does, on 12 one-second
SYNTHETIC test scenes (3 per class) from the rig's own default test stream (seed 0; the model
was trained on seed 1), pre-processed by the AFE simulator (~1 s per second of audio; the
rasters are shared with test_xylo_nir.py through the session's cache: tests/scenes.py). The
trainer itself is tested in tests/rig/test_model_xylo.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from firmware.xylo.spec import load_spec
from rig.datasets import afe, synthetic
from rig.model import xylo
from tests.requires import needs
from tests.scenes import afe_scenes

pytestmark = needs("rockpool", "xylosim", "scipy")

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "firmware" / "xylo" / "models" / "asc_synthetic.npz"
#: The shipped model scores 0.719 on its 160-slice test split; 12 slices must reach this.
MIN_ACCURACY = 0.5


def test_shipped_spec_loads_with_the_asc_shape() -> None:
    spec = load_spec(MODEL)
    assert (spec.n_input, spec.n_output) == (16, 4)
    assert 1 <= spec.n_hidden <= 1000
    assert spec.class_names == ("airport", "street_traffic", "bus", "park")
    assert spec.class_names == synthetic.CLASSES  # the label order of the data sets
    assert spec.dt == pytest.approx(afe.AfeConfig().raster_period_s)  # one step per raster bin
    assert spec.model_id == xylo.MODEL_ID


def test_shipped_model_beats_chance_on_synthetic_scenes() -> None:
    rasters, labels = afe_scenes(3)
    acc = xylo.accuracy(load_spec(MODEL), rasters, labels)
    assert acc >= MIN_ACCURACY, f"accuracy {acc:.3f} on {len(labels)} synthetic slices"


def test_shipped_settings_were_chosen_on_a_validation_split_of_the_train_data() -> None:
    spec = load_spec(MODEL)
    selection = spec.training["selection"]
    assert "test split was not read" in selection["on"]
    # The default search (`rig model train xylo`): every hidden size with every ridge.
    assert [(c["n_hidden"], c["ridge"]) for c in selection["candidates"]] == [
        (h, r) for h in xylo.HIDDEN_SIZES for r in xylo.RIDGES]
    chosen = xylo.best([xylo.Candidate(c["n_hidden"], c["ridge"], c["validation_accuracy"])
                        for c in selection["candidates"]])
    assert selection["chosen"] == chosen.record()
    assert spec.n_hidden == chosen.n_hidden == spec.training["final_fit"]["n_hidden"]
    # 16 train clips of 10 s per scene, a quarter of them held out whole.
    split = selection["split"]
    assert (split["fraction"], split["seed"], split["grouped_by"]) == (0.25, 0, "clip")
    assert split["validation"] == {"slices": 4 * 4 * 10, "clips": 16}
    assert split["fit"] == {"slices": 4 * 12 * 10, "clips": 48}
    assert spec.training["final_fit"]["slices"] == 640
