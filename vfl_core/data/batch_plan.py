"""The batch plan: which samples the parties hold together, and how each epoch cuts them.

An `Alignment` is the union of the parties' samples by key (a keyed ID hash or a PSI value): key
i is held by block b at row rows[b][i]. From it and the shared seed, `epoch_plan` cuts every
epoch into single-pattern batches and `eval_plan` cuts a split for inference. The plan is a pure
function of (seed, epoch, alignment), and the alignment's order is one of the parties' rows, not
of the keys: how the samples were matched (PSI or keyed hashes, which secret) changes no plan.
This is the data layer's vocabulary: the methods and the round engine above it both speak it
(vfl_core.training.aligner builds the alignments).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.seeding import Stream, rng

Pattern = tuple[int, ...]  # sorted blocks that hold a sample's features
# A batch group: its observed pattern and the label parties that hold the samples' labels but
# not their features (label-only rows); every batch comes from one group.
Group = tuple[Pattern, tuple[int, ...]]


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
    # block -> (N,) bool: True where the block's row is label-only (its label, no features)
    label_only: Mapping[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def build(cls, hashes: Mapping[int, Sequence[bytes]]) -> Alignment:
        """The union of the blocks' key lists (block -> its rows' keys, in row order).

        Samples are ordered by the rows that hold them: by block 0's row, then (for samples
        block 0 lacks, which come first) by block 1's, and so on. Never by the key values: those
        depend on how the set was found (an HMAC secret, or PSI values drawn afresh every run),
        while the rows are the same in every run and for both transports, so the batch plan and
        the validation split (both drawn in this order) are the same for a PSI alignment over
        gRPC and a keyed-hash alignment in process (tests/test_alignment_order.py).
        """
        keys = tuple(set().union(*(set(h) for h in hashes.values()))) if hashes else ()
        index = {key: i for i, key in enumerate(keys)}
        rows: dict[int, np.ndarray] = {}
        for block, block_hashes in sorted(hashes.items()):
            if len(set(block_hashes)) != len(block_hashes):
                raise ProtocolError(f"block {block} sent duplicated sample ID hashes")
            r = np.full(len(keys), -1, dtype=np.int64)
            r[[index[h] for h in block_hashes]] = np.arange(len(block_hashes), dtype=np.int64)
            rows[block] = r
        if not rows:
            return cls(keys=keys, rows=rows)
        # np.lexsort's last key is the primary one: the lowest block's row decides first. No two
        # samples have equal rows at every block (each is held by some block, at its own row).
        by_rows = np.lexsort([rows[b] for b in sorted(rows, reverse=True)])
        return cls(
            keys=tuple(keys[i] for i in by_rows), rows={b: r[by_rows] for b, r in rows.items()}
        )

    def __len__(self) -> int:
        return len(self.keys)

    def with_label_only(self, feature_rows: Mapping[int, int]) -> Alignment:
        """This alignment, knowing that block b's rows from feature_rows[b] on are label-only
        (vfl_core.data.party_dir.PartySplit keeps them last)."""
        masks = {
            b: self.rows[b] >= n
            for b, n in sorted(feature_rows.items())
            if b in self.rows and (self.rows[b] >= n).any()
        }
        return replace(self, label_only=masks)

    def subset(self, index: np.ndarray) -> Alignment:
        """The samples at key indices `index` (ascending) as an alignment of their own; each
        keeps its parties' rows."""
        return Alignment(
            keys=tuple(self.keys[int(i)] for i in index),
            rows={b: r[index] for b, r in self.rows.items()},
            label_only={b: m[index] for b, m in self.label_only.items()},
        )

    def unshared(self) -> list[int]:
        """Blocks that hold samples but share none with another block (with two or more
        blocks): almost always IDs written differently by the parties (`007` and `7`)."""
        if len(self.rows) < 2:
            return []
        held = {b: r >= 0 for b, r in self.rows.items()}
        holders = sum(h.astype(np.int64) for h in held.values())
        return [b for b, h in sorted(held.items()) if h.any() and not (holders[h] > 1).any()]

    def patterns(self) -> dict[Pattern, np.ndarray]:
        """Key indices grouped by observed pattern (the blocks holding features), in the
        alignment's order within each group. A sample whose only holders hold just its label is
        in none."""
        groups: dict[Pattern, np.ndarray] = {}
        codes = self._codes(self._features())
        for code in np.unique(codes[codes > 0]):
            groups[self._blocks_of(code)] = np.flatnonzero(codes == code)
        return groups

    def groups(self) -> dict[Group, np.ndarray]:
        """Key indices grouped by (observed pattern, label-only holders), in the alignment's
        order."""
        if not self.label_only:
            return {(p, ()): index for p, index in self.patterns().items()}
        codes = self._codes(self._features())
        holders = self._codes({b: m for b, m in self.label_only.items()})
        combined = codes * (1 << len(self.rows)) + holders  # (N,) one code per group
        groups: dict[Group, np.ndarray] = {}
        for code in np.unique(combined[codes > 0]):
            key = (self._blocks_of(code >> len(self.rows)), self._blocks_of(code))
            groups[key] = np.flatnonzero(combined == code)
        return groups

    def _features(self) -> dict[int, np.ndarray]:
        """block -> (N,) bool: the block holds the sample's features."""
        none = np.zeros(len(self.keys), dtype=bool)
        return {b: (r >= 0) & ~self.label_only.get(b, none) for b, r in self.rows.items()}

    def _codes(self, masks: Mapping[int, np.ndarray]) -> np.ndarray:
        """(N,) int64: bit j set where the j-th block (in sorted order) has its mask set."""
        codes = np.zeros(len(self.keys), dtype=np.int64)
        for j, b in enumerate(sorted(self.rows)):
            if b in masks:
                codes |= masks[b].astype(np.int64) << j
        return codes

    def _blocks_of(self, code: int) -> tuple[int, ...]:
        """The blocks whose bits are set in the low len(rows) bits of `code`."""
        return tuple(b for j, b in enumerate(sorted(self.rows)) if int(code) >> j & 1)

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
    label_only: tuple[int, ...] = ()  # label parties holding these samples' labels only


