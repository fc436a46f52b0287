"""The gateway's gRPC peers: one long-lived channel per other serving party, one asynchronous
call per (merged) request with the request's deadline as its timeout, answers translated into
vfl_core.serving.peers' terms (no thread per call: grpc's completion queue runs the callback)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future

import grpc

from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.serving.peers import DOWN, TIMED_OUT, PeerAnswer, PeerFailure
from vfl_wire import convert_serving
from vfl_wire.channels import make_channel
from vfl_wire.reply_limits import service_config
from vfl_wire.security import Security
from vfl_wire.v1 import serving_pb2_grpc

log = logging.getLogger(__name__)


class GrpcPeer:
    """Another serving party over gRPC (mutual TLS unless the security is plaintext). Its
    answers must be rows of `embed_dim` (the gateway's bundle's), and a reply larger than
    MAX_KEYS such rows is refused from its length prefix, unread."""

    def __init__(
        self, name: str, block: int, address: str, security: Security, embed_dim: int
    ) -> None:
        self.name = name
        self.block = block
        self.address = address
        self.embed_dim = embed_dim
        limit = {"ServeEmbed": convert_serving.embed_reply_bytes(embed_dim)}
        config = service_config(limit, service="vfl.v1.Serving")
        credentials = security.channel_credentials()
        self._channel = make_channel(address, credentials, security.target_name(name), config)
        self._stub = serving_pb2_grpc.ServingStub(self._channel)

    def embed(self, keys: Sequence[bytes], deadline: float) -> Future[PeerAnswer]:
        out: Future[PeerAnswer] = Future()
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            out.set_exception(PeerFailure(TIMED_OUT))
            return out
        request = convert_serving.embed_request_to_proto(keys)
        call = self._stub.ServeEmbed.future(request, timeout=timeout)
        call.add_done_callback(lambda done: self._answered(done, out, len(keys)))
        return out

    def _answered(self, call: grpc.Future, out: Future[PeerAnswer], keys: int) -> None:
        try:
            reply = call.result()
            out.set_result(
                convert_serving.embed_reply_from_proto(reply, keys, self.block, self.embed_dim)
            )
        except grpc.RpcError as err:
            out.set_exception(PeerFailure(_reason(err)))
        except ProtocolError as err:
            log.warning("party %s answered malformed embeddings: %s", self.name, err)
            out.set_exception(PeerFailure(f"bad answer: {err}"))

    def close(self) -> None:
        self._channel.close()


def _reason(err: grpc.RpcError) -> str:
    code = err.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return TIMED_OUT
    if code == grpc.StatusCode.UNAVAILABLE:
        return DOWN
    return f"refused: {err.details()}"


def parse_peer(text: str) -> tuple[int, str, str]:
    """`BLOCK=HOST:PORT` or `BLOCK:NAME=HOST:PORT` -> (block, name, address); the name is the
    party's id and certificate name (default party<BLOCK>)."""
    left, sep, address = text.partition("=")
    block_text, _, name = left.partition(":")
    if not sep or not address or ":" not in address or not block_text.isdigit():
        raise ConfigError(
            f"--peer {text!r}: give BLOCK=HOST:PORT or BLOCK:NAME=HOST:PORT (e.g. 1=10.0.0.2:7001)"
        )
    block = int(block_text)
    return block, name or f"party{block}", address
