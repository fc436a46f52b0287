"""The encrypted relay, message by message (issue 32 item 2): the parties' signed relay keys,
sealing and opening tensors, and every refusal a coordinator can provoke (a tampered box, a
replayed one, one moved to another party's slot, a substituted key). The real federation is in
tests/test_relay_grpc.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from vfl_cli.certs_cmd import create_federation
from vfl_core.errors import ProtocolError
from vfl_core.methods.gradient_sum import received_gradient
from vfl_core.protocol import BackwardCall, Sealed
from vfl_core.training.laser_round import add_in_order, backward_call
from vfl_wire import convert
from vfl_wire.relay_box import EMBED, GRAD, INFER, box_bytes, sealed_from_proto
from vfl_wire.relay_crypto import RelayCrypto
from vfl_wire.relay_keys import RelayKeyError, make_relay_key, verify_relay_key
from vfl_wire.relay_messages import open_backward, open_request, seal_reply
from vfl_wire.security import COORDINATOR, load_identity
from vfl_wire.tensors import decode_float, encode_float
from vfl_wire.v1 import vfl_pb2

RUN = "run-relay"


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("relay-certs")
    create_federation(base / "ours", ["party0", "party1", "party2"], [])
    create_federation(base / "other", ["party1"], [])
    return {"ours": base / "ours", "other": base / "other"}


def _relay(certs: Path, k: int) -> RelayCrypto:
    relay = RelayCrypto(load_identity(certs, f"party{k}"), k)
    relay.start(RUN)
    return relay


@pytest.fixture()
def relays(certs: dict[str, Path]) -> dict[int, RelayCrypto]:
    """Three parties that know each other's keys, as the coordinator passes them on."""
    out = {k: _relay(certs["ours"], k) for k in range(3)}
    keys = [r.key_message for r in out.values()]
    for r in out.values():
        r.learn(keys)
    return out


def _tensor(a: np.ndarray, wire: str = "float32") -> vfl_pb2.Tensor:
    return encode_float(a, wire)


def _grad(seed: int, shape: tuple[int, int] = (5, 4)) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


@pytest.mark.parametrize("wire", ["float32", "bfloat16", "int8"])
def test_given_a_sealed_tensor_when_its_consumer_opens_it_then_the_same_values(
    relays: dict[int, RelayCrypto], wire: str
) -> None:
    a = _grad(0)
    sealed = relays[0].seal(_tensor(a, wire), EMBED, 7, [1, 2])
    assert not sealed.data and set(sealed.sealed) == {1, 2}
    # the coordinator sees sizes only, each box exactly as long as its shape says
    s = sealed_from_proto(sealed, "embedding", (5, None), wire, 1 << 20)
    assert s.shape == (5, 4) and all(len(b) == box_bytes(wire, (5, 4)) for b in s.boxes.values())
    for k in (1, 2):
        producer, plain = relays[k].open(sealed, EMBED, 7, 0, "embedding")
        assert producer == 0
        assert decode_float(plain, wire).tobytes() == decode_float(_tensor(a, wire), wire).tobytes()


def test_given_a_box_with_one_bit_flipped_when_opened_then_refused_naming_the_party(
    relays: dict[int, RelayCrypto],
) -> None:
    sealed = relays[0].seal(_tensor(_grad(1)), GRAD, 3, [1])
    box = bytearray(sealed.sealed[1])
    box[-20] ^= 1
    sealed.sealed[1] = bytes(box)
    with pytest.raises(ProtocolError, match=r"party 'party0' does not authenticate \(tampered"):
        relays[1].open(sealed, GRAD, 3, None, "gradient")


def test_given_a_box_of_an_earlier_round_or_seen_before_when_opened_then_refused_as_replayed(
    relays: dict[int, RelayCrypto],
) -> None:
    sealed = relays[0].seal(_tensor(_grad(2)), EMBED, 3, [1])
    with pytest.raises(ProtocolError, match="round 3 replayed in round 4"):
        relays[1].open(sealed, EMBED, 4, 0, "embedding")
    relays[1].open(sealed, EMBED, 3, 0, "embedding")
    with pytest.raises(ProtocolError, match="received before \\(replayed\\)"):
        relays[1].open(sealed, EMBED, 3, 0, "embedding")
    # an inference batch may be predicted from several subsets: its boxes open again
    infer = relays[0].seal(_tensor(_grad(2)), INFER, 3, [1])
    relays[1].open(infer, INFER, 3, 0, "embedding")
    relays[1].open(infer, INFER, 3, 0, "embedding")


def test_given_a_box_moved_to_another_slot_or_party_when_opened_then_refused(
    relays: dict[int, RelayCrypto],
) -> None:
    sealed = relays[0].seal(_tensor(_grad(3)), EMBED, 5, [1, 2])
    with pytest.raises(ProtocolError, match="relayed as block 2's"):
        relays[1].open(sealed, EMBED, 5, 2, "embedding of block 2")
    moved = vfl_pb2.Tensor()
    moved.CopyFrom(sealed)
    moved.sealed[1] = sealed.sealed[2]  # party 2's box given to party 1
    with pytest.raises(ProtocolError, match="not sealed for this party"):
        relays[1].open(moved, EMBED, 5, 0, "embedding")


