"""The party's end of the direct data plane: the `DataPlane` service that receives the other
parties' embeddings and gradients, and the links that send its own (vfl_core.training.
direct_party.Links over gRPC). No learning logic: messages in, arrays out.

Identity. With mutual TLS every Push arrives with the sender's certificate name (the guard,
vfl_wire.security, refuses a caller without a certificate of the federation's CA, and the
coordinator's and operator's certificates). The block a Push claims must be held by that name:
the coordinator's Round calls say which party holds each block of the round, and a Push whose
certificate is not that block's party is refused with PERMISSION_DENIED (a Push that arrives
before its round's call is kept with its sender's name and checked when the round takes it).
A party sends only to the name the Round call gives (`grpc.ssl_target_name_override`), so its
tensors reach that party's certificate or nobody. Plaintext (--insecure): there is no identity
to check; the run id in the header is all a Push must match, and anyone who can reach the port
could inject tensors (as anyone could act as a party on the relay).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass, replace

import grpc
import numpy as np

from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.training.direct_party import VALIDATION
from vfl_wire import convert
from vfl_wire.convert_direct import PeerAddress, Push, push_from_proto, push_to_proto
from vfl_wire.security import Security, current_peer
from vfl_wire.status import PermissionError_, rpc_errors
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

log = logging.getLogger(__name__)

WINDOW = 8  # rounds ahead of the oldest one still wanted that a Push may be for
MAX_ITEMS = 512  # pushes kept at once (peers cannot fill the party's memory)
PER_BLOCK = 2 * (WINDOW + 1)  # of them from one block (an embedding and a gradient per round)
# validation batches of one block kept at once (vfl_core.training.direct_eval.MAX_BATCHES)
PER_BLOCK_VALIDATION = 64
SEND_TIMEOUT_S = 30.0  # a Push that is not through by then is given up (its round has moved on)
# A Push that could not reach its party is sent once more, waiting for the link this long:
# a connection that failed once (a handshake cut short on a loaded machine) is back after
# grpc's reconnect backoff (1 s, then 1.6 s), a party that is gone is not
RETRY_S = 5.0


class Mailbox:
    """What the other parties pushed, by (kind, round, block), until the round takes it."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, int, int], tuple[np.ndarray | None, str | None]] = {}
        self._floor = -1  # rounds below it are over: their pushes are refused
        self._current = -1  # the latest round begun: pushes up to WINDOW rounds ahead of it
        # (round, block): will push nothing (more) for that round, as the coordinator said
        # (Absent) or a push to it failed: nobody waits for it
        self._absent: set[tuple[int, int]] = set()
        # rounds whose Round call ended before the party ran them to the end (the coordinator
        # gave up on them: a thawed party): their waits end at once
        self._abandoned: set[int] = set()
        self._horizon = -1  # the latest round whose Round call has arrived (maybe not begun)
        self._cond = threading.Condition()

    def put(self, push: Push, sender: str | None) -> None:
        """Keep a push. A training push must be for a round of the window; a validation push
        (keyed by its request id, not a round) only counts against its own limit."""
        with self._cond:
            validation = push.kind == VALIDATION
            top = max(self._current, self._horizon)  # the latest round begun or called
            last = top + WINDOW
            ahead = self._current < 0 or push.round_id <= last  # none begun: any round
            if not validation and (push.round_id < self._floor or not ahead):
                raise ProtocolError(
                    f"push for round {push.round_id}: this party takes rounds "
                    f"{self._floor}..{last} now"
                )
            limit = PER_BLOCK_VALIDATION if validation else PER_BLOCK
            mine = sum(
                1 for k in self._items if k[2] == push.block and (k[0] == VALIDATION) == validation
            )
            if len(self._items) >= MAX_ITEMS or mine >= limit:
                raise ProtocolError(f"push of block {push.block}: too many pushes kept already")
            self._items[(push.kind, push.round_id, push.block)] = (push.tensor, sender)
            self._cond.notify_all()

    def start(self, round_id: int, oldest: int | None = None) -> None:
        """Round `round_id` begins: pushes of earlier rounds are dropped and refused, except
        from round `oldest` on (with bounded staleness: the earliest round the party has
        embedded and still has to step)."""
        with self._cond:
            self._current = max(self._current, round_id)
            self._floor = max(self._floor, round_id if oldest is None else min(oldest, round_id))
            for key in [k for k in self._items if k[1] < self._floor and k[0] != VALIDATION]:
                del self._items[key]
            self._absent = {a for a in self._absent if a[0] >= self._floor}
            self._abandoned = {r for r in self._abandoned if r >= self._floor}

    def arrived(self, round_id: int) -> None:
        """Round `round_id`'s call has arrived (it may wait for the rounds before it): its
        peers' pushes are taken though this party's rounds lag behind (a thawed party still
        finishing a round the others are long past)."""
        with self._cond:
            self._horizon = max(self._horizon, round_id)

    def abandon(self, round_id: int) -> None:
        """Round `round_id`'s call ended (answered, cancelled or past its deadline): nothing
        more is waited for in it."""
        with self._cond:
            if round_id >= self._floor:
                self._abandoned.add(round_id)
                self._cond.notify_all()

    def absent(self, round_id: int, blocks: Collection[int]) -> None:
        """`blocks` push nothing more for round `round_id`: a wait for them ends now (what
        they pushed before stays). Rounds outside the window are ignored."""
        with self._cond:
            top = max(self._floor, self._current, self._horizon)
            if round_id < self._floor or (self._current >= 0 and round_id > top + WINDOW):
                return
            self._absent.update((round_id, b) for b in blocks)
            self._cond.notify_all()

    def is_absent(self, round_id: int, block: int) -> bool:
        with self._cond:
            return (round_id, block) in self._absent

    def start_validation(self, first_request: int) -> None:
        """A validation from request `first_request` on begins: earlier ones' pushes (left by
        a validation that gave up on them) are dropped."""
        with self._cond:
            for key in [k for k in self._items if k[0] == VALIDATION and k[1] < first_request]:
                del self._items[key]

    def take(
        self, kind: str, round_id: int, senders: Collection[int], timeout: float
    ) -> dict[int, tuple[np.ndarray | None, str | None]]:
        """The pushes of `senders` for the round that arrive within `timeout` seconds."""
        end = time.monotonic() + timeout
        wanted = {(kind, round_id, b) for b in senders}

        def waiting() -> bool:
            if kind != VALIDATION and round_id in self._abandoned:
                return False
            return any(
                k not in self._items and (round_id, k[2]) not in self._absent for k in wanted
            )

        with self._cond:
            while waiting():
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return {key[2]: self._items.pop(key) for key in wanted if key in self._items}


