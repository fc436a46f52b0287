"""The one place where protobuf messages and `vfl_core.protocol` types meet.

`*_to_proto` functions build messages from trusted local values. `*_from_proto` functions treat the
message as untrusted: they check dtypes, ranks, shapes, indices and finiteness and raise
`ProtocolError` (one readable line naming the field) before anything reaches vfl_core.

Wire dtypes: rows and predicted classes int64 (B,); embeddings and gradients (B, d) in the run's
wire dtype (float32 unless TrainConfig.wire_dtype says float16, bfloat16 or int8; decoded to
float32 here, vfl_core.model.quantize); probabilities float32 (B, C); class weights float32 (N,);
scores (positive-class probabilities or predicted values) float32 (B,); confusion counts int64
(C, C); AUC histograms int64 (2, bins); regression sums float64 (5,).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np
from google.protobuf.message import Message

from vfl_core.data.learning_task import CLASSIFICATION, TASKS
from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.inference.metrics import ROW_METRICS, MetricRow
from vfl_core.inference.scoring import SUMS
from vfl_core.model.quantize import LOSSLESS
from vfl_core.protocol import (
    PROTOCOL_VERSION,
    SPLITS,
    BackwardCall,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    PsiCall,
    Registration,
    SamplePrediction,
    ScoreCall,
    ScoreResult,
    TrainCall,
    TrainResult,
)
from vfl_core.training.psi import POINT_BYTES, check_session, pack, unpack
from vfl_wire.tensors import (
    Shape,
    decode_array,
    decode_float,
    encode_array,
    encode_float,
    encode_index,
)
from vfl_wire.v1 import vfl_pb2

Matrix = tuple[int | None, int | None]  # expected (rows, columns); None = any
ANY2: Matrix = (None, None)
K = TypeVar("K", int, str)  # map keys: block index or predictor name

# ---------------------------------------------------------------------------------------------
# Header and small fields
# ---------------------------------------------------------------------------------------------

# Names a peer chooses (party id, data set, run id, address) are at most this long: they end up in
# registries, logs and error replies, which an attacker must not be able to fill.
MAX_NAME_CHARS = 128
_QUOTED_CHARS = 64  # how much of a refused string an error message quotes
MAX_SPLITS = 8  # split names in a PartyInfo (train and test today)


def clip(text: str, limit: int = _QUOTED_CHARS) -> str:
    """`text` quoted for an error message or a log line, cut to `limit` characters."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


def check_name(text: str, what: str) -> str:
    """A peer-chosen name: not empty, at most MAX_NAME_CHARS, no control characters."""
    if not text:
        raise ProtocolError(f"{what}: empty")
    if len(text) > MAX_NAME_CHARS or not text.isprintable():
        raise ProtocolError(f"{what} {clip(text)}: at most {MAX_NAME_CHARS} printable characters")
    return text


def header(run_id: str, party_id: str) -> vfl_pb2.Header:
    """The header of a request for (coordinator -> party) or from (party -> coordinator) a party."""
    return vfl_pb2.Header(protocol_version=PROTOCOL_VERSION, run_id=run_id, party_id=party_id)


def check_header(h: vfl_pb2.Header, *, run_id: str | None, party_id: str | None) -> None:
    """Reject a header from another protocol version, run or party (None = do not check)."""
    if h.protocol_version != PROTOCOL_VERSION:
        hint = " (missing header?)" if h.protocol_version == 0 else ""
        raise ProtocolError(
            f"header: protocol version {h.protocol_version}{hint} does not match expected "
            f"{PROTOCOL_VERSION}"
        )
    if run_id is not None and h.run_id != run_id:
        raise ProtocolError(
            f"header: run id {clip(h.run_id)} does not match expected {clip(run_id)}"
        )
    if party_id is not None and h.party_id != party_id:
        raise ProtocolError(
            f"header: party id {clip(h.party_id)} does not match expected {clip(party_id)}"
        )


