"""The `Serving` gRPC service of a serving party: validate and convert, call vfl_core.serving,
convert back. `ServeEmbed` for the gateway party; `ServePredict` at the gateway only."""

from __future__ import annotations

import logging

import numpy as np

from vfl_core.errors import ConfigError, DataError, ProtocolError
from vfl_core.serving.bundle import Bundle
from vfl_core.serving.features import FeatureSource
from vfl_core.serving.gateway import Gateway
from vfl_core.serving.peers import PeerAnswer
from vfl_wire import convert_serving
from vfl_wire.status import rpc_errors
from vfl_wire.v1 import serving_pb2_grpc

log = logging.getLogger(__name__)


def embed_keys(bundle: Bundle, features: FeatureSource, keys: list[bytes]) -> PeerAnswer:
    """This party's answer for `keys`: which it holds, and their embeddings."""
    held, x = features.lookup(keys)
    if not len(x):
        return PeerAnswer(held, np.zeros((0, bundle.meta.embed_dim), dtype=np.float32))
    return PeerAnswer(held, bundle.embed(x))


class ServingServicer(serving_pb2_grpc.ServingServicer):
    def __init__(
        self, bundle: Bundle, features: FeatureSource | None, gateway: Gateway | None
    ) -> None:
        self.bundle = bundle
        self.features = features
        self.gateway = gateway

    def ServeEmbed(self, request, context):
        with rpc_errors(context, "ServeEmbed"):
            keys = convert_serving.embed_request_from_proto(request)
            if self.features is None:
                raise ConfigError(f"party {self.bundle.meta.party_id} serves no feature table")
            answer = embed_keys(self.bundle, self.features, keys)
            return convert_serving.embed_reply_to_proto(self.bundle.meta.block, answer)
        raise AssertionError("unreachable: rpc_errors aborts")  # pragma: no cover

    def ServePredict(self, request, context):
        with rpc_errors(context, "ServePredict"):
            if self.gateway is None:
                raise ConfigError(
                    f"party {self.bundle.meta.party_id} is no gateway: predictions are served "
                    "by a label party started with --peer"
                )
            ids, deadline, inline = convert_serving.predict_request_from_proto(request)
            try:
                answers = self.gateway.predict(ids, deadline, inline)
            except DataError as err:
                raise ProtocolError(str(err)) from None
            return convert_serving.predictions_to_proto(answers)
        raise AssertionError("unreachable: rpc_errors aborts")  # pragma: no cover
