"""What a method's step may carry, and the one check of a record against it.

A `Schema` lists a step's fields: tensors (dtype and a symbolic shape such as ("B", "guest_dim")),
maps of tensors by block (every entry of one shape) and scalars (kind and value range), each
required or optional, and which header parts (split, rows) the step uses. `check` runs before
any of the method's code sees a call or an answer, in every transport: a symbol is bound by the
run's configuration (`dims`), by the header's rows ("B") or by its first use, and must then
agree everywhere; a name the schema does not list is refused. Every failure is a ProtocolError
with one line naming the field, which the gRPC servicer returns as INVALID_ARGUMENT.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.methods.record import Record, StepHeader
from vfl_core.protocol import SPLITS

INDEX = "index"  # dtype of non-negative integer indices (rows, sample keys): int64 in vfl_core
BATCH = "B"  # the symbol the header's rows bind
Dim = int | str | None  # a size, a symbol bound once per record, or any size
_QUOTED = 64


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # "float32", "float64", "int64" or INDEX
    shape: tuple[Dim, ...]
    optional: bool = False
    keyed: bool = False  # a map block -> tensor; every entry has the shape
    what: str = ""  # how errors name it (default: the name)

    @property
    def label(self) -> str:
        return self.what or self.name


@dataclass(frozen=True)
class ScalarSpec:
    name: str
    kind: type  # int, float, bool or str; an absent scalar reads as kind() (0, 0.0, False, "")
    low: float | None = None
    high: float | None = None
    what: str = ""
    cast: Any = None  # e.g. an IntEnum the call's field holds (default: the kind itself)
    choices: tuple[Any, ...] = ()  # the only values allowed (none: any in the range)
    binds: str = ""  # an int scalar that sets a symbol of the shapes (e.g. "S", the samples)

    @property
    def label(self) -> str:
        return self.what or self.name


Field = TensorSpec | ScalarSpec


@dataclass(frozen=True)
class Schema:
    fields: tuple[Field, ...] = ()
    split: bool = False  # the header names a split
    rows: Literal["none", "required", "optional"] = "none"  # the header's rows (and digest)
    # symbol, lowest and highest size allowed, and what a size outside means
    limits: tuple[tuple[str, int, int, str], ...] = ()
    # checks across fields, run first (e.g. "writes need sample indices"), given the header
    # (None for a reply) and the record; they raise ProtocolError
    rules: tuple[Callable[[StepHeader | None, Record], None], ...] = ()
    what: str = "step"  # how errors name the step's header parts

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


def check(
    schema: Schema,
    record: Record,
    header: StepHeader | None = None,
    dims: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Refuse `record` (and `header`) unless they fit `schema`; returns every symbol's size."""
    bound = dict(dims or {})
    if header is not None:
        _check_header(schema, header, bound)
    _check_names(schema, record)
    for spec in schema.fields:  # scalars first: a count may set the size of a shape
        if isinstance(spec, ScalarSpec):
            _check_scalar(spec, record.scalars)
            if spec.binds:
                _bind(schema, spec.binds, int(record.scalars.get(spec.name, 0)), spec.label, bound)
    for rule in schema.rules:
        rule(header, record)
    for spec in schema.fields:
        if isinstance(spec, ScalarSpec):
            continue
        if spec.keyed:
            _check_map(schema, spec, record.maps.get(spec.name), bound)
        else:
            _check_tensor(schema, spec, record.tensors.get(spec.name), bound, spec.label)
    return bound


def _check_header(schema: Schema, header: StepHeader, bound: dict[str, int]) -> None:
    what = schema.what
    if header.round_id < 0:
        raise ProtocolError(f"{what} round: negative value {header.round_id}")
    if schema.split and header.split not in SPLITS:
        raise ProtocolError(
            f"{what} split: unknown split {_clip(header.split)}; expected one of "
            f"{', '.join(SPLITS)}"
        )
    if not schema.split and header.split:
        raise ProtocolError(f"{what} split: this step names no split")
    if header.rows is None:
        if schema.rows == "required":
            raise ProtocolError(f"{what} rows: missing")
        if header.digest:
            raise ProtocolError(f"{what} digest: present without rows")
        return
    if schema.rows == "none":
        raise ProtocolError(f"{what} rows: this step names no rows")
    spec = TensorSpec("rows", INDEX, (BATCH,), what=f"{what} rows")
    _check_tensor(schema, spec, header.rows, bound, spec.label)


