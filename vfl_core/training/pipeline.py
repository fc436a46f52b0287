"""Pipelined training rounds: fewer round trips through the coordinator per round.

The sequential engine (`Federation.run_round`) waits for three round trips per round: Embed,
Fuse, Backward. Here each party gets at most two calls per round, `Transport.train` calls of two
kinds ("lanes"):
- the f-lane call carries the Backward of earlier rounds and the Embed of new ones (f_k only);
- the g-lane call carries Fuse of rounds already embedded (g_k only, at head parties).
The party applies a call's steps in order (`Party.train`).

Exact (`TrainConfig.staleness` 0, the default): one round per call and no overlap. Round t's
Backward travels with round t+1's Embed: the party steps f_k with round t's gradient and then
embeds round t+1 with the updated weights, exactly as in the sequential engine, so parameters,
losses and metrics are bit-identical (tests/test_pipeline.py) at two round trips per round.

Bounded staleness S >= 1 (opt-in; changes the math): p = (S + 1) // 2 rounds per call, and the
two lanes overlap: the f-lane call of block k + 1 leaves as soon as the f-lane call of block k
and the g-lane call of block k - 1 are back, while the g-lane call of block k is in flight. Block
k + 1's embeddings therefore miss the updates of blocks k and (for later rounds of the block) of
its own earlier rounds: at most 2p - 1 <= S rounds. A round's Backward goes through the weights
that computed its embedding (vfl_core.model.stash). Per block of p rounds about one round trip,
so
rounds per second grow with p on a slow link; the accuracy cost is measured in
benchmarks/results/wan.md.

Every schedule is a fixed function of the plan: which calls leave and in which order never
depends on timing (only on answers, as the sequential engine's does). A party has at most one
call of each lane in flight and the two lanes touch disjoint state (f_k and its rounds' graphs,
g_k), so whatever order the two arrive in, the party computes the same numbers: the gRPC
federation equals the in-process one, which runs each call when it is started.

Liveness: the sequential engine knows who acknowledged round t's Backward before it chooses
whom to call in round t + 1; here that acknowledgement comes back with round t + 1's Embed. When
parties fail (a missed Backward, a party that registers again), a transition can therefore be
registered one round apart from the sequential engine's, and the rounds that follow may differ.
Without failures nothing differs.

The pipeline drains (every Backward answered) at the end of the rounds it is given, which the
engine makes the end of an epoch or a checkpoint round. With staleness, where it drains is part
of the schedule: a run with other checkpoint rounds trains differently (and a resumed run
exactly like the uninterrupted one with the same checkpoints).

With --epoch-flow (TrainConfig.epoch_flow) the blocks run on across an epoch's end where it is
no checkpoint round (`flow`): the next epoch's first block is embedded after the Backward of
every round of the epoch but its last p, before theirs, as if the two epochs were one run of
blocks; that first block misses the updates of those p rounds and of its own earlier rounds (at
most 2p - 1 <= S rounds, the bound inside an epoch; a short last block is not waited for
alone). The last p rounds are stepped before the run returns, so every party is at the epoch's
end when the validation runs; the next run takes the embedded block over (its Fuse first). The
direct plane runs the same (vfl_core.training.direct_stale).
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.data.batch_plan import Batch
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.protocol import (
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    TrainCall,
    TrainResult,
    Transport,
)
from vfl_core.training.laser_round import backward_call

if TYPE_CHECKING:
    from vfl_core.training.ports import RoundRun

log = logging.getLogger(__name__)

Collect = Callable[[], dict[int, TrainResult]]
# --epoch-flow: given the next epoch's first round id, that epoch and its first batches (its
# first block is embedded at the end of this one), or None: the epoch's end drains
Flow = Callable[[int], "tuple[int, Sequence[Batch]] | None"]


@dataclass
class _Round:
    """The coordinator's view of one round in flight."""

    round_id: int
    epoch: int
    batch: Batch
    tick: int  # the liveness clock of this round (round id + inference requests so far)
    callees: tuple[int, ...] = ()
    holders: tuple[int, ...] = ()  # live label-only holders (they fuse, embed nothing)
    embeddings: dict[int, np.ndarray] = field(default_factory=dict)
    fuse_calls: dict[int, FuseCall] = field(default_factory=dict)
    fused: dict[int, FuseResult] = field(default_factory=dict)
    updated: tuple[int, ...] = ()
    done: bool = False

    @property
    def where(self) -> str:
        return f"round {self.round_id}"

    @property
    def present(self) -> tuple[int, ...]:
        return tuple(sorted(self.embeddings))

    def record(self) -> RoundRecord:
        return RoundRecord(
            round_id=self.round_id,
            epoch=self.epoch,
            pattern=self.batch.pattern,
            present=self.present,
            losses={k: self.fused[k].loss for k in sorted(self.fused)},
            updated=self.updated,
        )


@dataclass
class _Lane:
    """A lane call in flight: how to collect it and the rounds it concerns."""

    collect: Collect
    rounds: list[_Round]
    stepping: list[_Round] = field(default_factory=list)  # rounds whose Backward it carries


