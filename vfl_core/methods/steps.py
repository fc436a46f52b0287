"""A step of a method: its schemas, its party-side handler, and the packing between the step's
typed call and answer and the `Record` every transport carries.

The packing is derived from the schema: a call is a dataclass whose fields are named as the
schema's (plus the header's: the round under `round_attr`, and `split`, `rows`, `digest` where
the schema uses them); an answer is a dataclass likewise, or with `result_type` None the value
of the reply schema's one field (None when it has none). A step whose call nests values (a map
of dataclasses) gives its own `pack_*`/`unpack_*` instead. Either way the record is checked
against the schema before the call is built (`decode_call`) and before the answer is
(`decode_result`): no method code sees an unchecked tensor, in any transport.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vfl_core.methods.record import Record, StepHeader
from vfl_core.methods.schema import Schema, TensorSpec, check

# (party, call) -> answer; the party is a vfl_core.methods.party_port.PartyPort
Handler = Callable[[Any, Any], Any]
# The deadlines a step may take (fields of vfl_coordinator.config.Deadlines).
PHASES = frozenset({"embed", "fuse", "backward", "predict", "align", "checkpoint"})


@dataclass(frozen=True)
class StepSpec:
    name: str  # unique within its method, e.g. "GuestStep"; the message audit shows it
    request: Schema
    reply: Schema
    handler: Handler
    call_type: type | None = None  # dataclass of the call (None: the handler gets the Record)
    result_type: type | None = None  # dataclass of the answer (None: the reply's one field)
    round_attr: str = "round_id"  # the call's field that holds the round (or request)
    # whose deadline a call has (a field of vfl_coordinator.config.Deadlines), in training and
    # when `training(call)` says it is an inference call
    phase: str = "fuse"
    inference_phase: str = "predict"
    training: Callable[[Any], bool] = lambda call: True
    # cross-field checks of an answer against its call, after the schema's (e.g. activations
    # present exactly when the call asked for them); raises ProtocolError
    check_reply: Callable[[Any, Any], None] | None = None
    pack_call: Callable[[Any], tuple[StepHeader, Record]] | None = None
    unpack_call: Callable[[StepHeader, Record], Any] | None = None
    pack_result: Callable[[Any], Record] | None = None
    unpack_result: Callable[[Record, Any], Any] | None = None

    def __post_init__(self) -> None:
        for phase in (self.phase, self.inference_phase):
            if phase not in PHASES:
                raise ValueError(
                    f"step {self.name}: phase {phase!r} is not one of {sorted(PHASES)}"
                )


def encode_call(step: StepSpec, call: Any) -> tuple[StepHeader, Record]:
    """The header and record of a call (trusted, local)."""
    if step.pack_call is not None:
        return step.pack_call(call)
    if step.call_type is None:
        header, record = call
        return header, record
    s = step.request
    rows = getattr(call, "rows", None) if s.rows != "none" else None
    header = StepHeader(
        int(getattr(call, step.round_attr)),
        getattr(call, "split", "") if s.split else "",
        None if rows is None else np.asarray(rows, dtype=np.int64),
        getattr(call, "digest", b"") if s.rows != "none" else b"",
    )
    return header, _pack(s, call)


def decode_call(
    step: StepSpec, header: StepHeader, record: Record, dims: Mapping[str, int]
) -> tuple[Any, dict[str, int]]:
    """Check an untrusted call against the request schema, then build it; also returns the
    sizes of its symbols (what its answer is checked with)."""
    bound = check(step.request, record, header, dims)
    if step.unpack_call is not None:
        return step.unpack_call(header, record), bound
    if step.call_type is None:
        return (header, record), bound
    s = step.request
    kwargs: dict[str, Any] = {step.round_attr: header.round_id}
    if s.split:
        kwargs["split"] = header.split
    if s.rows != "none":
        kwargs["rows"], kwargs["digest"] = header.rows, header.digest
    return step.call_type(**kwargs, **_unpack(s, record)), bound


def encode_result(step: StepSpec, result: Any) -> Record:
    if step.pack_result is not None:
        return step.pack_result(result)
    if step.result_type is not None:
        return _pack(step.reply, result)
    if step.reply.fields:
        return _pack(step.reply, {step.reply.fields[0].name: result})
    return Record()


def decode_result(step: StepSpec, record: Record, call: Any, bound: Mapping[str, int]) -> Any:
    """Check an untrusted answer against the reply schema (with the call's sizes), build it,
    and check it against the call."""
    check(step.reply, record, None, bound)
    if step.unpack_result is not None:
        result = step.unpack_result(record, call)
    elif step.result_type is not None:
        result = step.result_type(**_unpack(step.reply, record))
    elif step.reply.fields:
        result = _unpack(step.reply, record)[step.reply.fields[0].name]
    else:
        result = None
    if step.check_reply is not None:
        step.check_reply(call, result)
    return result


def _pack(schema: Schema, obj: Any) -> Record:
    record = Record()
    for spec in schema.fields:
        value = obj[spec.name] if isinstance(obj, dict) else getattr(obj, spec.name)
        if value is None:
            continue
        if not isinstance(spec, TensorSpec):
            record.scalars[spec.name] = spec.kind(value)
        elif spec.keyed:
            record.maps[spec.name] = dict(value)
        else:
            record.tensors[spec.name] = value
    return record


def _unpack(schema: Schema, record: Record) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for spec in schema.fields:
        if not isinstance(spec, TensorSpec):
            value = record.scalars.get(spec.name, spec.kind())
            out[spec.name] = spec.cast(value) if spec.cast is not None else value
        elif spec.keyed:
            out[spec.name] = dict(sorted(record.maps.get(spec.name, {}).items()))
        else:
            out[spec.name] = record.tensors.get(spec.name)
    return out


def field_names(cls: type) -> set[str]:
    """The fields of a call or answer dataclass (for tests of a step's schema)."""
    return {f.name for f in dataclasses.fields(cls)}
