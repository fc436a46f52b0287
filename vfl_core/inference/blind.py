"""Evaluation the coordinator cannot pair with its scores (issue 32; TrainConfig.encrypt_relay).

In the clear, the coordinator combines the heads' probabilities of an evaluation batch into the
federation's prediction and asks a label party to score the named predictions against its labels:
it then holds every row's prediction beside the aggregates of the rows predicted alike (a
confusion column, an AUC bin), and pairing them names labels (privacy_issue32.md). With
an encrypted relay the heads seal an evaluation's probabilities for the label parties, the
coordinator relays them unread in the Score call (ScoreCall.blind), and the label party combines
them here exactly as the coordinator would have (the same `combine`, the same random draws, the
same threshold) before scoring them. The metrics are the plaintext run's, bit for bit.

The coordinator scores an evaluation blind in one Score call per observed set (and set of
predictors: vfl_core.training.blind_scores), carrying the predictions of all its batches, and the
label party answers with their sum: the coordinator never holds a per-row prediction, nor an
aggregate over fewer rows than every row of the evaluation that the observed set predicted, so a
batch whose rows are all of one class no longer names that class.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import ProtocolError
from vfl_core.inference.metrics import FEDERATION
from vfl_core.methods.combination import Combination, combine, random_guess
from vfl_core.protocol import BlindPrediction, ScoreCall
from vfl_core.seeding import Stream, rng


def eval_rng(seed: int, first: int, size: int) -> np.random.Generator:
    """The random draws of an evaluation batch (a vote's ties, a guess for a missing party),
    keyed by its first sample and its size: asked again, or by the label party, the same."""
    return rng(seed, Stream.EVAL_RANDOM, first, size)


def score_inputs(
    scored: dict[str, np.ndarray],
    predicted: np.ndarray,
    scores: dict[str, np.ndarray],
    federation: np.ndarray | None,
    regression: bool,
    federation_scores: bool,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(predictions, scores) of a ScoreCall for a combined batch: every scored predictor and the
    federation's prediction; for a binary task their positive-class probabilities (the
    federation's only with `federation_scores`), for regression the predicted values."""
    named = {**scored, FEDERATION: predicted}
    if regression:
        return {}, {name: v.astype(np.float32) for name, v in named.items()}
    out = {name: s.astype(np.float32) for name, s in scores.items()}
    if federation_scores and federation is not None and federation.shape[1] == 2:
        out[FEDERATION] = federation[:, 1].astype(np.float32)
    return named, out


def unblinded(
    call: ScoreCall, rule: Combination, task: str, classes: int, seed: int
) -> list[ScoreCall]:
    """The plain ScoreCalls a blind one stands for, one per batch, at the label party: each
    batch's rows (its `size` of the call's rows, in order) and the heads' opened probabilities
    checked and combined as the coordinator would have combined them. A plain call: itself."""
    if not call.blind:
        return [call]
    sizes = [part.size for part in call.blind]
    if any(size <= 0 for size in sizes) or sum(sizes) != len(call.rows):
        raise ProtocolError(f"score: batch sizes {sizes[:8]} do not add up to the call's rows")
    starts = np.cumsum([0, *sizes[:-1]])
    batches = [replace(call, rows=call.rows[s : s + n]) for s, n in zip(starts, sizes, strict=True)]
    return [
        _unblinded_batch(batch, part, rule, task, classes, seed)
        for batch, part in zip(batches, call.blind, strict=True)
    ]


def _unblinded_batch(
    call: ScoreCall,
    blind: BlindPrediction,
    rule: Combination,
    task: str,
    classes: int,
    seed: int,
) -> ScoreCall:
    size = len(call.rows)
    regression = task == REGRESSION
    heads: dict[int, np.ndarray] = {}
    for k, p in sorted(blind.heads.items()):
        if not isinstance(p, np.ndarray) or p.dtype != np.float32 or p.shape != (size, classes):
            raise ProtocolError(f"score: the probabilities of head {k} are not ({size}, {classes})")
        if not np.isfinite(p).all():
            raise ProtocolError(f"score: the probabilities of head {k} are not finite")
        heads[k] = p
    gen = eval_rng(seed, blind.first, size)
    if blind.guess:
        if regression or heads:
            raise ProtocolError("score: a random guess is made for a classification without heads")
        combined = random_guess(blind.guess, size, classes, gen)
    else:
        combined = combine(rule, blind.present, heads, gen, regression, blind.threshold)
    if combined is None:
        raise ProtocolError("score: a blind prediction without the probabilities of any head")
    predictions, scores = score_inputs(
        combined.scored,
        combined.predicted,
        combined.scores,
        combined.federation,
        regression,
        blind.federation_scores,
    )
    return ScoreCall(call.split, call.rows, call.digest, predictions, scores)