def check_split(split: str, *, what: str = "split") -> str:
    if split not in SPLITS:
        raise ProtocolError(
            f"{what}: unknown split {clip(split)}; expected one of {', '.join(SPLITS)}"
        )
    return split


def check_round(received: int, expected: int, *, what: str = "reply") -> None:
    """A reply must echo the id of its request; a late reply of an earlier round is stale."""
    if received != expected:
        raise StaleRoundError(f"{what}: round id {received} does not match expected {expected}")


# ---------------------------------------------------------------------------------------------
# Typed array decoders
# ---------------------------------------------------------------------------------------------


def _index_vector(t: vfl_pb2.Tensor, what: str, length: int | None = None) -> np.ndarray:
    """(B,) int64 of non-negative indices (rows or classes), sent as int64 or (encode_index) int32;
    negative ones would wrap in numpy."""
    expect = "int32" if t.dtype == "int32" else "int64"
    a = decode_array(t, what=what, expect_dtype=expect, expect_shape=(length,)).astype(np.int64)
    if a.size and a.min() < 0:
        pos = int(np.argmax(a < 0))
        raise ProtocolError(f"{what}: negative value {int(a[pos])} at position {pos}")
    return a


def _matrix(t: vfl_pb2.Tensor, what: str, expect: Shape = ANY2, wire: str = LOSSLESS) -> np.ndarray:
    """(B, d) float32, sent as float32 or (embeddings, gradients) in the run's wire dtype."""
    return decode_float(t, wire, what=what, expect_shape=expect)


def _block_map(
    m: Mapping[int, vfl_pb2.Tensor], what: str, expect: Matrix = ANY2, wire: str = LOSSLESS
) -> dict[int, np.ndarray]:
    """block -> (B, d) float32; every entry must have the same shape (one batch, one d)."""
    out: dict[int, np.ndarray] = {}
    shape: Shape = expect
    for block in sorted(m):
        name = f"{what} for block {block}"
        if block < 0:
            raise ProtocolError(f"{name}: negative block index")
        out[block] = _matrix(m[block], name, shape, wire)
        shape = out[block].shape
    return out


def _blocks(values: Sequence[int], what: str) -> tuple[int, ...]:
    """Distinct, non-negative, sorted block indices."""
    blocks = tuple(values)
    if any(b < 0 for b in blocks) or list(blocks) != sorted(set(blocks)):
        raise ProtocolError(f"{what}: {list(blocks)} is not a sorted list of distinct blocks")
    return blocks


def _encode_map(arrays: Mapping[K, np.ndarray], what: str) -> dict[K, vfl_pb2.Tensor]:
    return {k: encode_array(v, what=f"{what} {k}") for k, v in arrays.items()}


def _encode_floats(
    arrays: Mapping[int, np.ndarray], what: str, wire: str
) -> dict[int, vfl_pb2.Tensor]:
    """block -> embedding or gradient in the wire dtype."""
    return {k: encode_float(v, wire, what=f"{what} {k}") for k, v in arrays.items()}


def _require(msg: Message, field: str, what: str) -> None:
    if not msg.HasField(field):
        raise ProtocolError(f"{what}: missing")


# ---------------------------------------------------------------------------------------------
# Party service
# ---------------------------------------------------------------------------------------------


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
    _require(reply, "weights", "class weights")
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
    )


