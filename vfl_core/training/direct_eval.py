"""Evaluation on the direct data plane (TrainConfig.data_plane "direct"): the coordinator's side.

Through the relay an evaluation batch costs three round trips between the coordinator and the
parties (Embed, Predict, Score), one batch after the other: after each epoch, the validation of
early stopping took some 15 round trips on Credit, three times the epoch's training rounds on the
direct plane. Here the coordinator sends every party of the evaluation one Round call carrying
all its batches (RoundCall.evaluation); the parties push their embeddings to the label party,
which predicts, combines and scores each batch (vfl_core.training.direct_eval_party) and answers
with the aggregates only. One round trip to the coordinator and one push between the parties,
whatever the number of batches; the coordinator sees no tensor.

The report is the relay's, batch for batch: the same batches (eval_plan), the same request ids
(the liveness clock advances as it does through the relay), the same embeddings, the same head,
the same combination and random draws, the same Score. What is chosen once for all batches is
who is called: through the relay a party that misses a batch is not called for the next ones,
here it is called for all and left out where its embedding does not arrive in time (it is
marked down all the same).

Taken where the relay's evaluation would be the label party's head alone: one label party, a
method with LASER-VFL's subset predictors and no round program of its own, the label party
called for every batch predicted, no encrypted relay (whose scores aggregate whole observed
sets, vfl_core.inference.blind). Each batch's parties are the relay's: the live ones of its
observed set, of the parties asked for (a candidate subset of the choice after training) and
less those the validation's choice of subsets leaves out; its heads, the chosen ones (or those
asked for); with the federation's scores when a threshold is being chosen. Else the
evaluation goes through the relay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.data.batch_plan import Batch, eval_plan
from vfl_core.inference.metrics import FEDERATION, EvalReport
from vfl_core.inference.scoring import result_fits
from vfl_core.methods.combination import scored_names
from vfl_core.protocol import (
    EmbedCall,
    EvalAnswer,
    EvalBatch,
    Evaluation,
    RoundCall,
    RoundResult,
    Step,
)

if TYPE_CHECKING:
    from vfl_core.training.ports import EvaluatorRun

log = logging.getLogger(__name__)

# Batches of one evaluation on the direct plane (the party's mailbox keeps as many per peer,
# vfl_client.data_plane.PER_BLOCK_VALIDATION); a longer one goes through the relay.
MAX_BATCHES = 64


@dataclass(frozen=True)
class Planned:
    """One batch of the evaluation as the relay would run it: its request (None: no party of
    the `blocks` asked holds it, so nobody is called and no request is spent), who is called,
    who counts as asked, whom the validation choice leaves out, the scorer's heads."""

    batch: Batch
    request: int | None
    called: tuple[int, ...] = ()
    asked: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    head: str = ""


@dataclass
class Started:
    """A validation on the direct plane whose calls are out (`start`); `finish` reads it."""

    split: str
    scorer: int
    plan: list[Planned]
    collect: Callable[[], dict[int, RoundResult]]
    blocks: tuple[int, ...]  # the parties called
    _reports: dict[int, RoundResult] | None = None

    def reports(self) -> dict[int, RoundResult]:
        """The parties' reports (waited for once: the round engine reads the steps a
        validation carried, the validator its answers)."""
        if self._reports is None:
            self._reports = self.collect()
        return self._reports


@dataclass(frozen=True)
class Turns:
    """A validation sent while the parties' rounds are still in flight (the next epoch sent
    ahead: vfl_core.training.direct_stale): each party's call runs after the round it was
    sent last (`after`), and first steps the rounds still due to it (`steps`)."""

    after: dict[int, int] = field(default_factory=dict)
    steps: dict[int, tuple[Step, ...]] = field(default_factory=dict)


def evaluate(
    fed: EvaluatorRun,
    split: str,
    index: np.ndarray | None,
    blocks: Collection[int] | None = None,
    federation_scores: bool = False,
    head: str | None = None,
) -> EvalReport | None:
    """The report of `split` (or of its key indices `index`) from every live party, or only
    those of `blocks`, with the subsets and heads the validation chose (or `head` for every
    batch), over the direct plane; None when the evaluation is not one it takes (the caller
    relays it). `federation_scores`: as Evaluator.evaluate's (a threshold's choice)."""
    started = start(fed, split, index, blocks, federation_scores, head)
    return None if started is None else finish(fed, started)