def _group_order(group: Group) -> tuple[int, Pattern, tuple[int, ...]]:
    """Plans visit groups by pattern size, then pattern, then label-only holders."""
    pattern, holders = group
    return len(pattern), pattern, holders


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
    groups = alignment.groups()
    if weights is not None:
        groups = _resample(groups, weights, gen)
    batches: list[Batch] = []
    for group in sorted(groups, key=_group_order):
        members = gen.permutation(groups[group])
        for start in range(0, len(members), batch_size):
            batches.append(Batch(group[0], members[start : start + batch_size], group[1]))
    order = gen.permutation(len(batches))
    return [batches[i] for i in order]


def _resample(
    groups: dict[Group, np.ndarray], weights: np.ndarray, gen: np.random.Generator
) -> dict[Group, np.ndarray]:
    group_of = np.full(len(weights), -1, dtype=np.int64)  # -1: in no group (nothing to embed)
    ordered = sorted(groups, key=_group_order)
    for j, group in enumerate(ordered):
        group_of[groups[group]] = j
    p = np.where(group_of >= 0, weights, 0.0)
    drawn = np.sort(gen.choice(len(weights), size=len(weights), p=p / p.sum()))
    return {
        g: drawn[group_of[drawn] == j]
        for j, g in enumerate(ordered)
        if (group_of[drawn] == j).any()
    }


def eval_plan(
    alignment: Alignment, batch_size: int, index: np.ndarray | None = None
) -> list[Batch]:
    """Deterministic, unshuffled single-pattern batches for evaluation (of `index` if given)."""
    groups = alignment.groups()
    if index is not None:
        groups = {p: np.intersect1d(g, index) for p, g in groups.items()}
        groups = {p: g for p, g in groups.items() if len(g)}
    return [
        Batch(g[0], groups[g][s : s + batch_size], g[1])
        for g in sorted(groups, key=_group_order)
        for s in range(0, len(groups[g]), batch_size)
    ]
