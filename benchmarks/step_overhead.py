"""What LASER's hot path would cost on the generic Step: the message work of one round.

    python -m benchmarks.step_overhead [--batch 128] [--width 32] [--parties 4] [--rounds 300]

One sequential round of LASER-VFL with K parties that all hold labels sends K Embed (rows in, a
B x d embedding out), K Fuse (K-1 embeddings in, K-1 gradients and a loss out) and K Backward
(one gradient in). This times, in one process (CPU time), the work those messages cost on both
sides: build the request, serialize, parse, decode and check it, build the reply, serialize,
parse, decode and check it; once with the dedicated messages and converters (vfl_wire.convert)
and once with the same content as generic StepRequests/StepReplies checked against schemas
(vfl_wire.records, vfl_core.methods). The model's arithmetic is not in it: compare the difference
with a round's whole CPU (`vfl bench throughput`, benchmarks/results/throughput.md).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from vfl_core.methods.record import Record, StepHeader
from vfl_core.methods.schema import BATCH, ScalarSpec, Schema, TensorSpec, check
from vfl_core.protocol import BackwardCall, EmbedCall, FuseCall, FuseResult
from vfl_wire import convert, records
from vfl_wire.v1 import vfl_pb2

WIDTH = "d"
EMBED = Schema((ScalarSpec("train", bool),), split=True, rows="required", what="embed")
EMBEDDING = Schema((TensorSpec("embedding", "float32", (BATCH, WIDTH)),))
FUSE = Schema(
    (
        ScalarSpec("epoch", int, low=0),
        TensorSpec("embeddings", "float32", (BATCH, WIDTH), keyed=True),
    )
)
GRADS = Schema(
    (ScalarSpec("loss", float), TensorSpec("grads", "float32", (BATCH, WIDTH), keyed=True))
)
BACKWARD = Schema(
    (ScalarSpec("epoch", int, low=0), TensorSpec("grad", "float32", (BATCH, WIDTH), optional=True))
)
EMPTY = Schema()


def dedicated_round(k: int, rows: np.ndarray, e: np.ndarray, h: vfl_pb2.Header) -> None:
    """One round's messages through the dedicated converters, serialized and parsed."""
    others = {b: e for b in range(1, k)}
    for _ in range(k):
        req = vfl_pb2.EmbedRequest.FromString(
            convert.embed_call_to_proto(
                EmbedCall(3, "train", rows, b"d" * 32, True), h
            ).SerializeToString()
        )
        call = convert.embed_call_from_proto(req)
        reply = vfl_pb2.EmbedReply.FromString(
            convert.embedding_to_proto(call.round_id, e).SerializeToString()
        )
        convert.embedding_from_proto(reply, round_id=3, expect_shape=e.shape)
    for _ in range(k):
        req = vfl_pb2.FuseRequest.FromString(
            convert.fuse_call_to_proto(FuseCall(3, 0, others), h).SerializeToString()
        )
        call = convert.fuse_call_from_proto(req, expect_shape=e.shape)
        reply = vfl_pb2.FuseReply.FromString(
            convert.fuse_result_to_proto(FuseResult(0.5, others), 3).SerializeToString()
        )
        convert.fuse_result_from_proto(reply, round_id=3, expect_shape=e.shape)
    for _ in range(k):
        req = vfl_pb2.BackwardRequest.FromString(
            convert.backward_call_to_proto(BackwardCall(3, 0, e), h).SerializeToString()
        )
        convert.backward_call_from_proto(req, expect_shape=e.shape)
        vfl_pb2.Ack.FromString(vfl_pb2.Ack().SerializeToString())


def _step(
    h: vfl_pb2.Header,
    header: StepHeader,
    record: Record,
    schemas: tuple[Schema, Schema],
    answer: Record,
    dims: dict[str, int],
) -> None:
    """One generic step: request checked (as PartyClient.step does before sending), built,
    serialized, parsed, decoded and checked; the reply built, serialized, parsed and checked."""
    check(schemas[0], record, header, {})
    request = vfl_pb2.StepRequest.FromString(
        records.step_request("laser", "x", header, record, h).SerializeToString()
    )
    got_header, got = records.request_from_proto(request, schemas[0])
    bound = check(schemas[0], got, got_header, dims)
    reply = vfl_pb2.StepReply.FromString(records.step_reply(request, answer).SerializeToString())
    check(schemas[1], records.reply_from_proto(reply, request, schemas[1]), None, bound)


def generic_round(k: int, rows: np.ndarray, e: np.ndarray, h: vfl_pb2.Header) -> None:
    """The same content as generic steps checked against their schemas."""
    others = {b: e for b in range(1, k)}
    dims = {WIDTH: e.shape[1]}
    embed = (StepHeader(3, "train", rows, b"d" * 32), Record(scalars={"train": True}))
    fuse = (StepHeader(3), Record(maps={"embeddings": others}, scalars={"epoch": 0}))
    backward = (StepHeader(3), Record(tensors={"grad": e}, scalars={"epoch": 0}))
    for _ in range(k):
        _step(h, *embed, (EMBED, EMBEDDING), Record(tensors={"embedding": e}), dims)
    for _ in range(k):
        grads = Record(maps={"grads": others}, scalars={"loss": 0.5})
        _step(h, *fuse, (FUSE, GRADS), grads, dims)
    for _ in range(k):
        _step(h, *backward, (BACKWARD, EMPTY), Record(), dims)


def cpu_ms(run: Callable[[], None], rounds: int) -> float:
    """CPU milliseconds per call of `run` (the median of three timings of `rounds` calls)."""
    times = []
    for _ in range(3):
        start = time.process_time()
        for _ in range(rounds):
            run()
        times.append((time.process_time() - start) / rounds * 1e3)
    return sorted(times)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--parties", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = rng.permutation(10_000)[: args.batch].astype(np.int64)
    e = rng.normal(size=(args.batch, args.width)).astype(np.float32)
    h = convert.header("run", "party0")
    k = args.parties
    dedicated = cpu_ms(lambda: dedicated_round(k, rows, e, h), args.rounds)
    generic = cpu_ms(lambda: generic_round(k, rows, e, h), args.rounds)
    print(
        f"K={k}, B={args.batch}, d={args.width}: message work per round: dedicated "
        f"{dedicated:.3f} ms, generic Step {generic:.3f} ms, "
        f"difference {generic - dedicated:+.3f} ms"
    )


if __name__ == "__main__":
    main()
