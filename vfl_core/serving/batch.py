"""Predictions while the coordinator serves: the batch `Predict` of a split (or some of its
samples), waiting for a label party as an evaluation does (vfl_core.lifecycle.evaluate_waiting).

The gRPC servicer only translates the request and the reply; what counts as an answer, how long
to wait and when to align a party again live here, beside the evaluation's rules."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

import numpy as np

from vfl_core.errors import ConfigError
from vfl_core.inference.metrics import EvalReport
from vfl_core.lifecycle import EVALUATE_AGAIN_S
from vfl_core.protocol import SamplePrediction
from vfl_core.training.engine import Federation
from vfl_core.training.retry import Backoff, retry_until

log = logging.getLogger(__name__)


def predict_waiting(
    fed: Federation, split: str, index: np.ndarray | None, wait_s: float
) -> tuple[list[SamplePrediction], list[int]]:
    """The predictions of `split` (or of its samples `index`) and the blocks that answered every
    batch holding their samples, tried again every EVALUATE_AGAIN_S for up to `wait_s` seconds
    while no label party answered (a party back meanwhile is aligned again and called).
    ConfigError (FAILED_PRECONDITION on the wire) when none answered by then."""
    give_up = time.monotonic() + wait_s
    tries = 0

    def attempt() -> tuple[list[SamplePrediction], list[int]]:
        nonlocal tries
        if tries:
            fed.align_again_if_due("predicting again")  # parties back since: called again
        tries += 1
        return predictions_with_rows(fed, split, index)

    samples, live = retry_until(
        attempt,
        lambda got: no_head(got[0]),
        give_up,
        Backoff(EVALUATE_AGAIN_S),
        lambda _got, pause: log.warning(
            "predict: no label party answered; trying again in %.0fs, for at most %.0fs more",
            pause,
            give_up - time.monotonic(),
        ),
    )
    return samples, live


def refuse_unanswered(samples: list[SamplePrediction], wait_s: float) -> None:
    """A prediction no label party answered is no result: refused naming what is missing."""
    if no_head(samples):
        raise ConfigError(
            f"no label party answered within {wait_s:.0f}s: nothing to predict "
            f"({len(samples)} samples unpredicted)"
        )


def predictions_with_rows(
    fed: Federation, split: str, index: np.ndarray | None
) -> tuple[list[SamplePrediction], list[int]]:
    """The predictions of `split` (or of its samples `index`), each with its row in every party
    that holds it (the only handle on a sample that a party can map to its ID after PSI), and
    the blocks that answered every batch holding their samples."""
    al = fed.alignments[split]
    out = []
    answers = EvalReport()  # counts who answered, as an evaluation does
    for batch in fed.predict_batches(split, index):
        answers.count_answers(batch.pattern, batch.present)
        for i, p in zip(batch.index, batch.samples(al.keys), strict=True):
            rows = {b: int(r[i]) for b, r in sorted(al.rows.items()) if r[i] >= 0}
            out.append(replace(p, rows=rows))
    return out, answers.live_blocks()


def no_head(samples: list[SamplePrediction]) -> bool:
    """A prediction that no label party answered (every sample without a prediction)."""
    return bool(samples) and all(not s.party_probs for s in samples)
