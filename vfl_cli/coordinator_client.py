"""A typed client for the coordinator's service, used by `vfl evaluate`, `vfl predict`, demo."""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from vfl_core.errors import VflError
from vfl_core.inference.metrics import MetricRow
from vfl_core.protocol import SamplePrediction
from vfl_wire import convert
from vfl_wire.channels import plaintext_to_tls_hint
from vfl_wire.security import COORDINATOR, Security
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc


@dataclass(frozen=True)
class Evaluation:
    rows: list[MetricRow]
    unscored: int
    live_blocks: list[int]
    seconds: float
    answers: dict[int, tuple[int, int]] = field(
        default_factory=dict
    )  # block -> (batches, answered)

    def partly_live(self) -> dict[int, tuple[int, int]]:
        """Blocks that answered some of their batches only (came back or went away meanwhile)."""
        return {b: (n, got) for b, (n, got) in sorted(self.answers.items()) if 0 < got < n}


@dataclass(frozen=True)
class Status:
    phase: str
    round_id: int
    epoch: int
    parties: dict[int, str]  # block -> state
    # block -> registration generation: grows when a new process registers for the block
    generations: dict[int, int] = field(default_factory=dict)


class CoordinatorError(VflError):
    """The coordinator could not be reached or refused the request."""


class CoordinatorClient:
    def __init__(
        self, address: str, timeout: float = 60.0, security: Security | None = None
    ) -> None:
        """`security`: mutual TLS as the operator (vfl_cli.remote_cmd.operator_security);
        None = plaintext, for a coordinator started with --insecure."""
        self.address = address
        self.timeout = timeout
        self._secure = security is not None and security.secure
        self._channel = (security or Security(None)).channel(address, COORDINATOR)
        self._stub = vfl_pb2_grpc.CoordinatorStub(self._channel)
        self._header = convert.header("", "")

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._channel.close()

    def status(self) -> Status:
        reply = self._call(self._stub.Status, vfl_pb2.StatusRequest(header=self._header))
        parties = {p.block: p.state for p in reply.parties}
        generations = {p.block: p.generation for p in reply.parties}
        return Status(reply.state, reply.round_id, reply.epoch, parties, generations)

    def evaluate(self, split: str = "test") -> Evaluation:
        req = vfl_pb2.EvaluateRequest(header=self._header, split=split)
        reply = self._call(self._stub.Evaluate, req)
        rows = convert.eval_rows_from_proto(reply)
        answers = convert.eval_answers_from_proto(reply)
        return Evaluation(rows, reply.unscored, list(reply.live_blocks), reply.seconds, answers)

    def predict(self, split: str, id_hashes: list[bytes] | None) -> list[SamplePrediction]:
        req = vfl_pb2.FederatedPredictRequest(
            header=self._header, split=split, id_hashes=id_hashes or [], all_rows=id_hashes is None
        )
        reply = self._call(self._stub.Predict, req)
        return [convert.prediction_from_proto(row) for row in reply.rows]

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as err:
            hint = None if self._secure else plaintext_to_tls_hint(self.address, err)
            raise CoordinatorError(
                hint or f"coordinator at {self.address}: {err.code().name}: {err.details()}"
            ) from None