def start(
    fed: EvaluatorRun,
    split: str,
    index: np.ndarray | None,
    blocks: Collection[int] | None = None,
    federation_scores: bool = False,
    head: str | None = None,
    hold: bool = False,
    keep: tuple[int, Collection[int]] | None = None,
    turns: Turns | None = None,
) -> Started | None:
    """Send the calls of an evaluation (as `evaluate`'s) and return at once (None: not one the
    direct plane takes). With `hold`, each party holds a copy of its state before it embeds;
    `keep` (round, blocks): those blocks first keep the copy they held of that round
    (vfl_core.training.late_validation); `turns`: the calls wait for and step what the
    parties' rounds still in flight leave them. The request ids of its batches are spent now."""
    batches = eval_plan(fed.alignments[split], fed.config.eval_batch_size, index)
    scorer = scorer_of(fed, batches)
    if scorer is None:
        return None
    fed.presence.poll_rejoins()
    base = fed.request_id
    plan = plan_batches(fed, batches, blocks, head)
    fed.request_id = base
    called = [p for p in plan if p.request is not None]
    if not called or not all(scorer in p.called for p in called):
        return None
    al = fed.alignments[split]
    parts: dict[int, list[EvalBatch]] = {}
    for p in called:
        assert p.request is not None
        digest = al.digest(p.batch.index)
        first = int(p.batch.index[0])
        for b in p.called:
            rows = al.rows_of(b, p.batch.index)
            embed = EmbedCall(p.request, split, rows, digest, False, p.called)
            parts.setdefault(b, []).append(EvalBatch(embed, first, p.head))
    senders = tuple(sorted(parts.keys() - {scorer}))
    for b in () if turns is None else turns.steps:  # steps due but no batch: steps only
        parts.setdefault(b, [])
    threshold = fed.validator.threshold()
    kept_round, keepers = keep if keep is not None else (None, ())
    calls = {
        b: RoundCall(
            round_id=max(fed.round_id - 1, 0),
            epoch=fed.cursor.epoch,
            send_to=() if b == scorer or not own else (scorer,),
            expect=senders if b == scorer else (),
            evaluation=Evaluation(
                split,
                scorer,
                tuple(own),
                threshold,
                hold=hold,
                keep=kept_round if b in keepers else None,
                federation_scores=federation_scores,
            ),
            after=-1 if turns is None else turns.after.get(b, -1),
            steps_before=() if turns is None else turns.steps.get(b, ()),
        )
        for b, own in sorted(parts.items())
    }
    collect = fed.transport.direct(calls)  # type: ignore[attr-defined]
    fed.request_id = base + len(called)
    return Started(split, scorer, plan, collect, tuple(sorted(calls)))


def finish(fed: EvaluatorRun, started: Started, reports: dict | None = None) -> EvalReport:
    """The report of a started evaluation (its `reports`, else waited for now): each batch into
    the report and the liveness as the relay's Embed, Predict and Score (at the request ids it
    had, the clock then set back to where it stands)."""
    reports = started.reports() if reports is None else reports
    scorer = started.scorer
    answers = {a.request_id: a for a in reports[scorer].evaluated} if scorer in reports else {}
    embedded = _embedded(reports)
    report = EvalReport()
    now = fed.request_id
    for p in started.plan:
        if p.request is None:  # as the relay: no prediction, no call
            report.unscored += len(p.batch.index)
            continue
        fed.request_id = p.request + 1  # the relay's clock: one request per batch called
        _batch(fed, report, started.split, p, answers.get(p.request), embedded)
    fed.request_id = now
    return report


def plan_batches(
    fed: EvaluatorRun, batches: list[Batch], blocks: Collection[int] | None, head: str | None
) -> list[Planned]:
    """Each batch's calls as the relay's Evaluator.predict_batches would make them, the
    liveness clock standing where it would (it moves fed.request_id: the caller restores it)."""
    plan = []
    request = fed.request_id
    for batch in batches:
        if blocks is not None and not set(batch.pattern) & set(blocks):
            plan.append(Planned(batch, None))
            continue
        fed.request_id = request  # the clock at the choice of who serves it
        served, dropped = fed.validator.served(batch.pattern, blocks)
        named = fed.validator.head(batch.pattern, blocks) if head is None else head
        tick = fed.round_id + request + 1  # the clock at its Embed calls
        called = tuple(
            b
            for b in batch.pattern
            if (served is None or b in served) and fed.liveness.should_call(b, tick)
        )
        asked = tuple(
            b for b in batch.pattern if (blocks is None or b in blocks) and b not in dropped
        )
        plan.append(Planned(batch, request, called, asked, dropped, named))
        request += 1
    return plan


def scorer_of(fed: EvaluatorRun, batches: list[Batch]) -> int | None:
    """The label party that scores this evaluation on the direct plane, or None."""
    cfg, spec = fed.config, fed.spec
    direct = cfg.data_plane == "direct" and hasattr(fed.transport, "direct")
    if not direct or cfg.encrypt_relay or spec.program is not None:
        return None
    if not spec.has_subset_predictors or len(fed.label_blocks) != 1:
        return None
    if not 0 < len(batches) <= MAX_BATCHES:
        return None
    return fed.label_blocks[0]


def _embedded(reports: dict) -> dict[int, set[int]]:
    """request id -> the feature parties that say they embedded it."""
    out: dict[int, set[int]] = {}
    for block, result in reports.items():
        for a in result.evaluated:
            if a.present == (block,):
                out.setdefault(a.request_id, set()).add(block)
    return out


def _batch(
    fed: EvaluatorRun,
    report: EvalReport,
    split: str,
    planned: Planned,
    answer: EvalAnswer | None,
    embedded: dict[int, set[int]],
) -> None:
    """One batch into the report and the liveness, as the relay's Embed, Predict and Score."""
    request = fed.request_id - 1
    where = f"{split} request {request}"
    # the scorer's answer says whose embeddings arrived; without one, who says they embedded
    present = answer.present if answer is not None else tuple(sorted(embedded.get(request, ())))
    fed.record(planned.called, present, "embed", where, immediate=True)
    report.count_answers(planned.asked, present)
    report.chosen_out.update(planned.dropped)
    result = None if answer is None else answer.score
    if result is not None and not result_fits(
        result, fed.task, fed.num_classes, _names(fed, present)
    ):
        log.warning(
            "%s: score answer of block %d refused (names/shapes)", split, fed.label_blocks[0]
        )
        result = None
    size = len(planned.batch.index)
    if result is None:
        report.unscored += size
    else:  # by observed set: the parties that answered and those the choice left out
        report.add(tuple(sorted({*present, *planned.dropped})), size, result)


def _names(fed: EvaluatorRun, present: tuple[int, ...]) -> set[str]:
    """The predictions the scorer's answer must score: its head's (as `combine` names them)
    and the federation's."""
    return {*scored_names(fed.spec.combination, present, (fed.label_blocks[0],)), FEDERATION}
