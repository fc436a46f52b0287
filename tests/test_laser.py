"""The LASER-VFL objective: task weights, task sampling and the unbiasedness of the sampled loss
(Lemma 1 of the paper, DESIGN.md invariant 2), enumerated exactly on a tiny model, also for the
subsets of feature-only blocks that heads serve. Party.fuse trains through the same
`sampled_loss` (tests/test_party.py checks it bit for bit)."""

from __future__ import annotations

from collections import Counter
from itertools import combinations
from math import comb

import numpy as np
import pytest
import torch
from scipy.stats import chi2
from torch import nn

from vfl_core.methods.laser.objective import (
    free_task_weight,
    full_loss,
    head_tasks,
    sample_tasks,
    sampled_loss,
    subsets_containing,
    task_outcomes,
    task_weight,
)
from vfl_core.seeding import Stream, rng

K = 4
EMBED_DIM = 3
NUM_CLASSES = 3
BATCH = 5


def ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits, target)


def chi_square_ok(counts: Counter, expected: dict, alpha: float = 1e-4) -> bool:
    """Pearson's chi-square goodness of fit at level `alpha` (draws come from fixed seeds)."""
    n = sum(counts.values())
    stat = sum((counts.get(key, 0) - n * p) ** 2 / (n * p) for key, p in expected.items())
    return stat < chi2.ppf(1 - alpha, df=len(expected) - 1)


# ---------------------------------------------------------------- weights


@pytest.mark.parametrize(
    ("m", "expected"),
    [
        (1, [1.0]),
        (2, [1.0, 0.5]),
        (3, [1.0, 1.0, 1 / 3]),
        (4, [1.0, 1.5, 1.0, 0.25]),
        (5, [1.0, 2.0, 2.0, 1.0, 0.2]),
    ],
)
def test_given_m_observed_blocks_when_weighting_sizes_then_a_i_is_binomial_over_i(
    m: int, expected: list[float]
) -> None:
    assert [task_weight(m, i) for i in range(1, m + 1)] == pytest.approx(expected, abs=0)


@pytest.mark.parametrize("m", range(1, 8))
def test_given_m_when_summing_a_i_then_it_is_the_sum_of_one_over_size_over_subsets(m: int) -> None:
    # a_i counts the size-i subsets that contain k, each weighted 1/|I|.
    total = sum(1 / len(s) for i in range(1, m + 1) for s in subsets_containing(0, range(m), i))
    assert sum(task_weight(m, i) for i in range(1, m + 1)) == pytest.approx(total, rel=1e-12)
    for i in range(1, m + 1):
        assert task_weight(m, i) == pytest.approx(comb(m - 1, i - 1) / i, rel=1e-15)


@pytest.mark.parametrize(("m", "size"), [(3, 0), (3, 4), (1, 2)])
def test_given_size_outside_1_to_m_when_weighting_then_value_error(m: int, size: int) -> None:
    with pytest.raises(ValueError, match="outside"):
        task_weight(m, size)


# ---------------------------------------------------------------- sampling


@pytest.mark.parametrize(
    ("k", "observed"),
    [(2, [2]), (0, [0, 3]), (3, [0, 1, 3]), (1, [0, 1, 2, 3]), (5, [5, 0, 7, 2, 9])],
)
def test_given_observed_set_when_sampling_then_one_subset_per_size_containing_k(
    k: int, observed: list[int]
) -> None:
    gen = np.random.default_rng(0)
    m = len(observed)
    for _ in range(50):
        tasks = sample_tasks(k, observed, gen)
        assert [len(s) for s, _ in tasks] == list(range(1, m + 1))
        for subset, weight in tasks:
            assert k in subset
            assert set(subset) <= set(observed)
            assert list(subset) == sorted(set(subset))  # sorted, no repeats
            assert weight == task_weight(m, len(subset))
        assert tasks[-1][0] == tuple(sorted(observed))


