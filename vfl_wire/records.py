"""A method's step on the wire: `vfl.v1.StepRequest` / `StepReply` <-> header and `Record`.

The wire does not know the methods. Decoding treats the message as untrusted and is guided by
the step's schema (vfl_core.methods.schema): a tensor, map or scalar the schema does not name is
refused, every tensor goes through `decode_array` (allowed dtypes, the size cap, exact byte
counts) with the schema's dtype and rank, index tensors may travel as int32; the schema's own
check (symbolic shapes, finite values, ranges, header parts) then runs in vfl_core before any
method code, the same check the in-process transport makes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.methods.record import Record, Scalar, StepHeader
from vfl_core.methods.schema import INDEX, ScalarSpec, Schema, TensorSpec
from vfl_wire.tensors import decode_array, encode_array, encode_index
from vfl_wire.v1 import vfl_pb2

MAX_FIELDS = 256  # names in one record: far more than any step has, far fewer than a flood
_QUOTED = 64


def step_request(
    method: str, step: str, header: StepHeader, record: Record, h: vfl_pb2.Header
) -> vfl_pb2.StepRequest:
    req = vfl_pb2.StepRequest(
        header=h,
        method=method,
        step=step,
        round_id=header.round_id,
        split=header.split,
        digest=header.digest,
    )
    if header.rows is not None:
        req.rows.CopyFrom(encode_index(header.rows, what=f"{step} rows"))
    _fill(req, record, step)
    return req


def step_reply(request: vfl_pb2.StepRequest, record: Record) -> vfl_pb2.StepReply:
    reply = vfl_pb2.StepReply(round_id=request.round_id, method=request.method, step=request.step)
    _fill(reply, record, request.step)
    return reply


def request_from_proto(req: vfl_pb2.StepRequest, schema: Schema) -> tuple[StepHeader, Record]:
    """The header and record of an untrusted request, each tensor decoded as its schema says."""
    rows = None
    if req.HasField("rows"):
        rows = _decode(req.rows, TensorSpec("rows", INDEX, (None,)), f"{schema.what} rows")
    header = StepHeader(req.round_id, req.split, rows, req.digest)
    return header, _record(req, schema)


def reply_from_proto(
    reply: vfl_pb2.StepReply, request: vfl_pb2.StepRequest, schema: Schema
) -> Record:
    """The record of an untrusted reply, which must echo its request's round, method and step."""
    if (reply.round_id, reply.method, reply.step) != (
        request.round_id,
        request.method,
        request.step,
    ):
        raise ProtocolError(
            f"{request.step} reply: for round {reply.round_id} of {_clip(reply.method)}/"
            f"{_clip(reply.step)}, expected round {request.round_id}"
        )
    return _record(reply, schema)


def _fill(msg: vfl_pb2.StepRequest | vfl_pb2.StepReply, record: Record, step: str) -> None:
    for name, a in record.tensors.items():
        msg.tensors[name].CopyFrom(_encode(a, f"{step} {name}"))
    for name, m in record.maps.items():
        items = msg.maps[name].items
        for block, a in m.items():
            items[block].CopyFrom(_encode(a, f"{step} {name} of block {block}"))
    for name, value in record.scalars.items():
        _set_scalar(msg.scalars[name], value)


def _encode(a: np.ndarray, what: str) -> vfl_pb2.Tensor:
    return encode_array(np.asarray(a), what=what)


def _set_scalar(s: vfl_pb2.Scalar, value: Scalar) -> None:
    if isinstance(value, bool):
        s.flag = value
    elif isinstance(value, int):
        s.int = value
    elif isinstance(value, float):
        s.real = value
    else:
        s.text = value


def _record(msg: vfl_pb2.StepRequest | vfl_pb2.StepReply, schema: Schema) -> Record:
    count = len(msg.tensors) + len(msg.maps) + len(msg.scalars)
    if count > MAX_FIELDS:
        raise ProtocolError(f"{schema.what}: {count} fields, at most {MAX_FIELDS}")
    record = Record()
    for name, t in msg.tensors.items():
        spec = _tensor_spec(schema, name, keyed=False)
        record.tensors[name] = _decode(t, spec, spec.label)
    for name, m in msg.maps.items():
        spec = _tensor_spec(schema, name, keyed=True)
        record.maps[name] = {
            b: _decode(t, spec, f"{spec.label} for block {b}") for b, t in sorted(m.items.items())
        }
    for name, s in msg.scalars.items():
        if not isinstance(schema.field(name), ScalarSpec):
            raise ProtocolError(f"{schema.what}: unexpected scalar {_clip(name)}")
        record.scalars[name] = _scalar(s, name, schema)
    return record


def _tensor_spec(schema: Schema, name: str, keyed: bool) -> TensorSpec:
    spec = schema.field(name)
    if not isinstance(spec, TensorSpec) or spec.keyed != keyed:
        kind = "map" if keyed else "tensor"
        raise ProtocolError(f"{schema.what}: unexpected {kind} {_clip(name)}")
    return spec


def _decode(t: vfl_pb2.Tensor, spec: TensorSpec, what: str) -> np.ndarray:
    """Dtype, rank, size cap and byte count here; values (finite, non-negative indices) in the
    schema's check, which every record passes before method code sees it (one scan, not two)."""
    rank = (None,) * len(spec.shape)
    if spec.dtype == INDEX:
        dtype = "int32" if t.dtype == "int32" else "int64"
        return decode_array(t, what=what, expect_dtype=dtype, expect_shape=rank).astype(np.int64)
    return decode_array(
        t, what=what, expect_dtype=spec.dtype, expect_shape=rank, allow_nonfinite=True
    )


def _scalar(s: vfl_pb2.Scalar, name: str, schema: Schema) -> Scalar:
    kind = s.WhichOneof("value")
    if kind is None:
        raise ProtocolError(f"{schema.what} {_clip(name)}: scalar without a value")
    return getattr(s, kind)


def scalars_of(msg: Mapping[str, vfl_pb2.Scalar]) -> dict[str, Scalar]:
    """Plain values of a message's scalars (tests and the audit read them)."""
    return {k: getattr(v, v.WhichOneof("value") or "int") for k, v in msg.items()}


def _clip(text: str) -> str:
    return repr(text) if len(text) <= _QUOTED else f"{text[:_QUOTED]!r}... ({len(text)} chars)"
