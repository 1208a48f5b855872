"""The Xylo Audio 2 trainer (rig.model.xylo): the network pieces, the choice of settings on a
validation split of the train data, and that the test split is never read before the spec file
is final. Tiny rasters (no AFE) and tiny networks keep this file to a few seconds."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rig.model import xylo
from rig.model.xylo import Candidate, Rasters, TrainConfig
from rig.report.models import describe_asc_model
from tests.requires import needs

pytestmark = needs("rockpool", "xylosim")

TINY = TrainConfig(hidden_sizes=(8, 16), ridges=(0.01, 1.0), seed=0, val_fraction=0.25,
                   val_seed=0)


def poisson_rasters(seed: int, n: int = 8, steps: int = 50) -> tuple[np.ndarray, np.ndarray]:
    """Tiny class-dependent rasters (no AFE): class c drives channels 4c..4c+3 harder."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 4
    rate = np.full((n, 1, 16), 0.5)
    for k, c in enumerate(labels):
        rate[k, 0, 4 * c:4 * c + 4] = 2.0
    return rng.poisson(rate, (n, steps, 16)).clip(0, 15).astype(np.uint8), labels


def split_rasters(seed: int, clips_per_class: int, slices: int = 2) -> Rasters:
    """`clips_per_class` clips of `slices` slices per class, clip ids 0.."""
    rasters, labels = poisson_rasters(seed, n=4 * clips_per_class * slices)
    order = np.argsort(labels, kind="stable")
    return Rasters(rasters[order], labels[order], np.arange(len(labels)) // slices)


class SpySource:
    """A dataset loader that records every split it hands out, in `log`."""

    description = "tiny Poisson rasters (test)"

    def __init__(self, log: list[str], test_seed: int = 9) -> None:
        self.log = log
        self.data = {"train": split_rasters(1, clips_per_class=4),
                     "test": split_rasters(test_seed, clips_per_class=1)}

    def split(self, name: str) -> Rasters:
        self.log.append(f"read {name}")
        return self.data[name]


# -- the network ---------------------------------------------------------------------------------
def test_fitting_is_deterministic_given_the_seed() -> None:
    rasters, labels = poisson_rasters(0)
    first = xylo.fit(rasters, labels, n_hidden=24, seed=5)
    again = xylo.fit(rasters, labels, n_hidden=24, seed=5)
    other = xylo.fit(rasters, labels, n_hidden=24, seed=6)
    for name, value in first.arrays.items():
        assert np.array_equal(value, again.arrays[name]), name
    assert not np.array_equal(first.arrays["weights_in"], other.arrays["weights_in"])
    assert first.aliases == again.aliases and first.model_id == xylo.MODEL_ID


def test_readout_sits_on_the_hidden_layer_it_was_fitted_on() -> None:
    # The readout is fitted on the probe spec's hidden spikes: quantisation is per neuron, so
    # the final spec must keep exactly that hidden layer.
    rasters, labels = poisson_rasters(1)
    hidden = xylo.init_hidden(rasters, 16, seed=2)
    probe = xylo.make_spec(hidden, np.ones((16, 4)), np.ones(4))
    final = xylo.fit(rasters, labels, n_hidden=16, seed=2)
    for name in ("weights_in", "weights_rec", "threshold", "dash_mem", "dash_syn"):
        assert np.array_equal(probe.arrays[name], final.arrays[name]), name


def test_ridge_readout_matches_the_closed_form() -> None:
    # Orthogonal features c * e_k: the ridge solution is w_kk = c^2 / (c^2 + lambda n / s_k^2)
    # scaled back; with a negligible ridge it is exactly 1 / c on the diagonal.
    counts = 10 * np.eye(4, dtype=np.int64)
    labels = np.arange(4)
    w, threshold = xylo.fit_readout(counts, labels, 4, ridge=1e-12)
    np.testing.assert_allclose(w, np.eye(4) / 10, atol=1e-9)
    np.testing.assert_allclose(threshold, np.full(4, 1.0 / xylo.WINNER_SPIKES))


def test_ridge_shrinks_the_readout_by_the_closed_form_factor() -> None:
    # Features 10 e_k over n = 4 samples: every column has std s = sqrt(25 - 6.25). In
    # standardised units x = 10 / s on the diagonal, the Gram matrix is (x^2 + lambda n) I, so
    # w_kk = x / (x^2 + lambda n) / s (back in spike counts) and 0 elsewhere.
    counts = 10 * np.eye(4, dtype=np.int64)
    s = np.sqrt(25 - 6.25)
    ridge = 0.5
    w, _ = xylo.fit_readout(counts, np.arange(4), 4, ridge=ridge)
    x = 10 / s
    np.testing.assert_allclose(w, np.eye(4) * x / (x * x + ridge * 4) / s, rtol=1e-12,
                               atol=1e-15)


def test_hidden_layer_neurons_fire_for_part_of_the_samples() -> None:
    rasters, _ = poisson_rasters(2, n=16)
    hidden = xylo.init_hidden(rasters, 32, seed=0)
    probe = xylo.make_spec(hidden, np.ones((32, 4)), np.ones(4))
    _, counts = xylo.run_xylo(probe, rasters, record=True)
    assert counts is not None and counts.shape == (16, 32)
    active = (counts > 0).mean()
    assert 0.05 < active < 0.95, f"{active:.2f} of neuron-samples active"


# -- choosing settings ---------------------------------------------------------------------------
def test_best_takes_the_highest_validation_accuracy_then_fewer_neurons_then_more_ridge() -> None:
    c = [Candidate(512, 0.01, 0.80), Candidate(128, 0.1, 0.85), Candidate(256, 1.0, 0.85),
         Candidate(128, 0.01, 0.85)]
    assert xylo.best(c) == Candidate(128, 0.1, 0.85)
    assert xylo.best(c[:1]) == c[0]
    with pytest.raises(xylo.RigError, match="no candidate"):
        xylo.best([])


def test_each_candidate_is_scored_by_its_own_spec_on_the_validation_part() -> None:
    data = split_rasters(3, clips_per_class=4)
    fit_part, validation = data.take(np.arange(0, 24)), data.take(np.arange(24, 32))
    candidates = xylo.select(fit_part, validation, (8, 12), (0.01, 1.0), seed=1)
    assert [(c.n_hidden, c.ridge) for c in candidates] == [(8, 0.01), (8, 1.0), (12, 0.01),
                                                          (12, 1.0)]
    for c in candidates[::3]:  # two of them, refitted the long way
        spec = xylo.fit(fit_part.rasters, fit_part.labels, n_hidden=c.n_hidden, seed=1,
                        ridge=c.ridge)
        assert c.validation_accuracy == xylo.accuracy(spec, validation.rasters,
                                                      validation.labels)


# -- the test split stays out of training --------------------------------------------------------
def test_training_reads_only_the_train_split() -> None:
    log: list[str] = []
    trained = xylo.train(SpySource(log), TINY)
    assert log == ["read train"]
    assert trained.spec.n_hidden == trained.chosen.n_hidden


def test_the_test_split_is_read_only_after_the_spec_file_is_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[str] = []
    out = tmp_path / "m.npz"
    select = xylo.select

    def spy_select(*args: object, **kwargs: object) -> list[Candidate]:
        log.append("selection starts")
        result = select(*args, **kwargs)
        log.append("selection ends")
        return result

    class Source(SpySource):
        def split(self, name: str) -> Rasters:
            if name == "test":
                log.append(f"file written before the test read: {out.is_file()}")
            return super().split(name)

    monkeypatch.setattr(xylo, "select", spy_select)
    outcome = xylo.train_and_save(Source(log), out, TINY)
    assert log == ["read train", "selection starts", "selection ends",
                   "file written before the test read: True", "read test"]
    assert outcome.test_slices == 8 and outcome.test_accuracy is not None
    log.clear()
    xylo.train_and_save(Source(log), tmp_path / "n.npz", TINY, evaluate_test=False)
    assert log == ["read train", "selection starts", "selection ends"]


def test_a_different_test_split_leaves_the_spec_file_byte_identical(tmp_path: Path) -> None:
    a, b = tmp_path / "a.npz", tmp_path / "b.npz"
    first = xylo.train_and_save(SpySource([], test_seed=9), a, TINY)
    second = xylo.train_and_save(SpySource([], test_seed=10), b, TINY)
    assert a.read_bytes() == b.read_bytes()
    assert first.test_accuracy is not None and second.test_accuracy is not None


def test_the_spec_file_records_which_split_chose_what(tmp_path: Path) -> None:
    out = tmp_path / "m.npz"
    outcome = xylo.train_and_save(SpySource([]), out, TINY, evaluate_test=False)
    spec = xylo.firmware_xylo().spec.load_spec(out)
    record = spec.training
    selection = record["selection"]
    assert "test split was not read" in selection["on"]
    # 4 train clips per scene, a quarter held out: 1 clip (2 slices) per scene.
    split = selection["split"]
    assert (split["fraction"], split["seed"]) == (0.25, 0)
    assert split["validation"] == {"slices": 8, "clips": 4}
    assert split["fit"] == {"slices": 24, "clips": 12}
    assert split["clips_per_class"]["airport"] == {"fit": 3, "validation": 1}
    assert [(c["n_hidden"], c["ridge"]) for c in selection["candidates"]] == [
        (8, 0.01), (8, 1.0), (16, 0.01), (16, 1.0)]
    chosen = xylo.best([Candidate(c["n_hidden"], c["ridge"], c["validation_accuracy"])
                        for c in selection["candidates"]])
    assert selection["chosen"] == chosen.record() == outcome.trained.chosen.record()
    assert spec.n_hidden == chosen.n_hidden == record["final_fit"]["n_hidden"]
    assert record["final_fit"]["slices"] == 32 and record["data"] == SpySource.description
    # The firmware's reader keeps the arrays' checksum: the record is information only.
    with np.load(out, allow_pickle=False) as z:
        assert json.loads(bytes(z["header"]).decode())["training"] == record


def test_the_report_says_how_the_settings_were_chosen(tmp_path: Path) -> None:
    out = tmp_path / "m.npz"
    outcome = xylo.train_and_save(SpySource([]), out, TINY, evaluate_test=False)
    manifest = {"bench": {"dut": {"kind": "xylo", "spec": str(out)}},
                "instruments": {"dut": {"model": xylo.MODEL_ID}}}
    row = describe_asc_model(manifest)["Training"]
    c = outcome.trained.chosen
    assert row.startswith(f"hidden size {c.n_hidden} and ridge {c.ridge:g} chosen among 4 "
                          "candidates on a validation split of the train data (25% of each "
                          f"scene's clips, seed 0; validation accuracy "
                          f"{c.validation_accuracy:.3f}), then fitted on all 32 train slices")
    assert row.endswith("the test split was not used")
    bare = xylo.firmware_xylo().spec
    bare.save_spec(replace(bare.load_spec(out), training={}), tmp_path / "bare.npz")
    manifest["bench"]["dut"]["spec"] = str(tmp_path / "bare.npz")
    assert describe_asc_model(manifest)["Training"] == "not recorded in the spec file"
