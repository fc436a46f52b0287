"""One training round of LASER-VFL and its baselines (paper, Algorithm 1): Embed at the live
parties of the batch's observed set, Fuse at the method's head parties, Backward with each
party's summed gradients; and the checks on the parties' answers.

Part of the round engine (vfl_core.training.engine.Federation composes it). A method with a
round program of its own (DVFL, DLVM) runs its phases instead (MethodSpec.program); the
pipelined engine (vfl_core.training.pipeline) runs the same phases with the Backward of a round
travelling with the next round's Embed, through `fuse_calls`, `fused` and `backward_call`.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from vfl_core.data.batch_plan import Batch
from vfl_core.methods.gradient_sum import add_in_order
from vfl_core.methods.outcomes import RoundRecord, well_formed
from vfl_core.model.model_config import wire_width
from vfl_core.protocol import BackwardCall, EmbedCall, FuseCall, FuseResult, Sealed

if TYPE_CHECKING:
    from vfl_core.training.ports import Run

log = logging.getLogger(__name__)


class LaserRound:
    """Runs a training round through the transport: Embed, Fuse, Backward."""

    def __init__(self, fed: Run) -> None:
        self.fed = fed

    def run(self, round_id: int, epoch: int, batch: Batch) -> RoundRecord:
        fed = self.fed
        spec, labels = fed.spec, fed.label_blocks
        if not spec.trainable(batch.pattern, fed.num_blocks, labels, batch.label_only):
            return RoundRecord(round_id, epoch, batch.pattern, (), {}, ())
        al = fed.alignments["train"]
        digest = al.digest(batch.index)
        callees = tuple(b for b in batch.pattern if fed.liveness.should_call(b, fed.tick))
        calls = {
            b: EmbedCall(
                round_id,
                "train",
                al.rows_of(b, batch.index),
                digest,
                True,
                callees,
                fresh_own=b == fed.fresh_own_block,
                own_tower=fed.config.fresh_own_tower,
            )
            for b in callees
        }
        where = f"round {round_id}"
        size, own = len(batch.index), fed.fresh_own_block
        embeddings = self.accept(fed.transport.embed(calls), callees, size, "embed", where, own=own)
        present = tuple(sorted(embeddings))
        holders = tuple(b for b in batch.label_only if fed.liveness.should_call(b, fed.tick))
        if not spec.trainable(present, fed.num_blocks, labels, holders):
            # Too few parties answered for this method (svfl without a party, a split-learning
            # head party down): the round is skipped, so no optimiser steps on zero gradients.
            return RoundRecord(round_id, epoch, batch.pattern, present, {}, ())
        fused = self._fuse(round_id, epoch, embeddings, callees, batch, holders, where)
        backward_calls = {b: backward_call(round_id, epoch, fused, b) for b in present}
        updated = fed.transport.backward(backward_calls) if backward_calls else set()
        fed.record(present, updated, "backward", where)
        return RoundRecord(
            round_id=round_id,
            epoch=epoch,
            pattern=batch.pattern,
            present=present,
            losses={k: fused[k].loss for k in sorted(fused)},
            updated=tuple(sorted(updated)),
        )

    def _fuse(
        self,
        round_id: int,
        epoch: int,
        embeddings: dict[int, np.ndarray],
        callees: tuple[int, ...],
        batch: Batch,
        holders: tuple[int, ...],
        where: str,
    ) -> dict[int, FuseResult]:
        """Fuse at each head party of the method (and at the live label-only holders where the
        method's heads serve feature-only blocks); keep the answers whose gradients fit."""
        calls = self.fuse_calls(round_id, epoch, embeddings, callees, batch, holders)
        fused = self.fed.transport.fuse(calls) if calls else {}
        return self.fused(calls, fused, callees, len(batch.index), where)

    def fuse_calls(
        self,
        round_id: int,
        epoch: int,
        embeddings: dict[int, np.ndarray],
        callees: tuple[int, ...],
        batch: Batch,
        holders: tuple[int, ...],
    ) -> dict[int, FuseCall]:
        """One FuseCall per head party of the method (label-only holders included)."""
        heads = self.fed.spec.fuse_parties(sorted(embeddings), self.fed.label_blocks, holders)
        return {k: self._fuse_call(k, round_id, epoch, embeddings, callees, batch) for k in heads}

    def fused(
        self,
        calls: dict[int, FuseCall],
        fused: dict[int, FuseResult],
        callees: tuple[int, ...],
        size: int,
        where: str,
        tick: int | None = None,
    ) -> dict[int, FuseResult]:
        """The answers whose gradients fit; every head party's liveness recorded."""
        fused = {
            k: r
            for k, r in fused.items()
            if k in calls
            and all(
                well_formed(r.grads.get(b), (size, self.width(b, callees)))
                for b in calls[k].embeddings
            )
        }
        self.fed.record(calls, fused, "fuse", where, tick=tick)
        return fused

    def _fuse_call(
        self,
        k: int,
        round_id: int,
        epoch: int,
        embeddings: dict[int, np.ndarray],
        callees: tuple[int, ...],
        batch: Batch,
    ) -> FuseCall:
        """Party k's Fuse call: the others' embeddings (none for local predictors); a label-only
        holder, which embedded nothing, is also told its rows of the batch."""
        fed = self.fed
        shared = fed.spec.shares_embeddings
        others = {b: e for b, e in sorted(embeddings.items()) if b != k and shared}
        call = FuseCall(
            round_id, epoch, others, callees, fed.label_blocks, batch=fed.train_rows.batch_size()
        )
        if k in embeddings:
            return call
        al = fed.alignments["train"]
        return replace(call, rows=al.rows_of(k, batch.index), digest=al.digest(batch.index))

    def width(self, block: int, callees: tuple[int, ...]) -> int:
        """Floats per sample of `block`'s embedding (a round program may say otherwise)."""
        fed = self.fed
        width = None if fed.hooks is None else fed.hooks.embed_width(fed)
        if width is not None:
            return width
        return len(fed.spec.slot_keys(block, callees)) * wire_width(fed.config.model)

    def accept(
        self,
        answers: dict[int, np.ndarray],
        callees: tuple[int, ...],
        size: int,
        phase: str,
        where: str,
        immediate: bool = False,
        tick: int | None = None,
        own: int | None = None,
    ) -> dict[int, np.ndarray]:
        """The embeddings of `answers` that are well formed; who answered recorded. Block
        `own` (the training round's fresh_own_block) answers no rows: no head reads them."""
        good = {
            b: a
            for b, a in answers.items()
            if b in callees and well_formed(a, (0 if b == own else size, self.width(b, callees)))
        }
        for b in answers.keys() - good.keys():
            log.warning("%s: %s answer of block %d refused (shape/dtype/NaN)", where, phase, b)
        self.fed.record(callees, good, phase, where, immediate, tick)
        return good


def head_grads(fused: dict, block: int) -> list:
    """The other heads' gradients for `block`, in head order (same in every transport)."""
    return [fused[k].grads[block] for k in sorted(fused) if k != block and block in fused[k].grads]


def sum_grads(fused: dict, block: int) -> np.ndarray | None:
    """Sum of the other heads' gradients for `block`, in head order (same in every transport)."""
    return add_in_order(head_grads(fused, block))


def backward_call(round_id: int, epoch: int, fused: dict, block: int) -> BackwardCall:
    """`block`'s Backward: the heads' summed gradient, or their sealed gradients in head order
    when the relay is encrypted (the coordinator cannot add them: the party does,
    vfl_core.methods.gradient_sum.received_gradient)."""
    grads = head_grads(fused, block)
    if any(isinstance(g, Sealed) for g in grads):
        return BackwardCall(round_id, epoch, None, tuple(grads))
    return BackwardCall(round_id, epoch, add_in_order(grads))
