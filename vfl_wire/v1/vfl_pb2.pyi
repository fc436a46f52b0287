from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data", "scales", "sealed")
    class SealedEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: bytes
        def __init__(self, key: _Optional[int] = ..., value: _Optional[bytes] = ...) -> None: ...
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SCALES_FIELD_NUMBER: _ClassVar[int]
    SEALED_FIELD_NUMBER: _ClassVar[int]
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    scales: bytes
    sealed: _containers.ScalarMap[int, bytes]
    def __init__(self, dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., scales: _Optional[bytes] = ..., sealed: _Optional[_Mapping[int, bytes]] = ...) -> None: ...

class RelayKey(_message.Message):
    __slots__ = ("party_id", "block", "public_key", "certificate", "signature")
    PARTY_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    CERTIFICATE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    party_id: str
    block: int
    public_key: bytes
    certificate: bytes
    signature: bytes
    def __init__(self, party_id: _Optional[str] = ..., block: _Optional[int] = ..., public_key: _Optional[bytes] = ..., certificate: _Optional[bytes] = ..., signature: _Optional[bytes] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("protocol_version", "run_id", "party_id", "relay_keys")
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    PARTY_ID_FIELD_NUMBER: _ClassVar[int]
    RELAY_KEYS_FIELD_NUMBER: _ClassVar[int]
    protocol_version: int
    run_id: str
    party_id: str
    relay_keys: _containers.RepeatedCompositeFieldContainer[RelayKey]
    def __init__(self, protocol_version: _Optional[int] = ..., run_id: _Optional[str] = ..., party_id: _Optional[str] = ..., relay_keys: _Optional[_Iterable[_Union[RelayKey, _Mapping]]] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Peer(_message.Message):
    __slots__ = ("party_id", "address")
    PARTY_ID_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    party_id: str
    address: str
    def __init__(self, party_id: _Optional[str] = ..., address: _Optional[str] = ...) -> None: ...

class RoundRequest(_message.Message):
    __slots__ = ("header", "round_id", "epoch", "embed", "send_to", "fuse", "expect", "grads_from", "holders", "after", "embed_wait_s", "grad_wait_s", "peers", "evaluation", "probe", "steps_before", "steps_after", "defer_step", "after_validation", "hold_heads")
    class PeersEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Peer
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Peer, _Mapping]] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EMBED_FIELD_NUMBER: _ClassVar[int]
    SEND_TO_FIELD_NUMBER: _ClassVar[int]
    FUSE_FIELD_NUMBER: _ClassVar[int]
    EXPECT_FIELD_NUMBER: _ClassVar[int]
    GRADS_FROM_FIELD_NUMBER: _ClassVar[int]
    HOLDERS_FIELD_NUMBER: _ClassVar[int]
    AFTER_FIELD_NUMBER: _ClassVar[int]
    EMBED_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    GRAD_WAIT_S_FIELD_NUMBER: _ClassVar[int]
    PEERS_FIELD_NUMBER: _ClassVar[int]
    EVALUATION_FIELD_NUMBER: _ClassVar[int]
    PROBE_FIELD_NUMBER: _ClassVar[int]
    STEPS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    STEPS_AFTER_FIELD_NUMBER: _ClassVar[int]
    DEFER_STEP_FIELD_NUMBER: _ClassVar[int]
    AFTER_VALIDATION_FIELD_NUMBER: _ClassVar[int]
    HOLD_HEADS_FIELD_NUMBER: _ClassVar[int]
    header: Header
    round_id: int
    epoch: int
    embed: EmbedRequest
    send_to: _containers.RepeatedScalarFieldContainer[int]
    fuse: FuseRequest
    expect: _containers.RepeatedScalarFieldContainer[int]
    grads_from: _containers.RepeatedScalarFieldContainer[int]
    holders: _containers.RepeatedScalarFieldContainer[int]
    after: int
    embed_wait_s: float
    grad_wait_s: float
    peers: _containers.MessageMap[int, Peer]
    evaluation: Evaluation
    probe: bool
    steps_before: _containers.RepeatedCompositeFieldContainer[DeferredStep]
    steps_after: _containers.RepeatedCompositeFieldContainer[DeferredStep]
    defer_step: bool
    after_validation: bool
    hold_heads: bool
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., round_id: _Optional[int] = ..., epoch: _Optional[int] = ..., embed: _Optional[_Union[EmbedRequest, _Mapping]] = ..., send_to: _Optional[_Iterable[int]] = ..., fuse: _Optional[_Union[FuseRequest, _Mapping]] = ..., expect: _Optional[_Iterable[int]] = ..., grads_from: _Optional[_Iterable[int]] = ..., holders: _Optional[_Iterable[int]] = ..., after: _Optional[int] = ..., embed_wait_s: _Optional[float] = ..., grad_wait_s: _Optional[float] = ..., peers: _Optional[_Mapping[int, Peer]] = ..., evaluation: _Optional[_Union[Evaluation, _Mapping]] = ..., probe: _Optional[bool] = ..., steps_before: _Optional[_Iterable[_Union[DeferredStep, _Mapping]]] = ..., steps_after: _Optional[_Iterable[_Union[DeferredStep, _Mapping]]] = ..., defer_step: _Optional[bool] = ..., after_validation: _Optional[bool] = ..., hold_heads: _Optional[bool] = ...) -> None: ...

