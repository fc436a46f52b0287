"""Smaller embeddings and gradients on the wire: the rounding, independent of any transport.

`TrainConfig.wire_dtype` says how embeddings and gradients travel between parties and the
coordinator: float32 (lossless, the default), float16, bfloat16, or int8 with one scale per row.
Parties and the engine always compute in float32; only what crosses the wire is rounded. The gRPC
transport encodes with `encode` and decodes with `decode` (vfl_wire.tensors packs the arrays into
bytes); the in-process transport applies `round_trip` at the same places, which is `decode` of
`encode`, so both transports see the same float32 values bit for bit.

The formats:
- float16: IEEE half; values beyond +-65504 saturate (never inf). Gradients below 6e-8 flush to
  zero (the accuracy cost of that is measured in benchmarks/results/wire_dtype.md).
- bfloat16: the upper 16 bits of a float32, rounded to nearest even; float32's range, 8 bits of
  mantissa; saturates at +-3.39e38.
- int8: per row r (the last axis is a row's values), a scale s_r and codes q = rint(x / s_r) in
  [-127, 127]; x' = q * s_r. The scale is max|x_r| / 127 rounded *up* to a power of two and
  travels as one byte, float32's biased exponent e (s_r = 2^(e - 127)): one byte per row instead
  of two, which keeps int8 messages under 0.3x float32 even for 10-wide embeddings (d + 1 bytes a
  row against 4d). The price is resolution: a row's largest |q| lies in [64, 127] instead of being
  127, so the rounding step is at most twice the exact per-row step (measured in
  benchmarks/results/wire_dtype.md). Dividing by and multiplying with a power of two is exact, so
  encoding x' again gives the same scale and codes (its largest |q| >= 64 puts max|x'| / 127 in
  (s_r / 2, s_r]). A row whose largest |value| is below 127 * 1.18e-38 (its scale would be
  subnormal) is sent as zeros (e = 0, a zero scale); values beyond 127 * 2^121 (3.38e38)
  saturate.
Every format is idempotent (round_trip(round_trip(x)) == round_trip(x)), so the coordinator may
decode and re-encode what it relays without drift.
A row holding NaN or Inf encodes to an infinite scale (int8, e = 255) or non-finite values, which
every receiver refuses, as it refuses a non-finite float32.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

WireDtype = Literal["float32", "float16", "bfloat16", "int8"]
WIRE_DTYPES: tuple[str, ...] = get_args(WireDtype)
LOSSLESS = "float32"

FLOAT16_MAX = float(np.finfo(np.float16).max)  # 65504
BFLOAT16_MAX = float(np.uint32(0x7F7F0000).view(np.float32))  # 3.3895314e38
INT8_MAX = 127
_BF16_NAN = np.uint16(0x7FC0)
_SCALE_INF = np.uint8(0xFF)  # float32's exponent field of Inf
_MANTISSA = np.uint32(0x7FFFFF)
_TOP_EXPONENT = np.uint32(127 + 121)  # the largest scale, 2^121: 127 * 2^121 < float32 max


@dataclass(frozen=True)
class Encoded:
    """An array as it travels: `codes` (float32, float16, uint16 bfloat16 bits or int8) in the
    array's shape, and for int8 `scales`, one scale per row as float32's biased exponent (uint8)."""

    dtype: str
    codes: np.ndarray
    scales: np.ndarray | None = None


def encode(x: np.ndarray, dtype: str) -> Encoded:
    """`x` (float32, at least one dimension for int8) in the wire format `dtype`."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "float32":
        return Encoded(dtype, x)
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype == "float16":
            return Encoded(dtype, np.clip(x, -FLOAT16_MAX, FLOAT16_MAX).astype(np.float16))
        if dtype == "bfloat16":
            return Encoded(dtype, to_bfloat16(np.clip(x, -BFLOAT16_MAX, BFLOAT16_MAX)))
        if dtype == "int8":
            return _encode_int8(x)
    raise ValueError(f"unknown wire dtype {dtype!r}; choose from {', '.join(WIRE_DTYPES)}")


def decode(e: Encoded) -> np.ndarray:
    """The float32 values of an encoded array (a new array, C order)."""
    if e.dtype == "float32":
        return np.array(e.codes, dtype=np.float32, order="C")
    if e.dtype == "float16":
        return e.codes.astype(np.float32)
    if e.dtype == "bfloat16":
        return from_bfloat16(e.codes)
    if e.dtype == "int8":
        assert e.scales is not None
        shape = e.codes.shape
        rows = e.codes.reshape(row_count(shape), shape[-1]).astype(np.float32)  # (R, d)
        scales = scales_from_bits(e.scales)[:, None]  # (R, 1)
        with np.errstate(over="ignore", invalid="ignore"):  # hostile scales: caught as non-finite
            return (rows * scales).reshape(e.codes.shape)
    raise ValueError(f"unknown wire dtype {e.dtype!r}; choose from {', '.join(WIRE_DTYPES)}")


def round_trip(x: np.ndarray, dtype: str) -> np.ndarray:
    """What the receiver of `x` sent in `dtype` gets (float32; `x` itself when lossless)."""
    if dtype == LOSSLESS:
        return x
    return decode(encode(x, dtype))


def row_count(shape: tuple[int, ...]) -> int:
    """How many int8 scales an array of `shape` carries: one per row (all axes but the last)."""
    return int(np.prod(shape[:-1], dtype=np.int64))


def to_bfloat16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded to nearest even; NaN stays NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
    out = rounded.astype(np.uint16)
    return np.where(np.isnan(x), _BF16_NAN, out)


def from_bfloat16(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bits (uint16) -> float32 (exact)."""
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)


def _scale_bits(amax: np.ndarray) -> np.ndarray:
    """Scales amax / 127 rounded up to a power of two, as float32's biased exponent (uint8); a
    row too small for a normal scale gets 0 (a zero scale), a non-finite row 255 (Inf)."""
    scale = (amax / np.float32(INT8_MAX)).astype(np.float32)
    bits = scale.view(np.uint32)
    up = (bits >> np.uint32(23)) + ((bits & _MANTISSA) != 0).astype(np.uint32)
    up = np.minimum(up, _TOP_EXPONENT)  # 127 * 2^122 would overflow: saturate at 127 * 2^121
    up = np.where(scale < np.finfo(np.float32).tiny, np.uint32(0), up).astype(np.uint8)
    return np.where(np.isfinite(scale), up, _SCALE_INF)


def scales_from_bits(bits: np.ndarray) -> np.ndarray:
    """uint8 exponent bytes -> float32 powers of two (exact; 0 -> 0.0, 255 -> Inf)."""
    return (bits.astype(np.uint32) << np.uint32(23)).view(np.float32)


def _encode_int8(x: np.ndarray) -> Encoded:
    if x.ndim == 0:
        raise ValueError("int8 wire encoding needs at least one dimension (rows of values)")
    rows = x.reshape(row_count(x.shape), x.shape[-1])  # (R, d)
    amax = np.max(np.abs(rows), axis=1, initial=np.float32(0))  # (R,)
    bits = _scale_bits(amax)  # (R,)
    scales = scales_from_bits(bits)[:, None]  # (R, 1)
    usable = np.isfinite(scales) & (scales > 0)
    q = np.divide(rows, scales, out=np.zeros_like(rows), where=usable)
    q = np.clip(np.rint(q), -INT8_MAX, INT8_MAX)
    q = np.where(np.isfinite(q), q, 0).astype(np.int8)
    return Encoded("int8", q.reshape(x.shape), bits)
