"""Issue 14, item 3 in one process: while no label party is up, training pauses (no round is run
or counted), resumes when one comes back (registered again, or answering a retry after a thaw),
and stops with FederationDown after the rejoin timeout. Injected faults without a timeout keep
the guest-loss model (rounds pass whoever is up). The real-process tests are in
test_reliability_grpc.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_digits_dataset
from vfl_core.data.party_dir import PartyData, load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.training.engine import Callbacks, Federation, RoundRecord
from vfl_core.training.faults import FaultConfig, FaultyTransport
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.liveness import DOWN, FederationDown
from vfl_core.training.party import Party

K = 3
SECRET = b"pause-test"
OUTAGE_AT = 12  # the round at which every party goes away


@pytest.fixture(scope="module")
def datas(tmp_path_factory: pytest.TempPathFactory) -> list[PartyData]:
    root = tmp_path_factory.mktemp("pause")
    paths = prepare_parties(load_digits_dataset(), root, K, [0.1] * K, [0.1] * K, 0.2, seed=0)
    return [load_party_dir(p) for p in paths]


def _federation(
    datas: list[PartyData], faults: FaultConfig, timeout: float | None, epochs: int = 1
) -> tuple[FaultyTransport, Federation, list[RoundRecord]]:
    model = ModelConfig(representation="mlp", embed_dim=8, hidden=(16,))
    cfg = TrainConfig(seed=0, epochs=epochs, lr=1e-2, batch_size=64, model=model)
    ps = {d.meta.block: Party(f"party{d.meta.block}", d, cfg, secret=SECRET) for d in datas}
    faulty = FaultyTransport(InProcessTransport(ps), faults, cfg.seed)
    records: list[RoundRecord] = []
    fed = Federation(faulty, cfg, progress=False, on_round=records.append, rejoin_timeout_s=timeout)
    fed.align()
    return faulty, fed, records


def _plan_rounds(fed: Federation) -> int:
    return sum(len(fed.plan(e)) for e in range(fed.config.epochs))


def test_given_every_party_failed_for_good_when_training_then_pause_and_federation_down(
    datas: list[PartyData],
) -> None:
    _, fed, records = _federation(datas, FaultConfig(fail_rate=1.0, rejoin_rate=0.0), 0.5)
    start = time.monotonic()
    with pytest.raises(FederationDown) as err:
        fed.train()

    waited = time.monotonic() - start
    assert 0.5 <= waited < 5
    # the rounds that found the parties failing until each was marked down, then none at all
    assert len(records) == fed.round_id < 2 * fed.down_after
    assert all(r.present == () for r in records)
    assert set(fed.liveness.state.values()) == {DOWN}
    assert [(p.round_id, p.resumed) for p in fed.pauses] == [(fed.round_id, False)]
    assert fed.pauses[0].seconds >= 0.5
    message = str(err.value)
    assert message.startswith("no label party came back within 0.5s") and "\n" not in message
    assert f"round {fed.round_id}, epoch 1 of 1" in message


def test_given_no_timeout_when_every_party_fails_then_rounds_pass_as_in_the_guest_loss_model(
    datas: list[PartyData],
) -> None:
    _, fed, records = _federation(datas, FaultConfig(fail_rate=1.0, rejoin_rate=0.0), None)
    fed.train()

    assert len(records) == _plan_rounds(fed) and not fed.pauses
    assert all(r.present == () for r in records)


@pytest.mark.parametrize("comeback", ["registers again", "thawed"])
def test_given_every_party_gone_mid_epoch_when_one_comes_back_then_training_resumes_uncounted(
    datas: list[PartyData], comeback: str
) -> None:
    # no failure drawn, none healed by the fault process: the test makes the outage itself
    outage = FaultConfig(rejoin_rate=0.0)
    faulty, fed, records = _federation(datas, outage, timeout=20.0, epochs=2)
    fed.pause_probe_s = 0.3  # a thawed party is called again within 0.3 s, not the default 5
    gone_at: list[float] = []

    def come_back() -> None:
        time.sleep(0.8)
        if comeback == "registers again":
            faulty.heal()  # reported by rejoined(), as a restarted client registers again
        else:
            faulty.down.clear()  # answers again, but nothing tells the engine

    def on_round(record: RoundRecord) -> None:
        records.append(record)
        if record.round_id == OUTAGE_AT:
            faulty.down.update(range(K))
            gone_at.append(time.monotonic())
            threading.Thread(target=come_back, daemon=True).start()

    fed.observers[:] = [Callbacks(round=on_round)]
    fed.train()

    # every batch of the plan ran exactly once; only the rounds that found the parties gone
    # (before they were marked down) ran without them
    assert [r.round_id for r in records] == list(range(_plan_rounds(fed)))
    empty = [r.round_id for r in records if not r.present]
    # The pipelined engine (the default) sends round 13's Embed with round 12's Backward, before
    # on_round(12) makes the outage: the first round without any embedding is then 14.
    first = OUTAGE_AT + (2 if fed.pipeline else 1)
    assert empty == list(range(first, first + len(empty)))
    assert fed.down_after <= len(empty) < 2 * fed.down_after  # (a batch calls its pattern only)
    assert len(fed.pauses) == 1 and fed.pauses[0].resumed
    assert fed.pauses[0].round_id == empty[-1] + 1  # the round that ran once they were back
    # back after 0.8 s: a party that registered again at the next poll, a thawed one (nothing
    # tells the engine) at the next probe; the default probe (5 s) would make this pause 5 s
    assert 0.5 < fed.pauses[0].seconds < (10 if comeback == "registers again" else 4)
    assert all(fed.liveness.state[b] != DOWN for b in range(K))
    moves = {f"{t.old}->{t.new}" for t in fed.liveness.transitions}
    assert ("down->rejoining" in moves) == (comeback == "registers again")
    assert "down->up" in moves or "rejoining->up" in moves


def test_given_label_party_down_and_feature_party_up_when_training_then_pause(
    tmp_path: Path,
) -> None:
    """A live feature-only party trains nothing: the federation pauses all the same."""
    paths = prepare_parties(
        load_digits_dataset(), tmp_path, K, [0.1] * K, [0.1] * K, 0.2, seed=0, label_blocks=[0]
    )
    outage = FaultConfig(rejoin_rate=0.0)
    faulty, fed, _ = _federation([load_party_dir(p) for p in paths], outage, 0.3)
    faulty.down.add(0)
    with pytest.raises(FederationDown):
        fed.train()
    assert [b for b, s in fed.liveness.state.items() if s == DOWN] == [0]
    assert fed.round_id < 2 * fed.down_after and fed.pauses[0].round_id == fed.round_id