def test_given_a_plaintext_tensor_when_the_run_encrypts_then_refused(
    relays: dict[int, RelayCrypto],
) -> None:
    with pytest.raises(ProtocolError, match="in the clear, but this run encrypts"):
        relays[1].open(_tensor(_grad(4)), EMBED, 1, 0, "embedding")
    req = vfl_pb2.BackwardRequest(round_id=1, has_grad=True, grad=_tensor(_grad(4)))
    with pytest.raises(ProtocolError, match="in the clear"):
        open_backward(relays[1], req)


def test_given_a_coordinator_that_swaps_keys_when_learnt_then_the_substitution_is_refused(
    certs: dict[str, Path], relays: dict[int, RelayCrypto]
) -> None:
    genuine = relays[1].key_message
    own = X25519PrivateKey.generate()
    # its own key under party1's certificate and signature
    swapped = vfl_pb2.RelayKey()
    swapped.CopyFrom(genuine)
    swapped.public_key = make_relay_key(load_identity(certs["ours"], "party1"), 1, own).public_key
    with pytest.raises(RelayKeyError, match="signature does not match party 'party1'"):
        relays[0].learn([swapped])
    # its own key signed with its own (CA-issued) certificate
    coordinator = load_identity(certs["ours"], COORDINATOR)
    signed = make_relay_key(coordinator, 1, own)
    signed.party_id = "party1"
    with pytest.raises(RelayKeyError, match="certificate of 'coordinator', not of party"):
        relays[0].learn([signed])
    # a key signed under another CA
    stranger = make_relay_key(load_identity(certs["other"], "party1"), 1, own)
    with pytest.raises(RelayKeyError, match="not issued by the federation CA"):
        relays[0].learn([stranger])
    # the swapped blocks: party2's genuine key in block 1's place does not verify either
    moved = vfl_pb2.RelayKey()
    moved.CopyFrom(relays[2].key_message)
    moved.block = 1
    with pytest.raises(RelayKeyError, match="signature does not match"):
        verify_relay_key(moved, coordinator.ca)


def test_given_sealed_head_gradients_when_the_party_adds_them_then_bit_identical_to_the_sum(
    relays: dict[int, RelayCrypto],
) -> None:
    """The coordinator forwards the heads' gradients unsummed, in head order; the party adds
    them in that order: exactly the coordinator's plaintext sum, in any wire dtype."""
    grads = {0: _grad(10), 2: _grad(11)}
    for wire in ("float32", "bfloat16"):
        parts = tuple(
            sealed_from_proto(
                relays[k].seal(_tensor(g, wire), GRAD, 9, [1]), "g", None, wire, 1 << 20
            )
            for k, g in grads.items()
        )
        fused = {k: _Fused({1: p}) for k, p in zip(grads, parts, strict=True)}
        call = backward_call(9, 0, fused, 1)
        assert call.grad is None and call.parts == parts and isinstance(parts[0], Sealed)
        req = convert.backward_call_to_proto(call, convert.header(RUN, "party1"), wire)
        open_request(relays[1], "Backward", req, wire)
        got = received_gradient(convert.backward_call_from_proto(req, wire=wire), wire)
        plain = add_in_order([decode_float(_tensor(g, wire), wire) for g in grads.values()])
        expect = decode_float(_tensor(plain, wire), wire)  # as the coordinator would send it
        assert got is not None and got.tobytes() == expect.tobytes()
    assert BackwardCall(1, 0, None).parts == ()


class _Fused:
    def __init__(self, grads: dict) -> None:
        self.grads = grads


def test_given_a_fuse_exchange_when_sealed_and_opened_then_the_party_sees_plain_tensors(
    relays: dict[int, RelayCrypto],
) -> None:
    e = _grad(20)
    reply = vfl_pb2.EmbedReply(round_id=4, embedding=_tensor(e))
    seal_reply(relays[0], "Embed", vfl_pb2.EmbedRequest(train=True), reply)
    assert set(reply.embedding.sealed) == {1, 2}  # not for itself in training
    req = vfl_pb2.FuseRequest(round_id=4, embeddings={0: reply.embedding})
    req.header.relay_keys.extend(r.key_message for r in relays.values())
    open_request(relays[1], "Fuse", req, "float32")
    assert convert.fuse_call_from_proto(req).embeddings[0].tobytes() == e.tobytes()
    # a sealed tensor reaching a party whose run does not encrypt is refused
    sealed = vfl_pb2.FuseRequest(round_id=4, embeddings={0: reply.embedding})
    with pytest.raises(ProtocolError, match="sealed \\(an encrypted relay\\)"):
        convert.fuse_call_from_proto(sealed)


def test_given_encrypt_relay_on_plaintext_or_with_own_steps_when_configured_then_refused() -> None:
    from pydantic import ValidationError

    from vfl_coordinator.config import CoordinatorConfig
    from vfl_core.config import TrainConfig

    with pytest.raises(ValidationError, match="needs TLS certificates"):
        CoordinatorConfig(insecure=True, train=TrainConfig(encrypt_relay=True))
    with pytest.raises(ValidationError, match="runs steps of its own"):
        TrainConfig(method="dvfl", encrypt_relay=True)
