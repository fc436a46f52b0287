"""The LASER-VFL objective (Valdeira, Wang, Chi, ICLR 2025, eqs. 4, 7, 8), extended to the
subsets of feature-only blocks.

Party k with head g_k predicts, for any set I of available blocks containing k,
h_{k,I} = g_k(mean_{i in I} E_i). Over a batch whose observed set is O (|O| = m), party k samples
for each size i = 1..m one subset S_ki of O of size i containing k, uniformly, and minimises
L_k = mean_batch sum_i a_i * loss(g_k(mean_{j in S_ki} E_j), y), with a_i = C(m-1, i-1) / i.
In expectation this equals sum_{I: k in I, I subset of O} loss(h_{k,I}) / |I| (Lemma 1).

Feature-only blocks. A sample may be observed only by parties without labels (U, the
feature-only blocks): no head sees it in the paper's scheme. So head k also serves the subsets
of O ∩ U, which do not contain k: h_{k,J} = g_k(mean_{j in J} E_j) for non-empty J ⊆ O ∩ U
(|O ∩ U| = u). With the same idea, k samples for each size i = 1..u one subset T_ki of O ∩ U
of size i, uniformly, weighted b_i = C(u, i) / i, and adds sum_i b_i * loss(h_{k,T_ki}, y) to
L_k. The full objective of head k on the batch is then

    F_k(O) = sum_{I ⊆ O, k ∈ I} loss(h_{k,I}) / |I|  +  sum_{∅ ≠ J ⊆ O ∩ U} loss(h_{k,J}) / |J|,

and L_k is an unbiased estimate of it (each part by Lemma 1's argument: b_i counts the size-i
subsets of O ∩ U, over i). k need not be in O: a label party that holds a sample's label but
not its features (a label-only row) trains only the second part. Subsets of O without k that hold
another label party j are left out: j's own head serves them. When every party holds labels,
U is empty and this is the paper's objective, draw for draw.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import combinations
from math import comb

import numpy as np
import torch
from torch import nn

from vfl_core.data.learning_task import LossFn
from vfl_core.model.slots import Subset

# One sampled LASER task: (sorted subset of blocks, weight a_i). Not
# vfl_core.data.learning_task.Task, which is the learning task (classification or regression).
WeightedSubset = tuple[Subset, float]
# A head's input from the embeddings of a subset: their mean (LASER-VFL) or, for the
# concatenating baselines, a concatenation (vfl_core.methods.laser.party_steps.LaserHeads.fused).
FuseFn = Callable[[Mapping[int, torch.Tensor], Subset], torch.Tensor]


def task_weight(m: int, size: int) -> float:
    """a_i = C(m-1, i-1) / i: the number of size-i subsets containing k, over i."""
    if not 1 <= size <= m:
        raise ValueError(f"subset size {size} outside 1..{m}")
    return comb(m - 1, size - 1) / size


def subsets_containing(k: int, observed: Sequence[int], size: int) -> list[Subset]:
    """Every size-`size` subset of `observed` that contains k, each sorted."""
    others = sorted(b for b in observed if b != k)
    return [tuple(sorted((k, *rest))) for rest in combinations(others, size - 1)]


def sample_tasks(k: int, observed: Sequence[int], rng: np.random.Generator) -> list[WeightedSubset]:
    """One uniformly drawn subset per size, with its weight. Choosing i-1 of the other m-1 blocks
    without replacement is uniform over the size-i subsets that contain k."""
    others = np.array(sorted(b for b in observed if b != k), dtype=np.int64)
    m = len(others) + 1
    tasks: list[WeightedSubset] = []
    for size in range(1, m + 1):
        rest = rng.choice(others, size=size - 1, replace=False) if size > 1 else others[:0]
        tasks.append((tuple(sorted((k, *rest.tolist()))), task_weight(m, size)))
    return tasks


def free_task_weight(u: int, size: int) -> float:
    """b_i = C(u, i) / i: the number of size-i subsets of u feature-only blocks, over i."""
    if not 1 <= size <= u:
        raise ValueError(f"subset size {size} outside 1..{u}")
    return comb(u, size) / size


def free_pool(k: int, observed: Sequence[int], unlabelled: Sequence[int]) -> list[int]:
    """O ∩ U without k: the feature-only blocks of the batch, whose subsets head k also serves."""
    return sorted(b for b in set(observed) & set(unlabelled) if b != k)


def sample_free_tasks(pool: Sequence[int], rng: np.random.Generator) -> list[WeightedSubset]:
    """One uniformly drawn subset of `pool` per size 1..u, with its weight b_i."""
    blocks = np.array(sorted(pool), dtype=np.int64)
    u = len(blocks)
    return [
        (
            tuple(sorted(rng.choice(blocks, size=size, replace=False).tolist())),
            free_task_weight(u, size),
        )
        for size in range(1, u + 1)
    ]


def head_tasks(
    k: int, observed: Sequence[int], unlabelled: Sequence[int], rng: np.random.Generator
) -> list[WeightedSubset]:
    """Everything head k trains on a batch with observed set O: LASER's tasks (if k is in O),
    then one subset per size of the feature-only blocks of O (see the module docstring)."""
    own = sample_tasks(k, observed, rng) if k in observed else []
    pool = free_pool(k, observed, unlabelled)
    if not pool:  # no draw: the task RNG stream is exactly the paper's
        return own
    return own + sample_free_tasks(pool, rng)


def task_outcomes(
    k: int, observed: Sequence[int], unlabelled: Sequence[int] = ()
) -> Iterator[tuple[list[WeightedSubset], float]]:
    """Every possible result of `head_tasks` (of `sample_tasks` without feature-only blocks) with
    its probability, for exact expectations."""
    m = len(observed)
    sizes: list[tuple[list[Subset], float]] = []  # per drawn size: (options, weight)
    if k in observed:
        sizes += [(subsets_containing(k, observed, i), task_weight(m, i)) for i in range(1, m + 1)]
    pool = free_pool(k, observed, unlabelled)
    sizes += [
        (list(combinations(pool, i)), free_task_weight(len(pool), i))
        for i in range(1, len(pool) + 1)
    ]

    def rec(
        j: int, chosen: list[WeightedSubset], prob: float
    ) -> Iterator[tuple[list[WeightedSubset], float]]:
        if j == len(sizes):
            yield chosen, prob
            return
        options, weight = sizes[j]
        for subset in options:
            yield from rec(j + 1, [*chosen, (subset, weight)], prob / len(options))

    yield from rec(0, [], 1.0)


def fuse_mean(embeddings: Mapping[int, torch.Tensor], subset: Subset) -> torch.Tensor:
    """Mean of the subset's embeddings, summed in block order so every transport agrees."""
    return torch.stack([embeddings[b] for b in subset]).mean(dim=0)  # (B, d)


