"""The Party service's messages: ID hashes and class weights, the training round (Embed, Fuse,
Backward and the pipelined Train), Predict and Score (see `vfl_wire.convert`)."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.inference.scoring import SUMS
from vfl_core.methods.spec import BLEND, EXTRA_HEADS
from vfl_core.model.quantize import LOSSLESS
from vfl_core.protocol import (
    BackwardCall,
    BlindPrediction,
    EmbedCall,
    FuseCall,
    FuseResult,
    PredictCall,
    ScoreCall,
    ScoreResult,
    ServingChoice,
    TrainCall,
    TrainResult,
)
from vfl_wire.convert_fields import (
    ANY2,
    Matrix,
    block_list,
    block_map,
    check_name,
    check_round,
    check_split,
    decode_map,
    encode_floats,
    encode_map,
    encode_relayed,
    index_vector,
    matrix,
    require,
)
from vfl_wire.tensors import decode_array, encode_array, encode_float, encode_index
from vfl_wire.v1 import vfl_pb2


def id_hashes_to_proto(hashes: list[bytes]) -> vfl_pb2.IdHashesReply:
    return vfl_pb2.IdHashesReply(hashes=hashes)


def id_hashes_from_proto(reply: vfl_pb2.IdHashesReply) -> list[bytes]:
    return list(reply.hashes)


def class_weights_to_proto(weights: np.ndarray | None) -> vfl_pb2.ClassWeightsReply:
    if weights is None:
        return vfl_pb2.ClassWeightsReply(present=False)
    return vfl_pb2.ClassWeightsReply(
        present=True, weights=encode_array(weights, what="class weights")
    )


def class_weights_from_proto(reply: vfl_pb2.ClassWeightsReply) -> np.ndarray | None:
    """(N,) float32 per-row class weights, or None for a party without labels."""
    if not reply.present:
        return None
    require(reply, "weights", "class weights")
    return decode_array(
        reply.weights, what="class weights", expect_dtype="float32", expect_shape=(None,)
    )


def embed_call_to_proto(call: EmbedCall, h: vfl_pb2.Header | None) -> vfl_pb2.EmbedRequest:
    return vfl_pb2.EmbedRequest(
        header=h,
        round_id=call.round_id,
        split=call.split,
        rows=encode_index(call.rows, what="embed rows"),
        digest=call.digest,
        train=call.train,
        blocks=call.blocks,
        fresh_own=call.fresh_own,
        own_tower=bool(call.own_tower),
    )


def embed_call_from_proto(req: vfl_pb2.EmbedRequest) -> EmbedCall:
    return EmbedCall(
        round_id=req.round_id,
        split=check_split(req.split, what="embed split"),
        rows=index_vector(req.rows, "embed rows"),
        digest=req.digest,
        train=req.train,
        blocks=block_list(req.blocks, "embed blocks"),
        fresh_own=req.fresh_own,
        own_tower=req.own_tower if req.train else None,
    )


def embedding_to_proto(
    round_id: int, embedding: np.ndarray, wire: str = LOSSLESS
) -> vfl_pb2.EmbedReply:
    return vfl_pb2.EmbedReply(
        round_id=round_id, embedding=encode_float(embedding, wire, what="embedding")
    )


def embedding_from_proto(
    reply: vfl_pb2.EmbedReply, *, round_id: int, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> np.ndarray:
    """(B, d) float32 embedding of the round `round_id` (StaleRoundError for another round)."""
    check_round(reply.round_id, round_id, what="embed reply")
    return matrix(reply.embedding, "embedding", expect_shape, wire, sealed=True)


def fuse_call_to_proto(
    call: FuseCall, h: vfl_pb2.Header | None, wire: str = LOSSLESS
) -> vfl_pb2.FuseRequest:
    req = vfl_pb2.FuseRequest(
        header=h,
        round_id=call.round_id,
        epoch=call.epoch,
        embeddings=encode_floats(call.embeddings, "embedding for block", wire),
        blocks=call.blocks,
        label_blocks=call.label_blocks,
        batch=call.batch,
    )
    if call.rows is not None:
        req.rows.CopyFrom(encode_index(call.rows, what="fuse rows"))
        req.digest = call.digest
    return req


def fuse_call_from_proto(
    req: vfl_pb2.FuseRequest, *, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> FuseCall:
    rows = index_vector(req.rows, "fuse rows") if req.HasField("rows") else None
    if rows is None and req.digest:
        raise ProtocolError("fuse digest: present without rows")
    if req.batch < 0:
        raise ProtocolError(f"fuse batch: {req.batch} is negative")
    return FuseCall(
        round_id=req.round_id,
        epoch=req.epoch,
        embeddings=block_map(req.embeddings, "embedding", expect_shape, wire),
        blocks=block_list(req.blocks, "fuse blocks"),
        label_blocks=block_list(req.label_blocks, "fuse label blocks"),
        rows=rows,
        digest=req.digest,
        batch=req.batch,
    )


def fuse_result_to_proto(
    result: FuseResult, round_id: int, wire: str = LOSSLESS
) -> vfl_pb2.FuseReply:
    return vfl_pb2.FuseReply(
        round_id=round_id,
        loss=result.loss,
        grads=encode_floats(result.grads, "gradient for block", wire),
    )


def fuse_result_from_proto(
    reply: vfl_pb2.FuseReply, *, round_id: int, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> FuseResult:
    check_round(reply.round_id, round_id, what="fuse reply")
    if not math.isfinite(reply.loss):
        raise ProtocolError(f"fuse loss: non-finite value {reply.loss}")
    grads = block_map(reply.grads, "gradient", expect_shape, wire, sealed=True)
    return FuseResult(loss=reply.loss, grads=grads)


def backward_call_to_proto(
    call: BackwardCall, h: vfl_pb2.Header | None, wire: str = LOSSLESS
) -> vfl_pb2.BackwardRequest:
    req = vfl_pb2.BackwardRequest(header=h, round_id=call.round_id, epoch=call.epoch)
    req.parts.extend(
        encode_relayed(p, wire, f"backward gradient part {i}") for i, p in enumerate(call.parts)
    )
    if call.grad is not None:
        req.has_grad = True
        req.grad.CopyFrom(encode_float(call.grad, wire, what="backward gradient"))
    return req


def backward_call_from_proto(
    req: vfl_pb2.BackwardRequest, *, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> BackwardCall:
    grad = None
    if req.has_grad:
        require(req, "grad", "backward gradient")
        grad = matrix(req.grad, "backward gradient", expect_shape, wire)
    elif req.HasField("grad"):
        raise ProtocolError("backward gradient: present but has_grad is false")
    # Encrypted relay: the heads' gradients, opened by vfl_wire.relay_messages before this (a
    # box still sealed is refused), for the party to add
    parts: list[np.ndarray] = []
    shape: Matrix = expect_shape
    for i, t in enumerate(req.parts):
        parts.append(matrix(t, f"backward gradient part {i}", shape, wire))
        shape = (parts[-1].shape[0], parts[-1].shape[1])  # every part the first's shape
    if grad is not None and parts:
        raise ProtocolError("backward gradient: both a sum and its parts")
    return BackwardCall(req.round_id, req.epoch, grad, tuple(parts))


def train_call_to_proto(
    call: TrainCall, h: vfl_pb2.Header, wire: str = LOSSLESS
) -> vfl_pb2.TrainRequest:
    """A pipelined call; the nested requests carry no header (the outer one names the party)."""
    return vfl_pb2.TrainRequest(
        header=h,
        backward=[backward_call_to_proto(c, None, wire) for c in call.backward],
        fuse=[fuse_call_to_proto(c, None, wire) for c in call.fuse],
        embed=[embed_call_to_proto(c, None) for c in call.embed],
    )


MAX_TRAIN_STEPS = 256  # steps of one pipelined call (TrainConfig allows 32 rounds per call)


def train_call_from_proto(req: vfl_pb2.TrainRequest, *, wire: str = LOSSLESS) -> TrainCall:
    steps = (*req.backward, *req.fuse, *req.embed)
    if not steps:
        raise ProtocolError("train request: no backward, fuse or embed")
    if len(steps) > MAX_TRAIN_STEPS:
        raise ProtocolError(f"train request: {len(steps)} steps, at most {MAX_TRAIN_STEPS}")
    if any(step.HasField("header") for step in steps):
        raise ProtocolError("train request: only the outer request carries a header")
    call = TrainCall(
        backward=tuple(backward_call_from_proto(r, wire=wire) for r in req.backward),
        fuse=tuple(fuse_call_from_proto(r, wire=wire) for r in req.fuse),
        embed=tuple(embed_call_from_proto(r) for r in req.embed),
    )
    for name, group in (("backward", call.backward), ("fuse", call.fuse), ("embed", call.embed)):
        rounds = [c.round_id for c in group]
        if rounds != sorted(set(rounds)):
            raise ProtocolError(f"train {name}: rounds {rounds} are not increasing")
    return call


def train_result_to_proto(result: TrainResult, wire: str = LOSSLESS) -> vfl_pb2.TrainReply:
    return vfl_pb2.TrainReply(
        stepped=result.stepped,
        fused=[fuse_result_to_proto(f, r, wire) for r, f in sorted(result.fused.items())],
        embeddings=[embedding_to_proto(r, e, wire) for r, e in sorted(result.embeddings.items())],
        stopped=result.stopped,
    )


def train_result_from_proto(
    reply: vfl_pb2.TrainReply, call: TrainCall, *, wire: str = LOSSLESS
) -> TrainResult:
    """The answer to `call`: only rounds it asked for, each at most once, in its order."""
    asked = {c.round_id for c in call.backward}
    if not set(reply.stepped) <= asked or len(set(reply.stepped)) != len(reply.stepped):
        raise ProtocolError(f"train reply: stepped rounds {list(reply.stepped)} not asked for")
    fused = {}
    for c, f in zip(call.fuse, reply.fused, strict=False):
        fused[c.round_id] = fuse_result_from_proto(f, round_id=c.round_id, wire=wire)
    embeddings = {}
    for c, e in zip(call.embed, reply.embeddings, strict=False):
        shape = (0 if c.fresh_own else len(c.rows), None)  # fresh_own: no rows (no one reads)
        embeddings[c.round_id] = embedding_from_proto(
            e, round_id=c.round_id, expect_shape=shape, wire=wire
        )
    if len(reply.fused) > len(call.fuse) or len(reply.embeddings) > len(call.embed):
        raise ProtocolError("train reply: more answers than requests")
    return TrainResult(tuple(reply.stepped), fused, embeddings, reply.stopped[:500])


def predict_call_to_proto(
    call: PredictCall, h: vfl_pb2.Header, wire: str = LOSSLESS
) -> vfl_pb2.PredictRequest:
    return vfl_pb2.PredictRequest(
        header=h,
        request_id=call.request_id,
        embeddings=encode_floats(call.embeddings, "embedding for block", wire),
        blocks=call.blocks,
        label_blocks=call.label_blocks,
        seal_for=call.seal_for,
        head=call.head,
    )


def predict_call_from_proto(
    req: vfl_pb2.PredictRequest, *, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> PredictCall:
    return PredictCall(
        request_id=req.request_id,
        embeddings=block_map(req.embeddings, "embedding", expect_shape, wire),
        blocks=block_list(req.blocks, "predict blocks"),
        label_blocks=block_list(req.label_blocks, "predict label blocks"),
        seal_for=block_list(req.seal_for, "predict seal_for"),
        head=req.head[:64],
    )


def probabilities_to_proto(request_id: int, probabilities: np.ndarray) -> vfl_pb2.PredictReply:
    return vfl_pb2.PredictReply(
        request_id=request_id, probabilities=encode_array(probabilities, what="probabilities")
    )


def probabilities_from_proto(
    reply: vfl_pb2.PredictReply,
    *,
    request_id: int,
    expect_shape: Matrix = ANY2,
    sealed: bool = False,
) -> np.ndarray:
    """(B, C) float32 class probabilities of request `request_id` (`sealed`: an evaluation's of
    an encrypted relay, which comes back as a `Sealed` for the label parties)."""
    check_round(reply.request_id, request_id, what="predict reply")
    return matrix(reply.probabilities, "probabilities", expect_shape, sealed=sealed)


def score_call_to_proto(call: ScoreCall, h: vfl_pb2.Header) -> vfl_pb2.ScoreRequest:
    req = vfl_pb2.ScoreRequest(
        header=h,
        split=call.split,
        rows=encode_index(call.rows, what="score rows"),
        digest=call.digest,
        predictions=encode_map(call.predictions, "predictions of"),
        scores=encode_map(call.scores, "scores of"),
    )
    req.blind.extend(blind_to_proto(b) for b in call.blind)
    return req


def blind_to_proto(b: BlindPrediction) -> vfl_pb2.BlindPrediction:
    return vfl_pb2.BlindPrediction(
        request_id=b.request_id,
        heads=encode_floats(b.heads, "probabilities of head", LOSSLESS),
        present=b.present,
        first=b.first,
        has_threshold=b.threshold is not None,
        threshold=0.0 if b.threshold is None else b.threshold,
        federation_scores=b.federation_scores,
        guess=b.guess,
        size=b.size,
    )


def blind_from_proto(b: vfl_pb2.BlindPrediction) -> BlindPrediction:
    """As the label party reads it, its boxes opened (vfl_wire.relay_messages): each head's
    (size, C) probabilities; a box still sealed is refused."""
    if b.first < 0 or not math.isfinite(b.threshold) or not 0.0 <= b.threshold <= 1.0:
        raise ProtocolError("score blind prediction: negative first sample or bad threshold")
    if b.size <= 0:
        raise ProtocolError(f"score blind prediction: {b.size} rows")
    return BlindPrediction(
        request_id=b.request_id,
        heads=block_map(b.heads, "score probabilities", (b.size, None)),
        present=block_list(b.present, "score present blocks"),
        first=b.first,
        threshold=b.threshold if b.has_threshold else None,
        federation_scores=b.federation_scores,
        guess=check_name(b.guess, "score guess") if b.guess else "",
        size=b.size,
    )


def score_call_from_proto(req: vfl_pb2.ScoreRequest) -> ScoreCall:
    rows = index_vector(req.rows, "score rows")

    def scores(t: vfl_pb2.Tensor, what: str) -> np.ndarray:  # (B,) or (B, C) float32
        shape = (len(rows),) if len(t.shape) < 2 else (len(rows), None)
        return decode_array(t, what=what, expect_dtype="float32", expect_shape=shape)

    blind = tuple(blind_from_proto(b) for b in req.blind)
    if blind and (req.predictions or req.scores):
        raise ProtocolError("score request: both predictions and a blind prediction")
    if blind and sum(b.size for b in blind) != len(rows):
        raise ProtocolError(f"score request: its batches' sizes do not add up to {len(rows)} rows")
    return ScoreCall(
        split=check_split(req.split, what="score split"),
        rows=rows,
        digest=req.digest,
        predictions=decode_map(
            req.predictions, lambda t, what: index_vector(t, what, len(rows)), "predictions of"
        ),
        scores=decode_map(req.scores, scores, "scores of"),
        blind=blind,
    )


def score_reply_to_proto(result: ScoreResult) -> vfl_pb2.ScoreReply:
    return vfl_pb2.ScoreReply(
        confusion=encode_map(result.confusion, "confusion of"),
        histograms=encode_map(result.histograms, "histogram of"),
        sums=encode_map(result.sums, "sums of"),
        brier=encode_map(result.brier, "Brier sums of"),
    )


def score_reply_from_proto(reply: vfl_pb2.ScoreReply) -> ScoreResult:
    """Per predictor name: (C, C) int64 confusion counts [true, predicted], (2, bins) int64 AUC
    histograms, (5,) float64 regression sums, (2,) float64 Brier sums; counts and sums of
    squares never negative."""
    return ScoreResult(
        confusion=decode_map(reply.confusion, partial(_counts, square=True), "confusion of"),
        histograms=decode_map(reply.histograms, partial(_counts, square=False), "histogram of"),
        sums=decode_map(reply.sums, _sums, "sums of"),
        brier=decode_map(reply.brier, _brier, "Brier sums of"),
    )


def _counts(t: vfl_pb2.Tensor, what: str, *, square: bool) -> np.ndarray:
    counts = decode_array(t, what=what, expect_dtype="int64", expect_shape=(None, None))
    if square and counts.shape[0] != counts.shape[1]:
        raise ProtocolError(f"{what}: shape {counts.shape} is not square")
    if not square and (counts.shape[0] != 2 or counts.shape[1] < 1):
        raise ProtocolError(f"{what}: shape {counts.shape} is not (2, bins)")
    if counts.size and counts.min() < 0:
        raise ProtocolError(f"{what}: negative count")
    return counts


def _brier(t: vfl_pb2.Tensor, what: str) -> np.ndarray:
    sums = decode_array(t, what=what, expect_dtype="float64", expect_shape=(2,))
    if (sums < 0).any():  # a per-sample Brier score and its square are never negative
        raise ProtocolError(f"{what}: negative sum of non-negative terms")
    return sums


def _sums(t: vfl_pb2.Tensor, what: str) -> np.ndarray:
    sums = decode_array(t, what=what, expect_dtype="float64", expect_shape=(len(SUMS),))
    # squared error, absolute error, count and squared target are sums of non-negative terms
    if (sums[[0, 1, 2, 4]] < 0).any():
        raise ProtocolError(f"{what}: negative sum of non-negative terms")
    return sums


# ---------------------------------------------------------------- Shutdown's serving choice
def serving_choice_to_proto(choice: ServingChoice) -> vfl_pb2.ServingChoice:
    out = vfl_pb2.ServingChoice(has_threshold=choice.threshold is not None)
    if choice.threshold is not None:
        out.threshold = choice.threshold
    for observed, kept in sorted(choice.subsets.items()):
        out.subsets.add(observed=list(observed), kept=list(kept))
    for observed, head in sorted(choice.heads.items()):
        out.heads.add(observed=list(observed), head=head)
    return out


def serving_choice_from_proto(message: vfl_pb2.ServingChoice) -> ServingChoice:
    """A ServingChoice; a threshold outside [0, 1] or a kept set that is not a non-empty part of
    its observed set is a ProtocolError."""
    threshold = message.threshold if message.has_threshold else None
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ProtocolError(f"ServingChoice: threshold {threshold} outside [0, 1]")
    subsets: dict[tuple[int, ...], tuple[int, ...]] = {}
    for s in message.subsets:
        observed, kept = tuple(sorted(s.observed)), tuple(sorted(s.kept))
        if not kept or not set(kept) <= set(observed):
            raise ProtocolError(f"ServingChoice: kept {list(kept)} of observed {list(observed)}")
        subsets[observed] = kept
    heads: dict[tuple[int, ...], str] = {}
    for h in message.heads:
        if h.head not in (*EXTRA_HEADS, BLEND):
            raise ProtocolError(f"ServingChoice: unknown head {h.head[:64]!r}")
        heads[tuple(sorted(h.observed))] = h.head
    return ServingChoice(threshold, subsets, heads)
