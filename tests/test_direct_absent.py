"""A party that will push nothing for a direct-plane round (its Round call failed: the process
died) is announced absent (vfl_coordinator.absence, the Party.Absent call), and the round goes on
without it at once: the same numbers as the relay's round with that party missing, the waits
for it ended by the notice, not by their deadline."""

from __future__ import annotations

from collections.abc import Callable, Collection
from concurrent.futures import Future
from pathlib import Path

import grpc
import numpy as np
import pytest
from harness import digits_parties
from test_direct_plane import MemoryLinks, ThreadedDirect

from vfl_client.data_plane import Mailbox
from vfl_coordinator.absence import AbsenceNotices, RoundWaiter, Silence, left_out
from vfl_core.config import TrainConfig
from vfl_core.errors import ProtocolError
from vfl_core.protocol import EmbedCall, RoundCall, RoundResult
from vfl_core.training.direct_party import EMBEDDING, GRADIENT, run_round
from vfl_core.training.engine import Federation, RoundRecord
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.convert_direct import Push, absent_from_proto, absent_to_proto

K = 3
DEAD = 2
HOUR_S = 3600.0  # a wait that only the notice can end within the test's time


class RelayWithoutOne(InProcessTransport):
    """The relay in process; block DEAD's Embed of round `dead_round` fails."""

    def __init__(self, parties: dict[int, Party], dead_round: int) -> None:
        super().__init__(parties)
        self.dead_round = dead_round

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        lost = DEAD in calls and calls[DEAD].round_id == self.dead_round
        return super().embed({b: c for b, c in calls.items() if not (lost and b == DEAD)})


class AbsentLinks(MemoryLinks):
    """Memory links whose waits end for a block announced absent in the round."""

    def receive(
        self, kind: str, round_id: int, senders: Collection[int], timeout: float
    ) -> dict[int, np.ndarray | None]:
        net = self.net
        assert isinstance(net, DirectWithoutOne)
        keys = {(self.block, kind, round_id, b) for b in senders}
        gone = {k for k in keys if (round_id, k[3]) in net.absent}
        with net.cond:
            net.cond.wait_for(lambda: keys - gone <= net.box.keys(), timeout)
            return {k[3]: net.box.pop(k) for k in keys if k in net.box}


class DirectWithoutOne(ThreadedDirect):
    """The direct plane in process; block DEAD's Round call of `dead_round` fails (it never
    runs) and the round's other parties are told at once. Their waits are an hour long."""

    def __init__(self, parties: dict[int, Party], dead_round: int) -> None:
        super().__init__(parties)
        self.dead_round = dead_round
        self.absent: set[tuple[int, int]] = set()

    def direct(self, calls: dict[int, RoundCall]) -> Callable[[], dict[int, RoundResult]]:
        self.calls.append(calls)
        round_id = next(iter(calls.values())).round_id
        if round_id == self.dead_round and DEAD in calls:
            self.absent.add((round_id, DEAD))
            calls = {b: c for b, c in calls.items() if b != DEAD}
        futures = {
            b: self.workers[b].submit(
                run_round,
                self.parties[b],
                RoundCall(**{**c.__dict__, "embed_wait_s": HOUR_S, "grad_wait_s": HOUR_S}),
                AbsentLinks(b, self),
            )
            for b, c in calls.items()
        }
        return lambda: {b: f.result(timeout=120) for b, f in futures.items()}


def _train(transport, train: TrainConfig, pipeline: bool = True) -> list[RoundRecord]:
    records: list[RoundRecord] = []
    fed = Federation(transport, train, progress=False, on_round=records.append, pipeline=pipeline)
    fed.align()
    fed.train()
    return records


def test_given_a_party_absent_from_a_direct_round_then_the_relays_numbers_without_it(
    tmp_path: Path,
) -> None:
    """Block 2 dies in the run's last round (every party holds labels: each is a head, so the
    others wait for its embedding and its gradient). Told it is absent, they train the round
    without it: every party's parameters and the round records are those of the relay (in
    process) whose Embed call to block 2 failed in that round."""
    train = TrainConfig(seed=0, epochs=1, data_plane="direct")
    clean = digits_parties(tmp_path / "clean", K, train, p_miss=0.2)
    last = _train(InProcessTransport(clean), train)[-1].round_id
    relay = digits_parties(tmp_path / "relay", K, train, p_miss=0.2)
    want = _train(RelayWithoutOne(relay, last), train, pipeline=False)
    direct = digits_parties(tmp_path / "direct", K, train, p_miss=0.2)
    got = _train(DirectWithoutOne(direct, last), train)

    assert DEAD in want[-1].pattern and DEAD not in want[-1].present and want[-1].losses
    assert [r.to_json() for r in got] == [r.to_json() for r in want]
    for block, party in relay.items():
        np.testing.assert_array_equal(direct[block].parameters_vector(), party.parameters_vector())


