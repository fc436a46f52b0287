"""Online serving decides as the federation's batch prediction does (issue 46): the decision
threshold and the subset of parties per observed set that the validation split chose travel in
the label party's bundle, and a real gateway (three `vfl-client --serve-bundle` processes)
answers every test row with the class and the parties `vfl predict` gives it."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from tabular_tables import LABEL_COLUMN, write_tables

from benchmarks.serve.cluster import SECRET, ServingCluster, train_bundles
from vfl_core.config import TrainConfig
from vfl_core.errors import DataError
from vfl_core.model.model_config import ModelConfig
from vfl_core.protocol import ServingChoice
from vfl_core.serving import predictions_with_rows
from vfl_core.serving.bundle import load_bundle
from vfl_core.training.alignment import hash_ids
from vfl_wire import convert

ID = "customer_id"
NAMES = ("party0", "party1", "party2")


def post(port: int, body: dict) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/predict", data=json.dumps(body).encode()
    )
    with urllib.request.urlopen(request, timeout=60) as reply:
        return json.loads(reply.read())


def test_given_a_serving_choice_when_sent_over_the_wire_then_it_round_trips() -> None:
    choice = ServingChoice(0.436, {(0, 1, 2): (0,), (0, 2): (0, 2)})
    back = convert.serving_choice_from_proto(convert.serving_choice_to_proto(choice))
    assert back == choice
    none = convert.serving_choice_from_proto(convert.serving_choice_to_proto(ServingChoice()))
    assert none.threshold is None and not none.subsets


@pytest.mark.slow
def test_given_a_validation_choice_when_served_online_then_every_test_row_matches_batch(
    tmp_path: Path,
) -> None:
    paths = write_tables(tmp_path / "data", n=1200, share=0.85)
    tables = [paths[name] for name in ("bank", "retail", "telecom")]
    # `best` and a large validation split: a threshold and a subset choice are both chosen
    config = TrainConfig(
        epochs=3,
        early_stop_patience=5,
        validation_fraction=0.3,
        subset_choice="best",
        concat_head=False,  # LASER-VFL's heads: the subsets they choose (the head: its own test)
        model=ModelConfig(embed_dim=8, hidden=(16,), linear_lane=0),
    )
    bundles, fed, _ = train_bundles(
        tables, tmp_path / "bundles", id_column=ID, label_column=LABEL_COLUMN, config=config
    )
    choice = fed.serving_choice()
    meta = load_bundle(bundles[0]).meta
    assert choice.threshold is not None and choice.threshold != 0.5
    assert meta.threshold == choice.threshold
    assert {r.observed: r.kept for r in meta.subsets} == {
        o: k for o, k in choice.subsets.items() if o != k
    }
    assert meta.subsets, "the test needs a subset choice that leaves a party out"

    samples, _ = predictions_with_rows(fed, "test", None)
    every_id = [f"C{i:05d}" for i in range(1200)]
    by_hash = dict(zip(hash_ids(every_id, SECRET.encode()), every_id, strict=True))
    batch = {by_hash[s.id_hash]: s for s in samples if s.predicted_class >= 0}
    ids = sorted(batch)
    with ServingCluster(tmp_path / "procs") as cluster:
        peers = []
        for k in (1, 2):
            proc = cluster.start_party(NAMES[k], bundles[k], tables[k], ID)
            peers.append(f"{k}=127.0.0.1:{proc.port}")
        extra = ["--deadline-ms", "5000"]
        gateway = cluster.start_gateway(NAMES[0], bundles[0], tables[0], ID, peers, extra)
        online = {}
        for at in range(0, len(ids), 200):
            body = post(gateway.http_port, {"ids": ids[at : at + 200], "deadline_ms": 5000})
            online |= {a["id"]: a for a in body["predictions"]}
    between = 0  # rows the threshold decides differently from the argmax
    for sample_id, want in batch.items():
        got = online[sample_id]
        assert got["predicted_class"] == want.predicted_class, (sample_id, got, want)
        assert got["parties"] == [f"party{b}" for b in want.observed], (sample_id, got, want)
        between += (
            min(choice.threshold, 0.5) <= got["probabilities"][1] < max(choice.threshold, 0.5)
        )
    assert len(batch) > 100 and between > 0


def test_given_a_results_file_when_reading_its_choice_then_the_federation_decision(
    tmp_path: Path,
) -> None:
    from vfl_core.inference.choice import ValidationChoice
    from vfl_core.serving.export import read_choice

    chosen = ValidationChoice(threshold=0.42, subsets={(0, 1, 2): (0, 2)}).to_json()
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"config": {"threshold": "auto"}, "validation_choice": chosen}))
    assert read_choice(results) == ServingChoice(0.42, {(0, 1, 2): (0, 2)})
    results.write_text(json.dumps({"config": {"threshold": 0.3}, "validation_choice": chosen}))
    assert read_choice(results).threshold == 0.3  # a configured number wins, as in training
    results.write_text("{}")
    with pytest.raises(DataError, match="not a run"):
        read_choice(results)
