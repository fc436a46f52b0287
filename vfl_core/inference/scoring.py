"""The label party's side of evaluation: aggregates of named predictions against its labels.

Labels never leave a label party; these functions reduce a batch to counts and sums from which the
coordinator computes every metric (vfl_core.inference.metrics):
- classification: a confusion matrix per prediction;
- binary classification, in addition: histograms of the positive-class probability of the true
  negatives and of the true positives, AUC_BINS equal bins over [0, 1] (ROC AUC from them counts
  pairs within one bin as ties, so the AUC is exact up to a resolution of 1 / AUC_BINS);
- classification of more classes, in addition: the sums of the per-sample Brier score (Brier
  1950: sum over classes of (p_c - [c = y])^2) and of its square, for its mean and spread;
- regression: sums of squared error, absolute error, count, target and squared target.
"""

from __future__ import annotations

import numpy as np

from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import ProtocolError
from vfl_core.protocol import ScoreCall, ScoreResult

AUC_BINS = 1000
# The entries of a regression sums vector, in order.
SUMS = ("squared_error", "absolute_error", "count", "target", "squared_target")


def confusion_counts(truth: np.ndarray, predicted: np.ndarray, classes: int) -> np.ndarray:
    """(C, C) int64 counts [true class, predicted class]."""
    return np.bincount(truth * classes + predicted, minlength=classes * classes).reshape(
        classes, classes
    )


def auc_histogram(truth: np.ndarray, scores: np.ndarray, bins: int = AUC_BINS) -> np.ndarray:
    """(2, bins) int64: row 0 bins the negatives' scores, row 1 the positives' (scores in [0, 1],
    a score of exactly 1 in the last bin)."""
    index = np.minimum((scores.astype(np.float64) * bins).astype(np.int64), bins - 1)  # (B,)
    return np.stack([np.bincount(index[truth == c], minlength=bins) for c in (0, 1)]).astype(
        np.int64
    )


def brier_sums(truth: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """(2,) float64: the sums over the batch of the per-sample multi-class Brier score of (B, C)
    probabilities and of its square."""
    p = probs.astype(np.float64)
    per_sample = np.sum(p**2, axis=1) - 2 * p[np.arange(len(truth)), truth] + 1.0  # (B,)
    return np.array([per_sample.sum(), np.sum(per_sample**2)], dtype=np.float64)


def regression_sums(truth: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(5,) float64 in the order of SUMS."""
    y = truth.astype(np.float64)
    error = values.astype(np.float64) - y
    return np.array(
        [np.sum(error**2), np.sum(np.abs(error)), len(y), np.sum(y), np.sum(y**2)],
        dtype=np.float64,
    )


def score_batch(task: str, num_classes: int, truth: np.ndarray, call: ScoreCall) -> ScoreResult:
    """Aggregate the call's predictions against `truth`, the labels of its rows (B,); a
    prediction of the wrong shape, class range or kind for the task is a ProtocolError."""
    if task == REGRESSION:
        if call.predictions:
            raise ProtocolError("predicted classes sent for a regression task")
        values = {n: _checked_scores(n, s, truth.shape, None) for n, s in call.scores.items()}
        return ScoreResult(sums={n: regression_sums(truth, v) for n, v in values.items()})
    confusion: dict[str, np.ndarray] = {}
    for name, predicted in call.predictions.items():
        if predicted.shape != truth.shape or ((predicted < 0) | (predicted >= num_classes)).any():
            raise ProtocolError(f"prediction '{name}' has the wrong shape or classes")
        confusion[name] = confusion_counts(truth, predicted, num_classes)
    if not set(call.scores) <= set(call.predictions):
        raise ProtocolError("scores sent for a prediction without predicted classes")
    shape = truth.shape if num_classes == 2 else (len(truth), num_classes)
    scores = {n: _checked_scores(n, s, shape, (0.0, 1.0)) for n, s in call.scores.items()}
    if num_classes == 2:
        histograms = {n: auc_histogram(truth, s) for n, s in scores.items()}
        return ScoreResult(confusion=confusion, histograms=histograms)
    brier = {n: brier_sums(truth, s) for n, s in scores.items()}
    return ScoreResult(confusion=confusion, brier=brier)


def summed(results: list[ScoreResult]) -> ScoreResult:
    """One answer for several batches of the same predictors: each aggregate added batch by
    batch, in order (the counts exactly; the regression sums as the coordinator would have
    added them, vfl_core.inference.metrics.RegressionStats)."""
    first, *rest = results
    confusion, histograms, sums = dict(first.confusion), dict(first.histograms), dict(first.sums)
    brier = dict(first.brier)
    for result in rest:
        if result.names() != first.names():
            raise ProtocolError("score: batches of one answer name different predictions")
        for into, part in (
            (confusion, result.confusion),
            (histograms, result.histograms),
            (sums, result.sums),
            (brier, result.brier),
        ):
            for name, value in part.items():
                into[name] = into[name] + value
    return ScoreResult(confusion, histograms, sums, brier)


def result_fits(result: ScoreResult, task: str, num_classes: int, names: set[str]) -> bool:
    """Whether a label party's answer has exactly the aggregates the coordinator asked for, in
    their shapes (one that does not is treated as no answer, never added to the metrics)."""
    if result.names() != names:
        return False
    if task == REGRESSION:
        return (
            not result.confusion
            and not result.histograms
            and not result.brier
            and set(result.sums) == names
        )
    binary = num_classes == 2
    return (
        not result.sums
        and set(result.confusion) == names
        and all(c.shape == (num_classes, num_classes) for c in result.confusion.values())
        and (not result.histograms or binary)
        and all(h.shape == (2, AUC_BINS) for h in result.histograms.values())
        and (not result.brier or not binary)
        and all(b.shape == (2,) for b in result.brier.values())
    )


def _checked_scores(
    name: str, scores: np.ndarray, shape: tuple[int, ...], bounds: tuple[float, float] | None
) -> np.ndarray:
    if scores.shape != shape or scores.dtype.kind != "f" or not np.isfinite(scores).all():
        raise ProtocolError(f"scores of '{name}' have the wrong shape or are not finite")
    if bounds is not None and ((scores < bounds[0]) | (scores > bounds[1])).any():
        raise ProtocolError(f"scores of '{name}' outside [{bounds[0]}, {bounds[1]}]")
    return scores


def coarsened(result: ScoreResult, bins: int) -> ScoreResult:
    """`result` with each AUC histogram in `bins` equal bins (a divisor of its width): each
    coarse bin's counts in its first fine bin, so the shape on the wire stays (2, AUC_BINS)."""
    if not result.histograms or bins == AUC_BINS:
        return result
    out = {}
    for name, h in result.histograms.items():
        width = h.shape[1] // bins
        coarse = np.zeros_like(h)
        coarse[:, ::width] = h.reshape(2, bins, width).sum(axis=2)
        out[name] = coarse
    return ScoreResult(result.confusion, out, result.sums, result.brier)
