"""Messages of the direct data plane (TrainConfig.data_plane "direct"): the coordinator's Round
call and its status reply, and the DataPlane Push of one embedding or gradient between parties.

As in `vfl_wire.convert`: `*_to_proto` builds from trusted local values, `*_from_proto` checks
an untrusted message and raises ProtocolError naming the field. A Round message carries row
indices (as Embed does) and no float tensor; a Push carries one (B, width) tensor in the run's
wire dtype, decoded to float32 here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.model.quantize import LOSSLESS
from vfl_core.protocol import EvalAnswer, EvalBatch, Evaluation, RoundCall, RoundResult, Step
from vfl_core.training.direct_party import EMBEDDING, GRADIENT, VALIDATION
from vfl_wire.convert_fields import block_list, check_name, check_round, check_split
from vfl_wire.convert_party import (
    embed_call_from_proto,
    embed_call_to_proto,
    fuse_call_from_proto,
    fuse_call_to_proto,
    score_reply_from_proto,
    score_reply_to_proto,
)
from vfl_wire.tensors import decode_float, encode_float
from vfl_wire.v1 import vfl_pb2

KINDS = (EMBEDDING, GRADIENT, VALIDATION)
MAX_WAIT_S = 3600.0


@dataclass(frozen=True)
class PeerAddress:
    """Another party of the run: its certificate's name and where its server listens."""

    party_id: str
    address: str


@dataclass(frozen=True)
class Push:
    """One tensor (or, `tensor` None, nothing) of a round from the party holding `block`."""

    round_id: int
    block: int
    kind: str
    tensor: np.ndarray | None


def round_call_to_proto(
    call: RoundCall, h: vfl_pb2.Header, peers: Mapping[int, PeerAddress]
) -> vfl_pb2.RoundRequest:
    req = vfl_pb2.RoundRequest(
        header=h,
        round_id=call.round_id,
        epoch=call.epoch,
        send_to=call.send_to,
        expect=call.expect,
        grads_from=call.grads_from,
        holders=call.holders,
        after=call.after,
        embed_wait_s=call.embed_wait_s,
        grad_wait_s=call.grad_wait_s,
        probe=call.probe,
        steps_before=[_step_to_proto(s) for s in call.steps_before],
        steps_after=[_step_to_proto(s) for s in call.steps_after],
        defer_step=call.defer_step,
        after_validation=call.after_validation,
        hold_heads=call.hold_heads,
    )
    if call.embed is not None:
        req.embed.CopyFrom(embed_call_to_proto(call.embed, None))
    if call.fuse is not None:
        req.fuse.CopyFrom(fuse_call_to_proto(call.fuse, None))
    if call.evaluation is not None:
        req.evaluation.CopyFrom(_evaluation_to_proto(call.evaluation))
    for block, peer in sorted(peers.items()):
        req.peers[block].CopyFrom(vfl_pb2.Peer(party_id=peer.party_id, address=peer.address))
    return req