def run(
    fed: RoundRun,
    epoch: int,
    batches: Sequence[Batch],
    first_round: int,
    stop: Callable[[], bool] | None = None,
    flow: Flow | None = None,
) -> Iterator[RoundRecord]:
    """Train on `batches` (rounds first_round, first_round + 1, ...); yields each round's record
    in order once its Backward is answered, and returns with nothing in flight. `stop` is asked
    before each new block of rounds is embedded: when it says so, the pipeline drains and
    returns early, leaving the rest of `batches` unstarted (the engine pauses training).

    `flow` (--epoch-flow; `batches` end an epoch), asked once the last block is embedded:
    where it names the next epoch's first batches, they are embedded with the Backward of all
    but the last p rounds (before theirs), and the run returns with every round of
    `batches` stepped, each party at the epoch's end, and that block embedded (`fed.ahead`,
    which the next run takes over: its Fuse and the rest)."""
    p = fed.config.rounds_per_call
    overlap = fed.config.staleness > 0
    rounds = [
        _Round(first_round + i, epoch, b, first_round + i + fed.request_id)
        for i, b in enumerate(batches)
    ]
    carried, fed.ahead = fed.ahead, None
    if carried is not None:  # the first block, embedded at the end of the epoch before
        assert (carried.epoch, carried.first_round) == (epoch, first_round), "block carried lost"
        rounds[: len(carried.rounds)] = carried.rounds
    blocks = [rounds[i : i + p] for i in range(0, len(rounds), p)]
    queue = deque(rounds)
    backward: dict[int, list[tuple[_Round, BackwardCall]]] = defaultdict(list)
    first = blocks[0] if blocks and carried is None else []  # (carried: its f-lane collected)
    f = _start_f(fed, first, backward) if first or carried is None else _Lane(dict, [])
    g: _Lane | None = None
    ahead: list[_Round] = []
    for k, block in enumerate(blocks):
        _collect_f(fed, f)
        # Records leave before anything else starts: in process (where calls run when started)
        # on_round then sees the parties exactly as after that round, as with run_round.
        yield from _finished(queue)
        if g is not None:  # (overlap) the previous block's gradients
            _collect_g(fed, g, backward)
        g = _start_g(fed, block)
        if not overlap:
            _collect_g(fed, g, backward)
            g = None
        following = blocks[k + 1] if k + 1 < len(blocks) else []
        if following and stop is not None and stop():
            unstarted = {r.round_id for later in blocks[k + 1 :] for r in later}
            queue = deque(r for r in queue if r.round_id not in unstarted)
            f = _start_f(fed, [], backward)  # the Backward still due, no new Embed
            break
        upto = None
        if not following and overlap and flow is not None:
            ahead = _ahead(fed, flow, first_round + len(batches))
            following = ahead
            # the epoch's last p rounds are stepped at its end: the block misses at most S
            upto = first_round + len(batches) - 1 - p if ahead else None
        f = _start_f(fed, following, backward, upto)
    _collect_f(fed, f)
    yield from _finished(queue)
    if g is not None:
        _collect_g(fed, g, backward)
        _collect_f(fed, _start_f(fed, [], backward))
        yield from _finished(queue)
    assert not queue, "the pipeline drained with rounds unfinished"
    if ahead:  # embedded, its Fuse and the rest of its epoch in the next run
        fed.ahead = Carried(ahead[0].epoch, ahead[0].round_id, ahead)


def _ahead(fed: RoundRun, flow: Flow, first: int) -> list[_Round]:
    """The next epoch's first block, where the rounds run on across the epoch's end."""
    following = flow(first)
    if following is None:
        return []
    epoch, batches = following
    batches = batches[: fed.config.rounds_per_call]  # (the direct plane sends more ahead)
    return [_Round(first + i, epoch, b, first + i + fed.request_id) for i, b in enumerate(batches)]


@dataclass
class Carried:
    """The next epoch's first block, embedded at the end of the epoch before (`flow`)."""

    epoch: int
    first_round: int
    rounds: list[_Round]


def _finished(queue: deque[_Round]) -> Iterator[RoundRecord]:
    while queue and queue[0].done:
        yield queue.popleft().record()


