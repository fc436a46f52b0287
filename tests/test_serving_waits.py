"""Issue 33 item 1, while the coordinator serves: `vfl evaluate` and `vfl predict` treat "no
label party answers" as training does: they wait for a rejoin (within the rejoin timeout and
the caller's deadline), answer with the parties that came back, or fail with one line and a
non-zero exit; never an empty or cut-short table as if it were the federation's."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from harness import BIN, Cluster, prepare_digits

# The calls that no party answers wait out the configured rejoin timeout and run on a worker.
# `alone`: the parties' return, where the evaluation waits for a label party by the clock.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_parties(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)


def _serving(cluster: Cluster, parties: list[Path], ckpt: Path, rejoin_s: float):
    coord, clients = cluster.federation(
        parties,
        epochs=1,
        serve=True,
        extra=[
            *("--rejoin-timeout", str(rejoin_s)),
            *("--checkpoint-dir", str(ckpt / "coordinator"), "--checkpoint-every", "20"),
        ],
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt / d.name)],
    )
    cluster.wait_serving(coord, 150)
    for client in clients:
        client.signal(signal.SIGKILL)
        client.wait(10)
    return coord, clients


def test_given_every_party_killed_while_serving_when_none_returns_then_calls_fail(
    tmp_path: Path, two_parties: list[Path]
) -> None:
    with Cluster(tmp_path / "cluster") as cluster:
        # 1 s: the wait is what the message names, and each call waits it out in full
        coord, _ = _serving(cluster, two_parties, tmp_path / "ckpt", rejoin_s=1)
        for command in ("evaluate", "predict"):
            argv = [str(BIN / "vfl"), command, "--coordinator", coord.address, "--insecure"]
            if command == "predict":
                argv += ["--out", str(tmp_path / "preds.csv")]
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
            assert done.returncode == 2, done.stdout + done.stderr
            assert "no label party answered within 1s" in done.stderr, done.stderr
        assert "trying again" in coord.log()
        assert coord.alive()


@pytest.mark.alone
def test_given_every_party_killed_while_serving_when_they_return_then_evaluate_answers(
    tmp_path: Path, two_parties: list[Path]
) -> None:
    with Cluster(tmp_path / "cluster") as cluster:
        coord, clients = _serving(cluster, two_parties, tmp_path / "ckpt", rejoin_s=60)
        argv = [str(BIN / "vfl"), "evaluate", "--coordinator", coord.address, "--insecure"]
        evaluating = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        time.sleep(1.0)  # the evaluation is waiting for a label party
        # Every party holds labels here: the first one back is enough, and the evaluation
        # answers with it, then; once the other is back too, with both.
        first, second = clients
        cluster.restart(second)
        out, err = evaluating.communicate(timeout=120)
        assert evaluating.returncode == 0, out + err
        assert "live blocks: 1;" in out, out
        cluster.restart(first)

        def both_back() -> str | None:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stdout + done.stderr
            return done.stdout if "live blocks: 0,1;" in done.stdout else None

        cluster.wait_for(both_back, 60, "an evaluation answered by both parties")
