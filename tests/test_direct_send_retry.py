"""A push on the direct data plane that cannot reach its party is sent once more, waiting for
the link (vfl_client.data_plane.RETRY_S): a connection that failed once is not a party gone.

Real gRPC over TCP in this process (plaintext: identity is test_direct_identity's): a party's
push to a port where nobody listens yet arrives once its receiver starts listening within the
retry's wait, and nobody is made absent; a push to a port where nobody ever listens is given up
after the second try and makes that block absent from the round, as before.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import numpy as np
import pytest

from vfl_client.data_plane import RETRY_S, DataPlaneServicer, Mailbox, PeerLinks
from vfl_core.training.direct_party import GRADIENT
from vfl_wire.channels import make_server, start_with_health
from vfl_wire.convert_direct import PeerAddress
from vfl_wire.security import GuardInterceptor, Security, party_policy
from vfl_wire.v1 import vfl_pb2_grpc

RUN = "run-retry"
ROUND = 3
TENSOR = np.arange(6, dtype=np.float32).reshape(2, 3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _links(party: str, block: int) -> PeerLinks:
    links = PeerLinks(party, block, Security(None), Mailbox())
    links.attach(RUN, "float32", enabled=True)
    return links


@pytest.fixture
def sender() -> Iterator[PeerLinks]:
    links = _links("party0", 0)
    try:
        yield links
    finally:
        links.close()


def _serve(links: PeerLinks, port: int):
    server = make_server(2, [GuardInterceptor(secure=False, policy=party_policy)])
    vfl_pb2_grpc.add_DataPlaneServicer_to_server(DataPlaneServicer(links), server)
    start_with_health(server, f"127.0.0.1:{port}")
    return server


def test_given_a_party_not_listening_yet_when_pushed_then_the_second_try_delivers(
    sender: PeerLinks, caplog: pytest.LogCaptureFixture
) -> None:
    port = _free_port()
    receiver = _links("party1", 1)
    receiver.start({0: PeerAddress("party0", "x:0")}, ROUND)
    sender.start({1: PeerAddress("party1", f"127.0.0.1:{port}")}, ROUND)
    with caplog.at_level(logging.INFO, logger="vfl_client.data_plane"):
        sender.send(GRADIENT, ROUND, 1, TENSOR)  # refused: nothing listens on the port yet
        time.sleep(0.3)
        server = _serve(receiver, port)
        try:
            got = receiver.receive(GRADIENT, ROUND, [0], timeout=RETRY_S + 5)
        finally:
            # with a grace, so that the sender's call gets its Ack (stopped at once, the call
            # that delivered can still end UNAVAILABLE and the block be counted absent)
            server.stop(5).wait()
            receiver.close()
    np.testing.assert_array_equal(got[0], TENSOR)
    assert "sent again" in caplog.text  # the first try failed
    assert not sender.mailbox.is_absent(ROUND, 1)


def test_given_a_party_gone_when_pushed_then_given_up_after_the_second_try_and_absent(
    sender: PeerLinks, caplog: pytest.LogCaptureFixture
) -> None:
    port = _free_port()
    sender.start({1: PeerAddress("party1", f"127.0.0.1:{port}")}, ROUND)
    with caplog.at_level(logging.INFO, logger="vfl_client.data_plane"):
        sender.send(GRADIENT, ROUND, 1, TENSOR)
        end = time.monotonic() + RETRY_S + 10
        while not sender.mailbox.is_absent(ROUND, 1) and time.monotonic() < end:
            time.sleep(0.1)
    assert sender.mailbox.is_absent(ROUND, 1)
    assert f"gradient of round {ROUND} to block 1: UNAVAILABLE, then again" in caplog.text
