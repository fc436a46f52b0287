"""Training rounds on the direct data plane (TrainConfig.data_plane "direct"): the coordinator's
side.

Per round the engine sends each party of the batch one RoundCall, built from the plan exactly
as the relay's calls are (the live parties of the observed set embed; the method's head parties
fuse on the others' embeddings; every party steps on the heads' gradients), and the parties
exchange the embeddings and gradients among themselves (vfl_core.training.direct_party). The
engine receives only what each party reports: whether it embedded, its head's loss, whether
it stepped. It never holds a tensor.

Rounds t + 1 and t + 2's calls leave before round t's reports are back (AHEAD rounds ahead): a
party runs them in order (RoundCall.after), so its round t + 1 starts as soon as its round t
ends, and an exact round costs its compute and one round trip between the parties, the
coordinator's round trips overlapping (one round ahead is not enough: a call would reach the
party one round trip after the report of the round before left it, just when it is due). As in
the pipelined relay (vfl_core.training.pipeline), the cost is that liveness lags: who is called
in round t + 2 is chosen before round t's misses are known, so under failures a transition can
be registered up to two rounds apart from the sequential engine's.
Without failures nothing differs: the parties compute what they compute through the relay, in
the same order, on the same values (tests/test_direct_grpc.py).

A transport carries these rounds when it has `direct(calls)` (vfl_coordinator.transport); the
in-process transport has nothing to relay and runs the relay's rounds, the same computation.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from vfl_core.data.batch_plan import Batch
from vfl_core.methods.outcomes import RoundRecord
from vfl_core.protocol import EmbedCall, FuseCall, RoundCall, RoundResult

if TYPE_CHECKING:
    from vfl_core.training.ports import RoundRun

log = logging.getLogger(__name__)

AHEAD = 2  # rounds whose calls leave before the oldest round's reports are collected
Collect = Callable[[], dict[int, RoundResult]]


class DirectTransport(Protocol):
    def direct(self, calls: dict[int, RoundCall]) -> Collect:
        """Start one RoundCall per party; the function returned waits for the reports (a party
        that failed or missed its deadline is absent)."""
        ...


def supported(fed: RoundRun) -> bool:
    """Whether this run's rounds go over the direct data plane."""
    return fed.config.data_plane == "direct" and hasattr(fed.transport, "direct")


@dataclass
class RoundInFlight:
    """A round of the direct plane between its calls and its record."""

    round_id: int
    epoch: int
    batch: Batch
    tick: int
    callees: tuple[int, ...] = ()
    heads: tuple[int, ...] = ()
    collect: Collect | None = None


def run(
    fed: RoundRun,
    epoch: int,
    batches: Sequence[Batch],
    first_round: int,
    stop: Callable[[], bool] | None = None,
) -> Iterator[RoundRecord]:
    """Train on `batches` (rounds first_round, ...); yields each round's record in order and
    returns with nothing in flight. `stop` is asked before each new round leaves: when it says
    so, the rounds in flight finish and the rest of `batches` is left unstarted."""
    sent: dict[int, int] = {}  # block -> the last round it was sent
    flight: deque[RoundInFlight] = deque()
    for i, batch in enumerate(batches):
        if i and stop is not None and stop():
            break
        r = RoundInFlight(first_round + i, epoch, batch, first_round + i + fed.request_id)
        _start(fed, r, sent)
        flight.append(r)
        if len(flight) > AHEAD:
            yield _finish(fed, flight.popleft())
    while flight:
        yield _finish(fed, flight.popleft())


