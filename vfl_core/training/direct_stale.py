"""Bounded staleness on the direct data plane (TrainConfig.staleness S >= 1 with data_plane
"direct"): rounds that overlap the network, the coordinator's side.

The schedule is the pipelined relay's with the same S (vfl_core.training.pipeline): the rounds
are cut into blocks of p = (S + 1) // 2, and a party embeds the rounds of block j after it has
stepped f_k on the rounds of blocks j - 2 and earlier that it embedded; the heads fuse every
round in order, on the embeddings of that round; at the end of the rounds given (the end of an
epoch, a checkpoint round) every party steps the rounds still due, in order. A party's Round
call therefore carries, before its embed, the Backward of the earlier rounds now due
(`RoundCall.steps_before`), and leaves its own to a later call (`defer_step`); a steps-only call
per party drains the rest (`steps_after`). Each party runs the same sequence of embeds and
steps on the same values as under the pipelined engine (the heads' fuses touch g_k only, which
no embed or step of f_k reads), and each round's embedding is differentiated through the weights
that computed it (vfl_core.model.stash): training is bit-identical to the in-process federation
with the same option (tests/test_direct_grpc.py).

A feature party then waits for a round's gradient only 2p rounds after it sent the embedding:
with p = 2 (S = 3), four rounds share each round trip between the parties. The coordinator sends
AHEAD + 2p + LEAD rounds' calls ahead, so that the parties never wait for it: a round is
collected once its head fused it, and a call sent then reaches a feature party a coordinator
round trip later.

At an epoch's end with --overlap-validation (`EpochEnd`, the round loop's) the coordinator
does not wait for the last rounds before the next epoch: the next epoch's rounds leave as the
last rounds are collected, as many in flight as inside an epoch (`_fill`). Its first block
(`exact_end`) carries the steps still due and leaves ahead of the validation, which a label
party runs with the heads it held before that block's first fuse; where a training embed
would move statistics the validation reads (batch normalisation), the steps travel first in
each party's validation call instead, the next epoch's rounds after it. Every party runs the
embeds and steps it ran when the coordinator waited, in the same order: the same numbers.

With --epoch-flow the blocks run on (`_run_on`, the pipeline's `flow`): the next epoch's first
block leaves before the validation and carries the steps of all but the epoch's last p rounds,
the validation carries theirs (each party validates right after its last step of the
epoch), and the rest of the next epoch follows the validation. A label party has fused that
first block by then: its first call that fuses holds a copy of its heads
(RoundCall.hold_heads), with which the validation predicts and the late verdict's copy is
taken (vfl_core.training.held_heads).

A round's record (who stepped) is complete once the calls that carried its steps are back; the
records leave in round order. The price is the pipelined relay's: under failures, liveness
transitions are registered later than with exact rounds.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.data.batch_plan import Batch
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.protocol import Evaluation, RoundCall, RoundResult, Step
from vfl_core.training.direct import AHEAD, RoundInFlight, after, planned_calls
from vfl_core.training.direct_eval import Started, Turns
from vfl_core.training.pipeline import Flow

if TYPE_CHECKING:
    from vfl_core.training.ports import RoundRun

log = logging.getLogger(__name__)

# Rounds whose calls leave beyond the AHEAD + 2p that keep a party's next call there when the
# rounds are compute-bound: a round is collected when its head has fused it, and the call sent
# then reaches a feature party one coordinator round trip later, so with rounds shorter than
# that round trip a feature party would wait for its calls, not for its gradients.
LEAD = 4


@dataclass
class _Round(RoundInFlight):
    """The exact plane's round in flight, with what bounded staleness adds to it."""

    carries: dict[int, tuple[int, ...]] = field(default_factory=dict)  # block -> earlier rounds
    present: tuple[int, ...] = ()
    losses: dict[int, float] = field(default_factory=dict)
    owed: set[int] = field(default_factory=set)  # present blocks whose step is not reported
    updated: set[int] = field(default_factory=set)
    collected: bool = False

    def record(self) -> RoundRecord:
        return RoundRecord(
            round_id=self.round_id,
            epoch=self.epoch,
            pattern=self.batch.pattern,
            present=self.present,
            losses=dict(sorted(self.losses.items())),
            updated=tuple(sorted(self.updated)),
        )


