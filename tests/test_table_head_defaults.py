"""The tables' model defaults (docs/tabular-defaults.md, "The wide head and the tables' weight
decay"): `--head auto` is the wide head on parties of feature vectors (a linear path from each
party's features beside its MLPs) and `--weight-decay auto` is AUTO_TABLE_WEIGHT_DECAY there;
images and the methods with stages keep the linear head and DEFAULT_WEIGHT_DECAY. The linear
path is trained like every weight, on training rows only: other test rows leave it unchanged."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from tabular_tables import bank_sources, write_tables

from vfl_core.config import AUTO_TABLE_WEIGHT_DECAY, DEFAULT_WEIGHT_DECAY, TrainConfig
from vfl_core.data.party_dir import PartyData
from vfl_core.data.tabular import load_table_federation
from vfl_core.model.model_bank import ModelBank
from vfl_core.model.models import WideHead
from vfl_core.model.slots import CONCAT_HEAD
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

CPU = torch.device("cpu")


def _decay(bank: ModelBank) -> float:
    bank.rep(())
    return next(iter(bank.rep_opts.values())).param_groups[0]["weight_decay"]


def test_given_auto_weight_decay_when_a_bank_builds_its_optimiser_then_tables_get_theirs() -> None:
    table = ModelBank(TrainConfig(), 0, 2, (6,), 2, CPU, train_rows=300)
    image = ModelBank(TrainConfig(), 0, 2, (1, 8, 8), 2, CPU, train_rows=300)
    given = ModelBank(TrainConfig(weight_decay=0), 0, 2, (6,), 2, CPU, train_rows=300)
    assert _decay(table) == AUTO_TABLE_WEIGHT_DECAY
    assert _decay(image) == DEFAULT_WEIGHT_DECAY
    assert _decay(given) == 0.0
    assert TrainConfig(method="dvfl").decay(True) == DEFAULT_WEIGHT_DECAY  # stages: as before
    assert TrainConfig(weight_decay="0.01").decay(True) == 0.01  # the CLI's text


def test_given_a_negative_weight_decay_when_configured_then_one_clear_error() -> None:
    with pytest.raises(ValidationError, match="must be auto or a number >= 0"):
        TrainConfig(weight_decay=-1e-3)
    with pytest.raises(ValidationError, match="must be auto or a number >= 0"):
        TrainConfig(weight_decay="lots")


def _trained(data: list[PartyData]) -> dict[int, Party]:
    train = TrainConfig(epochs=3, seed=0)
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    fed.train()
    return parties


def _linear_paths(parties: dict[int, Party]) -> dict[str, torch.Tensor]:
    """Every weight of the linear path: each tower's skip and each wide head's linear map."""
    out = {}
    for block, party in parties.items():
        bank = party.models
        for key, rep in bank.reps.items():
            mlp = getattr(rep, "mlp", rep)  # a party with categorical columns wraps its MLP
            assert mlp.skip is not None  # a table's tower carries the linear path
            out[f"{block}/rep{key}"] = mlp.skip.weight.detach().clone()
        for key, head in bank.heads.items():
            assert isinstance(head, WideHead)
            out[f"{block}/head{key}"] = head.linear.weight.detach().clone()
    return out


def test_given_other_test_rows_when_trained_by_default_then_the_same_linear_path(
    tmp_path: Path,
) -> None:
    data = load_table_federation(bank_sources(write_tables(tmp_path, n=900, share=0.85)))
    rng = np.random.default_rng(3)
    scrambled = []
    for d in data:
        test = d.splits["test"]
        labels = None if test.labels is None else 1 - test.labels
        features = rng.normal(size=test.features.shape).astype(np.float32)
        splits = {**d.splits, "test": replace(test, labels=labels, features=features)}
        scrambled.append(replace(d, splits=splits))
    plain, other = _trained(data), _trained(scrambled)
    first, second = _linear_paths(plain), _linear_paths(other)
    assert CONCAT_HEAD in plain[0].models.heads  # the concatenating head too
    assert first.keys() == second.keys() and first
    for name, weight in first.items():
        assert torch.equal(weight, second[name]), name
