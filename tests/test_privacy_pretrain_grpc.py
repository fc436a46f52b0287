"""`withhold` with `--privacy-feature-pretrain denoise` over real processes (issue 44): a
coordinator and three vfl-client processes (labels at the bank) train; each feature-only party
trained its tower on its own rows in its own process, exactly as the in-process party does from
the same seed, and the federation never moved it (nothing label-derived reached it), while the
label party trained."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from harness import SECRET, Cluster
from tabular_tables import BLOCKS, bank_client_args, bank_sources, write_tables

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import load_table_federation
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_core.training.party import Party

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 240.0
ARGS = [
    "--privacy-gradient-defence",
    "withhold",
    "--privacy-feature-pretrain",
    "denoise",
    "--privacy-pretrain-epochs",
    "3",
    "--early-stop-patience",
    "0",
]


def _tower(party: Party) -> np.ndarray:
    return np.concatenate([p.detach().numpy().ravel() for p in party.f.parameters()])


def test_given_feature_pretrain_over_grpc_when_trained_then_feature_towers_stay_as_pretrained(
    cluster: Cluster, tmp_path: Path
) -> None:
    paths = write_tables(tmp_path / "tables", n=600, share=0.85)
    ckpt = tmp_path / "checkpoints"
    coord, clients = cluster.federation(
        [paths[name] for name in BLOCKS],
        epochs=2,
        extra=ARGS,
        client_extra=lambda d: [*bank_client_args(d), "--checkpoint-dir", str(ckpt)],
    )
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(60) == 0, cluster.describe()
    results = coord.results()
    assert results is not None and results["status"] == "ok"
    train = TrainConfig.model_validate(json.loads((coord.out / "config.json").read_text())["train"])
    assert train.privacy.feature_pretrain == "denoise" and train.privacy.pretrain_epochs == 3
    drawn_config = train.model_copy(
        update={"privacy": train.privacy.model_copy(update={"feature_pretrain": "none"})}
    )
    for data in load_table_federation(bank_sources(paths)):
        block = data.meta.block
        saved = load_checkpoint(ckpt / f"party{block}.pt", train.model_dump_json())
        after = Party(f"party{block}", data, train, secret=SECRET.encode())
        fresh = _tower(after)  # what this party holds before any round, built here
        drawn = _tower(Party(f"party{block}", data, drawn_config, secret=SECRET.encode()))
        after.load_state_dict(saved["state"])
        if data.meta.has_labels:  # the bank trains its own tower on its labels
            assert not np.array_equal(_tower(after), fresh), block
            np.testing.assert_array_equal(fresh, drawn)  # and pretrains nothing
        else:  # pretrained in its own process as here, then never stepped
            np.testing.assert_array_equal(_tower(after), fresh)
            assert not np.array_equal(fresh, drawn), block
