"""The training methods of the paper's Table 1, as small pure rules on blocks and subsets.

Every method runs on the same Party and round engine; a method only decides
- which representation slots a party computes for a batch (one shared f_k, or one per subset),
- which heads exist, what they are fed (mean or concatenation of embeddings) and what they learn,
- which batches can train at all, and who predicts at inference.

laser          one head per label party on the mean of any subset containing it, LASER task sampling
local          each party on its own block alone
ensemble       local predictors; at inference the observing parties vote (random tie-break)
svfl           standard VFL: one head at the active party on the concatenation of all K blocks,
               trained on fully observed batches only; a sample with a missing block gets a random
               prediction, as in the paper
combinatorial  one independent predictor per subset S (own representation models and a head at the
               lowest label block of S), used for exactly the observed set
plug           PlugVFL: the active party's head on the concatenation with zeros for missing blocks,
               party-wise dropout of observed embeddings while training
zerofill       split learning that zero-fills a missing party's embedding (PlugVFL without dropout)
stale          split learning that reuses the last embedding the active party received from a
               missing party for the same training sample (zeros if it never had one, and at
               inference, where no test sample has a past embedding)
The last two, with `svfl` (which skips a round unless every party answered), are the split-learning
baselines of the fault benchmark (DVFL's setting): they differ only in what replaces a party that
failed during training.
dvfl           Decoupled VFL (vfl_core.dvfl): its own round program (vfl_core.dvfl_program); the
               label owner (the active party) is its one predictor

The active party is the lowest block that holds labels.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from vfl_core.config import METHODS as METHODS  # re-exported: one list of methods
from vfl_core.config import Method as Method
from vfl_core.laser import Subset, sample_tasks

# Methods whose one head sits at the active party and sees all K blocks concatenated.
SPLIT_HEAD: tuple[str, ...] = ("svfl", "plug", "zerofill", "stale")
SHARED: Subset = ()  # the slot key of a party's one shared representation model / head
PLUG_DROPOUT = 0.5  # probability that an observed non-active block is dropped in a PlugVFL step
# How reports and the demo name each method (the paper's names where it has one).
METHOD_NAMES: dict[str, str] = {
    "local": "Local",
    "svfl": "Standard VFL",
    "ensemble": "Ensemble",
    "combinatorial": "Combinatorial",
    "plug": "PlugVFL",
    "laser": "LASER-VFL",
    "zerofill": "Zero-fill split learning",
    "stale": "Stale-embedding split learning",
    "dvfl": "DVFL",
}


@dataclass(frozen=True)
class HeadTask:
    """One loss term at a head party: head `head` fed the embeddings of `subset`, times `weight`."""

    head: Subset
    subset: Subset
    weight: float


def subsets_with(block: int, blocks: Sequence[int]) -> list[Subset]:
    """Every subset of `blocks` that contains `block`, smallest first, each sorted."""
    others = sorted(b for b in blocks if b != block)
    return [
        tuple(sorted((block, *rest)))
        for size in range(len(others) + 1)
        for rest in combinations(others, size)
    ]


def active_party(label_blocks: Sequence[int]) -> int | None:
    return min(label_blocks) if label_blocks else None


def owner(subset: Subset, label_blocks: Sequence[int]) -> int | None:
    """The party that holds the combinatorial head of `subset`: its lowest label block."""
    holders = [b for b in subset if b in label_blocks]
    return min(holders) if holders else None


def concatenates(method: str) -> bool:
    """Whether heads see the concatenation of embeddings (else their mean)."""
    return method in SPLIT_HEAD or method == "combinatorial"


def slots(method: str, block: int, blocks: Sequence[int]) -> list[Subset]:
    """Representation slots party `block` computes when `blocks` take part in a batch."""
    if method == "combinatorial":
        return subsets_with(block, blocks)
    return [SHARED]


def head_input_blocks(method: str, head: Subset, num_blocks: int) -> int:
    """How many embeddings of size d a head's input holds."""
    if method in SPLIT_HEAD:
        return num_blocks
    if method == "combinatorial":
        return len(head)
    return 1


def trainable(
    method: str, pattern: Sequence[int], num_blocks: int, label_blocks: Sequence[int]
) -> bool:
    """Whether a batch with this observed set can train anything under `method`."""
    if method == "svfl":
        return len(pattern) == num_blocks
    if method in SPLIT_HEAD:
        return active_party(label_blocks) in pattern
    return any(b in label_blocks for b in pattern)


def fuse_parties(method: str, present: Sequence[int], label_blocks: Sequence[int]) -> list[int]:
    """Head parties that train on a batch whose embeddings came from `present`."""
    heads = [b for b in present if b in label_blocks]
    if method in SPLIT_HEAD:
        active = active_party(label_blocks)
        return [active] if active in present else []
    if method == "combinatorial":
        owners = {owner(s, label_blocks) for s in _all_subsets(present)}
        return sorted(b for b in owners if b is not None)
    return heads


def shares_embeddings(method: str) -> bool:
    """Whether head parties need the other parties' embeddings (local predictors do not)."""
    return method not in ("local", "ensemble")


def fuse_tasks(
    method: str,
    block: int,
    present: Sequence[int],
    num_blocks: int,
    label_blocks: Sequence[int],
    rng: np.random.Generator,
) -> list[HeadTask]:
    """The loss terms party `block` trains on a batch with embeddings from `present`."""
    present = sorted(present)
    if method == "laser":
        return [HeadTask(SHARED, s, w) for s, w in sample_tasks(block, present, rng)]
    if method in ("local", "ensemble"):
        return [HeadTask(SHARED, (block,), 1.0)]
    if method == "svfl":
        full = len(present) == num_blocks and block == active_party(label_blocks)
        return [HeadTask(SHARED, tuple(present), 1.0)] if full else []
    if method == "plug":
        if block != active_party(label_blocks):
            return []
        kept = [b for b in present if b == block or rng.random() >= PLUG_DROPOUT]
        return [HeadTask(SHARED, tuple(kept), 1.0)]
    if method in ("zerofill", "stale"):
        active = block == active_party(label_blocks)
        return [HeadTask(SHARED, tuple(present), 1.0)] if active else []
    if method == "combinatorial":
        return [
            HeadTask(s, s, 1.0) for s in _all_subsets(present) if owner(s, label_blocks) == block
        ]
    raise ValueError(f"unknown method {method!r}")


def predict_subset(method: str, block: int, present: Sequence[int]) -> tuple[Subset, Subset]:
    """(head, subset of embeddings) party `block` predicts with when `present` answered."""
    present = tuple(sorted(present))
    if method in ("local", "ensemble"):
        return SHARED, (block,)
    if method == "combinatorial":
        return present, present
    return SHARED, present


def predictors(
    method: str, present: Sequence[int], num_blocks: int, label_blocks: Sequence[int]
) -> list[int] | None:
    """Parties asked to predict for a batch with embeddings from `present`; None means the
    method cannot use this observed set and counts a random prediction (svfl)."""
    heads = [b for b in sorted(present) if b in label_blocks]
    if method == "svfl":
        return [active_party(label_blocks)] if len(present) == num_blocks else None
    if method in SPLIT_HEAD:
        active = active_party(label_blocks)
        return [active] if active in present else []
    if method == "combinatorial":
        o = owner(tuple(sorted(present)), label_blocks)
        return [o] if o is not None else []
    return heads


def _all_subsets(blocks: Sequence[int]) -> list[Subset]:
    blocks = sorted(blocks)
    return [s for size in range(1, len(blocks) + 1) for s in combinations(blocks, size)]
