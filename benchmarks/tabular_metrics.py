"""Scores of `vfl bench tabular`'s rows, overall and per observed set, with the federation's
definitions: binary F1 is class 1's (the second of the sorted class names), multi-class F1 the
unweighted mean over classes; AUC is binary ROC AUC (one-vs-rest, macro, for several classes);
Brier is the mean over rows of the squared distance between the probabilities and the one-hot
label; R^2 is 1 - MSE / variance of the scored labels."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vfl_core.data.learning_task import REGRESSION, Task
from vfl_core.inference.metrics import f1_from_confusion

Scores = dict[str, float | int | None]
ALL = "all"


def set_name(blocks: Sequence[int]) -> str:
    """An observed set as the federation's tables write it: "0,2"."""
    return ",".join(str(b) for b in sorted(blocks))


def score_sets(
    task: Task, y: np.ndarray, predicted: np.ndarray, sets: Sequence[str]
) -> dict[str, Scores]:
    """Scores of every observed set (rows grouped by `sets`) and of all rows (ALL).
    `predicted`: (n, classes) probabilities, or (n,) values in regression."""
    names = np.array(sets)
    out = {ALL: score(task, y, predicted)}
    for name in sorted(set(sets), key=lambda s: (-len(s), s)):
        rows = names == name
        out[name] = score(task, y[rows], predicted[rows])
    return out


def score(task: Task, y: np.ndarray, predicted: np.ndarray) -> Scores:
    if task == REGRESSION:
        return _regression(y.astype(np.float64), predicted.astype(np.float64))
    return _classification(y.astype(np.int64), predicted.astype(np.float64))


def _regression(y: np.ndarray, predicted: np.ndarray) -> Scores:
    error = predicted - y
    mse = float(np.mean(error**2))
    variance = float(np.var(y))
    return {
        "samples": len(y),
        "rmse": float(np.sqrt(mse)),
        "mae": float(np.mean(np.abs(error))),
        "r2": 1.0 - mse / variance if variance > 0 else None,
    }


def _classification(y: np.ndarray, proba: np.ndarray) -> Scores:
    from sklearn.metrics import roc_auc_score

    classes = proba.shape[1]
    chosen = proba.argmax(axis=1)
    confusion = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(confusion, (y, chosen), 1)
    onehot = np.eye(classes)[y]
    auc = None
    present = np.unique(y)
    if len(present) == classes == 2:
        auc = float(roc_auc_score(y, proba[:, 1]))
    elif len(present) == classes:
        auc = float(roc_auc_score(y, proba, multi_class="ovr", average="macro"))
    return {
        "samples": len(y),
        "accuracy": float(np.mean(chosen == y)),
        "f1": f1_from_confusion(confusion),
        "auc": auc,
        "brier": _brier(proba, onehot),
        "positive_rate": float(np.mean(chosen == 1)) if classes == 2 else None,
        "true_positive_rate": float(np.mean(y == 1)) if classes == 2 else None,
    }


def _brier(proba: np.ndarray, onehot: np.ndarray) -> float:
    """Binary: the mean squared error of the positive-class probability (scikit-learn's
    brier_score_loss, and the federation's own `brier`, so the rows compare); more classes: the
    squared error summed over the classes (Brier's definition; the federation reports none)."""
    if proba.shape[1] == 2:
        return float(np.mean((proba[:, 1] - onehot[:, 1]) ** 2))
    return float(np.mean(np.sum((proba - onehot) ** 2, axis=1)))