def round_call_from_proto(
    req: vfl_pb2.RoundRequest,
) -> tuple[RoundCall, dict[int, PeerAddress]]:
    embed = embed_call_from_proto(req.embed) if req.HasField("embed") else None
    fuse = fuse_call_from_proto(req.fuse) if req.HasField("fuse") else None
    if embed is not None and (not embed.train or embed.round_id != req.round_id):
        raise ProtocolError("round embed: a training embed of the round's id expected")
    if fuse is not None and (fuse.embeddings or fuse.round_id != req.round_id):
        raise ProtocolError("round fuse: no embeddings and the round's id expected")
    evaluation = _evaluation_from_proto(req) if req.HasField("evaluation") else None
    if evaluation is not None and (embed is not None or fuse is not None):
        raise ProtocolError("round: a validation carries no training embed or fuse")
    if req.probe and (embed is not None or fuse is not None or evaluation is not None):
        raise ProtocolError("round: a probe carries nothing else")
    # a validation runs after the round it is tagged with: that round's step may come before it
    limit = req.round_id + (evaluation is not None)
    steps_before = _steps_from_proto(req.steps_before, limit, "round steps_before")
    steps_after = _steps_from_proto(req.steps_after, req.round_id + 1, "round steps_after")
    steps = bool(steps_before or steps_after or req.defer_step)
    if req.probe and steps:
        raise ProtocolError("round: a probe carries no steps")
    if evaluation is not None and (steps_after or req.defer_step):
        raise ProtocolError("round: a validation carries only the steps before it")
    if embed is None and fuse is None and evaluation is None and not req.probe and not steps:
        raise ProtocolError("round: neither embed nor fuse")
    if embed is None and fuse is not None and fuse.rows is None:
        raise ProtocolError("round: a fuse without an embed (label-only rows) needs its rows")
    waits = (req.embed_wait_s, req.grad_wait_s)
    if not all(math.isfinite(w) and 0 <= w <= MAX_WAIT_S for w in waits):
        raise ProtocolError(f"round waits: {waits} outside 0..{MAX_WAIT_S:g} s")
    call = RoundCall(
        round_id=req.round_id,
        epoch=req.epoch,
        embed=embed,
        send_to=block_list(req.send_to, "round send_to"),
        fuse=fuse,
        expect=block_list(req.expect, "round expect"),
        grads_from=block_list(req.grads_from, "round grads_from"),
        holders=block_list(req.holders, "round holders"),
        after=req.after,
        embed_wait_s=req.embed_wait_s,
        grad_wait_s=req.grad_wait_s,
        evaluation=evaluation,
        probe=req.probe,
        steps_before=steps_before,
        steps_after=steps_after,
        defer_step=req.defer_step,
        after_validation=req.after_validation,
        hold_heads=req.hold_heads,
    )
    needed = {*call.send_to, *call.expect, *call.grads_from}
    needed |= {b for s in (*steps_before, *steps_after) for b in s.grads_from}
    peers = {
        b: PeerAddress(check_name(p.party_id, "peer party id"), check_name(p.address, "peer"))
        for b, p in req.peers.items()
    }
    if missing := sorted(needed - peers.keys()):
        raise ProtocolError(f"round peers: no address for blocks {missing}")
    return call, peers


def _step_to_proto(step: Step) -> vfl_pb2.DeferredStep:
    return vfl_pb2.DeferredStep(
        round_id=step.round_id, grads_from=step.grads_from, epoch=step.epoch
    )


def _steps_from_proto(steps, before: int, what: str) -> tuple[Step, ...]:
    """Earlier rounds' steps, each of a round below `before`, in increasing round order."""
    out = tuple(
        Step(s.round_id, block_list(s.grads_from, what), s.epoch if s.HasField("epoch") else None)
        for s in steps
    )
    ids = [s.round_id for s in out]
    if any(i < 0 or i >= before for i in ids) or ids != sorted(set(ids)):
        raise ProtocolError(f"{what}: rounds {ids} not increasing earlier rounds")
    return out


def _evaluation_to_proto(ev: Evaluation) -> vfl_pb2.Evaluation:
    return vfl_pb2.Evaluation(
        split=ev.split,
        scorer=ev.scorer,
        thresholded=ev.threshold is not None,
        threshold=0.0 if ev.threshold is None else ev.threshold,
        batches=[
            vfl_pb2.EvalBatch(
                embed=embed_call_to_proto(b.embed, None),
                first=b.first,
                head=b.head,
                embed_only=b.embed_only,
            )
            for b in ev.batches
        ],
        hold=ev.hold,
        keep=ev.keep is not None,
        keep_round=-1 if ev.keep is None else ev.keep,
        federation_scores=ev.federation_scores,
    )


