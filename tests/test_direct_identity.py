"""Identity on the direct data plane (issue 43 item 2): a party's DataPlane server takes a
block's embedding or gradient only from the certificate of the party that holds that block.

One party's real server (guard, DataPlaneServicer, mutual TLS) in this process, called with
`vfl certs` identities: the block's holder is let in; another party claiming the block, the
coordinator, the operator, a certificate of another CA and a plaintext caller are refused before
anything reaches the mailbox; a push that arrived before its round named the block's holder is
checked when the round takes it; and a party calls the Party service of another in vain.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest

from vfl_cli.certs_cmd import create_federation
from vfl_client.data_plane import (
    PER_BLOCK,
    PER_BLOCK_VALIDATION,
    WINDOW,
    DataPlaneServicer,
    Mailbox,
    PeerLinks,
)
from vfl_core.errors import ProtocolError
from vfl_core.training.direct_party import EMBEDDING, GRADIENT, VALIDATION
from vfl_wire import convert
from vfl_wire.channels import make_channel, make_server, start_with_health
from vfl_wire.convert_direct import PeerAddress, Push, push_to_proto
from vfl_wire.security import (
    COORDINATOR,
    OPERATOR,
    GuardInterceptor,
    Security,
    load_identity,
    party_policy,
)
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

RUN = "run-identity"
TENSOR = np.arange(6, dtype=np.float32).reshape(2, 3)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("identity") / "certs"
    create_federation(root, ["party0", "party1", "party2"], [])
    return root


@pytest.fixture
def party0(certs: Path) -> Iterator[tuple[str, PeerLinks]]:
    """party0's DataPlane server on 127.0.0.1:0 with mutual TLS; its links."""
    security = Security(load_identity(certs, "party0"))
    links = PeerLinks("party0", 0, security, Mailbox())
    links.attach(RUN, "float32", enabled=True)
    server = make_server(4, [GuardInterceptor(secure=True, policy=party_policy)])
    vfl_pb2_grpc.add_DataPlaneServicer_to_server(DataPlaneServicer(links), server)
    port = start_with_health(server, "127.0.0.1:0", security.server_credentials())
    try:
        yield f"127.0.0.1:{port}", links
    finally:
        server.stop(0).wait()
        links.close()


def _push(
    address: str,
    caller: Security,
    block: int,
    kind: str = EMBEDDING,
    round_id: int = 7,
    run: str = RUN,
) -> grpc.StatusCode:
    channel = caller.channel(address, "party0") if caller.secure else make_channel(address)
    with channel:
        request = push_to_proto(
            convert.header(run, "party0"), Push(round_id, block, kind, TENSOR), "float32"
        )
        try:
            vfl_pb2_grpc.DataPlaneStub(channel).Push(request, timeout=10)
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def _as(certs: Path, name: str) -> Security:
    return Security(load_identity(certs, name))


def _round(links: PeerLinks) -> None:
    """Round 7 begins: party1 holds block 1, party2 block 2."""
    peers = {1: PeerAddress("party1", "x:1"), 2: PeerAddress("party2", "x:2")}
    links.start(peers, 7)


def test_given_the_blocks_holder_when_it_pushes_then_its_tensor_is_taken(
    certs: Path, party0: tuple[str, PeerLinks]
) -> None:
    address, links = party0
    _round(links)
    assert _push(address, _as(certs, "party1"), 1) == grpc.StatusCode.OK
    assert _push(address, _as(certs, "party1"), 1, GRADIENT) == grpc.StatusCode.OK
    got = links.receive(EMBEDDING, 7, [1], timeout=5)
    np.testing.assert_array_equal(got[1], TENSOR)
    assert links.receive(GRADIENT, 7, [1], timeout=5).keys() == {1}


def test_given_another_party_when_it_claims_a_block_not_its_own_then_permission_denied(
    certs: Path, party0: tuple[str, PeerLinks]
) -> None:
    address, links = party0
    _round(links)
    assert _push(address, _as(certs, "party2"), 1) == grpc.StatusCode.PERMISSION_DENIED
    assert _push(address, _as(certs, "party2"), 1, GRADIENT) == grpc.StatusCode.PERMISSION_DENIED
    assert links.receive(EMBEDDING, 7, [1], timeout=0.5) == {}


@pytest.mark.parametrize("name", [COORDINATOR, OPERATOR])
def test_given_the_coordinator_or_operator_when_it_pushes_then_permission_denied(
    certs: Path, party0: tuple[str, PeerLinks], name: str
) -> None:
    address, links = party0
    _round(links)
    assert _push(address, _as(certs, name), 1) == grpc.StatusCode.PERMISSION_DENIED
    assert links.receive(EMBEDDING, 7, [1], timeout=0.5) == {}


def test_given_a_wrong_run_id_when_pushed_then_permission_denied(
    certs: Path, party0: tuple[str, PeerLinks]
) -> None:
    address, links = party0
    _round(links)
    code = _push(address, _as(certs, "party1"), 1, run="another-run")
    assert code == grpc.StatusCode.PERMISSION_DENIED


