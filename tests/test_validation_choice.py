"""The tabular defaults (issue 27): early stopping on tables by default, the decision threshold
and the subset choice made on the validation split (vfl_core/inference/choice.py), in process.

The choice must never see a test row: one test audits every call it makes (train split, rows of
the held-out validation samples only), another changes every test label and feature and finds
the same choice, the same weights and the same validation record.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from recording import RecordingTransport
from tabular_tables import bank_sources, write_linear_tables, write_tables

from vfl_core.config import AUTO_PATIENCE, AUTO_STALE_PATIENCE, TrainConfig
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.tabular import TableSource, load_table_federation
from vfl_core.inference import choice
from vfl_core.inference.choice import Candidate, best_candidate, pooled_pick
from vfl_core.inference.headline import watched
from vfl_core.inference.metrics import (
    EvalReport,
    brier_error_from_histogram,
    brier_from_histogram,
    standard_error,
)
from vfl_core.inference.scoring import AUC_BINS, auc_histogram, score_batch
from vfl_core.methods.combination import combine, decide
from vfl_core.model.model_config import ModelConfig
from vfl_core.protocol import ScoreCall
from vfl_core.training import train_rows
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

FAST = {"epochs": 4, "lr": 5e-3, "seed": 0}
# LASER-VFL's heads alone: neither the concatenating nor the linear heads (test_linear_lane)
NO_LANES = ModelConfig(linear_lane=0)
LASER_ONLY = {"concat_head": False, "model": NO_LANES}


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> list[TableSource]:
    paths = write_tables(tmp_path_factory.mktemp("tables"), n=1500, share=0.85)
    return list(bank_sources(paths))


@pytest.fixture
def small_splits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the small test tables' validation split choose (its patterns hold a few dozen)."""
    monkeypatch.setattr(choice, "MIN_CHOICE_SAMPLES", 5)
    monkeypatch.setattr(choice, "MIN_CLASS_SAMPLES", 2)


def _trained(data: list[PartyData], train: TrainConfig) -> tuple[Federation, RecordingTransport]:
    parties = {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=b"s") for d in data}
    transport = RecordingTransport(parties)
    fed = Federation(transport, train, progress=False)
    fed.align()
    fed.train()
    return fed, transport


def _scrambled_tests(data: list[PartyData]) -> list[PartyData]:
    """The same parties with every test label permuted and every test feature replaced."""
    rng = np.random.default_rng(7)
    out = []
    for d in data:
        test = d.splits["test"]
        labels = None if test.labels is None else 1 - test.labels  # every label flipped
        features = rng.normal(size=test.features.shape).astype(np.float32)
        splits = {**d.splits, "test": replace(test, labels=labels, features=features)}
        out.append(replace(d, splits=splits))
    return out


def test_given_own_tables_when_configured_by_default_then_early_stopping_is_on(
    tables: list[TableSource], party_dirs: list[Path]
) -> None:
    """Tables (feature vectors) stop early by default; the digits images keep every epoch."""
    train = TrainConfig(**FAST)
    assert train.early_stop_patience is None and train.threshold == "auto"
    data = load_table_federation(tuple(tables))
    table_parties = {d.meta.block: Party("p", d, train, secret=b"s") for d in data}
    fed = Federation(InProcessTransport(table_parties), train, progress=False)
    # the tables' defaults train with staleness, whose runs wait longer (vfl_core.config)
    want = AUTO_STALE_PATIENCE if fed.config.staleness else AUTO_PATIENCE
    assert fed.config.staleness and fed.early_stop is not None and fed.early_stop.patience == want
    assert fed.early_stop.metric == "brier"  # binary: the Brier score moves where accuracy is flat
    digits = [load_party_dir(p) for p in party_dirs]
    images = {d.meta.block: Party("p", d, train, secret=b"s") for d in digits}
    assert Federation(InProcessTransport(images), train, progress=False).early_stop is None
    off = TrainConfig(**FAST, early_stop_patience=0)
    fed = Federation(InProcessTransport(table_parties), off, progress=False)
    assert fed.early_stop is None


