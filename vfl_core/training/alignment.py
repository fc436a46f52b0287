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
from collections.abc import Iterable, Sequence

from vfl_core.data.batch_plan import (
    Alignment,
    Batch,
    Group,
    Pattern,
    batch_digest,
    epoch_plan,
    eval_plan,
)

__all__ = [  # the batch plan's names, for the callers that import them from here
    "DEMO_SECRET",
    "KEY_BYTES",
    "UNMATCHED",
    "Alignment",
    "Batch",
    "Group",
    "Pattern",
    "batch_digest",
    "epoch_plan",
    "eval_plan",
    "hash_ids",
    "key_list_fault",
    "unmatched_reason",
]

# The secret that the demo, the simulation and a client without --secret share. Real federations
# set their own (VFL_SECRET); the coordinator never learns it. The batch plan depends on the hashes,
# so a simulation reproduces a gRPC run only with the same secret.
DEMO_SECRET = "vfl-demo-secret"


def hash_ids(ids: Iterable[str], secret: bytes) -> list[bytes]:
    """Keyed hashes of sample IDs; without `secret` they cannot be linked back to IDs."""
    return [hmac.new(secret, str(i).encode("utf-8"), hashlib.sha256).digest() for i in ids]


# How a Shutdown's reason starts when it tells a party that none of its sample IDs matched
# another party's (vfl_coordinator.unmatched sends it; the party exits with it as an error).
UNMATCHED = "none of this party's sample IDs matched another party's"


def unmatched_reason(split: str, rows: int) -> str:
    """What a party whose `rows` sample IDs of `split` matched no other party's is told."""
    return (
        f"{UNMATCHED} ({rows} IDs of its {split} rows): nothing of it can be federated. Are "
        "the IDs written alike at every party (leading zeros, case, spaces, prefixes)? They "
        "match only as written, but for numbers with a zero fraction (12345.0 is read as 12345)"
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