def test_given_a_block_announced_absent_when_taking_then_no_wait_and_what_arrived_stays() -> None:
    box = Mailbox()
    box.start(5)
    box.put(Push(5, 1, EMBEDDING, np.ones((2, 3), np.float32)), "party1")
    box.absent(5, (1, 2))
    got = box.take(EMBEDDING, 5, (1, 2), HOUR_S)  # returns at once: 2 is absent
    assert set(got) == {1}  # what block 1 pushed before it went is used
    assert box.is_absent(5, 2) and not box.is_absent(6, 2)
    box.absent(5 + 100, (2,))  # outside the window: ignored
    assert not box.is_absent(105, 2)
    box.start(6)  # the round is over: its notices go with it
    assert not box.is_absent(5, 2)
    assert box.take(GRADIENT, 6, (), 0.0) == {}


def test_given_absent_messages_when_converted_then_they_round_trip_and_bad_ones_are_refused() -> (
    None
):
    h = convert.header("run", "party0")
    assert absent_from_proto(absent_to_proto(7, [2, 1, 2], h)) == (7, (1, 2))
    for bad in (absent_to_proto(-1, [1], h), absent_to_proto(3, [], h)):
        with pytest.raises(ProtocolError):
            absent_from_proto(bad)


class _Failed(grpc.RpcError, grpc.Future):
    """A finished Round call future that failed with `code`."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def cancelled(self) -> bool:
        return False

    def exception(self, timeout: float | None = None) -> BaseException:
        return self

    def add_done_callback(self, fn) -> None:
        fn(self)


class _Pending:
    def __init__(self, future) -> None:
        self.future = future


class _Client:
    def __init__(self) -> None:
        self.told: list[tuple[int, list[int]]] = []

    def absent(self, round_id: int, blocks: list[int], timeout: float) -> _Pending:
        self.told.append((round_id, blocks))
        done: Future = Future()
        done.set_result(None)
        return _Pending(done)


def test_given_a_round_call_that_fails_then_only_the_parties_waiting_for_it_are_told() -> None:
    """Heads 0 and 1 wait for block 2 (its embedding, and 0's gradient for 1's); block 2's call
    fails (UNAVAILABLE: gone) and block 3's runs out its deadline (frozen: the others' waits end
    first), block 4's was never sent."""
    calls = {
        0: RoundCall(round_id=9, epoch=0, expect=(1, 2, 4)),
        1: RoundCall(round_id=9, epoch=0, expect=(3,), grads_from=(0,)),
        2: RoundCall(round_id=9, epoch=0, grads_from=(0,)),
        3: RoundCall(round_id=9, epoch=0, grads_from=(1,)),
        4: RoundCall(round_id=9, epoch=0, grads_from=(0,)),
    }
    clients = {b: _Client() for b in range(4)}
    pending = {
        0: _Pending(Future()),
        1: _Pending(Future()),
        2: _Pending(_Failed(grpc.StatusCode.UNAVAILABLE)),
        3: _Pending(_Failed(grpc.StatusCode.DEADLINE_EXCEEDED)),
    }
    AbsenceNotices(calls, clients, 1.0).watch(pending)  # type: ignore[arg-type]
    assert clients[0].told == [(9, [4]), (9, [2])]
    assert clients[1].told == clients[2].told == clients[3].told == []


def test_given_heads_that_fused_without_a_silent_party_then_its_report_is_not_awaited() -> None:
    """Block 2 (frozen) has not answered round 4; heads 0 and 1 fused without its embedding:
    the round trained without it, as the relay's round without a party that missed the Embed
    deadline. Not so while a head still runs, or when a head used its embedding (it is alive
    and stepping), or when no head fused (nothing says it missed the wait)."""
    calls = {
        0: RoundCall(round_id=4, epoch=0, expect=(1, 2)),
        1: RoundCall(round_id=4, epoch=0, expect=(0, 2)),
        2: RoundCall(round_id=4, epoch=0, expect=(0, 1)),
    }
    without = {0: RoundResult(4, True, (0, 1), 0.5, True), 1: RoundResult(4, True, (0, 1), 0.4)}
    assert left_out(calls, without, {2}) == {2}
    assert left_out(calls, {0: without[0]}, {1, 2}) == set()  # head 1 still runs
    used = {**without, 1: RoundResult(4, True, (0, 1, 2), 0.4)}
    assert left_out(calls, used, {2}) == set()
    unfused = {0: RoundResult(4, True), 1: RoundResult(4, True)}
    assert left_out(calls, unfused, {2}) == set()


