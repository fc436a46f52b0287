"""The towers' linear lanes (ModelConfig.linear_lane) over real processes: three parties from
their own CSV files train with the tables' defaults and `--linear-lane 4`; their embeddings are
the wider wire width, the label party trains the linear head beside the others, the pooled
validation choice scores it (PredictRequest.head "linear") and the three heads' blend
("blend"), and the coordinator's choice and test table are the in-process federation's, bit
for bit.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import pytest
from harness import SECRET, Cluster
from tabular_tables import BLOCKS, bank_client_args, bank_sources, write_tables

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import load_table_federation
from vfl_core.methods.spec import BLEND, LINEAR
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

RUN_TIMEOUT_S = 240.0
EPOCHS = 6  # the ceiling; the default patience may stop before it


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("linear-lane")
    paths = write_tables(root / "tables", n=2000, share=0.85)
    with Cluster(root / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths[name] for name in BLOCKS],
            epochs=EPOCHS,
            serve=True,
            extra=["--linear-lane", "4"],
            client_extra=bank_client_args,
        )
        cluster.wait_serving(coord, RUN_TIMEOUT_S)
        results = coord.results()
        config = json.loads((coord.out / "config.json").read_text())
        coord.signal(signal.SIGTERM)
        assert coord.wait(30) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
    yield {"paths": paths, "results": results, "train": TrainConfig.model_validate(config["train"])}


@pytest.mark.slow
def test_given_linear_lanes_when_trained_over_grpc_then_the_choice_and_test_are_in_process_ones(
    run: dict,
) -> None:
    results, train = run["results"], run["train"]
    assert results is not None and results["status"] == "ok"
    assert train.model.linear_lane == 4 and train.spec_for(tabular=True).linear_head
    choice = results["validation_choice"]
    assert [c.get("head", "") for c in choice["pooled"]] == ["", "concat", LINEAR, BLEND]
    data = load_table_federation(bank_sources(run["paths"]))
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET.encode()) for d in data
    }
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    fed.train()
    assert choice == json.loads(json.dumps(fed.choice.to_json()))
    assert results["test"] == json.loads(json.dumps(fed.evaluate("test").to_json()))
