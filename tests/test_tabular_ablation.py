"""The ablation of the generated tables' gap (issue 27, benchmarks.tabular.report): full overlap
keeps the benchmark's rows, the central model in the federation's shape fuses only the parties
that hold a row, and the laser-concat plug-in is LASER-VFL with a concatenating head whose
subsets the validation split may choose among."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from benchmarks.tabular.rows import Fit, Towers, central_row, towers_features
from benchmarks.tabular.tables import LABEL_BLOCK, K, prepare, tables, write_parties
from vfl_core.config import TrainConfig
from vfl_core.methods.registry import REGISTRY, register, unregister
from vfl_core.methods.spec import MethodSpec
from vfl_core.training.validation import Validator


def test_given_full_overlap_when_cut_then_every_party_holds_the_label_partys_rows(
    tmp_path: Path,
) -> None:
    table = tables(None, quick=True)["gen_skewed"](0, True)
    partial = write_parties(table, 0, tmp_path / "partial")
    full = write_parties(table, 0, tmp_path / "full", overlap="full")
    assert not partial.held.all(axis=0).all()
    assert (full.held == partial.held[LABEL_BLOCK]).all()  # the same labelled and test rows
    with pytest.raises(ValueError, match="overlap"):
        write_parties(table, 0, tmp_path / "bad", overlap="most")


def _towers(fusion: str) -> Towers:
    torch.manual_seed(0)
    towers = [nn.Linear(2, 3) for _ in range(K)]
    return Towers(towers, [2] * K, nn.Identity(), fusion, drop=0.0).eval()


def test_given_a_missing_party_when_fused_then_the_mean_and_concat_leave_it_out() -> None:
    x = torch.randn(4, 2 * K)
    present = torch.tensor([[1.0, 0.0, 1.0]]).repeat(4, 1)  # party 1 misses these rows
    other = x.clone()
    other[:, 2:4] += 5.0  # what party 1's columns hold does not matter where it misses the row
    mean, concat = _towers("mean"), _towers("concat")
    with torch.no_grad():
        fused = mean(torch.cat([x, present], 1))
        assert torch.equal(fused, mean(torch.cat([other, present], 1)))
        expected = (mean.towers[0](x[:, :2]) + mean.towers[2](x[:, 4:])) / 2
        assert torch.allclose(fused, expected)  # (B, d): the mean of the two present ones
        joined = concat(torch.cat([x, present], 1))  # (B, K * d)
    assert joined.shape == (4, 3 * K)
    assert torch.equal(joined[:, 3:6], torch.zeros(4, 3))


def test_given_the_federations_shape_when_trained_centrally_then_every_set_is_scored(
    tmp_path: Path,
) -> None:
    table = tables(None, quick=True)["gen_skewed"](0, True)
    prep = prepare(table, 0, tmp_path)
    x = towers_features(prep, prep.test_rows)
    widths = sum(p.meta.feature_shape[0] for p in prep.parties)
    assert x.shape == (len(prep.test_rows), widths + K)
    assert (x[:, widths:] == prep.split.held[:, prep.test_rows].T).all()
    train = TrainConfig(seed=0, epochs=2)
    for fusion in ("mean", "concat"):
        row = central_row(prep, train, Fit(towers=fusion))
        accuracy = row["scores"]["all"]["accuracy"]
        assert 0.5 < accuracy <= 1.0 and np.isfinite(accuracy)
        assert set(row["scores"]) == {"all", *prep.observed(prep.test_rows)}


@pytest.fixture
def laser_concat() -> Iterator[MethodSpec]:
    """The plug-in registered for one test, the registry left as it was found."""
    from benchmarks.tabular.sweep import laser_concat

    yield register(laser_concat())
    unregister(laser_concat().name)


def test_given_laser_concat_when_registered_then_laser_with_a_concatenating_head(
    laser_concat: MethodSpec,
) -> None:
    from benchmarks.tabular.sweep import LASER_CONCAT

    laser = REGISTRY["laser"]
    assert REGISTRY[LASER_CONCAT] is laser_concat
    assert (laser_concat.fusion, laser.fusion) == ("concat", "mean")
    assert laser_concat.tasks is laser.tasks and laser_concat.heads == laser.heads
    assert laser_concat.head_input_blocks((0,), K) == K

    def chooses(name: str) -> bool:
        return Validator(SimpleNamespace(spec=REGISTRY[name]))._has_subset_predictors()

    assert chooses("laser") and chooses(LASER_CONCAT)
    assert not any(chooses(m) for m in ("zerofill", "plug", "svfl", "combinatorial", "local"))
