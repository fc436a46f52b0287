"""The gRPC transport of the round engine: parallel fan-out to the parties with deadlines.

A party that fails, refuses or misses the deadline is absent from the answer, and the engine
runs the phase without it. Clients are rebuilt when a party re-registers at a new address.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import grpc
import numpy as np

from vfl_coordinator.absence import AbsenceNotices, RoundWaiter, Silence
from vfl_coordinator.config import Deadlines
from vfl_coordinator.party_client import PartyClient, Pending
from vfl_coordinator.registry import Registry
from vfl_core.errors import VflError
from vfl_core.methods.registry import step_spec
from vfl_core.protocol import (
    RUN_FINISHED,
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    PsiCall,
    RoundCall,
    RoundResult,
    ScoreCall,
    ScoreResult,
    ServingChoice,
    TrainCall,
    TrainResult,
)
from vfl_core.training.direct import AHEAD
from vfl_wire.channels import MAX_MESSAGE_BYTES
from vfl_wire.convert_direct import PeerAddress
from vfl_wire.v1 import vfl_pb2

log = logging.getLogger(__name__)
C = TypeVar("C")
R = TypeVar("R")

# Extra time the fan-out waits beyond a call's own deadline before giving up on the thread.
_SLACK_S = 1.0


# The calls of an alignment: a party that misses one is left out of it until heard from again.
ALIGNMENT_RPCS = frozenset({"IdHashes", "PsiBlind", "PsiApply", "PsiKeys"})


class GrpcTransport:
    def __init__(
        self,
        registry: Registry,
        run_id: str,
        deadlines: Deadlines,
        credentials: grpc.ChannelCredentials | None = None,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        wire_dtype: str = "float32",  # TrainConfig.wire_dtype: embeddings and gradients
        # TrainConfig.encrypt_relay: the parties' signed relay keys, passed on to them
        relay_keys: Callable[[], list[vfl_pb2.RelayKey]] | None = None,
    ) -> None:
        self.registry = registry
        self.relay_keys = relay_keys
        self.wire_dtype = wire_dtype
        self._interceptors = tuple(interceptors)
        self.run_id = run_id
        self.deadlines = deadlines
        # told to the parties with RUN_FINISHED (set by the runner once training chose it)
        self.serving_choice: ServingChoice | None = None
        self._credentials = credentials
        self._clients: dict[int, tuple[int, PartyClient]] = {}
        # registry generation of each block when last reported by rejoined()
        self._seen = {b: m.generation for b, m in registry.members().items()}
        # block -> registry.heard(block) when it last left an alignment call unanswered
        self._unaligned: dict[int, int] = {}
        # block -> the registry generation its last direct Round call was sent to
        self._round_generation: dict[int, int] = {}
        self._silence = Silence()  # direct-plane parties that went silent (a frozen process)

    def close(self) -> None:
        for _, client in self._clients.values():
            client.close()

    def client(self, block: int) -> PartyClient | None:
        member = self.registry.member(block)
        if member is None or not member.synced:  # unsynced: still rolling back its state
            return None
        cached = self._clients.get(block)
        if cached is not None and cached[0] == member.generation:
            return cached[1]
        if cached is not None:
            cached[1].close()
        client = PartyClient(
            member.address,
            self.run_id,
            member.info.party_id,
            self._credentials,
            self._interceptors,
            target_name=member.info.party_id if self._credentials is not None else None,
            wire_dtype=self.wire_dtype,
            rows=max(member.info.samples.values(), default=0),
            block=block,
            relay_keys=self.relay_keys,
        )
        self._clients[block] = (member.generation, client)
        return client

    # ------------------------------------------------------------------ Transport interface
    def infos(self) -> dict[int, PartyInfo]:
        return {b: m.info for b, m in self.registry.members().items()}

    def id_hashes(self, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
        return self._call("IdHashes", dict.fromkeys(blocks, split), PartyClient.id_hashes)

    def class_weights(self, block: int, split: str) -> np.ndarray | None:
        return self._call("ClassWeights", {block: split}, PartyClient.class_weights).get(block)

    def validation_strata(self, block: int) -> np.ndarray | None:
        strata = PartyClient.validation_strata
        return self._call("ClassWeights", {block: "train"}, strata).get(block)

    def embed(self, calls: dict[int, EmbedCall]) -> dict[int, np.ndarray]:
        return self._call("Embed", calls, PartyClient.embed)

    def fuse(self, calls: dict[int, FuseCall]) -> dict[int, FuseResult]:
        return self._call("Fuse", calls, PartyClient.fuse)

    def backward(self, calls: dict[int, BackwardCall]) -> set[int]:
        return set(self._call("Backward", calls, PartyClient.backward))

    def train(self, calls: dict[int, TrainCall]) -> Callable[[], dict[int, TrainResult]]:
        """Start the pipelined calls now; the function returned waits for them. Each call's
        deadline is its phases' deadlines added up."""
        pending = self._start(calls, lambda c, call: c.train(call, self._timeout(call)), "Train")
        longest = max((self._timeout(c) for c in calls.values()), default=0.0)
        return lambda: self._collect(pending, longest, "Train")

    def direct(self, calls: dict[int, RoundCall]) -> Callable[[], dict[int, RoundResult]]:
        """Start the direct-plane round calls now (vfl_core.training.direct); the function
        returned waits for the parties' reports. Each party is told who holds the blocks it
        sends to and hears from, and how long to wait for them: an embedding within the Embed
        deadline, a gradient within Embed + Fuse. A call may wait for the party's previous
        rounds first (the engine sends AHEAD rounds ahead): its deadline covers AHEAD + 1 rounds."""
        d = self.deadlines
        waits = {"embed_wait_s": d.embed, "grad_wait_s": d.embed + d.fuse}
        timeout = (AHEAD + 1) * (d.embed + d.fuse + d.backward)
        calls = {b: replace(c, after=self._turn(b, c.after), **waits) for b, c in calls.items()}
        return self._rounds(calls, timeout, absence=True)

    def _turn(self, block: int, after: int) -> int:
        """The round a party's call comes after, as far as its process knows: a party that
        registered again (a restarted process) never saw the rounds sent to its predecessor,
        so its first call comes after none (it would wait for a turn that never comes)."""
        member = self.registry.member(block)
        if member is None or self._round_generation.get(block) != member.generation:
            return -1
        return after

    def probe(self, targets: dict[int, tuple[int, ...]], wait_s: float) -> dict[int, set[int]]:
        """Each party of `targets` connects to the parties it names within `wait_s`; the blocks
        each reached (a party that did not answer is absent: vfl_coordinator.plane_choice)."""
        calls = {
            b: RoundCall(round_id=0, epoch=0, send_to=to, probe=True, embed_wait_s=wait_s)
            for b, to in targets.items()
        }
        reports = self._rounds(calls, wait_s + self.deadlines.embed)()
        return {b: set(r.reached) for b, r in reports.items()}

    def _rounds(
        self, calls: dict[int, RoundCall], timeout: float, absence: bool = False
    ) -> Callable[[], dict[int, RoundResult]]:
        """Start the Round calls; with `absence`, a call not sent or failing is announced to
        the round's other parties at once (vfl_coordinator.absence)."""
        members = self.registry.members()

        def peers(call: RoundCall) -> dict[int, PeerAddress]:
            blocks = {*call.send_to, *call.expect, *call.grads_from}
            blocks |= {b for s in (*call.steps_before, *call.steps_after) for b in s.grads_from}
            return {
                b: PeerAddress(members[b].info.party_id, members[b].address)
                for b in blocks
                if b in members
            }

        pending = self._start(
            calls,
            lambda c, call: c.round(call, peers(call), timeout),
            "Round",
        )
        if not absence or not calls:
            return lambda: self._collect(pending, timeout, "Round")
        for block in pending:  # (the generation whose client was just used)
            generation = self._clients[block][0]
            if self._round_generation.get(block, generation) != generation:
                # a new process: its predecessor's silence says nothing of it
                self._silence.heard(block, calls[block].round_id)
            self._round_generation[block] = generation
        clients = {b: self._clients[b][1] for b in pending}
        AbsenceNotices(calls, clients, self.deadlines.embed, self._silence).watch(pending)
        waiter = RoundWaiter(calls, pending, self._silence, self.deadlines.backward)
        return lambda: waiter.collect(lambda rest, t: self._collect(rest, t, "Round"), timeout)

    def _timeout(self, call: TrainCall) -> float:
        return self.deadlines.pipelined(len(call.embed), len(call.fuse), len(call.backward))

    def predict(self, calls: dict[int, PredictCall]) -> dict[int, np.ndarray]:
        return self._call("Predict", calls, PartyClient.predict)

    def score(self, block: int, call: ScoreCall) -> ScoreResult | None:
        return self._call("Score", {block: call}, PartyClient.score).get(block)

    def checkpoint(self, round_id: int, blocks: list[int]) -> set[int]:
        saved = self._call("Checkpoint", dict.fromkeys(blocks, round_id), PartyClient.checkpoint)
        return {b for b, ok in saved.items() if ok}

    def snapshot(self, round_id: int, blocks: list[int], restore: bool) -> set[int]:
        t, kind = self.deadlines.checkpoint, "restore" if restore else "keep"
        done = self._fan_out(
            {b: round_id for b in blocks}, lambda c, r: c.checkpoint(r, t, kind), t, "Checkpoint"
        )
        return {b for b, ok in done.items() if ok}

    def rejoined(self) -> set[int]:
        """Blocks whose party registered again (new process or address) and is synchronised,
        or registered for the first time after training started (a quorum start), or was
        heard from (a heartbeat) since it left an alignment call unanswered: a party frozen
        while the others aligned never registers again, it only heartbeats once thawed, and
        must be aligned again all the same."""
        out = set()
        members = self.registry.members()
        for block, member in members.items():
            seen = self._seen.get(block, 0)
            if member.synced and member.generation > seen:
                self._seen[block] = member.generation
                out.add(block)
        for block, heard in list(self._unaligned.items()):
            if self.registry.heard_since(block, heard):
                del self._unaligned[block]
                out.add(block)
        return out

    def psi_blind(self, split: str, session: str, blocks: list[int]) -> dict[int, list[bytes]]:
        infos = self.infos()
        t = self.deadlines.seconds(
            "PsiBlind", points=max(infos[b].samples.get(split, 0) for b in blocks)
        )
        return self._fan_out(
            {b: split for b in blocks}, lambda c, s: c.psi_blind(s, session, t), t, "PsiBlind"
        )

    def psi_apply(self, calls: dict[int, PsiCall]) -> dict[int, list[bytes]]:
        points = max(len(c.points) for c in calls.values())
        return self._call("PsiApply", calls, PartyClient.psi_apply, points=points)

    def psi_keys(self, calls: dict[int, PsiCall]) -> set[int]:
        # A party that registered again lacks them: the engine sends them again (its rejoins).
        return set(self._call("PsiKeys", calls, PartyClient.psi_keys))

    def step(self, method: str, step: str, calls: Mapping[int, Any]) -> dict[int, Any]:
        """A method's step (vfl_core.methods): its deadline is that of the phase the step
        declares, Predict's for a call the step says is an inference call."""
        spec = step_spec(method, step)
        training = any(spec.training(c) for c in calls.values())
        t = float(getattr(self.deadlines, spec.phase if training else spec.inference_phase))
        return self._fan_out(calls, lambda c, call: c.step(method, step, call, t), t, step)

    def shutdown(self, blocks: Iterable[int], reason: str) -> set[int]:
        """Tell `blocks` the run ended; returns those that heard it. A finished run's
        `serving_choice` (when set) goes with it, for the label parties' serving bundles."""
        choice = self.serving_choice if reason == RUN_FINISHED else None

        def tell(client: PartyClient, why: str, timeout: float) -> Pending[None]:
            return client.shutdown(why, timeout, choice)

        return set(self._call("Shutdown", dict.fromkeys(blocks, reason), tell))

    # ------------------------------------------------------------------ fan-out
    def _call(
        self,
        rpc: str,
        calls: Mapping[int, C],
        method: Callable[[PartyClient, C, float], Pending[R]],
        training: bool = True,
        points: int = 0,
    ) -> dict[int, R]:
        """`method` of every party's client, with the deadline of `rpc` (Deadlines.seconds)."""
        t = self.deadlines.seconds(rpc, training=training, points=points)
        return self._fan_out(calls, lambda c, call: method(c, call, t), t, rpc)

    def _fan_out(
        self,
        calls: Mapping[int, C],
        method: Callable[[PartyClient, C], Pending[R]],
        timeout: float,
        rpc: str,
    ) -> dict[int, R]:
        """Start every call (grpc futures, from this thread), then wait for all."""
        answers = self._collect(self._start(calls, method, rpc), timeout, rpc)
        if rpc in ALIGNMENT_RPCS:
            for block in calls:
                if block in answers:
                    self._unaligned.pop(block, None)
                else:
                    self._unaligned.setdefault(block, self.registry.heard(block))
        return answers

    def _start(
        self, calls: Mapping[int, C], method: Callable[[PartyClient, C], Pending[R]], rpc: str
    ) -> dict[int, Pending[R]]:
        pending = {}
        for block, call in sorted(calls.items()):
            client = self.client(block)
            if client is None:
                continue
            try:
                pending[block] = method(client, call)
            except VflError as err:  # a request that cannot be encoded (a local bug)
                log.warning("%s to block %d not sent: %s", rpc, block, err)
        return pending

    def _collect(self, pending: Mapping[int, Pending[R]], timeout: float, rpc: str) -> dict[int, R]:
        """The answers that arrive within the deadline (grpc ends each call at its own)."""
        deadline = time.monotonic() + timeout + _SLACK_S
        answers: dict[int, R] = {}
        for block, call in pending.items():
            try:
                answers[block] = call.result(max(0.0, deadline - time.monotonic()))
            except grpc.FutureTimeoutError:
                log.warning("%s to block %d: no answer within %.1fs", rpc, block, timeout)
                call.future.cancel()
            except grpc.RpcError as err:
                log.warning("%s to block %d failed: %s", rpc, block, self._failure(block, rpc, err))
            except VflError as err:
                log.warning("%s to block %d: bad reply: %s", rpc, block, err)
        return answers

    def _failure(self, block: int, rpc: str, err: grpc.RpcError) -> str:
        """What went wrong, naming the party; a reply over its call's limit says so."""
        code, details = err.code(), err.details() or ""
        member = self.registry.member(block)
        party = member.info.party_id if member is not None else "gone"
        if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
            cached = self._clients.get(block)
            limits = cached[1].reply_limits if cached is not None else {}
            limit = limits.get(rpc, MAX_MESSAGE_BYTES)  # a method step: the channel's limit
            return (
                f"party {party!r} sent a {rpc} reply over the {limit} bytes such a reply may "
                f"carry; refused unread ({details[:120]})"
            )
        return f"party {party!r}: {code.name} {details[:200]}"
