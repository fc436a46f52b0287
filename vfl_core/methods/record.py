"""What one step of a method carries, independent of any transport.

A step's call and its answer are both a `Record`: named tensors, named maps of tensors keyed by
block (one activation per guest, one gradient per party) and small typed scalars. A call also
has a `StepHeader`: the round (or inference request), and where the step names them the split,
the party's own rows and their digest. The gRPC transport carries both as a `vfl.v1.StepRequest`
(vfl_wire.records); the in-process transport passes copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

Scalar = int | float | bool | str


@dataclass(frozen=True)
class StepHeader:
    round_id: int  # the training round or inference request; the answer echoes it
    split: str = ""  # "train" or "test" where the step names one
    rows: np.ndarray | None = None  # (B,) int64, the party's own rows, where the step has them
    digest: bytes = b""  # sha256 over the keyed ID hashes of those rows, in order


@dataclass
class Record:
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    maps: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    scalars: dict[str, Scalar] = field(default_factory=dict)

    def copy(self) -> Record:
        """A copy that shares no array memory with this one (what a receiver off the wire has)."""
        return Record(
            {k: v.copy() for k, v in self.tensors.items()},
            {k: {b: a.copy() for b, a in m.items()} for k, m in self.maps.items()},
            dict(self.scalars),
        )


def copy_header(h: StepHeader) -> StepHeader:
    rows = None if h.rows is None else h.rows.copy()
    return StepHeader(h.round_id, h.split, rows, h.digest)