class DeferredStep(_message.Message):
    __slots__ = ("round_id", "grads_from", "epoch")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    GRADS_FROM_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    round_id: int
    grads_from: _containers.RepeatedScalarFieldContainer[int]
    epoch: int
    def __init__(self, round_id: _Optional[int] = ..., grads_from: _Optional[_Iterable[int]] = ..., epoch: _Optional[int] = ...) -> None: ...

class Evaluation(_message.Message):
    __slots__ = ("split", "scorer", "thresholded", "threshold", "batches", "hold", "keep", "keep_round", "federation_scores")
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SCORER_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDED_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    KEEP_ROUND_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_SCORES_FIELD_NUMBER: _ClassVar[int]
    split: str
    scorer: int
    thresholded: bool
    threshold: float
    batches: _containers.RepeatedCompositeFieldContainer[EvalBatch]
    hold: bool
    keep: bool
    keep_round: int
    federation_scores: bool
    def __init__(self, split: _Optional[str] = ..., scorer: _Optional[int] = ..., thresholded: _Optional[bool] = ..., threshold: _Optional[float] = ..., batches: _Optional[_Iterable[_Union[EvalBatch, _Mapping]]] = ..., hold: _Optional[bool] = ..., keep: _Optional[bool] = ..., keep_round: _Optional[int] = ..., federation_scores: _Optional[bool] = ...) -> None: ...

class EvalBatch(_message.Message):
    __slots__ = ("embed", "first", "head", "embed_only")
    EMBED_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    EMBED_ONLY_FIELD_NUMBER: _ClassVar[int]
    embed: EmbedRequest
    first: int
    head: str
    embed_only: bool
    def __init__(self, embed: _Optional[_Union[EmbedRequest, _Mapping]] = ..., first: _Optional[int] = ..., head: _Optional[str] = ..., embed_only: _Optional[bool] = ...) -> None: ...

class EvalAnswer(_message.Message):
    __slots__ = ("request_id", "present", "scored", "score")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    SCORED_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    present: _containers.RepeatedScalarFieldContainer[int]
    scored: bool
    score: ScoreReply
    def __init__(self, request_id: _Optional[int] = ..., present: _Optional[_Iterable[int]] = ..., scored: _Optional[bool] = ..., score: _Optional[_Union[ScoreReply, _Mapping]] = ...) -> None: ...

class RoundReply(_message.Message):
    __slots__ = ("round_id", "embedded", "used", "fused", "loss", "stepped", "evaluated", "reached", "steps")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDED_FIELD_NUMBER: _ClassVar[int]
    USED_FIELD_NUMBER: _ClassVar[int]
    FUSED_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    STEPPED_FIELD_NUMBER: _ClassVar[int]
    EVALUATED_FIELD_NUMBER: _ClassVar[int]
    REACHED_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    round_id: int
    embedded: bool
    used: _containers.RepeatedScalarFieldContainer[int]
    fused: bool
    loss: float
    stepped: bool
    evaluated: _containers.RepeatedCompositeFieldContainer[EvalAnswer]
    reached: _containers.RepeatedScalarFieldContainer[int]
    steps: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, round_id: _Optional[int] = ..., embedded: _Optional[bool] = ..., used: _Optional[_Iterable[int]] = ..., fused: _Optional[bool] = ..., loss: _Optional[float] = ..., stepped: _Optional[bool] = ..., evaluated: _Optional[_Iterable[_Union[EvalAnswer, _Mapping]]] = ..., reached: _Optional[_Iterable[int]] = ..., steps: _Optional[_Iterable[int]] = ...) -> None: ...

