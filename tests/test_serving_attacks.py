"""Stop 41's outsider pass on the serving ports, in process (the real server, guard and options
of `vfl-client --serve-bundle`; a stand-in servicer where no bundle is needed):

- a label party's embeddings go to no other party unless it names them (`--embed-for`): any
  party's certificate once collected them (a feature party read labels from them);
- one caller (certificate, or connection with --insecure) holds at most half the calls a
  serving party takes: a stalled caller once held all 256 and took a party out of every
  prediction;
- a request larger than MAX_REQUEST_BYTES is refused (a 100 MiB ServeEmbed was read whole);
- a peer's answer of another width, or larger than any honest answer, is that party's "bad
  answer" or refusal (a row of another width once failed every request at the head)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import grpc
import numpy as np
import pytest
from slowloris import Attack

from vfl_client.serving_access import (
    MAX_CONCURRENT_RPCS,
    MAX_INFLIGHT_PER_PEER,
    MAX_REQUEST_BYTES,
    SERVING_SERVICE,
    ServingPolicy,
)
from vfl_client.serving_peers import GrpcPeer
from vfl_client.serving_runner import _start_server
from vfl_core.errors import ProtocolError
from vfl_core.serving.peers import PeerAnswer, PeerFailure
from vfl_wire import convert_serving as cs
from vfl_wire.channels import make_server, start_with_health
from vfl_wire.security import COORDINATOR, HEALTH_SERVICE, OPERATOR, Security
from vfl_wire.tensors import encode_array
from vfl_wire.v1 import serving_pb2, serving_pb2_grpc

KEYS = [bytes([i]) * 32 for i in range(3)]
DIM = 8


# ---------------------------------------------------------------------------------- who may call
def test_given_a_label_party_when_a_feature_party_asks_its_embeddings_then_refused() -> None:
    label = ServingPolicy.of("party0", has_head=True, embed_for=None)
    refusal = label("party1", SERVING_SERVICE, "ServeEmbed")
    assert refusal is not None and "--embed-for" in refusal and "party0" in refusal
    assert label(OPERATOR, SERVING_SERVICE, "ServePredict") is None
    assert label("party1", HEALTH_SERVICE, "Check") is None
    named = ServingPolicy.of("party0", has_head=True, embed_for=["party2"])
    assert named("party2", SERVING_SERVICE, "ServeEmbed") is None
    assert named("party1", SERVING_SERVICE, "ServeEmbed") is not None


def test_given_a_feature_party_when_asked_then_any_party_unless_it_names_them() -> None:
    feature = ServingPolicy.of("party1", has_head=False, embed_for=None)
    assert feature("party0", SERVING_SERVICE, "ServeEmbed") is None
    assert feature("party2", SERVING_SERVICE, "ServeEmbed") is None
    for peer in (COORDINATOR, OPERATOR):
        assert feature(peer, SERVING_SERVICE, "ServeEmbed") is not None
    assert feature("party0", SERVING_SERVICE, "ServePredict") is not None
    only = ServingPolicy.of("party1", has_head=False, embed_for=["party0"])
    assert only("party2", SERVING_SERVICE, "ServeEmbed") is not None


# ------------------------------------------------------------------------ the server's limits
class _Answers(serving_pb2_grpc.ServingServicer):
    """Answers every key as not held (the server's limits are under test, not the bundle)."""

    def ServeEmbed(self, request, context):
        keys = cs.embed_request_from_proto(request)
        empty = np.zeros((0, DIM), dtype=np.float32)
        return cs.embed_reply_to_proto(1, PeerAnswer(np.zeros(len(keys), dtype=bool), empty))


@pytest.fixture
def serving_port() -> Iterator[int]:
    policy = ServingPolicy.of("party1", has_head=False, embed_for=None)
    servicer: Any = _Answers()  # a stand-in for ServingServicer: no bundle needed here
    server, port, _ = _start_server(servicer, "127.0.0.1:0", Security(None), policy)
    try:
        yield port
    finally:
        server.stop(0).wait()


def _ask(port: int, request: serving_pb2.ServeEmbedRequest) -> serving_pb2.ServeEmbedReply:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return serving_pb2_grpc.ServingStub(channel).ServeEmbed(request, timeout=20)


def test_given_an_oversize_request_when_sent_then_refused_and_still_serving(serving_port) -> None:
    big = serving_pb2.ServeEmbedRequest(keys=[b"k" * (1 << 20)] * 2)  # 2 MiB: no honest request
    assert big.ByteSize() > MAX_REQUEST_BYTES
    with pytest.raises(grpc.RpcError) as err:
        _ask(serving_port, big)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert len(_ask(serving_port, cs.embed_request_to_proto(KEYS)).held) == 3


def test_given_a_caller_stalling_every_stream_when_another_asks_then_answered(
    serving_port,
) -> None:
    """One caller at its limit (here one connection: --insecure counts connections) leaves
    room for the others."""
    assert MAX_CONCURRENT_RPCS >= 2 * MAX_INFLIGHT_PER_PEER
    method = f"/{SERVING_SERVICE}/ServeEmbed"
    with Attack().open(serving_port, 1, MAX_INFLIGHT_PER_PEER, method) as attack:
        time.sleep(1.5)  # every stream has reached the server, and waits for its body
        assert attack.connections[0].held == MAX_INFLIGHT_PER_PEER
        assert len(_ask(serving_port, cs.embed_request_to_proto(KEYS)).held) == 3


# ------------------------------------------------------------------------ a peer's hostile answers
class _Hostile(serving_pb2_grpc.ServingServicer):
    """A serving party that answers `reply` to every request."""

    def __init__(self) -> None:
        self.reply = serving_pb2.ServeEmbedReply()

    def ServeEmbed(self, request, context):
        return self.reply


@contextlib.contextmanager
def hostile_peer() -> Iterator[tuple[_Hostile, GrpcPeer]]:
    servicer = _Hostile()
    server = make_server(2, [])
    serving_pb2_grpc.add_ServingServicer_to_server(servicer, server)
    port = start_with_health(server, "127.0.0.1:0")
    peer = GrpcPeer("party1", 1, f"127.0.0.1:{port}", Security(None), embed_dim=DIM)
    try:
        yield servicer, peer
    finally:
        peer.close()
        server.stop(0).wait()


def _failure(peer: GrpcPeer) -> str:
    future = peer.embed(KEYS, time.monotonic() + 20)
    with pytest.raises(PeerFailure) as err:
        future.result(timeout=30)
    return err.value.reason


def test_given_a_peer_answering_another_width_or_too_much_then_that_party_only_fails() -> None:
    with hostile_peer() as (servicer, peer):
        rows = np.ones((3, DIM - 1), dtype=np.float32)
        servicer.reply = cs.embed_reply_to_proto(1, PeerAnswer(np.ones(3, dtype=bool), rows))
        assert _failure(peer).startswith("bad answer: embeddings: shape (3, 7)")
        huge = np.ones((3, 1 << 20), dtype=np.float32)  # 12 MiB for 3 keys
        servicer.reply = serving_pb2.ServeEmbedReply(
            block=1, held=b"\x01\x01\x01", embeddings=encode_array(huge)
        )
        assert cs.embed_reply_bytes(DIM) < servicer.reply.ByteSize()
        assert _failure(peer).startswith("refused: ")
        good = np.ones((3, DIM), dtype=np.float32)
        servicer.reply = cs.embed_reply_to_proto(1, PeerAnswer(np.ones(3, dtype=bool), good))
        answer = peer.embed(KEYS, time.monotonic() + 20).result(timeout=30)
        np.testing.assert_array_equal(answer.embeddings, good)


def test_given_an_answer_of_another_width_when_decoded_then_refused() -> None:
    rows = np.ones((2, 4), dtype=np.float32)
    reply = cs.embed_reply_to_proto(2, PeerAnswer(np.array([True, False, True]), rows))
    assert cs.embed_reply_from_proto(reply, 3, 2, width=4).embeddings.shape == (2, 4)
    with pytest.raises(ProtocolError, match=r"shape \(2, 4\) does not match expected \(2, 8\)"):
        cs.embed_reply_from_proto(reply, 3, 2, width=8)
