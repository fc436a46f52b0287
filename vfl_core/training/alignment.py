"""Sample IDs as keys: keyed ID hashes, the demo secret, and the checks on a party's key list.

Parties send HMAC-SHA256(secret, id) of their sample IDs in row order; the coordinator, which
does not know the secret, learns only which parties hold each (hashed) sample: its observed
pattern. The alignment and the batch plan built from the keys live in the data layer
(vfl_core.data.batch_plan, re-exported here for the callers that import them from here); the
engine's alignment of a run (PSI or hashes, re-alignment, key resend) is
vfl_core.training.aligner.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence

from vfl_core.data.batch_plan import (
    Alignment,
    Batch,
    Group,
    Pattern,
    batch_digest,
    epoch_plan,
    eval_plan,
)
from vfl_core.errors import DataError

__all__ = [  # the batch plan's names, for the callers that import them from here
    "DEMO_SECRET",
    "KEY_BYTES",
    "UNMATCHED",
    "Alignment",
    "Batch",
    "Group",
    "Pattern",
    "UnmatchedIds",
    "batch_digest",
    "check_shared",
    "epoch_plan",
    "eval_plan",
    "hash_ids",
    "key_list_fault",
]

# The secret that the demo, the simulation and a client without --secret share. Real federations
# set their own (VFL_SECRET); the coordinator never learns it. The batch plan depends on the hashes,
# so a simulation reproduces a gRPC run only with the same secret.
DEMO_SECRET = "vfl-demo-secret"


def hash_ids(ids: Iterable[str], secret: bytes) -> list[bytes]:
    """Keyed hashes of sample IDs; without `secret` they cannot be linked back to IDs."""
    return [hmac.new(secret, str(i).encode("utf-8"), hashlib.sha256).digest() for i in ids]


# How the error starts when, before training, a party's sample IDs matched no other party's:
# the run is refused (the coordinator tells every party so as the run's end; each party adds a
# few of its own IDs to the error it prints, which never leave it).
UNMATCHED = "refused before training: sample IDs that match no other party's"


class UnmatchedIds(DataError):
    """Some party's training IDs match no other party's: it would add nothing to the run."""


def check_shared(alignment: Alignment, party_ids: Mapping[int, str], split: str = "train") -> None:
    """Raise UnmatchedIds naming each block of `alignment` that shares none of its samples with
    another block (IDs written differently by the parties, almost always), before training."""
    unshared = alignment.unshared()
    if not unshared:
        return
    blocks = "; ".join(
        f"block {b} ({party_ids.get(b, '?')}) shares none of its "
        f"{int((alignment.rows[b] >= 0).sum())} {split} IDs with another party"
        for b in unshared
    )
    raise UnmatchedIds(
        f"{UNMATCHED}: {blocks}, so it would add nothing to the federation. Are the IDs "
        "written alike at every party (leading zeros, case, spaces inside, prefixes)? They "
        "match as written, but for the spaces around a cell and a number's zero fraction "
        "(12345.0 is read as 12345)"
    )


KEY_BYTES = 32  # an HMAC-SHA256 of an ID, or a PSI value (a point's 32 bytes)


def key_list_fault(keys: Sequence[bytes], rows: int) -> str | None:
    """What is wrong with a party's keys of one split, which it holds `rows` rows of (one
    distinct KEY_BYTES key per row, in row order), or None. A list that is not that would make
    the alignment point at rows the party does not hold, or at two samples in one row."""
    if len(keys) != rows:
        return f"{len(keys)} keys for {rows} rows"
    short = next((len(k) for k in keys if len(k) != KEY_BYTES), None)
    if short is not None:
        return f"a key of {short} bytes, not {KEY_BYTES}"
    if len(set(keys)) != len(keys):
        return f"{len(keys) - len(set(keys))} duplicated keys"
    return None
