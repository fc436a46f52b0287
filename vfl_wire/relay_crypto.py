"""A party's end of the encrypted relay: seal the embeddings and gradients it sends for the
parties that consume them, and open those it receives (TrainConfig.encrypt_relay).

Crypto of the relay lives in vfl_wire, not vfl_core: it is bound to the TLS certificates
(vfl_wire.security) and to the message format (vfl_wire.relay_box), and the in-process transport,
which has no coordinator to hide anything from, stays plaintext. The party's learning code sees
plain arrays as before.

Every refusal is a `ProtocolError` naming the producing party and the round: a box replayed from
another round or direction, one meant for another party, one whose tag does not verify (tampered,
or sealed under a key this party does not hold), one seen before (replayed in the same round).
The call is then refused and the round goes on without this party's answer (the missing-party
path of the round engine).
"""

from __future__ import annotations

import logging
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from vfl_core.errors import ProtocolError
from vfl_wire.relay_box import (
    HEADER,
    INFER,
    NONCE_BYTES,
    PROBS,
    BoxHeader,
    associated_data,
    box_bytes,
    read_header,
    scale_bytes,
)
from vfl_wire.relay_keys import PeerKey, make_relay_key, pair_key, raw_public, verify_relay_key
from vfl_wire.security import Identity
from vfl_wire.v1 import vfl_pb2

log = logging.getLogger(__name__)

SEEN_LIMIT = 1 << 17  # nonces of training boxes remembered against replays within a round


class RelayCrypto:
    """One party's relay keys: its own X25519 pair (signed, for its registrations), the peers'
    keys it has verified, their pair keys, and the nonces of the training boxes it opened."""

    def __init__(self, identity: Identity, block: int) -> None:
        self._private = X25519PrivateKey.generate()
        self.block = block
        self.party_id = identity.name
        self.key_message = make_relay_key(identity, block, self._private)
        self._mine = PeerKey(identity.name, block, raw_public(self._private))
        self._ca = identity.ca
        self.run_id = ""
        self._verified: dict[bytes, PeerKey] = {}  # serialized RelayKey -> its checked key
        self._peers: dict[int, tuple[PeerKey, AESGCM]] = {}  # block -> key, pair cipher
        self._seen: OrderedDict[bytes, None] = OrderedDict()

    def start(self, run_id: str) -> None:
        """Join run `run_id` (the salt of the pair keys and part of every box's binding)."""
        if run_id != self.run_id:
            self.run_id = run_id
            self._peers.clear()
            # its own inference embedding comes back to a head in Predict: a key with itself
            key = pair_key(self._private, self._mine, self._mine, run_id)
            self._peers[self.block] = (self._mine, AESGCM(key))

    @property
    def peers(self) -> list[int]:
        return sorted(self._peers)

    def learn(self, keys: Sequence[vfl_pb2.RelayKey]) -> None:
        """Take the peers' relay keys the coordinator passed on: each must prove its party
        (relay_keys.verify_relay_key), else the call is refused naming it."""
        for msg in keys:
            raw = msg.SerializeToString(deterministic=True)
            peer = self._verified.get(raw)
            if peer is None:
                peer = verify_relay_key(msg, self._ca)
                self._verified[raw] = peer
            if peer.block == self.block:
                if peer.public != self._mine.public:
                    log.info("the relay key of a former process of block %d ignored", peer.block)
                continue
            known = self._peers.get(peer.block)
            if known is None or known[0] != peer:
                key = pair_key(self._private, self._mine, peer, self.run_id)
                self._peers[peer.block] = (peer, AESGCM(key))
                log.info("relay key of party %s (block %d) verified", peer.party_id, peer.block)

    # ------------------------------------------------------------------ tensors
    def seal(
        self, t: vfl_pb2.Tensor, direction: int, round_id: int, consumers: Iterable[int]
    ) -> vfl_pb2.Tensor:
        """`t` (values in the clear) as one box per consumer whose key this party holds."""
        payload = t.data + t.scales
        shape = tuple(t.shape)
        out = vfl_pb2.Tensor(dtype=t.dtype, shape=shape)
        for consumer in consumers:
            known = self._peers.get(consumer)
            if known is None:
                continue  # no key yet: the coordinator cannot forward to it (it misses the call)
            header = BoxHeader(direction, round_id, self.block, consumer).pack()
            nonce = os.urandom(NONCE_BYTES)
            aad = associated_data(header, self.run_id, t.dtype, shape)
            out.sealed[consumer] = header + nonce + known[1].encrypt(nonce, payload, aad)
        return out

    def open(
        self,
        t: vfl_pb2.Tensor,
        direction: int,
        round_id: int,
        producer: int | None,
        what: str,
    ) -> tuple[int, vfl_pb2.Tensor]:
        """(producer, `t` with its values in the clear): this party's box of `t`, checked to be
        of `direction`, round `round_id`, from `producer` (None: any) and for this party."""
        if not t.sealed:
            raise ProtocolError(
                f"{what}: in the clear, but this run encrypts its relay (--encrypt-relay): refused"
            )
        box = t.sealed.get(self.block)
        if box is None:
            raise ProtocolError(f"{what}: no sealed box for this party (block {self.block})")
        head = read_header(box, what)
        self._check(head, direction, round_id, producer, what)
        known = self._peers.get(head.producer)
        if known is None:
            raise ProtocolError(f"{what}: no verified relay key of block {head.producer} yet")
        shape = tuple(t.shape)
        if len(box) != box_bytes(t.dtype, shape):
            raise ProtocolError(f"{what}: sealed box of {len(box)} bytes for shape {shape}")
        nonce = box[HEADER.size : HEADER.size + NONCE_BYTES]
        aad = associated_data(box[: HEADER.size], self.run_id, t.dtype, shape)
        try:
            payload = known[1].decrypt(nonce, box[HEADER.size + NONCE_BYTES :], aad)
        except InvalidTag:
            raise ProtocolError(
                f"{what}: the {head.describe()} from party {known[0].party_id!r} does not "
                "authenticate (tampered, or sealed under another key): refused"
            ) from None
        # a training box is opened once; an inference batch may be predicted from several
        # subsets, and an evaluation batch scored again (a retried Score call)
        if direction not in (INFER, PROBS):
            self._remember(nonce, head, known[0], what)
        data_bytes = len(payload) - scale_bytes(t.dtype, shape)
        plain = vfl_pb2.Tensor(dtype=t.dtype, shape=shape, data=payload[:data_bytes])
        if data_bytes < len(payload):
            plain.scales = payload[data_bytes:]
        return head.producer, plain

    def _check(
        self, head: BoxHeader, direction: int, round_id: int, producer: int | None, what: str
    ) -> None:
        if head.consumer != self.block:
            raise ProtocolError(f"{what}: the {head.describe()} was not sealed for this party")
        if head.direction != direction or head.round_id != round_id:
            raise ProtocolError(
                f"{what}: the {head.describe()} replayed in round {round_id}: refused"
            )
        if producer is not None and head.producer != producer:
            raise ProtocolError(
                f"{what}: the {head.describe()} relayed as block {producer}'s: refused"
            )

    def _remember(self, nonce: bytes, head: BoxHeader, peer: PeerKey, what: str) -> None:
        key = head.producer.to_bytes(4, "big", signed=True) + nonce
        if key in self._seen:
            raise ProtocolError(
                f"{what}: the {head.describe()} from party {peer.party_id!r} was received "
                "before (replayed): refused"
            )
        self._seen[key] = None
        while len(self._seen) > SEEN_LIMIT:
            self._seen.popitem(last=False)