def test_given_a_thawed_party_behind_its_peers_then_their_pushes_are_taken_and_old_waits_end() -> (
    None
):
    """A party frozen in round 10 is thawed when its peers are at round 40: the call of round
    40 has arrived, so their pushes for it are kept (not refused as too far ahead), and round
    10, whose call the coordinator gave up on, waits for nothing more."""
    box = Mailbox()
    box.start(10)
    with pytest.raises(ProtocolError):
        box.put(Push(40, 1, EMBEDDING, None), "party1")  # far ahead of round 10
    box.arrived(40)
    box.put(Push(40, 1, EMBEDDING, None), "party1")
    box.abandon(10)
    assert box.take(GRADIENT, 10, (0, 2), HOUR_S) == {}  # at once
    box.start(40)
    assert box.take(EMBEDDING, 40, (1,), HOUR_S) == {1: (None, "party1")}


class _Call:
    """A Round call in flight, as RoundWaiter reads it (vfl_coordinator.party_client.Pending)."""

    def __init__(self, future: Future) -> None:
        self.future = future

    def done(self) -> bool:
        return self.future.done()

    def result(self, timeout: float | None = None) -> RoundResult:
        return self.future.result(timeout)


def _answered(result: RoundResult) -> Future:
    done: Future = Future()
    done.set_result(result)
    return done


def _round(round_id: int) -> dict[int, RoundCall]:
    """Heads 0 and 1 fuse on each other's and block 2's embeddings; 2 waits for their gradients."""
    return {
        0: RoundCall(round_id=round_id, epoch=0, expect=(1, 2), grads_from=(1,)),
        1: RoundCall(round_id=round_id, epoch=0, expect=(0, 2), grads_from=(0,)),
        2: RoundCall(round_id=round_id, epoch=0, grads_from=(0, 1)),
    }


def test_given_a_silent_party_then_later_rounds_are_told_at_once_until_it_answers() -> None:
    """Block 2 freezes in round 4: heads 0 and 1 fuse without it at their wait's end, and the
    round's report is collected without waiting for it. Round 5, already in flight, and round 6,
    started while it is still silent, tell the heads at once that it is absent (they wait for it
    once, not every round). Its answer in round 6 (thawed) ends that: round 7 waits for it."""
    silence = Silence()
    clients = {b: _Client() for b in range(3)}
    collect = lambda rest, _t: {b: p.result(0) for b, p in rest.items()}  # noqa: E731

    def start(round_id: int, block2: Future) -> tuple[dict[int, _Call], RoundWaiter]:
        calls = _round(round_id)
        heads = {h: _answered(RoundResult(round_id, True, (0, 1), 0.5, True)) for h in (0, 1)}
        pending = {**{h: _Call(f) for h, f in heads.items()}, 2: _Call(block2)}
        AbsenceNotices(calls, clients, 1.0, silence).watch(pending)  # type: ignore[arg-type]
        return pending, RoundWaiter(calls, pending, silence)  # type: ignore[arg-type]

    frozen4, frozen5 = Future(), Future()
    pending4, waiter4 = start(4, frozen4)
    _, waiter5 = start(5, frozen5)
    assert clients[0].told == []  # nothing known of block 2 yet
    assert set(waiter4.collect(collect, HOUR_S)) == {0, 1}  # not its call's deadline
    assert pending4[2].future.cancelled()
    assert silence.silent() == {2}
    assert clients[0].told == clients[1].told == [(5, [2])]  # the round in flight
    thawed6 = _answered(RoundResult(6, True, (), None, True))
    clients[0].told.clear()
    start(6, Future())  # told before its calls' answers are known
    assert clients[0].told == [(6, [2])]
    start(6, thawed6)  # (the same round again, its call to block 2 answered)
    assert silence.silent() == set()
    clients[0].told.clear()
    start(7, Future())
    assert clients[0].told == clients[2].told == []
    assert set(waiter5.collect(collect, HOUR_S)) == {0, 1}
    assert silence.silent() == set()  # round 5, collected after its answer to round 6


def test_given_a_party_frozen_after_its_push_then_its_report_is_given_up_after_the_grace() -> None:
    """Heads 0 and 1 used block 2's embedding and sent it their gradients, and 2 has not
    reported (frozen before stepping): once the grace (the Backward deadline) has passed since
    the last head answered, its report is not awaited; without a grace it is awaited to the end
    of the wait, and a head that still runs holds it too."""
    calls = _round(3)
    used = RoundResult(3, True, (0, 1, 2), 0.5, True)

    def waiter(grace: float | None, head1: Future) -> RoundWaiter:
        pending = {0: _Call(_answered(used)), 1: _Call(head1), 2: _Call(Future())}
        return RoundWaiter(calls, pending, Silence(), grace)  # type: ignore[arg-type]

    assert waiter(0.01, _answered(used)).given_up(HOUR_S) == {2}
    assert waiter(None, _answered(used)).given_up(0.05) == set()
    assert waiter(0.01, Future()).given_up(0.05) == set()
