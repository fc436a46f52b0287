"""numpy arrays <-> `vfl.v1.Tensor` messages (dtype name, shape, raw little-endian bytes).

Decoding treats every tensor as untrusted: each check that fails raises `ProtocolError` with one
line that names the field (`what`), so a servicer can return it as INVALID_ARGUMENT unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.model import quantize
from vfl_wire.v1 import vfl_pb2

# The dtypes that may travel as plain arrays. bfloat16 and int8 travel only as wire dtypes of
# embeddings and gradients (encode_float / decode_float): numpy has no bfloat16, and int8 needs
# its scales.
ALLOWED_DTYPES: frozenset[str] = frozenset({"float16", "float32", "float64", "int32", "int64"})
# Per-tensor cap, below the per-message cap (vfl_wire.channels.MAX_MESSAGE_BYTES, 128 MiB): the
# largest tensor we plan for is a 4096 x 1024 float32 embedding (16 MiB); 64 MiB leaves 4x room.
MAX_TENSOR_BYTES = 64 * 1024 * 1024
# numpy allows 64 dimensions; nothing in the protocol has more than 2.
MAX_NDIM = 32

Shape = tuple[int | None, ...]


def encode_array(a: np.ndarray, *, what: str = "tensor") -> vfl_pb2.Tensor:
    """Encode `a` as C-order little-endian bytes. Raises ProtocolError for a disallowed dtype."""
    name = a.dtype.name
    if name not in ALLOWED_DTYPES:
        raise ProtocolError(f"{what}: cannot send dtype {name}; allowed: {_allowed()}")
    # not ascontiguousarray: it turns a 0-d array into shape (1,)
    little = np.asarray(a, dtype=a.dtype.newbyteorder("<"), order="C")
    return vfl_pb2.Tensor(dtype=name, shape=little.shape, data=little.tobytes())


def encode_index(a: np.ndarray, *, what: str = "indices") -> vfl_pb2.Tensor:
    """Non-negative int64 indices (rows of a batch) as int32 when they fit, else int64: half the
    bytes of the row lists that travel with every round. `decode_index` takes either."""
    a = np.asarray(a, dtype=np.int64)
    if a.size == 0 or int(a.max()) <= np.iinfo(np.int32).max:
        return encode_array(a.astype(np.int32), what=what)
    return encode_array(a, what=what)


def decode_array(
    t: vfl_pb2.Tensor,
    *,
    what: str = "tensor",
    expect_dtype: str | None = None,
    expect_shape: Shape | None = None,
    max_bytes: int = MAX_TENSOR_BYTES,
    allow_nonfinite: bool = False,
) -> np.ndarray:
    """Validate and decode `t` into a writable, owned, native-byte-order array.

    `expect_shape` fixes the rank; a None entry accepts any size in that dimension.
    Float arrays must be finite unless `allow_nonfinite`.
    """
    dtype = _check_dtype(t.dtype, what, expect_dtype)
    shape = _check_shape(tuple(t.shape), what, expect_shape)
    nbytes = math.prod(shape) * dtype.itemsize  # Python ints: no overflow
    if nbytes > max_bytes:
        raise ProtocolError(
            f"{what}: {_fmt(shape)} {dtype.name} is {nbytes} bytes, cap {max_bytes}"
        )
    if len(t.data) != nbytes:
        raise ProtocolError(
            f"{what}: {len(t.data)} data bytes, expected {nbytes} for {_fmt(shape)} {dtype.name}"
        )
    try:
        wire = np.frombuffer(t.data, dtype=dtype.newbyteorder("<")).reshape(shape)
    except ValueError as exc:  # e.g. (0, 2**62): zero bytes, but too big for numpy to index
        raise ProtocolError(f"{what}: shape {_fmt(shape)} cannot be represented: {exc}") from None
    out = wire.astype(dtype.newbyteorder("="), copy=True)  # owned, writable, native order
    if not allow_nonfinite and out.dtype.kind == "f":
        _check_finite(out, what)
    return out


# Wire dtypes of embeddings and gradients (vfl_core.model.quantize) beyond ALLOWED_DTYPES: the numpy
# array that carries their codes.
_CODES = {"float16": np.dtype("float16"), "bfloat16": np.dtype("uint16"), "int8": np.dtype("int8")}
_SCALE = np.dtype("u1")  # int8: one scale per row, a power of two as its exponent byte


def encode_float(a: np.ndarray, wire: str, *, what: str = "tensor") -> vfl_pb2.Tensor:
    """A float32 array (embedding, gradient) in the wire dtype `wire` (vfl_core.model.quantize)."""
    if wire == quantize.LOSSLESS:
        return encode_array(a, what=what)
    e = quantize.encode(a, wire)
    codes = np.asarray(e.codes, dtype=e.codes.dtype.newbyteorder("<"), order="C")
    t = vfl_pb2.Tensor(dtype=wire, shape=codes.shape, data=codes.tobytes())
    if e.scales is not None:
        t.scales = np.asarray(e.scales, dtype=_SCALE).tobytes()
    return t


def decode_float(
    t: vfl_pb2.Tensor,
    wire: str,
    *,
    what: str = "tensor",
    expect_shape: Shape | None = None,
    max_bytes: int = MAX_TENSOR_BYTES,
) -> np.ndarray:
    """Validate `t`, sent in the wire dtype `wire`, and decode it to a finite float32 array.

    As strict as `decode_array`: the dtype must be `wire`, the shape as expected, the sizes of
    codes and scales exact, and the float32 result (bounded by `max_bytes` before anything is
    allocated) finite; int8 codes lie in [-127, 127] and scales are finite.
    """
    if wire == quantize.LOSSLESS:
        if t.scales:
            raise ProtocolError(f"{what}: scales are only sent with int8")
        return decode_array(
            t, what=what, expect_dtype="float32", expect_shape=expect_shape, max_bytes=max_bytes
        )
    if t.dtype != wire or wire not in _CODES:
        raise ProtocolError(f"{what}: dtype {t.dtype[:40]!r} does not match expected {wire}")
    shape = _check_shape(tuple(t.shape), what, expect_shape)
    if wire == "int8" and not shape:
        raise ProtocolError(f"{what}: an int8 tensor needs at least one dimension")
    count = math.prod(shape)
    if count * 4 > max_bytes:
        raise ProtocolError(
            f"{what}: {_fmt(shape)} is {count * 4} bytes as float32, cap {max_bytes}"
        )
    codes_dtype = _CODES[wire]
    if len(t.data) != count * codes_dtype.itemsize:
        raise ProtocolError(
            f"{what}: {len(t.data)} data bytes, expected {count * codes_dtype.itemsize} for "
            f"{_fmt(shape)} {wire}"
        )
    codes = _frombuffer(t.data, codes_dtype, shape, what)
    scales = None
    if wire == "int8":
        scales = _int8_scales(t.scales, shape, codes, what)
    elif t.scales:
        raise ProtocolError(f"{what}: scales are only sent with int8")
    out = quantize.decode(quantize.Encoded(wire, codes, scales))
    _check_finite(out, what)
    return out


def _frombuffer(data: bytes, dtype: np.dtype, shape: tuple[int, ...], what: str) -> np.ndarray:
    try:
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).reshape(shape)
    except ValueError as exc:  # e.g. (0, 2**62): zero bytes, but too big for numpy to index
        raise ProtocolError(f"{what}: shape {_fmt(shape)} cannot be represented: {exc}") from None


def _int8_scales(blob: bytes, shape: tuple[int, ...], codes: np.ndarray, what: str) -> np.ndarray:
    rows = quantize.row_count(shape)
    if len(blob) != rows * _SCALE.itemsize:
        raise ProtocolError(
            f"{what}: {len(blob)} scale bytes, expected {rows * _SCALE.itemsize} ({rows} rows)"
        )
    if codes.size and codes.min() < -quantize.INT8_MAX:
        raise ProtocolError(f"{what}: int8 code {int(codes.min())} outside [-127, 127]")
    scales = np.frombuffer(blob, dtype=_SCALE)
    if not np.isfinite(quantize.scales_from_bits(scales)).all():
        raise ProtocolError(f"{what}: non-finite int8 scale")
    return scales


def _allowed() -> str:
    return ", ".join(sorted(ALLOWED_DTYPES))


def _fmt(shape: tuple[object, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _check_dtype(name: str, what: str, expect: str | None) -> np.dtype:
    if name not in ALLOWED_DTYPES:
        raise ProtocolError(f"{what}: unknown dtype {name!r}; allowed: {_allowed()}")
    if expect is not None and name != expect:
        raise ProtocolError(f"{what}: dtype {name} does not match expected {expect}")
    return np.dtype(name)


def _check_shape(shape: tuple[int, ...], what: str, expect: Shape | None) -> tuple[int, ...]:
    if len(shape) > MAX_NDIM:
        raise ProtocolError(f"{what}: {len(shape)} dimensions, at most {MAX_NDIM} allowed")
    if any(d < 0 for d in shape):
        raise ProtocolError(f"{what}: negative dimension in shape {_fmt(shape)}")
    if expect is not None and (
        len(shape) != len(expect)
        or any(e is not None and d != e for d, e in zip(shape, expect, strict=True))
    ):
        wanted = _fmt(tuple("*" if e is None else e for e in expect))
        raise ProtocolError(f"{what}: shape {_fmt(shape)} does not match expected {wanted}")
    return shape


check_shape = _check_shape  # the shape check of every decoder (vfl_wire.relay_box's too)


def _check_finite(a: np.ndarray, what: str) -> None:
    bad = ~np.isfinite(a)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ProtocolError(
            f"{what}: {int(bad.sum())} non-finite value(s), first at index {_fmt(first)}"
        )
