"""Checkpoints that belong to another run or configuration are refused at start, and kept.

Split from test_restarts.py: these refusals time nothing, so they run with the other tests
(test_restarts.py's fault tests run alone)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from harness import Cluster
from test_restarts import BATCH, EPOCHS, TRAIN_ARGS

from vfl_core.config import TrainConfig
from vfl_core.persistence.checkpoint_store import RoundCheckpoints

pytestmark = [pytest.mark.slow]


@pytest.mark.parametrize("other", ["run", "config"])
def test_given_checkpoint_of_another_run_or_config_when_coordinator_starts_then_refused(
    cluster: Cluster, tmp_path: Path, other: str
) -> None:
    ckpt = tmp_path / "ckpt" / "coordinator"
    run_id = f"run-{os.getpid()}-0" if other == "config" else "run-x"  # the harness's is the former
    lr = 0.5 if other == "config" else 1e-3
    # the harness runs the relay: only lr may differ from the coordinator's configuration
    config = TrainConfig(seed=0, epochs=EPOCHS, batch_size=BATCH, lr=lr, data_plane="relay")
    train = config.model_dump_json()
    RoundCheckpoints(ckpt, "coordinator").save(9, {}, train, {"run_id": run_id, "clients": 4})

    coord = cluster.coordinator(epochs=EPOCHS, extra=[*TRAIN_ARGS, "--checkpoint-dir", str(ckpt)])

    assert coord.wait(60) == 2, cluster.describe()
    errors = [line for line in coord.log().splitlines() if line.startswith("error:")]
    assert len(errors) == 1, coord.log()
    assert ("lr" if other == "config" else "run-x") in errors[0]
    assert not coord.port_file.exists()  # refused before serving


def test_given_client_checkpoint_of_another_run_when_client_starts_then_refused_and_kept(
    cluster: Cluster, party_dirs: list[Path], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt" / "party0"
    train = TrainConfig(seed=0, epochs=EPOCHS, batch_size=BATCH).model_dump_json()
    foreign = RoundCheckpoints(ckpt, "party0").save(49, {}, train, {"run_id": "run-other"})
    before = foreign.read_bytes()
    coord = cluster.coordinator(epochs=EPOCHS, extra=TRAIN_ARGS)
    client = cluster.client(coord, party_dirs[0], ["--checkpoint-dir", str(ckpt)])

    assert client.wait(60) == 2, cluster.describe()
    errors = [line for line in client.log().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "belongs to run 'run-other'" in errors[0], client.log()
    assert foreign.read_bytes() == before  # neither loaded nor deleted
    assert sorted(p.name for p in ckpt.iterdir()) == [foreign.name]  # nothing saved over it