@pytest.mark.usefixtures("small_splits")
def test_given_a_trained_federation_when_choosing_then_only_validation_rows_are_read(
    tables: list[TableSource],
) -> None:
    fed, transport = _trained(load_table_federation(tuple(tables)), TrainConfig(**FAST))
    transport.embeds.clear()
    transport.scores.clear()
    chosen = fed.choose_on_validation()
    assert chosen.threshold is not None and chosen.candidates, "nothing was chosen"
    al, validation = fed.alignments["train"], fed._validation
    assert validation is not None
    assert transport.embeds and transport.scores
    for block, call in [*transport.embeds, *transport.scores]:
        assert call.split == "train"
        allowed = set(al.rows[block][validation].tolist()) - {-1}
        assert set(call.rows.tolist()) <= allowed, f"block {block} read a non-validation row"


@pytest.mark.parametrize(
    ("options", "trained"),
    [({}, 3), ({"early_stop_patience": 0}, 5), ({"epochs": 2}, 2)],
    ids=["default", "patience-0", "fewer-epochs"],
)
def test_given_a_table_too_small_for_validation_when_trained_then_the_small_tables_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict, trained: int
) -> None:
    """Under AUTO_MIN_VALIDATION validation samples the default early stopping is off and
    nothing is held out; the run ends after AUTO_SMALL_EPOCHS epochs (3 here), `--epochs` the
    ceiling; an explicit patience 0 trains every epoch."""
    monkeypatch.setattr(train_rows, "AUTO_SMALL_EPOCHS", 3)
    data = load_table_federation(tuple(bank_sources(write_tables(tmp_path, n=300))))
    fed, _ = _trained(data, TrainConfig(**{**FAST, "epochs": 5, **options}))
    assert fed.early_stop is None and fed._validation is None  # every training sample trains
    assert fed.total_epochs == trained and fed.cursor.epoch == trained
    assert len(fed.cursor.summaries) == trained


@pytest.mark.usefixtures("small_splits")
def test_given_other_test_labels_and_features_when_trained_then_the_same_choice(
    tables: list[TableSource],
) -> None:
    data = load_table_federation(tuple(tables))
    train = TrainConfig(**FAST)
    fed, _ = _trained(data, train)
    other, _ = _trained(_scrambled_tests(data), train)
    assert fed.choice.to_json() == other.choice.to_json()
    assert fed.early_stop is not None and other.early_stop is not None
    assert fed.early_stop.to_json() == other.early_stop.to_json()
    # and the test split did change: its metrics differ
    assert fed.evaluate("test").to_json() != other.evaluate("test").to_json()


@pytest.mark.usefixtures("small_splits")
def test_given_a_chosen_threshold_when_evaluating_then_heads_and_federation_use_it(
    tables: list[TableSource],
) -> None:
    fed, _ = _trained(load_table_federation(tuple(tables)), TrainConfig(**FAST))
    threshold = fed.choice.threshold
    assert threshold is not None and fed.threshold == threshold
    for pred in fed.predict_batches("test"):
        if pred.federation is None:
            continue
        assert pred.predicted is not None
        np.testing.assert_array_equal(pred.predicted, pred.federation[:, 1] >= threshold)
        for block, probs in pred.party_probs.items():
            np.testing.assert_array_equal(pred.scored[str(block)], probs[:, 1] >= threshold)
    # a configured number wins over the validation's choice; 0.5 is the plain argmax
    assert replace_threshold(fed, 0.3).threshold == 0.3
    assert replace_threshold(fed, 0.5).threshold is None


def replace_threshold(fed: Federation, value: float) -> Federation:
    fed.config = fed.config.model_copy(update={"threshold": value})
    return fed