def _check_names(schema: Schema, record: Record) -> None:
    for kind, names in (
        ("tensor", record.tensors),
        ("map", record.maps),
        ("scalar", record.scalars),
    ):
        for name in names:
            spec = schema.field(name)
            found = None
            if isinstance(spec, ScalarSpec):
                found = "scalar"
            elif spec is not None:
                found = "map" if spec.keyed else "tensor"
            if found != kind:
                raise ProtocolError(f"{schema.what}: unexpected {kind} {_clip(name)}")


def _check_map(
    schema: Schema, spec: TensorSpec, m: Mapping[int, np.ndarray] | None, bound: dict[str, int]
) -> None:
    for block in sorted(m or {}):
        label = f"{spec.label} for block {block}"
        if block < 0:
            raise ProtocolError(f"{label}: negative block index")
        _check_tensor(schema, spec, m[block], bound, label)  # type: ignore[index]


def _check_tensor(
    schema: Schema,
    spec: TensorSpec,
    a: np.ndarray | None,
    bound: dict[str, int],
    label: str,
) -> None:
    if a is None:
        if spec.optional or spec.keyed:
            return
        raise ProtocolError(f"{label}: missing")
    if not isinstance(a, np.ndarray):
        raise ProtocolError(f"{label}: not an array")
    if spec.dtype == INDEX:
        if a.dtype.kind not in "iu":
            raise ProtocolError(f"{label}: dtype {a.dtype} is not an integer index")
    elif a.dtype != np.dtype(spec.dtype):
        raise ProtocolError(f"{label}: dtype {a.dtype} does not match expected {spec.dtype}")
    _check_shape(schema, spec, tuple(a.shape), bound, label)
    if spec.dtype == INDEX and a.size and a.min() < 0:
        pos = int(np.argmax(a < 0))
        raise ProtocolError(f"{label}: negative value {int(a[pos])} at position {pos}")
    if a.dtype.kind == "f":
        bad = ~np.isfinite(a)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ProtocolError(f"{label}: {int(bad.sum())} non-finite value(s), first at {first}")


def _check_shape(
    schema: Schema,
    spec: TensorSpec,
    shape: tuple[int, ...],
    bound: dict[str, int],
    label: str,
) -> None:
    expected = spec.shape
    fits = len(shape) == len(expected)
    for size, dim in zip(shape, expected, strict=False):
        if isinstance(dim, str) and dim not in bound:
            _bind(schema, dim, size, label, bound)
        elif dim is not None and bound.get(dim, dim) != size:  # type: ignore[arg-type]
            fits = False
    if not fits:
        want = ", ".join(_dim(d, bound) for d in expected)
        raise ProtocolError(f"{label}: shape {shape} does not match expected ({want})")


def _bind(schema: Schema, dim: str, size: int, label: str, bound: dict[str, int]) -> None:
    for name, low, high, meaning in schema.limits:
        if name == dim and not low <= size <= high:
            raise ProtocolError(f"{label}: {dim} = {size} outside {low}..{high} ({meaning})")
    if bound.setdefault(dim, size) != size:
        raise ProtocolError(f"{label}: {dim} = {size}, but {bound[dim]} elsewhere")


def _dim(dim: Dim, bound: Mapping[str, int]) -> str:
    if dim is None:
        return "*"
    if isinstance(dim, str):
        return f"{dim}={bound[dim]}" if dim in bound else dim
    return str(dim)


def _check_scalar(spec: ScalarSpec, scalars: Mapping[str, Any]) -> None:
    value = scalars.get(spec.name, spec.kind())
    label = spec.label
    if not _is_kind(value, spec.kind):
        raise ProtocolError(f"{label}: expected {spec.kind.__name__}, got {type(value).__name__}")
    if spec.kind is float and not math.isfinite(value):
        raise ProtocolError(f"{label}: non-finite value {value}")
    if spec.choices and value not in spec.choices:
        raise ProtocolError(f"{label}: {value} is not one of {list(spec.choices)}")
    low, high = spec.low, spec.high
    if (low is None or value >= low) and (high is None or value <= high):
        return
    if high is None and low == 1:
        raise ProtocolError(f"{label}: {value} is not a positive count")
    if high is None and low == 0:
        raise ProtocolError(f"{label}: negative value {value}")
    raise ProtocolError(f"{label}: {value} outside {low}..{'' if high is None else high}")


def _is_kind(value: object, kind: type) -> bool:
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float)
    return isinstance(value, kind)


def _clip(text: str) -> str:
    return repr(text) if len(text) <= _QUOTED else f"{text[:_QUOTED]!r}... ({len(text)} characters)"
