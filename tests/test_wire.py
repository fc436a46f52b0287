"""The wire layer: tensor codec, proto <-> vfl_core conversions, channels, generated stubs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vfl_core.errors import ProtocolError, StaleRoundError
from vfl_core.inference.metrics import ROW_METRICS, MetricRow
from vfl_core.protocol import (
    PROTOCOL_VERSION,
    BackwardCall,
    BlindPrediction,
    EmbedCall,
    FuseCall,
    FuseResult,
    PartyInfo,
    PredictCall,
    ScoreCall,
    ScoreResult,
)
from vfl_wire import channels, codegen, convert
from vfl_wire.tensors import ALLOWED_DTYPES, MAX_TENSOR_BYTES, decode_array, encode_array
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
RNG = np.random.default_rng(0)
HDR = convert.header("run-1", "party-a")


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def rows(n: int) -> np.ndarray:
    return np.arange(n, dtype=np.int64)[::-1].copy()


def wire(msg):
    """Serialize and parse, as the network would."""
    return type(msg).FromString(msg.SerializeToString())


def assert_maps_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype
        np.testing.assert_array_equal(a[k], b[k])


def tensor(dtype: str, shape: tuple[int, ...], nbytes: int | None = None) -> vfl_pb2.Tensor:
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize if nbytes is None else nbytes
    return vfl_pb2.Tensor(dtype=dtype, shape=shape, data=bytes(size))


# ---------------------------------------------------------------------------------------------
# Tensor codec
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", sorted(ALLOWED_DTYPES))
@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (5,), (2, 3, 4)])
def test_given_allowed_array_when_round_tripped_then_equal_owned_writable(dtype, shape):
    a = (RNG.standard_normal(shape) * 100).astype(dtype)
    out = decode_array(wire(encode_array(a)))
    assert out.dtype == a.dtype and out.shape == a.shape
    np.testing.assert_array_equal(out, a)
    assert out.flags.writeable and out.flags.owndata and out.dtype.isnative


def test_given_big_endian_or_strided_array_when_encoded_then_wire_is_little_endian_c_order():
    a = np.arange(12, dtype=">f4").reshape(3, 4).T  # big-endian and not C-contiguous
    t = encode_array(a)
    assert t.data == np.ascontiguousarray(a, dtype="<f4").tobytes()
    assert tuple(t.shape) == (4, 3)
    out = decode_array(t)
    assert out.dtype == np.dtype("float32") and out.dtype.isnative
    np.testing.assert_array_equal(out, a)


_DTYPES = st.sampled_from(sorted(ALLOWED_DTYPES)).flatmap(
    lambda name: st.sampled_from([np.dtype(name), np.dtype(name).newbyteorder(">")])
)


@settings(max_examples=150, deadline=None, database=None)
@given(hnp.arrays(_DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6)))
def test_property_encode_decode_is_bit_exact_for_any_shape_and_dtype(a):
    out = decode_array(wire(encode_array(a)), allow_nonfinite=True)
    native = a.astype(a.dtype.newbyteorder("="))
    assert out.shape == a.shape and out.dtype == native.dtype
    assert out.tobytes() == native.tobytes()  # bitwise, so NaN payloads and -0.0 survive


@settings(max_examples=200, deadline=None, database=None)
@given(
    dtype=st.sampled_from([*sorted(ALLOWED_DTYPES), "bool", "object", "", "float128"]),
    shape=st.lists(st.integers(-3, 2**62), max_size=5),
    data=st.binary(max_size=64),
)
def test_property_decode_of_arbitrary_message_returns_consistent_array_or_protocol_error(
    dtype, shape, data
):
    t = vfl_pb2.Tensor(dtype=dtype, shape=shape, data=data)
    try:
        out = decode_array(t, allow_nonfinite=True)
    except ProtocolError as exc:
        assert "\n" not in str(exc)
        return
    assert out.dtype.name == dtype and out.shape == tuple(shape) and out.nbytes == len(data)


@pytest.mark.parametrize(
    ("t", "kwargs", "message"),
    [
        (tensor("bool", (2,)), {}, "unknown dtype 'bool'"),
        (tensor("float64", (2,)), {"expect_dtype": "float32"}, "dtype float64 does not match"),
        (tensor("float32", (2, 3), nbytes=20), {}, "20 data bytes, expected 24"),
        (tensor("float32", (2, 3), nbytes=28), {}, "28 data bytes, expected 24"),
        (tensor("float32", (2, -3), nbytes=0), {}, "negative dimension"),
        (tensor("float32", (1,) * 33), {}, "33 dimensions"),
        (tensor("float32", (0, 2**62, 2**62), nbytes=0), {}, "cannot be represented"),
        (tensor("float32", (4, 4)), {"max_bytes": 63}, "64 bytes, cap 63"),
        (tensor("float32", (4, 4)), {"expect_shape": (4,)}, "does not match expected (4,)"),
        (tensor("float32", (4, 4)), {"expect_shape": (None, 5)}, "expected (*, 5)"),
    ],
)
def test_given_bad_tensor_when_decoded_then_protocol_error_names_field(t, kwargs, message):
    with pytest.raises(ProtocolError, match=r"^grads: ") as info:
        decode_array(t, what="grads", **kwargs)
    assert message in str(info.value)


def test_given_shape_mismatch_then_message_names_both_shapes():
    t = encode_array(f32(64, 32))
    with pytest.raises(ProtocolError) as info:
        decode_array(t, what="embedding for block 2", expect_shape=(64, 64))
    assert (
        str(info.value) == "embedding for block 2: shape (64, 32) does not match expected (64, 64)"
    )


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_given_nonfinite_float_when_decoded_then_rejected_unless_allowed(bad, dtype):
    a = np.zeros((2, 3), dtype=dtype)
    a[1, 2] = bad
    with pytest.raises(ProtocolError, match=r"1 non-finite value\(s\), first at index \(1, 2\)"):
        decode_array(encode_array(a))
    assert not np.isfinite(decode_array(encode_array(a), allow_nonfinite=True)[1, 2])


def test_oversize_default_cap_is_checked_before_touching_data():
    side = int((MAX_TENSOR_BYTES // 4) ** 0.5) + 1
    with pytest.raises(ProtocolError, match="cap"):
        decode_array(vfl_pb2.Tensor(dtype="float32", shape=(side, side), data=b""))


def test_given_unsupported_dtype_when_encoded_then_protocol_error():
    with pytest.raises(ProtocolError, match="cannot send dtype bool"):
        encode_array(np.zeros(3, dtype=bool))


# ---------------------------------------------------------------------------------------------
# Header
# ---------------------------------------------------------------------------------------------


def test_header_round_trip_and_accepts_matching_or_unchecked_fields():
    h = wire(HDR)
    assert (h.protocol_version, h.run_id, h.party_id) == (PROTOCOL_VERSION, "run-1", "party-a")
    convert.check_header(h, run_id="run-1", party_id="party-a")
    convert.check_header(h, run_id=None, party_id=None)


@pytest.mark.parametrize(
    ("h", "message"),
    [
        (
            vfl_pb2.Header(protocol_version=PROTOCOL_VERSION + 1, run_id="run-1", party_id="a"),
            f"protocol version {PROTOCOL_VERSION + 1} does not match expected {PROTOCOL_VERSION}",
        ),
        (vfl_pb2.Header(), "protocol version 0 (missing header?)"),
        (convert.header("run-0", "party-a"), "run id 'run-0' does not match expected 'run-1'"),
        (
            convert.header("run-1", "party-b"),
            "party id 'party-b' does not match expected 'party-a'",
        ),
    ],
)
def test_given_wrong_header_when_checked_then_protocol_error(h, message):
    with pytest.raises(ProtocolError) as info:
        convert.check_header(h, run_id="run-1", party_id="party-a")
    assert message in str(info.value)


# ---------------------------------------------------------------------------------------------
# Conversions: round trips
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 5])
def test_embed_call_and_reply_round_trip(n):
    call = EmbedCall(round_id=7, split="train", rows=rows(n), digest=b"\x01" * 32, train=True)
    req = wire(convert.embed_call_to_proto(call, HDR))
    assert req.header == HDR
    back = convert.embed_call_from_proto(req)
    assert (back.round_id, back.split, back.digest, back.train) == (7, "train", b"\x01" * 32, True)
    np.testing.assert_array_equal(back.rows, call.rows)
    assert back.rows.dtype == np.int64

    e = f32(n, 8)
    reply = wire(convert.embedding_to_proto(7, e))
    out = convert.embedding_from_proto(reply, round_id=7, expect_shape=(n, 8))
    np.testing.assert_array_equal(out, e)


@pytest.mark.parametrize("embeddings", [{}, {0: f32(4, 3), 2: f32(4, 3)}])
def test_fuse_call_and_result_round_trip(embeddings):
    call = FuseCall(round_id=3, epoch=1, embeddings=embeddings, batch=64)
    back = convert.fuse_call_from_proto(wire(convert.fuse_call_to_proto(call, HDR)))
    assert (back.round_id, back.epoch, back.batch) == (3, 1, 64)
    assert_maps_equal(back.embeddings, embeddings)

    result = FuseResult(loss=0.693, grads=embeddings)
    out = convert.fuse_result_from_proto(wire(convert.fuse_result_to_proto(result, 3)), round_id=3)
    assert out.loss == 0.693
    assert_maps_equal(out.grads, embeddings)


@pytest.mark.parametrize("grad", [None, f32(4, 3), f32(0, 3)])
def test_backward_call_round_trip_including_none(grad):
    call = BackwardCall(round_id=9, epoch=2, grad=grad)
    req = wire(convert.backward_call_to_proto(call, HDR))
    assert req.has_grad == (grad is not None)
    back = convert.backward_call_from_proto(req)
    assert (back.round_id, back.epoch) == (9, 2)
    if grad is None:
        assert back.grad is None
    else:
        np.testing.assert_array_equal(back.grad, grad)


@pytest.mark.parametrize("embeddings", [{}, {1: f32(6, 2)}, {0: f32(6, 2), 3: f32(6, 2)}])
def test_predict_call_and_reply_round_trip(embeddings):
    call = PredictCall(request_id=11, embeddings=embeddings)
    back = convert.predict_call_from_proto(wire(convert.predict_call_to_proto(call, HDR)))
    assert back.request_id == 11
    assert_maps_equal(back.embeddings, embeddings)

    p = np.full((6, 10), 0.1, dtype=np.float32)
    out = convert.probabilities_from_proto(
        wire(convert.probabilities_to_proto(11, p)), request_id=11, expect_shape=(6, 10)
    )
    np.testing.assert_array_equal(out, p)


@pytest.mark.parametrize("n", [0, 4])
def test_score_call_and_reply_round_trip(n):
    predictions = {"federation": np.zeros(n, np.int64), "party-0": np.ones(n, np.int64)}
    call = ScoreCall(split="test", rows=rows(n), digest=b"d", predictions=predictions)
    back = convert.score_call_from_proto(wire(convert.score_call_to_proto(call, HDR)))
    assert (back.split, back.digest) == ("test", b"d")
    np.testing.assert_array_equal(back.rows, call.rows)
    assert_maps_equal(back.predictions, predictions)

    confusion = {"federation": np.array([[3, 1], [0, 4]], np.int64), "empty": np.zeros((0, 0))}
    confusion["empty"] = confusion["empty"].astype(np.int64)
    reply = ScoreResult(confusion=confusion)
    out = convert.score_reply_from_proto(wire(convert.score_reply_to_proto(reply)))
    assert_maps_equal(out.confusion, confusion)
    assert not out.histograms and not out.sums
    assert convert.score_reply_from_proto(wire(convert.score_reply_to_proto(ScoreResult()))) == (
        ScoreResult()
    )


def test_three_class_scores_and_brier_sums_round_trip_and_bad_ones_are_refused():
    probs = np.full((4, 3), 1 / 3, np.float32)
    call = ScoreCall("test", rows(4), b"d", {"0": np.zeros(4, np.int64)}, {"0": probs})
    back = convert.score_call_from_proto(wire(convert.score_call_to_proto(call, HDR)))
    np.testing.assert_array_equal(back.scores["0"], probs)
    for bad in (np.full((3, 3), 0.5, np.float32), np.full((4, 3, 1), 0.5, np.float32)):
        with pytest.raises(ProtocolError, match="scores of"):
            bad_call = replace(call, scores={"0": bad})
            convert.score_call_from_proto(wire(convert.score_call_to_proto(bad_call, HDR)))
    reply = ScoreResult(brier={"0": np.array([1.5, 0.75])})
    out = convert.score_reply_from_proto(wire(convert.score_reply_to_proto(reply)))
    assert_maps_equal(out.brier, reply.brier)
    for sums, message in [
        (np.array([-1.0, 0.5]), "negative sum"),
        (np.zeros(3), "shape"),
        (np.zeros(2, np.float32), "dtype float32"),
    ]:
        with pytest.raises(ProtocolError, match=message):
            convert.score_reply_from_proto(
                wire(convert.score_reply_to_proto(ScoreResult(brier={"0": sums})))
            )


def test_blind_score_call_of_several_batches_round_trips_and_sizes_must_add_up():
    p = np.full((5, 2), 0.5, np.float32)
    parts = (
        BlindPrediction(7, {0: p[:2]}, (0, 1), 0, 0.4, size=2),
        BlindPrediction(9, {0: p[2:], 1: p[2:]}, (0, 1), 2, size=3),
    )
    call = ScoreCall(split="test", rows=rows(5), digest=b"d", predictions={}, blind=parts)
    back = convert.score_call_from_proto(wire(convert.score_call_to_proto(call, HDR)))
    assert [(b.request_id, b.first, b.threshold, b.size) for b in back.blind] == [
        (7, 0, 0.4, 2),
        (9, 2, None, 3),
    ]
    np.testing.assert_array_equal(back.blind[1].heads[1], p[2:])
    short = ScoreCall("test", rows(4), b"d", {}, blind=parts)
    with pytest.raises(ProtocolError, match="do not add up"):
        convert.score_call_from_proto(wire(convert.score_call_to_proto(short, HDR)))


def test_score_call_with_no_predictions_round_trips():
    call = ScoreCall(split="train", rows=rows(3), digest=b"", predictions={})
    assert (
        convert.score_call_from_proto(wire(convert.score_call_to_proto(call, HDR))).predictions
        == {}
    )


@pytest.mark.parametrize("samples", [{}, {"train": 100, "test": 20}])
def test_party_info_and_register_round_trip(samples):
    info = PartyInfo(
        party_id="p1",
        block=1,
        num_blocks=4,
        dataset="digits",
        feature_shape=(1, 8, 2),
        num_classes=10,
        has_labels=True,
        samples=samples,
    )
    assert convert.party_info_from_proto(wire(convert.party_info_to_proto(info))) == info
    req = wire(convert.register_request_to_proto(info, "10.0.0.2:50051", convert.header("", "p1")))
    assert convert.register_request_from_proto(req) == (info, "10.0.0.2:50051")
    assert convert.register_last_round_from_proto(req) is None  # not said (an older client)
    for last_round in (-1, 0, 12345):
        said = convert.register_request_to_proto(info, "a:1", HDR, last_round=last_round)
        assert convert.register_last_round_from_proto(wire(said)) == last_round
    bad = convert.register_request_to_proto(info, "a:1", HDR, last_round=-2)
    with pytest.raises(ProtocolError, match="register last_round: -2"):
        convert.register_last_round_from_proto(wire(bad))


def test_id_hashes_and_class_weights_round_trip():
    hashes = [b"\x00" * 32, b"\xff" * 32]
    assert convert.id_hashes_from_proto(wire(convert.id_hashes_to_proto(hashes))) == hashes
    assert convert.id_hashes_from_proto(wire(convert.id_hashes_to_proto([]))) == []
    w = np.array([0.5, 2.0], np.float32)
    out = convert.class_weights_from_proto(wire(convert.class_weights_to_proto(w)))
    np.testing.assert_array_equal(out, w)
    assert convert.class_weights_from_proto(wire(convert.class_weights_to_proto(None))) is None


# ---------------------------------------------------------------------------------------------
# Conversions: rejections
# ---------------------------------------------------------------------------------------------


def _embed_req(**kw) -> vfl_pb2.EmbedRequest:
    call = EmbedCall(round_id=1, split="train", rows=rows(4), digest=b"", train=True)
    req = convert.embed_call_to_proto(call, HDR)
    for k, v in kw.items():
        getattr(req, k).CopyFrom(v) if k == "rows" else setattr(req, k, v)
    return req


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (_embed_req(rows=encode_array(np.arange(4, dtype=np.float32))), "rows: dtype float32"),
        (_embed_req(rows=encode_array(np.array([0, -1], np.int32))), "negative value -1 at"),
        (_embed_req(rows=encode_array(np.zeros((2, 2), np.int64))), "embed rows: shape (2, 2)"),
        (_embed_req(rows=encode_array(np.array([0, -1], np.int64))), "negative value -1 at"),
        (_embed_req(split="validation"), "embed split: unknown split 'validation'"),
    ],
)
def test_given_bad_embed_request_then_protocol_error(req, message):
    with pytest.raises(ProtocolError) as info:
        convert.embed_call_from_proto(req)
    assert message in str(info.value)


def test_given_embedding_of_other_round_then_stale_round_error():
    reply = convert.embedding_to_proto(4, f32(2, 2))
    with pytest.raises(StaleRoundError, match="round id 4 does not match expected 5"):
        convert.embedding_from_proto(reply, round_id=5)


@pytest.mark.parametrize(
    ("embeddings", "message"),
    [
        ({0: f32(4, 3), 2: f32(4, 5)}, "embedding for block 2: shape (4, 5) does not match"),
        (
            {1: f32(4, 3, 1)},
            "embedding for block 1: shape (4, 3, 1) does not match expected (*, *)",
        ),
        ({1: f32(4, 3).astype(np.float64)}, "embedding for block 1: dtype float64"),
        ({-1: f32(4, 3)}, "embedding for block -1: negative block index"),
    ],
)
def test_given_bad_fuse_embeddings_then_protocol_error(embeddings, message):
    req = convert.fuse_call_to_proto(FuseCall(round_id=1, epoch=0, embeddings=embeddings), HDR)
    with pytest.raises(ProtocolError) as info:
        convert.fuse_call_from_proto(req)
    assert message in str(info.value)


def test_given_a_negative_fuse_batch_then_protocol_error_naming_it():
    req = convert.fuse_call_to_proto(FuseCall(round_id=1, epoch=0, embeddings={}), HDR)
    req.batch = -4
    with pytest.raises(ProtocolError, match="fuse batch: -4 is negative"):
        convert.fuse_call_from_proto(req)


def test_given_embeddings_of_unexpected_batch_then_protocol_error():
    req = convert.predict_call_to_proto(PredictCall(request_id=1, embeddings={0: f32(4, 3)}), HDR)
    with pytest.raises(ProtocolError, match=r"expected \(5, \*\)"):
        convert.predict_call_from_proto(req, expect_shape=(5, None))


def test_given_fuse_reply_with_nan_loss_or_grad_then_protocol_error():
    reply = convert.fuse_result_to_proto(FuseResult(loss=float("nan"), grads={}), 1)
    with pytest.raises(ProtocolError, match="fuse loss: non-finite"):
        convert.fuse_result_from_proto(reply, round_id=1)
    g = f32(2, 2)
    g[0, 0] = np.nan
    reply = convert.fuse_result_to_proto(FuseResult(loss=1.0, grads={3: g}), 1)
    with pytest.raises(ProtocolError, match="gradient for block 3: 1 non-finite"):
        convert.fuse_result_from_proto(reply, round_id=1)


def test_given_backward_flag_and_tensor_disagree_then_protocol_error():
    req = vfl_pb2.BackwardRequest(header=HDR, round_id=1, has_grad=True)
    with pytest.raises(ProtocolError, match="backward gradient: missing"):
        convert.backward_call_from_proto(req)
    req = vfl_pb2.BackwardRequest(header=HDR, round_id=1, grad=encode_array(f32(1, 1)))
    with pytest.raises(ProtocolError, match="present but has_grad is false"):
        convert.backward_call_from_proto(req)


def test_given_predictions_not_matching_rows_then_protocol_error():
    call = ScoreCall(
        split="test", rows=rows(3), digest=b"", predictions={"f": np.zeros(2, np.int64)}
    )
    with pytest.raises(ProtocolError, match=r"predictions of f: shape \(2,\) does not match"):
        convert.score_call_from_proto(convert.score_call_to_proto(call, HDR))


def test_given_bad_confusion_then_protocol_error():
    for counts, message in [
        (np.zeros((2, 3), np.int64), "not square"),
        (np.array([[1, -1], [0, 0]], np.int64), "negative count"),
        (np.zeros((2, 2), np.float32), "dtype float32"),
    ]:
        with pytest.raises(ProtocolError, match=message):
            reply = convert.score_reply_to_proto(ScoreResult(confusion={"x": counts}))
            convert.score_reply_from_proto(reply)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"party_id": ""}, "empty party id"),
        ({"party_id": "p" * 1_000_000}, r"party id 'p{64}'\.\.\. \(1000000 characters\): at most"),
        ({"party_id": "p\n0"}, "at most 128 printable characters"),
        ({"dataset": "d" * 129}, r"data set 'd{64}'\.\.\. \(129 characters\)"),
        ({"block": 4}, "block 4 outside 0..3"),
        ({"feature_shape": ()}, "invalid feature shape"),
        ({"feature_shape": (3, 0)}, "invalid feature shape"),
        ({"num_classes": -1}, "negative number of classes"),
        ({"samples": {"train": -5}}, "negative sample count"),
    ],
)
def test_given_inconsistent_party_info_then_protocol_error(fields, message):
    base = {
        "party_id": "p",
        "block": 0,
        "num_blocks": 4,
        "dataset": "d",
        "feature_shape": (3,),
        "num_classes": 2,
        "has_labels": False,
    }
    msg = convert.party_info_to_proto(PartyInfo(**{**base, **fields}))
    with pytest.raises(ProtocolError, match=message):
        convert.party_info_from_proto(msg)


# ---------------------------------------------------------------------------------------------
# Channels: options, binding, a real loopback call with a 16 MiB message each way
# ---------------------------------------------------------------------------------------------


class EchoParty(vfl_pb2_grpc.PartyServicer):
    """Embed only: echoes the request's `rows` tensor, unchecked, as the embedding."""

    def Embed(self, request, context):
        return vfl_pb2.EmbedReply(round_id=request.round_id, embedding=request.rows)


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = channels.make_server(max_workers=2)
    vfl_pb2_grpc.add_PartyServicer_to_server(EchoParty(), server)
    port = channels.bind(server, "127.0.0.1:0")
    server.start()
    try:
        yield port
    finally:
        server.stop(grace=None)