class AbsentRequest(_message.Message):
    __slots__ = ("header", "round_id", "blocks")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    header: Header
    round_id: int
    blocks: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., round_id: _Optional[int] = ..., blocks: _Optional[_Iterable[int]] = ...) -> None: ...

class PushRequest(_message.Message):
    __slots__ = ("header", "round_id", "block", "kind", "empty", "tensor")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    EMPTY_FIELD_NUMBER: _ClassVar[int]
    TENSOR_FIELD_NUMBER: _ClassVar[int]
    header: Header
    round_id: int
    block: int
    kind: str
    empty: bool
    tensor: Tensor
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., round_id: _Optional[int] = ..., block: _Optional[int] = ..., kind: _Optional[str] = ..., empty: _Optional[bool] = ..., tensor: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class IdHashesRequest(_message.Message):
    __slots__ = ("header", "split")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ...) -> None: ...

class IdHashesReply(_message.Message):
    __slots__ = ("hashes",)
    HASHES_FIELD_NUMBER: _ClassVar[int]
    hashes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, hashes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ClassWeightsRequest(_message.Message):
    __slots__ = ("header", "split", "purpose")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    PURPOSE_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    purpose: str
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ..., purpose: _Optional[str] = ...) -> None: ...

class ClassWeightsReply(_message.Message):
    __slots__ = ("present", "weights")
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    present: bool
    weights: Tensor
    def __init__(self, present: _Optional[bool] = ..., weights: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class EmbedRequest(_message.Message):
    __slots__ = ("header", "round_id", "split", "rows", "digest", "train", "blocks", "fresh_own", "own_tower")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    TRAIN_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    FRESH_OWN_FIELD_NUMBER: _ClassVar[int]
    OWN_TOWER_FIELD_NUMBER: _ClassVar[int]
    header: Header
    round_id: int
    split: str
    rows: Tensor
    digest: bytes
    train: bool
    blocks: _containers.RepeatedScalarFieldContainer[int]
    fresh_own: bool
    own_tower: bool
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., round_id: _Optional[int] = ..., split: _Optional[str] = ..., rows: _Optional[_Union[Tensor, _Mapping]] = ..., digest: _Optional[bytes] = ..., train: _Optional[bool] = ..., blocks: _Optional[_Iterable[int]] = ..., fresh_own: _Optional[bool] = ..., own_tower: _Optional[bool] = ...) -> None: ...

class EmbedReply(_message.Message):
    __slots__ = ("round_id", "embedding")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_FIELD_NUMBER: _ClassVar[int]
    round_id: int
    embedding: Tensor
    def __init__(self, round_id: _Optional[int] = ..., embedding: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class FuseRequest(_message.Message):
    __slots__ = ("header", "round_id", "epoch", "embeddings", "blocks", "label_blocks", "rows", "digest", "batch")
    class EmbeddingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Tensor
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    LABEL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    header: Header
    round_id: int
    epoch: int
    embeddings: _containers.MessageMap[int, Tensor]
    blocks: _containers.RepeatedScalarFieldContainer[int]
    label_blocks: _containers.RepeatedScalarFieldContainer[int]
    rows: Tensor
    digest: bytes
    batch: int
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., round_id: _Optional[int] = ..., epoch: _Optional[int] = ..., embeddings: _Optional[_Mapping[int, Tensor]] = ..., blocks: _Optional[_Iterable[int]] = ..., label_blocks: _Optional[_Iterable[int]] = ..., rows: _Optional[_Union[Tensor, _Mapping]] = ..., digest: _Optional[bytes] = ..., batch: _Optional[int] = ...) -> None: ...

class FuseReply(_message.Message):
    __slots__ = ("round_id", "loss", "grads")
    class GradsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Tensor
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    GRADS_FIELD_NUMBER: _ClassVar[int]
    round_id: int
    loss: float
    grads: _containers.MessageMap[int, Tensor]
    def __init__(self, round_id: _Optional[int] = ..., loss: _Optional[float] = ..., grads: _Optional[_Mapping[int, Tensor]] = ...) -> None: ...

