"""The label-leak defences of vfl_core.privacy.defences on hand-made batches: each removes the
signal its attack reads, and the accountant agrees with opacus's published figures."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import roc_auc_score

from vfl_core.privacy.defences import (
    clip_and_noise,
    direction_noise,
    epsilon,
    max_norm,
    randomized_response,
)


def _leaky_batch(n: int = 2000, d: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Gradients as a softmax head gives them: +w for one class, -w for the other, the minority
    (positive) class with the larger norms."""
    gen = torch.Generator().manual_seed(0)
    labels = (torch.rand(n, generator=gen) < 0.2).long()
    w = torch.randn(d, generator=gen)
    scale = torch.where(labels == 1, 0.8, 0.2) * (1 + 0.1 * torch.rand(n, generator=gen))
    sign = torch.where(labels == 1, -1.0, 1.0)
    return (sign * scale)[:, None] * w[None, :], labels


def _auc(labels: torch.Tensor, score: torch.Tensor) -> float:
    a = roc_auc_score(labels.numpy(), score.numpy())
    return max(a, 1 - a)


def _cosine_auc(grads: torch.Tensor, labels: torch.Tensor) -> float:
    ref = grads[int(torch.nonzero(labels == 1)[0])]
    cos = grads @ ref / (grads.norm(dim=1) * ref.norm()).clamp_min(1e-12)
    return _auc(labels, cos)


def test_given_leaky_gradients_when_max_norm_then_norms_no_longer_rank_the_classes():
    grads, labels = _leaky_batch()
    assert _auc(labels, grads.norm(dim=1)) > 0.99
    out = max_norm(grads, torch.Generator().manual_seed(1))
    assert _auc(labels, out.norm(dim=1)) < 0.6


def test_given_leaky_gradients_when_direction_noise_then_the_cosine_attack_weakens():
    grads, labels = _leaky_batch()
    assert _cosine_auc(grads, labels) > 0.99
    out = direction_noise(grads, labels, power=4.0, generator=torch.Generator().manual_seed(2))
    assert _cosine_auc(out, labels) < 0.75


def test_given_one_class_only_when_direction_noise_then_gradients_unchanged():
    grads, labels = _leaky_batch()
    same = torch.zeros_like(labels)
    assert torch.equal(direction_noise(grads, same, power=4.0), grads)


def test_given_large_embeddings_when_clip_without_noise_then_every_norm_at_most_clip():
    emb = torch.randn(100, 6) * 10
    out = clip_and_noise(emb, clip=1.0, noise_multiplier=0.0)
    assert (out.norm(dim=1) <= 1.0 + 1e-5).all()
    small = torch.full((3, 6), 0.01)
    assert torch.allclose(clip_and_noise(small, clip=1.0, noise_multiplier=0.0), small)


def test_given_noise_multiplier_when_clip_and_noise_then_noise_std_is_multiplier_times_clip():
    emb = torch.zeros(20000, 4)
    out = clip_and_noise(emb, clip=2.0, noise_multiplier=0.5, generator=torch.Generator())
    assert out.std().item() == pytest.approx(1.0, rel=0.03)


def test_given_dp_sgd_setting_when_epsilon_then_it_is_the_published_order_and_monotone():
    # TF Privacy's MNIST tutorial setting (sigma 1.1, batch 256 of 60,000, 60 epochs, delta
    # 1e-5) is quoted at epsilon ~3 with the older RDP conversion; opacus's tighter one gives less.
    steps = 60 * 60000 // 256
    eps = epsilon(noise_multiplier=1.1, sample_rate=256 / 60000, steps=steps, delta=1e-5)
    assert 2.0 < eps < 3.1
    assert epsilon(2.0, 256 / 60000, steps, 1e-5) < eps  # more noise, less loss
    assert epsilon(1.1, 256 / 60000, 2 * steps, 1e-5) > eps  # more releases, more loss
    assert epsilon(1.1, 512 / 60000, steps, 1e-5) > eps  # larger batches, more loss
    assert math.isinf(epsilon(0.0, 0.01, 10, 1e-5))


def test_given_epsilon_when_randomized_response_then_keep_rate_is_exp_eps_over_sum():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, size=60000)
    labels[:100] = -1  # unlabelled rows stay
    out = randomized_response(labels, eps=1.0, num_classes=3, rng=rng)
    assert (out[:100] == -1).all()
    kept = (out[100:] == labels[100:]).mean()
    assert kept == pytest.approx(math.e / (math.e + 2), abs=0.01)
    assert set(np.unique(out[100:])) == {0, 1, 2}


def test_given_a_seed_when_two_guards_of_one_party_then_they_draw_the_same_noise():
    from vfl_core.privacy.config import PrivacyConfig
    from vfl_core.privacy.guards import PartyGuard

    config = PrivacyConfig(gradient_defence="max_norm", embedding_clip=1.0, embedding_noise=1.0)
    grads, labels = _leaky_batch(64)
    a, b = PartyGuard(config, seed=3, block=0), PartyGuard(config, seed=3, block=0)
    assert torch.equal(a.gradient(grads, labels), b.gradient(grads, labels))
    assert torch.equal(a.embedding(grads), b.embedding(grads))
    other = PartyGuard(config, seed=3, block=1)
    assert not torch.equal(a.embedding(grads), other.embedding(grads))
    assert a.record(sample_rate=0.01)["embedding_releases"] == 2
    assert a.epsilon(sample_rate=0.01) > 0