def test_options_follow_the_notes():
    server, client = dict(channels.server_options()), dict(channels.channel_options())
    for opts in (server, client):
        assert opts["grpc.max_receive_message_length"] == channels.MAX_MESSAGE_BYTES
        assert opts["grpc.max_send_message_length"] == channels.MAX_MESSAGE_BYTES
        assert opts["grpc.keepalive_time_ms"] == 5000
        assert opts["grpc.http2.ping_timeout_ms"] == 3000
    assert server["grpc.so_reuseport"] == 0 and server["grpc.http2.max_ping_strikes"] == 2
    assert client["grpc.max_reconnect_backoff_ms"] == 1000
    assert channels.MAX_MESSAGE_BYTES >= 7 * 4096 * 1024 * 4  # a Fuse map of 7 full embeddings


def test_given_4096x1024_float32_when_echoed_over_loopback_then_arrives_intact(echo_port):
    big = f32(4096, 1024)  # 16 MiB, 4x gRPC's default receive limit
    request = vfl_pb2.EmbedRequest(header=HDR, round_id=42, rows=encode_array(big))
    with channels.make_channel(f"127.0.0.1:{echo_port}") as channel:
        reply = vfl_pb2_grpc.PartyStub(channel).Embed(request, timeout=20)
    out = convert.embedding_from_proto(reply, round_id=42, expect_shape=(4096, 1024))
    np.testing.assert_array_equal(out, big)


