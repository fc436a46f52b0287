"""The keys of the encrypted relay: each party's X25519 key signed with its TLS certificate, and
the pairwise AEAD keys derived from them.

A party draws an X25519 key pair when its process starts (one per run it takes part in) and sends
the public key, signed with the private key of its TLS certificate, in every registration
(`vfl.v1.RelayKey`). The coordinator hands every party's signed key to the others with each call
that carries sealed tensors. A receiver accepts a key only if the certificate is issued by the
federation CA, is a party's (not the coordinator's or the operator's), names the party the key
claims, and the signature over (party, block, key) verifies: the coordinator, which relays the
keys, cannot put its own in their place without a party's private key (`RelayKeyError`).

Pair keys: HKDF-SHA256 over the X25519 shared secret, salted with the run id and bound to both
blocks and both public keys, gives one 256-bit AES-GCM key per pair of parties.
"""

from __future__ import annotations

import datetime
import struct
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from vfl_core.errors import ProtocolError
from vfl_wire.security import COORDINATOR, OPERATOR, Identity, certificate_name
from vfl_wire.v1 import vfl_pb2

_CONTEXT = b"vfl relay key v1"
_PAIR_INFO = b"vfl relay pair key v1"
PUBLIC_BYTES = 32


class RelayKeyError(ProtocolError):
    """A relay key that does not prove its party: the coordinator (or someone) substituted it."""


@dataclass(frozen=True)
class PeerKey:
    party_id: str
    block: int
    public: bytes  # 32 bytes, X25519


def signed_bytes(party_id: str, block: int, public: bytes) -> bytes:
    """What a party signs: its name, its block and its relay public key."""
    name = party_id.encode()
    parts = (_CONTEXT, struct.pack(">I", len(name)), name, struct.pack(">i", block), public)
    return b"".join(parts)


def raw_public(private: X25519PrivateKey) -> bytes:
    return private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


def make_relay_key(identity: Identity, block: int, private: X25519PrivateKey) -> vfl_pb2.RelayKey:
    """The party's signed relay key, for its registrations."""
    signer = serialization.load_pem_private_key(identity.key, password=None)
    if not isinstance(signer, ec.EllipticCurvePrivateKey):
        raise RelayKeyError(f"{identity.name}: the relay needs an EC certificate key (vfl certs)")
    public = raw_public(private)
    signature = signer.sign(signed_bytes(identity.name, block, public), ec.ECDSA(hashes.SHA256()))
    return vfl_pb2.RelayKey(
        party_id=identity.name,
        block=block,
        public_key=public,
        certificate=identity.cert,
        signature=signature,
    )


def verify_relay_key(msg: vfl_pb2.RelayKey, ca_pem: bytes) -> PeerKey:
    """The key of `msg` if it proves its party, else RelayKeyError naming what is wrong."""
    what = f"relay key of block {msg.block} ({msg.party_id[:64]!r})"
    if len(msg.public_key) != PUBLIC_BYTES:
        raise RelayKeyError(f"{what}: {len(msg.public_key)} key bytes, expected {PUBLIC_BYTES}")
    try:
        cert = x509.load_pem_x509_certificate(msg.certificate)
        ca = x509.load_pem_x509_certificate(ca_pem)
    except ValueError as err:
        raise RelayKeyError(f"{what}: not a PEM certificate ({err})") from None
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        raise RelayKeyError(f"{what}: its certificate is not issued by the federation CA") from None
    now = datetime.datetime.now(datetime.UTC)
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        raise RelayKeyError(f"{what}: its certificate is not valid now")
    name = certificate_name(msg.certificate)
    if name in (COORDINATOR, OPERATOR) or name != msg.party_id:
        raise RelayKeyError(
            f"{what}: signed with the certificate of {name!r}, not of party {msg.party_id!r} "
            "(a substituted key)"
        )
    signer = cert.public_key()
    if not isinstance(signer, ec.EllipticCurvePublicKey):
        raise RelayKeyError(f"{what}: the certificate's key is not an EC key")
    try:
        signer.verify(
            msg.signature,
            signed_bytes(msg.party_id, msg.block, msg.public_key),
            ec.ECDSA(hashes.SHA256()),
        )
    except InvalidSignature:
        raise RelayKeyError(
            f"{what}: the signature does not match party {name!r}'s certificate (a substituted key)"
        ) from None
    return PeerKey(msg.party_id, msg.block, bytes(msg.public_key))


def pair_key(private: X25519PrivateKey, mine: PeerKey, peer: PeerKey, run_id: str) -> bytes:
    """The 32-byte AEAD key of the pair (mine, peer) in run `run_id`; both sides derive it."""
    shared = private.exchange(X25519PublicKey.from_public_bytes(peer.public))
    ends = sorted(((mine.block, mine.public), (peer.block, peer.public)))
    info = _PAIR_INFO + b"".join(struct.pack(">i", b) + key for b, key in ends)
    return HKDF(hashes.SHA256(), 32, salt=run_id.encode(), info=info).derive(shared)
