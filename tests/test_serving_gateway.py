"""The gateway's logic in process (issue 31): predictions from whichever parties answered by
the deadline, equal to the trained federation's for that subset; each missing party named with
its reason; malformed requests refused before any party is asked; batching splits answers."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future

import numpy as np
import pytest
from tabular_tables import LABEL_COLUMN, write_tables
from test_serving_bundle import SECRET, trained

from vfl_core.errors import DataError
from vfl_core.serving import predictions_with_rows
from vfl_core.serving.admission import Admission
from vfl_core.serving.bundle import load_bundle, write_bundle
from vfl_core.serving.features import FeatureTable
from vfl_core.serving.gateway import Gateway
from vfl_core.serving.lag import LAGGING_AFTER
from vfl_core.serving.peers import (
    DOWN,
    LAGGING,
    NOT_HELD,
    TIMED_OUT,
    BatchingPeer,
    LocalPeer,
    PeerAnswer,
    PeerFailure,
)
from vfl_core.training.alignment import hash_ids


class SilentPeer:
    """A party that never answers (a frozen process)."""

    def __init__(self, name: str, block: int) -> None:
        self.name, self.block = name, block

    def embed(self, keys, deadline) -> Future[PeerAnswer]:
        return Future()


ROW = {"yearly_income": 41000, "age_years": 37, "home_region": "Southmoor"}  # every column


def local_peer(name, bundle, table) -> LocalPeer:
    def answer(keys):
        held, x = table.lookup(keys)
        return PeerAnswer(held, bundle.embed(x))

    return LocalPeer(name, bundle.meta.block, answer)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("serving")
    tables = write_tables(tmp / "data", n=300, share=0.8)
    paths = [tables["bank"], tables["retail"], tables["telecom"]]
    fed, parties = trained(paths, "customer_id", LABEL_COLUMN, "classification")
    bundles, feature_tables = {}, {}
    for b, party in parties.items():
        # with the run's validation choice, as a client writes them at the end of a run
        written = write_bundle(party, tmp / party.party_id, choice=fed.serving_choice())
        bundles[b] = load_bundle(written)
        pre = bundles[b].preprocessing
        feature_tables[b] = FeatureTable(paths[b], "customer_id", pre, SECRET)
    return fed, parties, bundles, feature_tables


def gateway(served, peers=None, **kw) -> Gateway:
    _, _, bundles, tables = served
    if peers is None:
        peers = [local_peer(f"party{b}", bundles[b], tables[b]) for b in (1, 2)]
    kw.setdefault("deadline_s", 5.0)  # a loaded machine: no request is shed as late
    # what these tests time is the waiting; an answer late on a loaded machine is not shed
    kw.setdefault("admission", Admission(late_grace_s=60.0))
    return Gateway(bundles[0], tables[0], peers, SECRET, **kw)


def test_given_every_party_up_when_predicting_test_ids_then_the_federation_answer(served) -> None:
    fed, parties, _, _ = served
    samples, _ = predictions_with_rows(fed, "test", None)
    full = [s for s in samples if 0 in s.party_probs][:30]
    ids = [parties[min(s.rows)].split("test").ids[s.rows[min(s.rows)]] for s in full]
    answers = gateway(served).predict(ids)
    for s, a in zip(full, answers, strict=True):
        assert a.used == tuple(f"party{b}" for b in s.observed)
        assert set(a.missing) == {f"party{b}" for b in range(3)} - set(a.used)
        assert set(a.missing.values()) <= {NOT_HELD}
        np.testing.assert_allclose(a.probabilities, s.party_probs[0], atol=1e-5)
        assert a.label in ("no", "yes") and a.predicted_class == int(np.argmax(a.probabilities))


def test_given_one_party_silent_and_one_down_when_predicting_then_subset_and_reasons(
    served,
) -> None:
    _, _, bundles, tables = served

    def down(keys):
        raise PeerFailure(DOWN)

    peers = [SilentPeer("party1", 1), LocalPeer("party2", 2, down)]
    held_ids = ["C00001", "C00002", "C00003", "C00004", "C00005"]
    start = time.monotonic()
    answers = gateway(served, peers, deadline_s=0.2).predict(held_ids)
    assert time.monotonic() - start < 5.0  # the silent party holds nobody past the deadline
    for a in answers:
        assert a.missing["party1"] == TIMED_OUT and a.missing["party2"] == DOWN
        assert a.used in ((), ("party0",))
        assert (a.error is None) == (a.used == ("party0",))
    # the bank alone: its heads on its own embedding, h_{0,{0}} (as the choice names them)
    own = next(a for a in answers if a.used == ("party0",))
    _, x = tables[0].lookup(hash_ids([own.id], SECRET))
    alone = bundles[0].predict({0: bundles[0].embed(x)}, bundles[0].head_for((0,)))[0]
    np.testing.assert_allclose(own.probabilities, alone, atol=1e-6)


class FlakyPeer:
    """A party that is frozen (never answers) while `frozen`, else answers after `delay_s`."""

    def __init__(self, peer: LocalPeer, delay_s: float) -> None:
        self.name, self.block, self.peer, self.delay_s = peer.name, peer.block, peer, delay_s
        self.frozen = True

    def embed(self, keys, deadline) -> Future[PeerAnswer]:
        future: Future[PeerAnswer] = Future()
        if not self.frozen:
            answer = self.peer.embed(keys, deadline).result()
            threading.Timer(self.delay_s, future.set_result, (answer,)).start()
        return future


def test_given_a_party_frozen_for_three_requests_then_not_waited_for_until_it_answers(
    served,
) -> None:
    _, _, bundles, tables = served
    flaky = FlakyPeer(local_peer("party1", bundles[1], tables[1]), delay_s=0.05)
    gw = gateway(served, [flaky, local_peer("party2", bundles[2], tables[2])], deadline_s=0.5)
    candidates = [f"C{i:05d}" for i in range(1, 300)]
    held = tables[1].lookup(hash_ids(candidates, SECRET))[0]
    ids = [candidates[int(np.flatnonzero(held)[0])]]  # one that party1 holds
    for _ in range(LAGGING_AFTER):  # each waits the whole deadline
        start = time.monotonic()
        assert gw.predict(ids)[0].missing.get("party1") == TIMED_OUT
        assert time.monotonic() - start >= 0.5
    start = time.monotonic()  # lagging now: answered without waiting for it
    assert gw.predict(ids)[0].missing.get("party1") == LAGGING
    assert time.monotonic() - start < 0.5
    flaky.frozen = False  # thawed; once the probe out ends at its deadline, the next request
    time.sleep(0.6)  # probes again, and the answer in time clears the mark ...
    gw.predict(ids)
    time.sleep(0.2)
    used = [gw.predict(ids)[0].used for _ in range(3)]  # ... so it is waited for again
    assert all("party1" in u for u in used), used


def _at_once(gw: Gateway, ids: list[str], offsets: list[float]) -> list[tuple[float, object]]:
    """(seconds taken, the answer) of one request per offset, each sent that long after the
    first, concurrently."""
    out: list[tuple[float, object]] = [(0.0, None)] * len(offsets)

    def one(k: int) -> None:
        time.sleep(offsets[k])
        start = time.monotonic()
        (answer,) = gw.predict(ids)
        out[k] = (time.monotonic() - start, answer)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(len(offsets))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return out


def test_given_requests_piled_on_a_frozen_party_then_they_stop_waiting_at_half_the_deadline(
    served,
) -> None:
    _, _, bundles, tables = served
    peers = [SilentPeer("party1", 1), local_peer("party2", bundles[2], tables[2])]
    gw = gateway(served, peers, deadline_s=2.0)
    replies = _at_once(gw, ["C00001"], [0.0] * (LAGGING_AFTER + 1))
    for took, answer in replies:  # found lagging at their midpoints, not their deadlines
        assert 0.9 <= took < 2.0, took
        assert answer.missing["party1"] == LAGGING  # released: found lagging meanwhile
    start = time.monotonic()
    assert gw.predict(["C00001"])[0].missing["party1"] == LAGGING  # not waited for since
    assert time.monotonic() - start < 1.0


def test_given_a_party_slow_but_answering_under_load_then_it_is_never_found_lagging(
    served,
) -> None:
    _, _, bundles, tables = served
    slow = FlakyPeer(local_peer("party1", bundles[1], tables[1]), delay_s=1.5)
    slow.frozen = False  # each answer past the request's midpoint, inside its deadline
    gw = gateway(served, [slow, local_peer("party2", bundles[2], tables[2])], deadline_s=2.0)
    candidates = [f"C{i:05d}" for i in range(1, 300)]
    held = tables[1].lookup(hash_ids(candidates, SECRET))[0]
    ids = [candidates[int(np.flatnonzero(held)[0])]]  # one that party1 holds
    # at 2.8 s the requests sent at 1.6, 1.7 and 1.8 s are all past their midpoints, still
    # waiting; but the party answered (at 2.1 s) since they asked: slow, not silent
    replies = _at_once(gw, ids, [0.0, 0.6, 1.6, 1.7, 1.8, 1.9])
    assert all("party1" in answer.used for _, answer in replies), replies


def test_given_an_unknown_id_when_predicting_then_an_answer_not_an_error(served) -> None:
    (answer,) = gateway(served).predict(["no-such-customer"])
    assert answer.used == () and answer.error is not None
    assert answer.missing == {f"party{b}": NOT_HELD for b in range(3)}


def test_given_inline_features_when_the_gateway_lacks_the_id_then_they_are_used(served) -> None:
    cells = {"yearly_income": 21000.5, "age_years": 33, "home_region": "Northshire"}
    (answer,) = gateway(served).predict(["new-customer"], inline={"new-customer": cells})
    assert answer.used == ("party0",) and answer.probabilities is not None


@pytest.mark.parametrize(
    ("ids", "kw", "message"),
    [
        ([], {}, "non-empty list"),
        ("C00001", {}, "non-empty list"),
        ([f"C{i}" for i in range(300)], {}, "at most 256"),
        ([17], {}, "each ID is a string"),
        (["C00001"], {"deadline_s": 0}, "deadline"),
        (["C00001"], {"inline": {"C00001": {"favourite_colour": "red"}}}, "unknown feature"),
        (["C00001"], {"inline": {"C00001": {**ROW, "yearly_income": "lots"}}}, "lots"),
        (["C00001"], {"inline": {"C00001": {"yearly_income": 3}}}, "'age_years', 'home_region'"),
        (["C00001"], {"inline": {"C00001": {**ROW, "age_years": float("nan")}}}, "'age_years'"),
        (["C00001"], {"inline": {"C9": {"age_years": 3}}}, "not in the request"),
    ],
)
def test_given_a_malformed_request_when_predicting_then_refused_naming_it(
    served, ids, kw, message
) -> None:
    with pytest.raises(DataError, match=message):
        gateway(served).predict(ids, **kw)


class HeldPeer:
    """A party whose answers the test releases: calls stay in flight until then."""

    def __init__(self) -> None:
        self.name, self.block = "p", 1
        self.calls: list[tuple[list[bytes], Future[PeerAnswer]]] = []

    def embed(self, keys, deadline) -> Future[PeerAnswer]:
        future: Future[PeerAnswer] = Future()
        self.calls.append((list(keys), future))
        return future

    def answer(self, i: int) -> None:
        keys, future = self.calls[i]
        held = np.array([k != b"x" for k in keys])
        rows = [[float(k[0])] for k in keys if k != b"x"]
        future.set_result(PeerAnswer(held, np.array(rows, np.float32).reshape(-1, 1)))


def wait_for(condition, seconds: float = 5.0) -> None:
    end = time.monotonic() + seconds
    while not condition() and time.monotonic() < end:
        time.sleep(0.01)
    assert condition()


def test_given_concurrent_callers_when_batching_then_one_call_and_each_its_own_slice() -> None:
    held = HeldPeer()
    peer = BatchingPeer(held, window_s=0.05)
    try:
        deadline = time.monotonic() + 5
        lone = peer.embed([b"z"], deadline)  # nothing in flight: sent at once
        wait_for(lambda: len(held.calls) == 1)
        futures = [peer.embed(keys, deadline) for keys in ([b"a", b"x"], [b"b"], [b"x"])]
        wait_for(lambda: len(held.calls) == 2)  # the three merged while the first is in flight
        held.answer(1)
        results = [f.result(timeout=5) for f in futures]
        held.answer(0)
        assert lone.result(timeout=5).held.tolist() == [True]
    finally:
        peer.close()
    assert [keys for keys, _ in held.calls] == [[b"z"], [b"a", b"x", b"b", b"x"]]
    assert [r.held.tolist() for r in results] == [[True, False], [True], [False]]
    assert [r.embeddings.ravel().tolist() for r in results] == [[97.0], [98.0], []]


def test_given_the_cli_serving_defaults_when_compared_then_they_are_the_configs() -> None:
    from vfl_cli import client_cmd
    from vfl_client.serving_runner import ServeConfig
    from vfl_core.serving.gateway import DEFAULT_DEADLINE_S

    fields = ServeConfig.model_fields
    assert (
        client_cmd.SERVE_DEADLINE_MS == fields["deadline_ms"].default == 1000 * DEFAULT_DEADLINE_S
    )
    assert fields["batch_window_ms"].default == client_cmd.SERVE_WINDOW_MS