class BackwardRequest(_message.Message):
    __slots__ = ("header", "round_id", "epoch", "has_grad", "grad", "parts")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    HAS_GRAD_FIELD_NUMBER: _ClassVar[int]
    GRAD_FIELD_NUMBER: _ClassVar[int]
    PARTS_FIELD_NUMBER: _ClassVar[int]
    header: Header
    round_id: int
    epoch: int
    has_grad: bool
    grad: Tensor
    parts: _containers.RepeatedCompositeFieldContainer[Tensor]
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., round_id: _Optional[int] = ..., epoch: _Optional[int] = ..., has_grad: _Optional[bool] = ..., grad: _Optional[_Union[Tensor, _Mapping]] = ..., parts: _Optional[_Iterable[_Union[Tensor, _Mapping]]] = ...) -> None: ...

class TrainRequest(_message.Message):
    __slots__ = ("header", "backward", "fuse", "embed")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    BACKWARD_FIELD_NUMBER: _ClassVar[int]
    FUSE_FIELD_NUMBER: _ClassVar[int]
    EMBED_FIELD_NUMBER: _ClassVar[int]
    header: Header
    backward: _containers.RepeatedCompositeFieldContainer[BackwardRequest]
    fuse: _containers.RepeatedCompositeFieldContainer[FuseRequest]
    embed: _containers.RepeatedCompositeFieldContainer[EmbedRequest]
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., backward: _Optional[_Iterable[_Union[BackwardRequest, _Mapping]]] = ..., fuse: _Optional[_Iterable[_Union[FuseRequest, _Mapping]]] = ..., embed: _Optional[_Iterable[_Union[EmbedRequest, _Mapping]]] = ...) -> None: ...

class TrainReply(_message.Message):
    __slots__ = ("stepped", "fused", "embeddings", "stopped")
    STEPPED_FIELD_NUMBER: _ClassVar[int]
    FUSED_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stepped: _containers.RepeatedScalarFieldContainer[int]
    fused: _containers.RepeatedCompositeFieldContainer[FuseReply]
    embeddings: _containers.RepeatedCompositeFieldContainer[EmbedReply]
    stopped: str
    def __init__(self, stepped: _Optional[_Iterable[int]] = ..., fused: _Optional[_Iterable[_Union[FuseReply, _Mapping]]] = ..., embeddings: _Optional[_Iterable[_Union[EmbedReply, _Mapping]]] = ..., stopped: _Optional[str] = ...) -> None: ...

class CheckpointRequest(_message.Message):
    __slots__ = ("header", "round_id", "snapshot")
    class Snapshot(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        SNAPSHOT_NONE: _ClassVar[CheckpointRequest.Snapshot]
        SNAPSHOT_KEEP: _ClassVar[CheckpointRequest.Snapshot]
        SNAPSHOT_RESTORE: _ClassVar[CheckpointRequest.Snapshot]
    SNAPSHOT_NONE: CheckpointRequest.Snapshot
    SNAPSHOT_KEEP: CheckpointRequest.Snapshot
    SNAPSHOT_RESTORE: CheckpointRequest.Snapshot
    HEADER_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_FIELD_NUMBER: _ClassVar[int]
    header: Header
    round_id: int
    snapshot: CheckpointRequest.Snapshot
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., round_id: _Optional[int] = ..., snapshot: _Optional[_Union[CheckpointRequest.Snapshot, str]] = ...) -> None: ...

class CheckpointReply(_message.Message):
    __slots__ = ("round_id", "saved")
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    SAVED_FIELD_NUMBER: _ClassVar[int]
    round_id: int
    saved: bool
    def __init__(self, round_id: _Optional[int] = ..., saved: _Optional[bool] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("header", "request_id", "embeddings", "blocks", "label_blocks", "seal_for", "head")
    class EmbeddingsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Tensor
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    LABEL_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SEAL_FOR_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    header: Header
    request_id: int
    embeddings: _containers.MessageMap[int, Tensor]
    blocks: _containers.RepeatedScalarFieldContainer[int]
    label_blocks: _containers.RepeatedScalarFieldContainer[int]
    seal_for: _containers.RepeatedScalarFieldContainer[int]
    head: str
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., request_id: _Optional[int] = ..., embeddings: _Optional[_Mapping[int, Tensor]] = ..., blocks: _Optional[_Iterable[int]] = ..., label_blocks: _Optional[_Iterable[int]] = ..., seal_for: _Optional[_Iterable[int]] = ..., head: _Optional[str] = ...) -> None: ...

