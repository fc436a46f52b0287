"""What every message family of `vfl_wire.convert` shares: the header, peer-chosen names,
splits and round ids, and the typed array fields (index vectors, float matrices in the run's
wire dtype, maps of them by block, sorted block lists), each checked as untrusted input and
refused with one `ProtocolError` line that names the field."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import numpy as np
from google.protobuf.message import Message

from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.model.quantize import LOSSLESS
from vfl_core.protocol import PROTOCOL_VERSION, SPLITS, Sealed
from vfl_wire.relay_box import sealed_from_proto, sealed_to_proto
from vfl_wire.tensors import (
    MAX_TENSOR_BYTES,
    Shape,
    decode_array,
    decode_float,
    encode_array,
    encode_float,
)
from vfl_wire.v1 import vfl_pb2

Matrix = tuple[int | None, int | None]  # expected (rows, columns); None = any
ANY2: Matrix = (None, None)
K = TypeVar("K", int, str)  # map keys: block index or predictor name


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


def index_vector(t: vfl_pb2.Tensor, what: str, length: int | None = None) -> np.ndarray:
    """(B,) int64 of non-negative indices (rows or classes), sent as int64 or (encode_index) int32;
    negative ones would wrap in numpy."""
    expect = "int32" if t.dtype == "int32" else "int64"
    a = decode_array(t, what=what, expect_dtype=expect, expect_shape=(length,)).astype(np.int64)
    if a.size and a.min() < 0:
        pos = int(np.argmax(a < 0))
        raise ProtocolError(f"{what}: negative value {int(a[pos])} at position {pos}")
    return a


def matrix(
    t: vfl_pb2.Tensor, what: str, expect: Shape = ANY2, wire: str = LOSSLESS, sealed: bool = False
) -> np.ndarray:
    """(B, d) float32, sent as float32 or (embeddings, gradients) in the run's wire dtype.
    `sealed`: the receiver relays without reading (the coordinator with an encrypted relay), so
    a sealed tensor comes back as a `Sealed` (vfl_wire.relay_box); anywhere else it is refused."""
    if t.sealed:
        if not sealed:
            raise ProtocolError(
                f"{what}: sealed (an encrypted relay), but this party's run does not encrypt "
                "its relay or the box was not opened"
            )
        return sealed_from_proto(t, what, expect, wire, MAX_TENSOR_BYTES)  # type: ignore[return-value]
    return decode_float(t, wire, what=what, expect_shape=expect)


def block_map(
    m: Mapping[int, vfl_pb2.Tensor],
    what: str,
    expect: Matrix = ANY2,
    wire: str = LOSSLESS,
    sealed: bool = False,
) -> dict[int, np.ndarray]:
    """block -> (B, d) float32; every entry must have the same shape (one batch, one d)."""
    out: dict[int, np.ndarray] = {}
    shape: Shape = expect
    for block in sorted(m):
        name = f"{what} for block {block}"
        if block < 0:
            raise ProtocolError(f"{name}: negative block index")
        out[block] = matrix(m[block], name, shape, wire, sealed)
        shape = out[block].shape
    return out


def block_list(values: Sequence[int], what: str) -> tuple[int, ...]:
    """Distinct, non-negative, sorted block indices."""
    blocks = tuple(values)
    if any(b < 0 for b in blocks) or list(blocks) != sorted(set(blocks)):
        raise ProtocolError(f"{what}: {list(blocks)} is not a sorted list of distinct blocks")
    return blocks


def encode_map(arrays: Mapping[K, np.ndarray], what: str) -> dict[K, vfl_pb2.Tensor]:
    return {k: encode_array(v, what=f"{what} {k}") for k, v in arrays.items()}


def decode_map(
    m: Mapping[K, vfl_pb2.Tensor], decode: Callable[[vfl_pb2.Tensor, str], np.ndarray], what: str
) -> dict[K, np.ndarray]:
    """encode_map's inverse: every entry in key order through `decode`, named `{what} {key}`."""
    return {k: decode(m[k], f"{what} {k}") for k in sorted(m)}


def encode_floats(
    arrays: Mapping[int, np.ndarray], what: str, wire: str
) -> dict[int, vfl_pb2.Tensor]:
    """block -> embedding or gradient in the wire dtype (a sealed one as its boxes)."""
    return {k: encode_relayed(v, wire, f"{what} {k}") for k, v in arrays.items()}


def encode_relayed(a: np.ndarray | Sealed, wire: str, what: str) -> vfl_pb2.Tensor:
    """An embedding or gradient in the wire dtype, or as the boxes it was sealed in."""
    if isinstance(a, Sealed):
        return sealed_to_proto(a, wire)
    return encode_float(a, wire, what=what)


def require(msg: Message, field: str, what: str) -> None:
    if not msg.HasField(field):
        raise ProtocolError(f"{what}: missing")
