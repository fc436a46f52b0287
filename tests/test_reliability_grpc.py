"""Issue 14 with real processes (coordinator and clients over TCP): a federation that cannot be
fooled into a false success.

- item 3: every party killed at once pauses training (no round counted); the run fails loudly
  (exit code, results.json "failed") when nobody comes back, and resumes when a party does.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from harness import Cluster, prepare_digits

pytestmark = pytest.mark.slow

BATCH = ["--batch-size", "16"]  # ~95 rounds per epoch with two parties
DEADLINE_S = 2.0


@pytest.fixture(scope="module")
def two_parties(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=2)


# ------------------------------------------------------------------------------ item 3


def _kill_everyone_mid_training(cluster: Cluster, two_parties: list[Path], timeout: float):
    coord, clients = cluster.federation(
        two_parties,
        epochs=3,
        deadline=DEADLINE_S,
        extra=[*BATCH, "--rejoin-timeout", str(timeout)],
    )
    cluster.wait_rounds(coord, 20, 120)
    for client in clients:
        client.signal(signal.SIGKILL)
    for client in clients:
        client.wait(10)
    return coord, clients


def test_given_every_party_killed_when_nobody_comes_back_then_coordinator_fails_loudly(
    cluster: Cluster, two_parties: list[Path]
) -> None:
    coord, _ = _kill_everyone_mid_training(cluster, two_parties, timeout=3.0)

    rc = coord.wait(60)
    assert rc != 0, coord.tail()
    log = coord.log()
    assert "error: no label party came back within 3s" in log
    assert "training pauses until one comes back" in log
    results = coord.results()
    assert results is not None and results["status"] == "failed"
    assert "no label party came back" in results["error"]
    assert results["test"] is None  # no evaluation, no result
    assert [p["resumed"] for p in results["pauses"]] == [False]
    assert results["pauses"][0]["seconds"] >= 3.0
    rounds = coord.rounds()
    plan = 3 * 95
    assert len(rounds) == results["rounds"] < plan // 2  # the remaining epochs were not run
    empty = [r for r in rounds if not r["present"]]
    assert len(empty) < 6  # only the rounds that found them gone before they were marked down


def test_given_every_party_killed_when_one_restarts_then_training_resumes_uncounted(
    cluster: Cluster, two_parties: list[Path]
) -> None:
    coord, clients = _kill_everyone_mid_training(cluster, two_parties, timeout=90.0)
    cluster.wait_for(lambda: "training pauses" in coord.log(), 30, "the pause")
    cluster.restart(clients[0])

    assert coord.wait(150) == 0, cluster.describe()
    results = coord.results()
    assert results is not None and results["status"] == "ok"
    assert [p["resumed"] for p in results["pauses"]] == [True]
    rounds = coord.rounds()
    assert [r["round"] for r in rounds] == list(range(results["rounds"]))
    assert sum(e["rounds"] for e in results["epochs"]) == results["rounds"]
    # block 1 stays dead: its own batches run without it (incomplete, as before), but no batch
    # of block 0 went by while block 0 was gone, except those that found it gone
    assert len([r for r in rounds if not r["present"] and 0 in r["pattern"]]) < 6
    assert results["test"]["rows"][-1]["samples"] > 0
