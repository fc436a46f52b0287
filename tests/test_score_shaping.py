"""The label party's shaped Score answers (issue 32 item 2): one randomised-response copy of its
labels per split (PrivacyConfig.score_epsilon) and coarse AUC histograms (score_bins). The attack
they answer is privacy_issue32.md's Score pairing attack."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from vfl_core.inference.metrics import auc_from_histogram
from vfl_core.inference.scoring import AUC_BINS, auc_histogram, coarsened
from vfl_core.privacy.config import PrivacyConfig
from vfl_core.privacy.guards import PartyGuard
from vfl_core.protocol import ScoreResult


def test_given_a_score_epsilon_when_a_split_is_scored_again_then_the_same_randomised_copy() -> None:
    labels = np.random.default_rng(0).integers(0, 2, 20_000)
    guard = PartyGuard(PrivacyConfig(score_epsilon=2.0), seed=3, block=0)
    first = guard.score_labels("test", labels, 2)
    assert guard.score_labels("test", labels, 2) is first  # asking again averages nothing out
    flipped = float(np.mean(first != labels))
    assert abs(flipped - 1 / (1 + math.e**2)) < 0.01  # binary: kept with e^eps / (e^eps + 1)
    other = guard.score_labels("train", labels, 2)
    assert np.mean(other != first) > 0.1  # each split its own draw
    again = PartyGuard(PrivacyConfig(score_epsilon=2.0), seed=3, block=0)
    assert np.array_equal(again.score_labels("test", labels, 2), first)  # seeded: both transports
    plain = PartyGuard(PrivacyConfig(), seed=3, block=0)
    assert plain.score_labels("test", labels, 2) is labels


def test_given_score_bins_when_a_histogram_is_coarsened_then_same_shape_counts_and_close_auc() -> (
    None
):
    rng = np.random.default_rng(1)
    truth = rng.integers(0, 2, 5000)
    scores = np.clip(0.5 + 0.2 * (truth - 0.5) + rng.normal(0, 0.2, 5000), 0, 1)
    fine = auc_histogram(truth, scores.astype(np.float32))
    result = coarsened(ScoreResult(histograms={"x": fine}), 20)
    coarse = result.histograms["x"]
    assert coarse.shape == (2, AUC_BINS) and coarse.sum() == fine.sum()
    assert not coarse[:, np.arange(AUC_BINS) % 50 != 0].any()  # one fine bin per coarse one
    fine_auc, coarse_auc = auc_from_histogram(fine), auc_from_histogram(coarse)
    assert fine_auc is not None and coarse_auc is not None
    assert abs(fine_auc - coarse_auc) < 1 / 20
    assert coarsened(ScoreResult(histograms={"x": fine}), AUC_BINS).histograms["x"] is fine


def test_given_score_bins_that_do_not_divide_the_wire_bins_when_configured_then_refused() -> None:
    with pytest.raises(ValidationError, match="divide 1000"):
        PrivacyConfig(score_bins=30)
