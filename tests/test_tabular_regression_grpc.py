"""Regression from two parties' own CSV files, over gRPC with real processes.

An owner holds two columns and the prices, an agent two more columns and a category; each holds
only part of the houses. Both declare `--task regression` (the agent needs no --num-classes);
they train, and `vfl predict` returns prices for houses that only the owner, or both, hold.
"""

from __future__ import annotations

import csv
import math
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from harness import SECRET, Cluster, Coordinator
from tabular_tables import HOUSE_ID, PRICE, write_linear_tables
from typer.testing import CliRunner, Result

from vfl_cli.app import app
from vfl_core.data.party_dir import PartyData
from vfl_core.data.preprocess import TabularPreprocessor
from vfl_core.data.tabular import TableSource, load_table_party
from vfl_wire import convert
from vfl_wire.v1 import vfl_pb2

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 120.0
BLOCKS = {"owner": 0, "agent": 1}
TRAINING = ["--lr", "3e-3", "--batch-size", "32", "--hidden", "32", "--embed-dim", "16"]


def _client_args(ckpt: Path) -> Callable[[Path], list[str]]:
    def extra(path: Path) -> list[str]:
        args = ["--id-column", HOUSE_ID, "--block", str(BLOCKS[path.stem]), "--clients", "2"]
        args += ["--task", "regression", "--checkpoint-dir", str(ckpt)]
        return [*args, "--label-column", PRICE] if path.stem == "owner" else args

    return extra


def _local_party(path: Path) -> PartyData:
    """What the client builds from the same file (the fit and the split are deterministic)."""
    label = PRICE if path.stem == "owner" else None
    source = TableSource(
        path=path,
        id_column=HOUSE_ID,
        label_column=label,
        block=BLOCKS[path.stem],
        num_blocks=2,
        task="regression",
    )
    return load_table_party(source)[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("tabular-regression")
    paths = write_linear_tables(root / "tables", n=400, share=0.8)
    ckpt = root / "checkpoints"
    with Cluster(root / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths["owner"], paths["agent"]],
            epochs=10,
            serve=True,
            extra=TRAINING,
            client_extra=_client_args(ckpt),
        )
        results = cluster.wait_for(coord.results, RUN_TIMEOUT_S, "results.json")
        cluster.wait_for(lambda: _serving(cluster, coord), RUN_TIMEOUT_S, "serving")
        predicted, label_names = _predict(coord, paths, ckpt, root)
        coord.signal(signal.SIGTERM)
        assert coord.wait(30) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
    yield {
        "paths": paths,
        "results": results,
        "predicted": predicted,
        "label_names": label_names,
        "ckpt": ckpt,
    }


def _serving(cluster: Cluster, coord: Coordinator) -> bool:
    if not coord.alive():
        raise AssertionError(f"coordinator exited\n{cluster.describe()}")
    request = vfl_pb2.StatusRequest(header=convert.header("", ""))
    return cluster.stub(coord).Status(request, timeout=10).state == "serving"


def _predict(
    coord: Coordinator, paths: dict[str, Path], ckpt: Path, root: Path
) -> tuple[dict[str, dict[str, str]], Result]:
    """`vfl predict` for every test house the owner holds; and --label-names (refused)."""
    owner_test = _local_party(paths["owner"]).splits["test"].ids.tolist()
    out = root / "predictions.csv"
    args = ["predict", "--coordinator", coord.address, "--secret", SECRET, "--insecure"]
    result = CliRunner().invoke(app, [*args, "--ids", ",".join(owner_test), "--out", str(out)])
    assert result.exit_code == 0, result.output
    with out.open() as f:
        rows = {row["id"]: row for row in csv.DictReader(f)}
    names = CliRunner().invoke(app, [*args, "--label-names", str(ckpt / "party0.preprocess.json")])
    return rows, names


def _test_split(paths: dict[str, Path]) -> tuple[dict[str, float], dict[str, set[int]], float]:
    """Each of the owner's test houses' price, the blocks that hold each test house, and the
    owner's training mean price."""
    owner = _local_party(paths["owner"])
    test, train = owner.splits["test"], owner.splits["train"]
    assert test.labels is not None and train.labels is not None
    prices = dict(zip(test.ids.tolist(), test.labels.tolist(), strict=True))
    holders: dict[str, set[int]] = {}
    for name, path in paths.items():
        for house in _local_party(path).splits["test"].ids.tolist():
            holders.setdefault(house, set()).add(BLOCKS[name])
    return prices, holders, float(train.labels.mean())


def test_given_csv_regression_parties_when_trained_then_rmse_beats_the_training_mean(
    run: dict,
) -> None:
    prices, _, mean = _test_split(run["paths"])
    baseline = math.sqrt(np.mean([(y - mean) ** 2 for y in prices.values()]))
    test = run["results"]["test"]
    overall = test["rows"][-1]
    assert overall["observed"] == "all" and overall["samples"] == len(prices)
    assert "accuracy" not in overall and math.isfinite(overall["rmse"])
    assert overall["rmse"] < 0.7 * baseline, (overall, baseline)
    assert test["unscored"] > 0  # houses only the agent holds: no label party to score them


def test_given_houses_held_by_some_parties_when_predicting_then_values_for_each(
    run: dict,
) -> None:
    prices, holders, mean = _test_split(run["paths"])
    predicted = run["predicted"]
    assert set(predicted) == set(prices)
    patterns = {frozenset(holders[house]) for house in prices}
    assert patterns == {frozenset({0}), frozenset({0, 1})}  # only some parties hold some
    errors, baseline = [], []
    for house, row in predicted.items():
        assert set(map(int, row["observed_blocks"].split("+"))) == holders[house], house
        value = float(row["predicted_value"])
        assert float(row["party0"]) == pytest.approx(value, rel=1e-4)  # the one label head
        assert "predicted_class" not in row
        errors.append(value - prices[house])
        baseline.append(mean - prices[house])
    rmse, mean_rmse = (float(np.sqrt(np.mean(np.square(e)))) for e in (errors, baseline))
    assert rmse < 0.7 * mean_rmse, (rmse, mean_rmse)  # prices in original units


def test_given_regression_fit_when_kept_then_task_recorded_and_label_names_refused(
    run: dict,
) -> None:
    kept = TabularPreprocessor.from_json(
        (run["ckpt"] / "party0.preprocess.json").read_text(), "kept"
    )
    assert kept.task == "regression" and kept.label_column == PRICE and kept.classes == ()
    agent = TabularPreprocessor.from_json(
        (run["ckpt"] / "party1.preprocess.json").read_text(), "kept"
    )
    assert agent.task == "regression" and agent.label_column is None
    names = run["label_names"]
    assert names.exit_code == 2 and "--label-names is for classification" in names.output
