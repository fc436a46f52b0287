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


class AbsenceNotices:
    """Watches one direct round's Round calls; tells the parties that wait for a failed one."""

    def __init__(
        self,
        calls: Mapping[int, RoundCall],
        clients: Mapping[int, PartyClient],
        timeout: float,
    ) -> None:
        self.round_id = next(iter(calls.values())).round_id
        self._calls = dict(calls)
        self._clients = dict(clients)
        self._timeout = timeout
        self._told: set[int] = set()  # blocks already announced absent
        self._lock = threading.Lock()

    def watch(self, pending: Mapping[int, Pending[RoundResult]]) -> None:
        """Announce the calls not sent now, and each call that fails when it fails."""
        unsent = set(self._calls) - set(pending)
        if unsent:
            self.tell(unsent, "its Round call was not sent (no synchronised party)")
        for block, call in pending.items():
            call.future.add_done_callback(lambda f, b=block: self._done(b, f))

    def _done(self, block: int, future: grpc.Future) -> None:
        if future.cancelled():
            return
        err = future.exception()
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


def left_out(
    calls: Mapping[int, RoundCall], answers: Mapping[int, RoundResult], waiting: Collection[int]
) -> set[int]:
    """`waiting` (the callees not answered yet) when the round already trained without every
    one of them, else nothing: the heads that wait for each one's embedding have all answered,
    at least one fused, and none used it. Such a party missed the round's embed deadline as
    the heads saw it, as on the relay a party that misses the Embed deadline is out of its
    round: its report can change nothing, and the coordinator does not wait for it (a frozen
    party's call would hold the engine to the call's deadline, several rounds long)."""
    for block in waiting:
        heads = [h for h, c in calls.items() if h != block and block in c.expect]
        if any(h in waiting for h in heads):
            return set()
        fused = [answers[h] for h in heads if h in answers and answers[h].loss is not None]
        if not fused or any(block in r.used for r in fused):
            return set()
    return set(waiting)


class RoundWaiter:
    """Collects one direct round's reports: each as it comes, and none from a party that the
    round already trained without (`left_out`)."""

    def __init__(self, calls: Mapping[int, RoundCall], pending: Mapping[int, Pending]) -> None:
        self._calls = calls
        self._pending = pending
        self._cond = threading.Condition()
        for call in pending.values():
            call.future.add_done_callback(self._wake)

    def _wake(self, _future: grpc.Future) -> None:
        with self._cond:
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
                "round %d: block %d left out by the heads that waited for it; its report is "
                "not awaited",
                self._calls[block].round_id,
                block,
            )
            self._pending[block].future.cancel()
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
                gone = left_out(self._calls, answers, waiting)
                if gone:
                    return gone
                left = end - time.monotonic()
                if left <= 0:
                    return set()
                self._cond.wait(min(left, 1.0))

    def _answer(self, block: int) -> RoundResult | None:
        call = self._pending[block]
        if not call.done() or call.future.cancelled() or call.future.exception() is not None:
            return None
        try:
            return call.result(0)
        except VflError:  # a bad reply: the collect logs it
            return None