class PredictReply(_message.Message):
    __slots__ = ("request_id", "probabilities")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    probabilities: Tensor
    def __init__(self, request_id: _Optional[int] = ..., probabilities: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class ScoreRequest(_message.Message):
    __slots__ = ("header", "split", "rows", "digest", "predictions", "scores", "blind")
    class PredictionsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class ScoresEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    SCORES_FIELD_NUMBER: _ClassVar[int]
    BLIND_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    rows: Tensor
    digest: bytes
    predictions: _containers.MessageMap[str, Tensor]
    scores: _containers.MessageMap[str, Tensor]
    blind: _containers.RepeatedCompositeFieldContainer[BlindPrediction]
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ..., rows: _Optional[_Union[Tensor, _Mapping]] = ..., digest: _Optional[bytes] = ..., predictions: _Optional[_Mapping[str, Tensor]] = ..., scores: _Optional[_Mapping[str, Tensor]] = ..., blind: _Optional[_Iterable[_Union[BlindPrediction, _Mapping]]] = ...) -> None: ...

class BlindPrediction(_message.Message):
    __slots__ = ("request_id", "heads", "present", "first", "has_threshold", "threshold", "federation_scores", "guess", "size")
    class HeadsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Tensor
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    PRESENT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    HAS_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_SCORES_FIELD_NUMBER: _ClassVar[int]
    GUESS_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    heads: _containers.MessageMap[int, Tensor]
    present: _containers.RepeatedScalarFieldContainer[int]
    first: int
    has_threshold: bool
    threshold: float
    federation_scores: bool
    guess: str
    size: int
    def __init__(self, request_id: _Optional[int] = ..., heads: _Optional[_Mapping[int, Tensor]] = ..., present: _Optional[_Iterable[int]] = ..., first: _Optional[int] = ..., has_threshold: _Optional[bool] = ..., threshold: _Optional[float] = ..., federation_scores: _Optional[bool] = ..., guess: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ScoreReply(_message.Message):
    __slots__ = ("confusion", "histograms", "sums", "brier")
    class ConfusionEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class HistogramsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class SumsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class BrierEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    CONFUSION_FIELD_NUMBER: _ClassVar[int]
    HISTOGRAMS_FIELD_NUMBER: _ClassVar[int]
    SUMS_FIELD_NUMBER: _ClassVar[int]
    BRIER_FIELD_NUMBER: _ClassVar[int]
    confusion: _containers.MessageMap[str, Tensor]
    histograms: _containers.MessageMap[str, Tensor]
    sums: _containers.MessageMap[str, Tensor]
    brier: _containers.MessageMap[str, Tensor]
    def __init__(self, confusion: _Optional[_Mapping[str, Tensor]] = ..., histograms: _Optional[_Mapping[str, Tensor]] = ..., sums: _Optional[_Mapping[str, Tensor]] = ..., brier: _Optional[_Mapping[str, Tensor]] = ...) -> None: ...

class PsiPoints(_message.Message):
    __slots__ = ("points",)
    POINTS_FIELD_NUMBER: _ClassVar[int]
    points: bytes
    def __init__(self, points: _Optional[bytes] = ...) -> None: ...

class PsiBlindRequest(_message.Message):
    __slots__ = ("header", "split", "session")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    session: str
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ..., session: _Optional[str] = ...) -> None: ...

class PsiApplyRequest(_message.Message):
    __slots__ = ("header", "split", "session", "points")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    POINTS_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    session: str
    points: bytes
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ..., session: _Optional[str] = ..., points: _Optional[bytes] = ...) -> None: ...

class PsiKeysRequest(_message.Message):
    __slots__ = ("header", "split", "session", "keys")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    session: str
    keys: bytes
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ..., session: _Optional[str] = ..., keys: _Optional[bytes] = ...) -> None: ...

class ShutdownRequest(_message.Message):
    __slots__ = ("header", "reason", "choice")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    header: Header
    reason: str
    choice: ServingChoice
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., reason: _Optional[str] = ..., choice: _Optional[_Union[ServingChoice, _Mapping]] = ...) -> None: ...