def embed_call_from_proto(req: vfl_pb2.EmbedRequest) -> EmbedCall:
    return EmbedCall(
        round_id=req.round_id,
        split=check_split(req.split, what="embed split"),
        rows=_index_vector(req.rows, "embed rows"),
        digest=req.digest,
        train=req.train,
        blocks=_blocks(req.blocks, "embed blocks"),
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
    return _matrix(reply.embedding, "embedding", expect_shape, wire)


def fuse_call_to_proto(
    call: FuseCall, h: vfl_pb2.Header | None, wire: str = LOSSLESS
) -> vfl_pb2.FuseRequest:
    req = vfl_pb2.FuseRequest(
        header=h,
        round_id=call.round_id,
        epoch=call.epoch,
        embeddings=_encode_floats(call.embeddings, "embedding for block", wire),
        blocks=call.blocks,
        label_blocks=call.label_blocks,
    )
    if call.rows is not None:
        req.rows.CopyFrom(encode_index(call.rows, what="fuse rows"))
        req.digest = call.digest
    return req


def fuse_call_from_proto(
    req: vfl_pb2.FuseRequest, *, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> FuseCall:
    rows = _index_vector(req.rows, "fuse rows") if req.HasField("rows") else None
    if rows is None and req.digest:
        raise ProtocolError("fuse digest: present without rows")
    return FuseCall(
        round_id=req.round_id,
        epoch=req.epoch,
        embeddings=_block_map(req.embeddings, "embedding", expect_shape, wire),
        blocks=_blocks(req.blocks, "fuse blocks"),
        label_blocks=_blocks(req.label_blocks, "fuse label blocks"),
        rows=rows,
        digest=req.digest,
    )


def fuse_result_to_proto(
    result: FuseResult, round_id: int, wire: str = LOSSLESS
) -> vfl_pb2.FuseReply:
    return vfl_pb2.FuseReply(
        round_id=round_id,
        loss=result.loss,
        grads=_encode_floats(result.grads, "gradient for block", wire),
    )


def fuse_result_from_proto(
    reply: vfl_pb2.FuseReply, *, round_id: int, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> FuseResult:
    check_round(reply.round_id, round_id, what="fuse reply")
    if not math.isfinite(reply.loss):
        raise ProtocolError(f"fuse loss: non-finite value {reply.loss}")
    grads = _block_map(reply.grads, "gradient", expect_shape, wire)
    return FuseResult(loss=reply.loss, grads=grads)


def backward_call_to_proto(
    call: BackwardCall, h: vfl_pb2.Header | None, wire: str = LOSSLESS
) -> vfl_pb2.BackwardRequest:
    req = vfl_pb2.BackwardRequest(header=h, round_id=call.round_id, epoch=call.epoch)
    if call.grad is not None:
        req.has_grad = True
        req.grad.CopyFrom(encode_float(call.grad, wire, what="backward gradient"))
    return req


def backward_call_from_proto(
    req: vfl_pb2.BackwardRequest, *, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> BackwardCall:
    grad = None
    if req.has_grad:
        _require(req, "grad", "backward gradient")
        grad = _matrix(req.grad, "backward gradient", expect_shape, wire)
    elif req.HasField("grad"):
        raise ProtocolError("backward gradient: present but has_grad is false")
    return BackwardCall(round_id=req.round_id, epoch=req.epoch, grad=grad)


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
        shape = (len(c.rows), None)
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
        embeddings=_encode_floats(call.embeddings, "embedding for block", wire),
        blocks=call.blocks,
        label_blocks=call.label_blocks,
    )


def predict_call_from_proto(
    req: vfl_pb2.PredictRequest, *, expect_shape: Matrix = ANY2, wire: str = LOSSLESS
) -> PredictCall:
    return PredictCall(
        request_id=req.request_id,
        embeddings=_block_map(req.embeddings, "embedding", expect_shape, wire),
        blocks=_blocks(req.blocks, "predict blocks"),
        label_blocks=_blocks(req.label_blocks, "predict label blocks"),
    )


def probabilities_to_proto(request_id: int, probabilities: np.ndarray) -> vfl_pb2.PredictReply:
    return vfl_pb2.PredictReply(
        request_id=request_id, probabilities=encode_array(probabilities, what="probabilities")
    )


def probabilities_from_proto(
    reply: vfl_pb2.PredictReply, *, request_id: int, expect_shape: Matrix = ANY2
) -> np.ndarray:
    """(B, C) float32 class probabilities of request `request_id`."""
    check_round(reply.request_id, request_id, what="predict reply")
    return _matrix(reply.probabilities, "probabilities", expect_shape)


def score_call_to_proto(call: ScoreCall, h: vfl_pb2.Header) -> vfl_pb2.ScoreRequest:
    return vfl_pb2.ScoreRequest(
        header=h,
        split=call.split,
        rows=encode_index(call.rows, what="score rows"),
        digest=call.digest,
        predictions=_encode_map(call.predictions, "predictions of"),
        scores=_encode_map(call.scores, "scores of"),
    )


def score_call_from_proto(req: vfl_pb2.ScoreRequest) -> ScoreCall:
    rows = _index_vector(req.rows, "score rows")
    predictions = {
        name: _index_vector(req.predictions[name], f"predictions of {name}", len(rows))
        for name in sorted(req.predictions)
    }
    scores = {
        name: decode_array(
            req.scores[name],
            what=f"scores of {name}",
            expect_dtype="float32",
            expect_shape=(len(rows),),
        )
        for name in sorted(req.scores)
    }
    return ScoreCall(
        split=check_split(req.split, what="score split"),
        rows=rows,
        digest=req.digest,
        predictions=predictions,
        scores=scores,
    )


def score_reply_to_proto(result: ScoreResult) -> vfl_pb2.ScoreReply:
    return vfl_pb2.ScoreReply(
        confusion=_encode_map(result.confusion, "confusion of"),
        histograms=_encode_map(result.histograms, "histogram of"),
        sums=_encode_map(result.sums, "sums of"),
    )


def score_reply_from_proto(reply: vfl_pb2.ScoreReply) -> ScoreResult:
    """Per predictor name: (C, C) int64 confusion counts [true, predicted], (2, bins) int64 AUC
    histograms, (5,) float64 regression sums; counts and sums of squares never negative."""
    confusion = {
        name: _counts(reply.confusion[name], f"confusion of {name}", square=True)
        for name in sorted(reply.confusion)
    }
    histograms = {
        name: _counts(reply.histograms[name], f"histogram of {name}", square=False)
        for name in sorted(reply.histograms)
    }
    sums = {name: _sums(reply.sums[name], f"sums of {name}") for name in sorted(reply.sums)}
    return ScoreResult(confusion=confusion, histograms=histograms, sums=sums)


def _counts(t: vfl_pb2.Tensor, what: str, *, square: bool) -> np.ndarray:
    counts = decode_array(t, what=what, expect_dtype="int64", expect_shape=(None, None))
    if square and counts.shape[0] != counts.shape[1]:
        raise ProtocolError(f"{what}: shape {counts.shape} is not square")
    if not square and (counts.shape[0] != 2 or counts.shape[1] < 1):
        raise ProtocolError(f"{what}: shape {counts.shape} is not (2, bins)")
    if counts.size and counts.min() < 0:
        raise ProtocolError(f"{what}: negative count")
    return counts


def _sums(t: vfl_pb2.Tensor, what: str) -> np.ndarray:
    sums = decode_array(t, what=what, expect_dtype="float64", expect_shape=(len(SUMS),))
    # squared error, absolute error, count and squared target are sums of non-negative terms
    if (sums[[0, 1, 2, 4]] < 0).any():
        raise ProtocolError(f"{what}: negative sum of non-negative terms")
    return sums


# PSI alignment: points travel as one bytes field, 32 bytes each (vfl_core.training.psi).
MAX_PSI_POINTS = 2**22  # 128 MiB of points: the message cap (vfl_wire.channels) bounds it anyway


def _points(blob: bytes, what: str, count: int | None = None) -> list[bytes]:
    if len(blob) > MAX_PSI_POINTS * POINT_BYTES:
        raise ProtocolError(f"{what}: more than {MAX_PSI_POINTS} points")
    return unpack(blob, what, count)


def psi_blind_request(split: str, session: str, h: vfl_pb2.Header) -> vfl_pb2.PsiBlindRequest:
    return vfl_pb2.PsiBlindRequest(header=h, split=split, session=session)


def psi_blind_from_proto(req: vfl_pb2.PsiBlindRequest) -> tuple[str, str]:
    """(split, session)."""
    return check_split(req.split, what="psi split"), check_session(req.session)


def psi_apply_to_proto(call: PsiCall, h: vfl_pb2.Header) -> vfl_pb2.PsiApplyRequest:
    return vfl_pb2.PsiApplyRequest(
        header=h, split=call.split, session=call.session, points=pack(call.points)
    )


def psi_apply_from_proto(req: vfl_pb2.PsiApplyRequest) -> PsiCall:
    return PsiCall(
        split=check_split(req.split, what="psi split"),
        session=check_session(req.session),
        points=_points(req.points, "psi apply points"),
    )


def psi_keys_to_proto(call: PsiCall, h: vfl_pb2.Header) -> vfl_pb2.PsiKeysRequest:
    return vfl_pb2.PsiKeysRequest(
        header=h, split=call.split, session=call.session, keys=pack(call.points)
    )


def psi_keys_from_proto(req: vfl_pb2.PsiKeysRequest) -> PsiCall:
    return PsiCall(
        split=check_split(req.split, what="psi split"),
        session=check_session(req.session),
        points=_points(req.keys, "psi keys"),
    )


def psi_points_to_proto(points: list[bytes]) -> vfl_pb2.PsiPoints:
    return vfl_pb2.PsiPoints(points=pack(points))


def psi_points_from_proto(reply: vfl_pb2.PsiPoints, count: int | None = None) -> list[bytes]:
    """A party's answer: `count` points if the request named how many."""
    return _points(reply.points, "psi points", count)


# ---------------------------------------------------------------------------------------------
# Coordinator service
# ---------------------------------------------------------------------------------------------


def party_info_to_proto(info: PartyInfo) -> vfl_pb2.PartyInfoMsg:
    return vfl_pb2.PartyInfoMsg(
        party_id=info.party_id,
        block=info.block,
        num_blocks=info.num_blocks,
        dataset=info.dataset,
        feature_shape=info.feature_shape,
        num_classes=info.num_classes,
        has_labels=info.has_labels,
        samples=info.samples,
        protocol_version=info.protocol_version,
        task=info.task,
        label_only=info.label_only,
    )


def party_info_from_proto(msg: vfl_pb2.PartyInfoMsg) -> PartyInfo:
    """Check the self-description for internal consistency; the coordinator checks the rest."""
    if not msg.party_id:
        raise ProtocolError("party info: empty party id")
    check_name(msg.party_id, "party info: party id")
    check_name(msg.dataset or "-", f"party info {msg.party_id!r}: data set")
    if msg.num_blocks < 1 or not 0 <= msg.block < msg.num_blocks:
        raise ProtocolError(
            f"party info {msg.party_id!r}: block {msg.block} outside 0..{msg.num_blocks - 1}"
        )
    if not msg.feature_shape or min(msg.feature_shape) < 1:
        raise ProtocolError(
            f"party info {msg.party_id!r}: invalid feature shape {tuple(msg.feature_shape)}"
        )
    if msg.num_classes < 0:
        raise ProtocolError(f"party info {msg.party_id!r}: negative number of classes")
    task = msg.task or CLASSIFICATION  # parties of before tasks existed send none
    if task not in TASKS:
        raise ProtocolError(f"party info {msg.party_id!r}: unknown task {clip(msg.task)}")
    if len({*msg.samples, *msg.label_only}) > MAX_SPLITS:
        raise ProtocolError(f"party info {msg.party_id!r}: more than {MAX_SPLITS} splits")
    for split in {*msg.samples, *msg.label_only}:
        check_name(split, f"party info {msg.party_id!r}: split name")
    if any(n < 0 for n in msg.samples.values()):
        raise ProtocolError(f"party info {msg.party_id!r}: negative sample count")
    for split, n in msg.label_only.items():
        if not 0 <= n <= msg.samples.get(split, 0) or (n and not msg.has_labels):
            raise ProtocolError(
                f"party info {msg.party_id!r}: {n} label-only rows of split {split!r} do not "
                f"fit its {msg.samples.get(split, 0)} rows (or the party holds no labels)"
            )
    return PartyInfo(
        party_id=msg.party_id,
        block=msg.block,
        num_blocks=msg.num_blocks,
        dataset=msg.dataset,
        feature_shape=tuple(msg.feature_shape),
        num_classes=msg.num_classes,
        has_labels=msg.has_labels,
        samples=dict(sorted(msg.samples.items())),
        protocol_version=msg.protocol_version,
        task=task,
        label_only={s: n for s, n in sorted(msg.label_only.items()) if n},
    )


def register_request_to_proto(
    info: PartyInfo,
    address: str,
    h: vfl_pb2.Header,
    session: str = "",
    lease: str = "",
    last_round: int | None = None,
) -> vfl_pb2.RegisterRequest:
    request = vfl_pb2.RegisterRequest(
        header=h, info=party_info_to_proto(info), address=address, session=session, lease=lease
    )
    if last_round is not None:
        request.last_round = last_round
    return request


def register_request_from_proto(req: vfl_pb2.RegisterRequest) -> tuple[PartyInfo, str]:
    """(the party's info, the address where it serves `Party`)."""
    _require(req, "info", "register info")
    check_name(req.address, "register address")
    if len(req.session) > MAX_NAME_CHARS:
        raise ProtocolError(f"register session: {len(req.session)} characters, at most 128")
    return party_info_from_proto(req.info), req.address


def register_session_from_proto(req: vfl_pb2.RegisterRequest) -> str:
    """The coordinator session the registering party's state is synchronised with ("" none)."""
    return req.session


def register_last_round_from_proto(req: vfl_pb2.RegisterRequest) -> int | None:
    """The last training round the registering party's weights hold (-1: initial weights), or
    None if it does not say."""
    if not req.HasField("last_round"):
        return None
    if req.last_round < -1:
        raise ProtocolError(f"register last_round: {req.last_round}, expected -1 or more")
    return req.last_round


def register_lease_from_proto(req: vfl_pb2.RegisterRequest) -> str:
    """The lease the registering process holds ("" for a new process)."""
    if len(req.lease) > MAX_NAME_CHARS:
        raise ProtocolError(f"register lease: {len(req.lease)} characters, at most 128")
    return req.lease


def registration_to_proto(a: Registration) -> vfl_pb2.RegisterReply:
    reply = vfl_pb2.RegisterReply(
        run_id=a.run_id,
        config_json=a.config_json,
        message=a.message,
        session=a.session,
        lease=a.lease,
    )
    if a.resume_round >= 0:
        reply.resume_round = a.resume_round
    return reply


def registration_from_proto(reply: vfl_pb2.RegisterReply) -> Registration:
    if not reply.run_id or not reply.config_json:
        raise ProtocolError("register reply: missing run id or config")
    check_name(reply.run_id, "register reply: run id")
    resume = reply.resume_round if reply.HasField("resume_round") else -1
    if resume < -1:
        raise ProtocolError(f"register reply: negative resume round {resume}")
    if len(reply.lease) > MAX_NAME_CHARS:
        raise ProtocolError(f"register reply: lease of {len(reply.lease)} characters")
    return Registration(
        reply.run_id, reply.config_json, reply.message, reply.session, resume, reply.lease
    )


# What a Checkpoint call asks: write a checkpoint, or keep / restore an in-memory copy of the
# state (early stopping, vfl_core.training.early_stop).
_SNAPSHOTS = {
    "save": vfl_pb2.CheckpointRequest.SNAPSHOT_NONE,
    "keep": vfl_pb2.CheckpointRequest.SNAPSHOT_KEEP,
    "restore": vfl_pb2.CheckpointRequest.SNAPSHOT_RESTORE,
}


def checkpoint_call_to_proto(
    round_id: int, h: vfl_pb2.Header, kind: str = "save"
) -> vfl_pb2.CheckpointRequest:
    return vfl_pb2.CheckpointRequest(header=h, round_id=round_id, snapshot=_SNAPSHOTS[kind])


def checkpoint_call_from_proto(req: vfl_pb2.CheckpointRequest) -> int:
    if req.round_id < 0:
        raise ProtocolError(f"checkpoint round: negative value {req.round_id}")
    return req.round_id


def checkpoint_kind_from_proto(req: vfl_pb2.CheckpointRequest) -> str:
    """save, keep or restore; an unknown value (proto3 enums are open) is refused."""
    for kind, value in _SNAPSHOTS.items():
        if req.snapshot == value:
            return kind
    raise ProtocolError(f"checkpoint snapshot: unknown value {req.snapshot}")


def checkpoint_reply_to_proto(round_id: int, saved: bool) -> vfl_pb2.CheckpointReply:
    return vfl_pb2.CheckpointReply(round_id=round_id, saved=saved)


def checkpoint_reply_from_proto(reply: vfl_pb2.CheckpointReply, *, round_id: int) -> bool:
    """Whether the party saved its checkpoint of `round_id`."""
    check_round(reply.round_id, round_id, what="checkpoint reply")
    return reply.saved


def eval_report_to_proto(
    rows: Sequence[MetricRow],
    unscored: int,
    live_blocks: Sequence[int],
    seconds: float,
    answers: Mapping[int, Sequence[int]] | None = None,  # block -> (batches, answered)
) -> vfl_pb2.EvaluateReply:
    reply = vfl_pb2.EvaluateReply(unscored=unscored, live_blocks=live_blocks, seconds=seconds)
    for block, (batches, answered) in sorted((answers or {}).items()):
        reply.answers.add(block=block, batches=batches, answered=answered)
    for row in rows:
        # only the metrics of the task (the others are None and stay unset)
        metrics = {name: getattr(row, name) for name in ROW_METRICS}
        reply.rows.add(
            observed=row.observed,
            samples=row.samples,
            **{name: value for name, value in metrics.items() if value is not None},
        )
    return reply


def eval_answers_from_proto(reply: vfl_pb2.EvaluateReply) -> dict[int, tuple[int, int]]:
    """block -> (batches that held its samples, batches it answered)."""
    return {a.block: (a.batches, a.answered) for a in reply.answers}


def eval_rows_from_proto(reply: vfl_pb2.EvaluateReply) -> list[MetricRow]:
    return [
        MetricRow(
            observed=r.observed,
            samples=r.samples,
            **{name: getattr(r, name) for name in ROW_METRICS if r.HasField(name)},
        )
        for r in reply.rows
    ]


def prediction_to_proto(p: SamplePrediction) -> vfl_pb2.PredictionRow:
    row = vfl_pb2.PredictionRow(
        id_hash=p.id_hash,
        observed_blocks=p.observed,
        predicted_class=p.predicted_class,
        party_rows=p.rows,
    )
    for block, probs in p.party_probs.items():
        row.party_probabilities[block].CopyFrom(encode_array(probs, what="probabilities"))
    if p.federation is not None:
        row.federation_probabilities.CopyFrom(encode_array(p.federation, what="probabilities"))
    if p.predicted_value is not None:
        row.predicted_value = p.predicted_value
    return row


def prediction_from_proto(row: vfl_pb2.PredictionRow) -> SamplePrediction:
    federation = None
    if row.HasField("federation_probabilities"):
        federation = decode_array(
            row.federation_probabilities, what="federation probabilities", expect_dtype="float32"
        )
    return SamplePrediction(
        id_hash=row.id_hash,
        observed=tuple(row.observed_blocks),
        party_probs={
            b: decode_array(row.party_probabilities[b], what=f"probabilities of block {b}")
            for b in sorted(row.party_probabilities)
        },
        federation=federation,
        predicted_class=row.predicted_class,
        predicted_value=row.predicted_value if row.HasField("predicted_value") else None,
        rows=_party_rows(row.party_rows),
    )


def _party_rows(rows: Mapping[int, int]) -> dict[int, int]:
    if any(b < 0 or r < 0 for b, r in rows.items()):
        raise ProtocolError("prediction row: negative block or row index")
    return dict(sorted(rows.items()))