class PeerLinks:
    """A party's links to the others of its run: Pushes out as gRPC futures (a send never
    waits for the receiver), what arrived from the mailbox, each checked against the round's
    holder of the block."""

    def __init__(self, party_id: str, block: int, security: Security, mailbox: Mailbox) -> None:
        self.party_id = party_id
        self.block = block
        self.security = security
        self.mailbox = mailbox
        self.run_id = ""
        self.wire = "float32"
        self.enabled = False  # the run trains on the direct data plane
        self.peers: dict[int, PeerAddress] = {}  # block -> its party, as the last Round said
        self._stubs: dict[PeerAddress, tuple[grpc.Channel, vfl_pb2_grpc.DataPlaneStub]] = {}
        self._closed = False
        self._lock = threading.Lock()

    def attach(self, run_id: str, wire: str, enabled: bool) -> None:
        """The run the party joined: Pushes must name it, and are taken only if it trains on
        the direct data plane (`enabled`); tensors travel in its wire dtype."""
        with self._lock:
            self.run_id, self.wire, self.enabled = run_id, wire, enabled

    def start(
        self, peers: dict[int, PeerAddress], round_id: int, oldest: int | None = None
    ) -> None:
        """A Round call begins: who holds the blocks it sends to and hears from (Mailbox.start)."""
        with self._lock:
            self.peers.update(peers)
        self.mailbox.start(round_id, oldest)

    def holder(self, block: int) -> str | None:
        with self._lock:
            peer = self.peers.get(block)
        return None if peer is None else peer.party_id

    # ------------------------------------------------------------------ Links
    def send(self, kind: str, round_id: int, to: int, tensor: np.ndarray | None) -> None:
        with self._lock:
            peer = self.peers[to]
            header = convert.header(self.run_id, peer.party_id)
            wire = self.wire
        request = push_to_proto(header, Push(round_id, self.block, kind, tensor), wire)
        what = f"{kind} of round {round_id} to block {to}"
        self._push(peer, request, _Sent(what, round_id, to, kind))

    def _push(self, peer: PeerAddress, request: vfl_pb2.PushRequest, sent: _Sent) -> None:
        # a future, not a thread per push: a push waits a whole round trip for its Ack, and
        # the round's next pushes must not wait for it. The second try waits for the link.
        timeout = RETRY_S if sent.retried else SEND_TIMEOUT_S
        future = self._stub(peer).Push.future(
            request, timeout=timeout, wait_for_ready=sent.retried or None
        )
        future.add_done_callback(lambda f: self._sent(f, peer, request, sent))

    def _sent(
        self, future: grpc.Future, peer: PeerAddress, request: vfl_pb2.PushRequest, sent: _Sent
    ) -> None:
        """A push that could not reach its party is sent once more (RETRY_S); one that fails
        is logged, and one that could not reach its party at all (gone, or not listening)
        makes that party absent from the round here: nothing is waited for from a party that
        cannot be reached."""
        err = future.exception()
        unreached = isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.UNAVAILABLE
        with self._lock:
            closed = self._closed
        if unreached and not sent.retried and not closed:
            log.info("%s: UNAVAILABLE, sent again within %gs", sent.what, RETRY_S)
            try:
                self._push(peer, request, replace(sent, retried=True))
                return
            except ValueError:  # the links closed meanwhile (the run ended): nothing to send
                pass
        prefix = f"{sent.what}: UNAVAILABLE, then again" if sent.retried else sent.what
        _log_failure(future, prefix)
        if (unreached or (sent.retried and err is not None)) and sent.kind != VALIDATION:
            self.mailbox.absent(sent.round_id, (sent.to,))

    def receive(
        self, kind: str, round_id: int, senders: Collection[int], timeout: float
    ) -> dict[int, np.ndarray | None]:
        out = {}
        for block, (tensor, sender) in self.mailbox.take(kind, round_id, senders, timeout).items():
            holder = self.holder(block)
            if self.security.secure and sender != holder:
                log.warning(
                    "round %d: %s claimed by %r, block %d is %r's: dropped",
                    round_id,
                    kind,
                    sender,
                    block,
                    holder,
                )
                continue
            out[block] = tensor
        for block in sorted(set(senders) - out.keys()):
            why = (
                "absent" if self.mailbox.is_absent(round_id, block) else f"not within {timeout:g}s"
            )
            log.info("round %d: no %s from block %d (%s): left out", round_id, kind, block, why)
        return out

    def reach(self, blocks: Collection[int], timeout: float) -> tuple[int, ...]:
        """The blocks whose party this one connects to (TLS handshake included) in time."""
        with self._lock:
            peers = {b: self.peers[b] for b in blocks if b in self.peers}
        futures = {b: grpc.channel_ready_future(self._channel(p)) for b, p in peers.items()}
        end, reached = time.monotonic() + timeout, []
        for block, future in sorted(futures.items()):
            try:
                future.result(timeout=max(0.0, end - time.monotonic()))
                reached.append(block)
            except grpc.FutureTimeoutError:
                future.cancel()
                log.warning("probe: block %d (%s) not reached", block, peers[block].address)
        return tuple(reached)

    def _stub(self, peer: PeerAddress) -> vfl_pb2_grpc.DataPlaneStub:
        self._channel(peer)
        with self._lock:
            return self._stubs[peer][1]

    def _channel(self, peer: PeerAddress) -> grpc.Channel:
        with self._lock:
            cached = self._stubs.get(peer)
            if cached is None:
                channel = self.security.channel(peer.address, peer.party_id)
                cached = self._stubs[peer] = (channel, vfl_pb2_grpc.DataPlaneStub(channel))
            return cached[0]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for channel, _ in self._stubs.values():
                channel.close()
            self._stubs.clear()


