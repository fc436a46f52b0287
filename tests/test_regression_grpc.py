"""Regression end to end with real processes: `vfl prepare --dataset diabetes` (scikit-learn's
diabetes data), a coordinator and four `vfl-client` processes over gRPC that train a few epochs,
evaluate (RMSE and MAE from the label parties' sums), and answer `vfl evaluate` and
`vfl predict` with values in the targets' original units."""

from __future__ import annotations

import csv
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
from harness import BIN, SECRET, Cluster
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_wire import convert
from vfl_wire.v1 import vfl_pb2

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 120.0
TRAINING = ["--lr", "3e-3", "--batch-size", "32", "--hidden", "32", "--embed-dim", "16"]


@pytest.fixture(scope="module")
def party_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("diabetes")
    argv = [str(BIN / "vfl"), "prepare", "--out", str(out), "--dataset", "diabetes"]
    argv += ["--clients", "4", "--p-miss", "0.1", "--seed", "0"]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return [out / f"party{k}" for k in range(4)]


def labels(party_dirs: list[Path], split: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for d in party_dirs:
        ids, y = np.load(d / split / "ids.npy"), np.load(d / split / "labels.npy")
        out.update(zip(ids.tolist(), y.tolist(), strict=True))
    return out


def test_given_diabetes_parties_as_processes_when_trained_then_rmse_beats_the_mean_predictor(
    cluster: Cluster, party_dirs: list[Path], tmp_path: Path
) -> None:
    test_labels = labels(party_dirs, "test")
    mean = float(np.mean(list(labels(party_dirs, "train").values())))
    baseline = math.sqrt(np.mean([(y - mean) ** 2 for y in test_labels.values()]))

    coord, _ = cluster.federation(party_dirs, epochs=8, serve=True, extra=TRAINING)
    results = cluster.wait_for(coord.results, RUN_TIMEOUT_S, "results.json")
    test = results["test"]
    overall = test["rows"][-1]
    assert overall["observed"] == "all" and overall["samples"] == len(test_labels)
    assert test["unscored"] == 0
    for row in test["rows"]:
        assert {"rmse", "mae", "federation_rmse"} <= set(row)  # r2: none for a lone sample
        assert "accuracy" not in row and "f1" not in row
        assert math.isfinite(row["rmse"]) and 0 < row["mae"] <= row["rmse"]
    assert overall["rmse"] < 0.85 * baseline, (overall, baseline)
    assert overall["r2"] > 0.25
    assert overall["federation_rmse"] < 0.85 * baseline
    # the coordinator's subsets carry the errors too (vfl report reads them; the report itself
    # is tested on a simulated run in test_regression_report.py)
    assert results["task"] == "regression"
    full = results["subsets"][0]
    assert full["blocks"] == [0, 1, 2, 3] and "accuracy" not in full
    assert full["rmse"] == pytest.approx(overall["rmse"], rel=1e-9)
    assert all("rmse" in s for s in results["subsets"] if s["samples"])

    # The same metrics through the coordinator's Evaluate service and `vfl evaluate`.
    stub = cluster.stub(coord)
    request = vfl_pb2.EvaluateRequest(header=convert.header("", ""), split="test")
    reply = stub.Evaluate(request, timeout=60)
    rows = convert.eval_rows_from_proto(reply)
    assert rows[-1].rmse == pytest.approx(overall["rmse"], rel=1e-9)
    assert rows[-1].accuracy is None
    runner = CliRunner()
    result = runner.invoke(app, ["evaluate", "--coordinator", coord.address, "--insecure"])
    assert result.exit_code == 0, result.output
    assert "RMSE" in result.output and "accuracy" not in result.output

    # `vfl predict`: values in original units (the targets run from 25 to 346).
    out = tmp_path / "predictions.csv"
    ids = sorted(test_labels)[:5]
    args = ["predict", "--coordinator", coord.address, "--secret", SECRET, "--insecure"]
    result = runner.invoke(app, [*args, "--ids", ",".join(ids), "--out", str(out)])
    assert result.exit_code == 0, result.output
    with out.open() as f:
        predicted = list(csv.DictReader(f))
    assert {r["id"] for r in predicted} == set(ids)
    assert all(0 < float(r["predicted_value"]) < 400 for r in predicted)