@pytest.mark.parametrize(("k", "observed"), [(1, [0, 1, 2, 3]), (2, [0, 1, 2, 3, 4])])
def test_given_many_draws_when_sampling_then_each_size_is_uniform_over_its_subsets(
    k: int, observed: list[int]
) -> None:
    gen = np.random.default_rng(12345)
    draws = [sample_tasks(k, observed, gen) for _ in range(3000)]
    m = len(observed)
    for size in range(2, m):
        options = subsets_containing(k, observed, size)
        counts = Counter(tasks[size - 1][0] for tasks in draws)
        assert set(counts) == set(options)
        assert chi_square_ok(counts, {s: 1 / len(options) for s in options})


@pytest.mark.parametrize(
    ("k", "observed", "draws"), [(0, [0, 1, 2, 3], 2000), (3, [0, 1, 2, 3, 4], 6000)]
)
def test_given_many_draws_when_sampling_then_joint_frequencies_match_task_outcomes(
    k: int, observed: list[int], draws: int
) -> None:
    outcomes = {tuple(s for s, _ in tasks): p for tasks, p in task_outcomes(k, observed)}
    assert sum(outcomes.values()) == pytest.approx(1.0, abs=1e-12)
    gen = np.random.default_rng(7)
    counts = Counter(tuple(s for s, _ in sample_tasks(k, observed, gen)) for _ in range(draws))
    assert set(counts) <= set(outcomes)
    assert chi_square_ok(counts, outcomes)


def test_given_observed_set_when_enumerating_outcomes_then_count_is_product_of_binomials() -> None:
    for m in range(1, 6):
        observed = list(range(m))
        outcomes = list(task_outcomes(0, observed))
        expected = int(np.prod([comb(m - 1, i - 1) for i in range(1, m + 1)]))
        assert len(outcomes) == expected
        assert all(p == pytest.approx(1 / expected) for _, p in outcomes)


def test_given_same_seed_round_party_when_sampling_then_same_tasks_else_other() -> None:
    observed = [0, 1, 2, 3]

    def draw(seed: int, round_id: int, block: int) -> list:
        return sample_tasks(block, observed, rng(seed, Stream.TASKS, round_id, block))

    assert draw(3, 17, 2) == draw(3, 17, 2)
    # Over many rounds the tasks differ with the round, the seed and the party's block.
    by_round = {tuple(draw(3, r, 2)) for r in range(40)}
    by_seed = {tuple(draw(s, 17, 2)) for s in range(40)}
    assert len(by_round) > 1 and len(by_seed) > 1
    # Each party of a round has its own stream.
    streams = {rng(3, Stream.TASKS, 17, b).random() for b in range(K)}
    assert len(streams) == K


# ---------------------------------------------------------------- exact unbiasedness


def brute_force_full(
    head: nn.Module, embeddings: dict[int, torch.Tensor], k: int, target: torch.Tensor
) -> torch.Tensor:
    """The paper's objective written independently of vfl_core.methods.laser.objective: every I
    with k in I and I subset of O, loss(g_k(mean_{j in I} E_j)) / |I|."""
    blocks = sorted(embeddings)
    total = torch.zeros((), dtype=torch.float64)
    for size in range(1, len(blocks) + 1):
        for subset in combinations(blocks, size):
            if k not in subset:
                continue
            fused = sum(embeddings[b] for b in subset) / size
            total = total + ce(head(fused), target) / size
    return total


def tiny_problem(observed: tuple[int, ...], seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    head = nn.Linear(EMBED_DIM, NUM_CLASSES).double()
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float64))
    embeddings = {
        b: torch.randn(BATCH, EMBED_DIM, generator=gen, dtype=torch.float64).requires_grad_(True)
        for b in observed
    }
    target = torch.randint(0, NUM_CLASSES, (BATCH,), generator=gen)
    return head, embeddings, target


OBSERVED_SETS = [(2,), (0, 3), (0, 1, 3), (0, 1, 2, 3)]


