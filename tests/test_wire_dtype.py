"""Smaller embeddings and gradients on the wire (TrainConfig.wire_dtype): the rounding
(vfl_core.model.quantize), its encoding in a Tensor message (vfl_wire.tensors), the refusal of
hostile
encoded tensors by a real party server, and that the in-process transport rounds exactly where the
gRPC transport encodes (a federation over real gRPC servers against the in-process one, bit for
bit, for every wire dtype)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from harness import party_servers

from vfl_coordinator.config import Deadlines
from vfl_coordinator.transport import GrpcTransport
from vfl_core.config import ModelConfig, TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ProtocolError
from vfl_core.model import quantize
from vfl_core.model.quantize import WIRE_DTYPES, decode, encode, round_trip
from vfl_core.training.alignment import batch_digest
from vfl_core.training.engine import Federation
from vfl_core.training.inprocess import InProcessTransport
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.tensors import decode_float, encode_float
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

LOSSY = ("float16", "bfloat16", "int8")
SECRET = b"wire-dtype-test"


def _arrays(seed: int = 0) -> Iterator[np.ndarray]:
    """(B, d) float32 arrays across float32's range, with zero, tiny and huge rows."""
    rng = np.random.default_rng(seed)
    for exponent in (-44, -38, -30, -8, -3, 0, 3, 30, 38):
        x = (rng.standard_normal((16, 12)) * 10.0**exponent).astype(np.float32)
        x[0] = 0
        yield x
    yield np.zeros((3, 0), np.float32)
    yield np.zeros((0, 5), np.float32)


# ------------------------------------------------------------------------ the rounding


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
def test_given_any_values_when_rounded_twice_then_the_same_as_once(dtype: str) -> None:
    for x in _arrays():
        with np.errstate(over="ignore"):
            once = round_trip(x, dtype)
            twice = round_trip(once, dtype)
        assert once.dtype == np.float32 and once.shape == x.shape
        np.testing.assert_array_equal(twice, once)  # the coordinator may relay without drift
        assert np.isfinite(once).all()  # saturates, never overflows to Inf


def test_given_float32_when_rounded_then_it_is_the_array_itself() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert round_trip(x, "float32") is x


@pytest.mark.parametrize(
    ("dtype", "relative"), [("float16", 2.0**-11), ("bfloat16", 2.0**-8), ("int8", None)]
)
def test_given_normal_values_when_rounded_then_the_error_is_within_the_format(
    dtype: str, relative: float | None
) -> None:
    x = (np.random.default_rng(1).standard_normal((64, 32)) * 0.5).astype(np.float32)
    y = round_trip(x, dtype)
    if relative is not None:
        assert (np.abs(y - x) <= relative * np.abs(x) + 1e-7).all()
    else:  # half a step: the row's power-of-two scale, in [max|row| / 127, 2 max|row| / 127)
        step = np.abs(x).max(axis=1, keepdims=True) / 127
        scale = 2.0 ** np.ceil(np.log2(step))
        assert (scale < 2 * step).all()
        assert (np.abs(y - x) <= scale / 2).all()


def test_given_int8_when_encoded_then_rows_use_half_the_range_or_more_and_zeros_stay_zero() -> None:
    x = np.array(
        [[0.5, -2.0, 1.0], [0, 0, 0], [1e-37, 0, 0], [3.0, 3.0, -3.0], [127.0, 1.0, 0.0]],
        np.float32,
    )
    e = encode(x, "int8")
    assert e.codes.dtype == np.int8 and e.scales is not None and e.scales.dtype == np.uint8
    # scales 2^-5 (2 / 127 rounded up), 0, 0, 2^-5, 2^0 (127 / 127 is a power of two itself)
    assert np.abs(e.codes.astype(int)).max(axis=1).tolist() == [64, 0, 0, 96, 127]
    assert e.scales.tolist() == [127 - 5, 0, 0, 127 - 5, 127]
    y = decode(e)
    np.testing.assert_array_equal(y[1:3], 0)  # a zero row, and one too small for a scale
    assert y[0, 1] == -y[0, 1] * -1 and np.sign(y[0]).tolist() == [1, -1, 1]


def test_given_values_beyond_the_range_when_rounded_then_they_saturate() -> None:
    x = np.array([[1e6, -1e6, 3.4e38]], np.float32)
    assert round_trip(x, "float16")[0, :2].tolist() == [65504.0, -65504.0]
    assert np.isfinite(round_trip(x, "bfloat16")).all()
    assert np.isfinite(round_trip(x, "int8")).all()


