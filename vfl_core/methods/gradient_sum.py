"""The heads' gradients for one party's embedding, added in head order: the coordinator's sum
(vfl_core.training.laser_round), and with an encrypted relay the party's own, which must equal it
bit for bit (the coordinator relays the sealed gradients unsummed: it cannot add them)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from vfl_core.errors import ProtocolError
from vfl_core.model.quantize import round_trip
from vfl_core.protocol import BackwardCall, Sealed


def add_in_order(grads: Sequence[np.ndarray]) -> np.ndarray | None:
    """The sum of `grads`, added in their order."""
    total: np.ndarray | None = None
    for grad in grads:
        total = grad.copy() if total is None else total + grad
    return total


def received_gradient(call: BackwardCall, wire: str) -> np.ndarray | None:
    """The other heads' gradient as the party steps on it: `call.grad`, or its opened `parts`
    added in head order and rounded to the wire dtype `wire` as the coordinator's sum would
    have been on its way (so an encrypted run steps on the plaintext run's values)."""
    if not call.parts:
        return call.grad
    if any(isinstance(p, Sealed) for p in call.parts):
        raise ProtocolError(f"backward of round {call.round_id}: gradients still sealed")
    shapes = {p.shape for p in call.parts}
    if len(shapes) > 1:
        raise ProtocolError(f"backward of round {call.round_id}: parts of shapes {shapes}")
    total = add_in_order(call.parts)  # type: ignore[arg-type]
    return None if total is None else round_trip(total, wire)
