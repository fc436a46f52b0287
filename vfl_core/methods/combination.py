"""Turn the head parties' probabilities for one batch into the federation's answer.

LASER-VFL and most baselines average the heads' probabilities and score each head's own
prediction (the paper's accuracy averages over the observing heads). The ensemble scores only
the majority vote of the local predictors (random tie-break); standard VFL with a missing block
predicts a random class, as in the paper; a combinatorial predictor is named by its subset.

Regression: the heads' outputs (B, 1) are predicted values; the federation averages them, and so
does the ensemble (the average of the observing local predictors replaces the vote). Standard
VFL with a missing block makes no prediction for regression: those samples are unscored.

Classification also carries each scored prediction's probabilities (the vote shares for the
ensemble): binary tasks the positive class's, from which the label party builds ROC AUC and
Brier histograms; tasks of more classes all C, from which it sums the multi-class Brier score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from vfl_core.model.slots import key_name

# heads: each predicting head is scored and the federation averages their probabilities;
# vote: only the majority vote of the heads is scored; subset: one predictor named by its subset.
Combination = Literal["heads", "vote", "subset"]


@dataclass(frozen=True)
class Combined:
    scored: dict[str, np.ndarray]  # predictor name -> (B,) predicted classes (or values)
    federation: np.ndarray  # (B, C) the federation's probabilities (vote shares for ensemble)
    predicted: np.ndarray  # (B,) the federation's class (regression: its value)
    # classification: scored predictor name -> (B,) positive-class probability (binary) or
    # (B, C) probabilities (more classes)
    scores: dict[str, np.ndarray] = field(default_factory=dict)


def combine(
    rule: Combination,
    present: Sequence[int],
    probs: dict[int, np.ndarray],
    gen: np.random.Generator,
    regression: bool = False,
    threshold: float | None = None,
) -> Combined | None:
    """The federation's answer by the method's combination rule (MethodSpec.combination);
    None when no head answered. `threshold` (binary tasks): the positive class where its
    probability is at or above it, for every head and the federation (None: the argmax)."""
    if not probs:
        return None
    if regression:
        return _average(rule, present, probs)
    if rule == "vote":
        return _with_scores(majority_vote(probs, gen))
    federation = np.mean(np.stack([probs[k] for k in sorted(probs)]), axis=0)  # (B, C)
    if rule == "subset":
        scored = {f"S{key_name(tuple(sorted(present)))}": decide(federation, threshold)}
        sources = dict.fromkeys(scored, federation)
    else:
        scored = {str(k): decide(probs[k], threshold) for k in sorted(probs)}
        sources = {str(k): probs[k] for k in sorted(probs)}
    scores = {name: _scores(p) for name, p in sources.items()}
    return Combined(scored, federation, decide(federation, threshold), scores)


def scored_names(rule: Combination, present: Sequence[int], heads: Sequence[int]) -> set[str]:
    """The names of the predictions `combine` scores for these heads (which the coordinator
    expects back from a label party that combined them itself, vfl_core.inference.blind)."""
    if rule == "vote":
        return {"ensemble"}
    if rule == "subset":
        return {f"S{key_name(tuple(sorted(present)))}"}
    return {str(k) for k in heads}


def decide(probs: np.ndarray, threshold: float | None) -> np.ndarray:
    """(B,) classes of (B, C) probabilities: the argmax, or for a binary task with a threshold,
    1 where P(class 1) >= threshold."""
    if threshold is None or probs.shape[1] != 2:
        return probs.argmax(axis=1)
    return (probs[:, 1] >= threshold).astype(np.int64)


def _average(rule: Combination, present: Sequence[int], values: dict[int, np.ndarray]) -> Combined:
    """Regression: each head's (B, 1) value, and their mean as the federation's."""
    federation = np.mean(np.stack([values[k] for k in sorted(values)]), axis=0)  # (B, 1)
    if rule == "vote":
        scored = {"ensemble": federation[:, 0]}
    elif rule == "subset":
        scored = {f"S{key_name(tuple(sorted(present)))}": federation[:, 0]}
    else:
        scored = {str(k): values[k][:, 0] for k in sorted(values)}
    return Combined(scored, federation, federation[:, 0])


def _scores(probs: np.ndarray) -> np.ndarray:
    """What a prediction's (B, C) probabilities send to be scored: a binary task's positive
    class (B,), else all of them."""
    return probs[:, 1] if probs.shape[1] == 2 else probs


def _with_scores(combined: Combined) -> Combined:
    """The federation's probabilities (vote shares, one-hot guess) as the scores of the one
    scored predictor."""
    return Combined(
        combined.scored,
        combined.federation,
        combined.predicted,
        dict.fromkeys(combined.scored, _scores(combined.federation)),
    )


def random_guess(name: str, size: int, classes: int, gen: np.random.Generator) -> Combined:
    """What standard VFL counts for a sample it cannot predict: a uniformly random class."""
    guess = gen.integers(0, classes, size=size)
    federation = np.eye(classes, dtype=np.float32)[guess]  # (B, C) one-hot
    return _with_scores(Combined({name: guess}, federation, guess))


def majority_vote(probs: dict[int, np.ndarray], gen: np.random.Generator) -> Combined:
    votes = sum(np.eye(p.shape[1], dtype=np.float32)[p.argmax(axis=1)] for p in probs.values())
    shares = votes / len(probs)  # (B, C)
    # Random tie-break: add noise smaller than one vote, so only ties are decided by it.
    winner = (votes + gen.random(votes.shape) * 0.5).argmax(axis=1)
    return Combined({"ensemble": winner}, shares.astype(np.float32), winner)