def run_one(fed: RoundRun, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
    """One round on its own (a round of a pause, vfl_core.training.liveness)."""
    return next(iter(run(fed, epoch, [batch], round_id)))


def exact(fed: RoundRun) -> bool:
    """Whether the run's direct rounds are exact (else vfl_core.training.direct_stale's)."""
    return not fed.config.staleness


def _start(fed: RoundRun, r: RoundInFlight, sent: dict[int, int]) -> None:
    calls = planned_calls(fed, r)
    if calls is None:
        return
    for block in sorted(calls):
        calls[block] = after(fed, calls[block], block, sent.get(block, -1))
        sent[block] = r.round_id
    r.collect = fed.transport.direct(calls)  # type: ignore[attr-defined]


def planned_calls(fed: RoundRun, r: RoundInFlight) -> dict[int, RoundCall] | None:
    """Round `r`'s calls (its callees and heads set on it), or None when nobody live could
    train on its batch (the relay calls Embed and learns the same)."""
    fed.presence.poll_rejoins(r.tick)
    spec, labels, batch = fed.spec, fed.label_blocks, r.batch
    if not spec.trainable(batch.pattern, fed.num_blocks, labels, batch.label_only):
        return None
    live = fed.liveness.should_call
    r.callees = tuple(b for b in batch.pattern if live(b, r.tick))
    holders = tuple(b for b in batch.label_only if live(b, r.tick))
    if not spec.trainable(r.callees, fed.num_blocks, labels, holders):
        return None
    calls = round_calls(fed, r, holders)
    r.heads = tuple(sorted(b for b, c in calls.items() if c.fuse is not None))
    return calls


def after(fed: RoundRun, call: RoundCall, block: int, previous: int) -> RoundCall:
    """`call` to run after the party's `previous` round, or, its first call since a validation
    left without waiting for it (--overlap-validation), after that validation."""
    turn = fed.validation_turns.pop(block, None)
    if turn is None:
        return replace(call, after=previous)
    return replace(call, after=turn, after_validation=True)


def round_calls(fed: RoundRun, r: RoundInFlight, holders: tuple[int, ...]) -> dict[int, RoundCall]:
    """Every party's RoundCall of round `r`: the relay's Embed and Fuse calls, as they are when
    every callee answers, with the embeddings left to travel between the parties."""
    al = fed.alignments["train"]
    digest = al.digest(r.batch.index)
    embeds = {
        b: EmbedCall(
            r.round_id,
            "train",
            al.rows_of(b, r.batch.index),
            digest,
            True,
            r.callees,
            fresh_own=b == fed.fresh_own_block,
            own_tower=fed.config.fresh_own_tower,
        )
        for b in r.callees
    }
    placeholders = dict.fromkeys(r.callees, np.empty(0, np.float32))  # who, not what
    fuses: dict[int, FuseCall] = fed.laser.fuse_calls(
        r.round_id, r.epoch, placeholders, r.callees, r.batch, holders
    )
    expect = {k: tuple(sorted(c.embeddings)) for k, c in fuses.items()}
    calls = {}
    for b in sorted({*embeds, *fuses}):
        heads = tuple(k for k in sorted(fuses) if k != b and b in expect[k])
        fuse = fuses.get(b)
        calls[b] = RoundCall(
            round_id=r.round_id,
            epoch=r.epoch,
            embed=embeds.get(b),
            send_to=heads if b in embeds else (),
            fuse=None if fuse is None else replace(fuse, embeddings={}),
            expect=expect.get(b, ()),
            grads_from=heads if b in embeds else (),
            holders=holders,
        )
    return calls


def _finish(fed: RoundRun, r: RoundInFlight) -> RoundRecord:
    """The round's record from the parties' reports; who answered what into the liveness."""
    if r.collect is None:
        return RoundRecord(r.round_id, r.epoch, r.batch.pattern, r.callees, {}, ())
    reports = r.collect()
    where = f"round {r.round_id}"
    embedded = {b for b in r.callees if b in reports and reports[b].embedded}
    fed.record(r.callees, embedded, "embed", where, tick=r.tick)
    present = tuple(sorted(embedded))
    losses = {k: reports[k].loss for k in r.heads if k in reports and reports[k].loss is not None}
    if r.heads:
        fed.record(r.heads, losses, "fuse", where, tick=r.tick)
    updated = {b for b in present if reports[b].stepped}
    fed.record(present, updated, "backward", where, tick=r.tick)
    return RoundRecord(
        round_id=r.round_id,
        epoch=r.epoch,
        pattern=r.batch.pattern,
        present=present,
        losses={k: float(v) for k, v in sorted(losses.items()) if v is not None},
        updated=tuple(sorted(updated)),
    )
