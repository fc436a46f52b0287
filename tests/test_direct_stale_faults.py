"""Real faults under the tables' default rounds (issue 43): staleness 3 and the late verdict on
the direct data plane, with real processes over mutual TLS, each party of its own CSV table
(labels at the bank, partial overlap).

tests/test_direct_faults.py kills and freezes parties of digits, whose rounds are exact; here the
rounds a fault lands in are stale ones in flight (a feature party's embeddings of up to four
rounds ahead of their gradients), as on the tables a team actually trains with the defaults:

- a feature party SIGKILLed mid-training and restarted with the same command is left out, the
  rounds go on without it, it restores its checkpoint and trains again; the run finishes and the
  model the coordinator serves predicts;
- the label party frozen briefly (shorter than the deadline), once mid-epoch and once as the
  first epoch ends (its validation sent beside the next epoch's first rounds): nobody is left
  out, every epoch is scored, and the best epoch's weights are what it keeps; then, in the same
  run, a feature party SIGSTOPped past the deadline is timed out and trains again once
  SIGCONTed; its late pushes do not crash anyone or mix rounds;
- a feature party's link cut and restored (network namespaces, root only): it stays alive and
  trains again.
"""

from __future__ import annotations

import csv
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from harness import BIN, SECRET, Client, Cluster, Coordinator
from tabular_tables import BLOCKS, bank_client_args, write_tables

from vfl_cli.certs_cmd import create_federation
from vfl_core.auto_rounds import AUTO_STALENESS
from vfl_core.inference.headline import LOWER_IS_BETTER
from vfl_wire.audit import read_audit

# The kill lands at a round count and the test waits for rounds (generous timeouts): it runs on
# a worker, as tests/test_direct_faults.py's. A freeze past a 1.5 s deadline and pauses shorter
# than it are bounded in seconds: those run `alone`, in one federation.
pytestmark = pytest.mark.slow