def test_given_unimplemented_method_when_called_then_unimplemented_status(echo_port):
    with (
        channels.make_channel(f"127.0.0.1:{echo_port}") as channel,
        pytest.raises(grpc.RpcError) as info,
    ):
        vfl_pb2_grpc.PartyStub(channel).Fuse(vfl_pb2.FuseRequest(header=HDR), timeout=5)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_given_port_in_use_when_second_server_binds_then_bind_error(echo_port):
    second = channels.make_server(max_workers=1)
    try:
        with pytest.raises(channels.BindError, match=f"cannot listen on 127.0.0.1:{echo_port}"):
            channels.bind(second, f"127.0.0.1:{echo_port}")
    finally:
        second.stop(grace=None)


def test_given_port_held_by_plain_socket_when_bound_then_bind_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        server = channels.make_server(max_workers=1)
        try:
            with pytest.raises(channels.BindError):
                channels.bind(server, f"127.0.0.1:{sock.getsockname()[1]}")
        finally:
            server.stop(grace=None)


def test_given_a_port_in_use_when_bound_then_one_error_names_listen_and_no_grpc_line(capfd):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        address = f"127.0.0.1:{sock.getsockname()[1]}"
        server = channels.make_server(max_workers=1)
        try:
            with pytest.raises(channels.BindError) as info:
                channels.bind(server, address)
        finally:
            server.stop(grace=None)
    assert str(info.value).startswith(
        f"cannot listen on {address} (--listen): Address already in use; "
    )
    assert "add_port.cc" not in capfd.readouterr().err  # grpc's raw line is not shown


