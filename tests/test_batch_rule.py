"""The "auto" batch size (TrainConfig.batch_rows): on tables a share of the training rows, so
an epoch is about AUTO_ROUNDS_PER_EPOCH rounds whatever the table's size; DEFAULT_BATCH on
images and for methods with stages; a given size always wins. The engine resolves it where the
plan is built, from the samples the plan holds."""

from __future__ import annotations

import math

import pytest

from vfl_core.config import AUTO_MAX_BATCH, AUTO_ROUNDS_PER_EPOCH, DEFAULT_BATCH, TrainConfig


@pytest.mark.parametrize(
    "rows", [1, 100, 255, 256, 257, 2600, 4321, 21_700, 300_000, 16_384, 16_385, 2_000_000]
)
def test_given_a_table_when_batch_is_auto_then_an_epoch_is_a_bounded_number_of_rounds(
    rows: int,
) -> None:
    size = TrainConfig().batch_rows(rows, tabular=True)
    wanted = max(DEFAULT_BATCH, math.ceil(rows / AUTO_ROUNDS_PER_EPOCH))
    assert size == min(AUTO_MAX_BATCH, wanted)
    if rows <= AUTO_MAX_BATCH * AUTO_ROUNDS_PER_EPOCH:  # up to a million rows
        assert math.ceil(rows / size) <= AUTO_ROUNDS_PER_EPOCH  # rounds of one pattern's epoch
    else:  # the cap: a round's tensors stay bounded, the rounds grow with the rows
        assert size == AUTO_MAX_BATCH
    if rows <= DEFAULT_BATCH * AUTO_ROUNDS_PER_EPOCH:
        assert size == DEFAULT_BATCH  # a small table keeps the batch it had


@pytest.mark.parametrize(
    ("config", "tabular", "expected"),
    [
        (TrainConfig(), False, DEFAULT_BATCH),  # images
        (TrainConfig(method="dvfl"), True, DEFAULT_BATCH),  # a method with stages
        (TrainConfig(method="dlvm"), True, DEFAULT_BATCH),
        (TrainConfig(batch_size=32), True, 32),  # given: it wins
        (TrainConfig(batch_size=32), False, 32),
        (TrainConfig.model_validate({"batch_size": "500"}), True, 500),  # a CLI's text
    ],
)
def test_given_a_config_when_the_batch_is_resolved_then_the_table_rule_is_for_tables_only(
    config: TrainConfig, tabular: bool, expected: int
) -> None:
    assert config.batch_rows(21_700, tabular) == expected


@pytest.mark.parametrize("bad", [0, -3, "big", 1.5])
def test_given_a_bad_batch_size_when_validated_then_it_is_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        TrainConfig.model_validate({"batch_size": bad})
