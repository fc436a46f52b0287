"""Sample alignment from keyed ID hashes, and the per-epoch batch plan.

Parties send HMAC-SHA256(secret, id) of their sample IDs in row order; the coordinator, which
does not know the secret, learns only which parties hold each (hashed) sample: its observed
pattern. The plan is a pure function of (seed, epoch, alignment).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.seeding import Stream, rng

Pattern = tuple[int, ...]  # sorted blocks that hold a sample

# The secret that the demo, the simulation and a client without --secret share. Real federations
# set their own (VFL_SECRET); the coordinator never learns it. The batch plan depends on the hashes,
# so a simulation reproduces a gRPC run only with the same secret.
DEMO_SECRET = "vfl-demo-secret"


def hash_ids(ids: Iterable[str], secret: bytes) -> list[bytes]:
    """Keyed hashes of sample IDs; without `secret` they cannot be linked back to IDs."""
    return [hmac.new(secret, str(i).encode("utf-8"), hashlib.sha256).digest() for i in ids]


def batch_digest(hashes: Iterable[bytes]) -> bytes:
    """What both sides compute to check that they agree on a batch's samples and order."""
    h = hashlib.sha256()
    for item in hashes:
        h.update(item)
    return h.digest()


@dataclass(frozen=True)
class Alignment:
    """Union of the parties' samples: key i is held by block b at row rows[b][i] (or -1)."""

    keys: tuple[bytes, ...]
    rows: Mapping[int, np.ndarray]  # block -> (N,) int64

    @classmethod
    def build(cls, hashes: Mapping[int, Sequence[bytes]], order: str = "keys") -> Alignment:
        """`order` "keys": samples sorted by key; "rows": by the rows that hold them (block 0's
        row first), which does not depend on the key values (PSI keys are new every run)."""
        keys = tuple(sorted(set().union(*(set(h) for h in hashes.values())))) if hashes else ()
        index = {key: i for i, key in enumerate(keys)}
        rows: dict[int, np.ndarray] = {}
        for block, block_hashes in sorted(hashes.items()):
            if len(set(block_hashes)) != len(block_hashes):
                raise ProtocolError(f"block {block} sent duplicated sample ID hashes")
            r = np.full(len(keys), -1, dtype=np.int64)
            r[[index[h] for h in block_hashes]] = np.arange(len(block_hashes), dtype=np.int64)
            rows[block] = r
        if order == "rows" and rows:
            by_rows = np.lexsort([rows[b] for b in sorted(rows, reverse=True)])
            keys = tuple(keys[i] for i in by_rows)
            rows = {b: r[by_rows] for b, r in rows.items()}
        return cls(keys=keys, rows=rows)

    def __len__(self) -> int:
        return len(self.keys)

    def patterns(self) -> dict[Pattern, np.ndarray]:
        """Key indices grouped by observed pattern, in key order within each group."""
        blocks = sorted(self.rows)
        held = np.stack([self.rows[b] >= 0 for b in blocks], axis=1)  # (N, K)
        codes = held.astype(np.int64) @ (1 << np.arange(len(blocks), dtype=np.int64))  # (N,)
        groups: dict[Pattern, np.ndarray] = {}
        for code in np.unique(codes):
            pattern = tuple(b for j, b in enumerate(blocks) if code >> j & 1)
            groups[pattern] = np.flatnonzero(codes == code)
        return groups

    def digest(self, index: np.ndarray) -> bytes:
        return batch_digest(self.keys[i] for i in index)

    def rows_of(self, block: int, index: np.ndarray) -> np.ndarray:
        r = self.rows[block][index]
        if (r < 0).any():
            raise ValueError(f"block {block} does not hold every sample of the batch")
        return r


@dataclass(frozen=True)
class Batch:
    pattern: Pattern
    index: np.ndarray  # key indices into the alignment, (B,)


def epoch_plan(
    alignment: Alignment,
    seed: int,
    epoch: int,
    batch_size: int,
    weights: np.ndarray | None = None,
) -> list[Batch]:
    """Shuffle each pattern's samples, cut them into batches, shuffle the batch order.

    Without `weights` every sample is used exactly once. With `weights` (class-balanced
    resampling) the epoch draws len(alignment) samples with replacement in proportion to them.
    """
    gen = rng(seed, Stream.PLAN, epoch)
    groups = alignment.patterns()
    if weights is not None:
        groups = _resample(groups, weights, gen)
    batches: list[Batch] = []
    for pattern in sorted(groups, key=lambda p: (len(p), p)):
        members = gen.permutation(groups[pattern])
        for start in range(0, len(members), batch_size):
            batches.append(Batch(pattern, members[start : start + batch_size]))
    order = gen.permutation(len(batches))
    return [batches[i] for i in order]


def _resample(
    groups: dict[Pattern, np.ndarray], weights: np.ndarray, gen: np.random.Generator
) -> dict[Pattern, np.ndarray]:
    pattern_of = np.empty(len(weights), dtype=np.int64)
    patterns = sorted(groups, key=lambda p: (len(p), p))
    for j, pattern in enumerate(patterns):
        pattern_of[groups[pattern]] = j
    drawn = np.sort(gen.choice(len(weights), size=len(weights), p=weights / weights.sum()))
    return {
        p: drawn[pattern_of[drawn] == j]
        for j, p in enumerate(patterns)
        if (pattern_of[drawn] == j).any()
    }


def eval_plan(
    alignment: Alignment, batch_size: int, index: np.ndarray | None = None
) -> list[Batch]:
    """Deterministic, unshuffled single-pattern batches for evaluation (of `index` if given)."""
    groups = alignment.patterns()
    if index is not None:
        groups = {p: np.intersect1d(g, index) for p, g in groups.items()}
        groups = {p: g for p, g in groups.items() if len(g)}
    return [
        Batch(p, groups[p][s : s + batch_size])
        for p in sorted(groups, key=lambda p: (len(p), p))
        for s in range(0, len(groups[p]), batch_size)
    ]
