"""Inference and its scores (paper, Algorithm 2): predict every batch of a split from the live
parties (or a set of them), combine the heads' answers, and have a label party score them
against its labels, so that the coordinator sees aggregates only.

Part of the round engine (vfl_core.training.engine.Federation composes it). A method with a
round program of its own (DVFL, DLVM) predicts a batch its own way (MethodSpec.program); the
choice of the validation samples (vfl_core.training.validation.Validator) decides which parties
each batch is predicted from.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.data.batch_plan import Batch, eval_plan
from vfl_core.data.learning_task import REGRESSION
from vfl_core.inference.blind import eval_rng, score_inputs
from vfl_core.inference.metrics import FEDERATION, EvalReport
from vfl_core.inference.scoring import result_fits
from vfl_core.methods.combination import combine, random_guess, scored_names
from vfl_core.methods.outcomes import PredictionBatch, batch_prediction, well_formed
from vfl_core.methods.spec import active_party
from vfl_core.protocol import BlindPrediction, EmbedCall, PredictCall, ScoreCall, ScoreResult
from vfl_core.training import direct_eval
from vfl_core.training.blind_scores import BlindGroup, BlindScores

if TYPE_CHECKING:
    from vfl_core.training.ports import EvaluatorRun

log = logging.getLogger(__name__)


class Evaluator:
    """Predicts and scores the batches of a split through the transport."""

    def __init__(self, fed: EvaluatorRun) -> None:
        self.fed = fed

    def predict_batches(
        self,
        split: str,
        index: np.ndarray | None,
        blocks: Collection[int] | None,
        blind: bool = False,
        head: str | None = None,
    ) -> Iterator[PredictionBatch]:
        """Predict every sample of `split` (or the given key indices) from the live parties, or
        only from the live parties of `blocks` (the others are not called: as if they were gone).
        A batch that no block of `blocks` holds gets no prediction (no call either). `blind`:
        the heads seal their probabilities for the label parties, which combine them
        (vfl_core.inference.blind). `head`: the heads' name (PredictCall.head) for every batch;
        None: the one the validation chose for its observed set."""
        al = self.fed.alignments[split]
        for batch in eval_plan(al, self.fed.config.eval_batch_size, index):
            if blocks is not None and not set(batch.pattern) & set(blocks):
                yield PredictionBatch(batch.index, batch.pattern, (), {}, None)
                continue
            served, dropped = self.fed.validator.served(batch.pattern, blocks)
            named = self.fed.validator.head(batch.pattern, blocks) if head is None else head
            pred = self._predict_batch(split, batch, served, blind, named)
            yield replace(pred, dropped=dropped) if dropped else pred

    def _predict_batch(
        self,
        split: str,
        batch: Batch,
        blocks: Collection[int] | None = None,
        blind: bool = False,
        head: str = "",
    ) -> PredictionBatch:
        fed = self.fed
        fed.presence.poll_rejoins()
        request = fed.request_id
        fed.request_id += 1
        if fed.spec.program is not None:  # a method with phases of its own
            return fed.spec.program.predict_batch(fed, split, batch, request, blocks)
        embeddings, callees = self.inference_embeddings(split, batch, request, blocks)
        present = tuple(sorted(embeddings))
        gen = self.eval_rng(batch)
        spec, labels = fed.spec, fed.label_blocks
        regression = fed.task == REGRESSION
        predictors = spec.predictors(present, fed.num_blocks, labels)
        if predictors is not None:  # parties outside the observed set: those we can reach
            predictors = [k for k in predictors if k in present or self.reachable(k, blocks)]
        if predictors is None:  # standard VFL with a block missing
            if regression:  # no prediction, unscored
                return batch_prediction(batch, present, {}, None, regression)
            if blind:  # the label party draws the guess: the coordinator must not know it
                name = str(active_party(labels))
                return self._blind(batch, request, present, {}, None, name)
            guess = random_guess(str(active_party(labels)), len(batch.index), fed.num_classes, gen)
            return batch_prediction(batch, present, {}, guess, regression)
        shared = spec.shares_embeddings
        calls = {
            k: PredictCall(
                request,
                {b: e for b, e in embeddings.items() if shared or b == k},
                callees,
                labels,
                labels if blind else (),
                head,
            )
            for k in predictors
        }
        size = (len(batch.index), fed.num_classes)
        probs = {
            k: p for k, p in sorted(fed.transport.predict(calls).items()) if well_formed(p, size)
        }
        # A label party serving the others' set was not asked to embed: its Predict answer is
        # the only sign of life, so a miss marks it down at once (as a missed Embed does).
        outside = [k for k in calls if k not in present]
        fed.record(outside, probs, "predict", f"{split} request {request}", immediate=True)
        threshold = fed.validator.threshold()
        if blind and probs:
            return self._blind(batch, request, present, probs, threshold)
        combined = combine(spec.combination, present, probs, gen, regression, threshold)
        return batch_prediction(batch, present, probs, combined, regression)

    def eval_rng(self, batch: Batch) -> np.random.Generator:
        """The random draws of an inference batch (a vote's ties, a guess for a missing party),
        keyed by its samples rather than the request counter: asked again, it answers the same."""
        return eval_rng(self.fed.config.seed, _first(batch), len(batch.index))

    @staticmethod
    def _blind(
        batch: Batch,
        request: int,
        present: tuple[int, ...],
        probs: dict[int, np.ndarray],
        threshold: float | None,
        guess: str = "",
    ) -> PredictionBatch:
        """A batch whose prediction the label party makes from the heads' sealed `probs`."""
        blind = BlindPrediction(request, probs, present, _first(batch), threshold, guess=guess)
        return PredictionBatch(batch.index, batch.pattern, present, probs, None, blind=blind)

    def reachable(self, block: int, blocks: Collection[int] | None) -> bool:
        """Whether a party outside a batch's observed set may be called (live, and among
        `blocks` when only those are called)."""
        return (blocks is None or block in blocks) and self.fed.liveness.should_call(
            block, self.fed.tick
        )

    def inference_embeddings(
        self, split: str, batch: Batch, request: int, blocks: Collection[int] | None
    ) -> tuple[dict[int, np.ndarray], tuple[int, ...]]:
        """The embeddings of the batch from the live parties (of `blocks`), and who was called."""
        fed = self.fed
        al = fed.alignments[split]
        digest = al.digest(batch.index)
        callees = tuple(
            b
            for b in batch.pattern
            if (blocks is None or b in blocks) and fed.liveness.should_call(b, fed.tick)
        )
        calls = {
            b: EmbedCall(request, split, al.rows_of(b, batch.index), digest, False, callees)
            for b in callees
        }
        # At inference a caller is waiting: a party that misses one deadline is marked down at
        # once (and retried every retry_every requests) instead of costing a deadline per batch.
        answers = fed.transport.embed(calls)
        where = f"{split} request {request}"
        size = len(batch.index)
        return fed.laser.accept(answers, callees, size, "embed", where, immediate=True), callees

    def evaluate(
        self,
        split: str,
        blocks: Collection[int] | None,
        index: np.ndarray | None,
        federation_scores: bool,
        head: str | None = None,
    ) -> EvalReport:
        """Metrics of `split` (or of its key indices `index`) by observed set, from every live
        party or only those of `blocks` (samples that none of them holds are unscored). With
        `federation_scores` (binary tasks), the label parties also return the histogram of the
        federation's positive-class probability (vfl_core.inference.choice). `head`: as in
        `predict_batches`."""
        # None: not one the direct plane takes (vfl_core.training.direct_eval)
        direct = direct_eval.evaluate(self.fed, split, index, blocks, federation_scores, head)
        if direct is not None:
            return direct
        report = EvalReport()
        # an encrypted relay: the label party combines each batch (vfl_core.inference.blind),
        # and scores the batches of an observed set together once all are predicted
        blind = self.fed.config.encrypt_relay and self.fed.spec.program is None
        pending = BlindScores()
        for pred in self.predict_batches(split, index, blocks, blind, head):
            asked = [
                b for b in pred.pattern if (blocks is None or b in blocks) and b not in pred.dropped
            ]
            report.count_answers(asked, pred.present)  # who was live for this batch
            report.chosen_out.update(pred.dropped)
            served = blocks
            if pred.dropped:
                served = (set(self.fed.infos) if blocks is None else set(blocks)) - set(
                    pred.dropped
                )
            # by observed set: the parties that answered and those the choice left out
            pattern = tuple(sorted({*pred.present, *pred.dropped}))
            if pred.blind is not None:
                pending.add(pattern, pred, served)
                continue
            result = (
                self._score(split, pred, served, federation_scores)
                if pred.predicted is not None
                else None
            )
            if result is None:
                report.unscored += len(pred.index)
                continue
            report.add(pattern, len(pred.index), result)
        for group in pending:
            group_index = group.index
            result = self._score_blind(split, group, federation_scores)
            if result is None:
                report.unscored += len(group_index)
            else:
                report.add(group.pattern, len(group_index), result)
        return report

    def _score(
        self,
        split: str,
        pred: PredictionBatch,
        blocks: Collection[int] | None = None,
        federation_scores: bool = False,
    ) -> ScoreResult | None:
        """Aggregates (confusion counts, AUC histograms or error sums) of a batch the
        coordinator combined."""
        assert pred.predicted is not None
        predictions, scores = score_inputs(
            pred.scored,
            pred.predicted,
            pred.scores,
            pred.federation,
            pred.regression,
            federation_scores,
        )
        names = {*predictions, *scores}
        return self._scored(split, pred.index, pred.present, blocks, names, predictions, scores)

    def _score_blind(
        self, split: str, group: BlindGroup, federation_scores: bool
    ) -> ScoreResult | None:
        """The aggregates of a group of blind batches, from one answer: the label party
        combines and names the predictions (vfl_core.inference.blind)."""
        first = group.batches[0].blind
        assert first is not None
        rule = self.fed.spec.combination
        heads = sorted(first.heads)
        named = {first.guess} if first.guess else scored_names(rule, first.present, heads)
        parts = group.parts(federation_scores)
        names = {*named, FEDERATION}
        return self._scored(split, group.index, group.present, group.served, names, {}, {}, parts)

    def _scored(
        self,
        split: str,
        index: np.ndarray,
        present: tuple[int, ...],
        blocks: Collection[int] | None,
        names: set[str],
        predictions: dict[str, np.ndarray],
        scores: dict[str, np.ndarray],
        blind: tuple[BlindPrediction, ...] = (),
    ) -> ScoreResult | None:
        """The answer of the first present label party that gives one, else of a reachable
        party holding the labels only, to a ScoreCall on the samples `index`."""
        fed = self.fed
        al = fed.alignments[split]
        digest = al.digest(index)
        label_only = [
            b
            for b, mask in sorted(al.label_only.items())
            if mask[index].all() and self.reachable(b, blocks)
        ]
        for scorer in [*(b for b in present if b in fed.label_blocks), *label_only]:
            rows = al.rows_of(scorer, index)
            call = ScoreCall(split, rows, digest, predictions, scores, blind)
            result = fed.transport.score(scorer, call)
            if result is None:
                continue
            if result_fits(result, fed.task, fed.num_classes, names):
                return result
            log.warning("%s: score answer of block %d refused (names/shapes)", split, scorer)
        return None


def _first(batch: Batch) -> int:
    """The batch's first sample (key index), which keys its random draws."""
    return int(batch.index[0]) if len(batch.index) else 0