class ServingChoice(_message.Message):
    __slots__ = ("has_threshold", "threshold", "subsets", "heads")
    HAS_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    SUBSETS_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    has_threshold: bool
    threshold: float
    subsets: _containers.RepeatedCompositeFieldContainer[SubsetChoice]
    heads: _containers.RepeatedCompositeFieldContainer[HeadChoice]
    def __init__(self, has_threshold: _Optional[bool] = ..., threshold: _Optional[float] = ..., subsets: _Optional[_Iterable[_Union[SubsetChoice, _Mapping]]] = ..., heads: _Optional[_Iterable[_Union[HeadChoice, _Mapping]]] = ...) -> None: ...

class HeadChoice(_message.Message):
    __slots__ = ("observed", "head")
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    observed: _containers.RepeatedScalarFieldContainer[int]
    head: str
    def __init__(self, observed: _Optional[_Iterable[int]] = ..., head: _Optional[str] = ...) -> None: ...

class SubsetChoice(_message.Message):
    __slots__ = ("observed", "kept")
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    observed: _containers.RepeatedScalarFieldContainer[int]
    kept: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, observed: _Optional[_Iterable[int]] = ..., kept: _Optional[_Iterable[int]] = ...) -> None: ...

class StepRequest(_message.Message):
    __slots__ = ("header", "method", "step", "round_id", "split", "rows", "digest", "tensors", "maps", "scalars")
    class TensorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class MapsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TensorMap
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TensorMap, _Mapping]] = ...) -> None: ...
    class ScalarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Scalar
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Scalar, _Mapping]] = ...) -> None: ...
    HEADER_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    MAPS_FIELD_NUMBER: _ClassVar[int]
    SCALARS_FIELD_NUMBER: _ClassVar[int]
    header: Header
    method: str
    step: str
    round_id: int
    split: str
    rows: Tensor
    digest: bytes
    tensors: _containers.MessageMap[str, Tensor]
    maps: _containers.MessageMap[str, TensorMap]
    scalars: _containers.MessageMap[str, Scalar]
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., method: _Optional[str] = ..., step: _Optional[str] = ..., round_id: _Optional[int] = ..., split: _Optional[str] = ..., rows: _Optional[_Union[Tensor, _Mapping]] = ..., digest: _Optional[bytes] = ..., tensors: _Optional[_Mapping[str, Tensor]] = ..., maps: _Optional[_Mapping[str, TensorMap]] = ..., scalars: _Optional[_Mapping[str, Scalar]] = ...) -> None: ...

class StepReply(_message.Message):
    __slots__ = ("round_id", "method", "step", "tensors", "maps", "scalars")
    class TensorsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Tensor
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class MapsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: TensorMap
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[TensorMap, _Mapping]] = ...) -> None: ...
    class ScalarsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: Scalar
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[Scalar, _Mapping]] = ...) -> None: ...
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    MAPS_FIELD_NUMBER: _ClassVar[int]
    SCALARS_FIELD_NUMBER: _ClassVar[int]
    round_id: int
    method: str
    step: str
    tensors: _containers.MessageMap[str, Tensor]
    maps: _containers.MessageMap[str, TensorMap]
    scalars: _containers.MessageMap[str, Scalar]
    def __init__(self, round_id: _Optional[int] = ..., method: _Optional[str] = ..., step: _Optional[str] = ..., tensors: _Optional[_Mapping[str, Tensor]] = ..., maps: _Optional[_Mapping[str, TensorMap]] = ..., scalars: _Optional[_Mapping[str, Scalar]] = ...) -> None: ...

class TensorMap(_message.Message):
    __slots__ = ("items",)
    class ItemsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Tensor
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    items: _containers.MessageMap[int, Tensor]
    def __init__(self, items: _Optional[_Mapping[int, Tensor]] = ...) -> None: ...

class Scalar(_message.Message):
    __slots__ = ("int", "real", "flag", "text")
    INT_FIELD_NUMBER: _ClassVar[int]
    REAL_FIELD_NUMBER: _ClassVar[int]
    FLAG_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    int: int
    real: float
    flag: bool
    text: str
    def __init__(self, int: _Optional[int] = ..., real: _Optional[float] = ..., flag: _Optional[bool] = ..., text: _Optional[str] = ...) -> None: ...

