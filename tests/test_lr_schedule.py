"""The learning-rate schedule: scheduler "auto" is decay for parties of tabular features and
constant for images and methods with stages (TrainConfig.schedule, ModelBank.set_lr); neither
depends on the epoch ceiling."""

from __future__ import annotations

import pytest
import torch

from benchmarks.setups import paper_plain
from vfl_core.config import AUTO_TABLE_LR, DEFAULT_LR, TrainConfig
from vfl_core.model import lr_schedule
from vfl_core.model.lr_schedule import lr_at
from vfl_core.model.model_bank import ModelBank


@pytest.mark.parametrize(
    ("config", "tabular", "expected"),
    [
        (TrainConfig(), True, "decay"),
        (TrainConfig(), False, "none"),
        (TrainConfig(scheduler="none"), True, "none"),
        (TrainConfig(scheduler="cosine"), False, "cosine"),
        (TrainConfig(method="dvfl"), True, "none"),
        (TrainConfig(method="dlvm"), True, "none"),
    ],
)
def test_given_a_config_when_resolved_then_auto_is_decay_on_tables_only(
    config: TrainConfig, tabular: bool, expected: str
) -> None:
    assert config.schedule(tabular) == expected


@pytest.mark.parametrize(("shape", "halved"), [((6,), True), ((1, 8, 8), False)])
def test_given_the_cosine_schedule_when_half_the_epochs_ran_then_a_table_has_half_the_rate(
    shape: tuple[int, ...], halved: bool
) -> None:
    config = TrainConfig(epochs=60, lr=1e-3, scheduler="cosine" if halved else "auto")
    bank = ModelBank(config, 0, 2, shape, 2, torch.device("cpu"))
    bank.rep(())
    opts = list(bank.rep_opts.values())
    bank.set_lr(opts, 30)
    assert opts[0].param_groups[0]["lr"] == pytest.approx(5e-4 if halved else 1e-3)
    bank.set_lr(opts, 0)
    assert opts[0].param_groups[0]["lr"] == pytest.approx(1e-3)


@pytest.mark.parametrize("ceiling", [5, 60, 1000])
def test_given_the_default_schedule_when_epochs_ran_then_the_rate_ignores_the_ceiling(
    ceiling: int,
) -> None:
    """A table's default rate starts at AUTO_TABLE_LR and halves every DECAY_HALF_LIFE epochs,
    whatever --epochs says (an image party keeps DEFAULT_LR, constant)."""
    table = ModelBank(TrainConfig(epochs=ceiling), 0, 2, (6,), 2, torch.device("cpu"))
    image = ModelBank(TrainConfig(epochs=ceiling), 0, 2, (1, 8, 8), 2, torch.device("cpu"))
    for bank in (table, image):
        bank.rep(())
    half_life = int(lr_schedule.DECAY_HALF_LIFE)
    for epoch, rate in [(0, AUTO_TABLE_LR), (half_life, AUTO_TABLE_LR / 2)]:
        opts = list(table.rep_opts.values())
        table.set_lr(opts, epoch)
        assert opts[0].param_groups[0]["lr"] == pytest.approx(rate)
        opts = list(image.rep_opts.values())
        image.set_lr(opts, epoch)
        assert opts[0].param_groups[0]["lr"] == pytest.approx(DEFAULT_LR)


def test_given_decay_when_the_ceiling_changes_then_every_epoch_has_the_same_rate() -> None:
    rates = [[lr_at(3e-3, "decay", e, ceiling) for e in range(40)] for ceiling in (10, 60, 400)]
    assert rates[0] == rates[1] == rates[2]
    assert all(a > b for a, b in zip(rates[0], rates[0][1:], strict=False))  # always falling
    cosine = [[lr_at(3e-3, "cosine", e, ceiling) for e in range(10)] for ceiling in (10, 60)]
    assert cosine[0] != cosine[1]  # what "decay" is not: the ceiling's schedule


def test_given_a_warm_up_when_decaying_then_the_first_epochs_climb_to_the_rate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DECAY_WARMUP = W (off by default): epoch e < W runs at (e + 1) / W of the decayed rate,
    later epochs at the decayed rate as without it."""
    plain = [lr_at(1e-2, "decay", e, 60) for e in range(8)]
    assert lr_schedule.DECAY_WARMUP == 0
    monkeypatch.setattr(lr_schedule, "DECAY_WARMUP", 3)
    warm = [lr_at(1e-2, "decay", e, 60) for e in range(8)]
    assert warm[:3] == pytest.approx([plain[0] / 3, plain[1] * 2 / 3, plain[2]])
    assert warm[3:] == plain[3:]
    assert lr_at(1e-2, "cosine", 0, 60) == 1e-2  # the other schedules have none


@pytest.mark.parametrize(
    ("lr", "tabular", "expected"),
    [
        ("auto", True, AUTO_TABLE_LR),
        ("auto", False, DEFAULT_LR),
        (0.05, True, 0.05),
        (0.05, False, 0.05),
    ],
)
def test_given_an_lr_when_resolved_then_auto_is_the_table_rate_on_tables_only(
    lr: object, tabular: bool, expected: float
) -> None:
    assert TrainConfig(lr=lr).learning_rate(tabular) == expected
    assert TrainConfig(method="dvfl", lr=lr).learning_rate(tabular) == (
        DEFAULT_LR if lr == "auto" else lr
    )


def test_given_a_paper_benchmark_when_configured_then_the_rate_is_constant() -> None:
    assert TrainConfig.model_validate(paper_plain({})).schedule(True) == "none"
