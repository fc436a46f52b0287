"""The linear scaling rule for a table's "auto" learning rate (Goyal et al. 2017, "Accurate,
Large Minibatch SGD", s. 2.1; vfl_core.config.scaled_table_lr): DEFAULT_LR at the batch of 64,
scaled with the batch each party's own training rows give, at most AUTO_TABLE_LR. Off by
default (SCALED_TABLE_LR: tried, not kept, docs/tabular-defaults.md "Time to a model"); these
tests keep the switch correct for the sweep setting that measures it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tabular_tables import bank_sources, write_tables

from vfl_core import config as config_module
from vfl_core.config import AUTO_TABLE_LR, DEFAULT_LR, TrainConfig, scaled_table_lr
from vfl_core.data.tabular import load_table_federation
from vfl_core.model.model_bank import ModelBank
from vfl_core.training.party import Party


@pytest.mark.parametrize(
    ("rows", "rate"),
    [
        (1, DEFAULT_LR),
        (256, DEFAULT_LR),  # the batch stays 64
        (300, DEFAULT_LR * 75 / 64),  # batch ceil(300 / 4) = 75
        (1000, DEFAULT_LR * 250 / 64),
        (2560, AUTO_TABLE_LR),  # batch 640: 10x, capped at AUTO_TABLE_LR (5x)
        (10**7, AUTO_TABLE_LR),
    ],
)
def test_given_training_rows_when_scaled_then_the_rate_follows_the_batch(
    rows: int, rate: float
) -> None:
    assert scaled_table_lr(rows) == pytest.approx(rate)


def test_given_more_rows_when_scaled_then_the_rate_never_falls() -> None:
    rates = [scaled_table_lr(rows) for rows in range(1, 4000, 7)]
    assert rates == sorted(rates)


@pytest.mark.parametrize("scaled", [True, False])
def test_given_the_switch_when_a_bank_builds_its_optimiser_then_the_rate_is_the_rule_or_fixed(
    monkeypatch: pytest.MonkeyPatch, scaled: bool
) -> None:
    monkeypatch.setattr(config_module, "SCALED_TABLE_LR", scaled)
    table = ModelBank(TrainConfig(), 0, 2, (6,), 2, torch.device("cpu"), train_rows=300)
    image = ModelBank(TrainConfig(), 0, 2, (1, 8, 8), 2, torch.device("cpu"), train_rows=300)
    given = ModelBank(TrainConfig(lr=0.05), 0, 2, (6,), 2, torch.device("cpu"), train_rows=300)
    expected = {table: scaled_table_lr(300) if scaled else AUTO_TABLE_LR, image: DEFAULT_LR}
    expected[given] = 0.05
    for bank, rate in expected.items():
        bank.rep(())
        opts = list(bank.rep_opts.values())
        assert opts[0].param_groups[0]["lr"] == pytest.approx(rate)
        bank.set_lr(opts, 0)  # epoch 0 of the schedule starts from the same rate
        assert opts[0].param_groups[0]["lr"] == pytest.approx(rate)
    assert TrainConfig(method="dvfl").learning_rate(True, 3000) == DEFAULT_LR


def test_given_parties_of_partial_overlap_when_built_then_each_rate_is_from_its_own_rows(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A party's rows are its own training split (what both transports load from its files),
    so parties holding different rows may train at different rates."""
    monkeypatch.setattr(config_module, "SCALED_TABLE_LR", True)
    paths = write_tables(tmp_path / "tables", n=1200, share=0.7)
    rows = {}
    for data in load_table_federation(bank_sources(paths)):
        party = Party(f"party{data.meta.block}", data, TrainConfig(), secret=b"s")
        rows[data.meta.block] = len(party.data.splits["train"].ids)
        assert party.models.train_rows == rows[data.meta.block]
        party.models.rep(())
        lr = party.models.rep_opts[()].param_groups[0]["lr"]
        assert lr == pytest.approx(scaled_table_lr(rows[data.meta.block]))
        assert DEFAULT_LR < lr < AUTO_TABLE_LR
    assert len(set(rows.values())) > 1  # partial overlap: the parties' rows differ
