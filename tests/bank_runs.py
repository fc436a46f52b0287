"""The bank tables' federation over real processes, and its twin in one process: what the gRPC
tests that compare the two share (the defaults, the concatenating head, the linear lanes)."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import SECRET, Cluster, Coordinator
from tabular_tables import BLOCKS, bank_client_args, bank_sources, write_tables

from vfl_core.config import TrainConfig
from vfl_core.data.tabular import load_table_federation
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party

RUN_TIMEOUT_S = 240.0
EPOCHS = 6  # the ceiling; the default patience may stop before it


def bank_run(
    root: Path,
    extra: Sequence[str] = (),
    during: Callable[[Coordinator, dict[str, Path]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Three bank parties from their CSV files and a coordinator with `extra` options train
    and serve; `during(coordinator, paths)` runs while it serves. Every process ends cleanly.
    Returns the paths, the coordinator's results, its TrainConfig and what `during` returned."""
    paths = write_tables(root / "tables", n=2000, share=0.85)
    with Cluster(root / "cluster") as cluster:
        coord, clients = cluster.federation(
            [paths[name] for name in BLOCKS],
            epochs=EPOCHS,
            serve=True,
            extra=list(extra),
            client_extra=bank_client_args,
        )
        cluster.wait_serving(coord, RUN_TIMEOUT_S)
        more = during(coord, paths) if during is not None else {}
        results = coord.results()
        config = json.loads((coord.out / "config.json").read_text())
        coord.signal(signal.SIGTERM)
        assert coord.wait(30) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
    train = TrainConfig.model_validate(config["train"])
    return {"paths": paths, "results": results, "train": train, **more}


def in_process_twin(paths: dict[str, Path], train: TrainConfig) -> Federation:
    """The same federation in one process, with the coordinator's TrainConfig, trained."""
    data = load_table_federation(bank_sources(paths))
    parties = {
        d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET.encode()) for d in data
    }
    fed = Federation(InProcessTransport(parties), train, progress=False)
    fed.align()
    fed.train()
    return fed
