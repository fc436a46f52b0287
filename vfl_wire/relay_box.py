"""Sealed tensors on the wire: the box format of the encrypted relay, and `Sealed` <-> `Tensor`.

With `TrainConfig.encrypt_relay` an embedding or gradient travels as a `vfl.v1.Tensor` whose
dtype and shape are in the clear (so the coordinator can check sizes, schedule and keep deadlines)
and whose values are one sealed box per consumer block in `Tensor.sealed`. A box is

    header   18 bytes   version (1), direction (1), round (int64), producer, consumer (int32),
                        big-endian: what the box is, in the clear, so a receiver can say why it
                        refuses one (replayed from another round, meant for another party)
    nonce    12 bytes   random (a round id can repeat after a resume: never a counter)
    sealed   n + 16     AES-256-GCM of the tensor's `data || scales`, n bytes, and its tag

and its associated data binds the header, the run id, the dtype and the shape
(`associated_data`). The coordinator, which holds none of the pair keys, sees sizes only; this
module needs no key (vfl_wire.relay_crypto seals and opens).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from vfl_core.errors import ProtocolError
from vfl_core.model import quantize
from vfl_core.protocol import Sealed
from vfl_wire.tensors import Shape, check_shape
from vfl_wire.v1 import vfl_pb2

VERSION = 1
HEADER = struct.Struct(">BBqii")
NONCE_BYTES = 12
TAG_BYTES = 16
# what a box holds: a training embedding, an inference embedding, a head's gradient, a head's
# probabilities of an evaluation batch (for the label party that scores them)
EMBED, INFER, GRAD, PROBS = 1, 2, 3, 4
DIRECTIONS = {
    EMBED: "training embedding",
    INFER: "inference embedding",
    GRAD: "gradient",
    PROBS: "evaluation prediction",
}
_ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1}


@dataclass(frozen=True)
class BoxHeader:
    direction: int
    round_id: int
    producer: int
    consumer: int

    def pack(self) -> bytes:
        return HEADER.pack(VERSION, self.direction, self.round_id, self.producer, self.consumer)

    def describe(self) -> str:
        return (
            f"{DIRECTIONS.get(self.direction, 'box')} of block {self.producer} for block "
            f"{self.consumer}, round {self.round_id}"
        )


def read_header(box: bytes, what: str) -> BoxHeader:
    if len(box) < HEADER.size + NONCE_BYTES + TAG_BYTES:
        raise ProtocolError(f"{what}: sealed box of {len(box)} bytes is too short")
    version, direction, round_id, producer, consumer = HEADER.unpack_from(box)
    if version != VERSION or direction not in DIRECTIONS:
        raise ProtocolError(f"{what}: sealed box of version {version}, direction {direction}")
    return BoxHeader(direction, round_id, producer, consumer)


def associated_data(header: bytes, run_id: str, dtype: str, shape: tuple[int, ...]) -> bytes:
    """What a box is bound to besides its header: the run, the dtype and the shape."""
    dims = b"".join(struct.pack(">q", d) for d in shape)
    return b"\0".join((header, run_id.encode(), dtype.encode(), dims))


def scale_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of the int8 scales of a tensor of `shape` (0 for the other wire dtypes)."""
    return quantize.row_count(shape) if dtype == "int8" and shape else 0


def payload_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of `data || scales` of a tensor of `shape` in the wire dtype `dtype`."""
    if dtype not in _ITEMSIZE:
        raise ProtocolError(f"sealed tensor: dtype {dtype[:40]!r} is not a wire dtype")
    return math.prod(shape) * _ITEMSIZE[dtype] + scale_bytes(dtype, shape)


def box_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    return HEADER.size + NONCE_BYTES + payload_bytes(dtype, shape) + TAG_BYTES


def sealed_to_proto(s: Sealed, wire: str) -> vfl_pb2.Tensor:
    return vfl_pb2.Tensor(dtype=wire, shape=s.shape, sealed=s.boxes)


def sealed_from_proto(
    t: vfl_pb2.Tensor, what: str, expect: Shape | None, wire: str, max_bytes: int
) -> Sealed:
    """A sealed tensor as the coordinator checks it: the run's wire dtype, the shape expected,
    no values in the clear, and every box exactly as long as a box of that shape."""
    if t.dtype != wire:
        raise ProtocolError(f"{what}: dtype {t.dtype[:40]!r} does not match expected {wire}")
    shape = check_shape(tuple(t.shape), what, expect)
    if t.data or t.scales:
        raise ProtocolError(f"{what}: sealed and in the clear at once")
    if math.prod(shape) * 4 > max_bytes:
        raise ProtocolError(f"{what}: {shape} is {math.prod(shape) * 4} bytes, cap {max_bytes}")
    size = box_bytes(wire, shape)
    for consumer, box in t.sealed.items():
        if consumer < 0 or len(box) != size:
            raise ProtocolError(
                f"{what}: box for block {consumer} of {len(box)} bytes, expected {size}"
            )
    return Sealed(shape, dict(sorted(t.sealed.items())))


def narrow(tensors: Mapping[int, vfl_pb2.Tensor], consumer: int) -> None:
    """Keep only `consumer`'s box in each sealed tensor (the others are of no use to it)."""
    for t in tensors.values():
        if not t.sealed:
            continue
        mine = t.sealed.get(consumer)
        t.ClearField("sealed")
        if mine is not None:
            t.sealed[consumer] = mine