class PartyInfoMsg(_message.Message):
    __slots__ = ("party_id", "block", "num_blocks", "dataset", "feature_shape", "num_classes", "has_labels", "samples", "protocol_version", "task", "label_only")
    class SamplesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class LabelOnlyEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    PARTY_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    NUM_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    FEATURE_SHAPE_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    HAS_LABELS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    LABEL_ONLY_FIELD_NUMBER: _ClassVar[int]
    party_id: str
    block: int
    num_blocks: int
    dataset: str
    feature_shape: _containers.RepeatedScalarFieldContainer[int]
    num_classes: int
    has_labels: bool
    samples: _containers.ScalarMap[str, int]
    protocol_version: int
    task: str
    label_only: _containers.ScalarMap[str, int]
    def __init__(self, party_id: _Optional[str] = ..., block: _Optional[int] = ..., num_blocks: _Optional[int] = ..., dataset: _Optional[str] = ..., feature_shape: _Optional[_Iterable[int]] = ..., num_classes: _Optional[int] = ..., has_labels: _Optional[bool] = ..., samples: _Optional[_Mapping[str, int]] = ..., protocol_version: _Optional[int] = ..., task: _Optional[str] = ..., label_only: _Optional[_Mapping[str, int]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ("header", "info", "address", "session", "lease", "last_round", "relay_key")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    INFO_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    LAST_ROUND_FIELD_NUMBER: _ClassVar[int]
    RELAY_KEY_FIELD_NUMBER: _ClassVar[int]
    header: Header
    info: PartyInfoMsg
    address: str
    session: str
    lease: str
    last_round: int
    relay_key: RelayKey
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., info: _Optional[_Union[PartyInfoMsg, _Mapping]] = ..., address: _Optional[str] = ..., session: _Optional[str] = ..., lease: _Optional[str] = ..., last_round: _Optional[int] = ..., relay_key: _Optional[_Union[RelayKey, _Mapping]] = ...) -> None: ...

class RegisterReply(_message.Message):
    __slots__ = ("run_id", "config_json", "message", "session", "resume_round", "lease")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_JSON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SESSION_FIELD_NUMBER: _ClassVar[int]
    RESUME_ROUND_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    config_json: str
    message: str
    session: str
    resume_round: int
    lease: str
    def __init__(self, run_id: _Optional[str] = ..., config_json: _Optional[str] = ..., message: _Optional[str] = ..., session: _Optional[str] = ..., resume_round: _Optional[int] = ..., lease: _Optional[str] = ...) -> None: ...

class FederatedPredictRequest(_message.Message):
    __slots__ = ("header", "split", "id_hashes", "all_rows", "deadline_s")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    ID_HASHES_FIELD_NUMBER: _ClassVar[int]
    ALL_ROWS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    id_hashes: _containers.RepeatedScalarFieldContainer[bytes]
    all_rows: bool
    deadline_s: float
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ..., id_hashes: _Optional[_Iterable[bytes]] = ..., all_rows: _Optional[bool] = ..., deadline_s: _Optional[float] = ...) -> None: ...