@pytest.mark.usefixtures("small_splits")
def test_given_subset_choice_when_evaluated_then_never_worse_than_a_subset_on_validation(
    tables: list[TableSource],
) -> None:
    """Per observed pattern, with `best` the chosen subset's validation Brier score is the best
    candidate's (no other subset is better); by default (the one-standard-error rule) no
    subset beats the kept one by more than that subset's standard error, and a subset is kept
    only when it beats the full set by more than its own; the plain option chooses nothing."""
    fed, _ = _trained(
        load_table_federation(tuple(tables)),
        TrainConfig(**FAST, subset_choice="best", **LASER_ONLY),  # LASER-VFL's subsets
    )
    assert fed.choice.candidates
    for pattern, cands in fed.choice.candidates.items():
        kept = fed.choice.kept(pattern)
        value = next(c.value for c in cands if c.blocks == kept)
        scored = [c.value for c in cands if c.value is not None and c.scored >= cands[0].scored]
        assert value is not None and value <= min(scored)  # Brier: lower is better
    # the rule on LASER-VFL's subsets (the concatenating heads, which the defaults weigh
    # against them on the pooled validation below, left out)
    fed, _ = _trained(load_table_federation(tuple(tables)), TrainConfig(**FAST, **LASER_ONLY))
    assert fed.choice.candidates
    for pattern, cands in fed.choice.candidates.items():
        kept = next(c for c in cands if c.blocks == fed.choice.kept(pattern))
        usable = [c for c in cands if c.value is not None and c.scored >= cands[0].scored]
        assert kept.value is not None and all(c.error is not None for c in usable)
        assert all(kept.value - c.value <= c.error for c in usable)
        if kept is not cands[0]:
            assert cands[0].value - kept.value > kept.error
    # by default: where the concatenating heads replace LASER-VFL's with its subsets, they beat
    # them on the pooled validation by more than their own standard error (the same rule); the
    # mean of both heads' predictions, where it beats the heads picked without it
    fed, _ = _trained(load_table_federation(tuple(tables)), TrainConfig(**FAST, model=NO_LANES))
    laser, concat, blend = fed.choice.pooled
    assert [c.head for c in fed.choice.pooled] == ["", "concat", "blend"]
    assert None not in (laser.value, concat.value, blend.value, concat.error)
    if set(fed.choice.heads.values()) == {"concat"}:
        assert laser.value - concat.value > concat.error  # type: ignore[operator]
    elif fed.choice.heads:
        assert set(fed.choice.heads.values()) == {"blend"}
        picked = pooled_pick([laser, concat], lower=True, margin=True)
        assert picked is not None and blend.value < picked.value  # type: ignore[operator]
    plain = TrainConfig(**FAST, subset_choice="plain", threshold=0.5)
    fed, _ = _trained(load_table_federation(tuple(tables)), plain)
    assert not fed.choice.subsets and fed.choice.threshold is None and fed.threshold is None


def test_given_a_regression_table_when_trained_by_default_then_it_stops_on_validation_rmse(
    tmp_path: Path,
) -> None:
    paths = write_linear_tables(tmp_path, n=400, share=0.9)
    sources = tuple(
        TableSource(
            path=p,
            id_column="house_id",
            label_column="price" if name == "owner" else None,
            block=k,
            num_blocks=2,
            task="regression",
        )
        for k, (name, p) in enumerate(sorted(paths.items(), key=lambda kv: kv[0] != "owner"))
    )
    train = TrainConfig(epochs=30, lr=5e-3, early_stop_patience=AUTO_PATIENCE)  # a small table
    fed, _ = _trained(load_table_federation(sources), train)
    stop = fed.early_stop
    assert stop is not None and stop.metric == "rmse" and stop.best_epoch >= 0
    values = [v for _, v in stop.history if v is not None]
    assert stop.best_value == min(values)
    assert fed.choice.threshold is None  # no threshold for regression


# ------------------------------------------------------------------------------ the pieces


def test_given_a_histogram_when_choosing_the_threshold_then_the_best_f1_edge() -> None:
    """Negatives around 0.2, positives around 0.4: a threshold between them has F1 1, where
    0.5 predicts no positive at all."""
    hist = np.zeros((2, AUC_BINS), dtype=np.int64)
    hist[0, 150:250] = 3
    hist[1, 350:450] = 1
    threshold, f1, plain = choice.best_threshold(hist)
    assert 0.25 <= threshold <= 0.35 and f1 == 1.0 and plain == 0.0