def test_make_channel_accepts_credentials():
    with channels.make_channel("127.0.0.1:1", grpc.ssl_channel_credentials()) as channel:
        assert isinstance(channel, grpc.Channel)


# ---------------------------------------------------------------------------------------------
# Generated code
# ---------------------------------------------------------------------------------------------


def test_committed_stubs_are_current():
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "vfl_wire.codegen", "--check"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_given_edited_stub_then_check_names_it_and_regeneration_repairs_it(
    tmp_path, monkeypatch, capsys
):
    """On a copy of the tree, so the real stubs are never touched."""
    shutil.copytree(REPO_ROOT / "proto", tmp_path / "proto")
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path)
    stubs = tmp_path / "vfl_wire" / "v1"
    shutil.copytree(REPO_ROOT / "vfl_wire" / "v1", stubs, ignore=shutil.ignore_patterns("__*"))
    (stubs / "vfl_pb2.pyi").write_text("# edited\n")
    (stubs / "vfl_pb2_grpc.py").unlink()
    monkeypatch.setattr(codegen, "REPO_ROOT", tmp_path)

    assert codegen.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert "vfl_wire/v1/vfl_pb2.pyi" in err and "vfl_wire/v1/vfl_pb2_grpc.py" in err
    assert "vfl_wire/v1/vfl_pb2.py," not in err

    assert codegen.main([]) == 0
    assert codegen.main(["--check"]) == 0
    assert (stubs / "vfl_pb2.pyi").read_bytes() == (
        REPO_ROOT / "vfl_wire" / "v1" / "vfl_pb2.pyi"
    ).read_bytes()


