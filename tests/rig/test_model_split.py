"""The validation split of the train data (rig.model.split): seeded, stratified by class, whole
clips on one side, with counts that follow from the fraction."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rig.model.split import SplitError, validation_split


def clips(per_class: list[int], slices: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Labels and clip ids: class c has per_class[c] clips of `slices` slices each."""
    labels, groups, clip = [], [], 0
    for c, n in enumerate(per_class):
        for _ in range(n):  # one clip per pass
            labels += [c] * slices
            groups += [clip] * slices
            clip += 1
    return np.array(labels), np.array(groups)


def test_a_quarter_of_each_class_clips_is_held_out_whole() -> None:
    labels, groups = clips([16, 16, 16, 16])
    s = validation_split(labels, groups, fraction=0.25, seed=0)
    # 16 clips x 0.25 = 4 clips of 10 slices per class.
    assert len(s.validation) == 4 * 4 * 10 and len(s.fit) == 4 * 12 * 10
    for c in range(4):
        assert len(np.unique(groups[s.validation][labels[s.validation] == c])) == 4
    assert np.intersect1d(groups[s.fit], groups[s.validation]).size == 0  # no clip on both sides
    assert np.array_equal(np.sort(np.concatenate([s.fit, s.validation])), np.arange(len(labels)))
    assert s.summary["validation"] == {"slices": 160, "clips": 16}
    assert s.summary["fit"] == {"slices": 480, "clips": 48}


def test_the_same_seed_gives_the_same_split_and_another_seed_another() -> None:
    labels, groups = clips([12, 12, 12, 12])
    a = validation_split(labels, groups, seed=3)
    b = validation_split(labels, groups, seed=3)
    c = validation_split(labels, groups, seed=4)
    assert np.array_equal(a.validation, b.validation) and np.array_equal(a.fit, b.fit)
    assert not np.array_equal(a.validation, c.validation)


def test_the_order_of_the_slices_does_not_change_which_clips_are_held_out() -> None:
    labels, groups = clips([8, 8, 8, 8], slices=3)
    order = np.random.default_rng(0).permutation(len(labels))
    a = validation_split(labels, groups, seed=1)
    b = validation_split(labels[order], groups[order], seed=1)
    assert set(groups[a.validation]) == set(groups[order][b.validation])


def test_uneven_classes_are_stratified_by_their_own_clip_counts() -> None:
    labels, groups = clips([3, 8, 2, 20])
    s = validation_split(labels, groups, fraction=0.25, seed=0,
                         class_names=("a", "b", "c", "d"))
    # round(0.75) = 1, round(2) = 2, round(0.5) = 0 -> at least 1, round(5) = 5.
    assert s.summary["clips_per_class"] == {
        "a": {"fit": 2, "validation": 1}, "b": {"fit": 6, "validation": 2},
        "c": {"fit": 1, "validation": 1}, "d": {"fit": 15, "validation": 5}}


@pytest.mark.parametrize(("fraction", "expected"), [(0.01, 1), (0.99, 1)])
def test_each_side_keeps_at_least_one_clip_per_class(fraction: float, expected: int) -> None:
    labels, groups = clips([2, 2])
    s = validation_split(labels, groups, fraction=fraction)
    assert s.summary["clips_per_class"]["0"] == {"fit": 1, "validation": expected}


def test_without_clip_ids_every_slice_is_its_own_clip() -> None:
    labels = np.repeat(np.arange(4), 20)
    s = validation_split(labels, fraction=0.25, seed=0)
    assert len(s.validation) == 4 * 5
    assert np.bincount(labels[s.validation]).tolist() == [5, 5, 5, 5]


def test_the_record_is_json_and_names_the_rules() -> None:
    labels, groups = clips([4, 4])
    record = validation_split(labels, groups, fraction=0.5, seed=7).record()
    assert json.loads(json.dumps(record)) == record
    assert record["fraction"] == 0.5 and record["seed"] == 7
    assert record["stratified_by"] == "class" and record["grouped_by"] == "clip"


@pytest.mark.parametrize(("per_class", "fraction", "match"), [
    ([1, 4], 0.25, "class 0 has 1 clip"),
    ([4, 4], 0.0, "not between 0 and 1"),
    ([4, 4], 1.0, "not between 0 and 1"),
])
def test_impossible_splits_are_refused_with_a_hint(per_class: list[int], fraction: float,
                                                   match: str) -> None:
    labels, groups = clips(per_class)
    with pytest.raises(SplitError, match=match) as info:
        validation_split(labels, groups, fraction=fraction)
    assert info.value.hint


def test_a_clip_with_two_classes_is_refused() -> None:
    labels, groups = clips([3, 3])
    labels[0] = 1  # the first slice of clip 0 claims the other class
    with pytest.raises(SplitError, match="clip 0 holds slices of more than one class"):
        validation_split(labels, groups)