def test_given_no_federation_certificate_when_pushed_then_refused_before_the_mailbox(
    tmp_path: Path, party0: tuple[str, PeerLinks]
) -> None:
    """Another CA's certificate and a plaintext caller do not complete the TLS handshake."""
    address, links = party0
    _round(links)
    other = tmp_path / "other"
    create_federation(other, ["party1"], [])
    assert _push(address, _as(other, "party1"), 1) == grpc.StatusCode.UNAVAILABLE
    assert _push(address, Security(None), 1) == grpc.StatusCode.UNAVAILABLE
    assert links.receive(EMBEDDING, 7, [1], timeout=0.5) == {}


def test_given_a_push_before_its_round_when_the_round_names_another_holder_then_dropped(
    certs: Path, party0: tuple[str, PeerLinks]
) -> None:
    """Before any Round call the holder of block 1 is unknown: the push is kept with its
    sender's name, and the round that names party1 as the holder does not take party2's."""
    address, links = party0
    assert _push(address, _as(certs, "party2"), 1) == grpc.StatusCode.OK
    assert _push(address, _as(certs, "party2"), 2) == grpc.StatusCode.OK
    _round(links)
    got = links.receive(EMBEDDING, 7, [1, 2], timeout=0.5)
    assert got.keys() == {2}  # party2's own block only


def test_given_a_run_on_the_relay_when_a_party_pushes_then_refused(
    certs: Path, party0: tuple[str, PeerLinks]
) -> None:
    """The DataPlane service answers only in a run on the direct data plane."""
    address, links = party0
    _round(links)
    links.attach(RUN, "float32", enabled=False)
    assert _push(address, _as(certs, "party1"), 1) == grpc.StatusCode.FAILED_PRECONDITION


def test_given_a_peer_when_it_pushes_far_ahead_or_too_much_then_refused(
    certs: Path, party0: tuple[str, PeerLinks]
) -> None:
    """Pushes for rounds long past or too far ahead, and more than a block may have kept, are
    refused: a peer cannot fill the party's memory. Validation pushes (keyed by their request,
    not a round) have a limit of their own."""
    address, links = party0
    _round(links)  # round 7
    party1 = _as(certs, "party1")
    assert _push(address, party1, 1, round_id=6) == grpc.StatusCode.INVALID_ARGUMENT
    assert _push(address, party1, 1, round_id=7 + WINDOW + 1) == grpc.StatusCode.INVALID_ARGUMENT
    training = (EMBEDDING, GRADIENT)
    codes = [_push(address, party1, 1, k, 7 + r) for r in range(WINDOW + 1) for k in training]
    assert codes == [grpc.StatusCode.OK] * PER_BLOCK
    assert _push(address, party1, 1, round_id=8) == grpc.StatusCode.INVALID_ARGUMENT
    codes = [_push(address, party1, 1, VALIDATION, r) for r in range(PER_BLOCK_VALIDATION)]
    assert codes == [grpc.StatusCode.OK] * PER_BLOCK_VALIDATION
    assert _push(address, party1, 1, VALIDATION, 1000) == grpc.StatusCode.INVALID_ARGUMENT


def test_given_a_party_when_it_calls_another_partys_party_service_then_permission_denied(
    certs: Path, tmp_path: Path
) -> None:
    """The Party service (Round included) answers the coordinator only."""
    security = _as(certs, "party0")
    server = make_server(2, [GuardInterceptor(secure=True, policy=party_policy)])
    vfl_pb2_grpc.add_PartyServicer_to_server(vfl_pb2_grpc.PartyServicer(), server)
    port = start_with_health(server, "127.0.0.1:0", security.server_credentials())
    try:
        channel = _as(certs, "party1").channel(f"127.0.0.1:{port}", "party0")
        with channel, pytest.raises(grpc.RpcError) as err:
            vfl_pb2_grpc.PartyStub(channel).Round(vfl_pb2.RoundRequest(), timeout=10)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        server.stop(0).wait()


def test_given_staleness_when_a_round_begins_then_the_gradients_still_to_step_are_kept() -> None:
    """With --staleness a party steps earlier rounds in later Round calls (one it sat out
    included): the mailbox keeps and takes pushes from the earliest round it still has to step
    (`oldest`), and the window ahead runs from the round it is at."""
    box = Mailbox()
    box.put(Push(3, 1, GRADIENT, TENSOR), "party1")
    box.start(9, oldest=3)  # embedded round 3, not yet stepped
    box.put(Push(4, 1, GRADIENT, TENSOR), "party1")
    box.put(Push(9 + WINDOW, 1, EMBEDDING, TENSOR), "party1")
    with pytest.raises(ProtocolError, match="takes rounds 3"):
        box.put(Push(2, 1, GRADIENT, TENSOR), "party1")
    with pytest.raises(ProtocolError):
        box.put(Push(10 + WINDOW, 1, EMBEDDING, TENSOR), "party1")
    assert box.take(GRADIENT, 3, [1], timeout=0).keys() == {1}
    assert box.take(GRADIENT, 4, [1], timeout=0).keys() == {1}
    box.start(10)  # exact: earlier rounds are over
    with pytest.raises(ProtocolError):
        box.put(Push(9, 1, GRADIENT, TENSOR), "party1")
