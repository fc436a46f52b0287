"""Several evaluations in one fan-out on the direct data plane: what follows the last epoch.

After training the coordinator evaluates many times on splits that no longer change: every
candidate subset of every observed set on the validation samples (vfl_core.inference.choice),
the concatenating heads against LASER-VFL's, the validation with the choice for the threshold,
the test split, and the test split with every observed set of parties
(vfl_core.inference.subsets). One after the other, each costs a Round fan-out
(vfl_core.training.direct_eval), and each batch the label party is not called for (a candidate
without it, test samples it does not hold) three round trips of Embed, Predict and Score
through the relay: about a hundred sequential round trips on a table, more than the training
rounds themselves over a 50 ms link.

Here independent evaluations (`Ask`s, whose calls do not depend on each other's reports) go
out together: each is planned as `direct_eval.start` plans it, in turn, at the request ids the
evaluations one after the other would spend, and the batches of all of them travel in one
Round call per party; `direct_eval.finish` then reads each from the same reports. A batch the
label party is not called for travels embed-only (EvalBatch.embed_only): its parties embed it
and say so, push nothing, and the batch is unscored, as it is through the relay (no label party
predicts or scores it: there is one label party, and no party holding labels only). So the
reports are those of the evaluations one after the other, bit for bit.

What is chosen once for all the evaluations of a fan-out is who is called (as for the batches
of one direct evaluation): a party that misses a batch is marked down once the fan-out is back,
not before the next evaluation is planned. An evaluation that the direct plane does not take
(`direct_eval`'s conditions), one that spends no request, a party holding labels only, or more
pushed batches than a party's mailbox keeps (direct_eval.MAX_BATCHES) goes as before, alone.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vfl_core.data.batch_plan import eval_plan
from vfl_core.inference.federation_view import Ask
from vfl_core.inference.metrics import EvalReport
from vfl_core.protocol import EmbedCall, EvalBatch, Evaluation, RoundCall
from vfl_core.training import direct_eval

if TYPE_CHECKING:
    from vfl_core.training.ports import EvaluatorRun

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Plan:
    """One ask, planned: its scorer, batches (direct_eval's plan) and decision threshold."""

    ask: Ask
    scorer: int
    plan: list[direct_eval.Planned]
    threshold: float | None

    @property
    def pushed(self) -> int:
        """Its batches that the scorer predicts (the others are embed-only)."""
        return sum(1 for p in self.plan if p.request is not None and self.scorer in p.called)

    def key(self) -> tuple[object, ...]:
        """What one Evaluation message holds for all its batches."""
        a = self.ask
        return (a.split, self.scorer, a.federation_scores, self.threshold)


def evaluate_many(
    fed: EvaluatorRun, asks: Sequence[Ask], alone: Callable[[Ask], EvalReport]
) -> list[EvalReport]:
    """The reports of `asks`, in order, each as evaluating them one after the other would make
    it; those the direct plane takes go out together, in as few fan-outs as fit (the module
    docstring); `alone(ask)` evaluates one the usual way (the relay, or one direct fan-out)."""
    reports: list[EvalReport] = []
    group: list[_Plan] = []
    for ask in asks:
        if not group:
            fed.presence.poll_rejoins()
        planned = _planned(fed, ask)
        if planned is None:
            reports += _send(fed, group)
            group = []
            with _choice(fed, ask):
                reports.append(alone(ask))
            continue
        if group and (
            group[0].key() != planned.key()
            or sum(g.pushed for g in group) + planned.pushed > direct_eval.MAX_BATCHES
        ):  # (its request ids follow the group's, as one after the other)
            reports += _send(fed, group)
            group = []
        group.append(planned)
    return reports + _send(fed, group)


def _planned(fed: EvaluatorRun, ask: Ask) -> _Plan | None:
    """`ask` planned as direct_eval.start plans it, its request ids spent; None when the direct
    plane does not take it (nothing spent)."""
    al = fed.alignments[ask.split]
    batches = eval_plan(al, fed.config.eval_batch_size, ask.index)
    scorer = direct_eval.scorer_of(fed, batches)
    if scorer is None or al.label_only:
        return None  # (a party holding labels only scores batches the label party does not)
    base = fed.request_id
    with _choice(fed, ask):
        plan = direct_eval.plan_batches(fed, batches, ask.blocks, ask.head)
        threshold = fed.validator.threshold()
    called = [p for p in plan if p.request is not None]
    fed.request_id = base
    planned = _Plan(ask, scorer, plan, threshold)
    if not called or planned.pushed > direct_eval.MAX_BATCHES:
        return None  # nobody called (as the relay: no call), or more than a mailbox keeps
    fed.request_id = base + len(called)
    return planned


def _send(fed: EvaluatorRun, group: list[_Plan]) -> list[EvalReport]:
    """One Round call per party carrying every batch of `group`; each ask's report."""
    if not group:
        return []
    first = group[0]
    split, scorer = first.ask.split, first.scorer
    al = fed.alignments[split]
    parts: dict[int, list[EvalBatch]] = {}
    for planned in group:
        for p in planned.plan:
            if p.request is None:
                continue
            digest = al.digest(p.batch.index)
            only = scorer not in p.called  # nobody predicts it: unscored, as on the relay
            for b in p.called:
                rows = al.rows_of(b, p.batch.index)
                embed = EmbedCall(p.request, split, rows, digest, False, p.called)
                parts.setdefault(b, []).append(
                    EvalBatch(embed, int(p.batch.index[0]), p.head, embed_only=only)
                )
    pushing = {b for b, own in parts.items() if any(not e.embed_only for e in own)}
    calls = {
        b: RoundCall(
            round_id=max(fed.round_id - 1, 0),
            epoch=fed.cursor.epoch,
            send_to=() if b == scorer else (scorer,),
            expect=tuple(sorted(pushing - {scorer})) if b == scorer else (),
            evaluation=Evaluation(
                split,
                scorer,
                tuple(own),
                first.threshold,
                federation_scores=first.ask.federation_scores,
            ),
        )
        for b, own in sorted(parts.items())
    }
    log.debug("%d evaluations of %s in one fan-out to %s", len(group), split, sorted(calls))
    reports = fed.transport.direct(calls)()  # type: ignore[attr-defined]
    blocks = tuple(sorted(calls))
    out = []
    for planned in group:
        started = direct_eval.Started(split, scorer, planned.plan, lambda: reports, blocks)
        out.append(direct_eval.finish(fed, started, reports))
    return out


@contextlib.contextmanager
def _choice(fed: EvaluatorRun, ask: Ask) -> Iterator[None]:
    """The validation choice `ask` names in effect meanwhile."""
    if ask.choice is None:
        yield
        return
    saved, fed.choice = fed.choice, ask.choice
    try:
        yield
    finally:
        fed.choice = saved
