"""The gateway's own work micro-batched across concurrent requests (issue 31): the combiner runs
one call for every request queued meanwhile and hands each its own result; the gateway's
answers from one combined head call equal the answers one request at a time; a request whose
deadline was spent queued is shed without asking any party; requests already
waiting for a party stop waiting when it is found lagging."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from test_serving_gateway import (  # noqa: F401
    SilentPeer,
    gateway,
    local_peer,
    served,
    wait_for,
)

from vfl_core.serving.admission import SPENT, Overloaded
from vfl_core.serving.combine import Combiner
from vfl_core.serving.lag import LAGGING_AFTER
from vfl_core.serving.peers import LAGGING, TIMED_OUT


def run_concurrently(run, items: list, release: threading.Event, leading, queued) -> list:
    """run(item) for each item from its own thread: the first while `leading()` holds it in
    its work until every other item is queued (`queued()` of them), then `release`d, so that
    the rest are one batch."""
    results: list = [None] * len(items)

    def call(i: int) -> None:
        results[i] = run(items[i])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(items))]
    threads[0].start()
    wait_for(leading)
    for t in threads[1:]:
        t.start()
    wait_for(lambda: queued() == len(items) - 1)
    release.set()
    for t in threads:
        t.join(timeout=10)
    return results


def test_given_callers_queued_behind_a_batch_then_one_call_and_each_its_own_result() -> None:
    release = threading.Event()
    calls: list[list[int]] = []

    def work(items):
        calls.append(list(items))
        release.wait(10)
        return [10 * i for i in items]

    combiner = Combiner(work)
    results = run_concurrently(
        combiner.run, list(range(6)), release, lambda: calls, lambda: len(combiner._queue)
    )
    assert results == [0, 10, 20, 30, 40, 50]
    assert calls[0] == [0] and sorted(calls[1]) == [1, 2, 3, 4, 5] and len(calls) == 2
    assert combiner.run(7) == 70  # alone: runs at once, its own batch


def test_given_the_work_fails_then_every_caller_of_the_batch_sees_why() -> None:
    def work(items):
        raise ValueError(f"bad batch of {len(items)}")

    with pytest.raises(ValueError, match="bad batch of 1"):
        Combiner(work).run(1)


def test_given_concurrent_requests_when_the_head_runs_once_then_answers_as_one_by_one(
    served,  # noqa: F811
) -> None:
    gw = gateway(served)
    candidates = [f"C{i:05d}" for i in range(1, 120)] + ["no-such-customer"]
    requests = [candidates[i : i + 3] for i in range(0, len(candidates), 3)]
    alone = [gw.predict(ids) for ids in requests]  # one at a time: a batch each
    release = threading.Event()
    predict = gw.bundle.predict
    sets: list[int] = []

    def held_predict(embeddings, *head):  # head: the observed set's chosen head, if any
        sets.append(len(next(iter(embeddings.values()))))
        release.wait(10)
        return predict(embeddings, *head)

    gw.bundle.predict = held_predict  # the first batch waits while the rest queue
    try:
        batches = gw.heads.batches
        together = run_concurrently(
            gw.predict, requests, release, lambda: sets, lambda: len(gw.heads._queue)
        )
    finally:
        gw.bundle.predict = predict
    assert gw.heads.batches - batches == 2  # the first request, then all the others at once
    assert max(sets) > 3  # the head ran on rows of several requests in one call
    for one, many in zip(alone, together, strict=True):
        for a, b in zip(one, many, strict=True):
            assert (a.id, a.used, a.missing, a.error) == (b.id, b.used, b.missing, b.error)
            assert (a.predicted_class, a.label) == (b.predicted_class, b.label)
            if a.probabilities is not None:
                np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-6)


def test_given_a_request_whose_deadline_was_spent_queued_then_shed_without_asking(
    served,  # noqa: F811
) -> None:
    _, _, bundles, tables = served
    asked: list[int] = []

    class Counting:
        def __init__(self, peer) -> None:
            self.name, self.block, self.peer = peer.name, peer.block, peer

        def embed(self, keys, deadline):
            asked.append(self.block)
            return self.peer.embed(keys, deadline)

    peers = [Counting(local_peer(f"party{b}", bundles[b], tables[b])) for b in (1, 2)]
    gw = gateway(served, peers, deadline_s=0.1)
    ids = ["C00001", "C00002"]
    start = time.monotonic()
    with pytest.raises(Overloaded) as err:
        gw.predict(ids, arrived=start - 0.2)  # queued twice its deadline
    assert err.value.reason == SPENT and time.monotonic() - start < 0.1 and asked == []
    gw.predict(ids, arrived=time.monotonic())  # in time: every party asked
    assert sorted(asked) == [1, 2]


def test_given_a_request_waiting_for_a_party_found_lagging_then_it_stops_waiting(
    served,  # noqa: F811
) -> None:
    _, _, bundles, tables = served
    peers = [SilentPeer("party1", 1), local_peer("party2", bundles[2], tables[2])]
    gw = gateway(served, peers, deadline_s=5.0)
    ids = ["C00001"]
    out: list = []
    waiting = threading.Thread(target=lambda: out.append(gw.predict(ids)))
    start = time.monotonic()
    waiting.start()  # waits for the silent party, up to 5 s
    time.sleep(0.1)
    for _ in range(LAGGING_AFTER):  # three others wait their short deadlines out: lagging
        assert gw.predict(ids, deadline_s=0.05)[0].missing["party1"] == TIMED_OUT
    waiting.join(timeout=10)
    assert time.monotonic() - start < 2.5  # released when the party was found lagging
    assert out[0][0].missing["party1"] == LAGGING
    assert gw.predict(ids)[0].missing["party1"] == LAGGING  # and not waited for since
    assert time.monotonic() - start < 2.5
