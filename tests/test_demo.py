"""`vfl demo --method`: the main job with a baseline in place of LASER-VFL, and the summary it
prints about the killed party (which must not claim prediction carried on when it did not)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from vfl_cli.coordinator_client import CoordinatorClient
from vfl_cli.demo_cmd import Joins, kill_outcome
from vfl_coordinator.registry import Registry
from vfl_coordinator.servicer import CoordinatorServicer, CoordinatorState
from vfl_core.config import TrainConfig
from vfl_core.methods.registry import METHODS
from vfl_core.protocol import PROTOCOL_VERSION
from vfl_wire import convert
from vfl_wire.channels import bind, make_channel, make_server
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

BIN = Path(sys.executable).parent
CARRIED_ON = "prediction carried on without it"


@pytest.mark.parametrize("method", [m for m in METHODS if m != "svfl"])
def test_given_a_method_that_uses_any_observed_set_when_a_party_dies_then_it_carries_on(
    method: str,
) -> None:
    assert kill_outcome(method, clients=4, dead=2) == CARRIED_ON


def test_given_standard_vfl_when_a_party_dies_then_the_summary_says_it_guesses() -> None:
    text = kill_outcome("svfl", clients=4, dead=2)
    assert text.startswith("Standard VFL cannot predict without every block")
    assert "random guesses" in text


def test_given_an_unknown_method_when_the_demo_starts_then_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [str(BIN / "vfl"), "demo", "--method", "nope", "--workdir", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --method must be one of " + ", ".join(METHODS) + ", got 'nope'"
    ]
    assert not (tmp_path / "w").exists()  # refused before anything was prepared or started


@pytest.mark.slow  # the demo kills a client after training: no fault against the clock
def test_given_svfl_when_the_demo_kills_a_client_then_its_samples_are_guessed_not_predicted(
    tmp_path: Path,
) -> None:
    """Real processes: the coordinator trains standard VFL; after the SIGKILL every test sample
    lacks block 2, so standard VFL has no predictor and its accuracy falls to chance level."""
    work = tmp_path / "demo"
    args = [str(BIN / "vfl"), "demo", "--workdir", str(work), "--epochs", "10", "--method", "svfl"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "training Standard VFL for 10 epochs over gRPC" in done.stdout
    summary = next(line for line in done.stdout.splitlines() if line.startswith("accuracy with"))
    assert "Standard VFL cannot predict without every block" in summary
    assert CARRIED_ON not in done.stdout
    results = json.loads((work / "run" / "results.json").read_text())
    assert results["config"]["train"]["method"] == "svfl"
    found = re.search(r"all parties ([\d.]+)%; after killing client2 ([\d.]+)%", summary)
    assert found, summary
    before, after = float(found[1]), float(found[2])
    assert before > 50  # all blocks present: standard VFL predicts the fully observed samples
    assert after < 30  # ten digit classes: random guesses score about 10%
    leftovers = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True)
    assert leftovers.stdout.strip() == "", leftovers.stdout


# ------------------------------------------------------------------- joins, from Status
def _register(stub: vfl_pb2_grpc.CoordinatorStub, block: int, address: str) -> None:
    info = vfl_pb2.PartyInfoMsg(
        party_id=f"party{block}", block=block, num_blocks=2, dataset="digits",
        feature_shape=[1, 8, 4], num_classes=10, has_labels=True, samples={"train": 10},
        protocol_version=PROTOCOL_VERSION,
    )  # fmt: skip
    header = convert.header("", f"party{block}")
    stub.Register(vfl_pb2.RegisterRequest(header=header, info=info, address=address), timeout=10)


def test_given_a_restarted_party_when_it_registers_then_the_demo_sees_it_join_by_status() -> None:
    """The demo's Joins asks the real coordinator servicer's Status RPC (no client log): a block
    has joined once a process registered for it after the newest one was started."""
    state = CoordinatorState(Registry(2), "run", TrainConfig().model_dump_json())
    server = make_server(4)
    vfl_pb2_grpc.add_CoordinatorServicer_to_server(CoordinatorServicer(state), server)
    address = f"127.0.0.1:{bind(server, '127.0.0.1:0')}"
    server.start()
    try:
        with CoordinatorClient(address, timeout=10.0) as coord:
            stub = vfl_pb2_grpc.CoordinatorStub(make_channel(address))
            joins = Joins(coord)
            joins.starting(0)
            joins.starting(1)
            assert not joins.joined(0)
            _register(stub, 0, "127.0.0.1:1000")
            _register(stub, 1, "127.0.0.1:1001")
            assert joins.joined(0) and joins.joined(1)
            joins.starting(0)  # block 0's process was killed and a new one started
            assert not joins.joined(0) and joins.joined(1)
            assert not joins.joined(0)  # asked again: still only the old process's registration
            _register(stub, 0, "127.0.0.1:2000")  # the new process
            assert joins.joined(0)
    finally:
        server.stop(0).wait()


def test_given_no_coordinator_listening_when_asked_then_no_block_has_joined() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    with CoordinatorClient(address, timeout=2.0) as coord:
        joins = Joins(coord)
        joins.starting(0)
        assert not joins.joined(0)