def test_given_a_skewed_histogram_when_choosing_by_rule_then_auto_keeps_accuracy_f1_trades_it() -> (
    None
):
    """78 negatives at 0.2; 12 negatives and 10 positives at 0.4. Predicting none positive is
    90% accurate; a threshold at 0.4 has F1 0.625 but 88% accuracy. 'auto' (accuracy) keeps
    0.5 (ties go to the edge nearest 0.5), 'f1' moves to 0.4."""
    hist = np.zeros((2, AUC_BINS), dtype=np.int64)
    hist[0, 200], hist[0, 400], hist[1, 400] = 78, 12, 10
    assert choice.THRESHOLD_METRIC["auto"] == "accuracy" and choice.THRESHOLD_METRIC["f1"] == "f1"
    assert choice.best_threshold(hist, "accuracy") == (0.5, 0.9, 0.9)
    threshold, f1, plain = choice.best_threshold(hist, "f1")
    assert threshold == 0.4 and f1 == pytest.approx(0.625) and plain == 0.0
    assert TrainConfig(threshold="f1").threshold == "f1"


@pytest.mark.usefixtures("small_splits")
def test_given_the_default_threshold_when_chosen_then_by_platt_scored_by_accuracy(
    tables: list[TableSource],
) -> None:
    """The default rule (Platt scaling) records itself and the validation accuracy at 0.5 and
    at its threshold; the accuracy rule is never worse on validation than 0.5."""
    fed, _ = _trained(load_table_federation(tuple(tables)), TrainConfig(**FAST))
    chosen = fed.choose_on_validation()
    assert chosen.threshold is not None and chosen.threshold_metric == "accuracy"
    assert chosen.threshold_rule == "platt"
    fed.config = fed.config.model_copy(update={"threshold": "accuracy"})
    argmax = fed.choose_on_validation()
    plain, tuned = argmax.threshold_f1 or (1.0, 0.0)
    assert argmax.threshold_rule == "accuracy" and tuned >= plain  # never worse than 0.5
    again = choice.ValidationChoice.from_json(json.loads(json.dumps(chosen.to_json())))
    assert again == chosen


def test_given_probabilities_when_scoring_brier_from_histograms_then_within_half_a_bin() -> None:
    rng = np.random.default_rng(0)
    p = rng.random(5000)
    truth = (rng.random(5000) < p).astype(np.int64)
    exact = float(np.mean((p - truth) ** 2))
    got = brier_from_histogram(auc_histogram(truth, p))
    assert got is not None and abs(got - exact) < 1.0 / AUC_BINS


def test_given_a_threshold_when_combining_then_classes_follow_it_and_none_is_the_argmax() -> None:
    probs = {0: np.array([[0.7, 0.3], [0.45, 0.55], [0.9, 0.1]], dtype=np.float32)}
    gen = np.random.default_rng(0)
    plain = combine("heads", (0,), probs, gen)
    tuned = combine("heads", (0,), probs, gen, threshold=0.25)
    assert plain is not None and tuned is not None
    assert plain.predicted.tolist() == [0, 1, 0] and tuned.predicted.tolist() == [1, 1, 0]
    assert tuned.scored["0"].tolist() == [1, 1, 0]
    many = np.eye(3, dtype=np.float32)[[2, 0]]  # (2, 3): no threshold for three classes
    assert decide(many, 0.25).tolist() == [2, 0]


@pytest.mark.usefixtures("small_splits")
def test_given_a_choice_when_the_coordinator_resumes_from_its_snapshot_then_it_serves_with_it(
    tables: list[TableSource],
) -> None:
    """The choice is in the engine's snapshot (the coordinator's checkpoint): a restarted
    coordinator predicts with the same threshold and subsets."""
    fed, transport = _trained(load_table_federation(tuple(tables)), TrainConfig(**FAST))
    assert fed.choice.threshold is not None
    saved = json.loads(json.dumps(fed.snapshot()))
    again = Federation(transport, fed.config, progress=False)
    again.align()
    again.restore(saved)
    assert again.choice.to_json() == fed.choice.to_json()
    assert again.threshold == fed.threshold
    assert again.evaluate("test").to_json() == fed.evaluate("test").to_json()


