"""Label differential privacy with a prior: RR-with-prior in two stages (LP-2ST).

Ghazi et al., "Deep Learning with Label Differential Privacy", NeurIPS 2021: randomised
response restricted to the k labels the prior ranks highest (Alg. 2, RRTop-k), with k chosen
per row to maximise the probability that the true label comes out (Alg. 3, RRWithPrior), and the
prior from a first stage trained on the randomised labels of a disjoint share of the rows
(Sec. 3.2, LP-2ST). Every row's label is randomised once, by one mechanism whose prior does not
depend on that row's label, so the training labels are epsilon-label-DP however many epochs
read them.

Deviations (docs/security.md): the first stage is a logistic regression on the label party's
own features (not the full model), and its probabilities are de-biased for the randomised
response its labels went through (they are the probabilities of the randomised labels, pulled
towards uniform); `class_frequency` is the same two stages with a constant first stage (the
de-biased class frequencies of the first share's randomised labels)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import Literal

import numpy as np

log = logging.getLogger(__name__)

LabelPrior = Literal["uniform", "class_frequency", "own_features"]
FIRST_SHARE = 0.5  # the rows whose randomised labels train the first stage (Ghazi et al.: halves)


def rr_prior_matrix(prior: np.ndarray, eps: float) -> np.ndarray:
    """RRWithPrior's output distribution: (N, K) priors -> (N, K, K), [n, y, o] = P(o | y) for
    row n. k = the number of top-ranked labels maximising sum(top-k prior) * e^eps /
    (e^eps + k - 1); a true label among them comes out with probability e^eps / (e^eps + k - 1),
    each other top-k label with 1 / (e^eps + k - 1); a true label outside them gives a
    uniform top-k label. Every column's ratio between two rows y, y' is at most e^eps."""
    n, classes = prior.shape
    order = np.argsort(-prior, axis=1, kind="stable")
    ranked = np.take_along_axis(prior, order, axis=1).cumsum(axis=1)
    ks = np.arange(1, classes + 1)
    gain = ranked * math.exp(eps) / (math.exp(eps) + ks - 1)
    k = gain.argmax(axis=1) + 1  # ties: the smallest k
    top = np.zeros((n, classes), dtype=bool)
    top[np.arange(n)[:, None], order] = ks[None, :] <= k[:, None]
    denom = (math.exp(eps) + k - 1)[:, None, None]
    out = np.where(top[:, None, :], 1.0 / denom, 0.0) * np.ones((1, classes, 1))
    eye = np.eye(classes, dtype=bool)[None]
    out = np.where(eye & top[:, None, :], math.exp(eps) / denom, out)
    # a true label outside the top k: a top-k label uniformly
    outside = ~top
    uniform = top[:, None, :] / k[:, None, None]
    return np.where(outside[:, :, None], uniform, out)


def rr_with_prior(
    labels: np.ndarray, prior: np.ndarray, eps: float, rng: np.random.Generator
) -> np.ndarray:
    """One draw of RRWithPrior per row (`prior`: (N, K)); negative labels (unlabelled rows)
    stay as they are."""
    out = labels.copy()
    known = np.flatnonzero(labels >= 0)
    draw = rng.random(len(labels))  # one uniform per row, whichever rows are labelled
    if not len(known):
        return out
    rows = rr_prior_matrix(prior[known], eps)[np.arange(len(known)), labels[known]]
    cdf = rows.cumsum(axis=1)
    picked = (draw[known, None] >= cdf).sum(axis=1)
    out[known] = np.minimum(picked, prior.shape[1] - 1)
    return out


def two_stage_labels(
    labels: np.ndarray,
    features: np.ndarray | None,
    num_classes: int,
    eps: float,
    prior: LabelPrior,
    rng: np.random.Generator,
) -> np.ndarray:
    """The training labels under LP-2ST: the first share through randomised response (a
    uniform prior), the rest through RRWithPrior with the prior the first stage fits on the
    first share's randomised labels (`own_features`: on `features`, the label party's own;
    `class_frequency`: a constant; `uniform`: no second stage, every row plain RR)."""
    n = len(labels)
    uniform = np.full((n, num_classes), 1.0 / num_classes)
    first = rng.random(n) < (1.0 if prior == "uniform" else FIRST_SHARE)
    out = labels.copy()
    out[first] = rr_with_prior(labels[first], uniform[first], eps, rng)
    rest = ~first
    if not rest.any():
        return out
    # rows with features first; a label party's label-only rows (at the end) have none
    own = features is not None and prior == "own_features"
    x = features.reshape(len(features), -1) if own else None
    has = np.arange(n) < (0 if x is None else len(x))
    seen = np.flatnonzero(first & has)  # first-share rows with features
    guess = _first_stage(out[first], None if x is None else (x[seen], out[seen]), num_classes)
    rows = np.flatnonzero(rest)
    with_x = rows[has[rows]]
    prob = guess(None if x is None else x[with_x], has[rows])
    out[rest] = rr_with_prior(labels[rest], _debias(prob, eps, num_classes), eps, rng)
    return out


def _first_stage(
    noisy: np.ndarray, fit_on: tuple[np.ndarray, np.ndarray] | None, num_classes: int
) -> Callable[[np.ndarray | None, np.ndarray], np.ndarray]:
    """The first stage: the class frequencies of the first share's randomised labels
    (`noisy`) and, given `fit_on` (features, randomised labels of its rows with features), a
    logistic regression. A function (features of the rows that have them, which rows have
    them) -> (rows, K) probabilities of the randomised labels."""
    counts = np.bincount(noisy[noisy >= 0], minlength=num_classes).astype(float)
    freq = (counts + 1.0) / (counts.sum() + num_classes)  # never an exact zero
    model = None
    if fit_on is not None:
        x, y = fit_on[0][fit_on[1] >= 0], fit_on[1][fit_on[1] >= 0]
        if len(np.unique(y)) >= 2:
            # imported here: at module level every coordinator and client process would load
            # scikit-learn and SciPy at start (about 1 CPU second each) for an opt-in defence
            from sklearn.linear_model import LogisticRegression

            model = LogisticRegression(max_iter=300).fit(x, y)

    def predict(rest_x: np.ndarray | None, rest_has: np.ndarray) -> np.ndarray:
        out = np.tile(freq, (len(rest_has), 1))
        if model is not None and rest_x is not None and len(rest_x):
            part = np.zeros((len(rest_x), num_classes))
            part[:, model.classes_] = model.predict_proba(rest_x)
            out[rest_has] = part
        return out

    return predict


def _debias(noisy_prob: np.ndarray, eps: float, num_classes: int) -> np.ndarray:
    """P(true label) from P(randomised label) under k-ary randomised response: P(noisy = j) =
    keep P(j) + other (1 - P(j)), inverted, clipped at 0 and renormalised."""
    keep = math.exp(eps) / (math.exp(eps) + num_classes - 1)
    other = (1.0 - keep) / (num_classes - 1)
    p = np.clip((noisy_prob - other) / (keep - other), 0.0, None)
    total = p.sum(axis=1, keepdims=True)
    return np.where(total > 0, p / np.where(total > 0, total, 1.0), 1.0 / num_classes)