def _start_f(
    fed: RoundRun,
    block: list[_Round],
    backward: dict[int, list[tuple[_Round, BackwardCall]]],
    upto: int | None = None,
) -> _Lane:
    """The f-lane call to every party with a Backward due or an Embed in `block`; only the
    Backward of rounds up to `upto` (the others stay due)."""
    kept: dict[int, list[tuple[_Round, BackwardCall]]] = {}
    for b in list(backward) if upto is not None else ():
        kept[b] = [(r, c) for r, c in backward[b] if r.round_id > upto]
        backward[b] = [(r, c) for r, c in backward[b] if r.round_id <= upto]
        if not backward[b]:
            del backward[b]
    al = fed.alignments["train"]
    spec, labels = fed.spec, fed.label_blocks
    embeds: dict[int, list[EmbedCall]] = defaultdict(list)
    for r in block:
        fed.presence.poll_rejoins(r.tick)
        if not spec.trainable(r.batch.pattern, fed.num_blocks, labels, r.batch.label_only):
            r.done = True
            continue
        digest = al.digest(r.batch.index)
        r.callees = tuple(b for b in r.batch.pattern if fed.liveness.should_call(b, r.tick))
        for b in r.callees:
            rows = al.rows_of(b, r.batch.index)
            own = b == fed.fresh_own_block
            said = fed.config.fresh_own_tower
            call = EmbedCall(r.round_id, "train", rows, digest, True, r.callees, own, said)
            embeds[b].append(call)
    due = {r.round_id: r for steps in backward.values() for r, _ in steps}
    stepping = [due[i] for i in sorted(due)]
    calls = {
        b: TrainCall(backward=tuple(c for _, c in backward.pop(b, [])), embed=tuple(embeds[b]))
        for b in sorted({*embeds, *backward})
    }
    backward.clear()
    backward.update({b: steps for b, steps in kept.items() if steps})
    return _Lane(fed.transport.train(calls), block, stepping)


def _collect_f(fed: RoundRun, lane: _Lane) -> None:
    """Backward outcomes first, then the embeddings, each in round order (as the sequential
    engine records them)."""
    answers = lane.collect()
    _log_stops(answers, "f-lane")
    for r in lane.stepping:
        updated = {b for b, a in answers.items() if r.round_id in a.stepped}
        fed.record(r.present, updated, "backward", r.where, tick=r.tick)
        r.updated = tuple(sorted(updated & set(r.present)))
        r.done = True
    spec, labels = fed.spec, fed.label_blocks
    for r in lane.rounds:
        if r.done:
            continue
        got = {
            b: a.embeddings[r.round_id] for b, a in answers.items() if r.round_id in a.embeddings
        }
        size = len(r.batch.index)
        own = fed.fresh_own_block  # (answers no rows)
        r.embeddings = fed.accept(got, r.callees, size, "embed", r.where, tick=r.tick, own=own)
        live = fed.liveness.should_call
        r.holders = tuple(b for b in r.batch.label_only if live(b, r.tick))
        if not spec.trainable(r.present, fed.num_blocks, labels, r.holders):
            r.done = True  # too few answered for this method: no Fuse, no Backward


def _start_g(fed: RoundRun, block: list[_Round]) -> _Lane:
    """The g-lane call to every head party of `block`'s rounds."""
    fuses: dict[int, list[FuseCall]] = defaultdict(list)
    live = [r for r in block if not r.done]
    for r in live:
        r.fuse_calls = fed.laser.fuse_calls(
            r.round_id, r.epoch, r.embeddings, r.callees, r.batch, r.holders
        )
        for k, call in r.fuse_calls.items():
            fuses[k].append(call)
    calls = {k: TrainCall(fuse=tuple(c)) for k, c in sorted(fuses.items())}
    return _Lane(fed.transport.train(calls), live)


def _collect_g(
    fed: RoundRun, lane: _Lane, backward: dict[int, list[tuple[_Round, BackwardCall]]]
) -> None:
    """The heads' answers, and each present party's summed gradient, due with its next f-lane
    call."""
    answers = lane.collect()
    _log_stops(answers, "g-lane")
    for r in lane.rounds:
        got = {k: a.fused[r.round_id] for k, a in answers.items() if r.round_id in a.fused}
        size = len(r.batch.index)
        r.fused = fed.laser.fused(r.fuse_calls, got, r.callees, size, r.where, tick=r.tick)
        for b in r.present:
            backward[b].append((r, backward_call(r.round_id, r.epoch, r.fused, b)))


def _log_stops(answers: dict[int, TrainResult], lane: str) -> None:
    for block, answer in answers.items():
        if answer.stopped:
            log.warning("%s call to block %d stopped early: %s", lane, block, answer.stopped)


def by_phase(transport: Transport, calls: dict[int, TrainCall]) -> Collect:
    """`Transport.train` through a transport's one-phase calls: every round's Backward, then
    Fuse, then Embed, each one call per round for the parties that have it. For transports
    that change single phases (test doubles, fault injectors); a step a party did not answer is
    missing from its result."""
    stepped: dict[int, list[int]] = defaultdict(list)
    fused: dict[int, dict[int, FuseResult]] = defaultdict(dict)
    embedded: dict[int, dict[int, np.ndarray]] = defaultdict(dict)
    for phase in ("backward", "fuse", "embed"):
        steps = [(b, s) for b, c in calls.items() for s in getattr(c, phase)]
        for round_id in sorted({s.round_id for _, s in steps}):
            these = {b: s for b, s in steps if s.round_id == round_id}
            if phase == "backward":
                for b in transport.backward(these):
                    stepped[b].append(round_id)
            elif phase == "fuse":
                for b, result in transport.fuse(these).items():
                    fused[b][round_id] = result
            else:
                for b, embedding in transport.embed(these).items():
                    embedded[b][round_id] = embedding
    answers = {
        b: TrainResult(tuple(stepped[b]), fused[b], embedded[b])
        for b in calls
        if b in stepped or b in fused or b in embedded
    }
    return lambda: answers
