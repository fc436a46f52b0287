"""The latent-variable VFL's messages: round trips through the generic Step (vfl_wire.records and
the steps' schemas, vfl_core.methods.dlvm.steps), and hostile messages
against a real party server (real servicer, guard interceptor, server options and a dlvm Party on
127.0.0.1:0), in the manner of test_fuzz.py: every bad DlvmDecode, DlvmStep, DlvmPredict,
DlvmBackward or LabelledRows (each a Step of method dlvm) is refused with a clear status code,
leaves the party exactly as it was (weights, optimiser states, its round), and the next valid
round goes through; an identical replay gets the cached answer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz import (
    FUZZ,
    HEADERS,
    RUN,
    TIMEOUT,
    assert_refused,
    optimizer_state,
    serve_party,
    tensors,
)

from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ProtocolError
from vfl_core.methods.dlvm.config import DlvmConfig
from vfl_core.methods.dlvm.messages import (
    DecodeCall,
    Decoded,
    DlvmBackwardCall,
    LabelledRowsCall,
    PartyGrads,
    Stage,
    StepCall,
    StepResult,
)
from vfl_core.methods.dlvm.spec import DLVM_SPEC
from vfl_core.methods.steps import decode_call, decode_result, encode_call, encode_result
from vfl_core.training.alignment import batch_digest
from vfl_core.training.party import Party
from vfl_wire import convert, records
from vfl_wire.tensors import encode_array
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

D = 4  # latent size
S = 3  # importance samples
BATCH = 8
RPCS = ["DlvmDecode", "DlvmStep", "DlvmPredict", "DlvmBackward", "LabelledRows"]
HEADER = convert.header(RUN, "party0")
DIMS = {"latent": D, "expert": 2 * D}  # what the party's config makes of the schemas' symbols


def to_request(step: str, call: Any) -> vfl_pb2.StepRequest:
    """The request the coordinator sends for `call`."""
    header, record = encode_call(DLVM_SPEC.step(step), call)
    return records.step_request("dlvm", step, header, record, HEADER)


def bare(step: str, round_id: int = 0, split: str = "") -> vfl_pb2.StepRequest:
    """A request of `step` with nothing in it but its header."""
    return vfl_pb2.StepRequest(
        header=HEADER, method="dlvm", step=step, round_id=round_id, split=split
    )


def from_request(request: vfl_pb2.StepRequest) -> Any:
    """The call a party makes of a request (checked against its step's schema)."""
    spec = DLVM_SPEC.step(request.step)
    header, record = records.request_from_proto(request, spec.request)
    return decode_call(spec, header, record, DIMS)[0]


def reply_of(step: str, call: Any, reply: vfl_pb2.StepReply) -> Any:
    """What the coordinator makes of a party's reply to `call` (checked against the call)."""
    spec = DLVM_SPEC.step(step)
    _, bound = decode_call(spec, *encode_call(spec, call), {})
    return decode_result(
        spec, records.reply_from_proto(reply, to_request(step, call), spec.reply), call, bound
    )


def answer(step: str, call: Any, result: Any) -> Any:
    """`result`, a party's answer to `call`, through the wire and the coordinator's checks."""
    reply = records.step_reply(to_request(step, call), encode_result(DLVM_SPEC.step(step), result))
    return reply_of(step, call, reply)


# ---------------------------------------------------------------- round trips


def _ones(*shape: int) -> np.ndarray:
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7


def test_given_dlvm_calls_when_round_tripped_then_equal() -> None:
    rows = np.arange(BATCH, dtype=np.int64)
    decode = DecodeCall(4, "train", rows, b"d" * 32, _ones(BATCH, S, D), True)
    got = from_request(to_request("DlvmDecode", decode))
    assert got.rows is not None and np.array_equal(got.rows, rows) and got.digest == b"d" * 32
    assert np.array_equal(got.h, decode.h) and got.train and got.round_id == 4
    absent = DecodeCall(4, "test", None, b"", _ones(BATCH, S, D), False)
    got = from_request(to_request("DlvmDecode", absent))
    assert got.rows is None and not got.train

    decoded = Decoded(_ones(BATCH, S), _ones(BATCH, S, D))
    back = answer("DlvmDecode", decode, decoded)
    assert np.array_equal(back.log_lik, decoded.log_lik) and np.array_equal(back.grad, decoded.grad)

    step = StepCall(
        4, 1, Stage.CLASSIFIER, S, {0: _ones(BATCH, 2 * D), 2: _ones(BATCH, 2 * D)},
        {0: Decoded(_ones(BATCH, S))}, rows, b"e" * 32,
    )  # fmt: skip
    got_step = from_request(to_request("DlvmStep", step))
    assert got_step.stage == Stage.CLASSIFIER and got_step.experts.keys() == {0, 2}
    assert got_step.rows is not None and np.array_equal(got_step.rows, rows)
    assert got_step.answers[0].grad is None

    result = StepResult(1.5, {0: PartyGrads(None, _ones(BATCH, 2 * D))})
    back_step = answer("DlvmStep", step, result)
    assert back_step.loss == 1.5 and back_step.grads[0].log_lik is None
    assert np.array_equal(back_step.grads[0].expert, result.grads[0].expert)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("reply_for_unknown_block", "took no part"),
        ("reply_expert_width", "does not match expected"),
        ("reply_nan_loss", "non-finite"),
        ("decode_reply_without_grad", "gradient: missing"),
        ("labelled_unsorted", "ascending distinct"),
        ("labelled_beyond", "ascending distinct"),
    ],
)
def test_given_bad_replies_when_the_coordinator_decodes_them_then_refused(
    case: str, message: str
) -> None:
    """What a party sends back is as untrusted as what it receives."""
    experts = {0: _ones(BATCH, 2 * D)}
    call = StepCall(
        4, 0, Stage.BOUND, S, experts, {0: Decoded(_ones(BATCH, S), _ones(BATCH, S, D))}
    )
    with pytest.raises(ProtocolError, match=message):
        if case.startswith("reply"):
            grads = {0: PartyGrads(_ones(BATCH, S), _ones(BATCH, 2 * D))}
            if case == "reply_for_unknown_block":
                grads[3] = PartyGrads(None, _ones(BATCH, 2 * D))
            elif case == "reply_expert_width":
                grads[0] = PartyGrads(None, _ones(BATCH, D))
            loss = float("nan") if case == "reply_nan_loss" else 1.0
            answer("DlvmStep", call, StepResult(loss, grads))
        elif case == "decode_reply_without_grad":
            decode = DecodeCall(4, "train", None, b"", _ones(BATCH, S, D), True)
            answer("DlvmDecode", decode, Decoded(_ones(BATCH, S)))
        else:
            rows = [3, 1, 2] if case == "labelled_unsorted" else [1, 2, 99]
            answer("LabelledRows", LabelledRowsCall("train", 50), np.array(rows, dtype=np.int64))