def _evaluation_from_proto(req: vfl_pb2.RoundRequest) -> Evaluation:
    ev = req.evaluation
    if ev.scorer < 0:
        raise ProtocolError(f"validation scorer: negative block {ev.scorer}")
    if ev.thresholded and not (math.isfinite(ev.threshold) and 0 <= ev.threshold <= 1):
        raise ProtocolError(f"validation threshold: {ev.threshold} outside 0..1")
    split = check_split(ev.split, what="validation split")
    batches = []
    for b in ev.batches:
        embed = embed_call_from_proto(b.embed)
        if embed.train or embed.split != split or b.first < 0:
            raise ProtocolError("validation batch: an inference embed of the split expected")
        # (the head cut as a PredictRequest's)
        batches.append(EvalBatch(embed, b.first, b.head[:64], b.embed_only))
    if ev.keep and not 0 <= ev.keep_round <= req.round_id:
        raise ProtocolError(f"validation keep: round {ev.keep_round} not an earlier round")
    threshold = ev.threshold if ev.thresholded else None
    keep = ev.keep_round if ev.keep else None
    return Evaluation(
        split,
        ev.scorer,
        tuple(batches),
        threshold,
        hold=ev.hold,
        keep=keep,
        federation_scores=ev.federation_scores,
    )


def round_result_to_proto(result: RoundResult) -> vfl_pb2.RoundReply:
    reply = vfl_pb2.RoundReply(
        round_id=result.round_id,
        embedded=result.embedded,
        used=result.used,
        fused=result.loss is not None,
        loss=0.0 if result.loss is None else result.loss,
        stepped=result.stepped,
        reached=result.reached,
        steps=result.steps,
    )
    for a in result.evaluated:
        answer = reply.evaluated.add(request_id=a.request_id, present=a.present)
        if a.score is not None:
            answer.scored = True
            answer.score.CopyFrom(score_reply_to_proto(a.score))
    return reply


def round_result_from_proto(reply: vfl_pb2.RoundReply, *, round_id: int) -> RoundResult:
    check_round(reply.round_id, round_id, what="round reply")
    if reply.fused and not math.isfinite(reply.loss):
        raise ProtocolError(f"round loss: non-finite value {reply.loss}")
    return RoundResult(
        round_id=reply.round_id,
        embedded=reply.embedded,
        used=block_list(reply.used, "round used"),
        loss=reply.loss if reply.fused else None,
        stepped=reply.stepped,
        evaluated=tuple(
            EvalAnswer(
                a.request_id,
                block_list(a.present, "validation present"),
                score_reply_from_proto(a.score) if a.scored else None,
            )
            for a in reply.evaluated
        ),
        reached=block_list(reply.reached, "probe reached"),
        steps=tuple(int(r) for r in reply.steps if 0 <= r <= round_id),
    )


def push_to_proto(h: vfl_pb2.Header, push: Push, wire: str = LOSSLESS) -> vfl_pb2.PushRequest:
    req = vfl_pb2.PushRequest(
        header=h,
        round_id=push.round_id,
        block=push.block,
        kind=push.kind,
        empty=push.tensor is None,
    )
    if push.tensor is not None:
        req.tensor.CopyFrom(encode_float(push.tensor, wire, what=push.kind))
    return req


def push_from_proto(req: vfl_pb2.PushRequest, wire: str = LOSSLESS) -> Push:
    if req.kind not in KINDS:
        raise ProtocolError(f"push kind: {req.kind[:40]!r} is not one of {', '.join(KINDS)}")
    if req.block < 0:
        raise ProtocolError(f"push block: negative block {req.block}")
    if req.empty:
        if req.HasField("tensor"):
            raise ProtocolError("push: a tensor in an empty push")
        return Push(req.round_id, req.block, req.kind, None)
    tensor = decode_float(req.tensor, wire, what=req.kind, expect_shape=(None, None))
    return Push(req.round_id, req.block, req.kind, tensor)


def absent_to_proto(
    round_id: int, blocks: Sequence[int], h: vfl_pb2.Header
) -> vfl_pb2.AbsentRequest:
    return vfl_pb2.AbsentRequest(header=h, round_id=round_id, blocks=sorted(set(blocks)))


def absent_from_proto(req: vfl_pb2.AbsentRequest) -> tuple[int, tuple[int, ...]]:
    """The round and the blocks that push nothing more for it."""
    if req.round_id < 0:
        raise ProtocolError(f"absent: round id {req.round_id} is negative")
    blocks = block_list(req.blocks, "absent blocks")
    if not blocks:
        raise ProtocolError("absent: no blocks")
    return req.round_id, blocks