def test_given_other_grpcio_tools_pin_then_codegen_refuses(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text('dev = ["grpcio-tools==0.0.1"]\n')
    shutil.copytree(REPO_ROOT / "proto", tmp_path / "proto")
    monkeypatch.setattr(codegen, "REPO_ROOT", tmp_path)
    assert codegen.main(["--check"]) == 2
    assert "pyproject.toml pins 0.0.1" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["save", "keep", "restore"])
def test_given_a_checkpoint_call_when_round_tripped_then_its_kind_is_kept(kind: str) -> None:
    """Early stopping's keep/restore travel in the Checkpoint RPC (vfl_core.training.early_stop)."""
    request = convert.checkpoint_call_to_proto(12, vfl_pb2.Header(), kind)
    back = vfl_pb2.CheckpointRequest.FromString(request.SerializeToString())
    assert convert.checkpoint_call_from_proto(back) == 12
    assert convert.checkpoint_kind_from_proto(back) == kind


def test_given_an_unknown_snapshot_value_when_decoded_then_refused() -> None:
    request = vfl_pb2.CheckpointRequest(round_id=3)
    request.snapshot = 7  # proto3 enums are open: a hostile peer can send any number
    with pytest.raises(ProtocolError, match="unknown value 7"):
        convert.checkpoint_kind_from_proto(request)


def test_given_a_row_with_every_metric_when_round_tripped_then_each_travels_under_its_name():
    """Every metric of MetricRow has its EvaluateRow field: a metric added to the row without the
    wire fails here instead of vanishing between the coordinator and `vfl evaluate`."""
    assert ROW_METRICS and "observed" not in ROW_METRICS
    row = MetricRow("0,1", 7, **{name: i + 0.5 for i, name in enumerate(ROW_METRICS)})
    reply = vfl_pb2.EvaluateReply.FromString(
        convert.eval_report_to_proto([row], 0, [0, 1], 0.1).SerializeToString()
    )
    assert convert.eval_rows_from_proto(reply) == [row]
