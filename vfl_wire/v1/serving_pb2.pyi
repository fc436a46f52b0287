from vfl_wire.v1 import vfl_pb2 as _vfl_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ServeEmbedRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class ServeEmbedReply(_message.Message):
    __slots__ = ("block", "held", "embeddings")
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    block: int
    held: bytes
    embeddings: _vfl_pb2.Tensor
    def __init__(self, block: _Optional[int] = ..., held: _Optional[bytes] = ..., embeddings: _Optional[_Union[_vfl_pb2.Tensor, _Mapping]] = ...) -> None: ...

class ServePredictRequest(_message.Message):
    __slots__ = ("ids", "deadline_ms", "features")
    class FeaturesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: InlineRow
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[InlineRow, _Mapping]] = ...) -> None: ...
    IDS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[str]
    deadline_ms: float
    features: _containers.MessageMap[str, InlineRow]
    def __init__(self, ids: _Optional[_Iterable[str]] = ..., deadline_ms: _Optional[float] = ..., features: _Optional[_Mapping[str, InlineRow]] = ...) -> None: ...

class InlineRow(_message.Message):
    __slots__ = ("cells",)
    class CellsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CELLS_FIELD_NUMBER: _ClassVar[int]
    cells: _containers.ScalarMap[str, str]
    def __init__(self, cells: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ServePredictReply(_message.Message):
    __slots__ = ("predictions",)
    PREDICTIONS_FIELD_NUMBER: _ClassVar[int]
    predictions: _containers.RepeatedCompositeFieldContainer[OnlinePrediction]
    def __init__(self, predictions: _Optional[_Iterable[_Union[OnlinePrediction, _Mapping]]] = ...) -> None: ...

class OnlinePrediction(_message.Message):
    __slots__ = ("id", "parties", "missing", "probabilities", "predicted_class", "label", "value", "has_value", "error")
    class MissingEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    PARTIES_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    PROBABILITIES_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_CLASS_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HAS_VALUE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    id: str
    parties: _containers.RepeatedScalarFieldContainer[str]
    missing: _containers.ScalarMap[str, str]
    probabilities: _containers.RepeatedScalarFieldContainer[float]
    predicted_class: int
    label: str
    value: float
    has_value: bool
    error: str
    def __init__(self, id: _Optional[str] = ..., parties: _Optional[_Iterable[str]] = ..., missing: _Optional[_Mapping[str, str]] = ..., probabilities: _Optional[_Iterable[float]] = ..., predicted_class: _Optional[int] = ..., label: _Optional[str] = ..., value: _Optional[float] = ..., has_value: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...
