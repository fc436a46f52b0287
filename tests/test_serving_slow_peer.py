"""A party that is alive but late for one request (issue 46): the request is shed (429 /
RESOURCE_EXHAUSTED, reason SLOW_PEER) rather than answered without a party that is alive; a
party that answers nothing (frozen) is still left out of the answer, named "timed out"."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest
from test_serving_bundle import SECRET
from test_serving_gateway import gateway, local_peer, served  # noqa: F401 (the fixture)

from vfl_core.serving.admission import SLOW_PEER, Overloaded
from vfl_core.serving.lag import LAGGING_AFTER
from vfl_core.serving.peer_state import PeerStates
from vfl_core.serving.peers import DOWN, LAGGING, TIMED_OUT, PeerAnswer, PeerFailure
from vfl_core.training.alignment import hash_ids


class HoldingPeer:
    """A party that answers every request at once except one holding `held` (its answer
    stuck behind a queue, or the party frozen), which it never answers."""

    def __init__(self, peer, held: bytes) -> None:
        self.name, self.block, self._peer, self._held = peer.name, peer.block, peer, held
        self.asked = threading.Event()  # the held request was asked

    def embed(self, keys, deadline) -> Future[PeerAnswer]:
        if self._held in keys:
            self.asked.set()
            return Future()
        return self._peer.embed(keys, deadline)


def _setup(served):  # noqa: F811
    _, _, bundles, tables = served
    ids = [f"C{i:05d}" for i in range(1, 300)]
    held = tables[1].lookup(hash_ids(ids, SECRET))[0]
    late, other = (ids[int(i)] for i in np.flatnonzero(held)[:2])  # both held by party1
    holding = HoldingPeer(local_peer("party1", bundles[1], tables[1]), hash_ids([late], SECRET)[0])
    peers = [holding, local_peer("party2", bundles[2], tables[2])]
    return holding, peers, late, other


def test_given_a_party_answering_others_but_late_for_a_request_then_it_is_shed(
    served,  # noqa: F811
) -> None:
    holding, peers, late, other = _setup(served)
    gw = gateway(served, peers, deadline_s=3.0)
    out: list[object] = []

    def ask_late() -> None:
        try:
            out.append(gw.predict([late]))
        except Overloaded as err:
            out.append(err)

    waiting = threading.Thread(target=ask_late)
    waiting.start()
    assert holding.asked.wait(30)
    answer = gw.predict([other])[0]  # party1 answers this one meanwhile: alive
    assert "party1" in answer.used and "party1" not in answer.missing
    waiting.join(30)
    assert len(out) == 1 and isinstance(out[0], Overloaded), out
    assert out[0].reason == SLOW_PEER and "party1" in str(out[0])


def test_given_a_party_answering_nothing_then_answered_without_it_as_timed_out(
    served,  # noqa: F811
) -> None:
    _, peers, late, _ = _setup(served)
    gw = gateway(served, peers, deadline_s=0.3)
    answer = gw.predict([late])[0]  # nothing from party1 since it was asked: frozen, not slow
    assert answer.missing["party1"] == TIMED_OUT
    assert "party1" not in answer.used and answer.error is None


def test_given_a_party_found_lagging_then_shed_while_it_answered_within_a_deadline(
    served,  # noqa: F811
) -> None:
    """Found lagging (three requests waiting for it past their midpoints), a party that
    answered within the last three deadlines is alive: the requests are shed; once it has
    answered nothing for that long it is taken for frozen, and answered without, "lagging"."""
    _, peers, late, other = _setup(served)
    gw = gateway(served, peers, deadline_s=1.0)
    assert "party1" in gw.predict([other])[0].used  # it answers: alive
    out: list[object] = []

    def ask_late() -> None:
        try:
            out.append(gw.predict([late]))
        except Overloaded as err:
            out.append(err)

    waiting = [threading.Thread(target=ask_late) for _ in range(LAGGING_AFTER)]
    for t in waiting:
        t.start()
    for t in waiting:
        t.join(30)
    assert len(out) == LAGGING_AFTER and all(isinstance(e, Overloaded) for e in out), out
    assert all(e.reason == SLOW_PEER for e in out if isinstance(e, Overloaded))
    time.sleep(3.1)  # three deadlines with no answer from it: frozen, as far as one can tell
    answer = gw.predict([late])[0]
    assert answer.missing["party1"] == LAGGING and answer.error is None


class FreezingPeer:
    """A party that answers until `frozen` is set, then answers nothing (SIGSTOPped)."""

    def __init__(self, peer) -> None:
        self.name, self.block, self._peer = peer.name, peer.block, peer
        self.frozen = False

    def embed(self, keys, deadline) -> Future[PeerAnswer]:
        return Future() if self.frozen else self._peer.embed(keys, deadline)


def test_given_a_party_that_answered_just_before_freezing_then_shed_until_three_deadlines(
    served,  # noqa: F811
) -> None:
    """A party timed out with no answer to anyone while the request waited may be frozen or
    only stalled with the machine: one that answered within the last three deadlines is taken
    for alive (the request is shed, not answered without it); after three deadlines of silence
    it is taken for frozen and left out, "timed out"."""
    _, peers, _, other = _setup(served)
    freezing = FreezingPeer(peers[0])
    gw = gateway(served, [freezing, peers[1]], deadline_s=0.3)
    assert "party1" in gw.predict([other])[0].used  # it answers: alive
    freezing.frozen = True
    with pytest.raises(Overloaded) as err:
        gw.predict([other])  # asked within 0.9 s of its last answer
    assert err.value.reason == SLOW_PEER and "party1" in str(err.value)
    time.sleep(3 * 0.3)  # three deadlines without an answer from it: frozen
    answer = gw.predict([other])[0]
    assert answer.missing["party1"] in (TIMED_OUT, LAGGING) and answer.error is None


def test_given_a_lagging_party_whose_connection_was_refused_then_named_down() -> None:
    """A party found lagging (frozen under load) and then killed: its probe's connection
    refused, it is "down" in answers and in the health body, not "lagging"."""
    states = PeerStates({1: "party1"})
    answered: Future[PeerAnswer] = Future()
    states.watch(1, answered)
    answered.set_result(PeerAnswer(np.zeros(1, dtype=bool), np.zeros((0, 4), dtype=np.float32)))
    assert states.why_missing(1, lagging=True) == LAGGING
    assert states.state(1, lagging=True) == LAGGING
    refused: Future[PeerAnswer] = Future()
    states.watch(1, refused)
    refused.set_exception(PeerFailure(DOWN))
    assert states.why_missing(1, lagging=True) == DOWN
    assert states.state(1, lagging=True) == DOWN
    assert states.why_missing(1, lagging=False) == DOWN
