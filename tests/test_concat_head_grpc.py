"""LASER-VFL with the concatenating head (TrainConfig.concat_head) over real processes: three
parties from their own CSV files train with it beside LASER-VFL's heads; the validation split
scores it as a candidate of each observed set holding the bank (PredictRequest.head on the wire),
and the coordinator's choice and test table are the in-process federation's, bit for bit.
"""

from __future__ import annotations

import json

import pytest
from bank_runs import bank_run, in_process_twin

from vfl_core.methods.spec import CONCAT


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    extra = ["--concat-head", "--concat-choice", "sets"]
    return bank_run(tmp_path_factory.mktemp("concat-head"), extra)


@pytest.mark.slow
def test_given_concat_head_when_trained_over_grpc_then_the_choice_and_test_are_in_process_ones(
    run: dict,
) -> None:
    results, train = run["results"], run["train"]
    assert results is not None and results["status"] == "ok"
    assert train.concat_head and train.spec.concat_head
    choice = results["validation_choice"]
    heads = {
        tuple(c["observed"]): [s.get("head", "") for s in c["scores"]] for c in choice["candidates"]
    }
    assert heads and all(h.count(CONCAT) == 1 for p, h in heads.items() if 0 in p)
    fed = in_process_twin(run["paths"], train)
    assert choice == json.loads(json.dumps(fed.choice.to_json()))
    assert results["test"] == json.loads(json.dumps(fed.evaluate("test").to_json()))
