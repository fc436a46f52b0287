"""Stop 41's chaos pass on the methods other than LASER-VFL (docs/fault-tolerance.md, "Stop 41,
DVFL and DLVM"), as real processes on digits in three parties.

DVFL: the label owner (block 0) frozen, then SIGKILLed, during its owner epochs and started again
with the same command. It rolls back to its checkpoint of the guest stage, which holds none of
the hosts' codes. Before the fix the coordinator still counted every transfer as delivered, so
the owner trained on no row for the rest of the run (loss 0.0 in every owner round) and the run
ended `ok` at chance (11.14 % against 69.08 % without the fault); now the next transfer sends
every host's codes again and the owner trains on them.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from harness import Cluster, prepare_digits

pytestmark = [pytest.mark.slow, pytest.mark.alone]  # a fault timed against training

GUEST_EPOCHS = 3
DVFL = ["--method", "dvfl", "--seed", "3", "--lr", "0.002", "--dvfl-owner-epochs", "30"]


@pytest.fixture(scope="module")
def parties(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return prepare_digits(tmp_path_factory.getbasetemp(), p_miss=0.1, seed=0, clients=3)


def test_given_dvfl_owner_restarted_in_owner_epochs_when_run_ends_then_it_trained_again(
    cluster: Cluster, parties: list[Path], tmp_path: Path
) -> None:
    ckpt = tmp_path / "ckpt"
    coord, clients = cluster.federation(
        parties,
        epochs=GUEST_EPOCHS,
        deadline=3.0,
        extra=[
            *DVFL,
            *("--checkpoint-dir", str(ckpt / "coordinator"), "--checkpoint-every", "50"),
            *("--rejoin-timeout", "60"),
        ],
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt / d.name)],
    )
    owner = clients[0]

    def in_owner_epochs() -> bool:
        rounds = coord.rounds()
        return bool(rounds) and rounds[-1]["epoch"] > GUEST_EPOCHS  # its first epoch is over

    cluster.wait_for(lambda: in_owner_epochs() or not coord.alive(), 120, "the owner's epochs")
    assert coord.alive(), cluster.describe()
    owner.signal(signal.SIGSTOP)  # stops the run's rounds at the owner's deadline
    killed_at = coord.rounds()[-1]["round"]
    owner.signal(signal.SIGKILL)
    owner.wait(10)
    restarted = cluster.restart(owner)
    assert coord.wait(180) == 0, cluster.describe()
    assert restarted.wait(60) == 0, cluster.describe()

    # it rolled back past the transfers, and was sent them again
    assert "restored its checkpoint of round 49" in restarted.log(), restarted.tail()
    assert "block 0 is back: the next transfer sends every host's codes again" in coord.log()
    # every owner round after its return trained on rows (a loss of 0.0: it trained on none)
    back = [r for r in coord.rounds() if r["round"] > killed_at and r["losses"]]
    assert back, "no owner round after the restart"
    assert all(loss > 0.0 for r in back for loss in r["losses"].values()), back
    results = coord.results()
    assert results is not None and results["status"] == "ok", results
    accuracy = results["test"]["rows"][-1]["accuracy"]
    assert accuracy > 0.4, results["test"]  # 66.30 % measured; before the fix 11.14 %
