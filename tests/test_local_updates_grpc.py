"""Local updates (--local-steps) over real processes: the gRPC federation takes the same local
steps as the in-process one, bit for bit (per-round losses, every party's weights and optimiser
state, the test metrics). Digits, K = 4, every party holding labels: each party has a head, its
own gradient and the other heads' (the richest path of vfl_core.methods.laser.local_steps)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from harness import Cluster, train_in_process

from vfl_core.config import TrainConfig
from vfl_core.persistence.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow

EPOCHS = 1
STEPS = 2
RUN_TIMEOUT_S = 180.0


def _assert_same(got: object, want: object, where: str) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and torch.equal(got, want), where
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), where
        for key in want:
            _assert_same(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list | tuple):
        assert isinstance(got, list | tuple) and len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def test_given_local_steps_when_trained_over_grpc_then_as_in_process_bit_for_bit(
    cluster: Cluster, party_dirs: list[Path], tmp_path: Path
) -> None:
    ckpt = tmp_path / "checkpoints"
    coord, clients = cluster.federation(
        party_dirs,
        epochs=EPOCHS,
        extra=["--local-steps", str(STEPS)],
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt)],
    )
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(30) == 0, cluster.describe()
    config = json.loads((coord.out / "config.json").read_text())
    train = TrainConfig.model_validate(config["train"])
    assert train.local_steps == STEPS  # the run record holds it; the parties trained with it
    parties, records, report = train_in_process(party_dirs, train)

    rounds = coord.rounds()
    assert len(rounds) == len(records) > 0
    for got, want in zip(rounds, records, strict=True):
        assert got == json.loads(json.dumps(want.to_json())), f"round {want.round_id}"
    for block, party in parties.items():
        saved = load_checkpoint(ckpt / f"party{block}.pt", train.model_dump_json())
        _assert_same(saved["state"], party.state_dict(), f"party{block}")
    results = coord.results()
    assert results is not None
    assert results["test"]["rows"] == json.loads(json.dumps(report.to_json()))["rows"]