@pytest.mark.parametrize("observed", OBSERVED_SETS)
def test_given_every_task_outcome_when_weighting_by_probability_then_equals_full_loss(
    observed: tuple[int, ...],
) -> None:
    head, embeddings, target = tiny_problem(observed)
    params = list(head.parameters())
    leaves = [*params, *(embeddings[b] for b in observed)]
    for k in observed:
        outcomes = list(task_outcomes(k, observed))
        expected = sum(
            p * sampled_loss(head, embeddings, tasks, target, ce) for tasks, p in outcomes
        )
        full = full_loss(head, embeddings, k, target, ce)
        assert expected.item() == pytest.approx(full.item(), abs=1e-6, rel=0)
        assert full.item() == pytest.approx(
            brute_force_full(head, embeddings, k, target).item(), abs=1e-9, rel=0
        )
        # Gradients w.r.t. the head's parameters and every observed embedding agree too.
        grads_expected = torch.autograd.grad(expected, leaves, allow_unused=True)
        grads_full = torch.autograd.grad(full, leaves, allow_unused=True)
        for ge, gf in zip(grads_expected, grads_full, strict=True):
            assert ge is not None and gf is not None
            torch.testing.assert_close(ge, gf, atol=1e-6, rtol=0)


def test_given_float32_model_when_enumerating_then_unbiased_within_float_tolerance() -> None:
    # The parties compute in float32; the identity must also hold there, to float accuracy.
    head, embeddings, target = tiny_problem((0, 1, 2, 3), seed=5)
    head = head.float()
    emb32 = {b: e.detach().float().requires_grad_(True) for b, e in embeddings.items()}
    for k in emb32:
        expected = sum(
            p * sampled_loss(head, emb32, tasks, target, ce)
            for tasks, p in task_outcomes(k, sorted(emb32))
        )
        full = full_loss(head, emb32, k, target, ce)
        assert expected.item() == pytest.approx(full.item(), abs=1e-5, rel=0)


def test_given_sampled_tasks_when_averaged_over_many_draws_then_close_to_full_loss() -> None:
    # Monte Carlo version of the same identity, through the sampler actually used in training.
    observed = (0, 1, 2, 3)
    head, embeddings, target = tiny_problem(observed, seed=2)
    k = 1
    with torch.no_grad():
        per_outcome = {
            tuple(s for s, _ in tasks): float(sampled_loss(head, embeddings, tasks, target, ce))
            for tasks, _ in task_outcomes(k, observed)
        }
        full = float(full_loss(head, embeddings, k, target, ce))
    gen = np.random.default_rng(0)
    draws = [per_outcome[tuple(s for s, _ in sample_tasks(k, observed, gen))] for _ in range(5000)]
    stderr = np.std(draws) / np.sqrt(len(draws))
    assert abs(np.mean(draws) - full) < 5 * stderr + 1e-9


# ---------------------------------------------------------------- feature-only blocks

# (head k, observed set O, feature-only blocks U): three parties with labels at 0; a label-only
# row (k not in O); four parties with labels at 0 and 1; a batch with one feature-only block.
WITH_UNLABELLED = [
    (0, (0, 1, 2), (1, 2)),
    (0, (1, 2), (1, 2)),
    (0, (2,), (1, 2)),
    (1, (0, 1, 2, 3), (2, 3)),
    (0, (0, 3), (2, 3)),
    (3, (0, 1, 3), (1,)),
]


@pytest.mark.parametrize(("u", "expected"), [(1, [1.0]), (2, [2.0, 0.5]), (3, [3.0, 1.5, 1 / 3])])
def test_given_u_feature_only_blocks_when_weighting_then_b_i_is_binomial_over_i(
    u: int, expected: list[float]
) -> None:
    assert [free_task_weight(u, i) for i in range(1, u + 1)] == pytest.approx(expected, abs=0)
    with pytest.raises(ValueError, match="outside"):
        free_task_weight(u, u + 1)


