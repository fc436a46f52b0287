"""The tabular defaults over real processes (issue 27): three parties from their own CSV files
(labels at the bank, partial overlap) train with every default, so early stopping is on; the
validation split chooses the subsets and the decision threshold; the coordinator's test table
and `vfl predict` use them, bit for bit as the in-process federation does with the same seed.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from bank_runs import EPOCHS, bank_run, in_process_twin
from harness import SECRET, Coordinator
from tabular_tables import (
    bank_sources,
)
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.auto_rounds import AUTO_STALENESS
from vfl_core.config import AUTO_ROUNDS_PER_EPOCH, AUTO_STALE_PATIENCE, DEFAULT_BATCH
from vfl_core.data.tabular import load_table_federation
from vfl_core.training.engine import Federation


def _predict(address: str, ids: list[str], out: Path) -> dict[str, dict[str, str]]:
    args = ["predict", "--coordinator", address, "--secret", SECRET, "--insecure"]
    result = CliRunner().invoke(app, [*args, "--ids", ",".join(ids), "--out", str(out)])
    assert result.exit_code == 0, result.output
    with out.open() as f:
        return {row["id"]: row for row in csv.DictReader(f)}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("defaults")

    def predict(coord: Coordinator, paths: dict[str, Path]) -> dict[str, object]:
        data = load_table_federation(bank_sources(paths))
        test_ids = sorted(data[0].splits["test"].ids.tolist())[:40]  # the bank's test customers
        return {"predicted": _predict(coord.address, test_ids, root / "predictions.csv")}

    return bank_run(root, during=predict)


@pytest.fixture(scope="module")
def in_process(run: dict) -> Federation:
    """The same federation in one process, with the coordinator's TrainConfig."""
    return in_process_twin(run["paths"], run["train"])


@pytest.mark.slow
def test_given_csv_tables_and_every_default_when_trained_over_grpc_then_early_stopping_is_on(
    run: dict,
) -> None:
    results, train = run["results"], run["train"]
    assert results is not None and results["status"] == "ok"
    assert train.early_stop_patience is None and train.threshold == "auto"  # the defaults
    stop = results["early_stop"]
    # the tables' default rounds (vfl_core.auto_rounds), whose early stopping waits longer
    assert train.staleness == AUTO_STALENESS and train.overlap_validation
    # ... with the blocks running on and, one label party, its own tower exact (resolved by
    # the coordinator; the in-process run below, given them, matches it bit for bit)
    assert train.epoch_flow and train.fresh_own_tower
    assert stop is not None and stop["patience"] == AUTO_STALE_PATIENCE
    assert stop["metric"] == "brier"
    assert stop["validation_samples"] > 0
    assert len(results["epochs"]) == len(stop["history"]) <= EPOCHS
    choice = results["validation_choice"]
    assert choice["threshold"] is not None and 0 < choice["threshold"] < 1
    assert choice["candidates"], "no observed set had the samples to choose a subset"


@pytest.mark.slow
def test_given_the_same_seed_when_trained_in_process_then_the_same_choice_and_test_table(
    run: dict, in_process: Federation
) -> None:
    results = run["results"]
    assert in_process.early_stop is not None
    assert results["early_stop"] == json.loads(json.dumps(in_process.early_stop.to_json()))
    assert results["validation_choice"] == json.loads(json.dumps(in_process.choice.to_json()))
    assert results["test"] == json.loads(json.dumps(in_process.evaluate("test").to_json()))


@pytest.mark.slow
def test_given_batch_auto_when_trained_over_grpc_then_both_cut_the_same_rounds(
    run: dict, in_process: Federation
) -> None:
    """The "auto" batch is resolved by the coordinator from the samples the plan holds: the
    table rule (not the 64 of images) and the same size, epochs and rounds in both transports."""
    assert run["train"].batch_size == "auto"
    training = in_process._training
    assert training is not None
    size = in_process.train_rows.batch_size()
    assert size == max(DEFAULT_BATCH, -(-len(training) // AUTO_ROUNDS_PER_EPOCH)) > DEFAULT_BATCH
    epochs = run["results"]["epochs"]
    assert [e["rounds"] for e in epochs] == [s.rounds for s in in_process.cursor.summaries]
    trained = [s.trained_rounds for s in in_process.cursor.summaries]
    assert [e["trained_rounds"] for e in epochs] == trained and all(trained)


@pytest.mark.slow
def test_given_a_chosen_threshold_when_predicting_over_grpc_then_it_decides_as_in_process(
    run: dict, in_process: Federation
) -> None:
    """`vfl predict` through the coordinator: each customer's class and its probability are the
    in-process federation's, and the class is the threshold's decision."""
    threshold = in_process.threshold
    assert threshold is not None
    bank = in_process.transport.infos()[0]
    assert bank.has_labels
    party = in_process.transport.parties[0]  # type: ignore[attr-defined]
    by_hash = dict(
        zip(party.id_hashes("test"), party.data.splits["test"].ids.tolist(), strict=True)
    )
    al = in_process.alignments["test"]
    expected = {}
    for pred in in_process.predict_batches("test"):
        for sample in pred.samples(al.keys):
            if sample.id_hash in by_hash and sample.federation is not None:
                expected[by_hash[sample.id_hash]] = sample
    assert run["predicted"], "vfl predict answered nothing"
    for sample_id, row in run["predicted"].items():
        want = expected[sample_id]
        assert int(row["predicted_class"]) == want.predicted_class, sample_id
        assert want.predicted_class == int(want.federation[1] >= threshold)
        assert row["confidence"] == f"{want.federation[want.predicted_class]:.4f}", sample_id