@pytest.mark.parametrize("bad", ["2", "0", "1", "high", -0.1])
def test_given_a_threshold_outside_0_1_when_configured_then_a_one_line_error(bad: object) -> None:
    with pytest.raises(ValueError, match="must be auto or a probability strictly between 0 and 1"):
        TrainConfig(threshold=bad)
    assert TrainConfig(threshold="0.3").threshold == 0.3


def test_given_candidates_when_choosing_then_a_subset_must_beat_the_full_set_by_its_error() -> None:
    """The one-standard-error rule of `best_candidate`: a subset whose Brier score is lower than
    the full set's by less than its standard error leaves the full set; by more, replaces it;
    `best` (no margin) takes any strictly better one; a higher-is-better accuracy the same way."""
    full = Candidate((0, 1, 2), 0.1967, 217, 0.014)
    near = Candidate((0, 2), 0.1960, 217, 0.014)
    assert best_candidate([full, near], lower=True) is full
    assert best_candidate([full, near], lower=True, margin=False) is near
    far = Candidate((0, 2), 0.1700, 217, 0.014)
    assert best_candidate([full, far], lower=True) is far
    acc_full, acc_sub = Candidate((0, 1), 0.80, 100, 0.04), Candidate((0,), 0.83, 100, 0.0376)
    assert best_candidate([acc_full, acc_sub], lower=False) is acc_full
    assert best_candidate([acc_full, Candidate((0,), 0.85, 100, 0.0357)], lower=False).blocks == (
        0,
    )


def test_given_histograms_when_estimating_the_brier_error_then_it_matches_the_samples() -> None:
    """brier_error_from_histogram is the standard error of the mean squared error of the
    probabilities, up to their bins."""
    rng = np.random.default_rng(3)
    p = rng.random(4000)
    y = (rng.random(4000) < p).astype(int)
    hist = np.zeros((2, AUC_BINS))
    np.add.at(hist, (y, np.minimum((p * AUC_BINS).astype(int), AUC_BINS - 1)), 1)
    loss = (p - y) ** 2
    assert brier_error_from_histogram(hist) == pytest.approx(
        loss.std(ddof=1) / np.sqrt(4000), rel=0.01
    )
    assert brier_error_from_histogram(np.zeros((2, AUC_BINS))) is None


def test_given_three_classes_when_scored_in_batches_then_the_brier_score_and_its_error_match() -> (
    None
):
    """More than two classes: the Brier score per head from its sums over the batches and
    observed sets it predicted, averaged over heads, and its standard error from their spread."""
    rng = np.random.default_rng(4)
    report, losses = EvalReport(), {"0": [], "1": []}
    for pattern, size in (((0, 1), 300), ((0, 1), 200), ((0,), 250)):
        truth = rng.integers(0, 3, size)
        probs = {int(k): rng.dirichlet(np.ones(3), size).astype(np.float32) for k in pattern}
        combined = combine("heads", pattern, probs, rng)
        assert combined is not None and combined.scores["0"].shape == (size, 3)
        call = ScoreCall("validation", truth, b"", combined.scored, combined.scores)
        report.add(pattern, size, score_batch("classification", 3, truth, call))
        for k, p in probs.items():
            p = p.astype(np.float64)
            losses[str(k)].extend(np.sum((p - np.eye(3)[truth]) ** 2, axis=1))
    assert report.overall().brier == pytest.approx(np.mean([np.mean(v) for v in losses.values()]))
    errors = [np.std(v, ddof=1) / np.sqrt(len(v)) for v in losses.values()]
    assert standard_error(report, "brier") == pytest.approx(np.mean(errors))
    assert watched("classification", 3) == "brier"


def test_given_no_threshold_when_the_choice_is_written_then_it_names_no_threshold_metric() -> None:
    # a regression run (or more than two classes) chooses no decision threshold
    assert choice.ValidationChoice().to_json()["threshold_metric"] is None
    # results written before named "f1" whatever the task: read as no rule
    old = {**choice.ValidationChoice().to_json(), "threshold_metric": "f1"}
    assert choice.ValidationChoice.from_json(old).threshold_metric is None
    chosen = {**old, "threshold": 0.4, "threshold_f1": [0.5, 0.6]}
    assert choice.ValidationChoice.from_json(chosen).threshold_metric == "f1"
