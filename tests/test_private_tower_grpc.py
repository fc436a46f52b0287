"""`--privacy-feature-tower orthogonal` over real processes (issue 44): a coordinator and three
vfl-client processes (labels at the bank); each feature-only party draws its orthogonal tower
from its own --private-tower-seed, which never reaches the coordinator, and keeps it unchanged
through training, while the label party trains."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from harness import SECRET, Cluster
from tabular_tables import BLOCKS, bank_client_args, bank_sources, write_tables

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import load_table_federation
from vfl_core.model.linear_lane import wire_width
from vfl_core.persistence.checkpoint import load_checkpoint
from vfl_core.privacy.private_tower import orthogonal_map
from vfl_core.serving.bundle import load_bundle
from vfl_core.serving.export import export_bundle
from vfl_core.training.party import Party

pytestmark = pytest.mark.slow

RUN_TIMEOUT_S = 240.0
ARGS = [
    "--privacy-gradient-defence",
    "withhold",
    "--privacy-feature-tower",
    "orthogonal",
    "--early-stop-patience",
    "0",
]
PRIVATE = {1: 86753090011, 2: 86753090022}  # each feature-only organisation's own


def test_given_orthogonal_towers_over_grpc_when_trained_then_each_is_its_private_map(
    cluster: Cluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = write_tables(tmp_path / "tables", n=600, share=0.85)
    ckpt = tmp_path / "checkpoints"

    def client_args(path: Path) -> list[str]:
        block = BLOCKS[path.stem]
        own = ["--private-tower-seed", str(PRIVATE[block])] if block in PRIVATE else []
        return [*bank_client_args(path), "--checkpoint-dir", str(ckpt), *own]

    coord, clients = cluster.federation(
        [paths[name] for name in BLOCKS], epochs=2, extra=ARGS, client_extra=client_args
    )
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(60) == 0, cluster.describe()
    results = coord.results()
    assert results is not None and results["status"] == "ok"
    config_text = (coord.out / "config.json").read_text()
    assert not any(str(seed) in config_text for seed in PRIVATE.values())  # never sent
    train = TrainConfig.model_validate(json.loads(config_text)["train"])
    assert train.privacy.feature_tower == "orthogonal"
    for data in load_table_federation(bank_sources(paths)):
        block = data.meta.block
        saved = load_checkpoint(ckpt / f"party{block}.pt", train.model_dump_json())
        party = Party(f"party{block}", data, train, secret=SECRET.encode())
        fresh = [p.detach().clone() for p in party.f.parameters()]
        party.load_state_dict(saved["state"])
        if block in PRIVATE:  # its own seed's map, as drawn, not the federation seed's
            width = int(np.prod(data.meta.feature_shape))
            dim = wire_width(train.model)  # the run's lanes too: its whole embedding
            assert torch.equal(party.f.weight, orthogonal_map(width, dim, PRIVATE[block], block))
            assert not torch.equal(party.f.weight, orthogonal_map(width, dim, train.seed, block))
            _assert_bundle_embeds_as_party(
                party, ckpt, bank_sources(paths)[block], tmp_path, caplog
            )
        else:  # the bank trains its own tower on its labels
            after = list(party.f.parameters())
            assert not all(torch.equal(a, b) for a, b in zip(after, fresh, strict=True))


def _assert_bundle_embeds_as_party(
    party: Party, ckpt: Path, source, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The serving bundle exported from the checkpoint carries the private map (exported
    without the private seed, and without the warning that the map is drawn from the run's)."""
    block = party.data.meta.block
    out = tmp_path / f"bundle{block}"
    caplog.clear()
    export_bundle(ckpt / f"party{block}.pt", source.path, out, table=source)
    assert "no private tower seed" not in caplog.text
    rows = torch.as_tensor(party.data.splits["train"].features[:64], dtype=torch.float32)
    with torch.no_grad():
        served = load_bundle(out).representation(rows)
        assert torch.allclose(served, party.f(rows), atol=1e-6)