DEADLINE_S = 1.5
RUN_TIMEOUT_S = 180.0
ROWS = 3000
# early stopping's validation and late verdict stay on, but every epoch runs (a fault must land
# mid-run, and the parties must be back before its end)
EVERY_EPOCH = ("--early-stop-patience", "1000")
# Rounds after those recorded when a fault lands that may still hold the faulty party's
# embedding (vfl_core.training.direct_stale, blocks of p = (S + 1) // 2 rounds): a round's
# record leaves once its steps are back, carried by the calls two blocks later, and by then a
# party may have pushed its embeddings of two blocks more (it embeds block j once it stepped
# the blocks up to j - 2): 4p rounds, 12 at the tables' staleness 5
IN_FLIGHT = 4 * ((AUTO_STALENESS + 1) // 2)
# a receiver's line for a push it refused (vfl_client.data_plane.Mailbox.put)
PUSH_REFUSED = re.compile(
    r"Push refused: push for round (\d+): this party takes rounds (\d+)\.\.(\d+)"
)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stale-fault-certs") / "certs"
    create_federation(root, [f"party{k}" for k in BLOCKS.values()], [])
    return root


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return write_tables(tmp_path_factory.mktemp("stale-fault-tables"), n=ROWS)


@pytest.fixture
def cluster(tmp_path: Path, certs: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster", tls_dir=certs) as c:
        yield c


def _start(
    cluster: Cluster,
    tables: dict[str, Path],
    ckpt: Path,
    *,
    epochs: int,
    extra: tuple[str, ...] = (),
    serve: bool = False,
) -> tuple[Coordinator, dict[str, Client]]:
    """The tables' defaults: no --staleness, --overlap-validation, --epoch-flow; the plane that
    an unset one is on tables (the harness gives the relay unless told)."""
    coord, clients = cluster.federation(
        [tables[name] for name in BLOCKS],
        epochs=epochs,
        deadline=DEADLINE_S,
        serve=serve,
        extra=[
            *("--data-plane", "auto", "--retry-every", "3", "--checkpoint-every", "20"),
            *("--checkpoint-dir", str(ckpt / "coordinator")),
            *("--audit-log", str(ckpt.parent / "audit.bin")),
            *extra,
        ],
        client_extra=lambda p: [
            *bank_client_args(p),
            *("--checkpoint-dir", str(ckpt / p.stem)),
            *("--bundle-dir", str(ckpt.parent / "bundles" / p.stem)),
        ],
    )
    return coord, dict(zip(BLOCKS, clients, strict=True))


def _assert_stale_direct(coord: Coordinator) -> None:
    """The run record says the run trained as the tables' defaults do."""
    results = coord.results()
    assert results is not None and results["status"] == "ok", results
    train = results["config"]["train"]
    assert (train["staleness"], train["overlap_validation"]) == (AUTO_STALENESS, True), train
    assert train["epoch_flow"] and train["fresh_own_tower"], train  # the tables' recipe
    assert train["data_plane"] == "direct", train
    assert "data plane: direct (--data-plane auto" in coord.log()


def _assert_every_round_once(coord: Coordinator) -> list[dict]:
    rounds = coord.rounds()
    assert [r["round"] for r in rounds] == list(range(len(rounds)))
    return rounds


def _transitions(coord: Coordinator, block: int) -> list[tuple[str, str]]:
    results = coord.results()
    assert results is not None
    return [(t["old"], t["new"]) for t in results["transitions"] if t["block"] == block]


def _no_tracebacks(cluster: Cluster) -> None:
    for proc in cluster.procs:
        assert "Traceback" not in proc.log(), proc.tail(60)


def _trained_in(coord: Coordinator, start: int, block: int) -> dict | None:
    return next((r for r in coord.rounds()[start:] if block in r["updated"]), None)


def _untrained_in(coord: Coordinator, start: int, block: int) -> dict | None:
    """The first round from `start` that trained (a head's loss) without `block`."""
    rounds = coord.rounds()[start:]
    return next((r for r in rounds if r["losses"] and block not in r["present"]), None)


def test_given_stale_direct_rounds_when_a_feature_party_is_killed_and_restarted_then_it_rejoins(
    cluster: Cluster, tables: dict[str, Path], tmp_path: Path
) -> None:
    dead = BLOCKS["telecom"]
    coord, clients = _start(
        cluster,
        tables,
        tmp_path / "ckpt",
        epochs=100,
        serve=True,
        extra=EVERY_EPOCH,  # time for the restart
    )
    victim = clients["telecom"]
    cluster.wait_rounds(coord, 30, RUN_TIMEOUT_S)  # past the first checkpoint (round 20)
    victim.signal(signal.SIGKILL)
    assert victim.wait(10) == -signal.SIGKILL
    killed_at = len(coord.rounds())
    # restarted once the run has gone on without it past the rounds in flight at the kill (a
    # fast machine had it back before one ran: nothing was left to check below)
    cluster.wait_for(
        lambda: _untrained_in(coord, killed_at + IN_FLIGHT, dead), 120, "a round without it"
    )
    restarted = cluster.restart(victim)
    restarted.port()
    back = cluster.wait_for(lambda: _trained_in(coord, killed_at, dead), 120, "the party back")
    without = [r for r in coord.rounds()[killed_at + IN_FLIGHT : back["round"]] if r["losses"]]
    assert without and all(dead not in r["present"] for r in without), without
    cluster.wait_serving(coord, RUN_TIMEOUT_S)
    out = tmp_path / "predictions.csv"
    argv = [str(BIN / "vfl"), "predict", "--coordinator", coord.address, "--secret", SECRET]
    argv += ["--tls-dir", str(cluster.tls_dir), "--out", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    coord.signal(signal.SIGTERM)
    assert coord.wait(30) == 0, cluster.describe()
    assert restarted.wait(30) == 0, cluster.describe()
    for name in ("bank", "retail"):
        assert clients[name].wait(30) == 0, cluster.describe()

    _assert_stale_direct(coord)
    assert dead in back["present"] and "0" in back["losses"]
    assert "restored its checkpoint of round" in restarted.log()
    _assert_every_round_once(coord)
    transitions = _transitions(coord, dead)
    assert transitions[-1][1] == "up" and ("up", "down") in transitions, transitions
    assert any(before == "rejoining" for before, _ in transitions), transitions
    results = coord.results()
    assert results["test"]["rows"][-1]["accuracy"] > 0.6, results["test"]
    with out.open() as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["predicted_class"] in ("0", "1") for r in rows), rows[:3]
    # every party wrote its serving bundle, the restarted one too (the run finished)
    assert all((tmp_path / "bundles" / name / "bundle.json").exists() for name in BLOCKS)
    # the audit log holds the coordinator's calls: the failed Round calls to the dead party,
    # the label party told it is absent, the new process registering from its new address
    audit = read_audit(tmp_path / "audit.bin")
    failed = [r for r in audit if r.rpc == "Round" and r.direction == "error"]
    # UNAVAILABLE; CANCELLED where the heads left the party out while grpc was still
    # reconnecting to the dead address; DEADLINE_EXCEEDED where a call outlived the 1.5 s
    # deadline, waiting on that reconnection or on the new process's first round (a loaded
    # machine): the party left out, as a timeout does. No other failure (a refusal, an error)
    ended = (b"UNAVAILABLE", b"CANCELLED", b"DEADLINE_EXCEEDED")
    others = [r.data[:200] for r in failed if not r.data.startswith(ended)]
    assert failed and not others, others[:3]
    assert any(r.rpc == "Absent" and r.direction == "response" for r in audit)
    name = f"party{dead}"
    calls = [r.message() for r in audit if r.rpc == "Register" and r.direction == "request"]
    addresses = [m.address for m in calls if m.header.party_id == name]
    assert len(set(addresses)) == 2, set(addresses)  # the killed process's, the new one's
    _no_tracebacks(cluster)


def _same_weights(a: Path, b: Path) -> bool:
    one = torch.load(a, weights_only=True)["state"]
    two = torch.load(b, weights_only=True)["state"]
    return all(torch.equal(one["f"][k], two["f"][k]) for k in one["f"])


def _pause(client: Client) -> None:
    """SIGSTOP then SIGCONT, a third of the deadline apart: shorter than the deadline."""
    client.signal(signal.SIGSTOP)
    time.sleep(DEADLINE_S / 3)
    client.signal(signal.SIGCONT)


@pytest.mark.alone
def test_given_stale_direct_rounds_when_label_party_pauses_and_a_feature_party_freezes_then_held(
    cluster: Cluster, tables: dict[str, Path], tmp_path: Path
) -> None:
    """One federation, two faults one after the other (each process start costs seconds of
    torch import; the two faults touch different parties and different claims):

    - the label party paused briefly (shorter than the deadline), once mid-epoch and once as
      the first epoch ends (its validation sent beside the next epoch's first rounds): it is
      never left out, every epoch is scored, and the best epoch's weights are what it keeps;
    - then a feature party SIGSTOPped past the deadline: it is timed out, the rounds go on
      without it, and once SIGCONTed it trains again; its late pushes do not crash anyone or
      mix rounds.
    """
    ckpt = tmp_path / "ckpt"
    coord, clients = _start(cluster, tables, ckpt, epochs=60, extra=EVERY_EPOCH)
    bank, victim, frozen = clients["bank"], clients["retail"], BLOCKS["retail"]
    cluster.wait_rounds(coord, 10, RUN_TIMEOUT_S)
    _pause(bank)  # mid-epoch
    cluster.wait_for(lambda: "epoch 1: " in coord.log(), 120, "epoch 1's end")
    _pause(bank)  # as epoch 1 ends: its validation is out (the late verdict's)

    cluster.wait_rounds(coord, len(coord.rounds()) + 10, RUN_TIMEOUT_S)
    victim.signal(signal.SIGSTOP)
    stopped_at = len(coord.rounds())

    def down_and_on() -> list[dict] | None:
        later = coord.rounds()[stopped_at + IN_FLIGHT :]
        trained = [r for r in later if frozen not in r["present"] and r["losses"]]
        return later if len(trained) >= 3 else None

    frozen_rounds = cluster.wait_for(down_and_on, 60, "rounds trained without the frozen party")
    victim.signal(signal.SIGCONT)
    resumed_at = len(coord.rounds())
    back = cluster.wait_for(lambda: _trained_in(coord, resumed_at, frozen), 120, "it trains")
    assert coord.wait(RUN_TIMEOUT_S) == 0, cluster.describe()
    for client in clients.values():
        assert client.wait(60) == 0, cluster.describe()

    _assert_stale_direct(coord)
    rounds = _assert_every_round_once(coord)
    # the label party's pauses
    assert all(0 in r["present"] for r in rounds if 0 in r["pattern"]), (
        "a pause shorter than the deadline left it out"
    )
    results = coord.results()
    stop = results["early_stop"]
    history = dict(stop["history"])
    assert all(v is not None for v in history.values()), history
    values = list(history.values())
    top = min(values) if stop["metric"] in LOWER_IS_BETTER else max(values)
    assert stop["best_epoch"] == next(e for e, v in history.items() if v == top), stop
    assert _same_weights(ckpt / "bank" / "party0.pt", ckpt / "bank" / "party0-best.pt")
    # the feature party's freeze
    assert all(frozen not in r["updated"] for r in frozen_rounds if frozen not in r["present"])
    assert frozen in back["present"]
    transitions = _transitions(coord, frozen)
    assert transitions[:2] == [("up", "down"), ("down", "up")], transitions
    # pushes outside a party's window of rounds (the thawed party's of the rounds given up on,
    # and the label party's to it of rounds it has not reached) were refused by their
    # receiver, never mixed into other rounds
    refused = PUSH_REFUSED.findall("".join(c.log() for c in clients.values()))
    assert all(not int(a) <= int(r) <= int(b) for r, a, b in refused), refused
    _no_tracebacks(cluster)
    assert not re.search(r"ERROR", coord.log()), coord.tail(60)
