"""Online serving's messages (proto/vfl_wire/v1/serving.proto) <-> vfl_core.serving's types.

Every decoder checks what a hostile peer could send wrong (key sizes, counts, shapes, NaN) and
raises ProtocolError naming it; the servicers map that to INVALID_ARGUMENT."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.serving.gateway import OnlinePrediction
from vfl_core.serving.peers import PeerAnswer
from vfl_wire.tensors import decode_array, encode_array
from vfl_wire.v1 import serving_pb2

KEY_BYTES = 32  # HMAC-SHA256
MAX_KEYS = 4096  # keys in one ServeEmbed (a gateway's merged batch)
MAX_INLINE_CELLS = 1024
# The most a ServeEmbed reply may carry besides its embeddings: the held flags, tags, lengths,
# the tensor's dtype and shape.
EMBED_REPLY_FRAMING = 64 * 1024


# ---------------------------------------------------------------- ServeEmbed
def embed_request_to_proto(keys: Sequence[bytes]) -> serving_pb2.ServeEmbedRequest:
    return serving_pb2.ServeEmbedRequest(keys=list(keys))


def embed_request_from_proto(request: serving_pb2.ServeEmbedRequest) -> list[bytes]:
    keys = list(request.keys)
    if not keys or len(keys) > MAX_KEYS:
        raise ProtocolError(f"ServeEmbed: {len(keys)} keys; give 1 to {MAX_KEYS}")
    if any(len(k) != KEY_BYTES for k in keys):
        raise ProtocolError(f"ServeEmbed: every key is a {KEY_BYTES}-byte keyed ID hash")
    return keys


def embed_reply_to_proto(block: int, answer: PeerAnswer) -> serving_pb2.ServeEmbedReply:
    return serving_pb2.ServeEmbedReply(
        block=block,
        held=answer.held.astype(np.uint8).tobytes(),
        embeddings=encode_array(answer.embeddings.astype(np.float32), what="embeddings"),
    )


def embed_reply_bytes(embed_dim: int) -> int:
    """The largest ServeEmbed reply an honest party sends: MAX_KEYS float32 rows of `embed_dim`
    (the gateway's channel refuses a larger one from its length prefix, unread)."""
    return MAX_KEYS * (embed_dim * 4 + 1) + EMBED_REPLY_FRAMING


def embed_reply_from_proto(
    reply: serving_pb2.ServeEmbedReply, keys: int, block: int, width: int | None = None
) -> PeerAnswer:
    """A party's answer for `keys` keys, checked: one flag per key, one row per held key, each
    `width` wide (the gateway's embed_dim: a row of another width once failed every request
    the gateway answered with it, at its head)."""
    if reply.block != block:
        raise ProtocolError(f"ServeEmbed: block {reply.block} answered for block {block}")
    held = np.frombuffer(reply.held, dtype=np.uint8)
    if len(held) != keys or held.max(initial=0) > 1:
        raise ProtocolError(f"ServeEmbed: {len(held)} held flags for {keys} keys")
    embeddings = decode_array(
        reply.embeddings,
        what="embeddings",
        expect_dtype="float32",
        expect_shape=(int(held.sum()), width),
    )
    return PeerAnswer(held.astype(bool), embeddings)


# ---------------------------------------------------------------- ServePredict
def predict_request_to_proto(
    ids: Sequence[str],
    deadline_s: float | None = None,
    features: Mapping[str, Mapping[str, object]] | None = None,
) -> serving_pb2.ServePredictRequest:
    rows = {
        i: serving_pb2.InlineRow(cells={k: str(v) for k, v in cells.items()})
        for i, cells in (features or {}).items()
    }
    ms = 0.0 if deadline_s is None else deadline_s * 1000
    return serving_pb2.ServePredictRequest(ids=list(ids), deadline_ms=ms, features=rows)


def predict_request_from_proto(
    request: serving_pb2.ServePredictRequest,
) -> tuple[list[str], float | None, dict[str, dict[str, str]]]:
    """(ids, deadline in seconds or None for the default, inline features)."""
    features = {i: dict(row.cells) for i, row in request.features.items()}
    if sum(len(c) for c in features.values()) > MAX_INLINE_CELLS:
        raise ProtocolError(f"ServePredict: more than {MAX_INLINE_CELLS} inline feature cells")
    deadline = request.deadline_ms / 1000 if request.deadline_ms else None
    return list(request.ids), deadline, features


def predictions_to_proto(answers: Sequence[OnlinePrediction]) -> serving_pb2.ServePredictReply:
    return serving_pb2.ServePredictReply(predictions=[_prediction(a) for a in answers])


def _prediction(a: OnlinePrediction) -> serving_pb2.OnlinePrediction:
    return serving_pb2.OnlinePrediction(
        id=a.id,
        parties=list(a.used),
        missing=a.missing,
        probabilities=list(a.probabilities or ()),
        predicted_class=-1 if a.predicted_class is None else a.predicted_class,
        label=a.label or "",
        value=0.0 if a.value is None else a.value,
        has_value=a.value is not None,
        error=a.error or "",
    )


def predictions_from_proto(reply: serving_pb2.ServePredictReply) -> list[OnlinePrediction]:
    return [
        OnlinePrediction(
            id=p.id,
            used=tuple(p.parties),
            missing=dict(p.missing),
            probabilities=tuple(p.probabilities) or None,
            predicted_class=None if p.predicted_class < 0 else p.predicted_class,
            label=p.label or None,
            value=p.value if p.has_value else None,
            error=p.error or None,
        )
        for p in reply.predictions
    ]
