"""Regression and ROC AUC (issue 7): the task in party metadata, MSE inside the LASER sum with
standardised targets, predictions in original units, metrics from the label party's sums and
histograms (checked against numpy and scikit-learn), and how they cross the wire."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score
from torch import nn

from vfl_coordinator.registry import Registry
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_diabetes_dataset, load_digits_dataset
from vfl_core.data.learning_task import head_loss
from vfl_core.data.party_dir import PartyData, check_federation, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ConfigError, DataError, ProtocolError
from vfl_core.inference.metrics import FEDERATION, EvalReport, auc_from_histogram, format_table
from vfl_core.inference.scoring import (
    AUC_BINS,
    auc_histogram,
    regression_sums,
    result_fits,
    score_batch,
)
from vfl_core.methods.combination import combine
from vfl_core.methods.laser.objective import (
    full_loss,
    fuse_mean,
    sample_tasks,
    sampled_loss,
    task_outcomes,
)
from vfl_core.methods.registry import method_spec
from vfl_core.protocol import (
    EmbedCall,
    FuseCall,
    PartyInfo,
    PredictCall,
    SamplePrediction,
    ScoreCall,
    ScoreResult,
)
from vfl_core.seeding import Stream, rng
from vfl_core.training.alignment import Alignment
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert

K = 4
SECRET = b"regression-test"
BATCH = 16
CONFIG = TrainConfig(
    seed=5,
    batch_size=BATCH,
    lr=1e-2,
    weight_decay=0.0,
    model=ModelConfig(
        representation="mlp", embed_dim=6, hidden=(12,), head="linear", linear_lane=0
    ),
    concat_head=False,  # LASER-VFL's heads alone: the tests below write its loss out by hand
)


def prepared(root: Path, dataset=None, num_blocks: int = K) -> list[PartyData]:
    paths = prepare_parties(
        dataset if dataset is not None else load_diabetes_dataset(),
        root,
        num_blocks=num_blocks,
        p_miss_train=[0.0] * num_blocks,
        p_miss_test=[0.0] * num_blocks,
        test_fraction=0.2,
        seed=0,
    )
    return [load_party_dir(p) for p in paths]


@pytest.fixture(scope="module")
def diabetes(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    return prepared(tmp_path_factory.mktemp("diabetes"))


def make_parties(datas: list[PartyData]) -> dict[int, Party]:
    return {d.meta.block: Party(f"p{d.meta.block}", d, CONFIG, secret=SECRET) for d in datas}


def align(parties: dict[int, Party], split: str = "train") -> Alignment:
    return Alignment.build({b: p.id_hashes(split) for b, p in parties.items()})


def embed(parties: dict[int, Party], al: Alignment, index: np.ndarray, split: str, round_id: int):
    digest = al.digest(index)
    return {
        b: p.embed(EmbedCall(round_id, split, al.rows_of(b, index), digest, split == "train"))
        for b, p in parties.items()
    }


# ---------------------------------------------------------------- data: the task in meta.json


def test_given_diabetes_when_prepared_then_regression_parties_with_float32_targets(
    diabetes: list[PartyData],
) -> None:
    data = load_diabetes_dataset()
    assert data.x.shape == (442, 10) and data.task == "regression" and data.num_classes == 1
    assert [d.meta.feature_shape for d in diabetes] == [(3,), (3,), (2,), (2,)]  # like credit
    for d in diabetes:
        assert d.meta.task == "regression" and d.meta.num_classes == 1
        labels = d.splits["train"].labels
        assert labels is not None and labels.dtype == np.float32
        assert labels.min() >= 25 and labels.max() <= 346  # original units on disk
    check_federation(diabetes)


def _party_dir(root: Path, dataset=None) -> Path:
    prepared(root, dataset, num_blocks=2)
    return root / "party0"


def test_given_integer_targets_for_regression_when_loading_then_error_names_the_file(
    tmp_path: Path,
) -> None:
    party = _party_dir(tmp_path)
    labels = party / "train" / "labels.npy"
    np.save(labels, np.load(labels).astype(np.int64))
    with pytest.raises(DataError, match=r"train/labels\.npy: dtype int64 is not a float type"):
        load_party_dir(party)
    np.save(labels, np.full(len(np.load(labels)), np.nan, np.float32))
    with pytest.raises(DataError, match=r"labels\.npy: NaN, Inf .* at row 0"):
        load_party_dir(party)


def test_given_float_labels_for_classification_when_loading_then_error(tmp_path: Path) -> None:
    party = _party_dir(tmp_path, load_digits_dataset())
    labels = party / "train" / "labels.npy"
    np.save(labels, np.load(labels).astype(np.float32))
    with pytest.raises(DataError, match=r"not an integer type .*task classification"):
        load_party_dir(party)


def test_given_meta_without_task_when_loading_then_classification(tmp_path: Path) -> None:
    party = _party_dir(tmp_path, load_digits_dataset())
    meta = json.loads((party / "meta.json").read_text())
    del meta["task"]  # a directory written before tasks existed
    (party / "meta.json").write_text(json.dumps(meta))
    assert load_party_dir(party).meta.task == "classification"


@pytest.mark.parametrize(
    ("task", "classes", "message"),
    [
        ("regression", 2, "num_classes must be 1 for a regression task"),
        ("classification", 1, "num_classes 1 is not valid for classification"),
        ("ranking", 1, "task: Input should be 'classification' or 'regression'"),
    ],
)
def test_given_task_and_classes_that_disagree_when_loading_then_error(
    tmp_path: Path, task: str, classes: int, message: str
) -> None:
    party = _party_dir(tmp_path)
    meta = json.loads((party / "meta.json").read_text())
    (party / "meta.json").write_text(json.dumps({**meta, "task": task, "num_classes": classes}))
    with pytest.raises(DataError, match=message):
        load_party_dir(party)


def test_given_regression_and_classification_parties_when_federated_then_refused(
    diabetes: list[PartyData],
) -> None:
    mixed_meta = diabetes[1].meta.model_copy(update={"task": "classification", "num_classes": 2})
    mixed = [diabetes[0], PartyData(mixed_meta, diabetes[1].splits)]
    with pytest.raises(DataError, match="parties disagree on task"):
        check_federation(mixed)

    class Infos:  # what the engine sees of registered parties
        def infos(self) -> dict[int, PartyInfo]:
            return {
                b: PartyInfo(f"p{b}", b, 2, "diabetes", (5,), n, True, task=t)
                for b, (t, n) in enumerate([("regression", 1), ("classification", 2)])
            }

    with pytest.raises(ConfigError, match="parties disagree on task"):
        Federation(Infos(), CONFIG)  # type: ignore[arg-type]
    registry = Registry(2)  # and the coordinator refuses the second registration
    first, second = Infos().infos().values()
    registry.register(first, "127.0.0.1:1")
    with pytest.raises(ConfigError, match="has task='classification' but party p0 has 'regr"):
        registry.register(second, "127.0.0.1:2")


def test_given_regression_when_balancing_classes_then_refused(diabetes: list[PartyData]) -> None:
    parties = make_parties(diabetes)
    with pytest.raises(ConfigError, match="not for a regression task"):
        Federation(InProcessTransport(parties), CONFIG.model_copy(update={"balance": "resample"}))


# ---------------------------------------------------------------- training: MSE in the LASER sum


def test_given_regression_round_when_fusing_then_loss_and_grads_are_the_weighted_mse_sum(
    diabetes: list[PartyData],
) -> None:
    parties = make_parties(diabetes)
    al = align(parties)
    index = np.arange(3, 3 + BATCH)
    emb = embed(parties, al, index, "train", 0)
    head = copy.deepcopy(parties[0].g)
    assert isinstance(head, nn.Linear) and head.out_features == 1  # one real-valued output
    result = parties[0].fuse(FuseCall(0, 0, {b: e for b, e in emb.items() if b != 0}))

    # By hand: standardised targets from party 0's own training labels, the same sampled tasks.
    labels = diabetes[0].splits["train"].labels
    mean, std = labels.astype(np.float64).mean(), labels.astype(np.float64).std()
    assert (parties[0].scaler.mean, parties[0].scaler.std) == pytest.approx((mean, std))
    target = torch.from_numpy((labels[al.rows_of(0, index)] - mean) / std).float()[:, None]
    tensors = {b: torch.from_numpy(e).requires_grad_(True) for b, e in emb.items()}
    tasks = sample_tasks(0, range(K), rng(CONFIG.seed, Stream.TASKS, 0, 0))
    expected = sum(w * torch.mean((head(fuse_mean(tensors, s)) - target) ** 2) for s, w in tasks)
    expected.backward()
    assert result.loss == pytest.approx(float(expected.detach()), rel=1e-5)
    for b in (1, 2, 3):
        np.testing.assert_allclose(result.grads[b], tensors[b].grad.numpy(), rtol=1e-4, atol=1e-7)


def test_given_mse_when_enumerating_task_outcomes_then_the_sampled_loss_is_unbiased() -> None:
    torch.manual_seed(0)
    head = nn.Linear(3, 1).double()
    embeddings = {b: torch.randn(5, 3, dtype=torch.float64) for b in range(K)}
    target = torch.randn(5, 1, dtype=torch.float64)
    loss = head_loss("regression")
    with torch.no_grad():
        expectation = sum(
            p * sampled_loss(head, embeddings, tasks, target, loss)
            for tasks, p in task_outcomes(2, range(K))
        )
        exact = full_loss(head, embeddings, 2, target, loss)
    assert float(expectation) == pytest.approx(float(exact), rel=1e-12)


def test_given_regression_party_when_predicting_then_values_in_original_units(
    diabetes: list[PartyData],
) -> None:
    parties = make_parties(diabetes)
    al = align(parties, "test")
    index = np.arange(10)
    emb = embed(parties, al, index, "test", 0)
    out = parties[1].predict(PredictCall(0, emb))
    head = parties[1].g
    assert head is not None
    with torch.no_grad():
        z = head(fuse_mean({b: torch.from_numpy(e) for b, e in emb.items()}, (0, 1, 2, 3)))
    scaler = parties[1].scaler
    assert out.shape == (10, 1) and out.dtype == np.float32
    np.testing.assert_allclose(out, z.numpy() * scaler.std + scaler.mean, rtol=1e-6)
    assert parties[1].class_weights("train") is None  # nothing to balance


# ---------------------------------------------------------------- scoring at the label party


def test_given_values_when_the_label_party_scores_then_sums_match_numpy(
    diabetes: list[PartyData],
) -> None:
    parties = make_parties(diabetes)
    al = align(parties, "test")
    index = np.arange(25)
    rows = al.rows_of(2, index)
    truth = diabetes[2].splits["test"].labels[rows].astype(np.float64)
    values = np.random.default_rng(1).normal(150, 40, size=25).astype(np.float32)
    call = ScoreCall("test", rows, al.digest(index), {}, {"2": values, FEDERATION: values + 1})
    out = parties[2].score(call)
    assert set(out.sums) == {"2", FEDERATION} and not out.confusion
    error = values.astype(np.float64) - truth
    np.testing.assert_allclose(
        out.sums["2"],
        [np.sum(error**2), np.sum(np.abs(error)), 25, truth.sum(), np.sum(truth**2)],
        rtol=1e-12,
    )
    with pytest.raises(ProtocolError, match="predicted classes sent for a regression task"):
        parties[2].score(ScoreCall("test", rows, al.digest(index), {"2": rows}))
    with pytest.raises(ProtocolError, match="wrong shape or are not finite"):
        parties[2].score(ScoreCall("test", rows, al.digest(index), {}, {"2": values[:3]}))


def test_given_binary_scores_when_scoring_then_histograms_and_bad_scores_refused() -> None:
    truth = np.array([0, 1, 1, 0, 1])
    predicted = np.array([0, 1, 0, 0, 1])
    scores = np.array([0.125, 0.875, 0.375, 0.0, 1.0], np.float32)  # exact in binary
    out = score_batch(
        "classification", 2, truth, ScoreCall("test", truth, b"", {"a": predicted}, {"a": scores})
    )
    hist = out.histograms["a"]
    assert hist.shape == (2, AUC_BINS) and hist.sum() == 5
    assert hist[0, 125] == 1 and hist[0, 0] == 1 and hist[1, 875] == 1 and hist[1, 375] == 1
    assert hist[1, 999] == 1  # a score of exactly 1 falls in the last bin
    for bad in (scores + 0.5, np.full(5, np.nan, np.float32)):
        with pytest.raises(ProtocolError, match="scores of 'a'"):
            score_batch(
                "classification", 2, truth, ScoreCall("t", truth, b"", {"a": predicted}, {"a": bad})
            )
    with pytest.raises(ProtocolError, match="scores of 'a' have the wrong shape"):
        score_batch(  # a task of three classes is scored on all three probabilities
            "classification", 3, truth, ScoreCall("t", truth, b"", {"a": predicted}, {"a": scores})
        )


def test_given_three_class_probabilities_when_scoring_then_brier_sums_and_bad_ones_refused() -> (
    None
):
    truth = np.array([0, 2, 1])
    probs = np.array([[0.5, 0.25, 0.25], [0.0, 0.0, 1.0], [0.75, 0.25, 0.0]], np.float32)
    call = ScoreCall("t", truth, b"", {"a": probs.argmax(axis=1)}, {"a": probs})
    out = score_batch("classification", 3, truth, call)
    # per sample: 0.25 + 0.0625 + 0.0625, 0, 0.5625 + 0.5625 (Brier 1950's sum over classes)
    per_sample = np.array([0.375, 0.0, 1.125])
    np.testing.assert_allclose(out.brier["a"], [per_sample.sum(), np.sum(per_sample**2)])
    assert not out.histograms and out.confusion["a"].sum() == 3
    for bad in (probs[:, :2], probs + 0.5, np.full((3, 3), np.nan, np.float32)):
        with pytest.raises(ProtocolError, match="scores of 'a'"):
            score_batch("classification", 3, truth, replace(call, scores={"a": bad}))


def test_given_aggregates_of_the_wrong_kind_or_shape_when_checked_then_they_do_not_fit() -> None:
    eye, hist, sums = np.eye(2, dtype=np.int64), np.zeros((2, AUC_BINS), np.int64), np.zeros(5)
    eye3, two = np.eye(3, dtype=np.int64), np.zeros(2)
    names = {"0", FEDERATION}
    good = ScoreResult(confusion={"0": eye, FEDERATION: eye}, histograms={"0": hist})
    assert result_fits(good, "classification", 2, names)
    assert result_fits(ScoreResult(sums={"0": sums, FEDERATION: sums}), "regression", 1, names)
    for bad, task, classes in [
        (ScoreResult(confusion={"0": eye}), "classification", 2),  # a name missing
        (
            ScoreResult(confusion={"0": eye, FEDERATION: np.eye(3, dtype=np.int64)}),
            "classification",
            2,
        ),
        (
            ScoreResult(confusion={"0": eye, FEDERATION: eye}, histograms={"0": hist[:, :10]}),
            "classification",
            2,
        ),
        (
            ScoreResult(confusion={"0": eye, FEDERATION: eye}, histograms={"0": hist}),
            "classification",
            3,
        ),
        (ScoreResult(confusion={"0": eye, FEDERATION: eye}), "regression", 1),
        (ScoreResult(confusion={"0": eye}, sums={FEDERATION: sums}), "regression", 1),
        # Brier sums: (2,), for more than two classes only
        (
            ScoreResult(confusion={"0": eye3, FEDERATION: eye3}, brier={"0": sums}),
            "classification",
            3,
        ),
        (ScoreResult(confusion={"0": eye, FEDERATION: eye}, brier={"0": two}), "classification", 2),
        (ScoreResult(sums={"0": sums, FEDERATION: sums}, brier={"0": two}), "regression", 1),
    ]:
        assert not result_fits(bad, task, classes, names), bad
    three = ScoreResult(confusion={"0": eye3, FEDERATION: eye3}, brier={"0": two})
    assert result_fits(three, "classification", 3, names)


# ---------------------------------------------------------------- metrics from sums and histograms


def test_given_regression_sums_when_reporting_then_rmse_mae_r2_equal_numpy() -> None:
    gen = np.random.default_rng(7)
    report = EvalReport()
    per_pattern: dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    for pattern, heads, batches in [((0, 1), ("0", "1"), 3), ((1,), ("1",), 2)]:
        for _ in range(batches):
            y = gen.normal(100, 30, size=int(gen.integers(5, 20)))
            preds = {h: y + gen.normal(0, 10, size=len(y)) for h in heads}
            fed = np.mean([preds[h] for h in heads], axis=0)
            named = {**preds, FEDERATION: fed}
            report.add(
                pattern,
                len(y),
                ScoreResult(sums={n: regression_sums(y, v) for n, v in named.items()}),
            )
            sq = np.mean([(preds[h] - y) ** 2 for h in heads], axis=0)  # per sample
            ab = np.mean([np.abs(preds[h] - y) for h in heads], axis=0)
            per_pattern.setdefault(pattern, []).append((y, np.stack([sq, ab]), fed))
    rows = {r.observed: r for r in report.rows()}
    assert list(rows) == ["0,1", "1", "all"]
    for name, parts in [
        ("0,1", per_pattern[(0, 1)]),
        ("1", per_pattern[(1,)]),
        ("all", per_pattern[(0, 1)] + per_pattern[(1,)]),
    ]:
        y = np.concatenate([p[0] for p in parts])
        errors = np.concatenate([p[1] for p in parts], axis=1)
        fed = np.concatenate([p[2] for p in parts])
        row = rows[name]
        assert row.samples == len(y)
        assert row.rmse == pytest.approx(np.sqrt(errors[0].mean()), rel=1e-12)
        assert row.mae == pytest.approx(errors[1].mean(), rel=1e-12)
        assert row.r2 == pytest.approx(1 - errors[0].mean() / y.var(), rel=1e-9)
        assert row.federation_rmse == pytest.approx(np.sqrt(np.mean((fed - y) ** 2)), rel=1e-12)
        assert row.accuracy is None and row.f1 is None and row.auc is None
    as_json = report.to_json()["rows"][-1]
    assert set(as_json) == {"observed", "samples", "rmse", "mae", "r2", "federation_rmse"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_given_random_scores_when_computing_auc_from_histograms_then_matches_sklearn(
    seed: int,
) -> None:
    gen = np.random.default_rng(seed)
    n = 5000
    truth = gen.integers(0, 2, size=n)
    # Overlapping class distributions, one of them squeezed near 0 (many samples per bin).
    scores = np.clip(gen.beta(2 + 2 * truth, 5, size=n) ** (1 + seed), 0, 1).astype(np.float32)
    total = np.zeros((2, AUC_BINS), np.int64)
    for part in np.array_split(np.arange(n), 7):  # summed across batches, as the coordinator does
        total += auc_histogram(truth[part], scores[part])
    assert auc_from_histogram(total) == pytest.approx(roc_auc_score(truth, scores), abs=1e-3)


def test_given_ties_or_one_class_when_computing_auc_then_half_or_undefined() -> None:
    truth = np.array([0, 1, 0, 1])
    assert auc_from_histogram(auc_histogram(truth, np.full(4, 0.3))) == 0.5
    assert auc_from_histogram(auc_histogram(np.ones(4, np.int64), np.linspace(0, 1, 4))) is None
    perfect = auc_histogram(truth, np.array([0.1, 0.9, 0.2, 0.8]))
    assert auc_from_histogram(perfect) == 1.0


def test_given_binary_histograms_when_reporting_then_auc_per_predictor_averaged() -> None:
    gen = np.random.default_rng(3)
    truth = gen.integers(0, 2, size=400)
    score_a, score_b = gen.random(400), np.clip(truth * 0.3 + gen.random(400) * 0.7, 0, 1)
    confusion = np.zeros((2, 2), np.int64)
    report = EvalReport()
    for part in np.array_split(np.arange(400), 4):
        t = truth[part]
        report.add(
            (0, 1),
            len(part),
            ScoreResult(
                confusion={"0": confusion, "1": confusion},
                histograms={
                    "0": auc_histogram(t, score_a[part]),
                    "1": auc_histogram(t, score_b[part]),
                },
            ),
        )
    expected = (roc_auc_score(truth, score_a) + roc_auc_score(truth, score_b)) / 2
    assert report.overall().auc == pytest.approx(expected, abs=1e-3)
    table = format_table(report.rows()).splitlines()
    assert table[0].split()[-2:] == ["ROC", "AUC"]
    assert table[-1].split()[-1] == f"{report.overall().auc:.4f}"


def test_given_regression_rows_when_formatting_then_error_columns_only() -> None:
    report = EvalReport()
    y = np.array([1.0, 2.0, 4.0])
    report.add(
        (0,),
        3,
        ScoreResult(sums={"0": regression_sums(y, y + 1), FEDERATION: regression_sums(y, y + 1)}),
    )
    lines = format_table(report.rows(), title="test").splitlines()
    assert lines[1].split() == [
        "observed",
        "blocks",
        "samples",
        "RMSE",
        "MAE",
        "R^2",
        "fed.",
        "RMSE",
    ]
    assert lines[-1].split() == ["all", "3", "1", "1", f"{1 - 1 / y.var():.4g}", "1"]
    assert len({len(line) for line in lines[1:]}) == 1


# ---------------------------------------------------------------- the federation's answer


def test_given_regression_heads_when_combining_then_the_ensemble_and_laser_average() -> None:
    values = {
        0: np.array([[1.0], [2.0]], np.float32),
        1: np.array([[3.0], [6.0]], np.float32),
        3: np.array([[5.0], [1.0]], np.float32),
    }
    gen = np.random.default_rng(0)
    ensemble = combine(method_spec("ensemble").combination, (0, 1, 3), values, gen, regression=True)
    assert ensemble is not None
    np.testing.assert_allclose(ensemble.predicted, [3.0, 3.0])
    assert list(ensemble.scored) == ["ensemble"] and not ensemble.scores
    np.testing.assert_allclose(ensemble.scored["ensemble"], [3.0, 3.0])
    laser = combine(method_spec("laser").combination, (0, 1, 3), values, gen, regression=True)
    assert laser is not None and sorted(laser.scored) == ["0", "1", "3"]
    np.testing.assert_allclose(laser.scored["1"], [3.0, 6.0])
    np.testing.assert_allclose(laser.federation, [[3.0], [3.0]])


def test_given_binary_heads_when_combining_then_positive_class_scores_travel() -> None:
    probs = {
        0: np.array([[0.8, 0.2], [0.3, 0.7]], np.float32),
        2: np.array([[0.4, 0.6], [0.1, 0.9]], np.float32),
    }
    gen = np.random.default_rng(0)
    laser = combine(method_spec("laser").combination, (0, 2), probs, gen)
    assert laser is not None
    np.testing.assert_allclose(laser.scores["0"], [0.2, 0.7])
    np.testing.assert_allclose(laser.scores["2"], [0.6, 0.9])
    vote = combine(method_spec("ensemble").combination, (0, 2), probs, gen)
    assert vote is not None and set(vote.scores) == {"ensemble"}
    np.testing.assert_allclose(vote.scores["ensemble"], [0.5, 1.0])  # the positive vote share


# ---------------------------------------------------------------- the wire


def _wire(msg):
    return type(msg).FromString(msg.SerializeToString())


def test_given_scores_and_aggregates_when_sent_then_they_round_trip() -> None:
    hdr = convert.header("run", "p0")
    rows = np.arange(4, dtype=np.int64)
    scores = {"0": np.array([0.1, 0.2, 0.3, 1.0], np.float32)}
    call = ScoreCall("test", rows, b"d", {"0": np.array([0, 0, 1, 1])}, scores)
    back = convert.score_call_from_proto(_wire(convert.score_call_to_proto(call, hdr)))
    np.testing.assert_array_equal(back.scores["0"], scores["0"])
    result = ScoreResult(
        histograms={"0": np.arange(2 * AUC_BINS, dtype=np.int64).reshape(2, AUC_BINS)},
        sums={FEDERATION: np.array([4.0, 2.0, 3.0, -1.5, 9.0])},
    )
    out = convert.score_reply_from_proto(_wire(convert.score_reply_to_proto(result)))
    np.testing.assert_array_equal(out.histograms["0"], result.histograms["0"])
    np.testing.assert_array_equal(out.sums[FEDERATION], result.sums[FEDERATION])
    assert out.names() == {"0", FEDERATION}


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (ScoreResult(sums={"x": np.array([-1.0, 0, 1, 0, 0])}), "negative sum"),
        (ScoreResult(sums={"x": np.zeros(4)}), r"shape \(4,\) does not match"),
        (ScoreResult(sums={"x": np.array([np.inf, 0, 1, 0, 0])}), "NaN or Inf|non-finite"),
        (ScoreResult(histograms={"x": np.zeros((3, 10), np.int64)}), "not \\(2, bins\\)"),
        (ScoreResult(histograms={"x": -np.ones((2, 10), np.int64)}), "negative count"),
    ],
)
def test_given_bad_aggregates_from_a_party_when_decoded_then_refused(
    result: ScoreResult, message: str
) -> None:
    with pytest.raises(ProtocolError, match=message):
        convert.score_reply_from_proto(_wire(convert.score_reply_to_proto(result)))


def test_given_task_in_party_info_when_sent_then_it_round_trips_and_is_checked() -> None:
    info = PartyInfo("p0", 0, 4, "diabetes", (3,), 1, True, {"train": 5}, task="regression")
    assert convert.party_info_from_proto(_wire(convert.party_info_to_proto(info))) == info
    msg = convert.party_info_to_proto(info)
    msg.task = ""  # a party of before tasks existed
    assert convert.party_info_from_proto(msg).task == "classification"
    msg.task = "ranking"
    with pytest.raises(ProtocolError, match="unknown task 'ranking'"):
        convert.party_info_from_proto(msg)


def test_given_regression_rows_and_predictions_when_sent_then_only_their_metrics_travel() -> None:
    report = EvalReport()
    y = np.array([1.0, 2.0, 4.0])
    report.add((0,), 3, ScoreResult(sums={"0": regression_sums(y, y + 2)}))
    reply = _wire(convert.eval_report_to_proto(report.rows(), 0, [0], 0.1))
    assert not reply.rows[0].HasField("accuracy") and reply.rows[0].HasField("rmse")
    assert convert.eval_rows_from_proto(reply) == report.rows()
    p = SamplePrediction(
        b"h", (0,), {0: np.array([3.5], np.float32)}, np.array([3.5], np.float32), -1, 3.5
    )
    assert (
        convert.prediction_from_proto(_wire(convert.prediction_to_proto(p))).predicted_value == 3.5
    )
