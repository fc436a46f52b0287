"""A direct-plane round's parties told at once of a party that will push nothing (issue 43).

On the relay the coordinator holds the round: a party whose call fails (its process is gone,
the connection refused or reset) is left out of the round the moment the call fails. On the
direct data plane the other parties wait for its embedding or gradient themselves, until their
wait's end (the Embed deadline), though the coordinator's own Round call to it failed at once.
So when a Round call is not sent (no synchronised member for the block) or fails with anything
but its deadline, the parties of that round that wait for the block are sent an `Absent`: their
waits for it end, and the round goes on without it as the relay's would (a head fuses on the
embeddings it has: LASER-VFL's missing blocks; a party steps on the gradients it has).

A call that runs out its deadline tells nobody: the waits of the others ended before it (their
waits are shorter than the call's deadline), as the relay's phases time a frozen party out.

A party that went silent (a frozen process, a stalled link: the heads of a round trained
without it, its call still unanswered) costs that one wait, not one per round: until one of
its Round calls is answered (`Silence`), the rounds in flight and every later round's parties
are told at once that it is absent, as the relay's calls to a frozen party, sent together,
time out together, and a down party's retry costs nothing while it is still silent. Its calls
still go out, so it is back in the first round it answers once thawed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping

import grpc

from vfl_coordinator.party_client import PartyClient, Pending
from vfl_core.errors import VflError
from vfl_core.protocol import RoundCall, RoundResult

log = logging.getLogger(__name__)

# A call that ended so says nothing of the party: its time ran out (the others' waits ended
# first) or the coordinator dropped it.
_SILENT = frozenset({grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED})
# Rounds in flight that Silence keeps at most (the engine has a handful in flight)
_KEPT_ROUNDS = 32


class AbsenceNotices:
    """Watches one direct round's Round calls; tells the parties that wait for a failed one."""

    def __init__(
        self,
        calls: Mapping[int, RoundCall],
        clients: Mapping[int, PartyClient],
        timeout: float,
        silence: Silence | None = None,
    ) -> None:
        self.round_id = next(iter(calls.values())).round_id
        self._calls = dict(calls)
        self._clients = dict(clients)
        self._timeout = timeout
        self._silence = silence
        self._told: set[int] = set()  # blocks already announced absent
        self._lock = threading.Lock()

    @property
    def blocks(self) -> set[int]:
        return set(self._calls)

    def watch(self, pending: Mapping[int, Pending[RoundResult]]) -> None:
        """Announce the calls not sent now, the silent parties' (`Silence`) too, and each call
        that fails when it fails."""
        unsent = set(self._calls) - set(pending)
        if unsent:
            self.tell(unsent, "its Round call was not sent (no synchronised party)")
        for block, call in pending.items():
            call.future.add_done_callback(lambda f, b=block: self._done(b, f))
        if self._silence is not None:
            self._silence.track(self)

    def _done(self, block: int, future: grpc.Future) -> None:
        if future.cancelled():
            return
        err = future.exception()
        if err is None and self._silence is not None:
            self._silence.heard(block, self.round_id)
        if not isinstance(err, grpc.RpcError) or err.code() in _SILENT:
            return
        self.tell({block}, f"its Round call failed: {err.code().name}")

    def tell(self, blocks: Collection[int], why: str) -> None:
        """Every other party of the round that waits for one of `blocks` is told they are
        absent (on gRPC futures: this never waits)."""
        with self._lock:
            new = set(blocks) - self._told
            self._told |= new
        if not new:
            return
        told = []
        for block, call in sorted(self._calls.items()):
            waits_for = new & {*call.expect, *call.grads_from}
            client = self._clients.get(block)
            if block in new or not waits_for or client is None:
                continue
            try:
                pending = client.absent(self.round_id, sorted(waits_for), self._timeout)
            except ValueError:  # its channel was closed: it registered again meanwhile
                continue
            pending.future.add_done_callback(lambda f, b=block: _log_failure(f, b, self.round_id))
            told.append(block)
        log.info(
            "round %d: block(s) %s absent (%s); told block(s) %s",
            self.round_id,
            sorted(new),
            why,
            told,
        )


def _log_failure(future: grpc.Future, block: int, round_id: int) -> None:
    if future.cancelled():
        return
    err = future.exception()
    if isinstance(err, grpc.RpcError):
        log.debug("round %d: Absent to block %d: %s", round_id, block, err.code().name)


class Silence:
    """The parties whose Round call a round's heads trained without, still unanswered (a
    frozen process, a stalled link), until one of their calls is answered or they register
    again: the rounds in flight, and each round that starts meanwhile, announce them absent at
    once (AbsenceNotices.tell), so the others wait for a silent party once, not every round."""

    def __init__(self) -> None:
        self._since: dict[int, int] = {}  # block -> the round it went silent in
        self._heard: dict[int, int] = {}  # block -> the latest round it answered (or rejoined)
        self._rounds: dict[int, AbsenceNotices] = {}  # the rounds in flight, by round
        self._lock = threading.Lock()

    def track(self, notices: AbsenceNotices) -> None:
        """A round starts: its parties that wait for a silent one are told now."""
        with self._lock:
            self._rounds[notices.round_id] = notices
            for old in [r for r in self._rounds if r < notices.round_id - _KEPT_ROUNDS]:
                del self._rounds[old]  # a round never collected (the run stopped)
            silent = {b: r for b, r in self._since.items() if b in notices.blocks}
        for block, since in sorted(silent.items()):
            notices.tell({block}, f"silent since round {since}")

    def done(self, round_id: int) -> None:
        with self._lock:
            self._rounds.pop(round_id, None)

    def went_silent(self, blocks: Collection[int], round_id: int) -> None:
        """`blocks` left round `round_id` unanswered: the later rounds in flight are told."""
        with self._lock:  # (an answer to a later round's call is newer news)
            new = {b for b in blocks if b not in self._since and self._heard.get(b, -1) < round_id}
            self._since.update(dict.fromkeys(new, round_id))
            later = [n for r, n in sorted(self._rounds.items()) if r > round_id]
        for block in sorted(new):
            log.info("round %d: block %d is silent; later rounds go on without it", round_id, block)
            for notices in later:
                if block in notices.blocks:
                    notices.tell({block}, f"silent since round {round_id}")

    def heard(self, block: int, round_id: int) -> None:
        """The party answered round `round_id`'s call, or registered again before it: its
        rounds wait for it again (an earlier round collected later does not undo that)."""
        with self._lock:
            self._heard[block] = max(self._heard.get(block, -1), round_id)
            since = self._since.pop(block, None)
        if since is not None:
            log.info("block %d answers again (silent since round %d)", block, since)

    def silent(self) -> set[int]:
        with self._lock:
            return set(self._since)