# ---------------------------------------------------------------- a real party server


@dataclass
class DlvmServer:
    party: Party
    stub: vfl_pb2_grpc.PartyStub
    channel: grpc.Channel
    next_round: int = 0

    def fingerprint(self) -> str:
        roles = self.party.dlvm
        assert roles is not None
        state = [self.party.last_round, self.party.parameters_vector().tobytes()]
        lead = roles.lead  # the active party's step (vfl_core.methods.dlvm.active)
        assert lead is not None
        opts = (roles.opt, lead.generative_opt, lead.classifier_opt)
        assert None not in opts
        state += optimizer_state(opts)
        current = roles._round
        state += [None if current is None else (current.round_id, current.stepped)]
        state += [None if lead._last is None else lead._last[0]]
        return hashlib.sha256(repr(state).encode()).hexdigest()

    def rows(self, r: int) -> tuple[np.ndarray, bytes]:
        rows = np.arange(r % 40, r % 40 + BATCH, dtype=np.int64)
        keys = self.party.alignment_keys("train")
        return rows, batch_digest(keys[int(i)] for i in rows)

    def embed(self, r: int) -> np.ndarray:
        rows, digest = self.rows(r)
        request = vfl_pb2.EmbedRequest(
            header=HEADER, round_id=r, split="train", rows=encode_array(rows), digest=digest,
            train=True,
        )  # fmt: skip
        reply = self.stub.Embed(request, timeout=TIMEOUT)
        return convert.embedding_from_proto(reply, round_id=r, expect_shape=(BATCH, 2 * D))

    def decode(self, r: int, h: np.ndarray | None = None) -> vfl_pb2.StepRequest:
        rows, digest = self.rows(r)
        h = np.full((BATCH, S, D), 0.1, np.float32) if h is None else h
        return to_request("DlvmDecode", DecodeCall(r, "train", rows, digest, h, True))

    def step(self, r: int, expert: np.ndarray, decoded: Decoded) -> vfl_pb2.StepRequest:
        call = StepCall(r, 0, Stage.BOUND, S, {0: expert}, {0: decoded})
        return to_request("DlvmStep", call)

    def valid_round(self) -> int:
        """Embed, Decode, Step and Backward of one training round; all succeed."""
        r = self.next_round
        self.next_round += 1
        expert = self.embed(r)
        decode = self.decode(r)
        reply = self.stub.Step(decode, timeout=TIMEOUT)
        decoded = reply_of("DlvmDecode", from_request(decode), reply)
        step = self.step(r, expert, decoded)
        reply = self.stub.Step(step, timeout=TIMEOUT)
        result = reply_of("DlvmStep", from_request(step), reply)
        assert np.isfinite(result.loss) and result.grads.keys() == {0}
        backward = to_request("DlvmBackward", DlvmBackwardCall(r, 0, result.grads[0]))
        self.stub.Step(backward, timeout=TIMEOUT)
        return r

    def refused(self, rpc: str, request: object) -> grpc.StatusCode:
        """`rpc`: the DLVM step the request is for; every step travels as the generic Step."""
        assert isinstance(request, vfl_pb2.StepRequest) and request.step == rpc
        return assert_refused(self.stub, "Step", request, self.fingerprint)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DlvmServer]:
    out = tmp_path_factory.mktemp("dlvm-fuzz-data")
    paths = prepare_parties(
        load_dataset("digits"), out, 2, [0.0] * 2, [0.0] * 2, 0.2, 0, labels=300
    )
    dlvm = DlvmConfig(latent_dim=D, z_dim=2, hidden=(12,), kappa=S, predict_samples=S)
    train = TrainConfig(method="dlvm", batch_size=BATCH, dlvm=dlvm)
    party = Party("party0", load_party_dir(paths[0]), train, secret=b"fuzz")
    with serve_party(party) as channel:
        s = DlvmServer(party, vfl_pb2_grpc.PartyStub(channel), channel)
        s.valid_round()
        yield s


