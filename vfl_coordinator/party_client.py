"""A typed client for one party's `Party` service: named methods, a deadline on every call,
vfl_core types in and out (no protobuf leaks to the caller)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import numpy as np

from vfl_core.dvfl_protocol import (
    GuestCall,
    GuestResult,
    HostCall,
    HostOutputCall,
    HostResult,
    OwnerFeedCall,
    OwnerTrainCall,
)
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PredictCall,
    PsiCall,
    ScoreCall,
    ScoreResult,
)
from vfl_wire import convert
from vfl_wire.channels import make_channel
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc


class PartyClient:
    def __init__(
        self,
        address: str,
        run_id: str,
        party_id: str,
        embed_dim: int,
        credentials: grpc.ChannelCredentials | None = None,
        interceptors: Sequence[grpc.UnaryUnaryClientInterceptor] = (),
        target_name: str | None = None,  # with TLS: the name the party's certificate must carry
    ) -> None:
        self.address = address
        self._channel = make_channel(address, credentials, target_name)
        channel = self._channel
        if interceptors:  # e.g. the message audit (vfl_wire.audit)
            channel = grpc.intercept_channel(channel, *interceptors)
        self._stub = vfl_pb2_grpc.PartyStub(channel)
        self._header = convert.header(run_id, party_id)
        self._dim = embed_dim

    def close(self) -> None:
        self._channel.close()

    def id_hashes(self, split: str, timeout: float) -> list[bytes]:
        req = vfl_pb2.IdHashesRequest(header=self._header, split=split)
        return convert.id_hashes_from_proto(self._stub.IdHashes(req, timeout=timeout))

    def class_weights(self, split: str, timeout: float) -> np.ndarray | None:
        req = vfl_pb2.ClassWeightsRequest(header=self._header, split=split)
        return convert.class_weights_from_proto(self._stub.ClassWeights(req, timeout=timeout))

    def embed(self, call: EmbedCall, timeout: float) -> np.ndarray:
        reply = self._stub.Embed(convert.embed_call_to_proto(call, self._header), timeout=timeout)
        # The width depends on the method (baselines send several slots); the engine checks it.
        shape = (len(call.rows), None)
        return convert.embedding_from_proto(reply, round_id=call.round_id, expect_shape=shape)

    def fuse(self, call: FuseCall, timeout: float) -> FuseResult:
        reply = self._stub.Fuse(convert.fuse_call_to_proto(call, self._header), timeout=timeout)
        return convert.fuse_result_from_proto(
            reply, round_id=call.round_id, expect_shape=(None, None)
        )

    def backward(self, call: BackwardCall, timeout: float) -> None:
        self._stub.Backward(convert.backward_call_to_proto(call, self._header), timeout=timeout)

    def checkpoint(self, round_id: int, timeout: float) -> bool:
        req = convert.checkpoint_call_to_proto(round_id, self._header)
        reply = self._stub.Checkpoint(req, timeout=timeout)
        return convert.checkpoint_reply_from_proto(reply, round_id=round_id)

    def predict(self, call: PredictCall, timeout: float) -> np.ndarray:
        reply = self._stub.Predict(
            convert.predict_call_to_proto(call, self._header), timeout=timeout
        )
        return convert.probabilities_from_proto(reply, request_id=call.request_id)

    def score(self, call: ScoreCall, timeout: float) -> ScoreResult:
        reply = self._stub.Score(convert.score_call_to_proto(call, self._header), timeout=timeout)
        return convert.score_reply_from_proto(reply)

    def shutdown(self, reason: str, timeout: float) -> None:
        req = vfl_pb2.ShutdownRequest(header=self._header, reason=reason)
        self._stub.Shutdown(req, timeout=timeout)

    # PSI alignment (vfl_core.psi)
    def psi_blind(self, split: str, session: str, timeout: float) -> list[bytes]:
        req = convert.psi_blind_request(split, session, self._header)
        return convert.psi_points_from_proto(self._stub.PsiBlind(req, timeout=timeout))

    def psi_apply(self, call: PsiCall, timeout: float) -> list[bytes]:
        reply = self._stub.PsiApply(convert.psi_apply_to_proto(call, self._header), timeout=timeout)
        return convert.psi_points_from_proto(reply, count=len(call.points))

    def psi_keys(self, call: PsiCall, timeout: float) -> None:
        self._stub.PsiKeys(convert.psi_keys_to_proto(call, self._header), timeout=timeout)

    # Decoupled VFL (vfl_core.dvfl_program checks the widths against the run's config)
    def guest_step(self, call: GuestCall, timeout: float) -> GuestResult:
        reply = self._stub.GuestStep(
            convert.guest_call_to_proto(call, self._header), timeout=timeout
        )
        return convert.guest_result_from_proto(reply, call=call)

    def host_step(self, call: HostCall, timeout: float) -> HostResult:
        reply = self._stub.HostStep(convert.host_call_to_proto(call, self._header), timeout=timeout)
        return convert.host_result_from_proto(reply, call=call)

    def host_output(self, call: HostOutputCall, timeout: float) -> np.ndarray:
        req = convert.host_output_call_to_proto(call, self._header)
        return convert.host_outputs_from_proto(
            self._stub.HostOutput(req, timeout=timeout), call=call
        )

    def owner_feed(self, call: OwnerFeedCall, timeout: float) -> bool:
        self._stub.OwnerFeed(convert.owner_feed_to_proto(call, self._header), timeout=timeout)
        return True

    def owner_train(self, call: OwnerTrainCall, timeout: float) -> float:
        req = convert.owner_train_to_proto(call, self._header)
        return convert.owner_loss_from_proto(self._stub.OwnerTrain(req, timeout=timeout), call=call)