@pytest.mark.parametrize("dtype", LOSSY)
def test_given_a_nan_when_rounded_then_it_stays_non_finite_for_the_receiver_to_refuse(
    dtype: str,
) -> None:
    x = np.array([[1.0, np.nan], [2.0, 3.0]], np.float32)
    y = round_trip(x, dtype)
    assert not np.isfinite(y[0]).all() and np.isfinite(y[1]).all()


# ------------------------------------------------------------------------ the message


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
def test_given_an_array_when_sent_in_a_wire_dtype_then_the_receiver_gets_round_trip(
    dtype: str,
) -> None:
    """The gRPC path (encode_float, bytes, decode_float) gives round_trip's values exactly: the
    in-process transport, which applies round_trip, is bit-identical to it."""
    for x in _arrays(2):
        with np.errstate(over="ignore"):
            want = round_trip(x, dtype)
        t = vfl_pb2.Tensor.FromString(encode_float(x, dtype).SerializeToString())
        got = decode_float(t, dtype, expect_shape=x.shape)
        assert got.dtype == np.float32 and got.flags.writeable
        np.testing.assert_array_equal(got, want)


def test_given_a_batch_when_encoded_then_the_bytes_shrink_as_the_format_says() -> None:
    x = np.ones((128, 32), np.float32)
    sizes = {d: len(encode_float(x, d).SerializeToString()) for d in WIRE_DTYPES}
    assert sizes["float32"] > 128 * 32 * 4
    assert max(sizes["float16"], sizes["bfloat16"]) < 0.51 * sizes["float32"]
    assert sizes["int8"] < 0.27 * sizes["float32"]  # d + 1 bytes per row


def _int8(rows: int = 2, width: int = 3) -> vfl_pb2.Tensor:
    return encode_float(np.ones((rows, width), np.float32), "int8")


def _hostile(rows: int = 2, width: int = 3) -> dict[str, tuple[str, vfl_pb2.Tensor]]:
    """name -> (wire dtype the receiver expects, a tensor with one thing wrong)."""
    cases: dict[str, tuple[str, vfl_pb2.Tensor]] = {}
    t = _int8(rows, width)
    t.dtype = "float32"
    cases["float32 where int8 is expected"] = ("int8", t)
    cases["int8 where float32 is expected"] = ("float32", _int8(rows, width))
    t = encode_float(np.ones((rows, width), np.float32), "float32")
    t.scales = b"\0\0\0\0"
    cases["scales with float32"] = ("float32", t)
    t = encode_float(np.ones((rows, width), np.float32), "float16")
    t.scales = b"\0\0\0\0"
    cases["scales with float16"] = ("float16", t)
    t = _int8(rows, width)
    t.scales = t.scales[:1]
    cases["one scale for two rows"] = ("int8", t)
    t = _int8(rows, width)
    t.data = t.data[:-1]
    cases["truncated codes"] = ("int8", t)
    t = _int8(rows, width)
    t.data = bytes([0x80]) + t.data[1:]
    cases["code -128"] = ("int8", t)
    t = _int8(rows, width)
    t.scales = b"\xff" + t.scales[1:]  # exponent byte of an infinite scale
    cases["infinite scale"] = ("int8", t)
    t = _int8(rows, width)
    t.scales = b"\xfe" + t.scales[1:]  # 2^127: finite, but the codes (127) overflow to Inf
    cases["scale that overflows"] = ("int8", t)
    t = encode_float(np.ones((rows, width), np.float32), "float16")
    t.data = b"\x00\x7c" + t.data[2:]  # float16 +Inf
    cases["float16 Inf"] = ("float16", t)
    t = encode_float(np.ones((rows, width), np.float32), "bfloat16")
    t.data = b"\xc0\x7f" + t.data[2:]  # bfloat16 NaN
    cases["bfloat16 NaN"] = ("bfloat16", t)
    t = _int8(rows, width)
    del t.shape[:]
    t.shape.extend([2**40, 2**20])
    cases["huge shape"] = ("int8", t)
    t = _int8(rows, width)
    del t.shape[:]
    cases["int8 scalar"] = ("int8", t)
    t = _int8(rows, width)
    del t.shape[:]
    t.shape.extend([rows + 1, width])
    cases["other shape"] = ("int8", t)
    return cases


@pytest.mark.parametrize("case", sorted(_hostile()))
def test_given_a_hostile_encoded_tensor_when_decoded_then_one_line_refusal(case: str) -> None:
    wire, t = _hostile()[case]
    with pytest.raises(ProtocolError) as err:
        decode_float(t, wire, what="embedding", expect_shape=(2, 3))
    message = str(err.value)
    assert message.startswith("embedding: ") and "\n" not in message


def test_given_a_tensor_that_decodes_beyond_the_cap_when_decoded_then_refused_first() -> None:
    t = _int8(rows=1024, width=1024)  # 1 MiB of codes, 4 MiB as float32
    with pytest.raises(ProtocolError, match="as float32, cap"):
        decode_float(t, "int8", max_bytes=2 * 1024 * 1024)


