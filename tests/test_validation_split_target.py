"""Issue 45's item 3, the validation side: a stratified validation split (each class held out in
its share, drawn by the label party so that the coordinator sees no label; one seed fixes it; the
test rows take no part) and a log target for regression (fitted on the label party's training
targets; bundles predict what the federation predicts)."""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from tabular_tables import HOUSE_ID, LABEL_COLUMN, PRICE, write_linear_tables, write_tables
from test_serving_bundle import SECRET, bundle_predictions, trained

from vfl_client.servicer import strata_refusal
from vfl_core.config import TrainConfig
from vfl_core.data.learning_task import TargetScaler, wants_log
from vfl_core.data.tabular import federation_sources, load_table_federation
from vfl_core.errors import ConfigError
from vfl_core.model.model_config import ModelConfig
from vfl_core.serving.bundle import load_bundle
from vfl_core.training import strata
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

SMALL = ModelConfig(embed_dim=8, hidden=(16,))


def aligned(tmp_path: Path, data: list | None = None, **train: object):
    if data is None:
        data = table_data(tmp_path)
    config = TrainConfig(epochs=1, early_stop_patience=2, model=SMALL, **train)
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, config, secret=SECRET) for d in data}
    fed = Federation(InProcessTransport(parties), config, progress=False)
    fed.align()
    return fed, parties


def table_data(tmp_path: Path) -> list:
    tables = write_tables(tmp_path / "data", n=1200, share=0.8)
    sources = federation_sources(
        [tables["bank"], tables["retail"], tables["telecom"]],
        None,
        id_column="customer_id",
        label_column=LABEL_COLUMN,
        label_blocks=None,
    )
    return load_table_federation(sources)


def held_classes(fed: Federation, parties: dict[int, Party]) -> tuple[np.ndarray, np.ndarray]:
    """The labels of the validation samples and of every candidate (the label party's rows)."""
    al = fed.alignments["train"]
    rows = al.rows[0]  # the bank holds the labels
    labels = parties[0].split("train").labels
    assert labels is not None
    validation = fed._validation
    assert validation is not None and (rows[validation] >= 0).all()
    return labels[rows[validation]], labels[rows[rows >= 0]]


def test_given_stratified_when_held_out_then_each_class_in_its_share(tmp_path: Path) -> None:
    data = table_data(tmp_path)
    fed, parties = aligned(tmp_path, data, validation_split="stratified")
    held, candidates = held_classes(fed, parties)
    assert len(held) == round(0.1 * len(candidates))
    counts, every = np.bincount(held, minlength=2), np.bincount(candidates, minlength=2)
    assert every.min() > 50  # both classes, the positives a minority
    share = every / every.sum() * len(held)
    assert np.abs(counts - share).max() <= 1.0, (counts, share)
    # the training plan never holds them
    planned = np.concatenate([b.index for b in fed.plan(0)])
    assert np.isin(planned, fed._validation).sum() == 0

    again, _ = aligned(tmp_path, data, validation_split="stratified")
    other, _ = aligned(tmp_path, data, validation_split="stratified", seed=1)
    assert np.array_equal(again._validation, fed._validation)  # the seed fixes it
    assert not np.array_equal(other._validation, fed._validation)
    random, _ = aligned(tmp_path, data)
    assert not np.array_equal(random._validation, fed._validation)


def test_given_stratified_when_test_rows_change_then_the_split_does_not(tmp_path: Path) -> None:
    """The draws read only the label party's training labels: other test labels and features
    leave the validation samples as they were."""
    data = table_data(tmp_path)
    fed, _ = aligned(tmp_path, data, validation_split="stratified")
    bank = data[0]
    test = bank.splits["test"]
    assert test.labels is not None
    flipped = replace(test, labels=1 - test.labels, features=test.features * 0 + 1e6)
    changed = [replace(bank, splits={**bank.splits, "test": flipped}), *data[1:]]
    other, _ = aligned(tmp_path, changed, validation_split="stratified")
    assert np.array_equal(other._validation, fed._validation)


def test_given_labels_when_drawn_then_one_draw_per_interval_of_each_class() -> None:
    labels = np.array([0] * 7 + [1] * 3 + [0] * 5, dtype=np.int64)
    draws = strata.draws(labels, seed=3, block=0)
    assert draws.dtype == np.float32 and ((draws >= 0) & (draws < 1)).all()
    for value in (0, 1):
        mine = draws[labels == value]
        cells = np.floor(mine.astype(np.float64) * len(mine)).astype(int)
        assert sorted(cells.tolist()) == list(range(len(mine)))
    assert np.array_equal(strata.draws(labels, seed=3, block=0), draws)


def test_given_a_run_without_stratified_when_asked_for_draws_then_refused() -> None:
    assert strata_refusal("random", "train") is not None
    assert strata_refusal("stratified", "test") is not None
    assert strata_refusal("stratified", "train") is None


def test_given_regression_when_stratified_then_drawn_at_random(tmp_path: Path) -> None:
    tables = write_linear_tables(tmp_path / "data", n=1200, share=0.9)
    sources = federation_sources(
        [tables["owner"], tables["agent"]],
        None,
        id_column=HOUSE_ID,
        label_column=PRICE,
        label_blocks=None,
        task="regression",
    )
    data = load_table_federation(sources)
    fed, _ = aligned(tmp_path, data, validation_split="stratified")
    plain, _ = aligned(tmp_path, data)
    assert np.array_equal(fed._validation, plain._validation)


def test_given_skewed_targets_when_auto_then_log_and_back_in_original_units() -> None:
    rng = np.random.default_rng(0)
    skewed = rng.lognormal(3.0, 1.0, 2000)
    assert wants_log(skewed)
    assert not wants_log(rng.normal(100.0, 10.0, 2000))  # symmetric
    assert not wants_log(np.concatenate([skewed, [-5.0]]))  # a negative target
    scaler = TargetScaler.fit(skewed, "auto")
    assert scaler.log and abs(scaler.mean - np.log1p(skewed).mean()) < 1e-9
    y = torch.tensor(skewed[:10]).unsqueeze(1)
    torch.testing.assert_close(scaler.restore(scaler.standardize(y)), y)
    assert not TargetScaler.fit(skewed, "none").log
    with pytest.raises(ConfigError, match="above -1"):
        TargetScaler.fit(np.array([-2.0, 1.0, 3.0]), "log")


def test_given_a_log_target_when_bundles_predict_then_equal_the_federation(tmp_path: Path) -> None:
    tables = write_linear_tables(tmp_path / "data", n=300, share=0.9)
    paths = [tables["owner"], tables["agent"]]
    with paths[0].open(newline="") as f:
        rows = list(csv.DictReader(f))
    for row in rows:  # positive and right-skewed
        row[PRICE] = f"{np.exp(float(row[PRICE]) / 40.0):.5f}"
    with paths[0].open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    fed, parties = trained(paths, HOUSE_ID, PRICE, "regression", target_transform="log")
    assert parties[0].scaler.log
    got, want = bundle_predictions(tmp_path, fed, parties, paths, HOUSE_ID)
    assert len(got) > 20 and got.shape[1] == 1
    np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max(), rtol=0)
    meta = load_bundle(tmp_path / "party0").meta
    assert meta.target_log and abs(meta.target_mean - np.log1p(np.exp(2.5))) < 0.5  # the log's