def _predict(server: DlvmServer) -> vfl_pb2.StepRequest:
    call = StepCall(
        10**6, 0, Stage.PREDICT, S, {0: _ones(BATCH, 2 * D)}, {0: Decoded(_ones(BATCH, S))}
    )
    return to_request("DlvmPredict", call)


@FUZZ
@given(header=HEADERS, rpc=st.sampled_from(RPCS))
def test_given_header_for_another_party_or_run_when_sent_then_permission_denied(
    server: DlvmServer, header: vfl_pb2.Header, rpc: str
) -> None:
    r = server.next_round
    request = {
        "DlvmDecode": server.decode(r),
        "DlvmStep": server.step(
            r, _ones(BATCH, 2 * D), Decoded(_ones(BATCH, S), _ones(BATCH, S, D))
        ),
        "DlvmPredict": _predict(server),
        "DlvmBackward": bare("DlvmBackward", r),
        "LabelledRows": bare("LabelledRows", split="train"),
    }[rpc]
    request.header.CopyFrom(header)
    assert server.refused(rpc, request) == grpc.StatusCode.PERMISSION_DENIED
    server.valid_round()


@FUZZ
@given(data=st.data(), target=st.sampled_from(["h", "expert", "log_lik", "grad", "backward"]))
def test_given_bad_tensor_when_sent_then_refused_and_next_round_proceeds(
    server: DlvmServer, data: st.DataObject, target: str
) -> None:
    r = server.next_round
    expert = server.embed(r)
    good = Decoded(_ones(BATCH, S), _ones(BATCH, S, D))
    if target == "h":
        rpc, request = "DlvmDecode", server.decode(r)
        request.tensors["h"].CopyFrom(data.draw(tensors(rows=BATCH, width=S * D)))  # not (B, S, d)
    elif target == "backward":
        rpc = "DlvmBackward"
        request = bare("DlvmBackward", r)
        request.tensors["expert_grad"].CopyFrom(data.draw(tensors(rows=BATCH, width=2 * D)))
    else:
        rpc, request = "DlvmStep", server.step(r, expert, good)
        maps = request.maps
        field = {
            "expert": maps["experts"].items,
            "log_lik": maps["log_liks"].items,
            "grad": maps["grads"].items,
        }
        width = {"expert": 2 * D, "log_lik": S, "grad": S}[target]
        field[target][0].CopyFrom(data.draw(tensors(rows=BATCH, width=width)))
    server.refused(rpc, request)
    server.valid_round()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("decode_latent_dim", "does not match expected"),
        ("decode_digest", "digest mismatch"),
        ("decode_rows_count", "does not match expected"),
        ("decode_digest_without_rows", "present without rows"),
        ("decode_other_rows", "other rows than embedded"),
        ("decode_too_many_samples", "no sample or too many"),
        ("step_stage", "is not one of"),
        ("step_no_expert", "none"),
        ("step_grads_missing", "one per log-likelihood"),
        ("step_rows_in_stage_1", "only it names its rows"),
        ("step_block_beyond", "outside 0..1"),
        ("step_samples", "outside 1..10000"),
        ("predict_stage", "is not one of"),
        ("backward_without_decode", "log-likelihood gradient without decode"),
        ("labelled_test_split", "only of the train split"),
    ],
)
def test_given_inconsistent_dlvm_message_when_sent_then_invalid_argument_naming_it(
    server: DlvmServer, case: str, message: str
) -> None:
    r = server.next_round
    expert = server.embed(r)
    good = Decoded(_ones(BATCH, S), _ones(BATCH, S, D))
    rpc, request = "DlvmDecode", server.decode(r)
    if case == "decode_latent_dim":
        request.tensors["h"].CopyFrom(encode_array(np.zeros((BATCH, S, D + 1), np.float32)))
    elif case == "decode_digest":  # at inference, where no embed was kept to compare with
        request.scalars["train"].flag = False
        request.digest = b"x" * 32
    elif case == "decode_rows_count":
        request.rows.CopyFrom(encode_array(np.arange(BATCH - 1, dtype=np.int64)))
    elif case == "decode_digest_without_rows":
        request.ClearField("rows")
    elif case == "decode_other_rows":
        rows, _ = server.rows(r + 1)
        keys = server.party.alignment_keys("train")
        request.rows.CopyFrom(encode_array(rows))
        request.digest = batch_digest(keys[int(i)] for i in rows)
    elif case == "decode_too_many_samples":
        request.tensors["h"].CopyFrom(encode_array(np.zeros((1, 10_001, D), np.float32)))
        request.rows.CopyFrom(encode_array(np.arange(1, dtype=np.int64)))
    elif case.startswith("step"):
        rpc, request = "DlvmStep", server.step(r, expert, good)
        if case == "step_stage":
            request.scalars["stage"].int = 3
        elif case == "step_no_expert":
            del request.maps["experts"]
        elif case == "step_grads_missing":
            del request.maps["grads"]
        elif case == "step_rows_in_stage_1":
            request.rows.CopyFrom(encode_array(np.arange(BATCH, dtype=np.int64)))
        elif case == "step_block_beyond":
            request.maps["experts"].items[5].CopyFrom(encode_array(_ones(BATCH, 2 * D)))
        else:
            request.scalars["samples"].int = 10**6
    elif case == "predict_stage":
        rpc, request = "DlvmPredict", _predict(server)
        request.scalars["stage"].int = 1
    elif case == "backward_without_decode":
        rpc, request = "DlvmBackward", bare("DlvmBackward", r)
        request.tensors["log_lik_grad"].CopyFrom(encode_array(_ones(BATCH, S)))
    else:
        rpc, request = "LabelledRows", bare("LabelledRows", split="test")
    with pytest.raises(grpc.RpcError) as err:
        server.stub.Step(request, timeout=TIMEOUT)
    assert request.step == rpc
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
    assert message in err.value.details()
    server.valid_round()


