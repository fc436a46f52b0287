"""The LASER-VFL objective (Valdeira, Wang, Chi, ICLR 2025, eqs. 4, 7, 8).

Party k with head g_k predicts, for any set I of available blocks containing k,
h_{k,I} = g_k(mean_{i in I} E_i). Over a batch whose observed set is O (|O| = m), party k samples
for each size i = 1..m one subset S_ki of O of size i containing k, uniformly, and minimises
L_k = mean_batch sum_i a_i * loss(g_k(mean_{j in S_ki} E_j), y), with a_i = C(m-1, i-1) / i.
In expectation this equals sum_{I: k in I, I subset of O} loss(h_{k,I}) / |I| (Lemma 1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import combinations
from math import comb

import numpy as np
import torch
from torch import nn

Subset = tuple[int, ...]
# One sampled LASER task: (sorted subset of blocks, weight a_i). Not vfl_core.tasks.Task, which
# is the learning task (classification or regression).
WeightedSubset = tuple[Subset, float]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
# A head's input from the embeddings of a subset: their mean (LASER-VFL) or, for the
# concatenating baselines, a concatenation (vfl_core.party.Party._fused).
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


def task_outcomes(k: int, observed: Sequence[int]) -> Iterator[tuple[list[WeightedSubset], float]]:
    """Every possible result of `sample_tasks` with its probability (for exact expectations)."""
    m = len(observed)
    per_size = [subsets_containing(k, observed, size) for size in range(1, m + 1)]

    def rec(
        size: int, chosen: list[WeightedSubset], prob: float
    ) -> Iterator[tuple[list[WeightedSubset], float]]:
        if size > m:
            yield chosen, prob
            return
        options = per_size[size - 1]
        for subset in options:
            yield from rec(size + 1, [*chosen, (subset, task_weight(m, size))], prob / len(options))

    yield from rec(1, [], 1.0)


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
) -> torch.Tensor:
    """The exact objective that `sampled_loss` estimates: sum over every I containing k of
    loss(h_{k,I}) / |I|."""
    observed = sorted(embeddings)
    total = torch.zeros((), device=target.device)
    for size in range(1, len(observed) + 1):
        for subset in subsets_containing(k, observed, size):
            total = total + loss_fn(head(fuse_mean(embeddings, subset)), target) / size
    return total
