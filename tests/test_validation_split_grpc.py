"""A stratified validation split (--validation-split stratified) over real processes: the
coordinator asks the bank (the label party) for its per-class draws (ClassWeightsRequest.purpose
"validation"), holds out the same samples as the in-process federation, and ends with the same
early stopping, validation choice and test table, bit for bit."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from harness import SECRET, Cluster
from tabular_tables import BLOCKS, bank_client_args, bank_sources, write_tables

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import load_table_federation
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

RUN_TIMEOUT_S = 240.0
EPOCHS = 4


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("stratified")
    paths = write_tables(root / "tables", n=2000, share=0.85)
    with Cluster(root / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths[name] for name in BLOCKS],
            epochs=EPOCHS,
            extra=["--validation-split", "stratified"],
            client_extra=bank_client_args,
        )
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        results = coord.results()
        config = json.loads((coord.out / "config.json").read_text())
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
    yield {"paths": paths, "results": results, "train": TrainConfig.model_validate(config["train"])}


@pytest.mark.slow
def test_given_stratified_when_trained_over_grpc_then_as_in_process(run: dict) -> None:
    results, train = run["results"], run["train"]
    assert results is not None and results["status"] == "ok"
    assert train.validation_split == "stratified"
    fed = in_process(run["paths"], train)
    random = in_process(run["paths"], train.model_copy(update={"validation_split": "random"}))
    assert random._validation is not None and fed._validation is not None
    assert len(random._validation) == len(fed._validation)
    assert sorted(random._validation) != sorted(fed._validation)  # another draw
    fed.train()
    assert fed.early_stop is not None
    assert results["early_stop"] == json.loads(json.dumps(fed.early_stop.to_json()))
    assert results["validation_choice"] == json.loads(json.dumps(fed.choice.to_json()))
    assert results["test"] == json.loads(json.dumps(fed.evaluate("test").to_json()))


def in_process(paths: dict, train: TrainConfig) -> Federation:
    data = load_table_federation(bank_sources(paths))
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET.encode()) for d in data
    }
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    return fed
