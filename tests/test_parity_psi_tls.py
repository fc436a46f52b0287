"""`vfl simulate` and a real federation with every default (PSI alignment, mutual TLS) on the
same three CSV files train bit-identically (DESIGN.md invariant 1; issue 48). Before, PSI over
gRPC ordered the samples by the parties' rows and `vfl simulate`'s keyed hashes by hash value:
another batch plan and validation split, so another run (54 epochs against 34 on a user's
tables). The parties' files hold partly overlapping customers in row orders of their own."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import BIN, Cluster, assert_checkpoints_match
from tabular_tables import BLOCKS, ID_COLUMN, LABEL_COLUMN, bank_client_args, write_tables
from typer.testing import CliRunner

from vfl_cli.app import app
from vfl_core.auto_rounds import AUTO_STALENESS
from vfl_core.config import AUTO_STALE_PATIENCE, TrainConfig
from vfl_core.simulate import SimulationConfig, run_simulation

pytestmark = [pytest.mark.slow]

RUN_TIMEOUT_S = 240.0
EPOCHS = 3  # the ceiling: enough for a validation record, a threshold and a subset choice


def _certs(root: Path) -> Path:
    certs = root / "certs"
    parties = ",".join(f"party{b}" for b in sorted(BLOCKS.values()))
    argv = [str(BIN / "vfl"), "certs", "--out", str(certs), "--parties", parties]
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return certs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    root = tmp_path_factory.mktemp("parity")
    # 2000 customers, each party holding 85%: over 100 validation samples, so early stopping
    # is on by default (AUTO_MIN_VALIDATION)
    paths = write_tables(root / "tables", n=2000, share=0.85)
    files = [paths[name] for name in BLOCKS]
    ckpt = root / "ckpt"
    with Cluster(root / "cluster", tls_dir=_certs(root)) as cluster:
        coord, clients = cluster.federation(
            files,
            epochs=EPOCHS,
            alignment="psi",  # the default (the harness says it on every command line)
            client_extra=lambda p: [*bank_client_args(p), "--checkpoint-dir", str(ckpt)],
        )
        assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
        for client in clients:
            assert client.wait(30) == 0, cluster.describe()
        grpc = coord.results()
        config = json.loads((coord.out / "config.json").read_text())
    sim_dir = root / "simulate"
    args = ["simulate", *(a for f in files for a in ("--data", str(f)))]
    args += ["--id-column", ID_COLUMN, "--label-column", LABEL_COLUMN, "--epochs", str(EPOCHS)]
    result = CliRunner().invoke(app, [*args, "--run-dir", str(sim_dir), "--out", str(root / "s")])
    assert result.exit_code == 0, result.output
    yield {
        "grpc": grpc,
        "grpc_train": TrainConfig.model_validate(config["train"]),
        "simulate": json.loads((sim_dir / "results.json").read_text()),
        "simulate_config": SimulationConfig.model_validate(
            json.loads((root / "s").read_text())["config"]
        ),
        "ckpt": ckpt,
    }


def _without_times(epochs: list[dict]) -> list[dict]:
    # wall and process CPU time differ between processes; everything else is the same
    return [{k: v for k, v in e.items() if k not in ("seconds", "cpu_seconds")} for e in epochs]


def test_given_the_defaults_when_simulated_and_run_over_psi_and_tls_then_the_same_run(
    runs: dict,
) -> None:
    grpc, sim = runs["grpc"], runs["simulate"]
    assert grpc is not None and grpc["status"] == "ok"
    train = runs["grpc_train"]
    assert train.early_stop_patience is None and train.threshold == "auto"  # the defaults
    # `vfl simulate` fills in the same defaults as the coordinator, but the data plane: the
    # coordinator's record holds the plane it chose for `auto`; in process nobody relays
    assert runs["simulate_config"].train == train.model_copy(update={"data_plane": "auto"})
    assert train.staleness == AUTO_STALENESS  # the tables' default rounds (vfl_core.auto_rounds)
    stop = grpc["early_stop"]
    assert stop is not None and stop["patience"] == AUTO_STALE_PATIENCE
    assert stop["validation_samples"]
    assert grpc["validation_choice"]["threshold"] is not None
    assert sim["early_stop"] == stop  # epochs, validation samples, every epoch's score
    assert sim["validation_choice"] == grpc["validation_choice"]  # threshold, chosen subsets
    assert _without_times(sim["epochs"]) == _without_times(grpc["epochs"])  # losses, rounds
    assert sim["test"] == grpc["test"]


def test_given_the_defaults_when_simulated_then_every_partys_weights_are_the_clients(
    runs: dict,
) -> None:
    result = run_simulation(runs["simulate_config"])
    assert result.early_stop == runs["grpc"]["early_stop"]
    assert_checkpoints_match(runs["ckpt"], result.parties, runs["grpc_train"])