def test_given_defaults_when_guard_then_every_tensor_leaves_unchanged():
    from vfl_core.privacy.config import PrivacyConfig
    from vfl_core.privacy.guards import PartyGuard

    guard = PartyGuard(PrivacyConfig(), seed=0, block=0)
    grads, labels = _leaky_batch(64)
    assert guard.gradient(grads, labels) is grads
    assert guard.embedding(grads) is grads
    y = np.array([0, 1, 1])
    assert guard.labels(y, 2) is y
    assert guard.epsilon(0.1) is None and not PrivacyConfig().active


def test_given_noise_without_clip_when_config_then_refused_naming_the_setting():
    from vfl_core.privacy.config import PrivacyConfig

    with pytest.raises(ValueError, match="embedding_noise needs embedding_clip"):
        PrivacyConfig(embedding_noise=1.0)


def test_given_max_norm_direction_when_guarding_then_both_the_norm_and_the_cosine_attack_weaken():
    from vfl_core.privacy.config import PrivacyConfig
    from vfl_core.privacy.guards import PartyGuard

    grads, labels = _leaky_batch()
    config = PrivacyConfig(gradient_defence="max_norm_direction", direction_power=4.0)
    out = PartyGuard(config, seed=3, block=0).gradient(grads, labels)
    assert _auc(labels, out.norm(dim=1)) < 0.6
    assert _cosine_auc(out, labels) < 0.75
    alone = PartyGuard(PrivacyConfig(gradient_defence="max_norm"), seed=3, block=0)
    assert _cosine_auc(alone.gradient(grads, labels), labels) > _cosine_auc(out, labels)


def _summed_over_epochs(defence: str, epochs: int = 20) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's unit gradients summed over `epochs` shuffled epochs of batches of 64, as a
    feature-only party that keeps what it receives would (issue 44)."""
    from vfl_core.privacy.config import PrivacyConfig
    from vfl_core.privacy.guards import PartyGuard

    grads, labels = _leaky_batch(n=1280)
    guard = PartyGuard(
        PrivacyConfig(gradient_defence=defence, direction_power=6.0), seed=3, block=0
    )
    sums = torch.zeros_like(grads, dtype=torch.float64)
    order_gen = np.random.default_rng(0)
    for _ in range(epochs):
        order = order_gen.permutation(len(labels))
        for start in range(0, len(order), 64):
            rows = order[start : start + 64]
            out = guard.gradient(grads[rows], labels[rows], rows, target=1).double()
            sums[rows] += out / out.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return sums, labels


def _first_component_auc(sums: torch.Tensor, labels: torch.Tensor) -> float:
    centred = sums - sums.mean(dim=0)
    _values, vectors = torch.linalg.eigh(centred.T @ centred)
    return _auc(labels, centred @ vectors[:, -1])


def test_given_fresh_noise_when_summed_over_epochs_then_the_sums_rank_the_classes_again():
    sums, labels = _summed_over_epochs("max_norm_direction")
    assert _first_component_auc(sums, labels) > 0.8


def test_given_per_row_noise_when_summed_over_epochs_then_the_sums_stay_as_noisy_as_one_epoch():
    sums, labels = _summed_over_epochs("max_norm_direction_per_row")
    fresh, _ = _summed_over_epochs("max_norm_direction")
    assert _first_component_auc(sums, labels) < 0.7
    assert _first_component_auc(sums, labels) < _first_component_auc(fresh, labels) - 0.15


def test_given_per_row_noise_when_a_row_comes_in_another_batch_order_then_its_noise_is_the_same():
    from vfl_core.privacy.config import PrivacyConfig
    from vfl_core.privacy.guards import PartyGuard

    grads, labels = _leaky_batch(n=64)
    config = PrivacyConfig(gradient_defence="max_norm_direction_per_row", direction_power=2.0)
    rows = np.arange(100, 164)
    flip = np.arange(63, -1, -1)
    first = PartyGuard(config, seed=3, block=0).gradient(grads, labels, rows, target=1)
    again = PartyGuard(config, seed=3, block=0).gradient(
        grads[flip], labels[flip], rows[flip], target=1
    )
    assert torch.allclose(first[flip], again, atol=1e-5)  # the class means summed in another order
    other = PartyGuard(config, seed=3, block=0).gradient(grads, labels, rows, target=2)
    assert not torch.allclose(first, other)  # each receiving party its own draws


def test_given_withhold_when_guarding_then_the_gradient_leaving_is_zero():
    from vfl_core.privacy.config import PrivacyConfig
    from vfl_core.privacy.guards import PartyGuard

    grads, labels = _leaky_batch(n=64)
    out = PartyGuard(PrivacyConfig(gradient_defence="withhold"), seed=3, block=0).gradient(
        grads, labels
    )
    assert out.shape == grads.shape and not out.any()
