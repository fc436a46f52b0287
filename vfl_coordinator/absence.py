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
from collections.abc import Collection, Mapping

import grpc

from vfl_coordinator.party_client import PartyClient, Pending
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
