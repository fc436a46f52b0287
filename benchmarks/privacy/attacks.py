"""The label attacks of `vfl bench privacy` that use more than one batch (issue 44).

A feature-only party receives each of its training rows' gradient once per epoch. The attacks
of Li et al. (ICLR 2022) read one batch at a time; these read the rows across batches and
epochs, as a party that keeps what it receives would:

- accumulation: per row, the sum of its unit gradients over the epochs seen. A row whose
  gradient keeps its direction adds up (the sum's norm grows like the epochs); one whose
  gradient is mostly fresh noise does not (it grows like their square root). Scored by the
  norm of the sum (no label known), by its first principal component (no label known), and
  by a logistic regression fitted on `known` rows of known label.
- cross-batch direction: references from *other* batches (the attacker knows `known` labels,
  not one in every batch): a row's score is the cosine of its gradient with the mean unit
  gradient of the known positives minus that of the known negatives outside its batch.
- model completion (Fu et al., "Label Inference Attacks Against Vertical Federated
  Learning", USENIX Security 2022, Sec. 4.2): the party's own trained bottom model, completed
  by a classifier fitted on `known` labelled rows, against the same classifier on its raw
  features: the gain is what training taught the bottom model about the labels.

Every score is max(AUC, 1 - AUC) (an attacker who knows the sign flips it); 0.5 = no leak.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler


def auc(labels: np.ndarray, scores: np.ndarray) -> float | None:
    """max(AUC, 1 - AUC): None when one class is absent."""
    if len(np.unique(labels)) < 2:
        return None
    a = float(roc_auc_score(labels, scores))
    return max(a, 1.0 - a)


def known_rows(labels: np.ndarray, known: int, seed: int) -> np.ndarray:
    """A mask of `known` rows drawn by `seed` (the rows whose labels the attacker knows): the
    first `known` of a random order, the last of them swapped for the first row of a class
    that the draw missed."""
    order = np.random.default_rng(seed).permutation(len(labels))
    picked = list(order[:known])
    for c in np.unique(labels):
        if not (labels[picked] == c).any():
            picked[-1 - int(c == 0)] = order[np.flatnonzero(labels[order] == c)[0]]
    mask = np.zeros(len(labels), dtype=bool)
    mask[np.array(picked, dtype=int)] = True
    return mask


def unit(grads: np.ndarray) -> np.ndarray:
    """Each row scaled to norm 1 (a zero row stays zero)."""
    norms = np.linalg.norm(grads, axis=1, keepdims=True)
    return grads / np.where(norms > 0, norms, 1.0)


def accumulate(
    batches: Iterable[tuple[np.ndarray, np.ndarray]], rows: int
) -> tuple[np.ndarray, np.ndarray]:
    """(sums, seen): per row of `rows`, the sum of its unit gradients over `batches` (pairs of
    row indices and gradients) and whether any batch held it."""
    sums: np.ndarray | None = None
    seen = np.zeros(rows, dtype=bool)
    for index, grads in batches:
        if sums is None:
            sums = np.zeros((rows, grads.shape[1]))
        np.add.at(sums, index, unit(grads.astype(np.float64)))
        seen[index] = True
    if sums is None:
        sums = np.zeros((rows, 1))
    return sums, seen


def sum_norm_attack(sums: np.ndarray, labels: np.ndarray) -> float | None:
    """The norm of each row's summed unit gradients (no label known)."""
    return auc(labels, np.linalg.norm(sums, axis=1))


def sum_pca_attack(sums: np.ndarray, labels: np.ndarray) -> float | None:
    """Each row's projection on the first principal component of the sums (no label known)."""
    centred = sums - sums.mean(axis=0)
    if not np.any(centred):
        return auc(labels, np.zeros(len(labels)))
    _values, vectors = np.linalg.eigh(centred.T @ centred)  # ascending: the last is the first
    return auc(labels, centred @ vectors[:, -1])


def fitted_attack(features: np.ndarray, labels: np.ndarray, chosen: np.ndarray) -> float | None:
    """A logistic regression fitted on the `chosen` rows (mask: their labels known), scored on
    the others."""
    if len(np.unique(labels[chosen])) < 2 or chosen.all():
        return None
    scaler = StandardScaler().fit(features[chosen])
    model = LogisticRegression(max_iter=1000).fit(
        scaler.transform(features[chosen]), labels[chosen]
    )
    return auc(labels[~chosen], model.decision_function(scaler.transform(features[~chosen])))


def cross_batch_direction_attack(
    batches: list[tuple[np.ndarray, np.ndarray]], labels: np.ndarray, chosen: np.ndarray
) -> float | None:
    """Per batch (row indices into `labels`, gradients), the cosine of each row's gradient
    whose label is not known (`chosen`: the mask of known rows) with the mean unit gradient of
    the known positives minus that of the known negatives of the other batches (a class with no
    known row elsewhere counts as zero)."""
    units = [unit(g.astype(np.float64)) for _i, g in batches]
    width = units[0].shape[1] if units else 0
    totals = {c: np.zeros(width) for c in (0, 1)}
    counts = {c: 0 for c in (0, 1)}
    parts = []  # per batch: the known rows' unit gradients by class
    for (index, _g), u in zip(batches, units, strict=True):
        mine = {c: u[chosen[index] & (labels[index] == c)] for c in (0, 1)}
        parts.append(mine)
        for c in (0, 1):
            totals[c] += mine[c].sum(axis=0)
            counts[c] += len(mine[c])
    scores, truth = [], []
    for (index, _g), u, mine in zip(batches, units, parts, strict=True):
        ref = np.zeros(width)
        for c, sign in ((1, 1.0), (0, -1.0)):
            n = counts[c] - len(mine[c])
            if n > 0:
                ref += sign * (totals[c] - mine[c].sum(axis=0)) / n
        size = np.linalg.norm(ref)
        rest = ~chosen[index]
        scores.append(u[rest] @ (ref / size if size > 0 else ref))
        truth.append(labels[index][rest])
    if not scores:
        return None
    return auc(np.concatenate(truth), np.concatenate(scores))


def completion_attack(
    embedded: np.ndarray,
    raw: np.ndarray,
    labels: np.ndarray,
    chosen: np.ndarray,
    untrained: np.ndarray | None = None,
) -> dict[str, float | None]:
    """Model completion: the classifier on the trained bottom model's outputs (`embedded`), on
    the raw features and (if given) on the same bottom model's outputs before training, each
    fitted on the same `chosen` rows. `gain`: the trained model's AUC minus the raw features'
    (Fu et al.'s comparison); `taught`: minus the better of the raw features and the untrained
    model, which the party held without any gradient (a random network's features can beat the
    raw ones with few labels: that is not a leak)."""
    completed = fitted_attack(embedded, labels, chosen)
    baseline = fitted_attack(raw, labels, chosen)
    before = None if untrained is None else fitted_attack(untrained, labels, chosen)
    gain = None if completed is None or baseline is None else completed - baseline
    held = [v for v in (baseline, before) if v is not None]
    taught = None if completed is None or not held else completed - max(held)
    return {
        "completed": completed,
        "raw": baseline,
        "untrained": before,
        "gain": gain,
        "taught": taught,
    }
