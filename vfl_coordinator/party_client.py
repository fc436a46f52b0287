"""A typed client for one party's `Party` service: named methods, a deadline on every call,
vfl_core types in and out (no protobuf leaks to the caller)."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import numpy as np

from vfl_core.dlvm_protocol import DecodeCall, Decoded, DlvmBackwardCall, StepCall, StepResult
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

    # Latent-variable VFL (vfl_core.dlvm_protocol)
    def dlvm_decode(self, call: DecodeCall, timeout: float) -> Decoded:
        req = convert.dlvm_decode_call_to_proto(call, self._header)
        return convert.dlvm_decoded_from_proto(
            self._stub.DlvmDecode(req, timeout=timeout), call=call
        )

    def dlvm_step(self, call: StepCall, timeout: float) -> StepResult:
        req = convert.dlvm_step_call_to_proto(call, self._header)
        return convert.dlvm_step_result_from_proto(
            self._stub.DlvmStep(req, timeout=timeout), call=call
        )

    def dlvm_predict(self, call: StepCall, timeout: float) -> np.ndarray:
        reply = self._stub.DlvmPredict(
            convert.dlvm_step_call_to_proto(call, self._header), timeout=timeout
        )
        return convert.probabilities_from_proto(reply, request_id=call.round_id)

    def dlvm_backward(self, call: DlvmBackwardCall, timeout: float) -> None:
        req = convert.dlvm_backward_call_to_proto(call, self._header)
        self._stub.DlvmBackward(req, timeout=timeout)

    def labelled_rows(self, samples: int, timeout: float) -> np.ndarray:
        req = vfl_pb2.LabelledRowsRequest(header=self._header, split="train")
        reply = self._stub.LabelledRows(req, timeout=timeout)
        return convert.labelled_rows_from_proto(reply, samples=samples)
