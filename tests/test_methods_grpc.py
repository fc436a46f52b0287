"""A non-default method end to end as real processes: a coordinator and four vfl-client processes
on 127.0.0.1 train the combinatorial baseline (2^K - 1 predictors, per-subset representation
slots on the wire) for two epochs, report test metrics, and match the in-process simulation of
the same method and seed round for round."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from harness import Cluster, train_in_process

from vfl_core.config import TrainConfig

pytestmark = pytest.mark.slow

METHOD = "combinatorial"
EPOCHS = 2
RUN_TIMEOUT_S = 300.0
# Small models keep the 2^K - 1 predictors cheap on a shared 2-core machine.
MODEL_ARGS = ["--hidden", "32", "--embed-dim", "8", "--batch-size", "128"]


def test_given_combinatorial_over_grpc_when_trained_then_it_reports_metrics_and_matches_simulation(
    tmp_path: Path, party_dirs: list[Path]
) -> None:
    with Cluster(tmp_path / "cluster") as cluster:
        extra = ["--method", METHOD, "--seed", "3", *MODEL_ARGS]
        coord, clients = cluster.federation(party_dirs, epochs=EPOCHS, deadline=60.0, extra=extra)
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(60) == 0, cluster.describe()
        results = coord.results()
        grpc_rounds = coord.rounds()
    assert results is not None
    train = TrainConfig.model_validate(json.loads((coord.out / "config.json").read_text())["train"])
    assert train.method == METHOD and train.seed == 3 and train.epochs == EPOCHS

    # it completed and reported metrics for the test set
    assert results["rounds"] == len(grpc_rounds) > 0
    assert [e["epoch"] for e in results["epochs"]] == list(range(EPOCHS))
    overall = results["test"]["rows"][-1]
    assert overall["observed"] == "all" and overall["samples"] > 0
    assert 0.0 < overall["accuracy"] <= 1.0
    assert any(len(r["present"]) == 4 and r["losses"] for r in grpc_rounds)

    # the same method and seed in one process: the same rounds, losses and metrics
    _, records, report = train_in_process(party_dirs, train)
    assert len(grpc_rounds) == len(records)
    for got, want in zip(grpc_rounds, records, strict=True):
        expected = want.to_json()
        got_losses, want_losses = got.pop("losses"), expected.pop("losses")
        assert got == expected, f"round {want.round_id} differs"
        assert got_losses == want_losses, f"round {want.round_id}"  # bit for bit
    want_rows = json.loads(json.dumps(report.to_json(), default=str))["rows"]
    got_rows = results["test"]["rows"]
    assert [(r["observed"], r["samples"]) for r in got_rows] == [
        (r["observed"], r["samples"]) for r in want_rows
    ]
    for g, w in zip(got_rows, want_rows, strict=True):
        assert g["accuracy"] == pytest.approx(w["accuracy"], abs=0.01), g["observed"]
