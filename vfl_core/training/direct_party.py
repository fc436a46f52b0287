"""A party's part of a training round on the direct data plane (TrainConfig.data_plane "direct").

The coordinator sends each party of a round one RoundCall; the tensors go between the parties
through `Links` (vfl_wire.data_plane over gRPC with mutual TLS): each party embeds and sends its
embedding to the heads that train on it, each head waits for the embeddings it expects, fuses
and sends each party its gradient, and each party steps f_k on the heads' gradients, added in
head order and rounded to the wire dtype as the coordinator's sum would have been
(vfl_core.methods.gradient_sum.received_gradient). A party therefore runs embed, fuse, backward
of round t and then embed of round t + 1, the order it runs them in through the relay, on the
values it would have received through the relay: the same numbers, bit for bit.

A peer that does not deliver within the wait is left out, as the relay leaves out a party that
misses its deadline: a head fuses on the embeddings it has (LASER-VFL's missing blocks), a party
steps on the gradients it has. Every send carries something: a head that cannot fuse, or holds
no gradient for a party, sends "nothing", so nobody waits for what will not come.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import numpy as np

from vfl_core.errors import VflError
from vfl_core.methods.outcomes import well_formed
from vfl_core.model.model_config import wire_width
from vfl_core.protocol import BackwardCall, RoundCall, RoundResult, Step
from vfl_core.training import held_heads

if TYPE_CHECKING:  # the coordinator reads the channel names here; the party (torch) it never runs
    from vfl_core.training.party import Party

log = logging.getLogger(__name__)

EMBEDDING = "embedding"
GRADIENT = "gradient"
VALIDATION = "validation"  # a validation batch's embedding (keyed by its request id)


class Links(Protocol):
    """How a party reaches the other parties of its round."""

    def send(self, kind: str, round_id: int, to: int, tensor: np.ndarray | None) -> None:
        """Send `tensor` (None: nothing this round) of `kind` to block `to`; returns at once."""
        ...

    def receive(
        self, kind: str, round_id: int, senders: Collection[int], timeout: float
    ) -> dict[int, np.ndarray | None]:
        """What of `kind` arrived for `round_id` from `senders` within `timeout` seconds
        (a sender absent from the answer sent nothing in time)."""
        ...

    def reach(self, blocks: Collection[int], timeout: float) -> tuple[int, ...]:
        """The blocks of `blocks` whose party it connects to within `timeout` seconds."""
        ...


def run_round(party: Party, call: RoundCall, links: Links) -> RoundResult:
    """Embed, fuse (a head), backward: the party's round, its tensors through `links`. With
    bounded staleness the call also steps earlier rounds (before its embed, and after its fuse at
    the end of the rounds) and may leave its own Backward to a later call."""
    where = f"round {call.round_id}"
    steps = run_steps(party, call, call.steps_before, links)
    if call.embed is None and call.fuse is None:  # a drain: steps only
        steps += run_steps(party, call, call.steps_after, links)
        return RoundResult(call.round_id, steps=steps)
    embedding = _embed(party, call, where)
    if call.hold_heads and call.fuse is not None:  # the heads of the epoch before's end
        held_heads.hold(party, call.round_id)
    for head in call.send_to:
        links.send(EMBEDDING, call.round_id, head, embedding)
    loss, used, missing = _fuse(party, call, links, embedding is not None, where)
    own = embedding is not None and not call.defer_step
    # a head whose embedding missed this head's wait is out of the round, as on the relay (a
    # party that misses the Embed deadline is not called to Fuse): no gradient of it is awaited
    heads = tuple(h for h in call.grads_from if h not in missing)
    stepped = own and _backward(party, call, call.round_id, heads, links, where)
    steps += run_steps(party, call, call.steps_after, links)
    return RoundResult(call.round_id, embedding is not None, used, loss, stepped, steps=steps)


def run_steps(
    party: Party, call: RoundCall, steps: tuple[Step, ...], links: Links
) -> tuple[int, ...]:
    """Earlier rounds' Backward, in round order, those the party embedded (a round it did not
    embed, as a party that missed it, has nothing to step); the rounds it stepped."""
    done = []
    for step in steps:
        if not party.embedded(step.round_id):
            continue
        where = f"round {step.round_id} (stepped in round {call.round_id})"
        if _backward(party, call, step.round_id, step.grads_from, links, where, step.epoch):
            done.append(step.round_id)
    return tuple(done)


def _embed(party: Party, call: RoundCall, where: str) -> np.ndarray | None:
    if call.embed is None:
        return None
    try:
        return party.embed(call.embed)
    except VflError as err:
        log.warning("%s: embed refused: %s", where, err)
        return None


def _fuse(
    party: Party, call: RoundCall, links: Links, embedded: bool, where: str
) -> tuple[float | None, tuple[int, ...], tuple[int, ...]]:
    """The head's Fuse on the embeddings that arrived well formed; each expected party is sent
    its gradient (or nothing). Returns the loss (None: no Fuse), the blocks it used and those
    whose push did not arrive in the wait (absent, or past the Embed deadline)."""
    if call.fuse is None:
        return None, (), ()
    got = links.receive(EMBEDDING, call.round_id, call.expect, call.embed_wait_s)
    size = _batch_size(call)
    embeddings = {}
    for block in sorted(call.expect):
        array = got.get(block)
        if well_formed(array, (size, _width(party, block, call))):
            embeddings[block] = array
        elif block in got and array is not None:
            log.warning("%s: embedding of block %d refused (shape/dtype/NaN)", where, block)
    present = sorted({*embeddings, *([party.info.block] if embedded else [])})
    spec, labels = party.spec, call.fuse.label_blocks
    grads: dict[int, np.ndarray] = {}
    loss = None
    if spec.trainable(present, party.info.num_blocks, labels, call.holders):
        try:
            result = party.fuse(replace(call.fuse, embeddings=embeddings))
            loss, grads = result.loss, result.grads
        except VflError as err:
            log.warning("%s: fuse refused: %s", where, err)
    for block in call.expect:
        links.send(GRADIENT, call.round_id, block, grads.get(block))
    missing = tuple(b for b in call.expect if b not in got)
    return loss, tuple(sorted(embeddings)) if loss is not None else (), missing


def _backward(
    party: Party,
    call: RoundCall,
    round_id: int,
    grads_from: tuple[int, ...],
    links: Links,
    where: str,
    epoch: int | None = None,
) -> bool:
    """Step f_k for `round_id` (the call's round, or an earlier one with staleness) on the
    heads' gradients that arrived well formed, in head order; at the learning rate of `epoch`
    (None: the call's)."""
    got = links.receive(GRADIENT, round_id, grads_from, call.grad_wait_s)
    if call.embed is not None and round_id == call.round_id:
        shape = (_batch_size(call), _width(party, party.info.block, call))
    else:  # an earlier round's (a drain's): the shape of the embedding the party keeps for it
        shape = party.embedded_shape(round_id) or (0, 0)
    parts = []
    for head in sorted(grads_from):
        grad = got.get(head)
        if well_formed(grad, shape):
            parts.append(grad)
        elif grad is not None:
            log.warning("%s: gradient from block %d refused (shape/dtype/NaN)", where, head)
    try:
        epoch = call.epoch if epoch is None else epoch
        party.backward(BackwardCall(round_id, epoch, None, tuple(parts)))
    except VflError as err:
        log.warning("%s: backward refused: %s", where, err)
        return False
    return True


def _batch_size(call: RoundCall) -> int:
    if call.embed is not None:
        return len(call.embed.rows)
    assert call.fuse is not None and call.fuse.rows is not None  # a label-only holder
    return len(call.fuse.rows)


def _width(party: Party, block: int, call: RoundCall) -> int:
    """Floats per sample of `block`'s embedding (vfl_core.training.laser_round.width)."""
    blocks = call.embed.blocks if call.embed is not None else call.fuse.blocks  # type: ignore[union-attr]
    return len(party.spec.slot_keys(block, blocks)) * wire_width(party.config.model)
