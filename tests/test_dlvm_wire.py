"""The latent-variable VFL's messages: round trips through vfl_wire.convert, and hostile messages
against a real party server (real servicer, guard interceptor, server options and a dlvm Party on
127.0.0.1:0), in the manner of test_fuzz.py: every bad DlvmDecode, DlvmStep, DlvmPredict,
DlvmBackward or LabelledRows is refused with a clear status code, leaves the party exactly as it
was (weights, optimiser states, its round), and the next valid round goes through; an identical
replay gets the cached answer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

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

from vfl_core.algorithms.dlvm_config import DlvmConfig
from vfl_core.algorithms.dlvm_protocol import (
    DecodeCall,
    Decoded,
    PartyGrads,
    Stage,
    StepCall,
    StepResult,
)
from vfl_core.config import TrainConfig
from vfl_core.data.datasets import load_dataset
from vfl_core.data.party_dir import load_party_dir
from vfl_core.data.prepare import prepare_parties
from vfl_core.errors import ProtocolError
from vfl_core.training.alignment import batch_digest
from vfl_core.training.party import Party
from vfl_wire import convert
from vfl_wire.tensors import encode_array
from vfl_wire.v1 import vfl_pb2, vfl_pb2_grpc

D = 4  # latent size
S = 3  # importance samples
BATCH = 8
RPCS = ["DlvmDecode", "DlvmStep", "DlvmPredict", "DlvmBackward", "LabelledRows"]
HEADER = convert.header(RUN, "party0")


# ---------------------------------------------------------------- round trips


def _ones(*shape: int) -> np.ndarray:
    return np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7


def test_given_dlvm_calls_when_round_tripped_then_equal() -> None:
    rows = np.arange(BATCH, dtype=np.int64)
    decode = DecodeCall(4, "train", rows, b"d" * 32, _ones(BATCH, S, D), True)
    got = convert.dlvm_decode_call_from_proto(
        convert.dlvm_decode_call_to_proto(decode, HEADER), latent_dim=D
    )
    assert got.rows is not None and np.array_equal(got.rows, rows) and got.digest == b"d" * 32
    assert np.array_equal(got.h, decode.h) and got.train and got.round_id == 4
    absent = DecodeCall(4, "test", None, b"", _ones(BATCH, S, D), False)
    got = convert.dlvm_decode_call_from_proto(
        convert.dlvm_decode_call_to_proto(absent, HEADER), latent_dim=D
    )
    assert got.rows is None and not got.train

    answer = Decoded(_ones(BATCH, S), _ones(BATCH, S, D))
    back = convert.dlvm_decoded_from_proto(convert.dlvm_decoded_to_proto(answer, 4), call=decode)
    assert np.array_equal(back.log_lik, answer.log_lik) and np.array_equal(back.grad, answer.grad)

    step = StepCall(
        4, 1, Stage.CLASSIFIER, S, {0: _ones(BATCH, 2 * D), 2: _ones(BATCH, 2 * D)},
        {0: Decoded(_ones(BATCH, S))}, rows, b"e" * 32,
    )  # fmt: skip
    got_step = convert.dlvm_step_call_from_proto(
        convert.dlvm_step_call_to_proto(step, HEADER), latent_dim=D
    )
    assert got_step.stage == Stage.CLASSIFIER and got_step.experts.keys() == {0, 2}
    assert got_step.rows is not None and np.array_equal(got_step.rows, rows)
    assert got_step.answers[0].grad is None

    result = StepResult(1.5, {0: PartyGrads(None, _ones(BATCH, 2 * D))})
    back_step = convert.dlvm_step_result_from_proto(
        convert.dlvm_step_result_to_proto(result, 4), call=step
    )
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
            reply = convert.dlvm_step_result_to_proto(StepResult(loss, grads), 4)
            convert.dlvm_step_result_from_proto(reply, call=call)
        elif case == "decode_reply_without_grad":
            decode = DecodeCall(4, "train", None, b"", _ones(BATCH, S, D), True)
            reply = convert.dlvm_decoded_to_proto(Decoded(_ones(BATCH, S)), 4)
            convert.dlvm_decoded_from_proto(reply, call=decode)
        else:
            rows = [3, 1, 2] if case == "labelled_unsorted" else [1, 2, 99]
            reply = convert.labelled_rows_to_proto(np.array(rows, dtype=np.int64))
            convert.labelled_rows_from_proto(reply, samples=50)


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
        opts = (roles.opt, roles.active_opt, roles.classifier_opt)
        assert None not in opts
        state += optimizer_state(opts)
        current = roles._round
        state += [None if current is None else (current.round_id, current.stepped)]
        state += [None if roles._step is None else roles._step[0]]
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

    def decode(self, r: int, h: np.ndarray | None = None) -> vfl_pb2.DlvmDecodeRequest:
        rows, digest = self.rows(r)
        h = np.full((BATCH, S, D), 0.1, np.float32) if h is None else h
        return convert.dlvm_decode_call_to_proto(
            DecodeCall(r, "train", rows, digest, h, True), HEADER
        )

    def step(self, r: int, expert: np.ndarray, decoded: Decoded) -> vfl_pb2.DlvmStepRequest:
        call = StepCall(r, 0, Stage.BOUND, S, {0: expert}, {0: decoded})
        return convert.dlvm_step_call_to_proto(call, HEADER)

    def valid_round(self) -> int:
        """Embed, Decode, Step and Backward of one training round; all succeed."""
        r = self.next_round
        self.next_round += 1
        expert = self.embed(r)
        decode = self.decode(r)
        decoded = convert.dlvm_decoded_from_proto(
            self.stub.DlvmDecode(decode, timeout=TIMEOUT),
            call=convert.dlvm_decode_call_from_proto(decode, latent_dim=D),
        )
        step = self.step(r, expert, decoded)
        result = convert.dlvm_step_result_from_proto(
            self.stub.DlvmStep(step, timeout=TIMEOUT),
            call=convert.dlvm_step_call_from_proto(step, latent_dim=D),
        )
        assert np.isfinite(result.loss) and result.grads.keys() == {0}
        backward = vfl_pb2.DlvmBackwardRequest(
            header=HEADER, round_id=r, log_lik_grad=encode_array(result.grads[0].log_lik),
            expert_grad=encode_array(result.grads[0].expert),
        )  # fmt: skip
        self.stub.DlvmBackward(backward, timeout=TIMEOUT)
        return r

    def refused(self, rpc: str, request: object) -> grpc.StatusCode:
        return assert_refused(self.stub, rpc, request, self.fingerprint)


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


def _predict(server: DlvmServer) -> vfl_pb2.DlvmStepRequest:
    call = StepCall(
        10**6, 0, Stage.PREDICT, S, {0: _ones(BATCH, 2 * D)}, {0: Decoded(_ones(BATCH, S))}
    )
    return convert.dlvm_step_call_to_proto(call, HEADER)


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
        "DlvmBackward": vfl_pb2.DlvmBackwardRequest(round_id=r),
        "LabelledRows": vfl_pb2.LabelledRowsRequest(split="train"),
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
        request.h.CopyFrom(data.draw(tensors(rows=BATCH, width=S * D)))  # not (B, S, d)
    elif target == "backward":
        rpc = "DlvmBackward"
        request = vfl_pb2.DlvmBackwardRequest(header=HEADER, round_id=r)
        request.expert_grad.CopyFrom(data.draw(tensors(rows=BATCH, width=2 * D)))
    else:
        rpc, request = "DlvmStep", server.step(r, expert, good)
        field = {"expert": request.experts, "log_lik": request.log_liks, "grad": request.grads}
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
        request.h.CopyFrom(encode_array(np.zeros((BATCH, S, D + 1), np.float32)))
    elif case == "decode_digest":  # at inference, where no embed was kept to compare with
        request.train = False
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
        request.h.CopyFrom(encode_array(np.zeros((1, 10_001, D), np.float32)))
        request.rows.CopyFrom(encode_array(np.arange(1, dtype=np.int64)))
    elif case.startswith("step"):
        rpc, request = "DlvmStep", server.step(r, expert, good)
        if case == "step_stage":
            request.stage = 3
        elif case == "step_no_expert":
            request.ClearField("experts")
        elif case == "step_grads_missing":
            request.ClearField("grads")
        elif case == "step_rows_in_stage_1":
            request.rows.CopyFrom(encode_array(np.arange(BATCH, dtype=np.int64)))
        elif case == "step_block_beyond":
            request.experts[5].CopyFrom(encode_array(_ones(BATCH, 2 * D)))
        else:
            request.samples = 10**6
    elif case == "predict_stage":
        rpc, request = "DlvmPredict", _predict(server)
        request.stage = 1
    elif case == "backward_without_decode":
        rpc = "DlvmBackward"
        grad = encode_array(_ones(BATCH, S))
        request = vfl_pb2.DlvmBackwardRequest(header=HEADER, round_id=r, log_lik_grad=grad)
    else:
        rpc, request = "LabelledRows", vfl_pb2.LabelledRowsRequest(header=HEADER, split="test")
    with pytest.raises(grpc.RpcError) as err:
        getattr(server.stub, rpc)(request, timeout=TIMEOUT)
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
    before = server.stub.DlvmDecode(request, timeout=TIMEOUT)
    state = server.fingerprint()
    assert server.stub.DlvmDecode(request, timeout=TIMEOUT) == before  # a retry after a timeout
    assert server.fingerprint() == state
    other = server.decode(r, np.full((BATCH, S, D), 0.7, np.float32))
    assert server.refused("DlvmDecode", other) == grpc.StatusCode.INVALID_ARGUMENT
    server.valid_round()
    assert server.refused("DlvmDecode", server.decode(r)) == grpc.StatusCode.FAILED_PRECONDITION
    stale = vfl_pb2.DlvmBackwardRequest(header=HEADER, round_id=r)
    assert server.refused("DlvmBackward", stale) == grpc.StatusCode.FAILED_PRECONDITION
    rows = convert.labelled_rows_from_proto(
        server.stub.LabelledRows(vfl_pb2.LabelledRowsRequest(header=HEADER, split="train")),
        samples=len(server.party.data.splits["train"]),
    )
    assert len(rows) > 0 and (np.diff(rows) > 0).all()
    probs = convert.probabilities_from_proto(
        server.stub.DlvmPredict(_predict(server), timeout=TIMEOUT), request_id=10**6
    )
    assert probs.shape == (BATCH, 10) and np.allclose(probs.sum(1), 1, atol=1e-5)
    server.valid_round()
