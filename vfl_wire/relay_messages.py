"""The Party service's messages through the encrypted relay: open the sealed tensors of a
request before it is converted, seal the embeddings and gradients of a reply after (and an
evaluation's probabilities, which only the label parties that score them open:
vfl_core.inference.blind).

The requests are opened in place into the plaintext messages the converters know
(vfl_wire.convert_party), so the party's learning code is the same with or without encryption.
A Backward's sealed per-head gradients are opened in place and stay apart: the party adds them
in head order (vfl_core.methods.gradient_sum.received_gradient), rounded as the coordinator's
sum would have been, so it steps on exactly the values of a plaintext run. The wire does no
arithmetic.
"""

from __future__ import annotations

from vfl_core.errors import ProtocolError
from vfl_wire.relay_box import EMBED, GRAD, INFER, PROBS
from vfl_wire.relay_crypto import RelayCrypto
from vfl_wire.v1 import vfl_pb2


def open_embeddings(relay: RelayCrypto, tensors, direction: int, round_id: int, rpc: str) -> None:
    """Each producer block's sealed embedding, opened in place."""
    for block, t in tensors.items():
        _, plain = relay.open(t, direction, round_id, block, f"{rpc} embedding of block {block}")
        t.CopyFrom(plain)


def open_backward(relay: RelayCrypto, req: vfl_pb2.BackwardRequest) -> None:
    """The heads' sealed gradients, opened in place and checked to be in head order; the party
    adds them (BackwardCall.summed), not the wire."""
    what = f"backward gradient of round {req.round_id}"
    if req.has_grad or req.HasField("grad"):
        raise ProtocolError(
            f"{what}: in the clear, but this run encrypts its relay (--encrypt-relay): refused"
        )
    heads: list[int] = []
    for t in req.parts:
        head, plain = relay.open(t, GRAD, req.round_id, None, f"{what} part {len(heads)}")
        if heads and head <= heads[-1]:
            raise ProtocolError(f"{what}: heads {[*heads, head]} not in head order: refused")
        heads.append(head)
        t.CopyFrom(plain)


def open_request(relay: RelayCrypto, rpc: str, request, wire: str) -> None:
    """Learn the relay keys of the request's header and open its sealed tensors in place."""
    relay.learn(request.header.relay_keys)
    if rpc == "Fuse":
        open_embeddings(relay, request.embeddings, EMBED, request.round_id, rpc)
    elif rpc == "Backward":
        open_backward(relay, request)
    elif rpc == "Predict":
        open_embeddings(relay, request.embeddings, INFER, request.request_id, rpc)
    elif rpc == "Score":
        for blind in request.blind:
            for head, t in blind.heads.items():
                what = f"Score: probabilities of head {head}, request {blind.request_id}"
                _, plain = relay.open(t, PROBS, blind.request_id, head, what)
                t.CopyFrom(plain)
    elif rpc == "Train":
        for b in request.backward:
            open_backward(relay, b)
        for f in request.fuse:
            open_embeddings(relay, f.embeddings, EMBED, f.round_id, rpc)


def seal_embedding(relay: RelayCrypto, reply: vfl_pb2.EmbedReply, train: bool) -> None:
    """The embedding for every party whose key this party holds (any may be a head), itself
    too for inference (a head predicts from its own embedding, which comes back in Predict)."""
    direction = EMBED if train else INFER
    consumers = [b for b in relay.peers if b != relay.block or not train]
    reply.embedding.CopyFrom(relay.seal(reply.embedding, direction, reply.round_id, consumers))


def seal_fused(relay: RelayCrypto, reply: vfl_pb2.FuseReply) -> None:
    """Each gradient for the party whose embedding it is."""
    for block, t in reply.grads.items():
        t.CopyFrom(relay.seal(t, GRAD, reply.round_id, (block,)))


def seal_reply(relay: RelayCrypto, rpc: str, request, reply) -> None:
    """Seal the embeddings and gradients of `reply` in place, and an evaluation's probabilities
    for the label parties that score them (a prediction the coordinator serves stays in the
    clear)."""
    if rpc == "Embed":
        seal_embedding(relay, reply, request.train)
    elif rpc == "Predict" and request.seal_for:  # an evaluation's: for the label parties only
        sealed = relay.seal(reply.probabilities, PROBS, reply.request_id, request.seal_for)
        reply.probabilities.CopyFrom(sealed)
    elif rpc == "Fuse":
        seal_fused(relay, reply)
    elif rpc == "Train":
        for f in reply.fused:
            seal_fused(relay, f)
        for e in reply.embeddings:
            seal_embedding(relay, e, True)
