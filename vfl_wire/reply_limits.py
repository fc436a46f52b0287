"""The most a party's reply to each call may carry: the coordinator's channel to a party refuses
a larger reply from its 5-byte length prefix, before reading it.

Why per call. One receive limit per channel must fit the largest reply of all (a Train or Fuse
reply of several tensors: MAX_MESSAGE_BYTES, 128 MiB), so a party could make the coordinator read
128 MiB where the call carries one tensor (at most MAX_TENSOR_BYTES, 64 MiB) or an
acknowledgement, and only then refuse it: a chaos run saw 660 MB of peak RSS at 4 clients, 1.98 GB
at 16. gRPC's service config sets `maxResponseMessageBytes` per method (the channel's limit still
applies above it), and the check is made on the message's length prefix: on this machine a
120 MiB reply over an 8 MiB limit was refused with +2 MB of RSS, against +363 MB to receive it.

What each call may carry (the wire's own caps, vfl_wire.tensors and vfl_wire.convert):
- one tensor (Embed: an embedding; Predict: probabilities): MAX_TENSOR_BYTES and its framing;
- the party's own rows (IdHashes: 32-byte hashes; PsiBlind: 32-byte points) of its largest split,
  as it registered them;
- another party's PSI list (PsiApply): MAX_PSI_POINTS points, as a request may carry;
- an acknowledgement or a few scalars (Backward, Shutdown, PsiKeys, Checkpoint, ClassWeights,
  Absent);
- several tensors (Fuse, Train, Score, Step): the channel's limit, MAX_MESSAGE_BYTES; so too
  Round, whose reply carries the direct data plane's status and, for an evaluation on that
  plane, the label party's Score aggregates of every batch (up to
  vfl_core.training.direct_eval.MAX_BATCHES of them, each what a Score reply carries: a binary
  task's 2 x AUC_BINS histogram per scored prediction is 16 KiB, so four batches of two
  predictions already pass 64 KiB).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from vfl_core.training.psi import POINT_BYTES
from vfl_wire.channels import MAX_MESSAGE_BYTES
from vfl_wire.convert import MAX_PSI_POINTS
from vfl_wire.tensors import MAX_TENSOR_BYTES

SERVICE = "vfl.v1.Party"
FRAMING = 64 * 1024  # field tags, lengths, a tensor's dtype and shape, the round id
SMALL_REPLY = 64 * 1024  # an Ack, a checkpoint's answer, class weights (a few thousand floats)
HASH_ON_WIRE = 32 + 2  # one repeated 32-byte field: tag, length, value


def party_reply_limits(rows: int) -> dict[str, int]:
    """Bytes each Party call's reply may take, for a party whose largest split has `rows` rows."""
    tensor = MAX_TENSOR_BYTES + FRAMING
    small = {m: SMALL_REPLY for m in ("Backward", "Shutdown", "PsiKeys", "Checkpoint", "Absent")}
    return {
        **small,
        "ClassWeights": SMALL_REPLY,
        "Embed": tensor,
        "Predict": tensor,
        "IdHashes": rows * HASH_ON_WIRE + FRAMING,
        "PsiBlind": rows * POINT_BYTES + FRAMING,
        "PsiApply": MAX_PSI_POINTS * POINT_BYTES + FRAMING,
        **dict.fromkeys(("Fuse", "Train", "Score", "Step", "Round"), MAX_MESSAGE_BYTES),
    }


def service_config(limits: Mapping[str, int], service: str = SERVICE) -> str:
    """The gRPC service config (JSON) that sets each method's largest reply."""
    configs = [
        {"name": [{"service": service, "method": m}], "maxResponseMessageBytes": str(n)}
        for m, n in sorted(limits.items())
    ]
    return json.dumps({"methodConfig": configs})
