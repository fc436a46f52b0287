"""Serving bundles carry the validation's choice of the concatenating head (concat_head): the
label party's bundle holds the head and the observed sets it predicts, the choice travels
with a finished run's Shutdown (ServingChoice.heads) and `vfl export --choice`, and online
predictions equal the federation's, set by set, whichever head predicts the set."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tabular_tables import LABEL_COLUMN, write_tables
from test_serving_bundle import SECRET, trained
from test_serving_decision import ID, post

from benchmarks.serve.cluster import SECRET as CLUSTER_SECRET
from benchmarks.serve.cluster import ServingCluster, train_bundles
from vfl_core.config import TrainConfig
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.inference.choice import ValidationChoice
from vfl_core.methods.spec import CONCAT
from vfl_core.model.model_config import ModelConfig
from vfl_core.protocol import ServingChoice
from vfl_core.serving.batch import predictions_with_rows
from vfl_core.serving.bundle import CONCAT_HEAD_FILE, load_bundle, write_bundle
from vfl_core.serving.export import read_choice
from vfl_core.serving.features import FeatureTable
from vfl_core.training.alignment import hash_ids
from vfl_wire import convert


@pytest.mark.parametrize("kw", [{"concat_head": True}, {}], ids=["concat-head", "defaults"])
def test_given_concat_chosen_for_a_set_when_bundles_predict_then_equal_the_federation(
    tmp_path: Path, kw: dict[str, object]
) -> None:
    """With --concat-head, and with the defaults (on tables they train the head too)."""
    tables = write_tables(tmp_path / "data", n=400, share=0.8)
    paths = [tables["bank"], tables["retail"], tables["telecom"]]
    fed, parties = trained(paths, "customer_id", LABEL_COLUMN, "classification", **kw)
    assert fed.spec.concat_head and parties[0].spec.concat_head
    # the choice as validation makes it, fixed here: the concatenating head for two sets
    chosen = {(0, 1, 2): CONCAT, (0, 1): CONCAT}
    fed.choice.subsets, fed.choice.heads = {}, dict(chosen)
    choice = fed.serving_choice()
    assert dict(choice.heads) == chosen
    bundles, lookups = {}, {}
    for block, party in parties.items():
        write_bundle(party, tmp_path / party.party_id, choice=choice)
        bundles[block] = load_bundle(tmp_path / party.party_id)
        lookups[block] = FeatureTable(
            paths[block], "customer_id", bundles[block].preprocessing, SECRET
        )
    assert bundles[0].meta.concat_sets == ((0, 1), (0, 1, 2))
    assert (tmp_path / "party0" / CONCAT_HEAD_FILE).is_file()
    assert not (tmp_path / "party1" / CONCAT_HEAD_FILE).exists()  # a feature party: no head
    samples, _ = predictions_with_rows(fed, "test", None)
    by_head: dict[str, int] = {"": 0, CONCAT: 0}
    for s in samples:
        if 0 not in s.party_probs:
            continue
        embeddings = {}
        for b in s.observed:
            sample_id = parties[b].split("test").ids[s.rows[b]]
            _, x = lookups[b].lookup(hash_ids([sample_id], SECRET))
            embeddings[b] = bundles[b].embed(x)
        head = bundles[0].head_for(tuple(s.observed))
        by_head[head] += 1
        got = bundles[0].predict(embeddings, head)[0]
        np.testing.assert_allclose(got, s.party_probs[0], atol=1e-5, rtol=0)
    assert by_head[CONCAT] > 20 and by_head[""] > 5  # both heads predicted some sets


def test_given_a_serving_choice_with_heads_when_on_the_wire_then_the_same() -> None:
    choice = ServingChoice(0.4, {(0, 1, 2): (0, 1)}, {(0, 2): CONCAT})
    again = convert.serving_choice_from_proto(convert.serving_choice_to_proto(choice))
    assert again == choice
    bad = convert.serving_choice_to_proto(ServingChoice(None, {}, {(0, 1): "mystery"}))
    with pytest.raises(ProtocolError, match="unknown head"):
        convert.serving_choice_from_proto(bad)


def test_given_concat_chosen_when_the_party_trained_none_then_the_bundle_is_refused(
    tmp_path: Path,
) -> None:
    tables = write_tables(tmp_path / "data", n=200, share=0.8)
    paths = [tables["bank"], tables["retail"]]
    _, parties = trained(paths, "customer_id", LABEL_COLUMN, "classification", concat_head=False)
    choice = ServingChoice(None, {}, {(0, 1): CONCAT})
    with pytest.raises(ConfigError, match="--concat-head"):
        write_bundle(parties[0], tmp_path / "b0", choice=choice)


def test_given_a_results_file_with_heads_when_reading_its_choice_then_they_are_kept(
    tmp_path: Path,
) -> None:
    chosen = ValidationChoice(threshold=0.42, heads={(0, 1, 2): CONCAT}).to_json()
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"config": {"threshold": "auto"}, "validation_choice": chosen}))
    assert read_choice(results) == ServingChoice(0.42, {}, {(0, 1, 2): CONCAT})


@pytest.mark.slow
def test_given_concat_chosen_when_served_online_then_every_test_row_matches_batch(
    tmp_path: Path,
) -> None:
    """A real gateway (three `vfl-client --serve-bundle` processes) predicts the sets chosen for
    the concatenating head with it, and the others with the mean-fusion head, as `vfl predict`.
    The defaults: on tables they train the concatenating head (TrainConfig.concat_head unset)."""
    paths = write_tables(tmp_path / "data", n=800, share=0.8)
    tables = [paths[name] for name in ("bank", "retail", "telecom")]
    config = TrainConfig(epochs=2, model=ModelConfig(embed_dim=8, hidden=(16,)))
    _, fed, parties = train_bundles(
        tables, tmp_path / "first", id_column=ID, label_column=LABEL_COLUMN, config=config
    )
    fed.choice.subsets, fed.choice.heads = {}, {(0, 1, 2): CONCAT}
    choice = fed.serving_choice()
    bundles = [
        write_bundle(p, tmp_path / "b" / p.party_id, choice=choice) for p in parties.values()
    ]
    samples, _ = predictions_with_rows(fed, "test", None)
    every_id = [f"C{i:05d}" for i in range(800)]
    by_hash = dict(zip(hash_ids(every_id, CLUSTER_SECRET.encode()), every_id, strict=True))
    batch = {by_hash[s.id_hash]: s for s in samples if 0 in s.party_probs}
    ids = sorted(batch)
    with ServingCluster(tmp_path / "procs") as cluster:
        peers = []
        for k in (1, 2):
            proc = cluster.start_party(f"party{k}", bundles[k], tables[k], ID)
            peers.append(f"{k}=127.0.0.1:{proc.port}")
        extra = ["--deadline-ms", "5000"]
        gateway = cluster.start_gateway("party0", bundles[0], tables[0], ID, peers, extra)
        online = {}
        for at in range(0, len(ids), 200):
            body = post(gateway.http_port, {"ids": ids[at : at + 200], "deadline_ms": 5000})
            online |= {a["id"]: a for a in body["predictions"]}
    full = 0
    for sample_id, want in batch.items():
        got = online[sample_id]
        assert got["parties"] == [f"party{b}" for b in want.observed], (sample_id, got)
        np.testing.assert_allclose(got["probabilities"], want.party_probs[0], atol=1e-5)
        full += tuple(want.observed) == (0, 1, 2)
    assert len(batch) > 100 and full > 50