def test_given_replays_when_sent_then_cached_answer_and_stale_rounds_refused(
    server: DlvmServer,
) -> None:
    r = server.next_round
    server.next_round += 1
    server.embed(r)
    request = server.decode(r)
    before = server.stub.Step(request, timeout=TIMEOUT)
    state = server.fingerprint()
    assert server.stub.Step(request, timeout=TIMEOUT) == before  # a retry after a timeout
    assert server.fingerprint() == state
    other = server.decode(r, np.full((BATCH, S, D), 0.7, np.float32))
    assert server.refused("DlvmDecode", other) == grpc.StatusCode.INVALID_ARGUMENT
    server.valid_round()
    assert server.refused("DlvmDecode", server.decode(r)) == grpc.StatusCode.FAILED_PRECONDITION
    stale = bare("DlvmBackward", r)
    assert server.refused("DlvmBackward", stale) == grpc.StatusCode.FAILED_PRECONDITION
    labelled = LabelledRowsCall("train", len(server.party.data.splits["train"]))
    reply = server.stub.Step(to_request("LabelledRows", labelled), timeout=TIMEOUT)
    rows = reply_of("LabelledRows", labelled, reply)
    assert len(rows) > 0 and (np.diff(rows) > 0).all()
    predict = _predict(server)
    probs = reply_of(
        "DlvmPredict", from_request(predict), server.stub.Step(predict, timeout=TIMEOUT)
    )
    assert probs.shape == (BATCH, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    server.valid_round()