def left_out(
    calls: Mapping[int, RoundCall], answers: Mapping[int, RoundResult], waiting: Collection[int]
) -> set[int]:
    """`waiting` (the callees not answered yet) when the round already trained without every
    one of them, else nothing: the heads that wait for each one's embedding have all answered,
    at least one fused, and none used it. Such a party missed the round's embed deadline as
    the heads saw it, as on the relay a party that misses the Embed deadline is out of its
    round: its report can change nothing, and the coordinator does not wait for it (a frozen
    party's call would hold the engine to the call's deadline, several rounds long)."""
    if all(trained_without(calls, answers, waiting, b) for b in waiting):
        return set(waiting)
    return set()


def trained_without(
    calls: Mapping[int, RoundCall],
    answers: Mapping[int, RoundResult],
    waiting: Collection[int],
    block: int,
) -> bool:
    """Whether the heads that wait for `block`'s embedding have all answered, one fused, and
    none used it (`left_out`)."""
    heads = [h for h, c in calls.items() if h != block and block in c.expect]
    if any(h in waiting for h in heads):
        return False
    fused = [answers[h] for h in heads if h in answers and answers[h].loss is not None]
    return bool(fused) and not any(block in r.used for r in fused)


class RoundWaiter:
    """Collects one direct round's reports: each as it comes, and none from a party that the
    round already trained without (`left_out`), nor from one that has not reported `grace`
    seconds (the Backward deadline) after every head it steps on answered: the heads used its
    embedding and sent it their gradients, and it missed the round's Backward deadline as on
    the relay (frozen after its push: without this its call would hold the engine to the
    call's deadline, three rounds' phases)."""

    def __init__(
        self,
        calls: Mapping[int, RoundCall],
        pending: Mapping[int, Pending],
        silence: Silence | None = None,
        grace: float | None = None,
    ) -> None:
        self._calls = calls
        self._pending = pending
        self._silence = silence
        self._grace = grace
        self._done_at: dict[int, float] = {}  # block -> when its call ended
        self._cond = threading.Condition()
        for block, call in pending.items():
            call.future.add_done_callback(lambda f, b=block: self._wake(b))

    def _wake(self, block: int) -> None:
        with self._cond:
            self._done_at.setdefault(block, time.monotonic())
            self._cond.notify_all()

    def collect(
        self,
        collect: Callable[[Mapping[int, Pending], float], dict[int, RoundResult]],
        timeout: float,
    ) -> dict[int, RoundResult]:
        """The round's reports by `collect(calls, timeout)` (the transport's), less those of
        the parties left out: their calls are cancelled, not waited for."""
        start = time.monotonic()
        gone = self.given_up(timeout + 1.0)
        for block in sorted(gone):
            log.info(
                "round %d: block %d left out by the heads that waited for it, or late to step; "
                "its report is not awaited",
                self._calls[block].round_id,
                block,
            )
            self._pending[block].future.cancel()
        if self._silence is not None and self._calls:
            round_id = next(iter(self._calls.values())).round_id
            self._silence.went_silent(gone, round_id)
            self._silence.done(round_id)
        rest = {b: p for b, p in self._pending.items() if b not in gone}
        return collect(rest, max(0.0, timeout - (time.monotonic() - start)))

    def given_up(self, timeout: float) -> set[int]:
        """Waits until every call is done, or the ones left are left out (returned), or
        `timeout` seconds passed (the undone calls are then the caller's to time out)."""
        end = time.monotonic() + timeout
        with self._cond:
            while True:
                waiting = {b for b, p in self._pending.items() if not p.done()}
                if not waiting:
                    return set()
                answers = {b: a for b in self._pending if (a := self._answer(b)) is not None}
                now = time.monotonic()
                late = {b: self._late_at(b) for b in waiting}
                if all(
                    trained_without(self._calls, answers, waiting, b) or late[b] <= now
                    for b in waiting
                ):
                    return waiting
                left = end - now
                if left <= 0:
                    return set()
                self._cond.wait(min(left, 1.0, *(t - now for t in late.values() if t > now)))

    def _late_at(self, block: int) -> float:
        """When `block` is late (`grace` after the last head it steps on answered): never
        while such a head still runs, or without heads to step on or a grace."""
        heads = [h for h in self._calls[block].grads_from if h in self._pending]
        if self._grace is None or not heads or any(h not in self._done_at for h in heads):
            return float("inf")
        return max(self._done_at[h] for h in heads) + self._grace

    def _answer(self, block: int) -> RoundResult | None:
        call = self._pending[block]
        if not call.done() or call.future.cancelled() or call.future.exception() is not None:
            return None
        try:
            return call.result(0)
        except VflError:  # a bad reply: the collect logs it
            return None