@dataclass(frozen=True)
class _Sent:
    """One push in flight: what it carries (for the log), its round, the block it goes to,
    and whether it is the second try."""

    what: str
    round_id: int
    to: int
    kind: str
    retried: bool = False


def _log_failure(future: grpc.Future, what: str) -> None:
    err = future.exception()
    if err is not None:
        code = err.code().name if isinstance(err, grpc.RpcError) else type(err).__name__
        details = err.details() if isinstance(err, grpc.RpcError) else str(err)
        log.warning("%s: %s %s", what, code, (details or "")[:200])


class DataPlaneServicer(vfl_pb2_grpc.DataPlaneServicer):
    """Receives Pushes into the mailbox; never runs learning code or waits on the party."""

    def __init__(self, links: PeerLinks) -> None:
        self.links = links

    def Push(self, request, context):
        with rpc_errors(context, "Push"):
            links = self.links
            try:
                convert.check_header(request.header, run_id=links.run_id, party_id=links.party_id)
            except ProtocolError as err:
                raise PermissionError_(str(err)) from None
            if not links.enabled:
                raise ConfigError("push: this party's run does not use the direct data plane")
            sender = current_peer()
            holder = links.holder(request.block)
            if links.security.secure and holder is not None and sender != holder:
                raise PermissionError_(
                    f"push for block {request.block} from {sender!r}: block "
                    f"{request.block} is {holder!r}'s"
                )
            links.mailbox.put(push_from_proto(request, links.wire), sender)
            return vfl_pb2.Ack()
        raise AssertionError("unreachable: rpc_errors aborts")  # pragma: no cover
