"""The towers' linear lanes (ModelConfig.linear_lane) over real processes: three parties from
their own CSV files train with the tables' defaults and `--linear-lane 4`; their embeddings are
the wider wire width, the label party trains the linear head beside the others, the pooled
validation choice scores it (PredictRequest.head "linear") and the three heads' blend
("blend"), and the coordinator's choice and test table are the in-process federation's, bit
for bit.
"""

from __future__ import annotations

import json

import pytest
from bank_runs import bank_run, in_process_twin

from vfl_core.methods.spec import BLEND, LINEAR


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return bank_run(tmp_path_factory.mktemp("linear-lane"), ["--linear-lane", "4"])


@pytest.mark.slow
def test_given_linear_lanes_when_trained_over_grpc_then_the_choice_and_test_are_in_process_ones(
    run: dict,
) -> None:
    results, train = run["results"], run["train"]
    assert results is not None and results["status"] == "ok"
    assert train.model.linear_lane == 4 and train.spec_for(tabular=True).linear_head
    choice = results["validation_choice"]
    assert [c.get("head", "") for c in choice["pooled"]] == ["", "concat", LINEAR, BLEND]
    fed = in_process_twin(run["paths"], train)
    assert choice == json.loads(json.dumps(fed.choice.to_json()))
    assert results["test"] == json.loads(json.dumps(fed.evaluate("test").to_json()))