@dataclass
class _State:
    """The rounds of one `run`: what each party was sent and has still to step."""

    sent: dict[int, int] = field(default_factory=dict)  # block -> the last round it was sent
    due: dict[int, list[tuple[int, Step]]] = field(default_factory=lambda: defaultdict(list))
    rounds: dict[int, _Round] = field(default_factory=dict)
    waiting: deque[_Round] = field(default_factory=deque)  # collected, in round order


@dataclass
class Ahead:
    """The next epoch's rounds, sent before this epoch's last rounds were back (as those are
    collected: the calls in flight to a party stay as many as inside an epoch, within what it
    accepts at once): the engine's run of that epoch takes them over.

    With --epoch-flow its first block (`first_block` rounds) continues the epoch's blocks
    (`base`: its block index among them) and leaves before the epoch's validation
    (`validate`), which carries the epoch's last steps; its calls that fuse first at a head
    have it hold its heads (`hold`)."""

    epoch: int
    first_round: int
    batches: Sequence[Batch]  # its first batches that may leave ahead
    state: _State
    flight: deque[_Round] = field(default_factory=deque)
    started: int = 0  # of `batches`, whose calls left
    base: int = 0
    first_block: int = 0
    validate: Callable[[], _Round] | None = None
    validated: _Round | None = None
    hold: set[int] = field(default_factory=set)
    whole: bool = False  # the first block carries all the epoch's steps (`run`'s `exact_end`)

    def more(self, fed: RoundRun) -> None:
        """The next of `batches` (blocks counted from the epoch's first round), if any; with
        --epoch-flow, the validation once the first block left."""
        i = self.started
        if self.validate is not None and i >= min(self.first_block, len(self.batches)):
            # and the next round too: the validation takes no round's place, so that the
            # whole next epoch (within what was sent ahead) is out when the last rounds are
            # back, none of its calls waiting for the validation's reports
            self.validated, self.validate = self.validate(), None
        if i >= len(self.batches):
            return
        round_id = self.first_round + i
        r = _Round(round_id, self.epoch, self.batches[i], round_id + fed.request_id)
        self.state.rounds[r.round_id] = r
        p = fed.config.rounds_per_call
        if i < self.first_block:  # the epoch's last p rounds are stepped at its end
            upto = self.first_round - 1 - (0 if self.whole else p)
            _start(fed, r, self.base + i // p, self.state, self.hold, upto, self.whole)
        else:
            _start(fed, r, i // p, self.state)
        self.flight.append(r)
        self.started += 1


# The round loop's end of an epoch taken before its last rounds are back (vfl_core.training.
# round_loop): given the last round started and what each party still has to step, the
# validation sent with those steps, the next epoch and its batches to send ahead; None: the
# epoch ends as usual (the parties drain, the coordinator waits for them). True: the blocks
# run on (--epoch-flow), the next epoch's first rounds left already: the validation only
EpochEnd = Callable[[int, Turns, bool], "tuple[Started, int, Sequence[Batch]] | None"]


def run(
    fed: RoundRun,
    epoch: int,
    batches: Sequence[Batch],
    first_round: int,
    stop: Callable[[], bool] | None = None,
    epoch_end: EpochEnd | None = None,
    flow: Flow | None = None,
    exact_end: bool = False,
) -> Iterator[RoundRecord]:
    """vfl_core.training.direct.run with staleness: the same contract (records in order,
    none of `batches`' calls in flight at the end; `stop` asked before each new block of
    rounds). The rounds the previous epoch sent ahead are taken over; `epoch_end` (`batches`
    end the epoch) may send the validation and the next epoch's first rounds before the last
    rounds are back (those rounds then in flight at the end: `fed.ahead`). `flow`
    (--epoch-flow, pipeline.run's) may have the next epoch's first block embedded before the
    epoch's last steps, which the validation (`epoch_end`'s) then carries; with `exact_end`
    (--overlap-validation without --epoch-flow) that block carries all the epoch's steps
    first and leaves ahead of the validation: the math of the epoch's end unchanged."""
    p = fed.config.rounds_per_call
    ahead, fed.ahead = fed.ahead, None
    state, flight, skip = _State(), deque[_Round](), 0
    if ahead is not None:
        assert (ahead.epoch, ahead.first_round) == (epoch, first_round), "rounds sent ahead lost"
        state, flight, skip = ahead.state, ahead.flight, ahead.started
    last = first_round + skip - 1
    for i, batch in enumerate(batches):
        if i < skip:
            continue
        if i and i % p == 0 and stop is not None and stop():
            epoch_end = flow = None  # the epoch goes on after the pause
            break
        r = _Round(first_round + i, epoch, batch, first_round + i + fed.request_id)
        state.rounds[r.round_id] = r
        _start(fed, r, i // p, state)
        last = r.round_id
        flight.append(r)
        if len(flight) > AHEAD + 2 * p + LEAD:
            yield from _collect(fed, flight.popleft(), state)
    following = None if flow is None or epoch_end is None or not batches else flow(last + 1)
    if following is not None and epoch_end is not None:
        block = (len(batches) - 1) // p
        yield from _run_on(fed, epoch, last, block, state, flight, epoch_end, following, exact_end)
        return
    ends, ahead = _end(fed, epoch, last, state, epoch_end)
    tail = time.perf_counter()
    if ahead is not None:
        _fill(fed, ahead, flight)
    while flight:
        yield from _collect(fed, flight.popleft(), state)
        if ahead is not None:
            _fill(fed, ahead, flight)
    for end in ends:
        yield from _collect(fed, end, state)
    # rounds collected by the epoch before (the block it sent ahead, `_run_on`) and complete
    # since, where no call was left to collect here (a checkpoint round ended that block)
    yield from _complete(fed, state)
    fed.ahead = ahead
    assert not state.waiting, "the direct rounds drained with steps unreported"
    # where an epoch's end goes: the last rounds' reports, waited for after the last call left
    log.info(
        "rounds %d-%d: the last reports back %.1f ms after the last call left (%s)",
        first_round,
        last,
        1000 * (time.perf_counter() - tail),
        "next epoch sent ahead" if fed.ahead is not None else "drained",
    )


def _run_on(
    fed: RoundRun,
    epoch: int,
    last: int,
    block: int,
    state: _State,
    flight: deque[_Round],
    epoch_end: EpochEnd,
    following: tuple[int, Sequence[Batch]],
    whole: bool = False,
) -> Iterator[RoundRecord]:
    """--epoch-flow: the epoch's end with its last block `block` not yet stepped. The next
    epoch's first block leaves as the last rounds are collected (each party steps all but the
    epoch's last p rounds first, then embeds it), then the validation, which carries the steps
    still due (each party's last steps of the epoch: it validates at its own epoch's end),
    then the next epoch's rounds after it; the records of the epoch are complete once the
    validation's and that first block's reports are back. `whole`: that first block steps
    all the epoch's rounds before it embeds, as it does after the validation without the
    option, and the validation carries no steps (nothing is due to it)."""
    nxt, batches = following
    p = fed.config.rounds_per_call
    first = _first_block(fed, batches, p) if whole else min(p, len(batches))

    def validate() -> _Round:
        due = {b: tuple(s for j, s in d if j <= block) for b, d in state.due.items()}
        due = {b: d for b, d in sorted(due.items()) if d}
        went = epoch_end(last, Turns(after=dict(state.sent), steps=due), True)
        for b, d in state.due.items():  # the next epoch's blocks from 0
            state.due[b] = [(j - block - 1, s) for j, s in d if j > block]
        validated = _Round(last, epoch, Batch((), np.empty(0, np.int64)), 0, collected=True)
        validated.carries = {b: _ids(d) for b, d in due.items()}
        if went is not None:
            assert set(due) <= set(went[0].blocks), "a party's last steps of the epoch left out"
            validated.collect = went[0].reports
        else:  # no validation on the direct plane now (its scorer went): the steps only
            validated.collect = _steps_only(fed, epoch, last, state, due)
            # the validation is scored at the epoch's end, with the parties at rest there:
            # no more of the next epoch leaves ahead of it (its run sends the rest)
            ahead.batches = ahead.batches[: ahead.started]
        return validated

    ahead = Ahead(nxt, last + 1, batches, state, base=block + 1, first_block=first, whole=whole)
    ahead.validate, ahead.hold = validate, set(fed.label_blocks)
    tail = time.perf_counter()
    _fill(fed, ahead, flight)
    while flight:
        yield from _collect(fed, flight.popleft(), state, upto=last)
        _fill(fed, ahead, flight)
    while ahead.validated is None:  # (fewer rounds were in flight than the first block)
        ahead.more(fed)
    if not (whole and not ahead.validated.carries):
        yield from _collect(fed, ahead.validated, state, upto=last)
    # else it carries no step of the epoch: its reports are the validator's alone, read at
    # the next epoch's end (LateValidation.settle), the next epoch's calls not waiting for them
    while ahead.flight and ahead.flight[0].round_id < last + 1 + first:  # it carried steps
        yield from _collect(fed, ahead.flight.popleft(), state, upto=last)
        _fill(fed, ahead, flight)
    assert all(r.round_id > last for r in state.waiting), "the epoch's records incomplete"
    fed.ahead = ahead
    log.info(
        "rounds to %d: the last reports back %.1f ms after the last call left (blocks run on)",
        last,
        1000 * (time.perf_counter() - tail),
    )


def _fill(fed: RoundRun, ahead: Ahead, flight: deque[_Round]) -> None:
    """The next epoch's rounds (and the validation where it goes among them) out until as many
    rounds are in flight, this epoch's and the next's, as inside an epoch: the calls keep as
    far ahead of the heads across an epoch's end as within it."""
    window = AHEAD + 2 * fed.config.rounds_per_call + LEAD
    while len(flight) + len(ahead.flight) <= window:
        before = (ahead.started, ahead.validate)
        ahead.more(fed)
        if (ahead.started, ahead.validate) == before:
            return


def _first_block(fed: RoundRun, batches: Sequence[Batch], p: int) -> int:
    """`exact_end`: the next epoch's first batches that leave ahead of the validation, up to p
    that call a party (a batch nobody can train on calls nobody and carries no step), within
    the next epoch's first two blocks (a round of its third owes steps of its first)."""
    trainable = 0
    for i, b in enumerate(batches[: 2 * p]):
        trainable += fed.spec.trainable(b.pattern, fed.num_blocks, fed.label_blocks, b.label_only)
        if trainable >= p:
            return i + 1
    return min(2 * p, len(batches))


def run_one(fed: RoundRun, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
    """One round on its own (a round of a pause), drained at once."""
    return next(iter(run(fed, epoch, [batch], round_id)))


def _start(
    fed: RoundRun,
    r: _Round,
    block_index: int,
    state: _State,
    hold: set[int] | None = None,
    upto: int | None = None,
    whole: bool = False,
) -> None:
    """Round `r`'s calls, each carrying the steps now due to its party (those of blocks up to
    `block_index` - 2, of rounds up to `upto`; `whole`: every round up to `upto`); a head of
    `hold` fusing first holds its heads (and leaves `hold`)."""
    calls = planned_calls(fed, r)
    if calls is None:
        return
    for block in sorted(calls):
        call = calls[block]
        before: tuple[Step, ...] = ()
        if call.embed is not None:
            due = state.due[block]
            now = [
                (whole or j <= block_index - 2) and (upto is None or s.round_id <= upto)
                for j, s in due
            ]
            before = tuple(s for (_, s), n in zip(due, now, strict=True) if n)
            state.due[block] = [d for d, n in zip(due, now, strict=True) if not n]
            state.due[block].append((block_index, Step(r.round_id, call.grads_from, r.epoch)))
            r.carries[block] = tuple(s.round_id for s in before)
        if hold and block in hold and call.fuse is not None:
            hold.discard(block)
            call = replace(call, hold_heads=True)
        call = after(fed, call, block, state.sent.get(block, -1))
        calls[block] = replace(call, steps_before=before, defer_step=call.embed is not None)
        state.sent[block] = r.round_id
    r.collect = fed.transport.direct(calls)  # type: ignore[attr-defined]


def _end(
    fed: RoundRun, epoch: int, last: int, state: _State, epoch_end: EpochEnd | None
) -> tuple[list[_Round], Ahead | None]:
    """The end of the rounds: every party steps the rounds still due to it, with a
    steps-only call, or, where the epoch's end goes ahead (`epoch_end`), first thing in its
    validation call. The calls whose reports complete the last rounds' records, and the next
    epoch's rounds to send ahead (None: the epoch ends as usual)."""
    due = {b: tuple(s for _, s in d) for b, d in sorted(state.due.items()) if d}
    went = None
    if epoch_end is not None:
        went = epoch_end(last, Turns(after=dict(state.sent), steps=due), False)
    if went is None:
        drain = _drain(fed, epoch, last, state, due)
        return ([] if drain is None else [drain]), None
    started, next_epoch, batches = went
    validated = _Round(last, epoch, Batch((), np.empty(0, np.int64)), 0, collected=True)
    validated.carries = {b: _ids(d) for b, d in due.items() if b in started.blocks}
    validated.collect = started.reports
    rest = {b: d for b, d in due.items() if b not in started.blocks}
    drain = _drain(fed, epoch, last, state, rest)
    if drain is not None:  # (a drain's call and the next round's would share its turn)
        return [validated, drain], None
    return [validated], Ahead(next_epoch, last + 1, batches, _State(sent=dict(state.sent)))


def _steps_only(
    fed: RoundRun, epoch: int, last: int, state: _State, due: dict[int, tuple[Step, ...]]
) -> Callable[[], dict[int, RoundResult]]:
    """The epoch's last steps where --epoch-flow found no validation to carry them (a failure:
    the validation is then scored at the epoch's end, through the relay if need be): a call
    per party in the validation's place, an evaluation of no batch, which the party's next
    rounds follow (its turn)."""
    scorer = min(fed.label_blocks)
    calls = {
        b: RoundCall(
            round_id=last,
            epoch=epoch,
            evaluation=Evaluation("train", scorer, ()),
            after=state.sent.get(b, -1),
            steps_before=steps,
        )
        for b, steps in due.items()
    }
    fed.validation_turns.update(dict.fromkeys(calls, last))
    return fed.transport.direct(calls) if calls else dict  # type: ignore[attr-defined]


def _ids(steps: tuple[Step, ...]) -> tuple[int, ...]:
    return tuple(s.round_id for s in steps)


def _drain(
    fed: RoundRun, epoch: int, last: int, state: _State, due: dict[int, tuple[Step, ...]]
) -> _Round | None:
    """A steps-only call to every party of `due` (tagged with the last round started), as the
    pipelined engine's drain at the end of the rounds."""
    # after the validation where one left ahead of it (a checkpoint round ended the block
    # sent ahead): over gRPC both would otherwise wait for the party's last round only
    calls = {
        block: after(
            fed,
            RoundCall(round_id=last, epoch=epoch, steps_after=steps),
            block,
            state.sent.get(block, -1),
        )
        for block, steps in due.items()
    }
    if not calls:
        return None
    drain = _Round(last, epoch, Batch((), np.empty(0, np.int64)), 0, collected=True)  # no round
    drain.carries = {b: _ids(c.steps_after) for b, c in calls.items()}
    drain.collect = fed.transport.direct(calls)  # type: ignore[attr-defined]
    return drain


def _collect(
    fed: RoundRun, r: _Round, state: _State, upto: int | None = None
) -> Iterator[RoundRecord]:
    """Round `r`'s reports: who embedded and fused (into the liveness), the earlier rounds
    whose steps its calls carried; then every round now complete, in order (up to round
    `upto`: the next epoch's are its run's)."""
    reports: dict[int, RoundResult] = r.collect() if r.collect is not None else {}
    if not r.collected:  # a round of its own (not the drain)
        _embedded(fed, r, reports)
        state.waiting.append(r)
    for block, ids in r.carries.items():
        report = reports.get(block)
        for q in ids:
            earlier = state.rounds[q]
            if block in earlier.owed:
                earlier.owed.discard(block)
                if report is not None and q in report.steps:
                    earlier.updated.add(block)
    yield from _complete(fed, state, upto)


def _complete(fed: RoundRun, state: _State, upto: int | None = None) -> Iterator[RoundRecord]:
    """The records of the waiting rounds now complete, in order (up to round `upto`)."""
    while state.waiting and not state.waiting[0].owed:
        if upto is not None and state.waiting[0].round_id > upto:
            break
        done = state.waiting.popleft()
        if done.present:
            where = f"round {done.round_id}"
            fed.record(done.present, done.updated, "backward", where, tick=done.tick)
        yield done.record()


def _embedded(fed: RoundRun, r: _Round, reports: dict[int, RoundResult]) -> None:
    r.collected = True
    if r.collect is None:
        return
    where = f"round {r.round_id}"
    embedded = {b for b in r.callees if b in reports and reports[b].embedded}
    fed.record(r.callees, embedded, "embed", where, tick=r.tick)
    r.present = tuple(sorted(embedded))
    losses = {k: reports[k].loss for k in r.heads if k in reports and reports[k].loss is not None}
    if r.heads:
        fed.record(r.heads, losses, "fuse", where, tick=r.tick)
    r.losses = {k: float(v) for k, v in losses.items() if v is not None}
    r.owed = set(r.present)