# ------------------------------------------------------------------------ real servers


@pytest.fixture(scope="module")
def party_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    out = tmp_path_factory.mktemp("wire-dtype-data")
    return prepare_parties(load_dataset("digits"), out, 3, [0.1] * 3, [0.1] * 3, 0.2, seed=0)


def _train(dtype: str) -> TrainConfig:
    model = ModelConfig(representation="mlp", hidden=(16,), embed_dim=8)
    return TrainConfig(seed=0, epochs=1, batch_size=128, model=model, wire_dtype=dtype)


def _parties(dirs: list[Path], train: TrainConfig) -> dict[int, Party]:
    data = [load_party_dir(d) for d in dirs]
    return {d.meta.block: Party(f"party{d.meta.block}", d, train, secret=SECRET) for d in data}


@pytest.mark.parametrize("dtype", WIRE_DTYPES)
def test_given_a_wire_dtype_when_trained_over_grpc_and_in_process_then_bit_identical(
    party_dirs: list[Path], dtype: str
) -> None:
    train = _train(dtype)
    local = _parties(party_dirs, train)
    local_fed = Federation(InProcessTransport(local), train, progress=False)
    local_fed.align()
    local_fed.train()

    remote = _parties(party_dirs, train)
    with party_servers(remote, "wire-run") as registry:
        transport = GrpcTransport(registry, "wire-run", Deadlines(), wire_dtype=dtype)
        try:
            fed = Federation(transport, train, progress=False)
            fed.align()
            fed.train()
            remote_report = fed.evaluate("test")
        finally:
            transport.close()

    for block, party in local.items():
        np.testing.assert_array_equal(
            remote[block].parameters_vector(), party.parameters_vector(), err_msg=str(block)
        )
    assert remote_report.to_json() == local_fed.evaluate("test").to_json()


def test_given_lossy_wire_dtypes_when_trained_then_parameters_differ_from_float32(
    party_dirs: list[Path],
) -> None:
    """The option is not silently ignored: each lossy format changes the trained weights."""
    weights = {}
    for dtype in WIRE_DTYPES:
        parties = _parties(party_dirs, _train(dtype))
        fed = Federation(InProcessTransport(parties), _train(dtype), progress=False)
        fed.align()
        fed.train()
        weights[dtype] = np.concatenate([p.parameters_vector() for p in parties.values()])
    for dtype in LOSSY:
        assert not np.array_equal(weights[dtype], weights["float32"]), dtype
        assert np.allclose(weights[dtype], weights["float32"], atol=0.05), dtype


def test_given_an_int8_party_server_when_a_hostile_gradient_arrives_then_refused_unchanged(
    party_dirs: list[Path],
) -> None:
    train = _train("int8")
    party = _parties(party_dirs[:1], train)[0]
    header = convert.header("wire-run", party.party_id)
    with party_servers({0: party}, "wire-run") as registry:
        address = registry.member(0).address  # type: ignore[union-attr]
        with grpc.insecure_channel(address) as channel:
            stub = vfl_pb2_grpc.PartyStub(channel)
            keys = party.alignment_keys("train")
            rows = np.arange(8, dtype=np.int64)
            digest = batch_digest(keys[int(r)] for r in rows)
            embed = convert.embed_call_to_proto(
                convert.EmbedCall(0, "train", rows, digest, True, (0,)), header
            )
            reply = stub.Embed(embed, timeout=20)
            assert reply.embedding.dtype == "int8" and len(reply.embedding.scales) == 8
            before = party.parameters_vector()
            refused = []
            for name, (wire, bad) in _hostile(8, 8).items():
                if wire != "int8":
                    continue
                request = convert.backward_call_to_proto(
                    convert.BackwardCall(0, 0, np.zeros((8, 8), np.float32)), header, "int8"
                )
                request.grad.CopyFrom(bad)
                with pytest.raises(grpc.RpcError) as err:
                    stub.Backward(request, timeout=20)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
                np.testing.assert_array_equal(party.parameters_vector(), before)
                refused.append(name)
            assert len(refused) >= 9
            grad = np.full((8, 8), 0.01, np.float32)
            stub.Backward(
                convert.backward_call_to_proto(convert.BackwardCall(0, 0, grad), header, "int8"),
                timeout=20,
            )
            assert not np.array_equal(party.parameters_vector(), before)  # the valid one steps


def test_given_an_unknown_wire_dtype_when_configured_then_refused() -> None:
    with pytest.raises(ValueError, match="wire_dtype"):
        TrainConfig(wire_dtype="int4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown wire dtype"):
        quantize.encode(np.ones(2, np.float32), "int4")
