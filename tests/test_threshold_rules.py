"""The decision threshold's rules other than the best validation accuracy's argmax
(vfl_core/inference/choice.py): Platt scaling fitted to the validation histogram, and the
argmax kept only where it beats 0.5 by more than one standard error. Both read the same
(2, AUC_BINS) histogram of the federation's positive-class probabilities as "accuracy"."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from vfl_core.config import THRESHOLD_RULES, TrainConfig
from vfl_core.inference import choice
from vfl_core.inference.scoring import AUC_BINS


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p / (1 - p))


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-z))


def _histogram(slope: float, shift: float, per_point: int = 200) -> np.ndarray:
    """Expected counts of a model whose score is sigmoid(slope * logit(q) + shift) for a sample
    positive with probability q (q on a fine grid): its calibration map is
    q = sigmoid((logit(p) - shift) / slope), so Platt's threshold is sigmoid(shift)."""
    q = np.linspace(0.01, 0.99, 2000)
    p = _sigmoid(slope * _logit(q) + shift)
    bins = np.minimum((p * AUC_BINS).astype(int), AUC_BINS - 1)
    hist = np.zeros((2, AUC_BINS), dtype=np.int64)
    np.add.at(hist[1], bins, np.rint(per_point * q).astype(np.int64))
    np.add.at(hist[0], bins, np.rint(per_point * (1 - q)).astype(np.int64))
    return hist


def test_given_a_miscalibrated_histogram_when_platt_scaling_then_its_threshold_is_recovered() -> (
    None
):
    """Scores overconfident (slope 2) and shifted up (by 1): the fitted map is a = 1/2,
    b = -1/2, and P(positive) >= 0.5 where the score is at least sigmoid(1) = 0.731."""
    hist = _histogram(slope=2.0, shift=1.0)
    fitted = choice.platt_fit(hist)
    assert fitted is not None
    a, b = fitted
    assert a == pytest.approx(0.5, abs=0.02) and b == pytest.approx(-0.5, abs=0.02)
    threshold, accuracy, plain = choice.threshold_of(hist, "platt")
    assert threshold == pytest.approx(float(_sigmoid(np.array(1.0))), abs=0.005)
    assert accuracy > plain  # the shifted scores' 0.5 predicts too many positives


def test_given_a_calibrated_histogram_when_platt_scaling_then_about_half() -> None:
    hist = _histogram(slope=1.0, shift=0.0)
    fitted = choice.platt_fit(hist)
    assert fitted is not None
    assert fitted[0] == pytest.approx(1.0, abs=0.02) and fitted[1] == pytest.approx(0.0, abs=0.02)
    threshold, _, _ = choice.threshold_of(hist, "platt")
    assert threshold == pytest.approx(0.5, abs=0.005)


def _one_se_case(right: int, wrong: int) -> np.ndarray:
    """288 validation samples: 140 negatives at 0.2 and the positives at 0.8 (right at any
    threshold between), and at 0.45 `right` positives and `wrong` negatives, which a
    threshold at 0.45 turns from predicted negative to predicted positive: a gain of
    right - wrong samples, with right + wrong decisions changed."""
    hist = np.zeros((2, AUC_BINS), dtype=np.int64)
    hist[0, 200] = 140
    hist[1, 800] = 288 - 140 - right - wrong
    hist[1, 450], hist[0, 450] = right, wrong
    return hist


def test_given_a_three_sample_gain_on_288_when_one_standard_error_then_half_stays() -> None:
    """9 right and 6 wrong of 15 changed: 3 samples (1.04 points) gained, within one standard
    error sqrt(15) / 288 = 1.34 points. The argmax ("accuracy") moves to 0.45 for them."""
    hist = _one_se_case(right=9, wrong=6)
    assert choice.threshold_of(hist, "accuracy")[0] == 0.45
    threshold, accuracy, plain = choice.threshold_of(hist, "accuracy-1se")
    assert threshold == 0.5 and accuracy == plain == pytest.approx((288 - 9) / 288)


def test_given_one_sample_gained_of_one_changed_when_one_standard_error_then_half_stays() -> None:
    """A gain of 1 with 1 changed equals its standard error sqrt(1): never more than it."""
    hist = _one_se_case(right=1, wrong=0)
    assert choice.threshold_of(hist, "accuracy")[0] == 0.45
    assert choice.threshold_of(hist, "accuracy-1se")[0] == 0.5


def test_given_a_large_gain_when_one_standard_error_then_the_best_edge() -> None:
    """25 right and 5 wrong of 30 changed: 20 samples gained, over sqrt(30) = 5.5."""
    hist = _one_se_case(right=25, wrong=5)
    threshold, accuracy, plain = choice.threshold_of(hist, "accuracy-1se")
    assert threshold == 0.45
    assert accuracy == pytest.approx((288 - 5) / 288) and plain == pytest.approx((288 - 25) / 288)


def _one_class() -> np.ndarray:
    hist = np.zeros((2, AUC_BINS), dtype=np.int64)
    hist[1, 650:750] = 1
    return hist


def _inverted() -> np.ndarray:
    hist = np.zeros((2, AUC_BINS), dtype=np.int64)
    hist[0, 800], hist[1, 200] = 40, 40
    return hist


@pytest.mark.parametrize(
    ("rule", "hist"),
    [
        ("platt", np.zeros((2, AUC_BINS), dtype=np.int64)),
        ("platt", _one_class()),
        ("platt", _inverted()),
        ("accuracy-1se", np.zeros((2, AUC_BINS), dtype=np.int64)),
        ("accuracy-1se", _one_class()),
    ],
    ids=["platt-empty", "platt-one-class", "platt-inverted", "1se-empty", "1se-one-class"],
)
def test_given_a_degenerate_histogram_when_choosing_then_half(rule: str, hist: np.ndarray) -> None:
    """No fit to speak of (nothing scored, one class, positives scoring below negatives): Platt
    scaling keeps 0.5 (a slope not positive), and so does the one-standard-error rule where no
    edge beats 0.5. (On inverted scores the argmax predicts one class throughout, 50 % against
    0.5's 0 %: a real gain, which it takes.)"""
    assert choice.threshold_of(hist, rule)[0] == 0.5


def test_given_inverted_scores_when_platt_scaling_then_half_with_the_reason(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hist = np.zeros((2, AUC_BINS), dtype=np.int64)
    hist[0, 700:800] = 2  # negatives score high, positives low
    hist[1, 200:300] = 2
    hist[0, 250], hist[1, 750] = 5, 5  # not separable
    with caplog.at_level(logging.WARNING, logger="vfl_core.inference.choice"):
        assert choice.threshold_of(hist, "platt")[0] == 0.5
    assert "slope" in caplog.text and "not positive" in caplog.text


def test_given_the_rules_when_configured_then_each_validates_and_auto_is_accuracy() -> None:
    for rule in THRESHOLD_RULES:
        assert TrainConfig(threshold=rule).threshold == rule
        assert rule in choice.THRESHOLD_METRIC
    hist = _one_se_case(right=9, wrong=6)
    assert choice.threshold_of(hist, "auto") == choice.threshold_of(hist, choice.AUTO_THRESHOLD)
    with pytest.raises(ValueError, match="platt"):
        TrainConfig(threshold="plat")