def sampled_loss(
    head: nn.Module,
    embeddings: Mapping[int, torch.Tensor],
    tasks: Sequence[WeightedSubset],
    target: torch.Tensor,
    loss_fn: LossFn,
    fuse: FuseFn = fuse_mean,
) -> torch.Tensor:
    """L_k for one batch: sum over the sampled tasks of a_i * mean-batch loss. This is the loss
    every head party trains (Party.fuse), for every method: the baselines pass their own `fuse`
    and tasks."""
    total = torch.zeros((), device=target.device)
    for subset, weight in tasks:
        total = total + weight * loss_fn(head(fuse(embeddings, subset)), target)
    return total


def full_loss(
    head: nn.Module,
    embeddings: Mapping[int, torch.Tensor],
    k: int,
    target: torch.Tensor,
    loss_fn: LossFn,
    unlabelled: Sequence[int] = (),
) -> torch.Tensor:
    """The exact objective that `sampled_loss` of `head_tasks` estimates, F_k(O): the sum over
    every I containing k of loss(h_{k,I}) / |I|, plus over every non-empty J of the feature-only
    blocks of O of loss(h_{k,J}) / |J| (O: the blocks of `embeddings`)."""
    observed = sorted(embeddings)
    subsets = [s for i in range(1, len(observed) + 1) for s in subsets_containing(k, observed, i)]
    if k not in observed:
        subsets = []
    pool = free_pool(k, observed, unlabelled)
    subsets += [s for i in range(1, len(pool) + 1) for s in combinations(pool, i)]
    total = torch.zeros((), device=target.device)
    for subset in subsets:
        total = total + loss_fn(head(fuse_mean(embeddings, subset)), target) / len(subset)
    return total