def brute_force_with_unlabelled(
    head: nn.Module,
    embeddings: dict[int, torch.Tensor],
    k: int,
    unlabelled: tuple[int, ...],
    target: torch.Tensor,
) -> torch.Tensor:
    """F_k(O) written independently of vfl_core.methods.laser.objective: every I of O with k in
    I, and every non-empty J of O's feature-only blocks, loss(g_k(mean_J E)) / |J|."""
    blocks = sorted(embeddings)
    total = torch.zeros((), dtype=torch.float64)
    for size in range(1, len(blocks) + 1):
        for subset in combinations(blocks, size):
            if k in subset or set(subset) <= set(unlabelled):
                fused = sum(embeddings[b] for b in subset) / size
                total = total + ce(head(fused), target) / size
    return total


@pytest.mark.parametrize(("k", "observed", "unlabelled"), WITH_UNLABELLED)
def test_given_feature_only_blocks_when_enumerating_task_outcomes_then_equals_full_loss(
    k: int, observed: tuple[int, ...], unlabelled: tuple[int, ...]
) -> None:
    head, embeddings, target = tiny_problem(observed, seed=k + len(observed))
    leaves = [*head.parameters(), *(embeddings[b] for b in observed)]
    outcomes = list(task_outcomes(k, observed, unlabelled))
    assert sum(p for _, p in outcomes) == pytest.approx(1.0, abs=1e-12)
    expected = sum(p * sampled_loss(head, embeddings, tasks, target, ce) for tasks, p in outcomes)
    full = full_loss(head, embeddings, k, target, ce, unlabelled)
    assert expected.item() == pytest.approx(full.item(), abs=1e-6, rel=0)
    brute = brute_force_with_unlabelled(head, embeddings, k, unlabelled, target)
    assert full.item() == pytest.approx(brute.item(), abs=1e-9, rel=0)
    assert full.item() > full_loss(head, embeddings, k, target, ce).item()  # the extra part counts
    grads_expected = torch.autograd.grad(expected, leaves, allow_unused=True)
    grads_full = torch.autograd.grad(full, leaves, allow_unused=True)
    for ge, gf in zip(grads_expected, grads_full, strict=True):
        assert ge is not None and gf is not None
        torch.testing.assert_close(ge, gf, atol=1e-6, rtol=0)


@pytest.mark.parametrize(("k", "observed", "unlabelled"), WITH_UNLABELLED)
def test_given_feature_only_blocks_when_sampling_then_frequencies_match_task_outcomes(
    k: int, observed: tuple[int, ...], unlabelled: tuple[int, ...]
) -> None:
    outcomes = {tuple(t): p for t, p in task_outcomes(k, observed, unlabelled)}
    gen = np.random.default_rng(11)
    draws = [tuple(head_tasks(k, observed, unlabelled, gen)) for _ in range(3000)]
    assert set(draws) <= set(outcomes)
    if len(outcomes) > 1:
        assert chi_square_ok(Counter(draws), outcomes)
    pool = set(observed) & set(unlabelled) - {k}
    for tasks in draws[:50]:
        own = [s for s, _ in tasks if k in s]
        free = [s for s, _ in tasks if k not in s]
        assert len(own) == (len(observed) if k in observed else 0)
        assert [len(s) for s in free] == list(range(1, len(pool) + 1))
        assert all(set(s) <= pool for s in free)


def test_given_every_block_labelled_when_sampling_head_tasks_then_the_papers_draws_exactly() -> (
    None
):
    # With no feature-only block nothing changes: the same tasks from the same RNG state.
    for round_id in range(30):
        paper = sample_tasks(1, (0, 1, 2, 3), rng(0, Stream.TASKS, round_id, 1))
        ours = head_tasks(1, (0, 1, 2, 3), (), rng(0, Stream.TASKS, round_id, 1))
        assert ours == paper
    assert list(task_outcomes(1, (0, 1, 2))) == list(task_outcomes(1, (0, 1, 2), ()))