class PredictionRow(_message.Message):
    __slots__ = ("id_hash", "observed_blocks", "party_probabilities", "federation_probabilities", "predicted_class", "predicted_value", "party_rows")
    class PartyProbabilitiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: Tensor
        def __init__(self, key: _Optional[int] = ..., value: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...
    class PartyRowsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    ID_HASH_FIELD_NUMBER: _ClassVar[int]
    OBSERVED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    PARTY_PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_CLASS_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_VALUE_FIELD_NUMBER: _ClassVar[int]
    PARTY_ROWS_FIELD_NUMBER: _ClassVar[int]
    id_hash: bytes
    observed_blocks: _containers.RepeatedScalarFieldContainer[int]
    party_probabilities: _containers.MessageMap[int, Tensor]
    federation_probabilities: Tensor
    predicted_class: int
    predicted_value: float
    party_rows: _containers.ScalarMap[int, int]
    def __init__(self, id_hash: _Optional[bytes] = ..., observed_blocks: _Optional[_Iterable[int]] = ..., party_probabilities: _Optional[_Mapping[int, Tensor]] = ..., federation_probabilities: _Optional[_Union[Tensor, _Mapping]] = ..., predicted_class: _Optional[int] = ..., predicted_value: _Optional[float] = ..., party_rows: _Optional[_Mapping[int, int]] = ...) -> None: ...

class FederatedPredictReply(_message.Message):
    __slots__ = ("rows",)
    ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[PredictionRow]
    def __init__(self, rows: _Optional[_Iterable[_Union[PredictionRow, _Mapping]]] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = ("header",)
    HEADER_FIELD_NUMBER: _ClassVar[int]
    header: Header
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ...) -> None: ...

class PartyStatus(_message.Message):
    __slots__ = ("party_id", "block", "state", "missed_rounds", "generation")
    PARTY_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MISSED_ROUNDS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    party_id: str
    block: int
    state: str
    missed_rounds: int
    generation: int
    def __init__(self, party_id: _Optional[str] = ..., block: _Optional[int] = ..., state: _Optional[str] = ..., missed_rounds: _Optional[int] = ..., generation: _Optional[int] = ...) -> None: ...

class StatusReply(_message.Message):
    __slots__ = ("state", "round_id", "epoch", "parties")
    STATE_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    state: str
    round_id: int
    epoch: int
    parties: _containers.RepeatedCompositeFieldContainer[PartyStatus]
    def __init__(self, state: _Optional[str] = ..., round_id: _Optional[int] = ..., epoch: _Optional[int] = ..., parties: _Optional[_Iterable[_Union[PartyStatus, _Mapping]]] = ...) -> None: ...

class EvaluateRequest(_message.Message):
    __slots__ = ("header", "split")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    SPLIT_FIELD_NUMBER: _ClassVar[int]
    header: Header
    split: str
    def __init__(self, header: _Optional[_Union[Header, _Mapping]] = ..., split: _Optional[str] = ...) -> None: ...

class EvaluateRow(_message.Message):
    __slots__ = ("observed", "samples", "accuracy", "federation_accuracy", "f1", "auc", "rmse", "mae", "r2", "federation_rmse", "brier")
    OBSERVED_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    F1_FIELD_NUMBER: _ClassVar[int]
    AUC_FIELD_NUMBER: _ClassVar[int]
    RMSE_FIELD_NUMBER: _ClassVar[int]
    MAE_FIELD_NUMBER: _ClassVar[int]
    R2_FIELD_NUMBER: _ClassVar[int]
    FEDERATION_RMSE_FIELD_NUMBER: _ClassVar[int]
    BRIER_FIELD_NUMBER: _ClassVar[int]
    observed: str
    samples: int
    accuracy: float
    federation_accuracy: float
    f1: float
    auc: float
    rmse: float
    mae: float
    r2: float
    federation_rmse: float
    brier: float
    def __init__(self, observed: _Optional[str] = ..., samples: _Optional[int] = ..., accuracy: _Optional[float] = ..., federation_accuracy: _Optional[float] = ..., f1: _Optional[float] = ..., auc: _Optional[float] = ..., rmse: _Optional[float] = ..., mae: _Optional[float] = ..., r2: _Optional[float] = ..., federation_rmse: _Optional[float] = ..., brier: _Optional[float] = ...) -> None: ...

class BlockAnswers(_message.Message):
    __slots__ = ("block", "batches", "answered")
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    BATCHES_FIELD_NUMBER: _ClassVar[int]
    ANSWERED_FIELD_NUMBER: _ClassVar[int]
    block: int
    batches: int
    answered: int
    def __init__(self, block: _Optional[int] = ..., batches: _Optional[int] = ..., answered: _Optional[int] = ...) -> None: ...

class EvaluateReply(_message.Message):
    __slots__ = ("rows", "unscored", "live_blocks", "seconds", "answers")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    UNSCORED_FIELD_NUMBER: _ClassVar[int]
    LIVE_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    rows: _containers.RepeatedCompositeFieldContainer[EvaluateRow]
    unscored: int
    live_blocks: _containers.RepeatedScalarFieldContainer[int]
    seconds: float
    answers: _containers.RepeatedCompositeFieldContainer[BlockAnswers]
    def __init__(self, rows: _Optional[_Iterable[_Union[EvaluateRow, _Mapping]]] = ..., unscored: _Optional[int] = ..., live_blocks: _Optional[_Iterable[int]] = ..., seconds: _Optional[float] = ..., answers: _Optional[_Iterable[_Union[BlockAnswers, _Mapping]]] = ...) -> None: ...
