"""Injected faults in a real federation: `vfl-coordinator --fault-rate R_d --rejoin-rate R_u
--link-loss p` fails parties and drops messages of real gRPC processes exactly as `vfl simulate`
does in one process (the same seeded draws), and reports what it injected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from harness import SECRET, Cluster, assert_checkpoints_match
from typer.testing import CliRunner

from vfl_cli.coordinator_cmd import coordinator
from vfl_core.config import TrainConfig
from vfl_core.simulate import SimulationConfig, run_simulation
from vfl_core.training.engine import RoundRecord
from vfl_core.training.faults import FaultConfig

FAULTS = FaultConfig(fail_rate=0.2, rejoin_rate=0.5, link_loss=0.05)
FAULT_ARGS = ["--fault-rate", "0.2", "--rejoin-rate", "0.5", "--link-loss", "0.05"]
RUN_TIMEOUT_S = 180.0


@pytest.mark.slow
def test_given_fault_options_when_real_federation_trains_then_same_faults_and_weights_as_simulation(
    cluster: Cluster, party_dirs: list[Path], tmp_path: Path
) -> None:
    ckpt = tmp_path / "checkpoints"
    coord, clients = cluster.federation(
        party_dirs,
        epochs=2,
        extra=FAULT_ARGS,
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt)],
    )
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(30) == 0, cluster.describe()
    results = coord.results()
    assert results is not None
    config = json.loads((coord.out / "config.json").read_text())
    assert FaultConfig.model_validate(config["faults"]) == FAULTS
    train = TrainConfig.model_validate(config["train"])

    rounds: list[RoundRecord] = []
    sim = run_simulation(
        SimulationConfig(party_dirs=tuple(party_dirs), secret=SECRET, train=train, faults=FAULTS),
        on_round=rounds.append,
    )

    # the same failures, comebacks and lost messages, and they really happened
    assert results["faults"] == sim.fault_counts
    assert results["faults"]["failures"] > 0 and results["faults"]["lost_calls"] > 0
    assert results["transition_counts"].get("up->down", 0) > 0  # the state machine saw them
    # the same training under them, bit for bit: every round's parties and losses, every epoch's
    # summary and every final weight (parties compute on one torch thread in both transports)
    logged = [json.loads(line) for line in (coord.out / "rounds.jsonl").read_text().splitlines()]
    assert logged == [r.to_json() for r in rounds]
    for got, want in zip(results["epochs"], sim.epochs, strict=True):
        assert got["incomplete_rounds"] == want.incomplete_rounds > 0
        assert got["mean_loss"] == want.mean_loss
        assert {int(k): v for k, v in got["head_losses"].items()} == want.head_losses
    assert_checkpoints_match(ckpt, sim.parties, train)
    # evaluation sees every party again (faults model training only)
    want_rows = sim.reports[None].to_json()["rows"]
    got_rows = results["test"]["rows"]
    assert [r["observed"] for r in got_rows] == [r["observed"] for r in want_rows]
    for g, w in zip(got_rows, want_rows, strict=True):
        assert g["accuracy"] == pytest.approx(w["accuracy"], abs=0.01), g["observed"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--fault-rate", "1.5"], "fail_rate"),
        (["--rejoin-rate", "-0.1"], "rejoin_rate"),
        (["--link-loss", "2"], "link_loss"),
    ],
)
def test_given_fault_rate_outside_0_1_when_coordinator_starts_then_exit_2_naming_it(
    args: list[str], named: str, tmp_path: Path
) -> None:
    app = typer.Typer()
    app.command()(coordinator)
    argv = ["--insecure", "--out", str(tmp_path / "out"), "--no-progress", *args]

    result = CliRunner().invoke(app, argv)

    assert result.exit_code == 2, result.output
    assert named in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()  # refused before anything was started or written
