"""Numeric embeddings and ensembles over real processes (issue 45): three parties from their own
CSV files, each fitting its embeddings' bins on its own training rows in its own process, train
with `--num-embedding ple --ensemble 2`; the coordinator's early stopping, validation choice and
test table are bit for bit those of the in-process federation with the same seed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bank_runs import in_process_twin
from harness import Cluster
from tabular_tables import BLOCKS, bank_client_args, write_tables

from vfl_core.config import TrainConfig

RUN_TIMEOUT_S = 240.0
OPTIONS = ["--num-embedding", "ple", "--ensemble", "2", "--early-stop-patience", "2"]


@pytest.mark.slow
def test_given_ple_and_an_ensemble_when_trained_over_grpc_then_equal_to_in_process(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path / "tables", n=1500, share=0.85)
    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths[name] for name in BLOCKS], epochs=4, extra=OPTIONS, client_extra=bank_client_args
        )
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
        results = coord.results()
        config = json.loads((coord.out / "config.json").read_text())
    train = TrainConfig.model_validate(config["train"])
    assert train.model.num_embedding == "ple" and train.model.ensemble == 2
    fed = in_process_twin(paths, train)
    assert results is not None and results["status"] == "ok"
    assert fed.early_stop is not None
    assert results["early_stop"] == json.loads(json.dumps(fed.early_stop.to_json()))
    assert results["validation_choice"] == json.loads(json.dumps(fed.choice.to_json()))
    assert results["test"] == json.loads(json.dumps(fed.evaluate("test").to_json()))
