"""data.holdout_queries: a dataset without a dev split (SciFact) validates on train queries held out of training —
disjoint from what trains, the same draw for the same sample_seed, and each side subsampled after the split."""
from __future__ import annotations

import pytest

from ssft.config.recipe import recipe_from_dict
from ssft.core.errors import SsftError
from ssft.pipeline.inputs import split_queries


class _Qrels:
    def __init__(self, splits):
        self.splits = splits

    def qrels(self, split):
        return self.splits[split]


TRAIN = {f"q{i}": {f"d{i}": 1} for i in range(40)}
DATASET = _Qrels({"train": TRAIN, "dev": {"x": {"d0": 1}}})


def _data(**data):
    return recipe_from_dict({"data": data}).data


def test_held_out_queries_validate_and_never_train():
    train, validation = split_queries(_data(validation_split="train", holdout_queries=10), DATASET)
    assert len(validation) == 10 and len(train) == 30
    assert not set(train) & set(validation) and set(train) | set(validation) == set(TRAIN)
    assert all(validation[q] == TRAIN[q] for q in validation)
    again, same = split_queries(_data(validation_split="train", holdout_queries=10), DATASET)
    assert (again, same) == (train, validation)  # one draw per sample_seed
    _, other = split_queries(_data(validation_split="train", holdout_queries=10, sample_seed=1), DATASET)
    assert set(other) != set(validation)


def test_each_side_is_subsampled_after_the_split():
    train, validation = split_queries(_data(validation_split="train", holdout_queries=10, max_train_queries=5,
                                            max_validation_queries=4), DATASET)
    _, held = split_queries(_data(validation_split="train", holdout_queries=10), DATASET)
    assert len(train) == 5 and len(validation) == 4
    assert set(validation) <= set(held) and not set(train) & set(held)


def test_without_holdout_the_splits_are_read_as_named():
    train, validation = split_queries(_data(), DATASET)
    assert train == TRAIN and validation == {"x": {"d0": 1}}
    train, validation = split_queries(_data(validation_split=None), DATASET)
    assert train == TRAIN and validation is None


def test_holding_out_every_train_query_is_refused():
    with pytest.raises(SsftError, match=r"^data\.holdout_queries: 40 of the 40 queries of train would leave none"):
        split_queries(_data(validation_split="train", holdout_queries=40), DATASET)
