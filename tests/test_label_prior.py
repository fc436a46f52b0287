"""RR-with-prior in two stages (vfl_core.privacy.label_prior, Ghazi et al. NeurIPS 2021): its
output probabilities are epsilon-label-DP, k is the one that best keeps the true label, and
the labels are drawn once per row, fixed by the seed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from vfl_core.privacy.config import PrivacyConfig
from vfl_core.privacy.guards import PartyGuard
from vfl_core.privacy.label_prior import rr_prior_matrix, rr_with_prior, two_stage_labels


@pytest.mark.parametrize("classes", [2, 3, 5])
@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_given_any_prior_when_rr_with_prior_then_each_output_ratio_is_at_most_exp_eps(
    classes: int, eps: float
) -> None:
    prior = np.random.default_rng(classes).dirichlet(np.full(classes, 0.5), size=200)
    m = rr_prior_matrix(prior, eps)  # [row, true label, output]
    np.testing.assert_allclose(m.sum(axis=2), 1.0)
    worst = m.max(axis=1) / np.maximum(m.min(axis=1), 1e-300)
    # an output no true label can give is 0 for every one of them (ratio 0/0: nothing learnt)
    possible = m.max(axis=1) > 0
    assert (m.min(axis=1)[possible] > 0).all()
    assert worst[possible].max() <= math.exp(eps) * (1 + 1e-9)


def test_given_binary_priors_when_rr_with_prior_then_k_keeps_the_true_label_best() -> None:
    # eps 1: keep = e / (e + 1) = 0.731; a prior of 0.9 beats it (k = 1: the top label always),
    # one of 0.6 does not (k = 2: plain randomised response)
    m = rr_prior_matrix(np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8]]), 1.0)
    keep = math.e / (math.e + 1)
    np.testing.assert_allclose(m[0], [[1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(m[1], [[keep, 1 - keep], [1 - keep, keep]])
    np.testing.assert_allclose(m[2], [[0.0, 1.0], [0.0, 1.0]])


def test_given_one_prior_for_many_rows_when_drawn_then_frequencies_match_the_matrix() -> None:
    n, eps = 60_000, 1.0
    prior = np.tile([0.5, 0.3, 0.2], (n, 1))
    labels = np.repeat(np.arange(3), n // 3)
    out = rr_with_prior(labels, prior, eps, np.random.default_rng(0))
    m = rr_prior_matrix(prior[:1], eps)[0]
    for y in range(3):
        seen = np.bincount(out[labels == y], minlength=3) / (n // 3)
        np.testing.assert_allclose(seen, m[y], atol=0.01)


def _informative(n: int = 8000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0.8).astype(np.int64)
    return x, y


@pytest.mark.parametrize("prior", ["uniform", "class_frequency", "own_features"])
def test_given_a_seed_when_two_stage_labels_then_one_label_per_row_fixed_by_the_seed(
    prior: str,
) -> None:
    x, y = _informative()
    y[:50] = -1  # unlabelled rows keep their mark
    draw = [two_stage_labels(y, x, 2, 1.0, prior, np.random.default_rng(s)) for s in (7, 7, 8)]
    assert draw[0].shape == y.shape
    np.testing.assert_array_equal(draw[0], draw[1])
    assert (draw[0] != draw[2]).any()
    assert (draw[0][:50] == -1).all() and set(np.unique(draw[0][50:])) <= {0, 1}


def test_given_informative_own_features_when_prior_then_more_true_labels_than_plain_rr() -> None:
    x, y = _informative()
    plain = two_stage_labels(y, x, 2, 1.0, "uniform", np.random.default_rng(0))
    own = two_stage_labels(y, x, 2, 1.0, "own_features", np.random.default_rng(0))
    kept_plain, kept_own = (plain == y).mean(), (own == y).mean()
    assert abs(kept_plain - math.e / (math.e + 1)) < 0.02
    assert kept_own > kept_plain + 0.05


def test_given_label_only_rows_when_own_features_then_they_get_the_class_frequency_prior() -> None:
    x, y = _informative()
    out = two_stage_labels(y, x[:6000], 2, 2.0, "own_features", np.random.default_rng(0))
    assert out.shape == y.shape and set(np.unique(out)) <= {0, 1}


def test_given_a_prior_when_guard_then_the_same_labels_for_the_same_seed() -> None:
    x, y = _informative()
    config = PrivacyConfig(label_epsilon=2.0, label_prior="own_features")
    first = PartyGuard(config, seed=5, block=0).labels(y, 2, x)
    again = PartyGuard(config, seed=5, block=0).labels(y, 2, x)
    np.testing.assert_array_equal(first, again)
    assert (first != y).any()


def test_given_a_prior_without_epsilon_when_config_then_refused_naming_the_setting() -> None:
    with pytest.raises(ValidationError, match="label_prior needs label_epsilon"):
        PrivacyConfig(label_prior="own_features")
