"""The `Party` gRPC service: validate and convert each message, call the Party, convert back.

No learning logic lives here. Every call on the Party runs on one dedicated thread, in arrival
order: a Party is not thread-safe (its round state and optimisers change with each call), and
its arithmetic must not depend on which gRPC worker thread took the call.

That thread sets torch's thread count itself. `torch.set_num_threads` on the main thread does
not reach a thread started later: MKL there computes with its default team (every core), which
rounds some matrix products differently from one thread (an 11-row batch through a party's MLP,
for one). The parties of a real federation then drifted an ulp from the same run in process
(tests/test_faults_grpc.py, which now compares exactly) and `vfl-client --threads` was not
honoured where the work is done.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import grpc
import torch

from vfl_client.data_plane import PeerLinks
from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.methods.registry import step_spec
from vfl_core.methods.steps import decode_call, encode_result
from vfl_core.protocol import ServingChoice
from vfl_core.training.direct_eval_party import run_call
from vfl_core.training.party import Party
from vfl_wire import convert, convert_direct, records, relay_messages
from vfl_wire.relay_crypto import RelayCrypto
from vfl_wire.status import PermissionError_, rpc_errors
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

log = logging.getLogger(__name__)
R = TypeVar("R")

# How long an RPC that arrives between registration and the party's construction waits for it.
READY_WAIT_S = 30.0
# How long a direct Round call waits for the call of the round before it (RoundCall.after):
# they leave the coordinator back to back or a round apart (vfl_core.training.direct); a call
# not here by then is not coming (lost, or meant for a process that has since restarted).
TURN_WAIT_S = 1.0
# The run's data planes under which the party serves Round calls and takes pushes ("auto": the
# coordinator chooses at run start, vfl_coordinator.plane_choice)
DIRECT_PLANES = ("direct", "auto")


def class_weights_refusal(balance: str, split: str) -> str | None:
    """Why a party does not send its class weights, or None. The weights are the inverse class
    frequency of every row: they tell the coordinator each row's class (most of them, whenever
    class sizes differ). Only a run that resamples by class needs them, and only for training."""
    if balance != "resample":
        return "class weights: this run does not balance classes (--balance resample)"
    if split != "train":
        return f"class weights: only for the train split, not {split!r}"
    return None


def strata_refusal(validation_split: str, split: str) -> str | None:
    """Why a party does not send its stratified validation draws, or None: only a run that
    stratifies its validation split asks, and only of the train split."""
    if validation_split != "stratified":
        return "validation draws: this run does not stratify (--validation-split stratified)"
    if split != "train":
        return f"validation draws: only for the train split, not {split!r}"
    return None


class PartyServicer(vfl_pb2_grpc.PartyServicer):
    def __init__(self, party_id: str, threads: int = 1) -> None:
        self.party_id = party_id
        self.shutdown = threading.Event()
        self.shutdown_reason = ""
        self.serving_choice: ServingChoice | None = None  # told with a finished run's Shutdown
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._worker = ThreadPoolExecutor(
            max_workers=1,
            thread_name_prefix=f"{party_id}-compute",
            initializer=torch.set_num_threads,
            initargs=(threads,),
        )
        self._party: Party | None = None
        self._run_id: str | None = None
        # saves a periodic checkpoint (party, round) -> saved? (vfl_client.host); None: never
        self.on_checkpoint: Callable[[Party, int], bool] | None = None
        # writes the state a party keeps for early stopping to disk (vfl_client.host); None: never
        self.on_keep: Callable[[Party, int], None] | None = None
        # the party's end of the encrypted relay (a party with a TLS certificate has one); used
        # when the run's config says encrypt_relay
        self.relay: RelayCrypto | None = None
        # the party's end of the direct data plane (vfl_client.data_plane); used when the run's
        # config says data_plane "direct"
        self.links: PeerLinks | None = None
        self._submitted = -1  # the last direct round handed to the worker (RoundCall.after)
        self._validated = -1  # the round after which the last validation call was handed over
        self._turn = threading.Condition()

    def attach(self, party: Party, run_id: str) -> None:
        with self._lock:
            self._party, self._run_id = party, run_id
        if self.links is not None:
            direct = party.config.data_plane in DIRECT_PLANES
            self.links.attach(run_id, party.config.wire_dtype, direct)
        self._ready.set()

    @property
    def party(self) -> Party | None:
        return self._party

    def detach(self) -> None:
        """Forget the party: it is not to be served or saved (its checkpoints were refused)."""
        self._ready.clear()
        with self._lock:
            self._party = None

    def _serve(
        self,
        context: grpc.ServicerContext,
        rpc: str,
        header: vfl_pb2.Header,
        handler: Callable[[Party], R],
        submitted: Callable[[], None] | None = None,
    ) -> R:
        with rpc_errors(context, rpc):
            if not self._ready.wait(READY_WAIT_S):
                raise ProtocolError(f"party {self.party_id} is not registered with a run yet")
            try:
                convert.check_header(header, run_id=self._run_id, party_id=self.party_id)
            except ProtocolError as err:
                raise PermissionError_(str(err)) from None
            future = self._worker.submit(self._call, handler)
            if submitted is not None:
                submitted()
            return future.result()
        raise AssertionError("unreachable: rpc_errors aborts")  # pragma: no cover

    def _call(self, handler: Callable[[Party], R]) -> R:
        with self._lock:  # attach/detach may swap the party from another thread
            assert self._party is not None
            return handler(self._party)

    def _opened(self, p: Party, rpc: str, request) -> RelayCrypto | None:
        """With an encrypted relay: the request's sealed tensors opened in place, and the relay
        to seal the reply with (vfl_wire.relay_messages); else None."""
        if not p.config.encrypt_relay:
            return None
        if self.relay is None:
            raise ConfigError(
                "this run encrypts its relay (--encrypt-relay), which needs the party's TLS "
                "certificate: start vfl-client with --tls-dir"
            )
        assert self._run_id is not None
        self.relay.start(self._run_id)
        relay_messages.open_request(self.relay, rpc, request, p.config.wire_dtype)
        return self.relay

    @staticmethod
    def _sealed(relay: RelayCrypto | None, rpc: str, request, reply: R) -> R:
        if relay is not None:
            relay_messages.seal_reply(relay, rpc, request, reply)
        return reply

    def IdHashes(self, request, context):
        def run(p: Party) -> vfl_pb2.IdHashesReply:
            return convert.id_hashes_to_proto(p.id_hashes(convert.check_split(request.split)))

        return self._serve(context, "IdHashes", request.header, run)

    def ClassWeights(self, request, context):
        def run(p: Party) -> vfl_pb2.ClassWeightsReply:
            split = convert.check_split(request.split)
            if request.purpose == "validation":
                refusal = strata_refusal(p.config.validation_split, split)
            elif request.purpose:
                refusal = f"class weights: unknown purpose {request.purpose!r}"
            else:
                refusal = class_weights_refusal(p.config.balance, split)
            if refusal is not None:
                raise ConfigError(refusal)
            weights = p.validation_strata() if request.purpose else p.class_weights(split)
            return convert.class_weights_to_proto(
                None if weights is None else weights.astype("float32")
            )

        return self._serve(context, "ClassWeights", request.header, run)

    def Embed(self, request, context):
        def run(p: Party) -> vfl_pb2.EmbedReply:
            relay = self._opened(p, "Embed", request)
            call = convert.embed_call_from_proto(request)
            reply = convert.embedding_to_proto(call.round_id, p.embed(call), p.config.wire_dtype)
            return self._sealed(relay, "Embed", request, reply)

        return self._serve(context, "Embed", request.header, run)

    def Fuse(self, request, context):
        def run(p: Party) -> vfl_pb2.FuseReply:
            wire = p.config.wire_dtype
            relay = self._opened(p, "Fuse", request)
            call = convert.fuse_call_from_proto(request, wire=wire)
            reply = convert.fuse_result_to_proto(p.fuse(call), call.round_id, wire)
            return self._sealed(relay, "Fuse", request, reply)

        return self._serve(context, "Fuse", request.header, run)

    def Backward(self, request, context):
        def run(p: Party) -> vfl_pb2.Ack:
            self._opened(p, "Backward", request)
            p.backward(convert.backward_call_from_proto(request, wire=p.config.wire_dtype))
            return vfl_pb2.Ack()

        return self._serve(context, "Backward", request.header, run)

    def Train(self, request, context):
        def run(p: Party) -> vfl_pb2.TrainReply:
            wire = p.config.wire_dtype
            relay = self._opened(p, "Train", request)
            call = convert.train_call_from_proto(request, wire=wire)
            reply = convert.train_result_to_proto(p.train(call), wire)
            return self._sealed(relay, "Train", request, reply)

        return self._serve(context, "Train", request.header, run)

    def Checkpoint(self, request, context):
        def run(p: Party) -> vfl_pb2.CheckpointReply:
            round_id = convert.checkpoint_call_from_proto(request)
            kind = convert.checkpoint_kind_from_proto(request)
            if kind == "keep":
                done = p.keep_snapshot(round_id)
                if self.on_keep is not None:
                    self.on_keep(p, round_id)
            elif kind == "restore":
                done = p.restore_snapshot(round_id)
            else:
                done = self.on_checkpoint is not None and self.on_checkpoint(p, round_id)
            return convert.checkpoint_reply_to_proto(round_id, done)

        return self._serve(context, "Checkpoint", request.header, run)

    def Predict(self, request, context):
        def run(p: Party) -> vfl_pb2.PredictReply:
            relay = self._opened(p, "Predict", request)
            call = convert.predict_call_from_proto(request, wire=p.config.wire_dtype)
            reply = convert.probabilities_to_proto(call.request_id, p.predict(call))
            return self._sealed(relay, "Predict", request, reply)

        return self._serve(context, "Predict", request.header, run)

    def Score(self, request, context):
        def run(p: Party) -> vfl_pb2.ScoreReply:
            self._opened(p, "Score", request)  # a blind prediction's probabilities
            return convert.score_reply_to_proto(p.score(convert.score_call_from_proto(request)))

        return self._serve(context, "Score", request.header, run)

    def Shutdown(self, request, context):
        def run(p: Party) -> vfl_pb2.Ack:
            log.info("coordinator asked to shut down: %s", request.reason)
            if request.HasField("choice"):  # a finished run: for the serving bundle
                self.serving_choice = convert.serving_choice_from_proto(request.choice)
            self.shutdown_reason = request.reason
            self.shutdown.set()
            return vfl_pb2.Ack()

        return self._serve(context, "Shutdown", request.header, run)

    # ------------------------------------------------------------------ PSI alignment
    def PsiBlind(self, request, context):
        def run(p: Party) -> vfl_pb2.PsiPoints:
            split, session = convert.psi_blind_from_proto(request)
            return convert.psi_points_to_proto(p.psi_blind(split, session))

        return self._serve(context, "PsiBlind", request.header, run)

    def PsiApply(self, request, context):
        def run(p: Party) -> vfl_pb2.PsiPoints:
            call = convert.psi_apply_from_proto(request)
            return convert.psi_points_to_proto(p.psi_apply(call.split, call.session, call.points))

        return self._serve(context, "PsiApply", request.header, run)

    def PsiKeys(self, request, context):
        def run(p: Party) -> vfl_pb2.Ack:
            call = convert.psi_keys_from_proto(request)
            p.set_alignment_keys(call.split, call.points)
            return vfl_pb2.Ack()

        return self._serve(context, "PsiKeys", request.header, run)

    # ------------------------------------------------------------------ a method's own steps
    def Step(self, request, context):
        """Any method's step: its schema checks the message before its handler runs."""

        def run(p: Party) -> vfl_pb2.StepReply:
            step = step_spec(request.method, request.step)
            header, record = records.request_from_proto(request, step.request)
            dims = p.spec.step_dims(p.config) if p.config.method == request.method else {}
            call, _ = decode_call(step, header, record, dims)
            result = p.step(request.method, request.step, call)
            return records.step_reply(request, encode_result(step, result))

        return self._serve(context, "Step", request.header, run)

    # ------------------------------------------------------------------ the direct data plane
    def Round(self, request, context):
        """A direct round (vfl_core.training.direct_party): the party's tensors go to and come
        from the other parties over the links; the reply is status only. Rounds run in the
        order the coordinator sent them: this one after the round `after` was handed over."""

        def run(p: Party) -> vfl_pb2.RoundReply:
            if not context.is_active():  # the coordinator gave up on it (a thawed party)
                raise ProtocolError(f"round {request.round_id}: its deadline has passed")
            if self.links is None or p.config.data_plane not in DIRECT_PLANES:
                raise ProtocolError("this run does not train on the direct data plane")
            call, peers = convert_direct.round_call_from_proto(request)
            # with staleness, the gradients of the rounds it has yet to step are still wanted
            oldest = p.oldest_unstepped() if p.config.staleness else None
            self.links.start(peers, call.round_id, oldest)
            if call.evaluation is not None and call.evaluation.batches:
                self.links.mailbox.start_validation(call.evaluation.batches[0].embed.round_id)
            result = run_call(p, call, self.links)
            keep = None if call.evaluation is None else call.evaluation.keep
            if keep is not None and p.kept_state(keep) is not None and self.on_keep is not None:
                self.on_keep(p, keep)  # on disk too, as after a keep call
            return convert_direct.round_result_to_proto(result)

        if request.probe:  # no round of the run: it must not move the turn that orders them
            return self._serve(context, "Round", request.header, run)
        answered: list[bool] = []
        if self.links is not None:  # (a thawed party: the coordinator gave up on old rounds)
            mailbox, round_id = self.links.mailbox, request.round_id
            mailbox.arrived(round_id)
            # only a call that ended unanswered gives its round up: with --staleness a round
            # answered after its embedding still waits for its gradients in a later call
            context.add_callback(lambda: answered or mailbox.abandon(round_id))
        wait = min(TURN_WAIT_S, context.time_remaining() or 0.0)
        self._await_turn(request.after, wait, request.after_validation)
        validation = request.HasField("evaluation")
        reply = self._serve(
            context, "Round", request.header, run, self._handed(request.round_id, validation)
        )
        answered.append(True)
        return reply

    def Absent(self, request, context):
        """Blocks that push nothing more for a round (their Round calls failed): the round's
        waits for them end now. Served at once, beside the round that waits on the worker."""
        with rpc_errors(context, "Absent"):
            if not self._ready.wait(READY_WAIT_S):
                raise ProtocolError(f"party {self.party_id} is not registered with a run yet")
            try:
                convert.check_header(request.header, run_id=self._run_id, party_id=self.party_id)
            except ProtocolError as err:
                raise PermissionError_(str(err)) from None
            round_id, blocks = convert_direct.absent_from_proto(request)
            if self.links is not None:
                log.info(
                    "round %d: block(s) %s absent, as the coordinator says", round_id, list(blocks)
                )
                self.links.mailbox.absent(round_id, blocks)
            return vfl_pb2.Ack()
        raise AssertionError("unreachable: rpc_errors aborts")  # pragma: no cover

    def _await_turn(self, after: int, timeout: float, validation: bool = False) -> None:
        """Wait until the call the coordinator sent before this one was handed over: the round
        `after`, or (`validation`) the validation it sent after round `after`."""

        def turn() -> bool:
            return self._validated == after if validation else self._submitted == after

        with self._turn:
            self._turn.wait_for(lambda: after < 0 or turn(), timeout)

    def _handed(self, round_id: int, validation: bool = False) -> Callable[[], None]:
        def done() -> None:
            with self._turn:
                self._submitted = round_id
                if validation:
                    self._validated = round_id
                self._turn.notify_all()

        return done
