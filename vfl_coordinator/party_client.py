"""A typed client for one party's `Party` service: named methods, a deadline on every call,
vfl_core types in and out (no protobuf leaks to the caller)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import grpc
import numpy as np

from vfl_core.methods.registry import step_spec
from vfl_core.methods.steps import decode_call, decode_result, encode_call
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
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
from vfl_wire import convert, convert_direct, records
from vfl_wire.channels import make_channel
from vfl_wire.convert_direct import PeerAddress
from vfl_wire.relay_box import narrow
from vfl_wire.reply_limits import party_reply_limits, service_config
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

T = TypeVar("T")


class Pending(Generic[T]):
    """A call in flight: `result(timeout)` waits for the reply and converts it (raising the
    call's grpc.RpcError, or the conversion's VflError for a bad reply)."""

    def __init__(self, future: grpc.Future, convert_reply: Callable[[Any], T]) -> None:
        self.future = future
        self._convert = convert_reply

    def done(self) -> bool:
        return self.future.done()

    def result(self, timeout: float | None = None) -> T:
        return self._convert(self.future.result(timeout=timeout))


def _nothing(_reply: object) -> None:
    return None


class PartyClient:
    def __init__(
        self,
        address: str,
        run_id: str,
        party_id: str,
        credentials: grpc.ChannelCredentials | None = None,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        target_name: str | None = None,  # with TLS: the name the party's certificate must carry
        # embeddings and gradients on the wire (vfl_core.model.quantize)
        wire_dtype: str = "float32",
        rows: int = 0,  # the party's largest split: bounds its IdHashes and PsiBlind replies
        # encrypted relay (TrainConfig.encrypt_relay): the party's block and every party's
        # signed relay key, passed on with each call that carries sealed tensors
        block: int = -1,
        relay_keys: Callable[[], list[vfl_pb2.RelayKey]] | None = None,
    ) -> None:
        self.address = address
        self.reply_limits = party_reply_limits(rows)  # larger replies are refused unread
        limits = service_config(self.reply_limits)
        self._channel = make_channel(address, credentials, target_name, limits)
        channel = self._channel
        if interceptors:  # e.g. the message audit (vfl_wire.audit)
            channel = grpc.intercept_channel(channel, *interceptors)
        self._stub = vfl_pb2_grpc.PartyStub(channel)
        self._header = convert.header(run_id, party_id)
        self._wire = wire_dtype
        self._block = block
        self._relay_keys = relay_keys

    def _relay_header(self) -> vfl_pb2.Header:
        """The header of a call that carries sealed tensors: with the relay keys, if any."""
        if self._relay_keys is None:
            return self._header
        h = vfl_pb2.Header()
        h.CopyFrom(self._header)
        h.relay_keys.extend(self._relay_keys())
        return h

    def _narrow(self, *maps) -> None:
        """Only this party's boxes of the sealed embeddings it is sent."""
        if self._relay_keys is not None:
            for tensors in maps:
                narrow(tensors, self._block)

    def close(self) -> None:
        self._channel.close()

    # Every call starts at once and returns a `Pending`: `.result()` waits for the reply and
    # converts it. The transport starts one call per party from its own thread and then waits for
    # all, so no thread is handed a call (grpc's own completion queue does the waiting).
    def id_hashes(self, split: str, timeout: float) -> Pending[list[bytes]]:
        req = vfl_pb2.IdHashesRequest(header=self._header, split=split)
        return Pending(
            self._stub.IdHashes.future(req, timeout=timeout), convert.id_hashes_from_proto
        )

    def class_weights(self, split: str, timeout: float) -> Pending[np.ndarray | None]:
        req = vfl_pb2.ClassWeightsRequest(header=self._header, split=split)
        future = self._stub.ClassWeights.future(req, timeout=timeout)
        return Pending(future, convert.class_weights_from_proto)

    def validation_strata(self, split: str, timeout: float) -> Pending[np.ndarray | None]:
        """The label party's stratified validation draw of each training row (float32)."""
        req = vfl_pb2.ClassWeightsRequest(header=self._header, split=split, purpose="validation")
        future = self._stub.ClassWeights.future(req, timeout=timeout)
        return Pending(future, convert.class_weights_from_proto)

    def embed(self, call: EmbedCall, timeout: float) -> Pending[np.ndarray]:
        request = convert.embed_call_to_proto(call, self._relay_header())
        # The width depends on the method (baselines send several slots); the engine checks it.
        # Told fresh_own, the party answers no rows (vfl_core.methods.laser.party_steps).
        shape = (0 if call.fresh_own else len(call.rows), None)
        return Pending(
            self._stub.Embed.future(request, timeout=timeout),
            lambda reply: convert.embedding_from_proto(
                reply, round_id=call.round_id, expect_shape=shape, wire=self._wire
            ),
        )

    def fuse(self, call: FuseCall, timeout: float) -> Pending[FuseResult]:
        request = convert.fuse_call_to_proto(call, self._relay_header(), self._wire)
        self._narrow(request.embeddings)
        return Pending(
            self._stub.Fuse.future(request, timeout=timeout),
            lambda reply: convert.fuse_result_from_proto(
                reply, round_id=call.round_id, expect_shape=(None, None), wire=self._wire
            ),
        )

    def backward(self, call: BackwardCall, timeout: float) -> Pending[None]:
        request = convert.backward_call_to_proto(call, self._relay_header(), self._wire)
        return Pending(self._stub.Backward.future(request, timeout=timeout), _nothing)

    def train(self, call: TrainCall, timeout: float) -> Pending[TrainResult]:
        request = convert.train_call_to_proto(call, self._relay_header(), self._wire)
        self._narrow(*(f.embeddings for f in request.fuse))
        return Pending(
            self._stub.Train.future(request, timeout=timeout),
            lambda reply: convert.train_result_from_proto(reply, call, wire=self._wire),
        )

    def round(
        self, call: RoundCall, peers: Mapping[int, PeerAddress], timeout: float
    ) -> Pending[RoundResult]:
        """A direct-plane round: status comes back, the tensors go between the parties."""
        request = convert_direct.round_call_to_proto(call, self._header, peers)
        return Pending(
            self._stub.Round.future(request, timeout=timeout),
            lambda reply: convert_direct.round_result_from_proto(reply, round_id=call.round_id),
        )

    def absent(self, round_id: int, blocks: Sequence[int], timeout: float) -> Pending[None]:
        """Tell the party that `blocks` push nothing more for the direct-plane round."""
        request = convert_direct.absent_to_proto(round_id, blocks, self._header)
        return Pending(self._stub.Absent.future(request, timeout=timeout), _nothing)

    def checkpoint(self, round_id: int, timeout: float, kind: str = "save") -> Pending[bool]:
        """Write a checkpoint of `round_id` (kind save), or keep / restore an in-memory copy."""
        req = convert.checkpoint_call_to_proto(round_id, self._header, kind)
        return Pending(
            self._stub.Checkpoint.future(req, timeout=timeout),
            lambda reply: convert.checkpoint_reply_from_proto(reply, round_id=round_id),
        )

    def predict(self, call: PredictCall, timeout: float) -> Pending[np.ndarray]:
        request = convert.predict_call_to_proto(call, self._relay_header(), self._wire)
        self._narrow(request.embeddings)
        return Pending(
            self._stub.Predict.future(request, timeout=timeout),
            lambda reply: convert.probabilities_from_proto(
                reply, request_id=call.request_id, sealed=bool(call.seal_for)
            ),
        )

    def score(self, call: ScoreCall, timeout: float) -> Pending[ScoreResult]:
        header = self._relay_header() if call.blind else self._header
        request = convert.score_call_to_proto(call, header)
        for blind in request.blind:
            self._narrow(blind.heads)
        future = self._stub.Score.future(request, timeout=timeout)
        return Pending(future, convert.score_reply_from_proto)

    def shutdown(
        self, reason: str, timeout: float, choice: ServingChoice | None = None
    ) -> Pending[None]:
        req = vfl_pb2.ShutdownRequest(header=self._header, reason=reason)
        if choice is not None:
            req.choice.CopyFrom(convert.serving_choice_to_proto(choice))
        return Pending(self._stub.Shutdown.future(req, timeout=timeout), _nothing)

    # PSI alignment (vfl_core.training.psi)
    def psi_blind(self, split: str, session: str, timeout: float) -> Pending[list[bytes]]:
        req = convert.psi_blind_request(split, session, self._header)
        return Pending(
            self._stub.PsiBlind.future(req, timeout=timeout), convert.psi_points_from_proto
        )

    def psi_apply(self, call: PsiCall, timeout: float) -> Pending[list[bytes]]:
        request = convert.psi_apply_to_proto(call, self._header)
        return Pending(
            self._stub.PsiApply.future(request, timeout=timeout),
            lambda reply: convert.psi_points_from_proto(reply, count=len(call.points)),
        )

    def psi_keys(self, call: PsiCall, timeout: float) -> Pending[None]:
        request = convert.psi_keys_to_proto(call, self._header)
        return Pending(self._stub.PsiKeys.future(request, timeout=timeout), _nothing)

    # A method's own steps (vfl_core.methods): the call checked against the step's request
    # schema and packed as the schema says, the reply checked against its reply schema.
    def step(self, method: str, step: str, call: Any, timeout: float) -> Pending[Any]:
        spec = step_spec(method, step)
        header, record = encode_call(spec, call)
        _, bound = decode_call(spec, header, record, {})  # a local bug fails here, unsent
        request = records.step_request(method, step, header, record, self._header)

        def answer(reply: vfl_pb2.StepReply) -> Any:
            got = records.reply_from_proto(reply, request, spec.reply)
            return decode_result(spec, got, call, bound)

        return Pending(self._stub.Step.future(request, timeout=timeout), answer)
