"""Private set intersection for sample alignment: multi-party ECDH-PSI on Curve25519.

Why it works. X25519(k, u) is the x-coordinate of [clamp(k)] P, where P is a point of Curve25519
or of its quadratic twist with x-coordinate u (RFC 7748 accepts any 32-byte u and masks bit 255).
Scalar multiplication commutes, so X25519(a, X25519(b, u)) == X25519(b, X25519(a, u)): applying
every party's secret scalar, in any order, to the point of an ID gives one value per ID that no
one can compute without all the scalars (tests/test_psi.py checks the commutativity, clamping
included, before anything relies on it).

The protocol (`psi_align`, run by the coordinator through a `Transport`):
1. Each party k maps its IDs to points, u = SHA-512("vfl-psi-v1" || id)[:32] with bit 255
   cleared, applies its fresh secret a_k and returns the list in its row order (`psi_blind`).
2. For K-1 steps, each list goes to one other party, which applies its own secret
   (`psi_apply`). The coordinator shuffles a list before it leaves and un-shuffles the answer, so
   a relaying party sees only how many samples the owner holds, never which row is which.
3. The coordinator applies a secret c of its own and gets, for each party's rows, the final value
   X25519(c * a_1 * ... * a_K, u(id)): equal across parties exactly when the IDs are equal. It
   aligns on these values and sends each party the values of its own rows (`psi_keys`), which the
   party then uses for the batch digests. c keeps the last relaying party of a list from matching
   what it computed against the final values of its own rows.

Cost (benchmarks/results/psi.md). Every list gets every party's secret, K^2 N scalar
multiplications for K parties of N IDs, plus the coordinator's. Large lists are cut into chunks
that a pool of worker processes (`psi_workers`: one per core or `VFL_PSI_WORKERS`, started once
per process) multiplies in parallel: a party's workers are its own child processes, so its secret
never leaves its machine. The coordinator
applies its secret once per distinct value rather than once per row: after every party's secret,
equal IDs already have equal values (the coordinator learns that equality anyway from the final
values), so it multiplies the union of the lists, about N values at 90% overlap instead of K N.

What the coordinator sees: points blinded by at least one party secret; it cannot recompute one
from an ID without a party's secret, and learns only how many parties hold each aligned sample and
which (the observed pattern). A relaying party learns the size of the other lists. Threat model:
an honest-but-curious coordinator. A coordinator that deviates could pad a list with points of
guessed IDs and learn which of them a party holds; each party therefore applies its secret to at
most K - 1 lists per session and split (`PartyPsi`), which bounds but does not remove that.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from vfl_core.errors import ConfigError, ProtocolError
from vfl_core.protocol import PsiCall, Transport
from vfl_core.training import psi_workers
from vfl_core.training.alignment import key_list_fault

log = logging.getLogger(__name__)

POINT_BYTES = 32
_P = 2**255 - 19
# The X25519 inputs of small order: RFC 7748 reads u modulo p with the top bit ignored, so each of
# the 7 such u (0, 1, p-1, the two of order 8, and p, p+1 for 0 and 1) has two encodings. The
# exchange with one is all zeros, which `cryptography` refuses: checked at the coordinator before
# a list is passed on, so the party that sent one, and no other, is left out.
_SMALL_ORDER_U = (
    0,
    1,
    _P - 1,
    _P,
    _P + 1,
    325606250916557431795983626356110631294008115727848805560023387167927233504,
    39382357235489614581723060781553021112529911719440698176882885853963445705823,
)
SMALL_ORDER = frozenset(
    (u | top << 255).to_bytes(POINT_BYTES, "little") for u in _SMALL_ORDER_U for top in (0, 1)
)
DOMAIN = b"vfl-psi-v1\0"  # separates our ID points from any other use of SHA-512 on the IDs
MAX_SESSION_CHARS = 64
# Lists shorter than this are multiplied in the calling process: handing chunks to the worker
# processes (vfl_core.training.psi_workers; started once per process) costs more than it saves
# on small lists.
PARALLEL_MIN_POINTS = 20_000
CHUNKS_PER_WORKER = 4  # smaller chunks even out the workers' finishing times


def id_point(sample_id: object) -> bytes:
    """The Curve25519 u-coordinate of an ID (public: anyone can compute it from the ID)."""
    digest = bytearray(hashlib.sha512(DOMAIN + str(sample_id).encode("utf-8")).digest()[:32])
    digest[31] &= 0x7F  # X25519 ignores bit 255; clear it so two IDs never differ only there
    return bytes(digest)


def new_session() -> str:
    """A fresh, unguessable session name: parties draw new secrets for every session."""
    return secrets.token_hex(8)


class PsiKey:
    """A secret X25519 scalar, applied to lists of points (in parallel for large ones)."""

    def __init__(self, key: X25519PrivateKey | None = None, processes: int | None = None) -> None:
        self._key = key or X25519PrivateKey.generate()
        self.processes = psi_workers.workers() if processes is None else processes

    def apply(self, points: Sequence[bytes], what: str = "psi points") -> list[bytes]:
        for i, point in enumerate(points):
            if len(point) != POINT_BYTES:
                raise ProtocolError(f"{what}: point {i} has {len(point)} bytes, not {POINT_BYTES}")
        return unpack(self._map(_apply_chunk, pack(points), what), what)

    def blind(self, ids: Sequence[object]) -> list[bytes]:
        """The points of `ids` under this secret, in order."""
        texts = [str(i) for i in ids]
        if not texts:
            return []
        if any("\0" in t for t in texts):  # the separator must not occur inside an ID
            return self.apply([id_point(t) for t in texts], "own ids")
        blob = "\0".join(texts).encode("utf-8")
        return unpack(self._map(_blind_chunk, blob, "own ids", count=len(ids)), "own ids")

    def _map(self, work, blob: bytes, what: str, count: int | None = None) -> bytes:
        """`work(secret, chunk, what, first)` over chunks of `blob` (points, or IDs joined by
        NUL when `count` is given), in this process or a pool; the results concatenated."""
        n = len(blob) // POINT_BYTES if count is None else count
        secret = self._key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        if n < PARALLEL_MIN_POINTS or self.processes < 2:
            return work(secret, blob, what, 0)
        chunks = _chunks(blob, n, self.processes * CHUNKS_PER_WORKER, ids=count is not None)
        return psi_workers.run(self.processes, work, secret, chunks, what)


def _chunks(blob: bytes, n: int, parts: int, ids: bool) -> list[tuple[int, bytes]]:
    """(index of the first item, bytes) of about `parts` equal slices of `n` items."""
    size = -(-n // parts)
    if not ids:
        step = size * POINT_BYTES
        return [(i // POINT_BYTES, blob[i : i + step]) for i in range(0, len(blob), step)]
    items = blob.split(b"\0")
    return [(i, b"\0".join(items[i : i + size])) for i in range(0, n, size)]


def _apply_chunk(secret: bytes, blob: bytes, what: str, first: int) -> bytes:
    """Worker: the secret applied to packed points (indices in errors count from `first`)."""
    key = X25519PrivateKey.from_private_bytes(secret)
    out = []
    for i in range(0, len(blob), POINT_BYTES):
        try:
            out.append(key.exchange(X25519PublicKey.from_public_bytes(blob[i : i + POINT_BYTES])))
        except ValueError:  # all-zero result: a point of small order, never an ID's
            index = first + i // POINT_BYTES
            raise ProtocolError(f"{what}: point {index} is of small order") from None
    return b"".join(out)


def _blind_chunk(secret: bytes, blob: bytes, what: str, first: int) -> bytes:
    """Worker: the points of NUL-separated IDs under the secret."""
    points = b"".join(id_point(i) for i in blob.decode("utf-8").split("\0"))
    return _apply_chunk(secret, points, what, first)


def pack(points: Sequence[bytes]) -> bytes:
    """Points as one byte string (32 bytes each), for the wire."""
    return b"".join(points)


def unpack(blob: bytes, what: str = "psi points", count: int | None = None) -> list[bytes]:
    if len(blob) % POINT_BYTES:
        raise ProtocolError(f"{what}: {len(blob)} bytes is not a whole number of 32-byte points")
    n = len(blob) // POINT_BYTES
    if count is not None and n != count:
        raise ProtocolError(f"{what}: {n} points, expected {count}")
    return [blob[i * POINT_BYTES : (i + 1) * POINT_BYTES] for i in range(n)]


def check_session(session: str) -> str:
    if not session or len(session) > MAX_SESSION_CHARS or not session.isascii():
        raise ProtocolError(f"psi session: {session[:80]!r} is not a valid session name")
    return session


# ---------------------------------------------------------------------------------------------
# The party's side
# ---------------------------------------------------------------------------------------------


@dataclass
class PartyPsi:
    """A party's PSI secrets, one per (session, split), and its apply quota."""

    max_lists: int  # lists of other parties it applies its secret to per session and split
    _keys: dict[tuple[str, str], PsiKey] = field(default_factory=dict)
    _applied: dict[tuple[str, str], int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _key(self, session: str, split: str) -> PsiKey:
        with self._lock:
            slot = (check_session(session), split)
            if slot not in self._keys:
                self._keys = {k: v for k, v in self._keys.items() if k[0] == session}
                self._keys[slot] = PsiKey()  # a new session forgets the old secrets
            return self._keys[slot]

    def blind(self, session: str, split: str, ids: Iterable[object]) -> list[bytes]:
        """The party's own IDs as points under its secret, in row order."""
        return self._key(session, split).blind(list(ids))

    def apply(self, session: str, split: str, points: Sequence[bytes]) -> list[bytes]:
        """Apply the secret to another party's list (at most `max_lists` times)."""
        slot = (check_session(session), split)
        with self._lock:
            used = self._applied.get(slot, 0)
            if used >= self.max_lists:
                raise ProtocolError(
                    f"psi apply: already applied to {used} lists in session {session} "
                    f"({split}); a federation of this size needs at most {self.max_lists}"
                )
            self._applied[slot] = used + 1
        return self._key(session, split).apply(points)


def check_keys(keys: Sequence[bytes], rows: int, what: str = "psi keys") -> list[bytes]:
    """The final values of a party's rows: one 32-byte value per row, all distinct (what the
    coordinator checks of every party's list, vfl_core.training.alignment.key_list_fault)."""
    fault = key_list_fault(keys, rows)
    if fault is not None:
        raise ProtocolError(f"{what}: {fault}")
    return list(keys)


# ---------------------------------------------------------------------------------------------
# The coordinator's side
# ---------------------------------------------------------------------------------------------


def psi_align(transport: Transport, split: str, blocks: list[int]) -> dict[int, list[bytes]]:
    """Run the PSI for one split; returns, per block that took part, its rows' final values.

    A party that fails at any step is left out and the split starts over without it (its list
    would lack its secret). The result also went to each party through `psi_keys`.
    """
    remaining = sorted(blocks)
    while remaining:
        session = new_session()
        final, failed = _psi_round(transport, split, remaining, session)
        if not failed:
            delivered = transport.psi_keys(
                {b: PsiCall(split, session, final[b]) for b in remaining}
            )
            missing = set(remaining) - delivered
            if missing:
                log.warning("psi %s: blocks %s did not take their keys", split, sorted(missing))
            return {b: final[b] for b in remaining}
        log.warning("psi %s: blocks %s failed; starting over without them", split, sorted(failed))
        remaining = [b for b in remaining if b not in failed]
    raise ConfigError(f"psi alignment of '{split}': no party completed it")


def _psi_round(
    transport: Transport, split: str, blocks: list[int], session: str
) -> tuple[dict[int, list[bytes]], set[int]]:
    lists = transport.psi_blind(split, session, blocks)
    failed = set(blocks) - lists.keys() | _small_order(split, "its own list", lists)
    if failed:
        return {}, failed
    shuffle = np.random.default_rng(secrets.randbits(128))
    for step in range(1, len(blocks)):  # list of blocks[i] goes to blocks[i + step]
        holder = {blocks[(i + step) % len(blocks)]: owner for i, owner in enumerate(blocks)}
        perms = {owner: shuffle.permutation(len(lists[owner])) for owner in blocks}
        calls = {
            j: PsiCall(split, session, [lists[owner][p] for p in perms[owner]])
            for j, owner in holder.items()
        }
        answers = transport.psi_apply(calls)
        failed = {j for j in holder if j not in answers or len(answers[j]) != len(calls[j].points)}
        failed |= _small_order(split, "another's list", answers)
        if failed:
            return {}, failed
        for j, owner in holder.items():
            unshuffled: list[bytes] = [b""] * len(perms[owner])
            for position, p in enumerate(perms[owner]):
                unshuffled[p] = answers[j][position]
            lists[owner] = unshuffled
    return _final_values(lists, blocks), set()


def _small_order(split: str, what: str, lists: dict[int, list[bytes]]) -> set[int]:
    """The blocks whose list holds a point of small order (never an ID's: a bug, or a party out
    to stop the alignment), said."""
    bad = {b for b, points in lists.items() if not SMALL_ORDER.isdisjoint(points)}
    for block in sorted(bad):
        log.warning("psi %s: block %d sent a point of small order in %s", split, block, what)
    return bad


def _final_values(lists: dict[int, list[bytes]], blocks: list[int]) -> dict[int, list[bytes]]:
    """The coordinator's secret applied to every list, once per distinct value (equal IDs have
    equal values once every party's secret is on them)."""
    distinct = list(dict.fromkeys(v for b in blocks for v in lists[b]))
    final = dict(zip(distinct, PsiKey().apply(distinct, "psi lists"), strict=True))
    return {b: [final[v] for v in lists[b]] for b in blocks}
