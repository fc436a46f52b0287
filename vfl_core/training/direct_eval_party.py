"""A party's part of a validation on the direct data plane (RoundCall.evaluation; the
coordinator's side: vfl_core.training.direct_eval).

Every party embeds its rows of each batch (Party.embed, train=False) and pushes the embedding
to the scorer, the label party; the scorer embeds its own, waits for the others', predicts each
batch with its head (Party.predict), combines the head's probabilities as the coordinator does
(the same `combine`, the same random draws keyed by the batch's first sample, the same
threshold: vfl_core.inference.blind) and scores the named predictions against its labels
(Party.score). The reply holds per batch the blocks used and the aggregates a Score reply holds:
the coordinator sees no tensor. A peer whose embedding does not arrive within the embed wait is
left out, as the relay's Embed call leaves out a party that misses its deadline.
"""

from __future__ import annotations

import logging
import time

import numpy as np

from vfl_core.data.learning_task import REGRESSION
from vfl_core.errors import VflError
from vfl_core.inference.blind import eval_rng, score_inputs
from vfl_core.methods.combination import combine
from vfl_core.methods.outcomes import well_formed
from vfl_core.model.model_config import wire_width
from vfl_core.model.quantize import round_trip
from vfl_core.protocol import (
    EvalAnswer,
    EvalBatch,
    Evaluation,
    PredictCall,
    RoundCall,
    RoundResult,
    ScoreCall,
)
from vfl_core.training import held_heads
from vfl_core.training.direct_party import VALIDATION, Links, run_round, run_steps
from vfl_core.training.party import Party

log = logging.getLogger(__name__)


def run_call(party: Party, call: RoundCall, links: Links) -> RoundResult:
    """A direct Round call: a probe, a validation (RoundCall.evaluation) or a training round."""
    if call.probe:  # data_plane "auto": can this party reach the peers it would push to?
        return RoundResult(call.round_id, reached=links.reach(call.send_to, call.embed_wait_s))
    if call.evaluation is None:
        return run_round(party, call, links)
    # the earlier rounds still due (bounded staleness, the next epoch sent ahead:
    # vfl_core.training.direct_stale): stepped first, as a drain's, then the validation
    steps = run_steps(party, call, call.steps_before, links)
    with held_heads.in_place(party, call.round_id):  # (--epoch-flow: the epoch end's heads)
        evaluated = run_evaluation(party, call, links)
    return RoundResult(call.round_id, evaluated=evaluated, steps=steps)


def run_evaluation(party: Party, call: RoundCall, links: Links) -> tuple[EvalAnswer, ...]:
    """Embed every batch of the call's Evaluation; push to the scorer, or (the scorer) score."""
    ev = call.evaluation
    assert ev is not None
    if ev.keep is not None:  # an earlier epoch was the best (its verdict came late)
        party.keep_held(ev.keep)
    if ev.hold:  # the verdict on this state comes after the next rounds changed it
        party.hold_snapshot(call.round_id)
    me = party.info.block
    if me != ev.scorer:
        answers = []
        for batch in ev.batches:
            embedding = _embed(party, batch)
            if not batch.embed_only:  # (embed-only: the scorer predicts nothing of it)
                links.send(VALIDATION, batch.embed.round_id, ev.scorer, embedding)
            if embedding is not None:
                answers.append(EvalAnswer(batch.embed.round_id, (me,)))
        return tuple(answers)
    # (a batch the scorer is called for is never embed-only: the coordinator says so)
    scored = [b for b in ev.batches if not b.embed_only]
    own = [_embed(party, batch) for batch in scored]
    end = time.monotonic() + call.embed_wait_s
    return tuple(
        _score(party, ev, batch, embedding, links, end)
        for batch, embedding in zip(scored, own, strict=True)
    )


def _embed(party: Party, batch: EvalBatch) -> np.ndarray | None:
    try:
        return party.embed(batch.embed)
    except VflError as err:
        log.warning("validation request %d: embed refused: %s", batch.embed.round_id, err)
        return None


def _score(
    party: Party,
    ev: Evaluation,
    batch: EvalBatch,
    embedding: np.ndarray | None,
    links: Links,
    end: float,
) -> EvalAnswer:
    """The scorer's prediction and score of one batch, on the embeddings that arrived."""
    me, call = party.info.block, batch.embed
    request, blocks, size = call.round_id, call.blocks, len(call.rows)
    senders = [b for b in blocks if b != me]
    got = links.receive(VALIDATION, request, senders, max(0.0, end - time.monotonic()))
    # its own as the relay's Predict would hand it back: through the wire's dtype, so that the
    # probabilities (whose Brier score the validation watches) are the relay's to the bit
    embeddings = {} if embedding is None else {me: round_trip(embedding, party.config.wire_dtype)}
    width = wire_width(party.config.model)
    for block in senders:
        array = got.get(block)
        if well_formed(array, (size, len(party.spec.slot_keys(block, blocks)) * width)):
            embeddings[block] = array
        elif array is not None:
            log.warning("validation request %d: embedding of block %d refused", request, block)
    present = tuple(sorted(embeddings))
    labels = (ev.scorer,)
    if party.spec.predictors(present, party.info.num_blocks, labels) != [me]:
        return EvalAnswer(request, present)  # not the scorer's head alone: the relay's case
    shared = party.spec.shares_embeddings
    try:
        own = {b: e for b, e in embeddings.items() if shared or b == me}
        probs = party.predict(PredictCall(request, own, blocks, labels, head=batch.head))
        regression = party.task == REGRESSION
        gen = eval_rng(party.config.seed, batch.first, size)
        combined = combine(
            party.spec.combination, present, {me: probs}, gen, regression, ev.threshold
        )
        assert combined is not None
        predictions, scores = score_inputs(
            combined.scored,
            combined.predicted,
            combined.scores,
            combined.federation,
            regression,
            ev.federation_scores,
        )
        result = party.score(ScoreCall(ev.split, call.rows, call.digest, predictions, scores))
    except VflError as err:
        log.warning("validation request %d: not scored: %s", request, err)
        return EvalAnswer(request, present)
    return EvalAnswer(request, present, result)
