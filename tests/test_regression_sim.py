"""Regression and ROC AUC end to end in one process: LASER-VFL (and every baseline) on
scikit-learn's diabetes data, and a binary task (scikit-learn's breast cancer data) whose reported
ROC AUC matches scikit-learn's on the same predictions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import roc_auc_score
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import Dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.methods.registry import METHODS
from vfl_core.simulate import SimulationConfig, SimulationResult, run_simulation
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

MODEL = ModelConfig(representation="mlp", embed_dim=16, hidden=(32,))


def diabetes_run(method: str, epochs: int, p_miss: float) -> SimulationResult:
    return run_simulation(
        SimulationConfig(
            dataset="diabetes",
            clients=4,
            p_miss_train=p_miss,
            p_miss_test=(p_miss,),
            train=TrainConfig(
                method=method, seed=0, epochs=epochs, batch_size=32, lr=3e-3, model=MODEL
            ),
        )
    )


def held_test_samples(result: SimulationResult) -> int:
    """Test samples some party holds (a sample no party holds is dropped by `vfl prepare`)."""
    return len({i for p in result.parties.values() for i in p.data.splits["test"].ids.tolist()})


def mean_predictor_rmse(result: SimulationResult) -> float:
    """RMSE on the test samples of always predicting the training-label mean (what a model
    that learned nothing would do)."""
    train: dict[str, float] = {}
    test: dict[str, float] = {}
    for party in result.parties.values():
        for split, into in (("train", train), ("test", test)):
            s = party.data.splits[split]
            assert s.labels is not None
            into.update(zip(s.ids.tolist(), s.labels.tolist(), strict=True))
    mean = np.mean(list(train.values()))
    return float(np.sqrt(np.mean((np.array(list(test.values())) - mean) ** 2)))


def test_given_diabetes_when_laser_trains_in_process_then_it_beats_the_mean_predictor() -> None:
    result = diabetes_run("laser", epochs=12, p_miss=0.1)
    report = result.reports[0.1]
    overall = report.overall()
    baseline = mean_predictor_rmse(result)
    assert report.unscored == 0 and overall.samples == held_test_samples(result)
    assert len(report.rows()) > 2  # some test samples miss blocks: rows per observed set
    assert overall.rmse is not None and overall.mae is not None and overall.r2 is not None
    assert overall.federation_rmse is not None
    # a clear margin: at least 15% below the mean predictor (R^2 about 0.3 or better)
    assert overall.rmse < 0.85 * baseline, (overall, baseline)
    assert overall.federation_rmse < 0.85 * baseline
    assert overall.mae < overall.rmse and overall.r2 > 0.25
    assert overall.accuracy is None and overall.auc is None


@pytest.mark.parametrize("method", [m for m in METHODS if m not in ("laser", "dlvm")])
def test_given_diabetes_when_a_baseline_trains_then_it_reports_finite_errors(method: str) -> None:
    result = diabetes_run(method, epochs=4, p_miss=0.3)
    report = result.reports[0.3]
    rows = report.rows()
    scored = rows[-1].samples
    assert scored + report.unscored == held_test_samples(result) and scored > 0
    for row in rows:
        assert row.rmse is not None and np.isfinite(row.rmse) and row.rmse > 0
        assert row.mae is not None and 0 < row.mae <= row.rmse
    if method == "svfl":  # an incomplete observed set: no prediction, reported as unscored
        assert report.unscored > 0 and [r.observed for r in rows] == ["0,1,2,3", "all"]
    elif method in ("plug", "zerofill", "stale"):  # no prediction without the active party (0)
        assert report.unscored > 0 and all("0" in r.observed for r in rows[:-1])
    else:
        assert report.unscored == 0


def breast_cancer() -> Dataset:
    data = load_breast_cancer()
    return Dataset(
        name="breast-cancer",
        kind="tabular",
        x=data.data.astype(np.float32),  # (569, 30)
        y=data.target.astype(np.int64),
        ids=np.array([f"bc-{i}" for i in range(len(data.target))]),
        num_classes=2,
    )


def test_given_a_binary_task_when_evaluated_then_roc_auc_matches_sklearn(tmp_path: Path) -> None:
    paths = prepare_parties(
        breast_cancer(),
        tmp_path,
        num_blocks=3,
        p_miss_train=[0.1] * 3,
        p_miss_test=[0.2] * 3,
        test_fraction=0.3,
        seed=0,
        label_blocks=[0, 2],  # party 1 is feature-only
    )
    config = TrainConfig(seed=0, epochs=3, batch_size=32, lr=3e-3, model=MODEL)
    parties = {
        k: Party(f"p{k}", load_party_dir(p), config, secret=b"auc") for k, p in enumerate(paths)
    }
    fed = Federation(InProcessTransport(parties), config, progress=False)
    fed.align()
    fed.train()
    report = fed.evaluate("test")

    # The same predictions, scored here with the labels: per head party, then averaged.
    al = fed.alignments["test"]
    scores: dict[int, list[tuple[int, float]]] = {0: [], 2: []}
    for batch in fed.predict_batches("test"):
        for k, probs in batch.party_probs.items():
            if (al.rows[k][batch.index] < 0).any():  # k served party 1's block alone: no label
                continue  # anywhere, so the federation leaves these samples unscored too
            rows = al.rows_of(k, batch.index)
            labels = parties[k].data.splits["test"].labels
            assert labels is not None
            scores[k] += zip(labels[rows].tolist(), probs[:, 1].tolist(), strict=True)
    expected = np.mean([roc_auc_score(*zip(*pairs, strict=True)) for pairs in scores.values()])
    overall = report.overall()
    assert overall.auc is not None and overall.auc == pytest.approx(expected, abs=1e-3)
    assert overall.auc > 0.9  # breast cancer is nearly separable
    assert overall.accuracy is not None and overall.f1 is not None and overall.rmse is None
    by_set = {row.observed: row for row in report.rows()}
    assert by_set["0,1,2"].auc is not None and by_set["0,1,2"].auc > 0.9


def test_given_diabetes_when_simulated_from_the_cli_then_table_and_json_show_errors(
    tmp_path: Path,
) -> None:
    out = tmp_path / "sim.json"
    args = ["simulate", "--dataset", "diabetes", "--epochs", "1", "--no-progress"]
    result = CliRunner().invoke(
        app, [*args, "--method", "svfl", "--p-miss", "0.3", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if line.startswith("observed"))
    assert header.split()[3:] == ["RMSE", "MAE", "R^2", "fed.", "RMSE"]
    assert "samples unscored" in result.output  # standard VFL cannot use incomplete sets
    rows = json.loads(out.read_text())["results"][0]["rows"]
    assert all("rmse" in row and "accuracy" not in row for row in rows)
