"""Turn the head parties' probabilities for one batch into the federation's answer.

LASER-VFL and most baselines average the heads' probabilities and score each head's own
prediction (the paper's accuracy averages over the observing heads). The ensemble scores only
the majority vote of the local predictors (random tie-break); standard VFL with a missing block
predicts a random class, as in the paper; a combinatorial predictor is named by its subset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vfl_core.model_bank import key_name


@dataclass(frozen=True)
class Combined:
    scored: dict[str, np.ndarray]  # predictor name -> (B,) predicted classes, for the metrics
    federation: np.ndarray  # (B, C) the federation's probabilities (vote shares for ensemble)
    predicted: np.ndarray  # (B,) the federation's class


def combine(
    method: str,
    present: Sequence[int],
    probs: dict[int, np.ndarray],
    gen: np.random.Generator,
) -> Combined | None:
    """None when no head answered."""
    if not probs:
        return None
    if method == "ensemble":
        return _vote(probs, gen)
    federation = np.mean(np.stack([probs[k] for k in sorted(probs)]), axis=0)  # (B, C)
    if method == "combinatorial":
        scored = {f"S{key_name(tuple(sorted(present)))}": federation.argmax(axis=1)}
    else:
        scored = {str(k): probs[k].argmax(axis=1) for k in sorted(probs)}
    return Combined(scored, federation, federation.argmax(axis=1))


def random_guess(name: str, size: int, classes: int, gen: np.random.Generator) -> Combined:
    """What standard VFL counts for a sample it cannot predict: a uniformly random class."""
    guess = gen.integers(0, classes, size=size)
    federation = np.eye(classes, dtype=np.float32)[guess]  # (B, C) one-hot
    return Combined({name: guess}, federation, guess)


def _vote(probs: dict[int, np.ndarray], gen: np.random.Generator) -> Combined:
    votes = sum(np.eye(p.shape[1], dtype=np.float32)[p.argmax(axis=1)] for p in probs.values())
    shares = votes / len(probs)  # (B, C)
    # Random tie-break: add noise smaller than one vote, so only ties are decided by it.
    winner = (votes + gen.random(votes.shape) * 0.5).argmax(axis=1)
    return Combined({"ensemble": winner}, shares.astype(np.float32), winner)
