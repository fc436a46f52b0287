"""The `Serving` gRPC service of a serving party: validate and convert, call vfl_core.serving,
convert back. `ServeEmbed` for the gateway party; `ServePredict` at the gateway only."""

from __future__ import annotations

import logging
import time

import grpc
import numpy as np

from vfl_client.serving_health import Readiness
from vfl_client.serving_metrics import ServingMetrics
from vfl_core.errors import ConfigError, DataError, ProtocolError
from vfl_core.serving.admission import Overloaded
from vfl_core.serving.bundle import Bundle
from vfl_core.serving.features import FeatureSource
from vfl_core.serving.gateway import Gateway
from vfl_core.serving.peers import PeerAnswer
from vfl_wire import convert_serving
from vfl_wire.status import rpc_errors
from vfl_wire.v1 import serving_pb2, serving_pb2_grpc

log = logging.getLogger(__name__)


def embed_keys(bundle: Bundle, features: FeatureSource, keys: list[bytes]) -> PeerAnswer:
    """This party's answer for `keys`: which it holds, and their embeddings."""
    held, x = features.lookup(keys)
    if not len(x):
        return PeerAnswer(held, np.zeros((0, bundle.meta.embed_dim), dtype=np.float32))
    return PeerAnswer(held, bundle.embed(x))


class ServingServicer(serving_pb2_grpc.ServingServicer):
    def __init__(
        self,
        bundle: Bundle,
        features: FeatureSource | None,
        gateway: Gateway | None,
        readiness: Readiness | None = None,
        metrics: ServingMetrics | None = None,
    ) -> None:
        self.bundle = bundle
        self.features = features
        self.gateway = gateway
        self.readiness = readiness
        self.metrics = metrics

    def ServeEmbed(self, request, context):
        with rpc_errors(context, "ServeEmbed"):
            keys = convert_serving.embed_request_from_proto(request)
            if self.features is None:
                raise ConfigError(f"party {self.bundle.meta.party_id} serves no feature table")
            answer = embed_keys(self.bundle, self.features, keys)
            return convert_serving.embed_reply_to_proto(self.bundle.meta.block, answer)
        raise AssertionError("unreachable: rpc_errors aborts")  # pragma: no cover

    def ServePredict(self, request, context):
        shed: Overloaded | None = None
        started = time.monotonic()
        with rpc_errors(context, "ServePredict"):
            if self.gateway is None:
                raise ConfigError(
                    f"party {self.bundle.meta.party_id} is no gateway: predictions are served "
                    "by a label party started with --peer"
                )
            if self.readiness is not None and not self.readiness.ready:
                context.set_code(grpc.StatusCode.UNAVAILABLE)
                context.set_details(f"not ready: {self.readiness.phase}")
                return serving_pb2.ServePredictReply()
            ids, deadline, inline = convert_serving.predict_request_from_proto(request)
            left = context.time_remaining()  # the caller's own gRPC deadline, if any
            if left is not None and (deadline is None or left < deadline):
                deadline = max(left, 1e-3)
            phases: dict[str, float] = {}
            try:
                answers = self.gateway.predict(ids, deadline, inline, started, phases)
            except DataError as err:
                raise ProtocolError(str(err)) from None
            except Overloaded as err:
                shed = err
            else:
                if self.metrics is not None:
                    took = time.monotonic() - started
                    self.metrics.answered("grpc", took, answers, "overrun" in phases)
                return convert_serving.predictions_to_proto(answers)
        assert shed is not None  # rpc_errors aborts on every other error
        if self.metrics is not None:
            self.metrics.shed.labels("grpc", shed.reason).inc()
            self.metrics.requests.labels("grpc", "shed").inc()
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(shed))
