"""The learning-rate schedule: scheduler "auto" is cosine for parties of tabular features and
constant for images and methods with stages (TrainConfig.schedule, ModelBank.set_lr)."""

from __future__ import annotations

import pytest
import torch

from benchmarks.setups import paper_plain
from vfl_core.config import TrainConfig
from vfl_core.model.model_bank import ModelBank


@pytest.mark.parametrize(
    ("config", "tabular", "expected"),
    [
        (TrainConfig(), True, "cosine"),
        (TrainConfig(), False, "none"),
        (TrainConfig(scheduler="none"), True, "none"),
        (TrainConfig(scheduler="cosine"), False, "cosine"),
        (TrainConfig(method="dvfl"), True, "none"),
        (TrainConfig(method="dlvm"), True, "none"),
    ],
)
def test_given_a_config_when_resolved_then_auto_is_cosine_on_tables_only(
    config: TrainConfig, tabular: bool, expected: str
) -> None:
    assert config.schedule(tabular) == expected


@pytest.mark.parametrize(("shape", "halved"), [((6,), True), ((1, 8, 8), False)])
def test_given_the_default_schedule_when_half_the_epochs_ran_then_a_table_has_half_the_rate(
    shape: tuple[int, ...], halved: bool
) -> None:
    config = TrainConfig(epochs=60, lr=1e-3)
    bank = ModelBank(config, 0, 2, shape, 2, torch.device("cpu"))
    bank.rep(())
    opts = list(bank.rep_opts.values())
    bank.set_lr(opts, 30)
    assert opts[0].param_groups[0]["lr"] == pytest.approx(5e-4 if halved else 1e-3)
    bank.set_lr(opts, 0)
    assert opts[0].param_groups[0]["lr"] == pytest.approx(1e-3)


def test_given_a_paper_benchmark_when_configured_then_the_rate_is_constant() -> None:
    assert TrainConfig.model_validate(paper_plain({})).schedule(True) == "none"
