"""Missing parties on the direct data plane (issue 43 item 2), with real processes over mutual
TLS: digits in three blocks, labels at block 0 only, so blocks 1 and 2 are feature parties that
send their embeddings to the label party and get its gradients back without the coordinator.

A feature party SIGSTOPped mid-round is timed out: the label party fuses without its embedding
at the wait's end, the rounds go on without it (told at once that it is absent: it costs one
wait, not one per round), it is marked down, and once SIGCONTed it trains again. A feature
party SIGKILLed mid-training is left out at once: the coordinator's Round calls to it fail, and
it tells the label party, whose waits for the dead party end there (not at their deadline);
restarted, it restores its checkpoint, registers again and trains again, its
embeddings reaching the label party at its new address.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import BIN, Client, Cluster, Coordinator

from vfl_cli.certs_cmd import create_federation

# Each fault lands at a round count and the tests wait for rounds (generous timeouts), so they
# run on a worker, not `alone`.
pytestmark = pytest.mark.slow

K = 3
DEADLINE_S = 2.0
RUN_TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("direct-digits")
    argv = [str(BIN / "vfl"), "prepare", "--out", str(out), "--dataset", "digits"]
    argv += ["--clients", str(K), "--p-miss", "0.1", "--seed", "0", "--label-blocks", "0"]
    subprocess.run(argv, check=True, capture_output=True, timeout=300)
    return [out / f"party{k}" for k in range(K)]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("direct-fault-certs") / "certs"
    create_federation(root, [f"party{k}" for k in range(K)], [])
    return root


@pytest.fixture
def cluster(tmp_path: Path, certs: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster", tls_dir=certs) as c:
        yield c


def _start(
    cluster: Cluster, dirs: list[Path], ckpt: Path, epochs: int
) -> tuple[Coordinator, list[Client]]:
    return cluster.federation(
        dirs,
        epochs=epochs,
        deadline=DEADLINE_S,
        extra=[
            *("--data-plane", "direct", "--retry-every", "5", "--checkpoint-every", "40"),
            *("--early-stop-patience", "0"),  # every epoch runs
            *("--checkpoint-dir", str(ckpt / "coordinator")),
        ],
        client_extra=lambda d: ["--checkpoint-dir", str(ckpt / d.name)],
    )


def _transitions(coord: Coordinator, block: int) -> list[tuple[str, str]]:
    results = coord.results()
    assert results is not None
    return [(t["old"], t["new"]) for t in results["transitions"] if t["block"] == block]


def _assert_every_round_once(coord: Coordinator) -> list[dict]:
    rounds = coord.rounds()
    assert [r["round"] for r in rounds] == list(range(len(rounds)))
    return rounds


def test_given_a_feature_party_frozen_mid_round_when_timed_out_then_rounds_go_on_and_it_rejoins(
    cluster: Cluster, dirs: list[Path], tmp_path: Path
) -> None:
    frozen = 2
    coord, clients = _start(cluster, dirs, tmp_path / "ckpt", epochs=6)
    victim = next(c for c in clients if c.block == frozen)
    cluster.wait_rounds(coord, 5, RUN_TIMEOUT_S)
    victim.signal(signal.SIGSTOP)
    stopped_at = len(coord.rounds())

    def down_and_on() -> list[dict] | None:
        later = coord.rounds()[stopped_at + 2 :]  # (the rounds in flight at the freeze)
        without = [r for r in later if frozen in r["pattern"] and frozen not in r["present"]]
        trained = [r for r in without if r["losses"] and r["updated"]]
        return later if len(trained) >= 2 and len(later) >= 4 else None

    frozen_rounds = cluster.wait_for(down_and_on, 120, "rounds trained without the frozen party")
    victim.signal(signal.SIGCONT)
    resumed_at = len(coord.rounds())

    def trained_again() -> dict | None:
        later = coord.rounds()[resumed_at:]
        return next((r for r in later if frozen in r["updated"]), None)

    back = cluster.wait_for(trained_again, 120, "a round the thawed party trained in")
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients:
        assert client.wait(60) == 0, cluster.describe()

    assert all(frozen not in r["present"] for r in frozen_rounds)
    assert frozen in back["present"] and "0" in back["losses"]
    _assert_every_round_once(coord)
    transitions = _transitions(coord, frozen)
    assert transitions[:2] == [("up", "down"), ("down", "up")], transitions
    # The frozen party cost the label party at most one wait to its deadline (two when it froze
    # between a round's push and the next one's; none when the notice came first), not one per
    # round until it was marked down and one per retry: once silent, the later rounds were told
    # at once that it was absent.
    head = next(c for c in clients if c.block == 0).log()
    timeouts = re.findall(rf"round \d+: no embedding from block {frozen} \(not within", head)
    assert len(timeouts) <= 2, timeouts
    coord_log = coord.log_path.read_text()
    assert re.search(rf"round \d+: block {frozen} is silent; later rounds go on", coord_log)
    assert re.search(rf"block\(s\) \[{frozen}\] absent \(silent since round \d+\)", coord_log)
    assert re.search(rf"block {frozen} answers again \(silent since round \d+\)", coord_log)


def test_given_a_feature_party_killed_mid_round_when_restarted_then_it_rejoins(
    cluster: Cluster, dirs: list[Path], tmp_path: Path
) -> None:
    dead = 1
    # Enough rounds for a restart: rounds without a dead party take no longer than with it
    # (its peers are told it is absent), so a short run ends before the new process is up.
    coord, clients = _start(cluster, dirs, tmp_path / "ckpt", epochs=80)
    victim = next(c for c in clients if c.block == dead)
    cluster.wait_rounds(coord, 50, RUN_TIMEOUT_S)  # past the first checkpoint (round 40)
    victim.signal(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    killed_at = len(coord.rounds())

    def without() -> dict | None:
        later = coord.rounds()[killed_at + 2 :]
        missed = (r for r in later if dead in r["pattern"] and dead not in r["present"])
        return next((r for r in missed if r["losses"]), None)

    cluster.wait_for(without, 60, "a round trained without the killed party")
    restarted = cluster.restart(victim)
    restarted.port()
    up_at = len(coord.rounds())

    def trained_again() -> dict | None:
        later = coord.rounds()[up_at:]
        return next((r for r in later if dead in r["updated"]), None)

    back = cluster.wait_for(trained_again, 120, "a round the restarted party trained in")
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    assert restarted.wait(60) == 0, cluster.describe()

    assert dead in back["present"] and "0" in back["losses"]
    assert "restored its checkpoint of round" in restarted.log()
    # The coordinator's Round calls to the dead party failed at once; it told the label party,
    # whose waits for the dead party's embeddings ended there, not at their deadline; and the
    # label party's pushes to the dead party failed fast and were logged.
    head = next(c for c in clients if c.block == 0).log()
    assert re.search(
        rf"block\(s\) \[{dead}\] absent \(its Round call failed: \w+\); told block\(s\) \[0\]",
        coord.log_path.read_text(),
    )
    assert re.search(rf"round \d+: no embedding from block {dead} \(absent\): left out", head)
    assert re.search(rf"gradient of round \d+ to block {dead}: UNAVAILABLE", head)
    _assert_every_round_once(coord)
    transitions = _transitions(coord, dead)
    # it came back through "rejoining"; under load its first rounds back may miss a deadline
    # and mark it down once more before it is up (rejoining -> down -> up)
    assert transitions[-1][1] == "up", transitions
    assert any(before == "rejoining" for before, _ in transitions), transitions
    results = coord.results()
    assert results is not None and results["test"]["rows"][-1]["accuracy"] > 0.5
